"""The trusted half of the block checks: diagnoses from two records.

``LESSON.judge(check_id, rec, ref)`` compares the learner's record with ``ref``, the record of
the lesson's solution under the same fixed weights, and names the likely mistake. Every fact
comes from raw values: parameter names and shapes, and what the learner's Block handed to its
attention and its feed-forward. Each hand-over is checked on its own against the solution's;
the near misses apply the solution's own layer norms (their recorded gains and shifts) to the
recorded tensors. Nothing here runs learner code or computes a Block.
"""
import torch
import torch.nn.functional as F

from ...config import SIZES
from ..protocol import Kind, Lesson, Verdict, close, shape_of

T, C, H, LAST = SIZES.block_size, SIZES.n_embd, SIZES.ffwd_hidden, SIZES.last
PARTS = ("sa", "ffwd", "ln1", "ln2")

ACTIVATIONS = (("ReLU", F.relu), ("GELU", F.gelu), ("tanh", torch.tanh))
FFWD = f"nn.Sequential(nn.Linear({C}, {H}), nn.ReLU(), nn.Linear({H}, {C}))"


def counts(structure):
    """Weights to learn: {'total': n, 'sa': n, 'ffwd': n, 'ln1': n, 'ln2': n}."""
    n = {"total": 0, **{part: 0 for part in PARTS}}
    for name, shape in structure["params"]:
        size = int(torch.Size(shape).numel())
        n["total"] += size
        top = name.split(".")[0]
        if top in n:
            n[top] += size
    return n


def layers_without_dropout(layers):
    """The feed-forward's layers, its dropouts left out (with p = 0 they change nothing; with
    p > 0 two runs differ, which the value checks find)."""
    return [layer for layer in layers if layer[0] != "Dropout"]


def structure_problem(s, ref_s):
    """The first thing wrong with how Block stores its layers, as a failed Verdict, or None."""
    fail = lambda text, mistake: Verdict.fail(Kind.STRUCTURE, text, mistake)  # noqa: E731
    if s["sa_type"] is None:
        return fail("Block has no self.sa: store the attention, MultiHead(), in self.sa.", "sa_missing")
    attention = lambda st: sorted(p for p in st["params"] if p[0].startswith("sa."))  # noqa: E731
    if s["sa_type"] != ref_s["sa_type"] or attention(s) != attention(ref_s):
        return fail("self.sa should be the MultiHead from the set-up cell, built with its defaults: MultiHead().",
                    "sa_not_multihead")
    if s["ffwd_type"] is None:
        return fail("Block has no self.ffwd: store the feed-forward, an nn.Sequential, in self.ffwd.", "ffwd_missing")
    if s["ffwd_layers"] is None:
        return fail(f"self.ffwd is a {s['ffwd_type']}: make it nn.Sequential(Linear, ReLU, Linear) (or a "
                    "class of your own that keeps that nn.Sequential as its one layer).", "ffwd_type")
    got, want = layers_without_dropout(s["ffwd_layers"]), ref_s["ffwd_layers"]
    if [layer[0] for layer in got] == ["Linear", "Linear"]:
        return fail("self.ffwd has no ReLU between its two Linear layers: without it the two layers "
                    f"are one linear map in disguise. {FFWD}.", "no_relu")
    if len(got) == len(want) == 3 and got[1] != want[1] and got[0][0] == got[2][0] == "Linear":
        return fail(f"self.ffwd uses {got[1][0]} between its layers; the lesson uses nn.{want[1][0]}().",
                    "other_activation")
    if got != want:
        return fail(f"self.ffwd is {got}: it should widen each position's {C} numbers to "
                    f"{SIZES.ffwd_mult} x {C} = {H}, apply nn.ReLU() and narrow back to {C}: {FFWD}.", "ffwd_size")
    if s.get("norms_shared"):
        return fail("self.ln1 and self.ln2 are one LayerNorm object (ln1 = ln2, or self.ln2 = self.ln1): "
                    "the two layer norms share one gain and one shift, so PyTorch counts their weights "
                    "once. Make two objects, each nn.LayerNorm(n_embd), one for self.ln1 and one for self.ln2.",
                    "one_norm_twice")
    for ln in ("ln1", "ln2"):
        if s[ln + "_type"] is None:
            return fail(f"Block has no self.{ln}: add self.{ln} = nn.LayerNorm(n_embd).", "ln_missing")
        if s[ln + "_shape"] != ref_s[ln + "_shape"]:
            return fail(f"self.{ln} is {s[ln + '_type']} {s[ln + '_shape']}: make it nn.LayerNorm(n_embd), "
                        f"over the {C} numbers.", "ln_shape")
    return count_problem(s, ref_s)


