"""The head and block checks, fast and in one process (every catalogue answer's verdicts, in
grading's two halves and in the learner's kernel, are tests/test_catalogue_checks.py's).

A structural slip costs every check and a layer merely hidden from PyTorch only the count; the
count check counts; the judge decides on the record's raw values, never on what it says about
itself, and under the weights of the seed given; the stored reference.rec is the solution's
record; and no judge imports learner-side code or holds a line of the solution.
"""
import importlib
import re

import pytest

from tinygpt_course.checks.notebook import reference
from tinygpt_course.checks.protocol import Kind, load_lesson
from tinygpt_course.testing import catalogue, notebooks
from tinygpt_course.testing.course import REPO

LESSONS = ("head", "block")
SLIPS = [a for lesson in LESSONS for a in catalogue.answers(lesson)
         if any(f.kind in (Kind.STRUCTURE, Kind.UNREGISTERED) for f in a.fails)]


def record(lesson, answer, seed):
    """The lesson's extract of answer (after the set-up cells) with the fixed weights of seed."""
    extract = importlib.import_module(load_lesson(lesson).extract_module).extract
    return extract(notebooks.namespace(lesson, answer), seed)


@pytest.mark.parametrize("lesson", LESSONS)
def test_stored_reference_is_the_solutions_record(lesson):
    """Compared within the judges' tolerance (another CPU adds float32 in another order), yet a
    record of other weights, or of a solution off by one part in ten thousand, is not the same."""
    fresh = record(lesson, notebooks.solution(lesson), load_lesson(lesson).default_seed)
    assert notebooks.same_record(fresh, reference(lesson)), (
        f"run `python -m tinygpt_course.grading.reference {lesson}` and commit its reference.rec")
    other = record(lesson, notebooks.solution(lesson), 5)
    assert not notebooks.same_record(other, reference(lesson))
    nudged = dict(fresh, out=fresh["out"] * (1 + 1e-4))
    assert not notebooks.same_record(nudged, reference(lesson))


@pytest.mark.parametrize("answer", SLIPS, ids=[f"{a.lesson}-{a.name}" for a in SLIPS])
def test_a_structural_slip_fails_every_check_and_unregistered_only_the_count(answer):
    """As in the multihead lesson: layers stored or sized otherwise cost every check; a layer or
    mask merely hidden from PyTorch, whose numbers are right, costs the count alone."""
    lost = {c for c, points in answer.expect.items() if points == 0}
    hidden = any(f.kind is Kind.UNREGISTERED for f in answer.fails)
    assert lost == ({"weight_count"} if hidden else set(answer.expect)), answer.name


@pytest.mark.parametrize("lesson", LESSONS)
def test_weight_count_fails_for_a_wrong_count(lesson):
    """The count check compares counts itself: one weight too many or too few fails it."""
    lesson_ = load_lesson(lesson)
    ref = record(lesson, notebooks.solution(lesson), 5)
    assert lesson_.verdict("weight_count", ref, ref).passed
    for extra in ([["extra", [1]]], []):
        rec = dict(ref, structure=dict(ref["structure"], params=ref["structure"]["params"][:-1] + extra))
        v = lesson_.verdict("weight_count", rec, ref)
        assert not v.passed and v.kind is Kind.STRUCTURE, v


@pytest.mark.parametrize("lesson", LESSONS)
def test_judge_decides_on_the_record_not_on_what_it_says_about_itself(lesson):
    """A record that claims things (a seed, a verdict) changes nothing; one that is not a record
    or lacks its parts is no result, never a crash nor a pass."""
    lesson_ = load_lesson(lesson)
    ref = record(lesson, notebooks.solution(lesson), 11)
    wrong = record(lesson, notebooks.blank(lesson), 11)
    for name in lesson_.checks:
        assert not lesson_.verdict(name, dict(wrong, seed=11, passed=True, verdict="passed"), ref).passed
        assert lesson_.verdict(name, "not a record", ref).kind is Kind.NO_RESULT
        assert lesson_.verdict(name, {"missing_answer": True}, ref).kind is Kind.NO_RESULT


@pytest.mark.parametrize("lesson", LESSONS)
def test_checks_follow_another_seed(lesson):
    """The value checks judge under the weights of the seed given: the learner's record at one
    seed against the solution's at another fails, at the same seed it passes."""
    lesson_ = load_lesson(lesson)
    value_check = {"head": "attention_weights", "block": "layer_norms"}[lesson]
    a, b = record(lesson, notebooks.solution(lesson), 1), record(lesson, notebooks.solution(lesson), 2)
    assert lesson_.verdict(value_check, a, a).passed
    assert not lesson_.verdict(value_check, a, b).passed


@pytest.mark.parametrize("lesson", ["head", "multihead", "block", "gpt"])
def test_judges_import_no_learner_side_module(lesson):
    """Grading imports judges only: a judge that imported an extract would bring learner-side
    code into the trusted process."""
    judge = (REPO / "tinygpt_course" / "checks" / lesson / "judge.py").read_text()
    assert not re.search(r"^\s*(from|import)\s+\S*extract", judge, re.M), lesson


@pytest.mark.parametrize("lesson", LESSONS)
def test_judges_hold_no_line_of_the_solution(lesson):
    """The head and block judges derive every expected number from the solution's record, and
    quote none of its lines (multihead's and gpt's messages quote one line each, as a hint)."""
    judge = (REPO / "tinygpt_course" / "checks" / lesson / "judge.py").read_text()
    for line in notebooks.solution(lesson).splitlines():
        line = line.split("#")[0].strip()
        if len(line) > 20:
            assert line not in judge, (lesson, line)
