"""The kernel template: imports torch, matplotlib, ipykernel and the course library once, then
forks a learner kernel per notebook, each of which enters its own grading sandbox.

Starting a kernel costs about 1.3 s of CPU (Python, ipykernel, ``import torch``), more than the
lesson's own cells; a fork of a process that has already paid it costs milliseconds. The
template never runs learner code, never reads a course file and holds no secret: it is started
with the sandbox's environment, and what it imports, learners have installed anyway.

Per kernel (one job on stdin, one reply on stdout, messages framed as in tinygpt_course.wire):

1. the grader starts the kernel's sandbox exactly as for a cold start (bubblewrap with the
   notebook's folder writable and the notebooks in it hidden, tinygpt_course.grading.sandbox),
   but running a placeholder instead of the kernel, and sends its pid here;
2. the template has already forked a *keeper* (tinygpt_course.zygote.serve, as the re-run zygote
   forks its workers), which reads the job, joins every namespace of that sandbox with ``setns``
   (user, mount, network, IPC, UTS, cgroup and, for its children, PID), drops every capability,
   sets no_new_privs, installs the sandbox's seccomp filter and forks the *kernel*: a process inside the sandbox's PID namespace, its
   files, its network, as the sandbox's uid, with the sandbox's rlimits. The keeper replies with
   the kernel's pid and waits for it; it runs no learner code. The template forks the next
   keeper as soon as this one has replied.
3. the kernel leaves the template's file descriptors, takes the kernel's environment, folder and
   arguments, reseeds ``random`` and numpy, and runs ipykernel as ``python -m ipykernel_launcher``
   would.

When the grader removes the sandbox (it kills the placeholder, the sandbox's PID 1 goes), every
process in it dies with it, the kernel and whatever learner code started. The template and the
keepers are not dumpable, and are outside the sandbox's PID namespace: the kernel cannot see,
signal or trace them.
"""
import importlib
import importlib.util
import json
import os
import pkgutil
import random
import signal
import sys
import traceback

from tinygpt_course import wire
from tinygpt_course.zygote import PR_SET_DUMPABLE, PR_SET_PDEATHSIG, huge_pages, join_sandbox, libc, serve, set_limits

def warm():
    """Import what every lesson's kernel imports, without starting anything: no thread, no
    socket, no IPython shell, no pyplot backend (those belong to each kernel)."""
    # as ipykernel sets it, and before matplotlib reads it at import
    os.environ.setdefault("MPLBACKEND", "module://matplotlib_inline.backend_inline")
    # debugpy, imported below, checks its files at import and says so: not in every kernel's log
    os.environ.setdefault("PYDEVD_DISABLE_FILE_VALIDATION", "1")
    # Each kernel would import what it first uses, after the fork, every time: what ipykernel's
    # set-up imports (its debugger: debugpy; IPython's history: sqlite3, its pdb, its object
    # inspector; the reseed below: numpy.random; zmq's sender of large outputs), what a
    # lesson's cells import (the reference record's reader: importlib.resources; tensors to
    # numpy for the explorer: numpy.ctypeslib), and what a lesson's first check
    # imports (autograd's symbolic shapes and sympy, at the first backward pass given a
    # gradient, as the checks' gradients() is; the record's encoder: safetensors).
    # Measured: 0.3 s of CPU per kernel.
    for name in ("ipykernel.kernelapp", "ipykernel.ipkernel", "ipykernel.debugger", "sqlite3", "numpy.random",
                 "IPython.core.debugger", "IPython.core.completerlib", "IPython.extensions.storemagic",
                 "tornado.platform.asyncio", "zmq.utils.garbage",
                 "torch", "torch.fx.experimental.symbolic_shapes", "safetensors.torch",
                 "matplotlib.figure", "matplotlib.font_manager",           # loads the font list once
                 "IPython.core.oinspect", "importlib.resources.readers", "numpy.ctypeslib",
                 "tinygpt_course.data", "tinygpt_course.checks.guard"):
        importlib.import_module(name)
    # the names, read and checked once (every notebook's set-up cuts its batch from them)
    data = importlib.import_module("tinygpt_course.data")
    batch = data.get_batch()
    import numpy as np
    import tinygpt_course.checks
    from tinygpt_course import plots
    from tinygpt_course.checks import hints, notebook
    for info in pkgutil.iter_modules(tinygpt_course.checks.__path__):
        if info.ispkg:
            lesson = importlib.import_module(f"tinygpt_course.checks.{info.name}")
            if importlib.util.find_spec(f"{lesson.__name__}.schema") is not None:
                importlib.import_module(f"{lesson.__name__}.schema")     # the record's table
                # the checks' stored data (the solution's record, the documented printout, the
                # hint ladders a failing check offers: 3 ms of TOML), read once: installed for
                # every learner, the same in every kernel
                notebook.reference(info.name)
                notebook.documented(info.name)
                hints.raw_ladders(info.name)
    # one drawing of the explorer for each lesson's shape (head: 1 head; multihead, block: 2;
    # 8 letters), on made-up weights: matplotlib's first drawing loads fonts and fills caches,
    # and the kept figure of that shape (plots.Picture: its axes, ticks, colour bar) is made,
    # which every kernel would otherwise make again (the pictures do not change). Drawn with
    # the letters and position every lesson's plot cell draws (window 0 of get_batch(), the
    # last position), each keeps its frame (plots.Frame): a kernel's drawing then draws only
    # the plots, not their tick labels and colour bar (70 ms instead of 105 of CPU)
    letters = [plots.show_letter(ch) for ch in data.decode(batch[0])]
    for heads in (1, 2):
        plots.picture_png(np.full((heads, 8, 8), 0.125), letters, len(letters) - 1, keep_frame=True)


