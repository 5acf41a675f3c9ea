"""Gradients are part of the answer (tinygpt_course/checks/common.py, gradients; protocol.py,
Lesson.gradient_problem).

The weights a lesson counts are weights to learn: the weight_count check also needs a backward
pass from the learner's output to reach each of them. Here: the recorder tells a weight cut off
by .detach(), .data or torch.no_grad() from one forward never uses, and leaves torch as it was;
every catalogue answer that cuts a gradient loses weight_count, named by its cutter, and scores
it with the defence off (``Lesson.gradients_checked = False``); no right answer loses it.
"""
import pytest
import torch
from torch import nn

from tinygpt_course.checks.common import gradients
from tinygpt_course.checks.protocol import CUTTER_MISTAKES, load_lesson
from tinygpt_course.testing import catalogue, notebooks

SEED = 987654321
GRADIENT_MISTAKES = set(CUTTER_MISTAKES.values()) | {"gradient_cut", "backward_error"}
CUT = [a for lesson in catalogue.lessons() for a in catalogue.answers(lesson)
       if a.plain and a.mistake in GRADIENT_MISTAKES]
RIGHT = [a for lesson in catalogue.lessons() for a in catalogue.answers(lesson) if a.plain and a.sort == "right"]


class Two(nn.Module):
    """Two layers, a and b, and c, which forward never uses."""
    def __init__(self, how):
        super().__init__()
        self.a, self.b, self.c, self.how = nn.Linear(4, 4), nn.Linear(4, 4), nn.Linear(4, 4), how

    def forward(self, x):
        if self.how == "detach":
            return self.a(x) + self.b(x).detach()
        if self.how == "data":
            return self.a(x) + x @ self.b.weight.data.T
        if self.how == "no_grad":
            with torch.no_grad():
                y = self.b(x)
            return self.a(x) + y
        if self.how == "inference_mode":
            with torch.inference_mode():
                return self.a(x) + self.b(x)
        if self.how == "set_grad_enabled":
            torch.set_grad_enabled(False)
            try:
                return self.a(x) + self.b(x)
            finally:
                torch.set_grad_enabled(True)
        if self.how == "x back":
            return x
        if self.how == "kept copy":      # a detached copy kept to look at cuts nothing
            self.seen = self.b(x).detach()
        return (self.a(x) + self.b(x)).softmax(-1)     # a softmax's rows sum to 1: no plain sum


def record_of(how):
    rec, m = {}, Two(how)
    with torch.no_grad():      # as every extract runs
        gradients(m, lambda: m(torch.randn(2, 4)), rec)
    return rec["grad"]


@pytest.mark.parametrize("how", ["detach", "data", "no_grad"])
def test_a_cutter_is_told_from_a_layer_never_used(how):
    g = record_of(how)
    assert g["out_needs_grad"] and g["error"] is None and g["by"] == [how]
    assert g["cut"] == ["b.weight", "b.bias", "c.weight", "c.bias"], g
    # with .data only b's weight is read (its bias is never used): the bias stays cut
    assert g["cut_free"] == (["b.bias"] if how == "data" else []) + ["c.weight", "c.bias"], g


@pytest.mark.parametrize("how", ["inference_mode", "set_grad_enabled"])
def test_an_output_outside_the_graph_is_cut_by_its_mode_not_by_a_layer_unused(how):
    g = record_of(how)
    assert g["out_needs_grad"] is False and g["by"] == [how], g
    assert g["cut"] == [f"{l}.{p}" for l in "abc" for p in ("weight", "bias")] and g["cut_free"] == ["c.weight", "c.bias"]
    v = load_lesson("head").gradient_problem({"grad": g})
    assert not v.passed and v.mistake == "gradient_no_grad" and "self.a.weight" in v.message, v


def test_a_forward_that_uses_no_weight_is_left_to_the_other_checks():
    g = record_of("x back")
    assert g["out_needs_grad"] is False and g["cut"] == g["cut_free"] and g["by"] == [], g
    assert load_lesson("head").gradient_problem({"grad": g}) is None


@pytest.mark.parametrize("how", ["plain", "kept copy"])
def test_a_plain_forward_cuts_nothing_but_the_unused_layer(how):
    g = record_of(how)
    assert g["cut"] == g["cut_free"] == ["c.weight", "c.bias"], g
    assert g["by"] == (["detach"] if how == "kept copy" else [])


def test_the_recorder_leaves_torch_as_it_was():
    kept = {name: torch.Tensor.__dict__.get(name) for name in ("detach", "detach_", "data")}
    modes = {(cls, name): cls.__dict__[name] for cls, name in [(torch.no_grad, "__enter__"),
             (torch.set_grad_enabled, "__init__"), (torch.inference_mode, "__enter__")]}
    for how in ("detach", "data", "no_grad", "set_grad_enabled", "inference_mode"):
        record_of(how)
    assert {name: torch.Tensor.__dict__.get(name) for name in kept} == kept
    assert {(cls, name): cls.__dict__[name] for cls, name in modes} == modes
    with torch.no_grad():
        assert not torch.is_grad_enabled()
    t = torch.ones(2, requires_grad=True)
    assert not (t * 2).detach().requires_grad and not (t * 2).data.requires_grad


def test_every_gradient_mistake_has_a_case_in_the_catalogue():
    assert GRADIENT_MISTAKES <= {a.mistake for a in CUT}
    assert {a.lesson for a in CUT} == set(catalogue.lessons())


@pytest.mark.parametrize("answer", CUT, ids=[f"{a.lesson}-{a.name}" for a in CUT])
def test_a_cut_gradient_loses_the_count_and_only_off_scores_it(answer, monkeypatch):
    lesson = load_lesson(answer.lesson)
    rec, ref = notebooks.record(answer.lesson, answer.code, SEED), notebooks.solution_record(answer.lesson, SEED)
    on = lesson.verdict("weight_count", rec, ref)
    assert not on.passed and on.mistake == answer.mistake, on
    monkeypatch.setattr(type(lesson), "gradients_checked", False)
    assert lesson.verdict("weight_count", rec, ref).passed, "with the defence off, the count is scored"


@pytest.mark.parametrize("answer", RIGHT, ids=[f"{a.lesson}-{a.name}" for a in RIGHT])
def test_no_right_answer_cuts_a_gradient(answer):
    g = notebooks.record(answer.lesson, answer.code, SEED)["grad"]
    assert g["error"] is None and g["out_needs_grad"] and [n for n in g["cut"] if n not in g["cut_free"]] == [], g
