"""Pieces every lesson's extract half (the learner side) shares.

What they record is raw: an exception's type name and text, never a verdict about it.
"""
import contextlib

from ..config import SIZES


ERROR_LIMIT = 2000   # characters of an exception's text a record keeps (judges quote less)


def error_text(exc):
    """An exception's type and text, cut to ERROR_LIMIT characters: a record stays small whatever
    the learner's code raised (what a verdict quotes is cut again, protocol.quote)."""
    try:
        text = f"{type(exc).__name__}: {exc}"
    except Exception:              # a learner's __str__ may raise too
        text = type(exc).__name__
    return text[:ERROR_LIMIT]


def changed_last_letter(xb, vocab_size=SIZES.vocab_size):
    """The batch with the letter at the last position replaced by the next symbol."""
    xb2 = xb.clone()
    xb2[:, -1] = (xb2[:, -1] + 1) % vocab_size
    return xb2


def build(cls, describe, rec, what, *args):
    """The learner's object, with its description in rec['structure'], or None with
    rec['init_error'] (the exception's text) and rec['init_exception'] (its type name)."""
    try:
        m = cls(*args)
    except Exception as exc:
        rec["init_error"], rec["init_exception"] = error_text(exc), type(exc).__name__
        return None
    try:
        rec["structure"] = describe(m)
    except Exception as exc:
        rec["init_error"] = f"describing your {what} failed: " + error_text(exc)
        rec["init_exception"] = type(exc).__name__
        return None
    return m


def run_fixed(cls, describe, loadable, load_fixed_weights, seed, measure, *args):
    """The skeleton of every lesson's extract: with torch's random state forked, build the
    learner's object (cls(*args)), record its structure, and when the fixed weights fit, load
    those drawn from `seed` and let `measure(m, rec)` run it. Returns the record."""
    import torch
    rec = {}
    with torch.random.fork_rng(), torch.no_grad():
        torch.manual_seed(int(seed))  # the learner's own draws are overwritten anyway
        m = build(cls, describe, rec, cls.__name__ if hasattr(cls, "__name__") else "class", *args)
        if m is not None and loadable(rec["structure"]):
            load_fixed_weights(m, seed)
            measure(m, rec)
    return rec


def forward_record(m, x, rec, prefix, hooks=()):
    """Run m(x) with `hooks` in place and remove them after. Records rec[prefix + 'out'], or
    rec[prefix + 'error'] and rec[prefix + 'exception'] (the type name) when it fails."""
    import torch
    try:
        out = m(x)
        if torch.is_tensor(out):
            rec[prefix + "out"] = out.detach().clone()
        else:
            rec[prefix + "error"] = f"forward returned {type(out).__name__}, not a tensor"
            rec[prefix + "exception"] = None
    except BaseException as exc:  # the learner's code: anything can happen
        if isinstance(exc, (KeyboardInterrupt, SystemExit)):
            raise
        rec[prefix + "error"], rec[prefix + "exception"] = error_text(exc), type(exc).__name__
    finally:
        for hook in hooks:
            hook.remove()


@contextlib.contextmanager
def watching(rec, prefix=""):
    """Record how the block's code uses two tensor operations that are easy to misuse, as raw
    observations: rec[prefix + 'masked_fill_calls'], how often masked_fill (which returns a new
    tensor, it is not in place) was called, and rec[prefix + 'T_dims'], the number of dimensions
    of every tensor whose `.T` was taken (on more than 2 it reverses every dimension)."""
    import torch
    base = torch._C.TensorBase
    calls, dims = [0], []

    def masked_fill(self, *args, **kwargs):
        calls[0] += 1
        return base.masked_fill(self, *args, **kwargs)

    def transposed(self):
        dims.append(self.dim())
        return base.T.__get__(self)

    torch.Tensor.masked_fill, torch.Tensor.T = masked_fill, property(transposed)
    try:
        yield
    finally:
        del torch.Tensor.masked_fill, torch.Tensor.T
        rec[prefix + "masked_fill_calls"], rec[prefix + "T_dims"] = calls[0], dims
