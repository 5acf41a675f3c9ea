"""The trusted half of the head checks: diagnoses from two records.

``LESSON.judge(check_id, rec, ref)`` compares the learner's record with ``ref``, the record of
the lesson's solution under the same fixed weights, and names the likely mistake. Every fact
comes from raw values (parameter names and shapes, tensors); nothing here runs learner code or
computes the lesson's answer: the expected weights and output are the solution's, in ``ref``.
The near misses are derived from the solution's own numbers: a softmax of scores scaled by c
times the right scale is the solution's weights to the power c, renormalised; the swapped
scores come from the solution's q, k and v.
"""
import torch
import torch.nn.functional as F

from ...config import SIZES
from ..protocol import Kind, Lesson, Verdict, close, n_params, shape_of

B, T, C, HS, LAST = SIZES.batch_size, SIZES.block_size, SIZES.n_embd, SIZES.head_size, SIZES.last
PARTS = ("key", "query", "value")


def structure_problem(s, ref_s):
    """The first thing wrong with how Head stores its layers and its mask, as a failed Verdict, or None."""
    fail = lambda text: Verdict.fail(Kind.STRUCTURE, text)  # noqa: E731
    n, expected = n_params(s), n_params(ref_s)
    for part in PARTS:
        info = s["layers"][part]
        if info["type"] is None:
            return fail(f"Head has no self.{part}: add self.{part} = nn.Linear(n_embd, head_size, bias=False).")
        if info["features"] is None:
            return fail(f"self.{part} is a {info['type']}; make it nn.Linear(n_embd, head_size, bias=False).")
        if info["features"] != [C, HS]:
            return fail(f"self.{part} maps {info['features'][0]} numbers to {info['features'][1]}: it should "
                        f"be nn.Linear(n_embd, head_size), from {C} to the head_size passed in, {HS}.")
    biased = [p for p in PARTS if s["layers"][p]["has_bias"]]
    if biased:
        return fail(f"self.{biased[0]} has a bias: the lesson's layers are nn.Linear(..., bias=False), "
                    f"{expected} weights to learn, not {n}.")
    masks = [name for name, shape in s["params"] if shape == [T, T]]
    if masks:
        return fail(f"the mask self.{masks[0]} is an nn.Parameter, so the optimiser would change it: "
                    "register it with self.register_buffer('tril', ...) instead.")
    if n != expected:
        return fail(f"weights to learn: {n}, expected {expected} ({len(PARTS)} layers x {C} x {HS}).")
    buffers = [shape for _, shape in s["buffers"]]
    if any(shape not in buffers for _, shape in ref_s["buffers"]):
        plain = [name for name, shape in s["plain_tensors"] if shape == [T, T]]
        how = f"self.{plain[0]} is a plain tensor attribute" if plain else "Head has no mask buffer"
        return Verdict.fail(Kind.UNREGISTERED, (
            f"{how}: register the mask with self.register_buffer('tril', torch.tril(torch.ones("
            "block_size, block_size))), so it is saved with the model and moves with .to(device)."))
    return None


def weights_problem(rec, ref, prefix=""):
    """What is wrong with the kept weights as weights (shape, rows, mask), as a failed Verdict, or None."""
    raised = LESSON.forward_raised(rec, prefix)
    if raised:
        return raised
    w, want = rec.get(prefix + "weights"), shape_of(ref[prefix + "weights"])
    if not torch.is_tensor(w):
        return Verdict.fail(Kind.WRONG_VALUE, (
            "Head kept no attention weights: store the softmax's result in self.weights "
            "(self.weights = F.softmax(...)) before using it."))
    if shape_of(w) != want:
        return Verdict.fail(Kind.WRONG_SHAPE, (
            f"self.weights is {shape_of(w)}, expected {want}: one weight per (position, position)."))
    ones = torch.ones(w.shape[:2])
    rows_ok = torch.allclose(w.sum(-1), ones, atol=1e-4)
    if not rows_ok and torch.allclose(w.sum(-2), ones, atol=1e-4):
        return Verdict.fail(Kind.WRONG_VALUE, (
            "the softmax runs over the wrong dimension: the columns add up to 1, not the rows. "
            "Use F.softmax(scores, dim=-1), so each position's weights add up to 1."))
    if not torch.all(w.triu(1).abs() < 1e-6):
        if torch.all(w.tril(-1).abs() < 1e-6):
            return Verdict.fail(Kind.WRONG_VALUE, (
                "the mask hides the past instead of the future: fill the scores where "
                "self.tril[:T, :T] == 0 (above the diagonal), from torch.tril, not torch.triu."))
        return Verdict.fail(Kind.NOT_CAUSAL, (
            "positions see the future: the weights above the diagonal are not 0. Before the "
            "softmax, fill the scores where self.tril[:T, :T] == 0 with float('-inf') "
            "(0 is not enough: exp(0) = 1)."))
    if not rows_ok:
        return Verdict.fail(Kind.WRONG_VALUE, (
            "the rows do not add up to 1: the mask was applied after the softmax. Mask the "
            "scores with float('-inf') first, then take the softmax."))
    return None


