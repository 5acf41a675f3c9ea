"""The gpt lesson's checks, fast and in one process (every catalogue answer's verdicts, in
grading's two halves and in the learner's kernel, are tests/test_catalogue_checks.py's).

- the value checks compare numbers: a record made with other weights fails them;
- the numbers note tells a different draw order from a mistake;
- the stored data is current: reference.rec is the solution's record for the default seed and
  printout.txt the source notebook's documented printout;
- under grading (NBGRADER_EXECUTION) the training cell does not train.
"""
import contextlib
import io

import nbformat
import pytest
import torch

from tinygpt_course.checks import notebook
from tinygpt_course.checks.gpt.extract import extract
from tinygpt_course.checks.gpt.judge import LESSON
from tinygpt_course.testing import catalogue, notebooks

SOURCE_PATH = notebooks.source_path("gpt")


def cell(grade_id):
    return notebooks.cell(SOURCE_PATH, grade_id)


def solution():
    return notebooks.solution("gpt")


def lesson_namespace(answer):
    return notebooks.namespace("gpt", answer)


@pytest.fixture(scope="module")
def refs():
    ns = lesson_namespace(solution())
    return {seed: extract(ns, seed) for seed in (LESSON.default_seed, 987654321)}


def test_value_checks_depend_on_the_fixed_weights(refs):
    """A record made with another seed than the solution's fails the value checks: they compare numbers."""
    (s1, r1), (s2, r2) = refs.items()
    for check_id in ("forward", "positions", "generate"):
        assert not LESSON.verdict(check_id, r2, r1).passed, check_id


def run_kernel_like(answer):
    """(what the runner and the numbers note printed, {check id: whether its cell raised})."""
    printed, raised = notebooks.run_checks("gpt", answer)
    return printed, {c: e is not None for c, e in raised.items()}


def test_runner_prints_the_documented_lines():
    printed, failed = run_kernel_like(solution())
    lines = printed.splitlines()
    assert lines[:7] == list(notebook.documented("gpt")), printed
    assert "are the documented ones" in lines[-1]
    assert not any(failed.values())


def test_numbers_note_explains_another_draw_order():
    answer = catalogue.answer("gpt", "04_right_other_order").code
    printed, failed = run_kernel_like(answer)
    text = " ".join(printed.split())
    assert "fine" not in text and not any(failed.values())
    assert "documented: loss before training: 3.431" in text and "judged by `loss`, which runs your class" in text


def test_numbers_note_names_the_check_of_a_wrong_line():
    """A wrong model's differing line is shown beside the documented one with its check's verdict."""
    printed, failed = run_kernel_like(catalogue.answer("gpt", "06_no_final_ln").code)
    text = " ".join(printed.split())
    assert failed["forward"] and "fine" not in text
    assert "judged by `forward`, which fails with fixed starting weights: the output layer gets" in text


def test_validate_runs_every_check():
    """The released notebook's check cells call every check, so Validate finds what grading finds."""
    nb = nbformat.read(notebooks.release_path("gpt"), as_version=4)
    for check_id in LESSON.checks:
        assert f"checks.check('{check_id}', globals())" in notebooks.cell(nb, check_id).source, check_id


def test_reference_and_printout_are_current():
    stored = notebook.reference("gpt")
    fresh = extract(lesson_namespace(solution()), LESSON.default_seed)
    assert set(stored) == set(fresh)
    for key in fresh:
        assert notebooks.same_record(fresh[key], stored[key]), (
            f"{key}: run `python -m tinygpt_course.grading.reference gpt` and commit its reference.rec")
    assert list(notebook.documented("gpt")) == notebook.documented_in(SOURCE_PATH), (
        "printout.txt is stale: python -m tinygpt_course.checks.notebook gpt")


def test_grading_does_not_train(monkeypatch):
    """Under nbgrader (NBGRADER_EXECUTION set in the kernel) the training cell trains nothing and
    makes no optimiser (its first use imports torch._dynamo: seconds per submission); the plot
    cell still runs."""
    ns = lesson_namespace(solution())
    with contextlib.redirect_stdout(io.StringIO()):
        exec(cell("runner").source, ns)
    monkeypatch.setenv("NBGRADER_EXECUTION", "autograde")
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        exec(cell("training").source, ns)
        exec(cell("loss_plot").source.replace("plt.show()", "plt.close(fig)"), ns)
    assert ns["STEPS"] == 0 and ns["train_losses"] == [] and ns["optimizer"] is None
    assert len(ns["val_losses"]) == 1
    monkeypatch.delenv("NBGRADER_EXECUTION")
    assert "STEPS = 6000" in cell("training").source
