"""Tests of the tests: every answer in tests/catalogue/ graded by the real `nbgrader autograde`
with the course's configuration, in one class run, against its expected score per check."""
import html
import json
import re
from pathlib import Path

import nbformat
import pytest

from conftest import grade_id, make_course, nbgrader, scores, with_answer

CATALOGUE = sorted((Path(__file__).parent / "catalogue").glob("*.py"))
TEST_CONFIG = "c.RobustExecute.timeout = 20\nc.IndependentChecks.timeout = 40\n"


def parse(path):
    text = path.read_text()
    head = dict(re.findall(r"^# (expect|why|notebook): (.*)$", text, re.M))
    expect = {k: float(v) for k, v in (kv.split("=") for kv in head["expect"].split())}
    answer = "\n".join(ln for ln in text.splitlines() if not re.match(r"# (expect|why|notebook):", ln))
    return expect, head["why"], head.get("notebook"), answer.strip("\n")


def submit(course, student, answer, transform):
    folder = course / "submitted" / student / "multihead"
    folder.mkdir(parents=True)
    nb = with_answer(course / "release" / "multihead" / "multihead.ipynb", answer)
    tests = [c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade") and grade_id(c) != "multihead"]
    name = "multihead.ipynb"
    if transform == "invalid-json":
        (folder / name).write_text(nbformat.writes(nb)[:-200])
        return
    if transform == "rename":
        name = "multihead-mine.ipynb"
    elif transform == "delete-tests":
        nb.cells = [c for c in nb.cells if c not in tests]
    elif transform == "duplicate-tests":
        nb.cells = nb.cells + [nbformat.from_dict(json.loads(json.dumps(c))) for c in tests]
    elif transform == "markdown-answer":
        cell = next(c for c in nb.cells if grade_id(c) == "multihead")
        cell.cell_type = "markdown"
        cell.pop("outputs"), cell.pop("execution_count")
    else:
        assert transform is None, f"unknown notebook transform {transform}"
    nbformat.write(nb, folder / name)


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    course = make_course(tmp_path_factory.mktemp("catalogue"), extra_config=TEST_CONFIG)
    for path in CATALOGUE:
        _, _, transform, answer = parse(path)
        submit(course, path.stem, answer, transform)
    run = nbgrader(course, "autograde", "multihead", "--create", check=False)
    feedback = nbgrader(course, "generate_feedback", "multihead", check=False)
    return course, run, feedback


def test_catalogue_is_large_enough():
    assert len(CATALOGUE) >= 25
    kinds = [parse(p)[1].split(":")[0] for p in CATALOGUE]
    assert any(k.startswith("right") for k in kinds) and any(k.startswith("tampering") for k in kinds)


def test_class_run_finishes(graded):
    course, run, feedback = graded
    assert run.returncode == 0, run.stderr[-3000:]
    assert feedback.returncode == 0, feedback.stderr[-3000:]
    for path in CATALOGUE:   # every learner has an autograded copy and feedback
        assert (course / "autograded" / path.stem / "multihead" / "multihead.ipynb").exists(), path.stem
        assert (course / "feedback" / path.stem / "multihead" / "multihead.html").exists(), path.stem


@pytest.mark.parametrize("path", CATALOGUE, ids=[p.stem for p in CATALOGUE])
def test_expected_score(graded, path):
    course = graded[0]
    expect, why, _, _ = parse(path)
    assert scores(course, "multihead", path.stem) == expect, why


def test_tampering_scores_below_full_and_is_flagged(graded):
    from nbgrader.api import Gradebook
    course = graded[0]
    with Gradebook(f"sqlite:///{course}/gradebook.db") as gb:
        for path in CATALOGUE:
            if parse(path)[1].startswith("tampering"):
                sub = gb.find_submission("multihead", path.stem)
                assert sub.score < sub.max_score, path.stem
        flagged = gb.find_comment("multihead", "multihead", "multihead", "23_tamper_allclose")
        assert flagged.auto_comment and "FLAGGED" in flagged.auto_comment
        right = gb.find_comment("multihead", "multihead", "multihead", "01_right_comprehension")
        assert not (right.auto_comment or "").startswith("FLAGGED")


def hidden_lines():
    src = nbformat.read(Path(__file__).parents[1] / "source/multihead/multihead.ipynb", as_version=4)
    lines = set()
    for cell in src.cells:
        for block in re.findall(r"### BEGIN HIDDEN TESTS\n(.*?)### END HIDDEN TESTS", cell.source, re.S):
            lines |= {ln.strip() for ln in block.splitlines() if ln.strip()}
    assert lines
    return lines


def test_feedback_never_shows_a_hidden_line(graded):
    course = graded[0]
    lines = hidden_lines()
    for path in CATALOGUE:
        page = html.unescape(re.sub(r"<[^>]+>", "", (course / "feedback" / path.stem / "multihead" / "multihead.html").read_text()))
        leaked = [ln for ln in lines if ln in page]
        assert not leaked, (path.stem, leaked)
        assert "BEGIN HIDDEN TESTS" not in page


@pytest.mark.parametrize("student, diagnosis", [
    ("06_plain_list", "nn.ModuleList"), ("08_summed", "torch.cat(..., dim=-1)"),
    ("12_same_head_twice", "same head"), ("14_wrong_order", "wrong order"),
    ("20_endless_loop", "s limit"), ("21_os_exit", "kernel died"),
    ("23_tamper_allclose", "re-run on its own"), ("28_invalid_json", "could not be read")])
def test_feedback_names_the_mistake(graded, student, diagnosis):
    page = html.unescape((graded[0] / "feedback" / student / "multihead" / "multihead.html").read_text())
    assert diagnosis in page
