"""The trusted half of the block checks: each part of the Block checked against its input.

The judge never computes a whole Block. It takes what the learner's Block handed to its
attention and to its feed-forward (recorded by extract) and checks each hand-over on its own:
the layer norm's output, the layer's output, the sum. ``rec`` is plain data.
"""
import torch
import torch.nn.functional as F

from . import multihead_extract
from .block_extract import FFWD_LAYERS, HIDDEN, N_EMBD, fixed_state

ATOL = 1e-5
UNANSWERED = ("Block is still unanswered: replace the `raise NotImplementedError()` lines in "
              "__init__ and forward with your code (the hint is above the answer cell).")


def close(a, b):
    return a is not None and b is not None and a.shape == b.shape and torch.allclose(a, b, atol=ATOL)


def layers(seed, MultiHead):
    """The Block's parts under the fixed weights of `seed`, as functions."""
    state = fixed_state(seed)
    with torch.random.fork_rng():
        sa = MultiHead()
    with torch.no_grad():
        multihead_extract.load_fixed_weights(sa, seed + 1)

    def ln(name):
        return lambda x: F.layer_norm(x, (N_EMBD,), state[f"{name}.weight"], state[f"{name}.bias"])

    def ffwd(x):
        return F.linear(F.relu(F.linear(x, state["ffwd.0.weight"], state["ffwd.0.bias"])),
                        state["ffwd.2.weight"], state["ffwd.2.bias"])

    def attention(x):
        with torch.no_grad():
            return sa(x)
    return {"ln1": ln("ln1"), "ln2": ln("ln2"), "ffwd": ffwd, "sa": attention}


def expected_params(MultiHead):
    sa = sum(p.numel() for p in MultiHead().parameters())
    ffwd = N_EMBD * HIDDEN + HIDDEN + HIDDEN * N_EMBD + N_EMBD
    return {"sa": sa, "ffwd": ffwd, "ln1": 2 * N_EMBD, "ln2": 2 * N_EMBD}


def structure_problem(s, MultiHead):
    """The first thing wrong with how Block stores its layers, or None."""
    if s["sa"] is None:
        return "Block has no self.sa: store the attention, MultiHead(), in self.sa."
    if not s["sa_loadable"]:
        return "self.sa should be the MultiHead from the set-up cell, built with its defaults: MultiHead()."
    if s["ffwd"] is None:
        return "Block has no self.ffwd: store the feed-forward, an nn.Sequential, in self.ffwd."
    if s["ffwd"] != "Sequential":
        return f"self.ffwd is a {s['ffwd']}: make it nn.Sequential(Linear, ReLU, Linear)."
    got = s["ffwd_layers"]
    if [layer[0] for layer in got] == ["Linear", "Linear"]:
        return ("self.ffwd has no ReLU between its two Linear layers: without it the two layers "
                "are one linear map in disguise. nn.Sequential(Linear(32, 128), nn.ReLU(), Linear(128, 32)).")
    if len(got) == 3 and got[1] != ["ReLU"] and got[0][0] == got[2][0] == "Linear":
        return f"self.ffwd uses {got[1][0]} between its layers; the lesson uses nn.ReLU()."
    if got != FFWD_LAYERS:
        return (f"self.ffwd is {got}: it should widen each position's 32 numbers to 4 x 32 = 128, "
                "apply nn.ReLU() and narrow back to 32: Linear(32, 128), ReLU, Linear(128, 32).")
    for ln in ("ln1", "ln2"):
        if s[ln] is None:
            return f"Block has no self.{ln}: add self.{ln} = nn.LayerNorm(n_embd)."
        if s[ln + "_shape"] != [N_EMBD]:
            return f"self.{ln} is {s[ln]} {s[ln + '_shape']}: make it nn.LayerNorm(n_embd), over the 32 numbers."
    want = expected_params(MultiHead)
    for name, n in want.items():
        if s["parts"].get(name) != n:
            return f"self.{name} has {s['parts'].get(name)} weights to learn, expected {n}."
    if s["n_params"] != sum(want.values()):
        return (f"weights to learn: {s['n_params']}, expected {sum(want.values())}: the Block holds "
                "layers besides sa, ffwd, ln1 and ln2.")
    return None


def forward_problem(rec, prefix=""):
    err = rec.get(prefix + "error")
    if err:
        return UNANSWERED if "NotImplementedError" in err else f"forward raised {err}"
    out = rec.get(prefix + "out")
    if out is None or list(out.shape) != [32, 8, N_EMBD]:
        return f"out should be [32, 8, 32], the shape of x; yours is {None if out is None else list(out.shape)}."
    if rec.get(prefix + "sa_in") is None:
        return "forward never calls self.sa: the attention must run on (a layer norm of) x."
    if rec.get(prefix + "ffwd_in") is None:
        return "forward never calls self.ffwd: the feed-forward must run after the attention."
    return None


def norms_problem(rec, x, f):
    sa_in, sa_out, ffwd_in = rec["sa_in"], rec["sa_out"], rec["ffwd_in"]
    if not close(sa_in, f["ln1"](x)):
        if close(sa_in, x):
            return ("the attention gets x itself: give it self.ln1(x). (A layer norm after the "
                    "addition is the original Transformer's order; GPT-2 and this course normalise "
                    "each layer's input instead.)")
        if close(sa_in, f["ln2"](x)):
            return "ln1 and ln2 are swapped: self.ln1 goes before the attention, self.ln2 before the feed-forward."
        return "the attention does not get self.ln1(x)."
    if close(ffwd_in, f["ln2"](x + sa_out)):
        return None
    if close(ffwd_in, x + sa_out):
        return "the feed-forward gets x without its layer norm: give it self.ln2(x)."
    if close(ffwd_in, f["ln2"](x)):
        return ("the feed-forward gets self.ln2 of the block's input: first add the attention's "
                "output to x (x = x + ...), then give the feed-forward self.ln2 of the new x.")
    if close(ffwd_in, f["ln2"](sa_out)) or close(ffwd_in, f["ln1"](sa_out)):
        return ("the feed-forward gets only the attention's output: add it to x first "
                "(x = x + ...), so the letter's own vector is not lost.")
    if close(ffwd_in, f["ln1"](x + sa_out)):
        return "the feed-forward's input went through self.ln1: use self.ln2 before the feed-forward."
    return "the feed-forward does not get self.ln2 of x plus the attention's output."


def residual_problem(rec, x, f):
    out, sa_out, ffwd_out = rec["out"], rec["sa_out"], rec["ffwd_out"]
    if close(out, x + sa_out + ffwd_out):
        return None
    if close(out, ffwd_out):
        return ("out is the feed-forward's output alone: add each layer's output to its input "
                "(x = x + ...), the residual connections.")
    if close(out, sa_out + ffwd_out):
        return ("the attention's residual is missing: add the attention's output to x "
                "(x = x + ...) instead of replacing x with it.")
    if close(out, x + sa_out):
        return "the feed-forward's output is never added: add it to x as well, then return x."
    if close(out, x + ffwd_out):
        return "the attention's output is never added to x: add it (x = x + ...) before the feed-forward."
    for name in ("ln1", "ln2"):
        if close(out, f[name](x + sa_out + ffwd_out)):
            return ("out went through a layer norm after the additions: return x as it is after "
                    "the second addition; the layer norms go before each layer.")
    return "out is not x + attention's output + feed-forward's output."