def value_problem(rec, ref, w, prefix=""):
    """What is wrong with out, given the learner's own weights w, as a failed Verdict, or None."""
    out, want = rec.get(prefix + "out"), shape_of(ref[prefix + "out"])
    if shape_of(out) != want:
        if shape_of(out) == [B, T, C]:
            return Verdict.fail(Kind.WRONG_SHAPE, (
                f"out has {C} numbers per position: it averaged x itself. Average the "
                "values, self.value(x), with the weights instead."))
        return Verdict.fail(Kind.WRONG_SHAPE, f"out should be {want}; yours is {shape_of(out)}.")
    values = ref[prefix + "v"]
    if close(out, values):
        return Verdict.fail(Kind.WRONG_VALUE, (
            "out is value(x) itself: return the values averaged with the weights (the matrix "
            "product of self.weights and the values)."))
    if not close(out, w @ values):
        return Verdict.fail(Kind.WRONG_VALUE,
                            "out is not the head's weights times its values: average self.value(x) with self.weights.")
    return None


def lower_softmax(scores):
    """Each row's softmax over the positions on and below the diagonal (the others get 0)."""
    allowed = torch.ones(scores.shape[-2:]).tril().bool()
    return F.softmax(scores.masked_fill(~allowed, float("-inf")), dim=-1)


def near_misses(ref):
    """(weights a known mistake gives, what to tell the learner), from the solution's numbers."""
    w, q, k, v = ref["weights"], ref["q"], ref["k"], ref["v"]

    def rescaled(c):    # softmax(c * s) is softmax(s) ** c, renormalised
        p = w.double() ** c
        return (p / p.sum(-1, keepdim=True)).float()

    root = HS ** 0.5
    return [
        (rescaled(root), f"the scores are not scaled: multiply q @ k^T by head_size ** -0.5 (divide by "
                         f"{root:g} for a head of {HS}) before the mask and the softmax."),
        (rescaled(root / C ** 0.5), f"the scores are scaled by 1/sqrt({C}), the size of x: scale by "
                                    f"1/sqrt(head_size), the size of the keys, 1/sqrt({HS})."),
        (rescaled(root / HS), f"the scores are divided by {HS}: divide by sqrt({HS}) = {root:g}, or "
                              "multiply by head_size ** -0.5."),
        (rescaled(HS), f"the scores are multiplied by sqrt({HS}): multiply by head_size ** -0.5 "
                       "(the minus matters)."),
        (lower_softmax(k @ q.transpose(-2, -1) / root),
         "query and key are swapped: the scores are q @ k^T, the queries (what each position looks "
         "for) against the keys (what each position offers)."),
        (lower_softmax(q @ v.transpose(-2, -1) / root),
         "the scores use value instead of key: q @ k^T, with k = self.key(x)."),
    ]


class HeadLesson(Lesson):
    name = "head"
    task_class, build_args = "Head", str(HS)
    checks = {
        "shapes": "out / weights",
        "weight_count": "weights to learn / buffers",
        "rows_and_mask": "every row adds up to 1 | nothing above the diagonal",
        "attention_weights": f"window 0 / position {LAST} takes / position 2 takes",
        "out_is_weighted_values": "out is weights @ value(h)",
        "causal": f"change position {LAST}",
    }

    def structure_problem(self, check_id, rec, ref):
        return structure_problem(rec["structure"], ref["structure"])

    def _weight_count(self, rec, ref):
        return Verdict.ok(f"weights to learn: {n_params(ref['structure'])} | the mask is a registered buffer")

    def _shapes(self, rec, ref):
        if rec.get("error"):
            return weights_problem(rec, ref)
        want_out, want_w = shape_of(ref["out"]), shape_of(ref["weights"])
        if shape_of(rec.get("out")) != want_out:
            return value_problem(rec, ref, None)
        if shape_of(rec.get("weights")) != want_w:
            return weights_problem(rec, ref)
        return Verdict.ok(f"out: {want_out}, weights: {want_w}")

    def _rows_and_mask(self, rec, ref):
        return weights_problem(rec, ref) or Verdict.ok(
            "every row adds up to 1 | nothing above the diagonal, checked with fixed weights")

    def _attention_weights(self, rec, ref):
        problem = weights_problem(rec, ref)
        if problem:
            return problem
        w = rec["weights"]
        if close(w, ref["weights"]):
            return Verdict.ok("the weights of every window and position, checked with fixed weights")
        for weights, message in near_misses(ref):
            if close(w, weights):
                return Verdict.fail(Kind.WRONG_VALUE, message)
        return Verdict.fail(Kind.WRONG_VALUE, (
            "the weights are not the softmax of the masked, scaled scores "
            "q @ k^T * head_size ** -0.5, with q = self.query(x) and k = self.key(x)."))

    def _out_is_weighted_values(self, rec, ref):
        w = rec.get("weights")
        if rec.get("error") or shape_of(w) != shape_of(ref["weights"]):
            return weights_problem(rec, ref)
        return value_problem(rec, ref, w) or Verdict.ok("out is weights @ value(h), checked with fixed weights")

    def _causal(self, rec, ref):
        out, out2 = rec.get("out"), rec.get("changed_out")
        if not (torch.is_tensor(out) and torch.is_tensor(out2)) or out.shape != out2.shape \
                or out.dim() != 3 or out.shape[1] <= LAST:
            return (weights_problem(rec, ref) or weights_problem(rec, ref, "changed_")
                    or Verdict.fail(Kind.WRONG_SHAPE, f"forward gave no {shape_of(ref['out'])} output."))
        return self.causal(out, out2, "they see the future. Mask the scores above the diagonal with "
                                      "float('-inf') before the softmax.")


LESSON = HeadLesson()
