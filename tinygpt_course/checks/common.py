"""Pieces every lesson's extract half (the learner side) shares.

What they record is raw: an exception's type name and text, never a verdict about it.
"""
import ast
import contextlib
import linecache
import os
import sysconfig

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


def compiled(source, filename):
    """source compiled as `filename`, its lines registered with linecache (as IPython does for a
    cell), so a traceback through it can name the line that raised (raised_where)."""
    lines = source.splitlines(keepends=True)
    linecache.cache[filename] = (len(source), None, lines, filename)
    return compile(source, filename, "exec")


def _library_dirs():
    """Where the code lives that is not the notebook's: torch, this course library, the stdlib."""
    import torch
    paths = sysconfig.get_paths()
    return tuple({os.path.dirname(torch.__file__), os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                  paths["stdlib"], paths["purelib"], paths["platlib"]})


def raised_where(exc):
    """Where in the notebook's code (the learner's cells, not torch's or this library's) `exc`
    was raised, as raw observations: (the source lines of the innermost such frame's failing
    expression, that frame's `self`, and the class name of the innermost torch module whose
    forward raised, or None). The lines are '' when their source is unknown."""
    import torch
    skip = _library_dirs()
    learner, module = None, None
    tb = exc.__traceback__
    while tb is not None:
        filename = tb.tb_frame.f_code.co_filename
        if filename.startswith("<frozen") or any(filename.startswith(d + os.sep) for d in skip):
            me = tb.tb_frame.f_locals.get("self")
            if isinstance(me, torch.nn.Module) and type(me).__module__.startswith("torch."):
                module = type(me).__name__
        else:
            learner, module = tb, None
        tb = tb.tb_next
    if learner is None:
        return "", None, module
    frame, first, last = learner.tb_frame, learner.tb_lineno, learner.tb_lineno
    try:   # the failing instruction's lines (a statement may span several)
        pos = list(frame.f_code.co_positions())[learner.tb_lasti // 2]
        if pos[0] and pos[1] and pos[0] <= first <= pos[1]:
            first, last = pos[0], pos[1]
    except (AttributeError, IndexError, TypeError):
        pass
    lines = [linecache.getline(frame.f_code.co_filename, n, frame.f_globals).strip() for n in range(first, last + 1)]
    return " ".join(ln for ln in lines if ln)[:LINE_LIMIT], frame.f_locals.get("self"), module


LINE_LIMIT = 500     # characters of the raising line a record keeps


def record_error(exc, rec, prefix, obj=None):
    """Record what raised and where, as raw observations the judges name a mistake from:
    rec[prefix + 'error'] (type and text), 'exception' (the type's name), 'error_name' (the
    missing name of a NameError or AttributeError), 'error_line' (the learner's line that
    raised), 'error_module' (the torch layer whose forward raised, e.g. 'Linear'),
    'error_on_self' (an AttributeError on the learner's object `obj` itself) and
    'error_name_is_attribute' (a NameError's name is an attribute of `obj`: `self.` forgotten)."""
    rec[prefix + "error"], rec[prefix + "exception"] = error_text(exc), type(exc).__name__
    try:
        line, me, module = raised_where(exc)
    except Exception:   # a learner's frame may hold anything
        line, me, module = "", None, None
    name = getattr(exc, "name", None) if isinstance(exc, (NameError, AttributeError)) else None
    rec[prefix + "error_name"] = name if isinstance(name, str) else None
    rec[prefix + "error_line"] = line
    rec[prefix + "error_module"] = module
    target = obj if obj is not None else me
    try:
        rec[prefix + "error_on_self"] = bool(isinstance(exc, AttributeError) and target is not None
                                             and getattr(exc, "obj", None) is target)
        rec[prefix + "error_name_is_attribute"] = bool(
            isinstance(exc, NameError) and target is not None and isinstance(name, str) and has_attribute(target, name))
    except Exception:
        rec[prefix + "error_on_self"] = rec[prefix + "error_name_is_attribute"] = False
    if target is not None:
        rec[prefix + "module_state_missing"] = module_state_missing(target)
        rec[prefix + "module_classes"] = module_classes(target)


def has_attribute(obj, name):
    """obj holds `name` itself (in its __dict__, or as a layer, weight or buffer of a module)."""
    d = object.__getattribute__(obj, "__dict__")
    return name in d or any(isinstance(d.get(k), dict) and name in d[k] for k in ("_modules", "_parameters", "_buffers"))


def module_state_missing(obj):
    """obj is a torch module whose nn.Module.__init__ never ran: no `_modules` in its __dict__."""
    import torch
    return isinstance(obj, torch.nn.Module) and "_modules" not in object.__getattribute__(obj, "__dict__")


def module_classes(obj):
    """[attribute, class name] for each attribute of obj that holds a torch module class, not a
    module (`self.proj = nn.Linear`)."""
    import torch
    d = object.__getattribute__(obj, "__dict__")
    return sorted([k, v.__name__] for k, v in list(d.items()) + list((d.get("_modules") or {}).items())
                  if isinstance(v, type) and issubclass(v, torch.nn.Module))[:20]


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
        record_error(exc, rec, "init_")
        return None
    rec["init_module_state_missing"] = module_state_missing(m)
    rec["init_module_classes"] = module_classes(m)
    try:
        rec["structure"] = describe(m)
    except Exception as exc:
        record_error(exc, rec, "init_", m)
        rec["init_error"] = f"describing your {what} failed: " + rec["init_error"]
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
    """Run m(x) with `hooks` (on_call handles) in place and remove them after. Records rec[prefix + 'out'], or
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
        record_error(exc, rec, prefix, m)
    finally:
        for hook in hooks:
            hook.remove()


class _Watch:
    """What on_call returns: remove() takes its callbacks away (the layer's forward is put back
    when none is left), as a torch hook's handle does."""

    def __init__(self, layer, watches, pre, post):
        self.layer, self.watches, self.pre, self.post = layer, watches, pre, post

    def remove(self):
        if self in self.watches:
            self.watches.remove(self)
        if not self.watches:
            d = object.__getattribute__(self.layer, "__dict__")
            wrapper = d.get("forward")
            if getattr(wrapper, "_watches", None) is self.watches:
                had, old = wrapper._restore
                if had:
                    d["forward"] = old
                else:
                    d.pop("forward", None)


def _each(watches, when, *args):
    """Run the watches' callbacks of `when`: a callback of ours that fails is not the learner's error."""
    for w in list(watches):
        fn = getattr(w, when)
        if fn:
            try:
                fn(*args)
            except Exception:
                pass


def on_call(layer, pre=None, post=None):
    """Like torch's forward hooks, pre(layer, args) before and post(layer, args, out) after each
    call of `layer`, but however the learner calls it: layer(x) and layer.forward(x) alike
    (torch's hooks run only for the first, and the judges decide on what a layer computed, not
    on how it was called). The layer's forward is wrapped on the instance, once, and put back by
    the last handle's remove()."""
    d = object.__getattribute__(layer, "__dict__")
    wrapper = d.get("forward")
    watches = getattr(wrapper, "_watches", None)
    if watches is None:
        watches, inner, restore = [], layer.forward, ("forward" in d, d.get("forward"))

        def forward(*args, **kwargs):
            _each(watches, "pre", layer, args)
            out = inner(*args, **kwargs)
            _each(watches, "post", layer, args, out)
            return out
        forward._watches, forward._restore = watches, restore
        d["forward"] = forward
    handle = _Watch(layer, watches, pre, post)
    watches.append(handle)
    return handle


@contextlib.contextmanager
def evaluating(m):
    """The learner's module in eval mode (dropout off) while its layers are probed; every
    submodule's mode put back after."""
    try:
        modes = [(mod, mod.training) for mod in m.modules()]
        m.eval()
    except Exception:               # the learner's module: anything can happen
        modes = []
    try:
        yield
    finally:
        for mod, mode in modes:
            mod.training = mode


def probe(fn):
    """fn(), a learner's layer run alone on a known input, detached; None when it raises or gives
    no tensor. The judge compares it with the solution's layer on the same input, so a check of
    how the layers are stored is scored on numbers they compute."""
    import torch
    try:
        out = fn()
    except Exception:               # the learner's layer: anything can happen
        return None
    return out.detach().clone() if torch.is_tensor(out) else None


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


GRAD_SEED = 7   # the fixed direction the gradient is taken in (a sum may cancel: a softmax's rows)


def gradients(m, call, rec):
    """Does a backward pass from what `call()` returns (the learner's forward output; the first
    tensor of a tuple) reach every parameter of m? With gradients on and dropout off, the output
    is multiplied by fixed random numbers and differentiated, as training does with a loss; then
    once more with torch's graph cutters made harmless (detach and .data give the tensor itself,
    torch.no_grad() leaves gradients on), which tells a weight cut off by one of them from a
    weight forward never uses. Records, as raw observations, rec['grad'] = {'cut': the names of
    the parameters no gradient reaches (None, or exactly zero), 'cut_free': the same with the
    cutters harmless, 'out_needs_grad': whether the output is in autograd's graph at all, 'by':
    the cutters forward used, 'error': what the backward pass raised, if anything}; 'cut' is None
    when forward itself raised or gave no tensor of numbers (the other checks judge that)."""
    by = []
    g = rec["grad"] = {"cut": None, "cut_free": None, "out_needs_grad": None, "by": by, "error": None}
    try:
        g["cut"], g["out_needs_grad"] = _cut(m, call, _graph_cutters(by, harmless=False))
        g["cut_free"], _ = _cut(m, call, _graph_cutters([], harmless=True))
    except Exception as exc:       # the learner's code: anything can happen
        g["error"] = error_text(exc)
    finally:
        g["by"] = sorted(set(by))
        for key in ("cut", "cut_free"):
            if isinstance(g[key], list):
                g[key] = g[key][:200]


def _cut(m, call, watch):
    """(the names of m's parameters a backward pass from call() does not reach, whether the
    output needs a gradient at all), with `watch` in place while call() runs."""
    import torch
    try:
        with torch.enable_grad(), evaluating(m), watch:
            out = call()
    except Exception:       # forward itself fails: the other checks say so; nothing to measure
        return None, None
    if isinstance(out, (tuple, list)):
        out = next((t for t in out if torch.is_tensor(t)), None)
    if not torch.is_tensor(out) or not out.is_floating_point():
        return None, None
    params = [(name, p) for name, p in m.named_parameters() if p.requires_grad]
    if not out.requires_grad:
        return [name for name, _ in params], False
    direction = torch.randn(out.shape, generator=torch.Generator().manual_seed(GRAD_SEED)).to(out.dtype)
    with torch.enable_grad():
        grads = torch.autograd.grad(out, [p for _, p in params], grad_outputs=direction, allow_unused=True)
    return [name for (name, _), d in zip(params, grads) if d is None or not bool(d.abs().sum() > 0)], True


def _graph_cutters(by, harmless):
    """A context in which torch's ways out of autograd's graph (Tensor.detach and detach_,
    Tensor.data, torch.no_grad(), torch.set_grad_enabled(False), torch.inference_mode()) note
    themselves in `by`; `harmless`: and keep the graph (the tensor itself; gradients left on)."""
    import torch
    base = torch._C.TensorBase

    @contextlib.contextmanager
    def watch():
        kept = {name: torch.Tensor.__dict__.get(name) for name in ("detach", "detach_", "data")}
        modes = [(torch.no_grad, "__enter__"), (torch.set_grad_enabled, "__init__"), (torch.inference_mode, "__enter__")]
        kept_modes = [(cls, name, cls.__dict__[name]) for cls, name in modes]
        enter, grad_mode, inference = (fn for _, _, fn in kept_modes)

        def noting(what, fn):
            def noted(*a, **k):
                by.append(what)
                return a[0] if harmless else fn(*a, **k)
            return noted

        inside = []                                 # no_grad's own set_grad_enabled(False)

        def entering(self):                         # torch.no_grad()
            by.append("no_grad")
            if harmless:
                self.prev = torch.is_grad_enabled()     # what __exit__ puts back
                return
            inside.append(self)
            try:
                enter(self)
            finally:
                inside.pop()

        def setting(self, mode):                    # torch.set_grad_enabled(mode)
            if not mode and not inside:
                by.append("set_grad_enabled")
            grad_mode(self, mode or harmless)

        def inferring(self):                        # torch.inference_mode()
            if self.mode:
                by.append("inference_mode")
            if harmless:
                self.mode = False
            return inference(self)
        torch.Tensor.detach = noting("detach", base.detach)
        torch.Tensor.detach_ = noting("detach", base.detach_)
        torch.Tensor.data = property(noting("data", base.data.__get__), base.data.__set__)
        torch.no_grad.__enter__, torch.set_grad_enabled.__init__ = entering, setting
        torch.inference_mode.__enter__ = inferring
        try:
            yield
        finally:
            for name, value in kept.items():       # torch's own, as they were
                if value is None:
                    delattr(torch.Tensor, name)
                else:
                    setattr(torch.Tensor, name, value)
            for cls, name, fn in kept_modes:
                setattr(cls, name, fn)
    return watch()
