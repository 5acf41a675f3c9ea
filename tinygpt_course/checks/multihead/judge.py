"""The trusted half of the multihead checks: diagnoses from two records.

``LESSON.judge(check_id, rec, ref)`` compares the learner's record with ``ref``, the record of
the lesson's solution under the same fixed weights, and names the likely mistake. Every fact
comes from raw values (parameter names and shapes, tensors); nothing here runs learner code or
computes the lesson's answer: the expected numbers are the solution's, in ``ref``.
"""
import torch
import torch.nn.functional as F

from ...config import SIZES
from ..protocol import Kind, Lesson, Verdict, close, n_params

B, T, C, HS, NH = SIZES.batch_size, SIZES.block_size, SIZES.n_embd, SIZES.head_size, SIZES.n_heads
LAST = SIZES.last

ACTIVATIONS = (("ReLU", F.relu), ("tanh", torch.tanh), ("GELU", F.gelu))


def structure_problem(s, ref_s, for_count=False):
    """The first thing wrong with how MultiHead stores its layers, as a failed Verdict, or None."""
    n, expected = n_params(s), n_params(ref_s)
    fail = lambda text: Verdict.fail(Kind.STRUCTURE, text)  # noqa: E731
    if s["heads_type"] is None:
        return fail("MultiHead has no self.heads: store the two heads in an attribute called self.heads.")
    registered = any(name.startswith("heads.") for name, _ in s["params"])
    if not registered and s["heads_type"] in ("list", "tuple"):
        kind = Kind.STRUCTURE if for_count else Kind.UNREGISTERED
        return Verdict.fail(kind, (
            f"self.heads is a plain Python {s['heads_type']}, so PyTorch does not look inside it: "
            f"parameters() finds only {n} weights to learn, not {expected}, and the heads would never "
            "be trained. Wrap the list: nn.ModuleList([...])."))
    types = s["head_types"] or []
    if len(types) != NH:
        return fail(f"self.heads holds {len(types)} heads; the lesson uses {NH} Head({HS}).")
    if set(types) != {"Head"}:
        return fail(f"self.heads should hold Head objects (the class from the cell above): Head({HS}).")
    if len(set(s["head_first_index"])) != NH:
        return fail(f"self.heads holds one Head object twice (as `[Head({HS})] * {NH}` or `[head, head]` "
                    "do): both entries are the same head with the same weights. Create each head "
                    "separately, for example with a loop or a comprehension.")
    if s["head_key_sizes"] != [HS] * NH:
        return fail(f"the heads have size {s['head_key_sizes']}: each head must give {HS} numbers so "
                    f"that {NH} of them joined side by side give {C}, the size of the input. Use Head({HS}).")
    if s["proj_type"] is None:
        return fail("MultiHead has no self.proj: add the projection, nn.Linear(n_embd, n_embd).")
    if s["proj_features"] != [C, C]:
        return fail(f"self.proj should be nn.Linear(n_embd, n_embd), from {C} numbers to {C}; "
                    f"yours is {s['proj_type']} {s['proj_features']}.")
    if not s["proj_has_bias"]:
        return fail(f"self.proj has no bias (bias=False): the lesson's projection keeps nn.Linear's "
                    f"default bias, which gives {expected} weights to learn, not {n}.")
    return None


