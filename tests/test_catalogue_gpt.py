"""The gpt lesson graded by the real `nbgrader autograde` with the course's configuration, in one
class run: the source notebook (the solution) gets full marks, the released notebook zero, and
every answer in tests/catalogue/gpt/ its expected score per check. Then the feedback names the
mistakes and never shows a hidden line, and the learner's kernel did not train."""
import html
import re

import nbformat
import pytest

from tinygpt_course.testing import catalogue
from tinygpt_course.testing.course import make_course, nbgrader, scores, submit
from tinygpt_course.testing.notebooks import cell, marked_lines, points, source_path, with_answer

CATALOGUE = catalogue.answers("gpt")

TEST_CONFIG = "c.RobustExecute.timeout = 30\nc.IndependentChecks.timeout = 60\n"
POINTS = points("gpt")


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    course = make_course(tmp_path_factory.mktemp("catalogue_gpt"), assignments=("gpt",), extra_config=TEST_CONFIG)
    release = course / "release" / "gpt" / "gpt.ipynb"
    for student, nb in (("reference", source_path("gpt")), ("blank", release)):
        submit(course, student, "gpt", nb)
    for a in CATALOGUE:
        submit(course, a.name, "gpt", with_answer(release, a.code))
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


@pytest.mark.parametrize("answer", CATALOGUE, ids=[a.name for a in CATALOGUE])
def test_expected_score(graded, answer):
    assert scores(graded[0], "gpt", answer.name) == answer.expect, answer.why


def test_grading_did_not_train(graded):
    """The autograded notebook's training cell trained nothing (tqdm's bar over 0 steps)."""
    nb = nbformat.read(graded[0] / "autograded" / "reference" / "gpt" / "gpt.ipynb", 4)
    training = cell(nb, "training")
    text = "".join(str(o.get("data", {}).get("text/plain", "")) + o.get("text", "") for o in training.outputs)
    assert "training: 0it" in text and "/6000" not in text, text[-500:]


@pytest.mark.parametrize("student, words", [
    ("06_no_final_ln", "self.ln_f is never applied"), ("07_ce_not_flattened", "Flatten both"),
    ("09_argmax", "(argmax)"), ("10_not_cropped", "Crop the context"),
    ("12_positions_offset", "positions must follow the sequence"), ("blank", "still unanswered")])
def test_feedback_names_the_mistake_and_hides_the_tests(graded, student, words):
    page = html.unescape((graded[0] / "feedback" / student / "gpt" / "gpt.html").read_text())
    text = " ".join(re.sub(r"<[^>]+>", " ", page).split())
    assert words in text
    hidden = marked_lines(nbformat.read(source_path("gpt"), 4), "HIDDEN TESTS")
    assert hidden and not [ln for ln in hidden if ln in re.sub(r"<[^>]+>", "", page)]


def test_the_class_report_counts_each_mistake(graded):
    """tinygpt-class-report on this very class (graded once, by the fixture): the solution is
    listed under no mistake, the blank notebook under `unanswered`, each catalogue answer under
    exactly the mistakes the lesson's judge names for it (run here as plain Python), and each
    mistake's count is its learners."""
    from tinygpt_course.report import write_report
    from tinygpt_course.testing import report
    page = open(write_report(graded[0], "gpt", progress=False), encoding="utf-8").read()
    who, counts = report.listed(page)
    got = report.by_learner(who)
    wants = {"reference": set(), "blank": {"unanswered"}, **{a.name: report.expected_mistakes(a) for a in CATALOGUE}}
    assert {name: got.get(name, set()) for name in wants} == wants
    assert counts == {m: sum(m in want for want in wants.values()) for m in who}
    assert "<code>reference</code>" not in report.section(page, "Flagged and ungraded submissions")
