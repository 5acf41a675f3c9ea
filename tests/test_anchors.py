"""Every point needs the right computation (tinygpt_course/checks/protocol.py, Lesson.anchor).

A record is the word of a process the learner's code runs in: it can be replayed from other
weights or made up to agree with itself. A check that passes on a relation between the record's
own numbers (shapes, a count, earlier positions unchanged) also needs, in the part it credits,
numbers only the learner's layers give with the fixed weights drawn from the grader's seed. Here,
for every lesson: the solution's own record made with other weights, judged against the
solution's record for the grader's seed, scores nothing, and names `not_computed` on each check
that would pass on it with the defence off (``Lesson.anchored = False``), which scores it.
"""
import pytest
import torch

from tinygpt_course.checks.protocol import load_lesson
from tinygpt_course.testing import notebooks

LESSONS = ("head", "multihead", "block", "gpt")
GRADER, OTHER = 13579, 2024     # the grader's seed; another (2024: the notebook's, reference.rec)


def verdicts(lesson, rec, ref, anchored=True, monkeypatch=None):
    lesson = load_lesson(lesson)
    if not anchored:
        monkeypatch.setattr(type(lesson), "anchored", False)
    return {c: lesson.verdict(c, rec, ref) for c in lesson.checks}


@pytest.mark.parametrize("lesson", LESSONS)
def test_a_record_replayed_from_other_weights_scores_nothing(lesson, monkeypatch):
    replayed, ref = notebooks.solution_record(lesson, OTHER), notebooks.solution_record(lesson, GRADER)
    honest = verdicts(lesson, notebooks.solution_record(lesson, GRADER), ref)
    assert all(v.passed for v in honest.values()), honest
    on = verdicts(lesson, replayed, ref)
    assert not [c for c, v in on.items() if v.passed], on
    off = verdicts(lesson, replayed, ref, anchored=False, monkeypatch=monkeypatch)
    forged = sorted(c for c, v in off.items() if v.passed)
    assert forged, "with the defence off a replayed record scores the checks that compare it with itself"
    assert {c: on[c].mistake for c in forged} == {c: "not_computed" for c in forged}
    assert set(forged) <= set(load_lesson(lesson).anchored_checks)
    print(f"{lesson}: replayed, defence off: {forged}; on: none")


@pytest.mark.parametrize("lesson", LESSONS)
def test_a_made_up_record_that_agrees_with_itself_scores_nothing(lesson, monkeypatch):
    """The grader's record of the solution with every tensor replaced by zeros of its shape (the
    layers' structure and the counts kept): every shape agrees, every earlier position is
    unchanged, and nothing is what a layer computed."""
    ref = notebooks.solution_record(lesson, GRADER)

    def zeroed(value):
        if torch.is_tensor(value):
            return torch.zeros_like(value)
        if isinstance(value, dict):
            return {k: v if k == "structure" else zeroed(v) for k, v in value.items()}
        if isinstance(value, list):
            return [zeroed(v) for v in value]
        return value

    made_up = zeroed(ref)
    assert not [c for c, v in verdicts(lesson, made_up, ref).items() if v.passed]
    off = verdicts(lesson, made_up, ref, anchored=False, monkeypatch=monkeypatch)
    assert any(v.passed for v in off.values()), off


@pytest.mark.parametrize("lesson", LESSONS)
def test_every_lesson_declares_its_anchors(lesson):
    """Each lesson says which checks need the anchor and probes its stored layers: the solution's
    layers all compute, run alone."""
    L, rec = load_lesson(lesson), notebooks.solution_record(lesson, GRADER)
    assert "weight_count" in L.anchored_checks and L.anchored_checks["weight_count"] is None
    assert set(L.anchored_checks) <= set(L.checks)
    layers = L.layers_computed(rec, rec)
    assert layers and all(layers), layers
    assert not any(L.layers_computed(notebooks.solution_record(lesson, OTHER), rec))
