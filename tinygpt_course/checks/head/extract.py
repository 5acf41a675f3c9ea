"""The learner side of the head checks: runs the learner's Head, records raw numbers.

It builds the learner's Head(head_size), records how it stores its layers and its mask (names,
types, shapes), loads fixed weights drawn from ``seed`` by parameter name and runs it on the
batch and on the batch with its last letter changed. For each run it records what came out,
the attention weights the head kept, and what its key, query and value layers gave (the judge
derives its diagnoses from the solution's q, k and v). A record holds only plain data and no
verdicts: the trusted judge derives every fact from it.
"""
import torch
from torch import nn

from ...config import SIZES
from ..common import (changed_last_letter, evaluating, forward_record, gradients, on_call, probe, run_fixed,
                      watching)
from ..weights import canonical_state

PARTS = ("key", "query", "value")     # the task's order, which is also the order of the draws
SHORT = {"key": "k", "query": "q", "value": "v"}


def weight_spec():
    """The parameters the lesson's Head has, with their shapes and fan-ins."""
    return [(f"{part}.weight", (SIZES.head_size, SIZES.n_embd), SIZES.n_embd) for part in PARTS]


def describe(m):
    """How a Head object stores its layers and its mask, as raw observations."""
    s = {"params": [[name, list(p.shape)] for name, p in m.named_parameters()],
         "buffers": [[name, list(b.shape)] for name, b in m.named_buffers()],
         "plain_tensors": [[name, list(v.shape)] for name, v in vars(m).items() if torch.is_tensor(v)],
         "layers": {}}
    for part in PARTS:
        layer = getattr(m, part, None)
        linear = isinstance(layer, nn.Linear)
        s["layers"][part] = {"type": None if layer is None else type(layer).__name__,
                             "features": [layer.in_features, layer.out_features] if linear else None,
                             "has_bias": (layer.bias is not None) if linear else None}
    return s


def loadable(s):
    """Can the fixed weights be loaded? (the parameters are exactly the spec's)"""
    return sorted(s["params"]) == sorted([name, list(shape)] for name, shape, _ in weight_spec())


def load_fixed_weights(m, seed):
    for name, tensor in canonical_state(seed, weight_spec()).items():
        m.get_parameter(name).copy_(tensor)


def _run(m, x, rec, prefix):
    """One forward pass, recording out, the kept weights and the first output of each layer."""
    seen = {}

    def keep(part):
        def hook(layer, inputs, output):
            if torch.is_tensor(output):
                seen.setdefault(SHORT[part], output.detach().clone())
        return hook

    hooks = [on_call(getattr(m, part), post=keep(part)) for part in PARTS]
    with watching(rec, prefix):
        forward_record(m, x, rec, prefix, hooks)
    w = getattr(m, "weights", None)
    rec[prefix + "weights"] = w.detach().clone() if torch.is_tensor(w) else None
    for key, value in seen.items():
        rec[prefix + key] = value


WINDOW = 5   # letters in the short window: generate gives the model windows shorter than 8


def extract(ns, seed):
    """Run ns['Head'] under fixed weights on ns['xb'], on its first WINDOW letters alone, again on
    the same batch (two runs differ when something random, dropout, is left on) and on the
    batch with its last letter changed; return the raw record."""
    embed, xb = ns["embed"], ns["xb"]

    def measure(m, rec):
        x = embed(xb)
        # each stored layer run alone on x: what the layers __init__ built compute
        with evaluating(m):
            rec["alone"] = {SHORT[part]: probe(lambda part=part: getattr(m, part)(x)) for part in PARTS}
        _run(m, x, rec, "")
        _run(m, x, rec, "again_")
        _run(m, x[:, :WINDOW], rec, "short_")
        _run(m, embed(changed_last_letter(xb)), rec, "changed_")
        gradients(m, lambda: m(x), rec)          # does training reach every weight?

    return run_fixed(ns["Head"], describe, loadable, load_fixed_weights, seed, measure, SIZES.head_size)
