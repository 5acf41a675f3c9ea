"""The trusted half of the multihead checks: diagnoses from two records.

``LESSON.judge(check_id, rec, ref)`` compares the learner's record with ``ref``, the record of
the lesson's solution under the same fixed weights, and names the likely mistake. Every fact
comes from raw values (parameter names and shapes, tensors); nothing here runs learner code or
computes the lesson's answer: the expected numbers are the solution's, in ``ref``.
"""
import torch
import torch.nn.functional as F

from ...config import SIZES
from ..protocol import Kind, Lesson, Verdict, close, n_params, shape_of, unanswered

B, T, C, HS, NH = SIZES.batch_size, SIZES.block_size, SIZES.n_embd, SIZES.head_size, SIZES.n_heads
LAST = SIZES.last

ACTIVATIONS = (("ReLU", F.relu), ("tanh", torch.tanh), ("GELU", F.gelu))


def structure_problem(s, ref_s, for_count=False):
    """The first thing wrong with how MultiHead stores its layers, as a failed Verdict, or None."""
    n, expected = n_params(s), n_params(ref_s)
    fail = lambda text, mistake: Verdict.fail(Kind.STRUCTURE, text, mistake)  # noqa: E731
    if s["heads_type"] is None:
        return fail("MultiHead has no self.heads: store the two heads in an attribute called self.heads.",
                    "heads_missing")
    registered = any(name.startswith("heads.") for name, _ in s["params"])
    if not registered and s["heads_type"] in ("list", "tuple"):
        kind = Kind.STRUCTURE if for_count else Kind.UNREGISTERED
        return Verdict.fail(kind, (
            f"self.heads is a plain Python {s['heads_type']}, so PyTorch does not look inside it: "
            f"parameters() finds only {n} weights to learn, not {expected}, and the heads would never "
            "be trained. Wrap the list: nn.ModuleList([...])."), "plain_list")
    types = s["head_types"] or []
    if len(types) != NH:
        return fail(f"self.heads holds {len(types)} heads; the lesson uses {NH} Head({HS}).", "head_count")
    if set(types) != {"Head"}:
        return fail(f"self.heads should hold Head objects (the class from the cell above): Head({HS}).", "head_type")
    if len(set(s["head_first_index"])) != NH:
        return fail(f"self.heads holds one Head object twice (as `[Head({HS})] * {NH}` or `[head, head]` "
                    "do): both entries are the same head with the same weights. Create each head "
                    "separately, for example with a loop or a comprehension.", "same_head_twice")
    if s["head_key_sizes"] != [HS] * NH:
        return fail(f"the heads have size {s['head_key_sizes']}: each head must give {HS} numbers so "
                    f"that {NH} of them joined side by side give {C}, the size of the input. Use Head({HS}).",
                    "head_size")
    if s["proj_type"] is None:
        return fail("MultiHead has no self.proj: add the projection, nn.Linear(n_embd, n_embd).", "proj_missing")
    if s["proj_features"] != [C, C]:
        return fail(f"self.proj should be nn.Linear(n_embd, n_embd), from {C} numbers to {C}; "
                    f"yours is {s['proj_type']} {s['proj_features']}.", "proj_size")
    if not s["proj_has_bias"]:
        return fail(f"self.proj has no bias (bias=False): the lesson's projection keeps nn.Linear's "
                    f"default bias, which gives {expected} weights to learn, not {n}.", "proj_no_bias")
    return None


