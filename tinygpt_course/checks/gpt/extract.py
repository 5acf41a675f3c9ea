"""The learner side of the gpt checks: runs the learner's GPT, records raw observations.

It builds the learner's GPT, records its parameters' names and shapes, loads fixed weights
drawn from ``seed`` by parameter name (so the order in which the learner's code draws random
numbers never matters) and records:

- a forward pass on the batch without targets, with what the token and position embeddings
  were given, what the first block received, what the last block gave, how often the final
  layer norm ran and what the output layer received;
- the same on the batch's first 5 letters alone (generate feeds windows shorter than 8);
- a forward pass with targets, with every call of ``F.cross_entropy`` (its input, target and
  result) and the loss returned;
- ``generate`` run twice with generators seeded alike on a *stand-in* model: the learner's
  object with its forward replaced by a table of scores drawn from the seed, which records the
  length of every context it is given. So generate is observed whatever the learner's forward
  does; the record holds the table, the contexts' lengths, every ``torch.multinomial`` input
  and what generate returned.

Only plain data (str, int, float, bool, lists, dicts, tensors) and no verdicts: the trusted
judge (judge.py) derives every fact from the record.
"""
import zlib

import torch
import torch.nn.functional as F
from torch import nn

from ...config import SIZES
from ..common import evaluating, gradients, on_call, probe, record_error, run_fixed
from ..weights import linear_init

SHORT = 5           # letters in the short window
GEN_START = 4       # letters of context generate starts from (stand-in)
GEN_NEW = 12        # letters generate adds: GEN_START + GEN_NEW > block_size, so cropping shows
GEN_ROWS = 6        # windows generate continues at once


def named_seed(seed, name):
    """A seed for one parameter: its weights depend on (seed, name) only, not on draw order."""
    return (int(seed) * 1_000_003 + zlib.crc32(name.encode())) % (2 ** 63)


def fixed_value(seed, name, module, p):
    gen = torch.Generator().manual_seed(named_seed(seed, name))
    if isinstance(module, nn.LayerNorm):           # gains near 1, shifts near 0
        return (1.0 if name.endswith("weight") else 0.0) + 0.2 * linear_init(p.shape, gen, 1)
    fan_in = p.shape[-1] if p.dim() > 1 and not isinstance(module, nn.Embedding) else 1
    if isinstance(module, nn.Linear):
        fan_in = module.in_features
    return linear_init(p.shape, gen, fan_in)


def load_fixed_weights(m, seed):
    loaded = set()      # a tensor two layers share (weight tying) gets the first one's weights
    for mod_name, module in m.named_modules():
        for p_name, p in module.named_parameters(recurse=False):
            if id(p) in loaded:
                continue
            loaded.add(id(p))
            name = f"{mod_name}.{p_name}" if mod_name else p_name
            p.copy_(fixed_value(seed, name, module, p))


def describe(m):
    """How a GPT object stores its layers, as raw observations."""
    blocks = getattr(m, "blocks", None)
    by_tensor = {}   # parameter names that are one tensor (weight tying) stay together
    for name, p in m.named_parameters(remove_duplicate=False):
        by_tensor.setdefault(id(p), []).append(name)
    return {"params": [[name, list(p.shape)] for name, p in m.named_parameters()],
            "shared": [names for names in by_tensor.values() if len(names) > 1],
            "types": {a: type(getattr(m, a, None)).__name__
                      for a in ("token_emb", "pos_emb", "blocks", "ln_f", "lm_head")},
            "block_types": [type(b).__name__ for b in blocks]
            if isinstance(blocks, (nn.Sequential, nn.ModuleList)) else None,
            "has_generate": callable(getattr(m, "generate", None))}


def _hooks(m, seen):
    """Watches (common.on_call) recording what the layers of the top of the model get and give."""
    def pre(key):
        return lambda mod, args: seen.setdefault(key, args[0].detach().clone() if args and torch.is_tensor(args[0]) else None)

    def post(key):
        return lambda mod, args, out: seen.setdefault(key, out.detach().clone() if torch.is_tensor(out) else None)

    hooks = []
    for attr, key in (("token_emb", "tok_in"), ("pos_emb", "pos_in"), ("lm_head", "lm_head_in")):
        layer = getattr(m, attr, None)
        if isinstance(layer, nn.Module):
            hooks.append(on_call(layer, pre=pre(key)))
    blocks = getattr(m, "blocks", None)
    if isinstance(blocks, (nn.Sequential, nn.ModuleList, list, tuple)) and len(blocks) \
            and isinstance(blocks[0], nn.Module) and isinstance(blocks[-1], nn.Module):
        hooks.append(on_call(blocks[0], pre=pre("block_in")))
        hooks.append(on_call(blocks[-1], post=post("blocks_out")))
    ln_f = getattr(m, "ln_f", None)
    if isinstance(ln_f, nn.Module):
        hooks.append(on_call(ln_f, post=lambda mod, args, out: seen.__setitem__(
            "ln_f_calls", seen.get("ln_f_calls", 0) + 1)))
    return hooks


