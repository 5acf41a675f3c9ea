"""Every lesson's catalogue (tests/catalogue/<lesson>/) through the lesson's checks, in one
process, fast. For each plain answer (a right answer or a mistake, run as plain Python):

- grading's two halves: the answer's record, made by the lesson's extract with a seed of its
  own (not the notebook's), judged against the record the same extract makes of the solution
  with that seed: a check passes exactly when the answer's expectation gives it points, and each
  `# fails:` line's check fails with its kind and its words;
- the learner's kernel (the notebook's seed, judged against the stored reference.rec): set-up,
  answer, the runner, the numbers note and every check cell, run as the notebook runs them:
  exactly the checks the expectation fails raise CheckFailed (what nbgrader's kernel scores),
  each `# fails:` line's words are in it, shown as one short paragraph.

And the catalogues themselves: every answer expects points for every check of its lesson, no
more than the notebook gives, full points for a right answer; every check is lost by a mistake.
"""
import re

import pytest

from tinygpt_course.checks import WIDTH, hints
from tinygpt_course.checks.protocol import MISTAKE_ID, SHARED_MISTAKES, Kind, load_lesson
from tinygpt_course.testing import catalogue, notebooks

LESSONS = catalogue.lessons()
ANSWERS = [a for lesson in LESSONS for a in catalogue.answers(lesson)]
PLAIN = [a for a in ANSWERS if a.plain]
SEED = 987654321    # not the notebook's: grading draws its own


def ids(answers):
    return [f"{a.lesson}-{a.name}" for a in answers]


record, solution_record = notebooks.record, notebooks.solution_record


@pytest.mark.parametrize("answer", PLAIN, ids=ids(PLAIN))
def test_grading_verdicts_match_the_catalogue(answer):
    lesson, rec = load_lesson(answer.lesson), record(answer.lesson, answer.code, SEED)
    verdicts = {c: lesson.verdict(c, rec, solution_record(answer.lesson, SEED)) for c in answer.expect}
    for check_id, points in answer.expect.items():
        v = verdicts[check_id]
        assert v.passed == (points > 0), f"{check_id} -> {v} ({answer.why})"
        assert (v.kind is Kind.PASSED) == v.passed, v
    for fails in answer.fails:
        v = verdicts[fails.check]
        assert v.kind is fails.kind and fails.words in v.message, (fails, v)
        assert v.mistake == answer.mistake, (fails, v)     # the cause, by its stable id
    if answer.mistake and not answer.fails:
        assert answer.mistake in {v.mistake for v in verdicts.values()}, (answer.mistake, verdicts)
    for v in verdicts.values():
        assert (v.mistake is None) == v.passed and (v.passed or v.mistake in lesson.all_mistakes), v


@pytest.mark.parametrize("answer", PLAIN, ids=ids(PLAIN))
def test_kernel_checks_match_the_catalogue(answer):
    printed, raised = notebooks.run_checks(answer.lesson, answer.code)
    assert {c: raised[c] is not None for c in answer.expect} == {c: p == 0 for c, p in answer.expect.items()}, \
        (answer.why, printed, {c: str(e) for c, e in raised.items() if e})
    assert "Traceback" not in printed, printed
    for check_id, failed in raised.items():    # a mistake said in full once, then pointed back to
        if failed is not None and failed.repeat_of:
            assert raised[failed.repeat_of].repeat_of is None and "the same mistake as the check" in str(failed)
            assert list(raised).index(failed.repeat_of) < list(raised).index(check_id), (check_id, str(failed))
    for fails in answer.fails:
        failed = raised[fails.check]
        said = raised[failed.repeat_of] if failed.repeat_of else failed
        assert fails.words in " ".join(str(said).split()), (fails, str(said))
        shown = failed._render_traceback_()    # what IPython shows (and Validate quotes)
        assert all(len(line) <= WIDTH for line in shown), shown
        told = "Check failed: " + str(failed) + (" " + failed.hint if failed.hint else "")
        assert " ".join(" ".join(shown).split()) == " ".join(told.split())
        assert (failed.hint is None) == (failed.repeat_of is not None or hints.ladder(answer.lesson, answer.mistake) is None)
        assert not any(re.search(r"File |\.py|site-packages|Traceback", line) for line in shown), shown


@pytest.mark.parametrize("lesson", LESSONS)
def test_catalogue_expects_every_check_and_the_notebooks_points(lesson):
    checks, points = load_lesson(lesson).checks, notebooks.points(lesson)
    assert set(points) == set(checks)
    answers = catalogue.answers(lesson)
    for a in answers:
        assert set(a.expect) == set(checks), a.name
        assert all(a.expect[c] in (0, points[c]) for c in checks), a.name
        for fails in a.fails:
            assert a.expect[fails.check] == 0, (a.name, fails)
    assert answers[0].sort == "right", f"the first answer of {lesson} is a right one (its reference)"
    mistakes = [a for a in answers if a.plain and a.sort == "mistake"]
    lost = {c for a in mistakes for c, p in a.expect.items() if p == 0}
    assert lost == set(checks), f"no mistake in {lesson}'s catalogue fails {set(checks) - lost}"
    assert all(a.validate_says for a in mistakes), "a mistake names no words the learner must read"


@pytest.mark.parametrize("lesson", LESSONS)
def test_every_mistake_is_named_by_its_id(lesson):
    """Each mistake in the catalogue says which mistake id its verdicts name, an id the lesson
    declares; every id the lesson declares is named by a case of its catalogue, and every id of
    the shared steps by a case of some lesson's."""
    declared = load_lesson(lesson).all_mistakes
    answers = catalogue.answers(lesson)
    for a in answers:
        if a.sort != "right":
            assert a.mistake in declared or a.mistake is None and not a.plain, (a.name, a.mistake)
    named = {a.mistake for a in answers}
    assert set(load_lesson(lesson).mistakes) <= named, set(load_lesson(lesson).mistakes) - named
    every = {a.mistake for name in LESSONS for a in catalogue.answers(name)}
    # not_computed is no learner's mistake: only a record not made by running the learner's layers
    # with the grader's weights names it, as tests/test_anchors.py shows for every lesson
    every |= {"not_computed"}
    assert set(SHARED_MISTAKES) <= every, set(SHARED_MISTAKES) - every
    assert all(MISTAKE_ID.match(m) for m in declared)
