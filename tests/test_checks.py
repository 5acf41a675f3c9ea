"""The checks in the learner's own kernel (what the visible checks say while they work): every
plain catalogue answer passes and fails exactly the checks its expectation names, and a
failing check names the mistake."""
import contextlib
import io

import nbformat
import pytest

from conftest import REPO
from test_catalogue import CATALOGUE, parse
from tinygpt_course.checks import CheckFailed
from tinygpt_course.grading.lesson import trusted_sources

SOURCE = nbformat.read(REPO / "source" / "multihead" / "multihead.ipynb", 4)
# answers that run as plain Python in one process (no crash, no IPython, no notebook surgery)
PLAIN = [p for p in CATALOGUE if parse(p)[2] is None and not parse(p)[1].startswith(("crash", "tampering"))]


def lesson_namespace(answer):
    ns = {}
    with contextlib.redirect_stdout(io.StringIO()):
        for code in trusted_sources(SOURCE):
            exec(code, ns)
    try:
        exec(answer, ns)
    except NotImplementedError:
        pass
    return ns


@pytest.mark.parametrize("path", PLAIN, ids=[p.stem for p in PLAIN])
def test_in_kernel_verdicts_match_the_catalogue(path):
    expect, why, _, answer = parse(path)
    ns = lesson_namespace(answer)
    for name, points in expect.items():
        try:
            with contextlib.redirect_stdout(io.StringIO()):
                ns["checks"].check(name, ns["MultiHead"], ns["Head"], ns["embed"], ns["xb"])
            passed = True
        except CheckFailed:
            passed = False
        assert passed == (points > 0), f"{path.stem}: check {name} {'passed' if passed else 'failed'} ({why})"


@pytest.mark.parametrize("stem, check, words", [
    ("06_plain_list", "weight_count", "1056 weights to learn, not 4128"),
    ("11_proj_no_bias", "weight_count", "not 4096"),
    ("09_head_size_32", "shapes", "Use Head(16)"),
    ("10_no_proj", "shapes", "no self.proj"),
    ("13_head_run_twice", "out_is_proj", "ran the heads [1, 1]"),
    ("15_relu_after", "out_is_proj", "extra ReLU after"),
    ("16_tanh_before", "out_is_proj", "extra tanh before"),
    ("17_unanswered", "shapes", "still unanswered"),
    ("07_wrong_dim", "shapes", "wrong dimension")])
def test_diagnosis_names_the_mistake(stem, check, words):
    answer = parse(next(p for p in CATALOGUE if p.stem == stem))[3]
    ns = lesson_namespace(answer)
    with pytest.raises(CheckFailed) as failed:
        ns["checks"].check(check, ns["MultiHead"], ns["Head"], ns["embed"], ns["xb"])
    assert words in str(failed.value)


def test_numbers_note_explains_a_different_draw_order():
    answer = parse(next(p for p in CATALOGUE if p.stem == "04_right_proj_first"))[3]
    ns = lesson_namespace(answer)
    import torch
    torch.manual_seed(42)
    mh = ns["MultiHead"]()
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        ns["checks"].explain_numbers(mh, ns["MultiHead"], ns["Head"], ns["embed"], ns["xb"], runner_seed=42)
    assert "differ from the documented ones, and that is fine" in out.getvalue()