def _forward(m, rec, prefix, *args):
    """m(*args) with the hooks on: rec[prefix + ...] gets the logits, loss and what the hooks saw."""
    seen = {"ln_f_calls": 0}
    hooks = _hooks(m, seen)
    try:
        out = m(*args)
    except BaseException as exc:                   # the learner's code: anything can happen
        if isinstance(exc, (KeyboardInterrupt, SystemExit)):
            raise
        record_error(exc, rec, prefix, m)
        out = None
    finally:
        for hook in hooks:
            hook.remove()
    for key, value in seen.items():
        rec[prefix + key] = value
    if out is not None:
        rec[prefix + "out_type"] = type(out).__name__
        items = list(out) if isinstance(out, (tuple, list)) else [out]
        rec[prefix + "out_len"] = len(items)
        if items and torch.is_tensor(items[0]):
            rec[prefix + "logits"] = items[0].detach().clone()
        if len(items) > 1:
            loss = items[1]
            rec[prefix + "loss_type"] = type(loss).__name__
            if torch.is_tensor(loss):
                rec[prefix + "loss"] = loss.detach().clone()


def _with_cross_entropy_recorded(calls, fn):
    """fn() with F.cross_entropy recording each call's input, target, reduction and result."""
    real = F.cross_entropy

    def recording(input, target, *args, **kwargs):
        call = {"input": input.detach().clone() if torch.is_tensor(input) else None,
                "target": target.detach().clone() if torch.is_tensor(target) else None,
                "reduction": kwargs.get("reduction", "mean"), "out": None}
        calls.append(call)                        # recorded before the call: it may raise
        out = real(input, target, *args, **kwargs)
        call["out"] = out.detach().clone() if torch.is_tensor(out) else None
        return out

    F.cross_entropy = recording
    try:
        return fn()
    finally:
        F.cross_entropy = real


def stand_in_table(seed):
    """The stand-in's scores: row = the symbol at a position, column = the next symbol."""
    gen = torch.Generator().manual_seed(named_seed(seed, "stand-in"))
    return torch.randn(SIZES.vocab_size, SIZES.vocab_size, generator=gen) * 2


def _generate(m, rec, seed):
    """generate() on a stand-in model, twice with generators seeded alike."""
    table, lengths, draws = stand_in_table(seed), [], []

    def stand_in(idx, targets=None):
        lengths.append(int(idx.shape[1]) if torch.is_tensor(idx) and idx.dim() == 2 else -1)
        return table[idx], None                   # [B, T, vocab]: scores from each position's symbol

    real_multinomial = torch.multinomial

    def recording(input, *args, **kwargs):
        draws.append(input.detach().clone() if torch.is_tensor(input) else None)
        return real_multinomial(input, *args, **kwargs)

    start = torch.randint(1, SIZES.vocab_size, (GEN_ROWS, GEN_START),
                          generator=torch.Generator().manual_seed(named_seed(seed, "start")))
    rec["gen_table"], rec["gen_start"] = table, start
    m.forward = stand_in                          # self(...) and self.forward(...) reach the stand-in
    torch.multinomial = recording
    try:
        for run in ("gen1", "gen2"):
            lengths.clear()
            draws.clear()
            try:
                out = m.generate(start.clone(), GEN_NEW, generator=torch.Generator().manual_seed(int(seed)))
                rec[run + "_returned"] = type(out).__name__
                if torch.is_tensor(out):
                    rec[run] = out.detach().clone()
                else:
                    rec[run + "_error"], rec[run + "_exception"] = (
                        f"generate returned {type(out).__name__}, not a tensor", None)
            except BaseException as exc:
                if isinstance(exc, (KeyboardInterrupt, SystemExit)):
                    raise
                record_error(exc, rec, run + "_", m)
            rec[run + "_lengths"] = list(lengths)
            rec[run + "_draws"] = [d for d in draws[:GEN_NEW + 2] if d is not None]
    finally:
        torch.multinomial = real_multinomial
        del m.forward


def _loss(out):
    """The loss of forward's (logits, loss), what training differentiates; None otherwise."""
    return out[1] if isinstance(out, (tuple, list)) and len(out) == 2 else None


def extract(ns, seed):
    """Run ns['GPT'] under fixed weights on ns['xb'], ns['yb']; return the raw record."""
    GPT, xb, yb = ns["GPT"], ns["xb"], ns["yb"]

    def measure(m, rec):
        # each stored layer run alone: the embeddings on the batch and its positions, every block,
        # the final layer norm and the output layer on the token embeddings
        blocks = getattr(m, "blocks", None)
        blocks = list(blocks)[:SIZES.n_layer + 2] if isinstance(blocks, (nn.Sequential, nn.ModuleList)) else []
        z = torch.randn(SIZES.batch_size, SIZES.block_size, SIZES.n_embd,      # a known input
                        generator=torch.Generator().manual_seed(named_seed(seed, "probe")))
        with evaluating(m):
            rec["alone"] = {"tok": probe(lambda: m.token_emb(xb)), "pos": probe(lambda: m.pos_emb(torch.arange(xb.shape[1]))),
                            "ln_f": probe(lambda: m.ln_f(z)), "lm_head": probe(lambda: m.lm_head(z)),
                            "blocks": [probe(lambda b=b: b(z)) for b in blocks]}
        _forward(m, rec, "", xb)
        _forward(m, rec, "again_", xb)               # two runs differ when dropout is left on
        _forward(m, rec, "short_", xb[:, :SHORT])
        calls = []
        _with_cross_entropy_recorded(calls, lambda: _forward(m, rec, "train_", xb, yb))
        rec["ce_calls"] = calls
        if rec["structure"]["has_generate"]:
            _generate(m, rec, seed)
        gradients(m, lambda: _loss(m(xb, yb)), rec)    # does training's loss reach every weight?

    # every parameter gets fixed weights by its name, whatever the structure: always loadable
    return run_fixed(GPT, describe, lambda structure: True, load_fixed_weights, seed, measure)
