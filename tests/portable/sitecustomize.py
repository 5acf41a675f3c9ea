"""A learner's Mac or Windows (WSL) machine as far as the course library can tell, for
tests/test_portable.py: on PYTHONPATH, Python imports this at start-up (site's sitecustomize),
in the test's process and in every process it starts (nbgrader's kernel).

- TINYGPT_BLOCKED (module names, comma-separated): importing one, or a module inside one, raises
  ModuleNotFoundError, as on a machine that does not have it;
- /proc, /sys/fs/cgroup and the grader's Linux tools (bubblewrap, newuidmap, prlimit) are absent:
  opening, listing or stat-ing them raises FileNotFoundError;
- libc has no prctl, unshare, setns, mount nor seccomp (ctypes: AttributeError, as macOS's libc);
- with TINYGPT_DARWIN set, sys.platform is "darwin" and os has none of Linux's own calls
  (O_PATH, pidfd_open, unshare, ...), once the standard library's and the third-party modules
  that read sys.platform when imported (urllib.request would import macOS's _scproxy) are
  imported as on Linux: the course library, imported after, sees a Mac (their own macOS
  branches are theirs to test).

Each attempt is written to TINYGPT_GUARD_LOG (one JSON object a line: what, name, and the
course-library frame that asked, if any), so that a fallback that swallows the error is seen too.
"""
import builtins
import ctypes
import importlib.abc
import io
import json
import os
import sys
import traceback

_LOG = os.environ.get("TINYGPT_GUARD_LOG")
_BLOCKED = tuple(m for m in os.environ.get("TINYGPT_BLOCKED", "").split(",") if m)
_PATHS = ("/proc", "/sys/fs/cgroup", "/usr/bin/bwrap", "/usr/bin/newuidmap", "/usr/bin/newgidmap",
          "/usr/bin/prlimit")
_LIBC_LINUX_ONLY = {"prctl", "unshare", "setns", "mount", "umount2", "seccomp", "pivot_root", "capset"}


def _note(what, name):
    if not _LOG:
        return
    ours = [f"{f.filename}:{f.lineno}" for f in traceback.extract_stack()[:-2]
            if "tinygpt_course" in f.filename and "tinygpt_course/testing" not in f.filename]
    with open(_LOG, "a") as log:
        log.write(json.dumps({"what": what, "name": str(name), "by": ours[-1] if ours else None}) + "\n")


class _Blocked(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if any(name == b or name.startswith(b + ".") for b in _BLOCKED):
            _note("import", name)
            raise ModuleNotFoundError(f"No module named {name!r} (not on a learner's machine)", name=name)
        return None


sys.meta_path.insert(0, _Blocked())


def _absent(path):
    try:
        text = os.fsdecode(path) if not isinstance(path, int) else ""
    except TypeError:
        return False
    text = os.path.normpath(text) if text else text
    return any(text == p or text.startswith(p + "/") for p in _PATHS)


def _guard(fn, what):
    def guarded(path, *args, **kwargs):
        if _absent(path):
            _note(what, path)
            raise FileNotFoundError(2, "No such file or directory (not on a learner's machine)", str(path))
        return fn(path, *args, **kwargs)
    guarded.__wrapped__ = fn
    return guarded


builtins.open = io.open = _guard(builtins.open, "open")
for _name in ("open", "stat", "lstat", "listdir", "scandir", "access", "readlink"):
    setattr(os, _name, _guard(getattr(os, _name), _name))


class _MacLibc(ctypes.CDLL):
    def __getattr__(self, name):
        if name in _LIBC_LINUX_ONLY:
            _note("libc", name)
            raise AttributeError(f"{name}: not in this libc (macOS)")
        return super().__getattr__(name)

    def __getitem__(self, name):
        if name in _LIBC_LINUX_ONLY:
            _note("libc", name)
            raise AttributeError(f"{name}: not in this libc (macOS)")
        return super().__getitem__(name)


ctypes.CDLL = _MacLibc

if os.environ.get("TINYGPT_DARWIN"):
    import urllib.request  # noqa: F401,E402  (each reads sys.platform when imported)
    import IPython  # noqa: F401,E402
    import ipykernel.kernelapp  # noqa: F401,E402
    import ipywidgets  # noqa: F401,E402
    import matplotlib.pyplot  # noqa: F401,E402
    import torch  # noqa: F401,E402
    import platform  # noqa: E402
    platform.mac_ver = lambda release="", versioninfo=("", "", ""), machine="": ("14.0", versioninfo, "arm64")
    sys.platform = "darwin"
    # and os without what only Linux has (the namespaces, pidfds, memfds, CPU affinity)
    for _name in ("O_PATH", "O_TMPFILE", "pidfd_open", "memfd_create", "unshare", "setns", "eventfd",
                  "splice", "sched_getaffinity", "sched_setaffinity"):
        if hasattr(os, _name):
            delattr(os, _name)