def count_problem(s, ref_s):
    """Weights to learn, part by part and in all, against the solution's, as a failed Verdict, or None."""
    n, want = counts(s), counts(ref_s)
    for part in PARTS:
        if n[part] != want[part]:
            return Verdict.fail(Kind.STRUCTURE, f"self.{part} has {n[part]} weights to learn, expected {want[part]}.",
                                "part_size")
    if n["total"] != want["total"]:
        return Verdict.fail(Kind.STRUCTURE, (
            f"weights to learn: {n['total']}, expected {want['total']}: the Block holds layers "
            "besides sa, ffwd, ln1 and ln2."), "extra_weights")
    return None


def forward_problem(rec, ref, prefix=""):
    """What is wrong with the forward pass as a whole, as a failed Verdict, or None. A forward
    that never calls a layer is a WRONG_VALUE: its shapes may still be right."""
    raised = LESSON.forward_raised(rec, prefix)
    if raised:
        return raised
    out, want = rec.get(prefix + "out"), shape_of(ref[prefix + "out"])
    if shape_of(out) != want:
        return Verdict.fail(Kind.WRONG_SHAPE, f"out should be {want}, the shape of x; yours is {shape_of(out)}.",
                            "out_shape")
    if rec.get(prefix + "sa_in") is None:
        return Verdict.fail(Kind.WRONG_VALUE, "forward never calls self.sa: the attention must run on (a layer norm of) x.",
                            "sa_not_called")
    if rec.get(prefix + "ffwd_in") is None:
        return Verdict.fail(Kind.WRONG_VALUE, "forward never calls self.ffwd: the feed-forward must run after the attention.",
                            "ffwd_not_called")
    return None


def norm(ref, name):
    """The solution's layer norm `name` (its recorded gain and shift), as a function."""
    return lambda t: F.layer_norm(t, (C,), ref["norms"][f"{name}.weight"], ref["norms"][f"{name}.bias"])


def norms_problem(rec, ref):
    """What the attention and the feed-forward got, against the solution's, as a failed Verdict, or None."""
    x, ln1, ln2 = ref["x"], norm(ref, "ln1"), norm(ref, "ln2")
    sa_in, sa_out, ffwd_in = rec["sa_in"], rec["sa_out"], rec["ffwd_in"]
    fail = lambda text, mistake: Verdict.fail(Kind.WRONG_VALUE, text, mistake)  # noqa: E731
    if not close(sa_in, ref["sa_in"]):
        if close(sa_in, x):
            return fail("the attention gets x itself: give it self.ln1(x). (A layer norm after the "
                        "addition is the original Transformer's order; GPT-2 and this course normalise "
                        "each layer's input instead.)", "no_ln1")
        if close(sa_in, ln2(x)):
            return fail("ln1 and ln2 are swapped: self.ln1 goes before the attention, self.ln2 before the feed-forward.",
                        "norms_swapped")
        return fail("the attention does not get self.ln1(x).", "sa_input_wrong")
    if close(ffwd_in, ref["ffwd_in"]):
        return None
    if close(ffwd_in, x + sa_out):
        return fail("the feed-forward gets x without its layer norm: give it self.ln2(x).", "no_ln2")
    if close(ffwd_in, ln2(x)):
        return fail("the feed-forward gets self.ln2 of the block's input: first add the attention's "
                    "output to x (x = x + ...), then give the feed-forward self.ln2 of the new x.", "ffwd_on_input")
    if close(ffwd_in, ln2(sa_out)) or close(ffwd_in, ln1(sa_out)):
        return fail("the feed-forward gets only the attention's output: add it to x first "
                    "(x = x + ...), so the letter's own vector is not lost.", "ffwd_on_attention_alone")
    if close(ffwd_in, ln1(x + sa_out)):
        return fail("the feed-forward's input went through self.ln1: use self.ln2 before the feed-forward.",
                    "ffwd_through_ln1")
    for name, act in ACTIVATIONS:
        if close(ffwd_in, ln2(act(x + sa_out))):
            return fail(f"the sum x + attention went through {name} before the feed-forward got it: a residual "
                        "connection adds and nothing else; the only ReLU is the one inside self.ffwd.",
                        "activation_on_sum")
    return fail("the feed-forward does not get self.ln2 of x plus the attention's output.", "ffwd_input_wrong")


