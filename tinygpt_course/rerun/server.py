"""The re-run server: a warm process, inside the grading sandbox, that re-runs answers.

The grader starts it once (``python -m tinygpt_course.rerun.server`` inside bubblewrap, see
tinygpt_course.grading.rerun) and sends it jobs over stdin; each reply goes back on stdout. It
imports torch and the lessons' extract halves once, so a re-run costs a fork, not a start.

For each job it forks a child that never returns here: the child leaves the pipe (its stdin,
stdout and stderr become /dev/null and a log file), takes a fresh folder in the sandbox's
private /tmp, caps its memory and CPU time, runs the lesson's set-up cells, then the answer
cell, then the lesson's ``extract(ns, seed)``, and saves the record with torch.save. When the
child has exited or timed out, the server kills every other process in the sandbox
(``kill(-1)``: only it and bwrap's init are left, so nothing a learner's code started survives
into the next job), reads the record and wipes /tmp. The server is not dumpable, so a child
cannot ptrace it or open its pipe through /proc.

Messages are framed as tinygpt_course.wire says; a reply carries the record's bytes.
"""
import ctypes
import importlib
import os
import resource
import shutil
import signal
import sys
import tempfile
import time

from tinygpt_course import wire

MAX_RECORD = 256 * 2 ** 20


def run_cell(source, ns, label):
    # Lesson cells are plain Python; a line magic (%...) or shell escape (!...) is skipped.
    lines = [ln for ln in source.splitlines() if not ln.lstrip().startswith(("%", "!"))]
    exec(compile("\n".join(lines), f"<{label}>", "exec"), ns)


def child(job, folder):
    """The forked child: run the job and exit; never returns."""
    code = 1
    try:
        os.setsid()
        log = os.open(os.path.join(folder, "output.txt"), os.O_WRONLY | os.O_CREAT, 0o600)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(log, 1)
        os.dup2(log, 2)
        os.closerange(3, 1 << 16)
        sys.stdin = open(0, closefd=False)
        sys.stdout = os.fdopen(1, "w", buffering=1, closefd=False)
        sys.stderr = os.fdopen(2, "w", buffering=1, closefd=False)
        os.chdir(folder)
        if job.get("memory_limit_mb"):
            limit = job["memory_limit_mb"] * 2 ** 20
            resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
        if job.get("cpu_limit_s"):
            resource.setrlimit(resource.RLIMIT_CPU, (job["cpu_limit_s"], job["cpu_limit_s"]))
        extract = importlib.import_module(f"tinygpt_course.checks.{job['lesson']}.extract").extract
        save = TORCH.save                       # bound before any learner code runs
        record = os.path.join(folder, "record.pt")
        ns = {"__name__": "__main__"}
        for i, source in enumerate(job["setup"]):
            run_cell(source, ns, f"set-up cell {i + 1}")
        if job["answer"] is None:
            rec = {"missing_answer": True}
        else:
            try:
                run_cell(job["answer"], ns, "your answer cell")
            except BaseException as exc:  # the learner's code: report it, whatever it is
                rec = {"init_error": f"your answer cell raised {type(exc).__name__}: {exc}",
                       "init_exception": type(exc).__name__}
            else:
                rec = extract(ns, job["seed"])
        save(rec, record)
        code = 0
    except BaseException:
        import traceback
        traceback.print_exc()
    finally:
        os._exit(code)


def reap():
    """Collect every child that has ended, without waiting for the others."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def in_own_pid_namespace():
    """True inside bwrap: this process and bwrap's init are the only ones there."""
    return {int(p) for p in os.listdir("/proc") if p.isdigit()} <= {1, os.getpid()}


def sweep(pid):
    """Kill every process in the sandbox but this one (and bwrap's init), until none is left.
    Unsandboxed (an explicit opt-out), only the child's own process group can be killed."""
    if not SANDBOXED:
        try:
            os.killpg(pid, signal.SIGKILL)
        except OSError:
            pass
        try:
            os.waitpid(pid, 0)
        except ChildProcessError:
            pass
        return
    me = os.getpid()
    for _ in range(100):
        try:
            os.kill(-1, signal.SIGKILL)
        except ProcessLookupError:
            pass
        reap()               # what were our children
        others = [p for p in os.listdir("/proc") if p.isdigit() and int(p) not in (1, me)]
        if not others:
            return
        time.sleep(0.01)


def wipe_tmp(folder):
    if not SANDBOXED:              # the real /tmp: remove only what this job had
        shutil.rmtree(folder, ignore_errors=True)
        return
    for base in (tempfile.gettempdir(), "/dev/shm"):
        if not os.path.isdir(base):
            continue
        for name in os.listdir(base):
            path = os.path.join(base, name)
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path, ignore_errors=True)
            else:
                try:
                    os.unlink(path)
                except OSError:
                    pass


def run_job(job):
    folder = tempfile.mkdtemp(prefix="job-")
    pid = os.fork()
    if pid == 0:
        child(job, folder)
    deadline = time.monotonic() + job["timeout"]
    status, cpu = None, None
    while status is None:
        done, st, usage = os.wait4(pid, os.WNOHANG)
        if done:
            cpu = usage.ru_utime + usage.ru_stime
            status = ("exited", os.waitstatus_to_exitcode(st))
        elif time.monotonic() > deadline:
            status = ("timeout", None)
        else:
            time.sleep(0.005)
    sweep(pid)
    header = {"status": status[0], "exitcode": status[1], "cpu_s": cpu}
    payload = b""
    record = os.path.join(folder, "record.pt")
    if status[0] == "exited" and os.path.isfile(record) and not os.path.islink(record):
        if os.path.getsize(record) <= MAX_RECORD:
            with open(record, "rb") as f:
                payload = f.read()
        else:
            header["status"] = "too_large"
    try:
        with open(os.path.join(folder, "output.txt"), errors="replace") as f:
            header["tail"] = f.read()[-2000:]
    except OSError:
        header["tail"] = ""
    wipe_tmp(folder)
    return header, payload


def main():
    global TORCH, SANDBOXED
    SANDBOXED = in_own_pid_namespace()
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(4, 0, 0, 0, 0)          # PR_SET_DUMPABLE 0: no ptrace, no /proc/<pid>/fd for children
    import torch
    TORCH = torch
    for name in sys.argv[1:]:           # the lessons' extract halves, imported once
        importlib.import_module(f"tinygpt_course.checks.{name}.extract")
    inp, out = sys.stdin.buffer, sys.stdout.buffer
    sys.stdout = sys.stderr
    wire.write(out, {"status": "ready"}, b"")
    while True:
        job = wire.read(inp)
        if job is None:
            return
        header, payload = run_job(job)
        wire.write(out, header, payload)


TORCH = None
SANDBOXED = False

if __name__ == "__main__":
    main()
