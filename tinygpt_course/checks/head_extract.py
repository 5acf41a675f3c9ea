"""The half of the head checks that runs the learner's Head and records numbers.

It builds the learner's Head(16), describes its layers and buffers, loads fixed weights (drawn
from ``seed`` by parameter name) into key, query and value, and runs it on the batch and on the
batch with its last letter changed. Everything it returns is plain data (str, int, bool, dicts,
lists, tensors), so a sandboxed process can write it to a file for a judge elsewhere.
"""
import torch
from torch import nn

from .common import build, changed_last_letter, forward_record  # noqa: F401
from .weights import canonical_state

N_EMBD, HEAD_SIZE, BLOCK_SIZE, LAST = 32, 16, 8, 7
PARTS = ("key", "query", "value")


def weight_spec():
    """The parameters the lesson's Head has, with their shapes and fan-ins."""
    return [(f"{part}.weight", (HEAD_SIZE, N_EMBD), N_EMBD) for part in PARTS]




def describe(m):
    """The structure of a Head object, as plain data."""
    s = {"n_params": sum(p.numel() for p in m.parameters()),
         "params": {n: list(p.shape) for n, p in m.named_parameters()},
         "buffers": {n: list(b.shape) for n, b in m.named_buffers()},
         "plain_tensors": sorted(k for k, v in vars(m).items() if torch.is_tensor(v)),
         "layers": {}}
    for part in PARTS:
        layer = getattr(m, part, None)
        info = {"type": None if layer is None else type(layer).__name__}
        if isinstance(layer, nn.Linear):
            info.update(shape=[layer.in_features, layer.out_features], bias=layer.bias is not None)
        s["layers"][part] = info
    return s


def loadable(s):
    """Can the fixed weights be loaded? (key, query and value are nn.Linear(32, 16))"""
    return all(s["layers"][p].get("shape") == [N_EMBD, HEAD_SIZE] for p in PARTS)


def load_fixed_weights(m, seed):
    state = canonical_state(seed, weight_spec())
    for part in PARTS:
        layer = getattr(m, part)
        layer.weight.copy_(state[f"{part}.weight"])
        if layer.bias is not None:
            layer.bias.zero_()  # the structure check reports the bias; the values ignore it


def _run(m, x, rec, prefix):
    forward_record(m, x, rec, prefix)
    if prefix + "error" in rec and "not a tensor" not in rec[prefix + "error"]:
        return
    w = getattr(m, "weights", None)
    rec[prefix + "weights"] = w.detach().clone() if torch.is_tensor(w) else None


def extract(Head, embed, xb, seed):
    """Run the learner's Head under fixed weights; return what the judge needs."""
    rec = {"seed": int(seed)}
    with torch.random.fork_rng(), torch.no_grad():
        torch.manual_seed(int(seed))
        m = build(Head, describe, rec, "Head", HEAD_SIZE)
        if m is None or not loadable(rec["structure"]):
            return rec
        load_fixed_weights(m, seed)
        _run(m, embed(xb), rec, "")
        _run(m, embed(changed_last_letter(xb)), rec, "changed_")
    return rec