def residual_problem(rec, ref):
    """Whether out is the block's input plus what the two layers gave back, as a failed Verdict, or None."""
    x, out, sa_out, ffwd_out = ref["x"], rec["out"], rec["sa_out"], rec["ffwd_out"]
    fail = lambda text, mistake: Verdict.fail(Kind.WRONG_VALUE, text, mistake)  # noqa: E731
    if close(out, x + sa_out + ffwd_out):
        return None
    if close(out, ffwd_out):
        return fail("out is the feed-forward's output alone: add each layer's output to its input "
                    "(x = x + ...), the residual connections.", "no_residuals")
    if close(out, sa_out + ffwd_out):
        return fail("the attention's residual is missing: add the attention's output to x "
                    "(x = x + ...) instead of replacing x with it.", "no_residual_sa")
    if close(out, x + sa_out):
        return fail("the feed-forward's output is never added: add it to x as well, then return x.",
                    "ffwd_output_dropped")
    if close(out, x + ffwd_out):
        return fail("the attention's output is never added to x: add it (x = x + ...) before the feed-forward.",
                    "sa_output_dropped")
    for name in ("ln1", "ln2"):
        if close(out, norm(ref, name)(x + sa_out + ffwd_out)):
            return fail("out went through a layer norm after the additions: return x as it is after "
                        "the second addition; the layer norms go before each layer.", "norm_on_sum")
    for name, act in ACTIVATIONS:
        if close(out, act(x + sa_out + ffwd_out)):
            return fail(f"out went through {name} after the additions: a residual connection adds and "
                        "nothing else, so return x + attention's output + feed-forward's output as it is "
                        "(the only ReLU is the one inside self.ffwd).", "activation_on_sum")
    return fail("out is not x + attention's output + feed-forward's output.", "residual_wrong")


def computed(rec, ref, prefix=""):
    """The forward pass on this input computed with the fixed weights: its output or the
    attention's is the solution's, or the attention got the block's input itself and gave what
    the stored attention gives on it."""
    sa_out = rec.get(prefix + "sa_out")
    return (close(rec.get(prefix + "out"), ref[prefix + "out"]) or close(sa_out, ref[prefix + "sa_out"])
            or (close(rec.get(prefix + "sa_in"), ref[prefix + "x"]) and close(sa_out, ref[prefix + "sa_alone"])))


