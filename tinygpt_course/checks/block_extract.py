"""The half of the block checks that runs the learner's Block and records numbers.

It builds the learner's Block(), describes its layers, loads fixed weights (drawn from ``seed``
by parameter name; the attention's from ``seed + 1`` as in the multihead checks), and runs it
on the batch and on the batch with its last letter changed, recording what the attention and
the feed-forward receive and give back. Everything it returns is plain data.
"""
import torch
from torch import nn

from . import multihead_extract
from .common import build, changed_last_letter, forward_record  # noqa: F401
from .weights import canonical_state

N_EMBD, HIDDEN, LAST = 32, 128, 7


def weight_spec():
    """The Block's own parameters (the attention's come from the multihead spec)."""
    return [("ffwd.0.weight", (HIDDEN, N_EMBD), N_EMBD), ("ffwd.0.bias", (HIDDEN,), N_EMBD),
            ("ffwd.2.weight", (N_EMBD, HIDDEN), HIDDEN), ("ffwd.2.bias", (N_EMBD,), HIDDEN),
            ("ln1.weight", (N_EMBD,), 4), ("ln1.bias", (N_EMBD,), 4),
            ("ln2.weight", (N_EMBD,), 4), ("ln2.bias", (N_EMBD,), 4)]


def fixed_state(seed):
    """{name: tensor}; layer-norm gains near 1 (1 +- 0.5), the two norms different."""
    state = canonical_state(seed, weight_spec())
    for ln in ("ln1", "ln2"):
        state[f"{ln}.weight"] = state[f"{ln}.weight"] + 1
    return state



def describe(m):
    """The structure of a Block object, as plain data."""
    sa, ffwd = getattr(m, "sa", None), getattr(m, "ffwd", None)
    s = {"sa": None if sa is None else type(sa).__name__, "ffwd": None if ffwd is None else type(ffwd).__name__,
         "ffwd_layers": [], "n_params": sum(p.numel() for p in m.parameters()),
         "parts": {name: sum(p.numel() for p in getattr(m, name).parameters())
                   for name in ("sa", "ffwd", "ln1", "ln2") if isinstance(getattr(m, name, None), nn.Module)}}
    if isinstance(ffwd, nn.Sequential):
        for layer in ffwd:
            if isinstance(layer, nn.Linear):
                s["ffwd_layers"].append(["Linear", layer.in_features, layer.out_features])
            else:
                s["ffwd_layers"].append([type(layer).__name__])
    for ln in ("ln1", "ln2"):
        layer = getattr(m, ln, None)
        s[ln] = None if layer is None else type(layer).__name__
        s[ln + "_shape"] = list(layer.normalized_shape) if isinstance(layer, nn.LayerNorm) else None
    s["sa_loadable"] = isinstance(sa, nn.Module) and multihead_extract.loadable(multihead_extract.describe(sa))
    return s


FFWD_LAYERS = [["Linear", N_EMBD, HIDDEN], ["ReLU"], ["Linear", HIDDEN, N_EMBD]]


def loadable(s):
    return (s["sa_loadable"] and s["ffwd_layers"] == FFWD_LAYERS
            and s["ln1_shape"] == [N_EMBD] and s["ln2_shape"] == [N_EMBD])


def load_fixed_weights(m, seed):
    state = fixed_state(seed)
    for name, tensor in state.items():
        m.get_parameter(name).copy_(tensor)
    multihead_extract.load_fixed_weights(m.sa, seed + 1)


def _run(m, x, rec, prefix):
    seen = {}

    def keep(name):
        def hook(layer, inputs, output):
            if name + "_in" not in seen and torch.is_tensor(inputs[0]) and torch.is_tensor(output):
                seen[name + "_in"], seen[name + "_out"] = inputs[0].detach().clone(), output.detach().clone()
        return hook

    hooks = [getattr(m, name).register_forward_hook(keep(name)) for name in ("sa", "ffwd")]
    forward_record(m, x, rec, prefix, hooks)
    for key, value in seen.items():
        rec[prefix + key] = value


def extract(Block, embed, xb, seed):
    """Run the learner's Block under fixed weights; return what the judge needs."""
    rec = {"seed": int(seed)}
    with torch.random.fork_rng(), torch.no_grad():
        torch.manual_seed(int(seed))
        m = build(Block, describe, rec, "Block")
        if m is None or not loadable(rec["structure"]):
            return rec
        load_fixed_weights(m, seed)
        _run(m, embed(xb), rec, "")
        _run(m, embed(changed_last_letter(xb)), rec, "changed_")
    return rec
