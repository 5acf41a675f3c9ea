"""The trusted half of the head checks: expected numbers and diagnoses.

The expected weights come from PyTorch's own ``F.scaled_dot_product_attention`` (given the
identity matrix as values, it hands back the attention weights themselves), so this module
never spells out a Head. ``rec`` is plain data: the judge never runs the learner's code.
"""
import torch
import torch.nn.functional as F

from .head_extract import BLOCK_SIZE, HEAD_SIZE, N_EMBD, PARTS, changed_last_letter, weight_spec
from .weights import canonical_state

EXPECTED_PARAMS = 3 * N_EMBD * HEAD_SIZE  # 1536
ATOL = 1e-5
UNANSWERED = ("Head is still unanswered: replace the `raise NotImplementedError()` lines in "
              "__init__ and forward with your code (the hint is above the answer cell).")


def attention(q, k, v, scale=None):
    return F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scale)


def expected(seed, embed, xb):
    """What the lesson's Head gives under the fixed weights of `seed`, and near misses."""
    state = canonical_state(seed, weight_spec())
    with torch.no_grad():
        x, x2 = embed(xb), embed(changed_last_letter(xb))
        k, q, v = (F.linear(x, state[f"{p}.weight"]) for p in PARTS)
        eye = torch.eye(x.shape[1]).expand(x.shape[0], -1, -1)
        return {
            "value": v, "weights": attention(q, k, eye), "out": attention(q, k, v),
            "changed_out": attention(*(F.linear(x2, state[f"{p}.weight"]) for p in ("query", "key", "value"))),
            "misses": [  # (weights a known mistake gives, what to tell the learner)
                (attention(q, k, eye, scale=1.0), "the scores are not scaled: multiply q @ k^T by "
                 "head_size ** -0.5 (divide by 4 for a head of 16) before the mask and the softmax."),
                (attention(q, k, eye, scale=N_EMBD ** -0.5), "the scores are scaled by 1/sqrt(32), "
                 "the size of x: scale by 1/sqrt(head_size), the size of the keys, 1/sqrt(16)."),
                (attention(q, k, eye, scale=1 / HEAD_SIZE), "the scores are divided by 16: divide by "
                 "sqrt(16) = 4, or multiply by head_size ** -0.5."),
                (attention(q, k, eye, scale=HEAD_SIZE ** 0.5), "the scores are multiplied by sqrt(16): "
                 "multiply by head_size ** -0.5 (the minus matters)."),
                (attention(k, q, eye), "query and key are swapped: the scores are q @ k^T, the queries "
                 "(what each position looks for) against the keys (what each position offers)."),
                (attention(q, v, eye), "the scores use value instead of key: q @ k^T, with k = self.key(x)."),
            ]}


def structure_problem(s, for_count=False):
    """The first thing wrong with Head's layers and mask, or None."""
    for part in PARTS:
        info = s["layers"][part]
        if info["type"] is None:
            return f"Head has no self.{part}: add self.{part} = nn.Linear(n_embd, head_size, bias=False)."
        if info["type"] != "Linear":
            return f"self.{part} is a {info['type']}; make it nn.Linear(n_embd, head_size, bias=False)."
        if info["shape"] != [N_EMBD, HEAD_SIZE]:
            return (f"self.{part} maps {info['shape'][0]} numbers to {info['shape'][1]}: it should be "
                    f"nn.Linear(n_embd, head_size), from 32 to the head_size passed in, 16.")
    biased = [p for p in PARTS if s["layers"][p]["bias"]]
    if biased and for_count:
        return (f"self.{biased[0]} has a bias: the lesson's layers are nn.Linear(..., bias=False), "
                f"{EXPECTED_PARAMS} weights to learn, not {s['n_params']}.")
    if not for_count:
        return None
    masks = [n for n, shape in s["params"].items() if shape == [BLOCK_SIZE, BLOCK_SIZE]]
    if masks:
        return (f"the mask self.{masks[0]} is an nn.Parameter, so the optimiser would change it: "
                "register it with self.register_buffer('tril', ...) instead.")
    if s["n_params"] != EXPECTED_PARAMS:
        return f"weights to learn: {s['n_params']}, expected {EXPECTED_PARAMS} (3 layers x 32 x 16)."
    if [BLOCK_SIZE, BLOCK_SIZE] not in s["buffers"].values():
        plain = [n for n in s["plain_tensors"]]
        how = f"self.{plain[0]} is a plain tensor attribute" if plain else "Head has no mask buffer"
        return (f"{how}: register the mask with self.register_buffer('tril', torch.tril(torch.ones("
                "block_size, block_size))), so it is saved with the model and moves with .to(device).")
    return None


def weights_problem(rec, prefix=""):
    """What is wrong with the recorded weights as weights (shape, rows, mask), or None."""
    if rec.get(prefix + "error"):
        err = rec[prefix + "error"]
        return UNANSWERED if "NotImplementedError" in err else f"forward raised {err}"
    w = rec.get(prefix + "weights")
    if w is None:
        return ("Head kept no attention weights: store the softmax's result in self.weights "
                "(self.weights = F.softmax(...)) before using it.")
    if list(w.shape) != [32, BLOCK_SIZE, BLOCK_SIZE]:
        return f"self.weights is {list(w.shape)}, expected [32, 8, 8]: one weight per (position, position)."
    rows_ok = torch.allclose(w.sum(-1), torch.ones(w.shape[:2]), atol=1e-4)
    if not rows_ok and torch.allclose(w.sum(-2), torch.ones(w.shape[0], w.shape[2]), atol=1e-4):
        return ("the softmax runs over the wrong dimension: the columns add up to 1, not the rows. "
                "Use F.softmax(scores, dim=-1), so each position's weights add up to 1.")
    if not torch.all(w.triu(1).abs() < 1e-6):
        if torch.all(w.tril(-1).abs() < 1e-6):
            return ("the mask hides the past instead of the future: fill the scores where "
                    "self.tril[:T, :T] == 0 (above the diagonal), from torch.tril, not torch.triu.")
        return ("positions see the future: the weights above the diagonal are not 0. Before the "
                "softmax, fill the scores where self.tril[:T, :T] == 0 with float('-inf') "
                "(0 is not enough: exp(0) = 1).")
    if not rows_ok:
        return ("the rows do not add up to 1: the mask was applied after the softmax. Mask the "
                "scores with float('-inf') first, then take the softmax.")
    return None


def value_problem(rec, exp, w, prefix=""):
    """What is wrong with out, given the learner's own weights w, or None."""
    out = rec.get(prefix + "out")
    if out is None or list(out.shape) != [32, BLOCK_SIZE, HEAD_SIZE]:
        got = None if out is None else list(out.shape)
        if got == [32, BLOCK_SIZE, N_EMBD]:
            return ("out has 32 numbers per position: it averaged x itself. Average the "
                    "values, self.value(x), with the weights instead.")
        return f"out should be [32, 8, 16]; yours is {got}."
    if torch.allclose(out, exp["value"], atol=ATOL):
        return ("out is value(x) itself: return the values averaged with the weights (the matrix "
                "product of self.weights and the values).")
    if not torch.allclose(out, w @ exp["value"], atol=ATOL):
        return "out is not the head's weights times its values: average self.value(x) with self.weights."
    return None
