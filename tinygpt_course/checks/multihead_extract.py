"""The half of the multihead checks that runs the learner's MultiHead and records numbers.

It builds the learner's MultiHead, describes its structure, loads fixed weights (drawn from
``seed`` by parameter name) and runs it on the batch and on the batch with its last letter
changed. Everything it returns is plain data (str, int, bool, lists, tensors), so it can be
written to a file by a sandboxed process and judged elsewhere.
"""
import torch
from torch import nn

from .common import build, changed_last_letter, forward_record  # noqa: F401
from .weights import canonical_state

N_EMBD, HEAD_SIZE, N_HEADS, LAST = 32, 16, 2, 7


def weight_spec():
    """The parameters the lesson's MultiHead has, with their shapes and fan-ins."""
    spec = []
    for i in range(N_HEADS):
        for part in ("key", "query", "value"):
            spec.append((f"heads.{i}.{part}.weight", (HEAD_SIZE, N_EMBD), N_EMBD))
    spec += [("proj.weight", (N_EMBD, N_EMBD), N_EMBD), ("proj.bias", (N_EMBD,), N_EMBD)]
    return spec




def describe(m):
    """The structure of a MultiHead object, as plain data."""
    heads = getattr(m, "heads", None)
    proj = getattr(m, "proj", None)
    s = {"heads_type": None if heads is None else type(heads).__name__,
         "heads_registered": isinstance(heads, nn.ModuleList),
         "n_heads": None, "distinct_heads": None, "head_sizes": [],
         "heads_are_Head": False,
         "proj_type": None if proj is None else type(proj).__name__,
         "proj_shape": None, "proj_bias": None,
         "n_params": sum(p.numel() for p in m.parameters())}
    if heads is not None and hasattr(heads, "__len__") and hasattr(heads, "__iter__"):
        items = list(heads)
        s["n_heads"] = len(items)
        s["distinct_heads"] = len({id(x) for x in items})
        s["heads_are_Head"] = all(type(x).__name__ == "Head" for x in items)
        s["head_sizes"] = [getattr(getattr(x, "key", None), "out_features", None) for x in items]
    if isinstance(proj, nn.Linear):
        s["proj_shape"] = [proj.in_features, proj.out_features]
        s["proj_bias"] = proj.bias is not None
    return s


def loadable(s):
    """Can the fixed weights be loaded? (two heads of 16 with key/query/value, a 32x32 Linear)"""
    return (s["n_heads"] == N_HEADS and s["heads_are_Head"]
            and s["head_sizes"] == [HEAD_SIZE] * N_HEADS and s["proj_shape"] == [N_EMBD, N_EMBD])


def load_fixed_weights(m, seed):
    state = canonical_state(seed, weight_spec())
    for i, head in enumerate(m.heads):
        for part in ("key", "query", "value"):
            getattr(head, part).weight.copy_(state[f"heads.{i}.{part}.weight"])
    m.proj.weight.copy_(state["proj.weight"])
    if m.proj.bias is not None:
        m.proj.bias.copy_(state["proj.bias"])


def _run(m, x, rec, prefix):
    """One forward pass, recording what each head gave and what proj received."""
    calls, proj_in = [], []
    first = {}  # one hook per distinct head: the same object stored twice runs one hook
    for k, head in enumerate(m.heads):
        first.setdefault(id(head), (k, head))
    hooks = [head.register_forward_hook(lambda mod, i, o, k=k: calls.append((k, o)))
             for k, head in first.values()]
    hooks.append(m.proj.register_forward_pre_hook(lambda mod, i: proj_in.append(i[0])))
    forward_record(m, x, rec, prefix, hooks)
    rec[prefix + "head_calls"] = [k for k, _ in calls]
    rec[prefix + "head_outs"] = [o.detach().clone() for _, o in calls if torch.is_tensor(o)]
    rec[prefix + "proj_in"] = [t.detach().clone() for t in proj_in if torch.is_tensor(t)]


def extract(MultiHead, embed, xb, seed):
    """Run the learner's MultiHead under fixed weights; return what the judge needs."""
    rec = {"seed": int(seed)}
    with torch.random.fork_rng(), torch.no_grad():
        torch.manual_seed(int(seed))  # the learner's own draws are overwritten anyway
        m = build(MultiHead, describe, rec, "MultiHead")
        if m is None or not loadable(rec["structure"]):
            return rec
        load_fixed_weights(m, seed)
        h = embed(xb)
        _run(m, h, rec, "")
        rec["head_weights"] = [head.weights[0].detach().clone()
                               if torch.is_tensor(getattr(head, "weights", None)) else None
                               for head in m.heads]
        _run(m, embed(changed_last_letter(xb)), rec, "changed_")
    return rec
