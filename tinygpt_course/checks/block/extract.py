"""The learner side of the block checks: runs the learner's Block, records raw numbers.

It builds the learner's Block(), records how it stores its layers (names, types, shapes), loads
fixed weights, attention included, drawn from ``seed`` by parameter name from one spec, and runs
it on the batch and on the batch with its last letter changed. For each run it records the
block's input, what its attention and its feed-forward received and gave back, and what came
out; and the layer norms' gains and shifts it loaded. A record holds only plain data and no
verdicts: the trusted judge derives every fact from it.
"""
import torch
from torch import nn

from ...config import SIZES
from ..common import changed_last_letter, evaluating, forward_record, gradients, on_call, probe, run_fixed
from ..multihead.extract import weight_spec as attention_spec
from ..weights import canonical_state

NORMS = ("ln1", "ln2")


def weight_spec():
    """Every parameter the lesson's Block has, attention included, with shapes and fan-ins."""
    C, H = SIZES.n_embd, SIZES.ffwd_hidden
    spec = [("sa." + name, shape, fan_in) for name, shape, fan_in in attention_spec()]
    spec += [("ffwd.0.weight", (H, C), C), ("ffwd.0.bias", (H,), C),
             ("ffwd.2.weight", (C, H), H), ("ffwd.2.bias", (C,), H)]
    spec += [(f"{ln}.{p}", (C,), 4) for ln in NORMS for p in ("weight", "bias")]  # +-0.5
    return spec


def fixed_state(seed):
    """{name: tensor}; the layer norms' gains near 1 (1 +- 0.5), the two norms different."""
    state = canonical_state(seed, weight_spec())
    for ln in NORMS:
        state[f"{ln}.weight"] = state[f"{ln}.weight"] + 1
    return state


def feed_forward(ffwd):
    """(the nn.Sequential of the feed-forward, the name it has inside self.ffwd): ffwd itself
    ("") or, for a wrapper class like the lecture's FeedFoward, its one child module holding
    every weight (self.net); (None, None) for anything else."""
    if isinstance(ffwd, nn.Sequential):
        return ffwd, ""
    children = list(ffwd.named_children()) if isinstance(ffwd, nn.Module) else []
    if len(children) == 1 and isinstance(children[0][1], nn.Sequential) \
            and not list(ffwd.parameters(recurse=False)):
        return children[0][1], children[0][0]
    return None, None


def describe(m):
    """How a Block object stores its layers, as raw observations."""
    s = {"params": [[name, list(p.shape)] for name, p in m.named_parameters()], "ffwd_layers": None}
    for name in ("sa", "ffwd") + NORMS:
        layer = getattr(m, name, None)
        s[name + "_type"] = None if layer is None else type(layer).__name__
    seq, s["ffwd_inner"] = feed_forward(getattr(m, "ffwd", None))
    s["ffwd_children"] = [name for name, _ in seq.named_children()][:20] if seq is not None else None
    if seq is not None:
        s["ffwd_layers"] = [[type(layer).__name__, layer.in_features, layer.out_features]
                            if isinstance(layer, nn.Linear) else [type(layer).__name__, float(layer.p)]
                            if isinstance(layer, nn.Dropout) else [type(layer).__name__] for layer in seq]
    for ln in NORMS:
        layer = getattr(m, ln, None)
        s[ln + "_shape"] = list(layer.normalized_shape) if isinstance(layer, nn.LayerNorm) else None
    s["norms_shared"] = getattr(m, "ln1", None) is not None and getattr(m, "ln1", None) is getattr(m, "ln2", None)
    return s


def lesson_name(name, inner, children=None):
    """A parameter's name as the lesson's spec has it, the feed-forward's layers by position:
    ffwd.net.0.weight -> ffwd.0.weight; ffwd.c_fc.weight -> ffwd.0.weight when the
    nn.Sequential names its layers (an OrderedDict: `children`, their names in order)."""
    rest = name[len(f"ffwd.{inner}."):] if inner and name.startswith(f"ffwd.{inner}.") else \
        name[len("ffwd."):] if not inner and name.startswith("ffwd.") else None
    if rest is None:
        return name
    child, _, param = rest.partition(".")
    if children and child in children:
        child = str(children.index(child))
    return f"ffwd.{child}.{param}"


def loadable(s):
    """Can the fixed weights be loaded? (the parameters are exactly the spec's)"""
    mine = [[lesson_name(name, s.get("ffwd_inner"), s.get("ffwd_children")), shape] for name, shape in s["params"]]
    return sorted(mine) == sorted([name, list(shape)] for name, shape, _ in weight_spec())


def load_fixed_weights(m, seed):
    seq, inner = feed_forward(getattr(m, "ffwd", None))
    children = [name for name, _ in seq.named_children()] if seq is not None else None
    state = fixed_state(seed)
    for name, p in m.named_parameters():
        p.copy_(state[lesson_name(name, inner, children)])


def _run(m, x, rec, prefix):
    """One forward pass, recording what the attention and the feed-forward received and gave."""
    seen = {}

    def keep(name):
        def hook(layer, inputs, output):
            if name + "_in" not in seen and inputs and torch.is_tensor(inputs[0]) and torch.is_tensor(output):
                seen[name + "_in"], seen[name + "_out"] = inputs[0].detach().clone(), output.detach().clone()
        return hook

    rec[prefix + "x"] = x.detach().clone()               # before forward: it may change x in place
    with evaluating(m):                                  # the stored attention alone on this input
        rec[prefix + "sa_alone"] = probe(lambda: m.sa(x))
    hooks = [on_call(getattr(m, name), post=keep(name)) for name in ("sa", "ffwd")]
    forward_record(m, x, rec, prefix, hooks)
    rec[prefix + "x_changed"] = not torch.equal(x, rec[prefix + "x"])    # forward wrote into its input
    for key, value in seen.items():
        rec[prefix + key] = value


def extract(ns, seed):
    """Run ns['Block'] under fixed weights on ns['xb']; return the raw record."""
    embed, xb = ns["embed"], ns["xb"]

    def measure(m, rec):
        rec["norms"] = {f"{ln}.{p}": m.get_parameter(f"{ln}.{p}").detach().clone()
                        for ln in NORMS for p in ("weight", "bias")}
        x = embed(xb)
        # each stored layer run alone on x: what the layers __init__ built compute
        with evaluating(m):
            rec["alone"] = {name: probe(lambda name=name: getattr(m, name)(x)) for name in ("ffwd",) + NORMS}
        _run(m, x, rec, "")
        forward_record(m, x, rec, "again_")      # two runs differ when dropout is left on
        _run(m, embed(changed_last_letter(xb)), rec, "changed_")
        gradients(m, lambda: m(x), rec)          # does training reach every weight?

    return run_fixed(ns["Block"], describe, loadable, load_fixed_weights, seed, measure)
