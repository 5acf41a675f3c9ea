"""The hint ladders (tinygpt_course/checks/hints.py, hints.toml) and the tutor that shows them
(tinygpt_course/checks/tutor.py), fast and in one process:

- every mistake id a lesson's judge can name (Lesson.all_mistakes, and every `# mistake:` header of
  the lesson's catalogue) has a ladder;
- no rung of any ladder holds a line of a solution or of a hidden test (source/<lesson>/, the
  rule in secret_lines), and the rule is shown to catch a planted solution line;
- the three rungs of a ladder differ;
- the raw errors' mistake ids are decided on the record's data, never on a message's words;
- the tutor gives rung 1 as text, then the next rungs in order; the rungs used are widget state,
  which grading drops (no score can depend on them).
"""
import re

import nbformat
import pytest
import torch

from tinygpt_course.checks import hints, tutor
from tinygpt_course.checks.protocol import RAW_MISTAKES, SHARED_MISTAKES, load_lesson, raw_mistake
from tinygpt_course.testing import catalogue, notebooks

LESSONS = ("head", "multihead", "block", "gpt")
MIN_SECRET = 12    # characters (spaces and comment dropped) below which a line is a word any hint uses


def squeeze(text):
    return re.sub(r"\s+", "", text)


def code_part(line):
    """A line without its trailing comment (a `#` after code, outside any quotes)."""
    quote = None
    for i, ch in enumerate(line):
        if quote:
            quote = None if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch == "#":
            return line[:i]
    return line


def secret_lines(lesson):
    """The lines a rung must never hold, whitespace dropped. The rule: a line between
    `### BEGIN SOLUTION` / `### END SOLUTION` or `### BEGIN HIDDEN TESTS` / `### END HIDDEN TESTS`
    in source/<lesson>/<lesson>.ipynb, as code (its comment dropped; a comment alone is not
    code), that is not trivial (at least MIN_SECRET characters without spaces: `)`, `return out`
    or `x = x` are words any hint may use) and that the learner does not see anyway (a line of
    the released notebook: the stub's `super().__init__()`, the narrative's examples)."""
    nb = nbformat.read(notebooks.source_path(lesson), as_version=4)
    released = nbformat.read(notebooks.release_path(lesson), as_version=4)
    public = {squeeze(code_part(ln)) for c in released.cells for ln in c.source.splitlines()}
    out = set()
    for line in notebooks.marked_lines(nb, "SOLUTION", "HIDDEN TESTS"):
        code = squeeze(code_part(line))
        if len(code) >= MIN_SECRET and code not in public:
            out.add(code)
    return out


def leaks(ladders, secrets):
    """[(mistake id, rung, the secret line it holds)] for every rung that holds a secret line."""
    return [(mistake, rung, secret) for mistake, ladder in ladders.items()
            for rung, text in zip(hints.RUNGS, ladder) for secret in secrets if secret in squeeze(text)]


def named_mistakes(lesson):
    """Every mistake id a verdict of the lesson can name: its judge's and its catalogue's."""
    return set(load_lesson(lesson).all_mistakes) | {a.mistake for a in catalogue.answers(lesson) if a.mistake}


def test_every_mistake_has_a_ladder():
    missing = {lesson: sorted(named_mistakes(lesson) - set(hints.ladders(lesson))) for lesson in LESSONS}
    missing = {lesson: ids for lesson, ids in missing.items() if ids}
    assert not missing, "mistakes without a hint ladder: " + "; ".join(
        f"{lesson} ({len(ids)}): {', '.join(ids)}" for lesson, ids in missing.items())


def test_the_shared_steps_and_raw_errors_have_ladders():
    """The part of the above this module's own hints.toml answers for, whatever the lessons' say."""
    shared = hints.ladders(hints.SHARED)
    assert set(SHARED_MISTAKES) <= set(shared), set(SHARED_MISTAKES) - set(shared)
    assert set(RAW_MISTAKES) <= set(SHARED_MISTAKES)


@pytest.mark.parametrize("lesson", LESSONS)
def test_no_rung_holds_a_line_of_the_solution_or_a_hidden_test(lesson):
    secrets = secret_lines(lesson)
    assert len(secrets) >= 5, secrets       # the rule leaves the lines that matter
    assert not leaks(hints.ladders(lesson), secrets)


def test_a_planted_solution_line_is_caught():
    secrets = secret_lines("multihead")
    nb = nbformat.read(notebooks.source_path("multihead"), as_version=4)
    planted = next(ln for ln in sorted(notebooks.marked_lines(nb, "SOLUTION")) if squeeze(code_part(ln)) in secrets)
    ladders = dict(hints.ladders("multihead"))
    mistake, (idea, where, nudge) = next(iter(ladders.items()))
    ladders[mistake] = (idea, where, nudge + " For example:  " + planted.replace(" ", "  "))
    assert leaks(ladders, secrets) == [(mistake, "nudge", squeeze(code_part(planted)))]
    # and a comment or a trivial line of the solution is not a secret
    assert not any(len(s) < MIN_SECRET for s in secrets)


@pytest.mark.parametrize("lesson", (hints.SHARED,) + LESSONS)
def test_the_rungs_of_a_ladder_differ(lesson):
    for mistake, ladder in hints.ladders(lesson).items():
        assert len({" ".join(r.lower().split()) for r in ladder}) == 3, mistake


# --- the raw errors: decided on the record's data ---------------------------------------------