def forward_problem(rec, ref, prefix=""):
    """What is wrong with the forward pass, as a failed Verdict, or None."""
    err = rec.get(prefix + "error")
    proj_in = rec.get(prefix + "proj_in") or []
    calls = rec.get(prefix + "head_calls") or []
    if err and unanswered(rec, prefix):
        return Verdict.fail(Kind.UNANSWERED, LESSON.unanswered)
    if proj_in and proj_in[0].shape[-1] != C:
        shape = list(proj_in[0].shape)
        if len(shape) == 4 and sorted(shape) == sorted([B, T, HS, NH]):
            return Verdict.fail(Kind.WRONG_SHAPE, (
                f"self.proj received a tensor of shape {shape}: torch.stack adds a new dimension for the "
                f"heads instead of laying them side by side. Join them with torch.cat(..., dim=-1): "
                f"{HS} + {HS} = {C} numbers per position."), "stack_not_cat")
        if shape == [B, T, HS]:
            return Verdict.fail(Kind.WRONG_SHAPE, (
                f"self.proj received {HS} numbers per position, not {C}: the heads' outputs were "
                "added or averaged (or only one head passed on). Join them side by side with "
                "torch.cat(..., dim=-1)."), "heads_summed")
        return Verdict.fail(Kind.WRONG_SHAPE, (
            f"self.proj received a tensor of shape {shape}: the heads were joined along the wrong "
            f"dimension. Join along the last one, dim=-1, so each position gets {HS} + {HS} numbers."),
            "cat_wrong_dim")
    if err:
        return LESSON.forward_raised(rec, prefix)   # the shared step: the raw error's id where the record shows it
    out, expected = rec.get(prefix + "out"), ref[prefix + "out"]
    if torch.is_tensor(out) and out.shape == expected.shape and close(out, expected):
        return None       # the solution's numbers, however the heads were run (batched, einsum, ...)
    if sorted(calls) != list(range(NH)):
        return Verdict.fail(Kind.WRONG_VALUE, (
            f"forward ran the heads {[k + 1 for k in calls]} (by number): each of the {NH} heads "
            "should run once on x. Loop over self.heads rather than naming one head twice."), "heads_not_each_once")
    if not proj_in:
        return Verdict.fail(Kind.WRONG_VALUE,
                            "forward never calls self.proj: pass the joined heads through it and return the result.",
                            "proj_not_called")
    got, joined = proj_in[0], ref[prefix + "proj_in"][0]
    if got.shape == joined.shape and not close(got, joined):
        if close(got, torch.cat(ref[prefix + "head_outs"][::-1], dim=-1)):
            return Verdict.fail(Kind.WRONG_VALUE, (
                f"the heads are joined in the wrong order: head 1's {HS} numbers come first, then "
                "head 2's, the order of self.heads."), "heads_wrong_order")
        for name, act in ACTIVATIONS + (("softmax", lambda t: F.softmax(t, -1)),):
            if close(got, act(joined)):
                return Verdict.fail(Kind.WRONG_VALUE, (
                    f"an extra {name} before the projection: join the heads and pass them to "
                    "self.proj as they are."), "activation_before_proj")
        return Verdict.fail(Kind.WRONG_VALUE, (
            "self.proj did not receive the two heads' outputs joined side by side "
            "(torch.cat of [head 1, head 2] on x)."), "not_joined_heads")
    if not torch.is_tensor(out) or out.shape != expected.shape:
        shape = list(out.shape) if torch.is_tensor(out) else None
        return Verdict.fail(Kind.WRONG_SHAPE, f"forward gave {shape}, expected {list(expected.shape)}.", "out_shape")
    if not close(out, expected):
        for name, act in ACTIVATIONS:
            if close(out, act(expected)):
                return Verdict.fail(Kind.WRONG_VALUE, (
                    f"an extra {name} after the projection: forward should return self.proj(...) as it is."),
                    "activation_after_proj")
        return Verdict.fail(Kind.WRONG_VALUE,
                            "forward's result is not self.proj of the joined heads: return self.proj(joined) itself.",
                            "out_not_proj")
    return None


def heads_ran(rec, ref, prefix=""):
    """Forward ran the stored heads on its input: every head call it made gave what that head of
    the solution gives (a head called twice, or one left out, still shows its numbers)."""
    calls, outs, want = rec.get(prefix + "head_calls") or [], rec.get(prefix + "head_outs") or [], ref[prefix + "head_outs"]
    return bool(calls) and len(calls) == len(outs) and all(
        isinstance(k, int) and 0 <= k < len(want) and close(o, want[k]) for k, o in zip(calls, outs))


def computed(rec, ref, prefix=""):
    """The forward pass on this input computed with the fixed weights: its output, what proj
    received or what the heads gave is the solution's."""
    proj_in, want = rec.get(prefix + "proj_in") or [], ref[prefix + "proj_in"]
    return (close(rec.get(prefix + "out"), ref[prefix + "out"])
            or (proj_in and close(proj_in[0], want[0])) or heads_ran(rec, ref, prefix))


