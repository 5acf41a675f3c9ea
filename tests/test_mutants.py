"""Mistakes no catalogue has, found by mutation (tinygpt_course/testing/mutants.py): every small
change of each lesson's solution that changes its numbers loses points, and none is named by a
mistake it cannot have made. docs/mutation-report.md is what this run gives.
"""
import pytest

from tinygpt_course.checks.protocol import Verdict, load_lesson
from tinygpt_course.testing import mutants, notebooks
from tinygpt_course.testing.course import REPO

REPORT = REPO / "docs" / "mutation-report.md"


@pytest.fixture(scope="module")
def results():
    return {lesson: mutants.run(lesson, progress=False) for lesson in mutants.LESSONS}


def test_every_lesson_has_mutants_of_every_kind_of_change():
    for lesson in mutants.LESSONS:
        found = mutants.mutants(notebooks.solution(lesson))
        assert len(found) >= 30, (lesson, len(found))
        kinds = {m.what.split(": ", 1)[1].split(" ")[0] for m in found}
        assert {"statement", "call", "result"} <= kinds, (lesson, kinds)


@pytest.mark.parametrize("lesson", mutants.LESSONS)
def test_no_mutant_survives_and_none_is_misnamed(results, lesson):
    c = mutants.counts(results[lesson])
    assert c["killed"] > 0 and c["named"] > c["generic"] / 2, c
    survivors = [f"line {r.mutant.where}: {r.mutant.what}" for r in results[lesson] if r.fate == "survived"]
    assert not survivors, survivors
    misnamed = [(r.mutant.what, r.named & mutants.IMPOSSIBLE) for r in results[lesson] if r.named & mutants.IMPOSSIBLE]
    assert not misnamed, misnamed
    assert all(r.points < sum(notebooks.points(lesson).values()) for r in results[lesson] if r.fate == "killed")


def test_the_report_is_what_the_run_gives(results):
    assert REPORT.read_text() == mutants.report(results), \
        "docs/mutation-report.md is stale: python -m tinygpt_course.testing.mutants --out docs/mutation-report.md"


def test_a_judge_that_passes_everything_lets_mutants_survive(monkeypatch):
    """The survivor count can fail: with the head's judges switched off (every check passes),
    the mutants that change the numbers survive, and the equivalent ones stay equivalent."""
    lesson = load_lesson("head")
    monkeypatch.setattr(type(lesson), "judge", lambda self, check_id, rec, ref: Verdict.ok("off"))
    c = mutants.counts(mutants.run("head", progress=False))
    assert c["killed"] == 0 and c["survived"] > 100, c
