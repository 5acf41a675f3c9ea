"""The gpt lesson graded by the real `nbgrader autograde` with the course's configuration, in one
class run: the source notebook (the solution) gets full marks, the released notebook zero, and
every answer in tests/catalogue_gpt/ its expected score per check. Then the feedback names the
mistakes and never shows a hidden line, and the learner's kernel did not train."""
import html
import re
import shutil

import nbformat
import pytest

from conftest import REPO, make_course, nbgrader, scores, with_answer
from test_checks_gpt import CATALOGUE, parse

TEST_CONFIG = "c.RobustExecute.timeout = 30\nc.IndependentChecks.timeout = 60\n"
POINTS = {"shapes": 1, "weight_count": 1, "positions": 1, "forward": 2, "loss": 2, "generate": 2}


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    course = make_course(tmp_path_factory.mktemp("catalogue_gpt"), assignments=("gpt",), extra_config=TEST_CONFIG)
    release = course / "release" / "gpt" / "gpt.ipynb"
    for student, source in (("reference", REPO / "source" / "gpt" / "gpt.ipynb"), ("blank", release)):
        (course / "submitted" / student / "gpt").mkdir(parents=True)
        shutil.copy(source, course / "submitted" / student / "gpt" / "gpt.ipynb")
    for path in CATALOGUE:
        folder = course / "submitted" / path.stem / "gpt"
        folder.mkdir(parents=True)
        nbformat.write(with_answer(release, parse(path)[2], grade="gpt"), folder / "gpt.ipynb")
    run = nbgrader(course, "autograde", "gpt", "--create", check=False)
    feedback = nbgrader(course, "generate_feedback", "gpt", check=False)
    return course, run, feedback


def test_class_run_finishes(graded):
    course, run, feedback = graded
    assert run.returncode == 0, run.stderr[-3000:]
    assert feedback.returncode == 0, feedback.stderr[-3000:]


def test_reference_full_marks_blank_zero(graded):
    course = graded[0]
    assert scores(course, "gpt", "reference") == POINTS
    assert scores(course, "gpt", "blank") == {k: 0 for k in POINTS}


@pytest.mark.parametrize("path", CATALOGUE, ids=[p.stem for p in CATALOGUE])
def test_expected_score(graded, path):
    expect, why, _ = parse(path)
    assert scores(graded[0], "gpt", path.stem) == expect, why


def test_grading_did_not_train(graded):
    """The autograded notebook's training cell trained nothing (tqdm's bar over 0 steps)."""
    nb = nbformat.read(graded[0] / "autograded" / "reference" / "gpt" / "gpt.ipynb", 4)
    training = next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == "training")
    text = "".join(str(o.get("data", {}).get("text/plain", "")) + o.get("text", "") for o in training.outputs)
    assert "training: 0it" in text and "/6000" not in text, text[-500:]


def hidden_lines():
    src = nbformat.read(REPO / "source" / "gpt" / "gpt.ipynb", 4)
    lines = set()
    for cell in src.cells:
        for block in re.findall(r"### BEGIN HIDDEN TESTS\n(.*?)### END HIDDEN TESTS", cell.source, re.S):
            lines |= {ln.strip() for ln in block.splitlines() if ln.strip()}
    assert lines
    return lines


@pytest.mark.parametrize("student, words", [
    ("06_no_final_ln", "self.ln_f is never applied"), ("07_ce_not_flattened", "Flatten both"),
    ("09_argmax", "(argmax)"), ("10_not_cropped", "Crop the context"),
    ("12_positions_offset", "positions must follow the sequence"), ("blank", "still unanswered")])
def test_feedback_names_the_mistake_and_hides_the_tests(graded, student, words):
    page = html.unescape((graded[0] / "feedback" / student / "gpt" / "gpt.html").read_text())
    text = " ".join(re.sub(r"<[^>]+>", " ", page).split())
    assert words in text
    assert not [ln for ln in hidden_lines() if ln in re.sub(r"<[^>]+>", "", page)]
