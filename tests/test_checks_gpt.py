"""The gpt lesson's checks, fast and in one process.

- the protocol's two halves: every catalogue answer (tests/catalogue_gpt/) is extracted with a
  seed and judged against the solution's record for the same seed, for two seeds: each check
  passes or fails as the answer's expectation says, and each named mistake gets its diagnosis;
- the learner's kernel: set-up, answer, the runner cell (in steps) and the check cells run as
  the notebook runs them; the check cells that raise are exactly the ones the expectation fails
  (this is what nbgrader's kernel scores at grading time);
- the stored data is current: reference.pt is the solution's record for the default seed and
  printout.txt the source notebook's documented printout;
- under grading (NBGRADER_EXECUTION) the training cell does not train.
"""
import contextlib
import io
import os
import re
from pathlib import Path

import nbformat
import pytest
import torch

from conftest import REPO
from tinygpt_course.checks import CheckFailed, notebook
from tinygpt_course.checks.gpt.extract import extract
from tinygpt_course.checks.gpt.judge import LESSON
from tinygpt_course.checks.protocol import Kind

SOURCE_PATH = REPO / "source" / "gpt" / "gpt.ipynb"
SOURCE = nbformat.read(SOURCE_PATH, 4)
CATALOGUE = sorted((Path(__file__).parent / "catalogue_gpt").glob("*.py"))


def parse(path):
    """(expected points per check, why, answer) of a catalogue file."""
    text = path.read_text()
    head = dict(re.findall(r"^# (expect|why): (.*)$", text, re.M))
    expect = {k: float(v) for k, v in (kv.split("=") for kv in head["expect"].split())}
    answer = "\n".join(ln for ln in text.splitlines() if not re.match(r"# (expect|why):", ln))
    return expect, head["why"], answer.strip("\n")


def cell(grade_id):
    return next(c for c in SOURCE.cells if c.metadata.get("nbgrader", {}).get("grade_id") == grade_id)


def setup_sources():
    sources = []
    for c in SOURCE.cells:
        meta = c.metadata.get("nbgrader", {})
        if meta.get("solution"):
            return sources
        if c.cell_type == "code" and not meta.get("grade"):
            sources.append(c.source)
    raise AssertionError("no answer cell")


def solution():
    return re.sub(r"\s*### (BEGIN|END) SOLUTION", "", cell("gpt").source)


def lesson_namespace(answer):
    ns = {"__name__": "__lesson__"}
    with contextlib.redirect_stdout(io.StringIO()):
        for code in setup_sources():
            exec(code, ns)
    try:
        exec(answer, ns)
    except NotImplementedError:
        pass
    return ns


@pytest.fixture(scope="module")
def refs():
    ns = lesson_namespace(solution())
    return {seed: extract(ns, seed) for seed in (LESSON.default_seed, 987654321)}


def test_catalogue_covers_the_named_mistakes():
    assert len(CATALOGUE) >= 20
    whys = " ".join(parse(p)[1] for p in CATALOGUE)
    for mistake in ("final layer norm", "without flattening", "argmax", "never cropped",
                    "positions", "right, written differently"):
        assert mistake in whys, mistake
    for p in CATALOGUE:
        assert set(parse(p)[0]) == set(LESSON.checks), p.stem


@pytest.mark.parametrize("path", CATALOGUE, ids=[p.stem for p in CATALOGUE])
def test_protocol_verdicts_match_the_catalogue(refs, path):
    expect, why, answer = parse(path)
    ns = lesson_namespace(answer)
    for seed, ref in refs.items():
        rec = extract(ns, seed)
        for check_id, points in expect.items():
            v = LESSON.verdict(check_id, rec, ref)
            assert v.passed == (points > 0), f"{path.stem} seed {seed}: {check_id} -> {v} ({why})"
            assert (v.kind is Kind.PASSED) == v.passed


def test_value_checks_depend_on_the_fixed_weights(refs):
    """A record made with another seed than the solution's fails the value checks: they compare numbers."""
    (s1, r1), (s2, r2) = refs.items()
    for check_id in ("forward", "positions", "generate"):
        assert not LESSON.verdict(check_id, r2, r1).passed, check_id