def forward_problem(rec, ref, prefix=""):
    """What is wrong with the forward pass, as a failed Verdict, or None."""
    err, exc = rec.get(prefix + "error"), rec.get(prefix + "exception")
    proj_in = rec.get(prefix + "proj_in") or []
    calls = rec.get(prefix + "head_calls") or []
    if err and exc == "NotImplementedError":
        return Verdict.fail(Kind.UNANSWERED, LESSON.unanswered)
    if proj_in and proj_in[0].shape[-1] != C:
        shape = list(proj_in[0].shape)
        if shape == [B, T, HS]:
            return Verdict.fail(Kind.WRONG_SHAPE, (
                f"self.proj received {HS} numbers per position, not {C}: the heads' outputs were "
                "added or averaged (or only one head passed on). Join them side by side with "
                "torch.cat(..., dim=-1)."))
        return Verdict.fail(Kind.WRONG_SHAPE, (
            f"self.proj received a tensor of shape {shape}: the heads were joined along the wrong "
            f"dimension. Join along the last one, dim=-1, so each position gets {HS} + {HS} numbers."))
    if err:
        return Verdict.fail(Kind.FORWARD_ERROR, f"forward raised {err}")
    if sorted(calls) != list(range(NH)):
        return Verdict.fail(Kind.WRONG_VALUE, (
            f"forward ran the heads {[k + 1 for k in calls]} (by number): each of the {NH} heads "
            "should run once on x. Loop over self.heads rather than naming one head twice."))
    if not proj_in:
        return Verdict.fail(Kind.WRONG_VALUE,
                            "forward never calls self.proj: pass the joined heads through it and return the result.")
    got, joined = proj_in[0], ref[prefix + "proj_in"][0]
    if got.shape == joined.shape and not close(got, joined):
        if close(got, torch.cat(ref[prefix + "head_outs"][::-1], dim=-1)):
            return Verdict.fail(Kind.WRONG_VALUE, (
                f"the heads are joined in the wrong order: head 1's {HS} numbers come first, then "
                "head 2's, the order of self.heads."))
        for name, act in ACTIVATIONS + (("softmax", lambda t: F.softmax(t, -1)),):
            if close(got, act(joined)):
                return Verdict.fail(Kind.WRONG_VALUE, (
                    f"an extra {name} before the projection: join the heads and pass them to "
                    "self.proj as they are."))
        return Verdict.fail(Kind.WRONG_VALUE, (
            "self.proj did not receive the two heads' outputs joined side by side "
            "(torch.cat of [head 1, head 2] on x)."))
    out, expected = rec.get(prefix + "out"), ref[prefix + "out"]
    if not torch.is_tensor(out) or out.shape != expected.shape:
        shape = list(out.shape) if torch.is_tensor(out) else None
        return Verdict.fail(Kind.WRONG_SHAPE, f"forward gave {shape}, expected {list(expected.shape)}.")
    if not close(out, expected):
        for name, act in ACTIVATIONS:
            if close(out, act(expected)):
                return Verdict.fail(Kind.WRONG_VALUE, (
                    f"an extra {name} after the projection: forward should return self.proj(...) as it is."))
        return Verdict.fail(Kind.WRONG_VALUE,
                            "forward's result is not self.proj of the joined heads: return self.proj(joined) itself.")
    return None


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

    def structure_problem(self, check_id, rec, ref):
        return structure_problem(rec["structure"], ref["structure"], for_count=check_id == "weight_count")

    def _weight_count(self, rec, ref):
        n, expected = n_params(rec["structure"]), n_params(ref["structure"])
        if n != expected:
            return Verdict.fail(Kind.STRUCTURE, f"weights to learn: {n}, expected {expected}.")
        return Verdict.ok(f"weights to learn: {expected}")

    def _shapes(self, rec, ref):
        want_outs = [list(o.shape) for o in ref["head_outs"]]
        want_out = list(ref["out"].shape)
        problem = forward_problem(rec, ref)
        if problem and problem.kind is not Kind.WRONG_SHAPE and rec.get("out") is None:
            return problem
        outs = [list(o.shape) for o in rec.get("head_outs", [])]
        if outs != want_outs:
            return Verdict.fail(Kind.WRONG_SHAPE, f"each head should give {want_outs[0]}; yours gave {outs}.")
        out = rec.get("out")
        if not torch.is_tensor(out) or list(out.shape) != want_out:
            return problem or Verdict.fail(Kind.WRONG_SHAPE, (
                f"out should be {want_out}; yours is {list(out.shape) if torch.is_tensor(out) else None}."))
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
                                "the heads kept no attention weights: run every head of self.heads on x in forward.")
        for i, (w, e) in enumerate(zip(got, ref["head_weights"]), 1):
            if not close(w, e):
                return Verdict.fail(Kind.WRONG_VALUE, (
                    f"head {i}'s attention weights for window 0 are not what Head computes on the "
                    "block's input: give each head x itself, unchanged."))
        return Verdict.ok(f"window 0 and both heads' weights at position {LAST}, checked with fixed weights")

    def _causal(self, rec, ref):
        out, out2 = rec.get("out"), rec.get("changed_out")
        if not (torch.is_tensor(out) and torch.is_tensor(out2)) or out.shape != out2.shape or out.dim() != 3:
            return forward_problem(rec, ref) or Verdict.fail(
                Kind.FORWARD_ERROR, f"forward raised {rec.get('changed_error')}")
        if out.shape[1] <= LAST:
            return forward_problem(rec, ref) or Verdict.fail(
                Kind.WRONG_SHAPE, f"out has {out.shape[1]} positions, not {T}.")
        return self.causal(out, out2, "your forward mixes positions (the heads' mask keeps each position "
                                      "from seeing later ones).")


LESSON = MultiHeadLesson()