def run_kernel(job):
    """The kernel, inside the sandbox: never returns."""
    code = 1
    try:
        os.setsid()
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        set_limits(job["limits"])
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        err = job["output_fd"]              # the sandbox's output pipe, which the grader reads and logs
        os.dup2(err, 1)
        os.dup2(err, 2)
        os.closerange(3, 1 << 16)
        libc.prctl(PR_SET_DUMPABLE, 1, 0, 0, 0)
        os.environ.clear()
        os.environ.update(job["env"])
        os.chdir(job["cwd"])
        sys.path[0] = os.getcwd()           # as `python -m ipykernel_launcher` in that folder
        random.seed()
        if "numpy" in sys.modules:
            sys.modules["numpy"].random.seed()
        from ipykernel.kernelapp import IPKernelApp
        sys.argv = [os.path.join(os.path.dirname(importlib.import_module("ipykernel").__file__),
                                 os.pardir, "ipykernel_launcher.py"), *job["argv"]]
        app = IPKernelApp.instance()
        os.umask(0)             # as a cold kernel's: sockets a grader that is not root can connect to
        app.initialize(job["argv"])
        # modules imported before the shell existed register with it now, as at a first import
        widgets = sys.modules.get("ipywidgets")
        if widgets is not None and hasattr(widgets, "_handle_ipython"):
            widgets._handle_ipython()
        app.start()
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 0
    except BaseException:
        traceback.print_exc()
    finally:
        os._exit(code)


def outside_view(job):
    """For the test that shows what joining stops (join False): the kernel stays outside the
    sandbox, with its sockets in a folder of the template's; the sandbox's socket paths, which
    the grader connects to, become links to them (made as the sandbox's uid: a file of an
    unmapped uid cannot be made in the sandbox's /tmp)."""
    import tempfile
    root = f"/proc/{job['ns_pid']}/root"
    i = job["argv"].index("-f") + 1
    with open(root + job["argv"][i]) as f:
        info = json.load(f)
    inside, here = info["ip"], tempfile.mkdtemp(prefix="tinygpt-unjoined-")
    info["ip"] = os.path.join(here, "ipc")
    job["argv"][i] = os.path.join(here, "kernel.json")
    with open(job["argv"][i], "w") as f:
        json.dump(info, f)
    libc.setfsgid(job["uid"])
    libc.setfsuid(job["uid"])
    for key in ("shell_port", "iopub_port", "stdin_port", "control_port", "hb_port"):
        os.symlink(f"{info['ip']}-{info[key]}", f"{root}{inside}-{info[key]}")
    libc.setfsuid(os.getuid())
    libc.setfsgid(os.getgid())
    job["cwd"] = here


def keeper(job):
    """handle(job) for serve(), in the worker it forks for one kernel (between the template and
    the kernel): joins the sandbox, forks the kernel; replies with its pid, then waits for it."""
    try:
        # the kernel's stdout and stderr: the pipe the sandbox's own output goes to, which the
        # grader holds open for us until we reply; never the grader's or this process's stderr
        job["output_fd"] = os.open(f"/proc/{job['grader_pid']}/fd/{job['output_fd']}", os.O_WRONLY)
        if job.get("join", True):
            join_sandbox(job["ns_pid"], job["uid"], job.get("join_cgroups", True), job.get("seccomp"))
        else:
            outside_view(job)
        pid = os.fork()
        if pid == 0:
            run_kernel(job)
    except BaseException as exc:
        return {"error": f"{type(exc).__name__}: {exc}"}, None, None

    def wait():
        os.closerange(3, 1 << 16)
        os.waitpid(pid, 0)
    return {"pid": pid}, None, wait


def main():
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)     # gone with the grader
    libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)                   # no ptrace, no /proc/<pid>/mem
    if os.geteuid() == 0:
        os.setgroups([])                                      # a root grader's groups stay here
    inp = os.fdopen(0, "rb", buffering=0, closefd=False)
    out = os.fdopen(1, "wb", buffering=0, closefd=False)
    sys.stdout = sys.stderr
    warm()
    huge_pages()                    # each kernel's fork copies less (zygote.huge_pages)
    wire.write(out, {"status": "ready"})
    serve(inp, out, keeper)


if __name__ == "__main__":
    main()
