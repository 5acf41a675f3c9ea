"""The trusted half of the multihead checks: expected numbers and diagnoses.

``judge(name, rec, Head, embed, xb)`` compares what ``extract`` recorded with what the given
Head class computes under the same fixed weights, and returns (passed, message). It never
runs the learner's code: ``rec`` is plain data.
"""
import torch
import torch.nn.functional as F

from .multihead_extract import HEAD_SIZE, N_EMBD, N_HEADS, changed_last_letter, weight_spec
from .weights import canonical_state

EXPECTED_PARAMS = N_HEADS * 3 * N_EMBD * HEAD_SIZE + N_EMBD * N_EMBD + N_EMBD  # 4128
ATOL = 1e-5

UNANSWERED = ("MultiHead is still unanswered: replace the `raise NotImplementedError()` lines "
              "in __init__ and forward with your code (the hint is above the answer cell).")


def expected(rec, Head, embed, xb):
    """What the lesson's MultiHead gives under the fixed weights of rec['seed']."""
    state = canonical_state(rec["seed"], weight_spec())
    with torch.random.fork_rng(), torch.no_grad():
        heads = [Head(HEAD_SIZE) for _ in range(N_HEADS)]
        for i, head in enumerate(heads):
            for part in ("key", "query", "value"):
                getattr(head, part).weight.copy_(state[f"heads.{i}.{part}.weight"])

        def run(x):
            outs = [head(x) for head in heads]
            joined = torch.cat(outs, dim=-1)
            return outs, joined, F.linear(joined, state["proj.weight"], state["proj.bias"])

        outs, joined, out = run(embed(xb))
        weights = [head.weights[0].clone() for head in heads]
        _, _, changed_out = run(embed(changed_last_letter(xb)))
    return {"outs": outs, "joined": joined, "out": out, "weights": weights,
            "changed_out": changed_out, "state": state}


def structure_problem(s, for_count=False):
    """The first thing wrong with how MultiHead stores its layers, or None."""
    n = s["n_params"]
    if s["heads_type"] is None:
        return "MultiHead has no self.heads: store the two heads in an attribute called self.heads."
    if s["heads_type"] in ("list", "tuple"):
        if for_count or not s["heads_registered"]:
            return (f"self.heads is a plain Python {s['heads_type']}, so PyTorch does not look inside "
                    f"it: parameters() finds only {n} weights to learn, not {EXPECTED_PARAMS}, and "
                    "the heads would never be trained. Wrap the list: nn.ModuleList([...]).")
    if s["n_heads"] != N_HEADS:
        return f"self.heads holds {s['n_heads']} heads; the lesson uses two Head(16)."
    if not s["heads_are_Head"]:
        return "self.heads should hold Head objects (the class from the cell above): Head(16)."
    if s["distinct_heads"] != N_HEADS:
        return ("self.heads holds one Head object twice (as `[Head(16)] * 2` or `[head, head]` do): "
                "both entries are the same head with the same weights. Create each head "
                "separately, for example with a loop or a comprehension.")
    if s["head_sizes"] != [HEAD_SIZE] * N_HEADS:
        return (f"the heads have size {s['head_sizes']}: each head must give {HEAD_SIZE} numbers "
                f"so that two of them joined side by side give {N_EMBD}, the size of the input. "
                "Use Head(16).")
    if s["proj_type"] is None:
        return "MultiHead has no self.proj: add the projection, nn.Linear(n_embd, n_embd)."
    if s["proj_shape"] != [N_EMBD, N_EMBD]:
        return (f"self.proj should be nn.Linear(n_embd, n_embd), from 32 numbers to 32; "
                f"yours is {s['proj_type']} {s['proj_shape']}.")
    if not s["proj_bias"]:
        return (f"self.proj has no bias (bias=False): the lesson's projection keeps nn.Linear's "
                f"default bias, which gives {EXPECTED_PARAMS} weights to learn, not {n}.")
    return None


def forward_problem(rec, exp, prefix=""):
    """What is wrong with the forward pass, or None."""
    err = rec.get(prefix + "error")
    proj_in = rec.get(prefix + "proj_in") or []
    calls = rec.get(prefix + "head_calls") or []
    if err and "NotImplementedError" in err:
        return UNANSWERED
    if proj_in and proj_in[0].shape[-1] != N_EMBD:
        shape = list(proj_in[0].shape)
        if shape[-1] == HEAD_SIZE and len(proj_in[0].shape) == 3 and shape[:2] == [32, 8]:
            return ("self.proj received 16 numbers per position, not 32: the heads' outputs were "
                    "added or averaged (or only one head passed on). Join them side by side with "
                    "torch.cat(..., dim=-1).")
        return (f"self.proj received a tensor of shape {shape}: the heads were joined along the "
                "wrong dimension. Join along the last one, dim=-1, so each position gets 16 + 16 "
                "numbers.")
    if err:
        return f"forward raised {err}"
    if sorted(calls) != list(range(N_HEADS)):
        return (f"forward ran the heads {[k + 1 for k in calls]} (by number): each of the two heads "
                "should run once on x. Loop over self.heads rather than naming one head twice.")
    if not proj_in:
        return "forward never calls self.proj: pass the joined heads through it and return the result."
    got, joined = proj_in[0], exp["joined"]
    if got.shape == joined.shape and not torch.allclose(got, joined, atol=ATOL):
        if torch.allclose(got, torch.cat(exp["outs"][::-1], dim=-1), atol=ATOL):
            return ("the heads are joined in the wrong order: head 1's 16 numbers come first, "
                    "then head 2's, the order of self.heads.")
        for name, act in (("ReLU", F.relu), ("tanh", torch.tanh), ("GELU", F.gelu), ("softmax", lambda t: F.softmax(t, -1))):
            if torch.allclose(got, act(joined), atol=ATOL):
                return f"an extra {name} before the projection: join the heads and pass them to self.proj as they are."
        return "self.proj did not receive the two heads' outputs joined side by side (torch.cat of [head 1, head 2] on x)."
    out = rec.get(prefix + "out")
    if out is None or out.shape != exp["out"].shape:
        return f"forward gave {None if out is None else list(out.shape)}, expected [32, 8, 32]."
    if not torch.allclose(out, exp["out"], atol=ATOL):
        for name, act in (("ReLU", F.relu), ("tanh", torch.tanh), ("GELU", F.gelu)):
            if torch.allclose(out, act(exp["out"]), atol=ATOL):
                return f"an extra {name} after the projection: forward should return self.proj(...) as it is."
        return "forward's result is not self.proj of the joined heads: return self.proj(joined) itself."
    return None
