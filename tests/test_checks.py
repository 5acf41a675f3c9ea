"""The multihead checks in the learner's own kernel (what the runner, the numbers note and the
visible checks say while they work), run here in one process, fast: the runner never lets an
error out and says what went wrong, the numbers note speaks about the printed lines only, and
the defences (runner failure, a printed line that differs, a name that is missing, a step that
never ends) each fail a check. Every catalogue answer's verdicts and diagnoses, in the kernel and
in grading, are tests/test_catalogue_checks.py's."""
import contextlib
import io

import pytest
import torch

from tinygpt_course.checks import WIDTH, CheckFailed, notebook
from tinygpt_course.testing import catalogue, notebooks

SOURCE = notebooks.source_path("multihead")
RUNNER = ["07_wrong_dim", "08_summed", "10_no_proj", "13_head_run_twice", "17_unanswered", "19_exception"]


def cell(grade_id):
    return notebooks.cell(SOURCE, grade_id)


def answer_of(stem):
    return catalogue.answer("multihead", stem).code


def lesson_namespace(answer):
    return notebooks.namespace("multihead", answer)


def run_cell(grade_id, ns):
    """A cell of the notebook run in ns; returns what it printed (an exception propagates)."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(cell(grade_id).source, ns)
    return out.getvalue()


def check(ns, name):
    """(passed, text) of a visible check cell's call, as the notebook makes it."""
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out):
            ns["checks"].check(name, ns)
        return True, out.getvalue()
    except CheckFailed as failed:
        return False, str(failed)


@pytest.mark.parametrize("stem", RUNNER)
def test_runner_says_what_went_wrong_and_goes_on(stem):
    answer = catalogue.answer("multihead", stem)
    ns = lesson_namespace(answer.code)
    printed = run_cell("runner", ns)
    assert "\u2717" in printed and answer.runner in " ".join(printed.split()), printed
    assert all(len(line) <= WIDTH for line in printed.splitlines() if line.startswith("\u2717"))
    assert "weights to learn" in printed or "unanswered" in printed or "not today" in printed
    note = run_cell("numbers_note", ns)
    assert "could not print" in note, note
    assert "\u2713 your two weight lines" not in note or "head 1 at position 7 takes" in printed


def test_right_answer_prints_the_documented_lines_and_the_note_says_so():
    ns = lesson_namespace(answer_of("01_right_comprehension"))
    printed = run_cell("runner", ns).splitlines()
    assert printed == list(notebook.documented("multihead"))
    assert run_cell("numbers_note", ns).strip() == "\u2713 your 9 lines are the documented ones."


def test_numbers_note_explains_a_different_draw_order():
    ns = lesson_namespace(answer_of("04_right_proj_first"))
    printed = run_cell("runner", ns)
    assert "head 1 at position 7 takes" in printed
    note = run_cell("numbers_note", ns)
    lines = note.splitlines()
    assert "fine" not in note and "2 printed lines differ from the documented printout:" in note
    for which in ("head 1", "head 2"):    # yours and the documented line side by side, and the check
        yours = next(i for i, ln in enumerate(lines) if ln.startswith(f"  yours:      {which} at position 7"))
        assert lines[yours + 1].startswith(f"  documented: {which} at position 7")
        assert lines[yours + 1][len("  documented: "):] in notebook.documented("multihead")
    assert " ".join(note.split()).count(
        "judged by `attention_weights`, which runs your class with fixed starting weights and passes") == 2


def test_numbers_note_speaks_only_about_printed_lines():
    ns = lesson_namespace(answer_of("13_head_run_twice"))   # the weight lines are never printed
    run_cell("runner", ns)
    note = " ".join(run_cell("numbers_note", ns).split())
    assert "weight lines are the documented ones" not in note and "could not print 2 of its 9 lines" in note
    ns = lesson_namespace(answer_of("17_unanswered"))       # nothing but h and window 0
    run_cell("runner", ns)
    note = " ".join(run_cell("numbers_note", ns).split())
    assert "could not print 7 of its 9 lines" in note and "\u2713" not in note


def test_a_runner_that_failed_fails_the_visible_check():
    """Defence: the class passes with fixed weights, but the runner could not print the lines."""
    ns = lesson_namespace(answer_of("01_right_comprehension"))
    ns["h"] = torch.zeros(32, 8, 5)                           # the runner's own input is broken
    run_cell("runner", ns)
    passed, text = check(ns, "shapes")
    assert not passed and "could not print these lines" in text
    assert check(ns, "weight_count")[0]                      # its lines were printed fine
    run_cell("setup", ns), exec(answer_of("01_right_comprehension"), ns), run_cell("runner", ns)
    assert check(ns, "shapes")[0]                            # printed again, fine again


def test_a_printed_line_that_differs_fails_the_visible_check():
    """Defence: a line the runner printed is not the documented one (here window 0)."""
    ns = lesson_namespace(answer_of("01_right_comprehension"))
    ns["decode"] = lambda ids: "another window"
    run_cell("runner", ns)
    passed, text = check(ns, "attention_weights")
    assert not passed and "the printout above shows `window 0: 'another window'`" in text


def test_a_stale_printout_does_not_count():
    """After the learner fixes their class, the old printout (of the old class) is not held against it."""
    ns = lesson_namespace(answer_of("13_head_run_twice"))
    run_cell("runner", ns)
    exec(answer_of("01_right_comprehension"), ns)
    assert all(check(ns, name)[0] for name in ns["checks"].CHECKS)


def test_a_missing_class_names_the_syntax_error():
    ns = lesson_namespace("")
    ns.pop("MultiHead", None)
    ns["In"] = ["", answer_of("18_syntax_error")]             # IPython's input history
    passed, text = check(ns, "shapes")
    assert not passed and "syntax error on its line 4" in text
    ns["In"] = []
    assert "has not run to its end" in check(ns, "shapes")[1]
    printed = " ".join(run_cell("runner", ns).split())
    assert "MultiHead is not defined: the cell that defines it has not run to its end" in printed


def test_an_endless_loop_is_stopped_and_named(monkeypatch):
    monkeypatch.setattr(notebook, "STEP_SECONDS", 0.25)
    monkeypatch.setattr(notebook, "_too_slow", [])
    ns = lesson_namespace(answer_of("20_endless_loop"))
    printed = " ".join(run_cell("runner", ns).split())
    assert "did not finish within 0.25 seconds" in printed and "weights to learn: 4128" in printed
    passed, text = check(ns, "shapes")
    assert not passed and "did not finish within 0.25 seconds" in " ".join(text.split())


def test_printout_data_is_the_documented_block():
    assert list(notebook.documented("multihead")) == notebook.documented_in(SOURCE), (
        "run `python -m tinygpt_course.checks.notebook multihead` and commit printout.txt")


def test_a_step_that_fails_never_prints_an_old_value():
    """Run All again in the same kernel: a value from the last run is not printed as new."""
    ns = lesson_namespace(answer_of("07_wrong_dim"))
    ns["In"] = ["", cell("runner").source]                   # IPython: the running cell is In[-1]
    run_cell("runner", ns)
    exec(answer_of("13_head_run_twice"), ns)
    printed = run_cell("runner", ns)
    assert "kept no attention weights" in printed and "head 1 at position 7 takes" not in printed, printed
    assert "printout" in ns and "weights" not in ns