class MultiHeadLesson(Lesson):
    name = "multihead"
    task_class, build_args = "MultiHead", ""
    checks = {
        "shapes": "h / out / each head gives",
        "weight_count": "weights to learn",
        "out_is_proj": "out is proj(head 1 and head 2 side by side)",
        "attention_weights": "window 0 / head 1 and head 2 at position 7",
        "causal": "change position 7",
    }

    mistakes = {
        "heads_missing": "MultiHead has no self.heads",
        "plain_list": "the heads are in a plain Python list, hidden from PyTorch (not nn.ModuleList)",
        "head_count": "self.heads holds another number of heads than 2",
        "head_type": "self.heads holds something else than Head objects",
        "same_head_twice": "self.heads holds one Head object twice",
        "head_size": "the heads have another size than 16",
        "proj_missing": "MultiHead has no self.proj",
        "proj_size": "self.proj is not nn.Linear(n_embd, n_embd)",
        "proj_no_bias": "self.proj has no bias",
        "extra_weights": "MultiHead holds weights besides its heads and projection",
        "stack_not_cat": "the heads are joined with torch.stack (a new dimension), not torch.cat",
        "heads_summed": "the heads' outputs are added or averaged instead of joined side by side",
        "cat_wrong_dim": "the heads are joined along another dimension than the last",
        "heads_not_each_once": "forward runs one head twice, or not every head",
        "proj_not_called": "forward never calls self.proj",
        "heads_wrong_order": "the heads are joined in the wrong order",
        "activation_before_proj": "an activation between joining and projecting",
        "not_joined_heads": "self.proj does not get the heads' outputs joined side by side",
        "out_shape": "forward's result has another shape than the input's",
        "activation_after_proj": "an activation after the projection",
        "out_not_proj": "forward's result is not self.proj of the joined heads",
        "heads_not_run": "the heads kept no attention weights: they were not run on x",
        "heads_input_changed": "the heads are given something else than x",
        "sees_the_future": "changing the last letter changes earlier positions",
    }

    def structure_problem(self, check_id, rec, ref):
        return structure_problem(rec["structure"], ref["structure"], for_count=check_id == "weight_count")

    def layers_computed(self, rec, ref):
        outs, want = rec.get("alone_outs"), ref["alone_outs"]
        heads = [close(a, b) for a, b in zip(outs, want)] if isinstance(outs, list) and len(outs) == len(want) else [False]
        return heads + [close(rec.get("proj_probe"), ref["proj_probe"])]

    def forward_computed(self, rec, ref, prefix):
        return computed(rec, ref, prefix)

    def _weight_count(self, rec, ref):
        n, expected = n_params(rec["structure"]), n_params(ref["structure"])
        if n != expected:
            return Verdict.fail(Kind.STRUCTURE, f"weights to learn: {n}, expected {expected}.", "extra_weights")
        return Verdict.ok(f"weights to learn: {expected}")

    def _shapes(self, rec, ref):
        want_outs = [list(o.shape) for o in ref["head_outs"]]
        want_out = list(ref["out"].shape)
        problem = forward_problem(rec, ref)
        if problem and problem.kind is not Kind.WRONG_SHAPE and rec.get("out") is None:
            return problem
        outs = [list(o.shape) for o in rec.get("head_outs", [])]
        if not outs and problem is None:   # forward did not call the heads (batched): run alone
            outs = [shape_of(o) for o in rec.get("alone_outs") or []]
        if outs != want_outs:
            return Verdict.fail(Kind.WRONG_SHAPE, f"each head should give {want_outs[0]}; yours gave {outs}.",
                                "out_shape")
        out = rec.get("out")
        if not torch.is_tensor(out) or list(out.shape) != want_out:
            return problem or Verdict.fail(Kind.WRONG_SHAPE, (
                f"out should be {want_out}; yours is {list(out.shape) if torch.is_tensor(out) else None}."),
                "out_shape")
        return Verdict.ok(f"h: {want_out}, out: {want_out}, each head gives {want_outs[0]}")

    def _out_is_proj(self, rec, ref):
        return forward_problem(rec, ref) or Verdict.ok(
            "out is proj(head 1 and head 2 side by side), checked with fixed weights")

    def _attention_weights(self, rec, ref):
        if rec.get("error"):  # the runner never gets to print these lines
            return forward_problem(rec, ref)
        got = rec.get("head_weights") or []
        if len(got) != NH or any(w is None for w in got):
            return Verdict.fail(Kind.WRONG_VALUE,
                                "the heads kept no attention weights: run every head of self.heads on x in forward.",
                                "heads_not_run")
        for i, (w, e) in enumerate(zip(got, ref["head_weights"]), 1):
            if not close(w, e):
                return Verdict.fail(Kind.WRONG_VALUE, (
                    f"head {i}'s attention weights for window 0 are not what Head computes on the "
                    "block's input: give each head x itself, unchanged."), "heads_input_changed")
        return Verdict.ok(f"window 0 and both heads' weights at position {LAST}, checked with fixed weights")

    def _causal(self, rec, ref):
        out, out2 = rec.get("out"), rec.get("changed_out")
        if not (torch.is_tensor(out) and torch.is_tensor(out2)) or out.shape != out2.shape or out.dim() != 3:
            return forward_problem(rec, ref) or Verdict.fail(
                Kind.FORWARD_ERROR, f"forward raised {rec.get('changed_error')}")
        if out.shape[1] <= LAST:
            return forward_problem(rec, ref) or Verdict.fail(
                Kind.WRONG_SHAPE, f"out has {out.shape[1]} positions, not {T}.", "out_shape")
        return self.causal(out, out2, "your forward mixes positions (the heads' mask keeps each position "
                                      "from seeing later ones).")


LESSON = MultiHeadLesson()