def test_raw_errors_are_decided_on_data_not_words():
    said = "NameError: name 'n_embd' is not defined"    # the same words, other data
    assert raw_mistake({"error": said, "exception": "NameError", "error_name": "n_embd"}, "") == "undefined_size"
    assert raw_mistake({"error": said, "exception": "NameError", "error_name": "n_embed"}, "") == "undefined_size"
    assert raw_mistake({"error": said, "exception": "NameError", "error_name": "wei"}, "") == "undefined_name"
    assert raw_mistake({"error": said, "exception": "NameError", "error_name": "key",
                        "error_name_is_attribute": True}, "") == "self_forgotten"
    assert raw_mistake({"error": said, "exception": "ValueError", "error_name": None}, "") is None
    assert raw_mistake({"error": said}, "") is None
    shapes = "RuntimeError: mat1 and mat2 shapes cannot be multiplied"
    assert raw_mistake({"error": shapes, "exception": "RuntimeError", "error_line": "w = q @ k"}, "") == "matmul_shapes"
    assert raw_mistake({"error": shapes, "exception": "RuntimeError", "error_line": "w = q.view(B, T, C)"}, "") \
        == "wrong_view"
    assert raw_mistake({"error": shapes, "exception": "RuntimeError", "error_line": "w = self.proj(x)",
                        "error_module": "Linear"}, "") == "layer_input_shape"
    assert raw_mistake({"error": shapes, "exception": "RuntimeError", "error_line": "w = f(x)"}, "") is None
    assert raw_mistake({"error": shapes, "exception": "RuntimeError", "error_line": "w = (q @"}, "") is None
    assert raw_mistake({"init_error": "AttributeError: x", "init_exception": "AttributeError",
                        "init_module_state_missing": True}, "init_") == "missing_super_init"


def test_the_extract_records_what_the_judges_decide_on():
    from tinygpt_course.checks.common import compiled, forward_record

    ns = {"torch": torch, "nn": torch.nn}
    exec(compiled("class M(torch.nn.Module):\n    def __init__(self):\n        super().__init__()\n"
                  "        self.key = torch.nn.Linear(4, 2)\n    def forward(self, x):\n"
                  "        return x @ self.key(x)\n", "<your answer cell>"), ns)
    rec = {}
    forward_record(ns["M"](), torch.zeros(3, 4), rec, "")
    assert rec["exception"] == "RuntimeError" and rec["error_line"] == "return x @ self.key(x)", rec
    assert raw_mistake(rec, "") == "matmul_shapes"


# --- the tutor ------------------------------------------------------------------------------

def test_the_tutor_gives_rung_one_as_text_then_the_next_in_order(capsys, monkeypatch):
    monkeypatch.setattr(tutor, "_used", {})     # a fresh kernel: no check has failed yet
    monkeypatch.setattr(tutor, "_boxes", {})
    lesson = load_lesson("head")
    ladder = hints.ladder("head", "matmul_shapes")
    text = tutor.offer(lesson, "shapes", "matmul_shapes")      # no kernel here: text only
    assert text.startswith(tutor.rung_text(ladder, 1)) and "checks.hint('shapes')" in text
    shown = []
    for _ in range(4):
        tutor.hint(lesson, "shapes")
        shown.append(" ".join(capsys.readouterr().out.split()))
    assert shown[:3] == [" ".join(tutor.rung_text(ladder, n).split()) for n in (1, 2, 3)]
    assert shown[3].startswith("That was the last hint")
    tutor.offer(lesson, "shapes", "undefined_size")             # another mistake: its ladder from the top
    tutor.hint(lesson, "shapes")
    assert hints.ladder("head", "undefined_size")[0].split()[0] in capsys.readouterr().out
    tutor.hint(lesson, "causal")
    assert "has not failed" in capsys.readouterr().out


def test_the_hint_box_keeps_the_rungs_used_and_grading_keeps_them_as_data_only():
    """The box's synced state holds the rungs shown (what JupyterLab saves into the notebook);
    grading's KeepHintsUsed lifts them out as checked data (a forged entry is left out) and
    SanitizeOutputs drops the widget state itself."""
    from tinygpt_course.grading.hints_used import KeepHintsUsed
    from tinygpt_course.grading.sanitize_outputs import SanitizeOutputs

    box = tutor.HintBox.make("head", "shapes", "matmul_shapes")
    box.show(2)
    assert box.tinygpt_hints == {"lesson": "head", "check": "shapes", "mistake": "matmul_shapes", "rungs": [1, 2]}
    assert box.get_state()["tinygpt_hints"]["rungs"] == [1, 2]        # synced: it is in the saved state
    assert 'data-rung="2"' in box.children[1].value and not box.children[0].disabled
    box.show(3)
    assert box.children[0].disabled
    forged = {"state": {"tinygpt_hints": {"lesson": "head", "check": "<img src=x onerror=alert(1)>",
                                          "mistake": "matmul_shapes", "rungs": [1]}}}
    nb = nbformat.v4.new_notebook()
    nb.metadata["widgets"] = {"application/vnd.jupyter.widget-state+json": {
        "state": {box.model_id: {"state": box.get_state()}, "forged": forged}}}
    nb.metadata["tinygpt"] = {"lesson": "head", "hints_used": [{"claimed": "by hand"}]}
    nb, _ = KeepHintsUsed().preprocess(nb, {})
    nb, _ = SanitizeOutputs().preprocess(nb, {})
    assert "widgets" not in nb.metadata
    assert nb.metadata["tinygpt"]["hints_used"] == [
        {"lesson": "head", "check": "shapes", "mistake": "matmul_shapes", "rungs": [1, 2, 3]}]
    box.close()
