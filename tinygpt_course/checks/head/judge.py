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
from ..protocol import Kind, Lesson, Verdict, close, n_params, shape_of, unanswered

B, T, C, HS, LAST = SIZES.batch_size, SIZES.block_size, SIZES.n_embd, SIZES.head_size, SIZES.last
PARTS = ("key", "query", "value")


def structure_problem(s, ref_s):
    """The first thing wrong with how Head stores its layers and its mask, as a failed Verdict, or None."""
    fail = lambda text, mistake: Verdict.fail(Kind.STRUCTURE, text, mistake)  # noqa: E731
    n, expected = n_params(s), n_params(ref_s)
    for part in PARTS:
        info = s["layers"][part]
        if info["type"] is None:
            return fail(f"Head has no self.{part}: add self.{part} = nn.Linear(n_embd, head_size, bias=False).",
                        "layer_missing")
        if info["features"] is None:
            return fail(f"self.{part} is a {info['type']}; make it nn.Linear(n_embd, head_size, bias=False).",
                        "layer_type")
        if info["features"] != [C, HS]:
            return fail(f"self.{part} maps {info['features'][0]} numbers to {info['features'][1]}: it should "
                        f"be nn.Linear(n_embd, head_size), from {C} to the head_size passed in, {HS}.",
                        "layer_size")
    biased = [p for p in PARTS if s["layers"][p]["has_bias"]]
    if biased:
        return fail(f"self.{biased[0]} has a bias: the lesson's layers are nn.Linear(..., bias=False), "
                    f"{expected} weights to learn, not {n}.", "bias_added")
    masks = [name for name, shape in s["params"] if shape == [T, T]]
    if masks:
        return fail(f"the mask self.{masks[0]} is an nn.Parameter, so the optimiser would change it: "
                    "register it with self.register_buffer('tril', ...) instead.", "mask_parameter")
    if n != expected:
        return fail(f"weights to learn: {n}, expected {expected} ({len(PARTS)} layers x {C} x {HS}).", "extra_weights")
    buffers = [shape for _, shape in s["buffers"]]
    if any(shape not in buffers for _, shape in ref_s["buffers"]):
        plain = [name for name, shape in s["plain_tensors"] if shape == [T, T]]
        how = f"self.{plain[0]} is a plain tensor attribute" if plain else "Head has no mask buffer"
        return Verdict.fail(Kind.UNREGISTERED, (
            f"{how}: register the mask with self.register_buffer('tril', torch.tril(torch.ones("
            "block_size, block_size))), so it is saved with the model and moves with .to(device)."), "mask_unregistered")
    return None


def full_softmax(ref, prefix=""):
    """The solution's scaled scores, q @ k^T * head_size ** -0.5, with no mask: softmax of every row."""
    q, k = ref[prefix + "q"], ref[prefix + "k"]
    return F.softmax(q @ k.transpose(-2, -1) * HS ** -0.5, dim=-1)