@pytest.mark.parametrize("stem, check_id, kind, words", [
    ("06_no_final_ln", "forward", Kind.WRONG_VALUE, "self.ln_f is never applied"),
    ("07_ce_not_flattened", "loss", Kind.WRONG_SHAPE, "Flatten both: logits.view(256, 27)"),
    ("08_targets_not_flattened", "loss", Kind.WRONG_SHAPE, "flatten the targets"),
    ("09_argmax", "generate", Kind.WRONG_VALUE, "most likely letter (argmax)"),
    ("10_not_cropped", "generate", Kind.WRONG_VALUE, "contexts of up to 15 letters"),
    ("11_positions_fixed", "positions", Kind.FORWARD_ERROR, "torch.arange(T) with T = idx.shape[1]"),
    ("12_positions_offset", "positions", Kind.WRONG_VALUE, "pos_emb was given positions [3, 4, 5, 6, 7]"),
    ("13_no_softmax", "generate", Kind.FORWARD_ERROR, "multinomial got negative numbers"),
    ("14_generator_ignored", "generate", Kind.WRONG_VALUE, "seeded alike gave different letters"),
    ("15_first_position", "generate", Kind.WRONG_VALUE, "logits[:, -1, :]"),
    ("16_blocks_plain_list", "weight_count", Kind.STRUCTURE, "plain Python list"),
    ("17_sum_reduction", "loss", Kind.WRONG_VALUE, "reduction='sum'"),
    ("18_lm_head_no_bias", "weight_count", Kind.STRUCTURE, "no bias"),
    ("19_one_block", "weight_count", Kind.STRUCTURE, "holds 1 blocks"),
    ("20_no_positions", "positions", Kind.WRONG_VALUE, "token embedding + position embedding"),
    ("21_unanswered", "shapes", Kind.UNANSWERED, "still unanswered"),
])
def test_diagnosis_names_the_mistake(refs, stem, check_id, kind, words):
    answer = parse(next(p for p in CATALOGUE if p.stem == stem))[2]
    ref = refs[LESSON.default_seed]
    v = LESSON.verdict(check_id, extract(lesson_namespace(answer), LESSON.default_seed), ref)
    assert not v.passed and v.kind is kind and words in v.message, v


def run_kernel_like(answer, env=None):
    """Set-up, answer, runner, numbers note and every check cell, in one namespace as the
    kernel runs them; returns (the runner's printout text, {check id: raised CheckFailed})."""
    ns = lesson_namespace(answer)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(cell("runner").source, ns)
        exec(cell("numbers_note").source, ns)
    failed = {}
    for check_id in LESSON.checks:
        source = cell(check_id).source
        try:
            with contextlib.redirect_stdout(io.StringIO()):
                exec(source, ns)
            failed[check_id] = False
        except CheckFailed:
            failed[check_id] = True
    return out.getvalue(), failed


@pytest.mark.parametrize("path", CATALOGUE, ids=[p.stem for p in CATALOGUE])
def test_kernel_checks_match_the_catalogue(path):
    expect, why, answer = parse(path)
    printed, failed = run_kernel_like(answer)
    assert failed == {k: v == 0 for k, v in expect.items()}, (why, printed)
    assert "Traceback" not in printed


def test_runner_prints_the_documented_lines():
    printed, failed = run_kernel_like(solution())
    lines = printed.splitlines()
    assert lines[:7] == list(notebook.documented("gpt")), printed
    assert "are the documented ones" in lines[-1]
    assert not any(failed.values())


def test_numbers_note_explains_another_draw_order():
    answer = parse(next(p for p in CATALOGUE if p.stem == "04_right_other_order"))[2]
    printed, failed = run_kernel_like(answer)
    assert "that is fine" in " ".join(printed.split()) and not any(failed.values())


def test_reference_and_printout_are_current():
    stored = notebook.reference("gpt")
    fresh = extract(lesson_namespace(solution()), LESSON.default_seed)
    assert set(stored) == set(fresh)
    for key in fresh:
        a, b = stored[key], fresh[key]
        if torch.is_tensor(a):
            assert torch.equal(a, b), key
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