class BlockLesson(Lesson):
    name = "block"
    task_class, build_args = "Block", ""
    checks = {
        "shapes": "h / out",
        "weight_count": "weights to learn",
        "layer_norms": "attention gets / feed-forward gets",
        "residuals": f"out is h + attention's output + feed-forward's output / out at position {LAST}",
        "causal": f"change position {LAST}",
    }

    mistakes = {
        "input_modified_in_place": "forward adds into its input in place (x += ...), overwriting it",
        "sa_missing": "Block has no self.sa",
        "sa_not_multihead": "self.sa is not the set-up's MultiHead() with its defaults",
        "ffwd_missing": "Block has no self.ffwd",
        "ffwd_type": "self.ffwd is neither an nn.Sequential nor a class wrapping one",
        "no_relu": "the feed-forward has no ReLU between its Linear layers",
        "other_activation": "the feed-forward uses another activation than ReLU",
        "ffwd_size": "the feed-forward does not widen to 4 x n_embd and back",
        "one_norm_twice": "ln1 and ln2 are one LayerNorm object used twice",
        "ln_missing": "Block has no self.ln1 or self.ln2",
        "ln_shape": "a layer norm normalises another shape than n_embd",
        "part_size": "a part of the Block has another number of weights than the lesson's",
        "extra_weights": "the Block holds layers besides sa, ffwd, ln1 and ln2",
        "out_shape": "out has another shape than x",
        "sa_not_called": "forward never calls self.sa",
        "ffwd_not_called": "forward never calls self.ffwd",
        "no_ln1": "the attention gets x without self.ln1 (post-norm, or no norm)",
        "norms_swapped": "ln1 and ln2 are swapped",
        "sa_input_wrong": "the attention gets something else than self.ln1(x)",
        "no_ln2": "the feed-forward gets its input without self.ln2",
        "ffwd_on_input": "the feed-forward gets ln2 of the block's input, not of x + attention",
        "ffwd_on_attention_alone": "the feed-forward gets the attention's output without x",
        "ffwd_through_ln1": "the feed-forward's input goes through ln1",
        "activation_on_sum": "an activation is applied to a residual sum",
        "ffwd_input_wrong": "the feed-forward gets something else than ln2(x + attention)",
        "no_residuals": "out is the feed-forward's output alone: no residual connection",
        "no_residual_sa": "the attention's output replaces x instead of being added",
        "ffwd_output_dropped": "the feed-forward's output is never added",
        "sa_output_dropped": "the attention's output is never added",
        "norm_on_sum": "a layer norm after the additions (the sum is normalised)",
        "residual_wrong": "out is not x + attention's output + feed-forward's output",
        "norm_over_window": "a layer norm over the whole window mixes positions",
    }

    def structure_problem(self, check_id, rec, ref):
        return structure_problem(rec["structure"], ref["structure"])

    anchored_checks = {**Lesson.anchored_checks, "residuals": ""}

    def layers_computed(self, rec, ref):
        alone = rec.get("alone") or {}
        return [close(rec.get("sa_alone"), ref["sa_alone"])] + [close(alone.get(k), v) for k, v in ref["alone"].items()]

    def forward_computed(self, rec, ref, prefix):
        return computed(rec, ref, prefix)

    def _shapes(self, rec, ref):
        problem = forward_problem(rec, ref)
        if problem and problem.kind is not Kind.WRONG_VALUE:
            return problem
        want = shape_of(ref["out"])
        return Verdict.ok(f"h: {shape_of(ref['x'])}, out: {want}")

    def _weight_count(self, rec, ref):
        problem = count_problem(rec["structure"], ref["structure"])
        if problem:
            return problem
        n = counts(ref["structure"])
        return Verdict.ok(f"weights to learn: {n['total']} | attention {n['sa']} | "
                          f"feed-forward {n['ffwd']} | layer norms {n['ln1'] + n['ln2']}")

    def _layer_norms(self, rec, ref):
        return forward_problem(rec, ref) or norms_problem(rec, ref) or Verdict.ok(
            "the attention gets ln1(x), the feed-forward ln2(x + attention), checked with fixed weights")

    def random_problem(self, rec, key="out"):
        if rec.get("x_changed"):     # the second run got another input: it says nothing of dropout
            return None
        return super().random_problem(rec, key)

    def _residuals(self, rec, ref):
        if rec.get("x_changed") and not forward_problem(rec, ref):
            return Verdict.fail(Kind.WRONG_VALUE, (
                "forward changed the tensor it was given: `x += ...` adds in place, overwriting the "
                "block's input (the embeddings, or the previous block's output), which the backward "
                "pass still needs. Write x = x + ..., which makes a new tensor and leaves the input as it was."),
                "input_modified_in_place")
        return forward_problem(rec, ref) or residual_problem(rec, ref) or Verdict.ok(
            "out is x + attention's output + feed-forward's output, checked with fixed weights")

    def _causal(self, rec, ref):
        problem = forward_problem(rec, ref) or forward_problem(rec, ref, "changed_")
        if problem:
            return problem
        return self.causal(rec["out"], rec["changed_out"], (
            f"something in your forward mixes positions. A layer norm over the whole window "
            f"(nn.LayerNorm([{T}, {C}]) or F.layer_norm(x, x.shape[1:])) does: normalise each "
            f"position's {C} numbers alone."), "norm_over_window")


LESSON = BlockLesson()