def weights_problem(rec, ref, prefix=""):
    """What is wrong with the kept weights as weights (shape, rows, mask), as a failed Verdict, or None."""
    raised = LESSON.forward_raised(rec, prefix)
    if raised:
        if 3 in (rec.get(prefix + "T_dims") or []):
            return Verdict.fail(Kind.FORWARD_ERROR, (
                "`.T` was taken of a 3-D tensor: on more than 2 dimensions .T reverses them all "
                f"([B, T, head_size] becomes [head_size, T, B]), so forward raised a "
                f"{rec.get(prefix + 'exception') or 'error'}. Swap only the last two: k.transpose(-2, -1)."),
                "transpose_3d")
        return raised
    w, want = rec.get(prefix + "weights"), shape_of(ref[prefix + "weights"])
    if not torch.is_tensor(w):
        return Verdict.fail(Kind.WRONG_VALUE, (
            "Head kept no attention weights: store the softmax's result in self.weights "
            "(self.weights = F.softmax(...)) before using it."), "weights_not_kept")
    if shape_of(w) != want:
        return Verdict.fail(Kind.WRONG_SHAPE, (
            f"self.weights is {shape_of(w)}, expected {want}: one weight per (position, position)."),
            "weights_shape")
    ones = torch.ones(w.shape[:2])
    problem = not_probabilities(w, ones)
    if problem:
        return problem
    row_sums = w.sum(-1)
    rows_ok = torch.allclose(row_sums, ones, atol=1e-4)
    if not rows_ok and torch.allclose(w.sum(-2), ones, atol=1e-4):
        return Verdict.fail(Kind.WRONG_VALUE, (
            "the softmax runs over the wrong dimension: the columns add up to 1, not the rows. "
            "Use F.softmax(scores, dim=-1), so each position's weights add up to 1."), "softmax_axis")
    lower = torch.ones(w.shape[1:]).tril().bool()   # a softmax over dim 0 leaves NaN above the diagonal
    if not rows_ok and torch.allclose(torch.nan_to_num(w).sum(0)[lower], torch.ones(w.shape[1:])[lower], atol=1e-4):
        return Verdict.fail(Kind.WRONG_VALUE, (
            f"the softmax runs over dim 0, the {w.shape[0]} windows of the batch: each weight is shared "
            "out between windows, which never talk to each other. Use F.softmax(scores, dim=-1), so "
            "each position's weights add up to 1."), "softmax_axis")
    c = float(row_sums.mean())
    if not rows_ok and c > 0 and torch.allclose(row_sums, torch.full_like(row_sums, c), atol=1e-4):
        return Verdict.fail(Kind.WRONG_VALUE, (
            f"every row adds up to {c:.3g}, not 1: the scale was applied after the softmax. Scale the "
            "scores, q @ k^T * head_size ** -0.5, then mask them, then take the softmax."),
            "scale_after_softmax")
    if not torch.all(w.triu(1).abs() < 1e-6):
        if torch.all(w.tril(-1).abs() < 1e-6):
            return Verdict.fail(Kind.WRONG_VALUE, (
                "the mask hides the past instead of the future: fill the scores where "
                "self.tril[:T, :T] == 0 (above the diagonal), from torch.tril, not torch.triu."), "triu_mask")
        if close(w, full_softmax(ref, prefix)) and rec.get(prefix + "masked_fill_calls"):
            return Verdict.fail(Kind.NOT_CAUSAL, (
                "positions see the future: your forward calls masked_fill, but masked_fill is not in "
                "place, it returns a new tensor, and that result was not kept. Assign it: scores = "
                "scores.masked_fill(self.tril[:T, :T] == 0, float('-inf'))."), "masked_fill_not_assigned")
        if close(w, full_softmax(ref, prefix)):
            return Verdict.fail(Kind.NOT_CAUSAL, (
                "positions see the future: the weights above the diagonal are not 0, there is no mask. "
                "Before the softmax, fill the scores where self.tril[:T, :T] == 0 with float('-inf')."),
                "no_mask")
        return Verdict.fail(Kind.NOT_CAUSAL, (
            "positions see the future: the weights above the diagonal are not 0. Before the "
            "softmax, fill the scores where self.tril[:T, :T] == 0 with float('-inf') "
            "(0 is not enough: exp(0) = 1)."), "mask_fill_zero")
    if not rows_ok:
        return Verdict.fail(Kind.WRONG_VALUE, (
            "the rows do not add up to 1: the mask was applied after the softmax. Mask the "
            "scores with float('-inf') first, then take the softmax."), "mask_after_softmax")
    return None


def not_probabilities(w, ones):
    """Weights that are not a softmax's probabilities, each cause told apart by what the numbers
    show: log-probabilities (all <= 0, their exponentials' rows add up to 1), a first row of NaN
    with a zero diagonal (the mask hides the diagonal too, position 0 sees nothing), -inf kept
    (the masked scores themselves). A failed Verdict, or None."""
    nan = torch.isnan(w)
    if not nan.any() and bool((w <= 1e-6).all()) and torch.allclose(torch.exp(w).sum(-1), ones, atol=1e-4):
        return Verdict.fail(Kind.WRONG_VALUE, (
            "the weights are all negative and their exponentials add up to 1 along each row: they are "
            "log-probabilities, what F.log_softmax gives. Attention weights are probabilities, between "
            "0 and 1, each row adding up to 1: take F.softmax of the masked scores."), "log_softmax")
    diagonal = torch.diagonal(w, dim1=-2, dim2=-1)
    if w.shape[1] > 1 and bool(nan[:, 0].all()) and not nan[:, 1:].any() \
            and torch.allclose(diagonal[:, 1:], torch.zeros_like(diagonal[:, 1:]), atol=1e-6):
        return Verdict.fail(Kind.WRONG_VALUE, (
            "no position may look at itself: the weights on the diagonal are 0, and position 0, which "
            "may look at nothing at all, has a row of NaN (a softmax of nothing but -inf). The mask "
            "hides the diagonal too, as torch.tril(..., diagonal=-1) does: keep the diagonal, "
            "torch.tril's default diagonal of 0."), "diagonal_masked")
    if bool(torch.isinf(w).any()):
        return Verdict.fail(Kind.WRONG_VALUE, (
            "the weights hold -inf where the mask is: they are the masked scores themselves, the "
            "softmax was skipped. Turn the masked scores into weights with F.softmax over the last "
            "dimension, so each row holds probabilities that add up to 1."), "softmax_skipped")
    return None


