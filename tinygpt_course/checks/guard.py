"""Guards for the cells after the answer cell (training, names, plots): a learner's model that
fails there never ends Run All (or Validate, which runs every cell too) in a raw traceback or a
killed kernel.

- ``after(printout, what)``: the cell's work runs under a memory budget (``memory_budget``); if
  the learner's model fails in it (anything it raises, or a budget it outgrows), the cell prints
  one line, what was not done and which check's cell says why, and ends normally. The check is
  the first one, in the notebook's order, whose verdict fails for the learner's objects; the
  checks of the method the error was raised in (``generate``, ``__init__``) first. The decision
  is on data: where the error was raised and the checks' verdicts, never on a message's words.
- ``windows(model)``: while it is on, every ``model.generate(idx, max_new_tokens, ...)`` may give
  the model at most the windows it was given and at most ``max(block_size, letters given +
  max_new_tokens)`` letters each, the most a right generate (or one that forgets to crop) ever
  needs. A generate that appends along the wrong dimension (100 windows doubling 20 times) is
  stopped at its first call past that budget, long before it fills the memory.

Nothing here computes a lesson's answer: it watches sizes and catches errors.
"""
import contextlib
import os
import resource
import sys

import torch

from .common import _library_dirs
from .notebook import OutOfTime, time_limit, verdict

MEMORY_BUDGET = 2 ** 30      # bytes a guarded cell may add to the kernel's data (a right one: a few MB)


class BudgetExceeded(Exception):
    """Raised in the learner's code when it outgrows a guard's budget (windows, letters, memory)."""


# --- memory -------------------------------------------------------------------------------------

