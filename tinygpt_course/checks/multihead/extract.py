"""The learner side of the multihead checks: runs the learner's MultiHead, records raw numbers.

It builds the learner's MultiHead, records how it stores its layers (names, types, shapes),
loads fixed weights drawn from ``seed`` by parameter name and runs it on the batch and on the
batch with its last letter changed, recording what each head gave, what the projection received
and what came out. A record holds only plain data (str, int, bool, lists, dicts, tensors) and
no verdicts: the trusted judge derives every fact from it.
"""
import torch
from torch import nn

from ...config import SIZES
from ..common import changed_last_letter, evaluating, forward_record, gradients, on_call, probe, run_fixed
from ..weights import canonical_state


def weight_spec():
    """The parameters the lesson's MultiHead has, with their shapes and fan-ins."""
    spec = []
    for i in range(SIZES.n_heads):
        for part in ("key", "query", "value"):
            spec.append((f"heads.{i}.{part}.weight", (SIZES.head_size, SIZES.n_embd), SIZES.n_embd))
    spec += [("proj.weight", (SIZES.n_embd, SIZES.n_embd), SIZES.n_embd),
             ("proj.bias", (SIZES.n_embd,), SIZES.n_embd)]
    return spec


def describe(m):
    """How a MultiHead object stores its layers, as raw observations."""
    heads, proj = getattr(m, "heads", None), getattr(m, "proj", None)
    s = {"heads_type": None if heads is None else type(heads).__name__,
         "params": [[name, list(p.shape)] for name, p in m.named_parameters()],
         "head_types": None, "head_first_index": None, "head_key_sizes": None,
         "proj_type": None if proj is None else type(proj).__name__,
         "proj_features": None, "proj_has_bias": None}
    if heads is not None and hasattr(heads, "__len__") and hasattr(heads, "__iter__"):
        items = list(heads)
        s["head_types"] = [type(x).__name__ for x in items]
        ids = [id(x) for x in items]
        s["head_first_index"] = [ids.index(i) for i in ids]   # the same object twice shows
        s["head_key_sizes"] = [getattr(getattr(x, "key", None), "out_features", None) for x in items]
    if isinstance(proj, nn.Linear):
        s["proj_features"] = [proj.in_features, proj.out_features]
        s["proj_has_bias"] = proj.bias is not None
    return s


def loadable(s):
    """Can the fixed weights be loaded? (two Heads of 16 with key/query/value, a 32x32 Linear)"""
    return (s["head_types"] == ["Head"] * SIZES.n_heads
            and s["head_key_sizes"] == [SIZES.head_size] * SIZES.n_heads
            and s["proj_features"] == [SIZES.n_embd, SIZES.n_embd])


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
    hooks = [on_call(head, post=lambda mod, i, o, k=k: calls.append((k, o)))
             for k, head in first.values()]
    hooks.append(on_call(m.proj, pre=lambda mod, i: proj_in.append(i[0])))
    forward_record(m, x, rec, prefix, hooks)
    rec[prefix + "head_calls"] = [k for k, _ in calls]
    rec[prefix + "head_outs"] = [o.detach().clone() for _, o in calls if torch.is_tensor(o)]
    rec[prefix + "proj_in"] = [t.detach().clone() for t in proj_in if torch.is_tensor(t)]


def extract(ns, seed):
    """Run ns['MultiHead'] under fixed weights on ns['xb']; return the raw record."""
    embed, xb = ns["embed"], ns["xb"]

    def measure(m, rec):
        x = embed(xb)
        _run(m, x, rec, "")
        rec["head_weights"] = [head.weights[0].detach().clone()
                               if torch.is_tensor(getattr(head, "weights", None)) else None
                               for head in m.heads]
        forward_record(m, x, rec, "again_")      # two runs differ when dropout is left on
        # each stored head run on x alone (as the printout does), and the stored projection on
        # them joined: what the layers __init__ built compute, whatever forward does with them
        with evaluating(m):
            alone = rec["alone_outs"] = [probe(lambda head=head: head(x)) for head in m.heads]
            rec["proj_probe"] = probe(lambda: m.proj(torch.cat(alone, dim=-1)))
        _run(m, embed(changed_last_letter(xb)), rec, "changed_")
        gradients(m, lambda: m(x), rec)          # does training reach every weight?

    return run_fixed(ns["MultiHead"], describe, loadable, load_fixed_weights, seed, measure)