def short_problem(rec, ref):
    """Head on a window shorter than block_size, as a failed Verdict, or None."""
    n = shape_of(ref["short_out"])[1]
    if unanswered(rec, "short_"):
        return LESSON.forward_raised(rec, "short_")
    if rec.get("short_error") or shape_of(rec.get("short_out")) != shape_of(ref["short_out"]):
        got = f"raised {rec['short_exception']}" if rec.get("short_error") else f"gave {shape_of(rec.get('short_out'))}"
        return Verdict.fail(Kind.WRONG_SHAPE, (
            f"on a window of {n} letters forward {got}: the mask is {T} x {T}, the window {n} long. "
            f"Crop the mask to the window, self.tril[:T, :T] with T from x.shape (when the model writes, "
            f"its windows start with one letter)."), "mask_not_cropped")
    return None


def value_problem(rec, ref, w, prefix=""):
    """What is wrong with out, given the learner's own weights w, as a failed Verdict, or None."""
    out, want = rec.get(prefix + "out"), shape_of(ref[prefix + "out"])
    if shape_of(out) != want:
        if shape_of(out) == [B, T, C]:
            return Verdict.fail(Kind.WRONG_SHAPE, (
                f"out has {C} numbers per position: it averaged x itself. Average the "
                "values, self.value(x), with the weights instead."), "x_averaged")
        return Verdict.fail(Kind.WRONG_SHAPE, f"out should be {want}; yours is {shape_of(out)}.", "out_shape")
    values = ref[prefix + "v"]
    if close(out, values):
        return Verdict.fail(Kind.WRONG_VALUE, (
            "out is value(x) itself: return the values averaged with the weights (the matrix "
            "product of self.weights and the values)."), "values_not_averaged")
    if not close(out, w @ values):
        return Verdict.fail(Kind.WRONG_VALUE,
                            "out is not the head's weights times its values: average self.value(x) with self.weights.",
                            "out_not_weighted_values")
    return None


def lower_softmax(scores):
    """Each row's softmax over the positions on and below the diagonal (the others get 0)."""
    allowed = torch.ones(scores.shape[-2:]).tril().bool()
    return F.softmax(scores.masked_fill(~allowed, float("-inf")), dim=-1)


def near_misses(ref):
    """(weights a known mistake gives, what to tell the learner, its mistake id), from the
    solution's numbers."""
    w, q, k, v = ref["weights"], ref["q"], ref["k"], ref["v"]

    def rescaled(c):    # softmax(c * s) is softmax(s) ** c, renormalised
        p = w.double() ** c
        return (p / p.sum(-1, keepdim=True)).float()

    root = HS ** 0.5
    return [
        (rescaled(root), f"the scores are not scaled: multiply q @ k^T by head_size ** -0.5 (divide by "
                         f"{root:g} for a head of {HS}) before the mask and the softmax.", "no_scale"),
        (rescaled(root / C ** 0.5), f"the scores are scaled by 1/sqrt({C}), the size of x: scale by "
                                    f"1/sqrt(head_size), the size of the keys, 1/sqrt({HS}).", "scale_by_n_embd"),
        (rescaled(root / HS), f"the scores are divided by {HS}: divide by sqrt({HS}) = {root:g}, or "
                              "multiply by head_size ** -0.5.", "scale_not_sqrt"),
        (rescaled(HS), f"the scores are multiplied by sqrt({HS}): multiply by head_size ** -0.5 "
                       "(the minus matters).", "scale_inverted"),
        (lower_softmax(k @ q.transpose(-2, -1) / root),
         "query and key are swapped: the scores are q @ k^T, the queries (what each position looks "
         "for) against the keys (what each position offers).", "q_k_swapped"),
        (lower_softmax(q @ v.transpose(-2, -1) / root),
         "the scores use value instead of key: q @ k^T, with k = self.key(x).", "value_as_key"),
    ]


def computed(rec, ref, prefix=""):
    """The forward pass on this input computed with the fixed weights: its output or its
    weights are the solution's, or every layer output it made (of key, query, value) is."""
    layers = [k for k in ("k", "q", "v") if rec.get(prefix + k) is not None]
    return (close(rec.get(prefix + "out"), ref[prefix + "out"]) or close(rec.get(prefix + "weights"), ref[prefix + "weights"])
            or (bool(layers) and all(close(rec[prefix + k], ref[prefix + k]) for k in layers)))