def _data_bytes():
    """The process's data segment now (VmData: what RLIMIT_DATA counts), or None off Linux."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmData:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def _available_bytes():
    """Memory this process may still take: the machine's MemAvailable, and the headroom of its
    cgroup (a hub caps each learner's server), whichever is less; None when unknown."""
    found = []
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    found.append(int(line.split()[1]) * 1024)
    except OSError:
        pass
    try:
        with open("/proc/self/cgroup") as f:
            path = f.read().strip().rsplit(":", 1)[-1]
        base = os.path.join("/sys/fs/cgroup", path.lstrip("/"))
        with open(os.path.join(base, "memory.max")) as f:
            cap = f.read().strip()
        with open(os.path.join(base, "memory.current")) as f:
            used = int(f.read())
        if cap != "max":
            found.append(int(cap) - used)
    except (OSError, ValueError):
        pass
    return min(found) if found else None


@contextlib.contextmanager
def memory_budget(budget=MEMORY_BUDGET):
    """The block may add at most `budget` bytes (and at most half the memory still available) to
    the process's data segment: past it an allocation fails at once, in the cell (torch raises
    RuntimeError, Python MemoryError), instead of the kernel being killed. RLIMIT_DATA is lowered
    for the block only, never raised above what it was (a hub sets it per learner)."""
    now = _data_bytes()
    if now is None:
        yield
        return
    available = _available_bytes()
    if available is not None:
        budget = max(0, min(budget, available // 2))
    soft, hard = resource.getrlimit(resource.RLIMIT_DATA)
    limit = now + budget
    if soft != resource.RLIM_INFINITY:
        limit = min(limit, soft)
    if hard != resource.RLIM_INFINITY:
        limit = min(limit, hard)
    resource.setrlimit(resource.RLIMIT_DATA, (limit, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_DATA, (soft, hard))


# --- the size of what generate gives the model --------------------------------------------------

def _instance_attr(obj, name):
    d = object.__getattribute__(obj, "__dict__")
    return name in d, d.get(name)


def _put_back(obj, name, saved):
    had, old = saved
    d = object.__getattribute__(obj, "__dict__")
    if had:
        d[name] = old
    else:
        d.pop(name, None)


def _argument(args, kwargs, i, name):
    return args[i] if len(args) > i else kwargs.get(name)


@contextlib.contextmanager
def windows(model, block_size):
    """While on, each model.generate(idx, max_new_tokens, ...) gives the model at most idx's
    windows of at most max(block_size, idx's letters + max_new_tokens) letters per call, and
    returns at most that many letters in all; past it BudgetExceeded stops generate. The model's
    forward and generate are wrapped on the instance (self(...) and self.forward(...) alike reach
    the watch) and put back after."""
    if not isinstance(model, torch.nn.Module):
        yield
        return
    saved = {name: _instance_attr(model, name) for name in ("forward", "generate")}
    inner_forward, inner_generate = model.forward, getattr(model, "generate", None)
    budget = []          # (windows, letters) of the generate running now

    def forward(*args, **kwargs):
        idx = _argument(args, kwargs, 0, "idx")
        if budget and torch.is_tensor(idx) and idx.dim() >= 1:
            rows, letters = budget[-1]
            got_rows, got_letters = idx.shape[0], (idx.shape[1] if idx.dim() > 1 else 1)
            if got_rows > rows:
                raise BudgetExceeded(f"generate gave your model {got_rows} windows at once; it was "
                                     f"given {rows}")
            if got_letters > letters:
                raise BudgetExceeded(f"generate gave your model windows of {got_letters} letters; "
                                     f"at most {letters} can be needed")
        return inner_forward(*args, **kwargs)

    def generate(*args, **kwargs):
        idx = _argument(args, kwargs, 0, "idx")
        new = _argument(args, kwargs, 1, "max_new_tokens")
        if not (torch.is_tensor(idx) and idx.dim() == 2 and isinstance(new, int)):
            return inner_generate(*args, **kwargs)
        rows, letters = idx.shape[0], max(block_size, idx.shape[1] + new)
        budget.append((rows, letters))
        try:
            out = inner_generate(*args, **kwargs)
        finally:
            budget.pop()
        if torch.is_tensor(out) and out.numel() > rows * (idx.shape[1] + new):
            raise BudgetExceeded(f"generate returned {list(out.shape)}: more letters than "
                                 f"{rows} windows of {idx.shape[1]} + {new} letters")
        return out

    d = object.__getattribute__(model, "__dict__")
    d["forward"] = forward
    if callable(inner_generate):
        d["generate"] = generate
    try:
        yield
    finally:
        for name, kept in saved.items():
            _put_back(model, name, kept)


# --- the cell's guard ---------------------------------------------------------------------------

def _learner_method(exc, cls):
    """The outermost method of the learner's class `cls` the traceback went through (a frame of
    the notebook's code whose `self` is one), or None."""
    skip = _library_dirs()
    tb = exc.__traceback__
    while tb is not None:
        code = tb.tb_frame.f_code
        mine = code.co_filename.startswith("<frozen") or any(code.co_filename.startswith(d + os.sep) for d in skip)
        if not mine and isinstance(cls, type) and isinstance(tb.tb_frame.f_locals.get("self"), cls):
            return code.co_name
        tb = tb.tb_next
    return None


FIRST_BY_METHOD = {"generate": ("generate",), "__init__": ("shapes", "weight_count")}


def check_to_read(printout, exc):
    """(the method of the learner's class the error went through, or None; the check whose cell
    says why, or None): the first check, in the order the notebook shows them, whose verdict
    fails for the learner's objects; the checks of that method first (an error raised in
    generate is first generate's)."""
    lesson = printout.lesson
    try:
        ns = printout.namespace()
    except NameError:                   # the class itself is missing: its first check says so
        return None, next(iter(lesson.checks))
    cls = ns.get(printout.names[0])
    method = _learner_method(exc, cls)
    order = [c for c in FIRST_BY_METHOD.get(method, ()) if c in lesson.checks]
    for cid in dict.fromkeys(order + list(lesson.checks)):
        if not verdict(lesson, cid, ns).passed:
            return method, cid
    return method, None


def cause(exc, method, what):
    """What went wrong, in a few words from data: the budget's own words, or the error's kind
    and the method of the learner's class it was raised in."""
    if isinstance(exc, (BudgetExceeded, OutOfTime)):
        return str(exc)
    if isinstance(exc, MemoryError):
        return f"your {what} ran out of its memory budget"
    if method:
        return f"your {what}'s {method} raised {type(exc).__name__}"
    if isinstance(exc, NameError):
        return f"{exc.name or 'a name'} is not defined, since a cell above stopped"
    return f"{type(exc).__name__} in this cell, after your {what} failed above"


@contextlib.contextmanager
def after(printout, what, seconds=None, budget=MEMORY_BUDGET):
    """Run a cell after the answer cell: the block under a memory budget (and a time limit of
    `seconds`, if given); an error in it (the learner's model failing, or a budget outgrown) is
    said in one line, `✗ <what>: <cause>; the check `<id>` below says why.`, and the cell
    ends normally."""
    if getattr(printout, "out_of_time", False):   # a step above never ended: it would not here
        seconds = min(seconds or 2, 2)
    try:
        with memory_budget(budget), time_limit(seconds):
            yield
    except Exception as exc:           # the learner's model failed here: one line, no traceback
        sys.stdout.flush()
        subject = printout.names[0] if getattr(printout, "names", None) else "model"
        try:
            method, cid = check_to_read(printout, exc)
        except Exception:              # the checks cannot run either: the cause alone
            method, cid = None, None
        read = (f"the check `{cid}` below says why" if cid else
                "every check passes with the checks' fixed weights: look at what this cell does")
        print(f"\u2717 {what}: {cause(exc, method, subject)}; {read}.")