class HeadLesson(Lesson):
    name = "head"
    task_class, build_args = "Head", str(HS)
    checks = {
        "shapes": "out / weights / a window of 5 letters",
        "weight_count": "weights to learn / buffers",
        "rows_and_mask": "every row adds up to 1 | nothing above the diagonal",
        "attention_weights": f"window 0 / position {LAST} takes / position 2 takes",
        "out_is_weighted_values": "out is weights @ value(h)",
        "causal": f"change position {LAST}",
    }
    mistakes = {
        "layer_missing": "key, query or value is missing",
        "layer_type": "key, query or value is not an nn.Linear",
        "layer_size": "key, query or value maps other sizes than n_embd -> head_size",
        "bias_added": "a layer has a bias (the lesson's have bias=False)",
        "mask_parameter": "the mask is an nn.Parameter, which the optimiser would change",
        "extra_weights": "Head holds weights besides key, query and value",
        "mask_unregistered": "the mask is a plain tensor attribute, not a registered buffer",
        "transpose_3d": "`.T` on a 3-D tensor reverses every dimension (use transpose(-2, -1))",
        "weights_not_kept": "the softmax's result is not kept in self.weights",
        "weights_shape": "self.weights has another shape than [B, T, T]",
        "softmax_axis": "the softmax runs over another dimension than the last",
        "scale_after_softmax": "the scale is applied after the softmax, not to the scores",
        "triu_mask": "the mask hides the past (torch.triu) instead of the future",
        "masked_fill_not_assigned": "masked_fill's result is not assigned (it is not in place)",
        "no_mask": "no mask: positions see the future",
        "mask_fill_zero": "the future is masked with a number (0) instead of -inf",
        "mask_after_softmax": "the mask is applied after the softmax",
        "mask_not_cropped": "the mask is not cropped to the window (self.tril[:T, :T])",
        "x_averaged": "the weights average x instead of the values",
        "out_shape": "out has another shape than [B, T, head_size]",
        "values_not_averaged": "out is the values themselves, not their weighted average",
        "out_not_weighted_values": "out is not self.weights @ the values",
        "no_scale": "the scores are not scaled",
        "scale_by_n_embd": "the scores are scaled by 1/sqrt(n_embd) instead of 1/sqrt(head_size)",
        "scale_not_sqrt": "the scores are divided by head_size instead of its square root",
        "scale_inverted": "the scores are multiplied by sqrt(head_size) instead of divided",
        "q_k_swapped": "the scores are k @ q^T instead of q @ k^T",
        "value_as_key": "the scores use the values instead of the keys",
        "wrong_scores": "the weights are not the softmax of the masked, scaled scores",
        "log_softmax": "the weights are log-probabilities (F.log_softmax), not probabilities",
        "diagonal_masked": "the mask hides the diagonal too (tril with diagonal=-1): no position sees itself",
        "softmax_skipped": "the masked scores are used as the weights: the softmax is skipped",
        "sees_the_future": "changing the last letter changes earlier positions",
    }

    def structure_problem(self, check_id, rec, ref):
        return structure_problem(rec["structure"], ref["structure"])

    anchored_checks = {**Lesson.anchored_checks, "rows_and_mask": "", "out_is_weighted_values": ""}

    def layers_computed(self, rec, ref):
        alone = rec.get("alone") or {}
        return [close(alone.get(k), ref["alone"][k]) for k in ("k", "q", "v")]

    def forward_computed(self, rec, ref, prefix):
        return computed(rec, ref, prefix)

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
        return short_problem(rec, ref) or Verdict.ok(
            f"out: {want_out}, weights: {want_w}; a window of {shape_of(ref['short_out'])[1]} letters works too")

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
        for weights, message, mistake in near_misses(ref):
            if close(w, weights):
                return Verdict.fail(Kind.WRONG_VALUE, message, mistake)
        return Verdict.fail(Kind.WRONG_VALUE, (
            "the weights are not the softmax of the masked, scaled scores "
            "q @ k^T * head_size ** -0.5, with q = self.query(x) and k = self.key(x)."), "wrong_scores")

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
                    or Verdict.fail(Kind.WRONG_SHAPE, f"forward gave no {shape_of(ref['out'])} output.", "out_shape"))
        verdict = self.causal(out, out2, "they see the future. Mask the scores above the diagonal with "
                                         "float('-inf') before the softmax.")
        # positions that see the future: the weights say why (no mask, the softmax's axis, ...)
        return (not verdict.passed and weights_problem(rec, ref)) or verdict


LESSON = HeadLesson()
