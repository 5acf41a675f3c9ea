"""The re-run zygote: imports torch and the lessons' extract halves once, then forks a fresh
worker for every job *before* that job is read, so that no process that runs a job has ever
held another job's data (a solution, an earlier learner's answer, an earlier reply).

The grader starts it once per grading process (``python -m tinygpt_course.rerun.server
<lesson> ...``, outside the sandbox, with the sandbox's environment, as the kernel template
is: it runs no learner code, reads no course file and holds no secret) and, per job, starts a
fresh bubblewrap sandbox running a placeholder (tinygpt_course.grading.template.start_sandbox),
then sends the job and the sandbox's pid on stdin. Per job:

1. the zygote has already forked a *worker* (tinygpt_course.zygote.serve, as the kernel
   template forks its keepers), which is the only process that reads the job (from stdin,
   framed as tinygpt_course.wire says); the zygote itself never reads a job, and forks the next
   worker when this one has replied;
2. the worker joins every namespace of the job's own sandbox (as the kernel template's keeper
   does: tinygpt_course.zygote.join_sandbox), drops every capability, and forks the
   *runner*: inside the sandbox's PID namespace, its fresh /tmp, /dev and IPC namespace, with
   the sandbox's rlimits;
3. the runner binds the lesson's ``extract`` and the record's encoder (bound at import, before
   any learner code runs), runs the set-up cells and the answer cell, puts the course library
   back as the zygote imported it (tinygpt_course.rerun.bound: a helper, a function's code or a
   module the answer replaced is the zygote's again), runs the extract, puts the library back
   again (the extract ran the learner's forward), and saves the record in its folder as data
   (tinygpt_course.checks.record: safetensors and flat JSON; ``"pickled"`` in the job, the
   defence switched off for tests, saves it with torch.save as before);
4. the worker waits for it (the job's time limit), reads the record (a regular file, no
   symlink, capped) and the output's last lines, replies on stdout and exits. The grader then
   removes the sandbox: every process, file and IPC object of the job goes with it.

The zygote and the workers are not dumpable, and are outside the sandbox's PID namespace: the
runner cannot see, signal or trace them. Unsandboxed (``c.Sandbox.enabled = False``, an
explicit opt-out) a job runs in a folder of the real /tmp, and only that folder and the
runner's process group are removed after it.

``--reuse`` is the defence switched off, for the tests that show what it stops: one worker
reads every job and forks each runner from there, into one sandbox kept for every job (the
design this replaced).

``--spawner`` makes the zygote of zygotes a class run shares (:func:`spawn_loop`): it imports
torch and every lesson's extract once, then, for each request on its control socket (two pipe
ends and a log, passed as file descriptors), forks a zygote that serves those pipes exactly as a
started one serves its stdin and stdout. A grading worker's zygote then costs a fork, not a
second of CPU importing torch again, and its pages are the spawner's until written. The
spawner reads no job either: only pipe ends.
"""
import importlib
import importlib.util
import os
import pkgutil
import shutil
import signal
import socket
import stat
import sys
import tempfile
import time

from tinygpt_course import wire
from tinygpt_course.checks.record import REJECTED_EXIT
from tinygpt_course.rerun.bound import Library
from tinygpt_course.zygote import PR_SET_DUMPABLE, PR_SET_PDEATHSIG, huge_pages, join_sandbox, libc, serve, set_limits

MAX_RECORD = 256 * 2 ** 20
RECORD = "record.bin"       # the runner's record, in its folder
TAIL = 2000                 # bytes of the runner's output the reply carries

EXTRACTS = {}               # lesson -> its extract function, bound in the zygote
ENCODE = PICKLE = None      # tinygpt_course.checks.record.encode and torch.save, bound in the zygote
REJECTED = None             # tinygpt_course.checks.record.RecordRejected
ERROR_TEXT = COMPILED = None   # tinygpt_course.checks.common.error_text and compiled, bound in the zygote
LIBRARY = None              # tinygpt_course.rerun.bound.Library, taken in the zygote


def run_cell(source, ns, label):
    # Lesson cells are plain Python; a line magic (%...) or shell escape (!...) is skipped.
    lines = [ln for ln in source.splitlines() if not ln.lstrip().startswith(("%", "!"))]
    exec(COMPILED("\n".join(lines), f"<{label}>"), ns)


def runner(job, folder):
    """The forked runner: run the job and exit; never returns."""
    code = 1
    try:
        os.setsid()
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        # a process like any other to the learner's code (taking the sandbox's uid made it not
        # dumpable): its memory holds only this job; the worker above it stays undumpable
        libc.prctl(PR_SET_DUMPABLE, 1, 0, 0, 0)
        set_limits(job.get("limits", {}))
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
        # bound before learner code
        extract, encode, pickle, rejected, error_text = EXTRACTS[job["lesson"]], ENCODE, PICKLE, REJECTED, ERROR_TEXT
        put_back = LIBRARY.put_back if job.get("bound", True) else (lambda: None)   # False: the defence off
        record = os.path.join(folder, RECORD)
        ns = {"__name__": "__main__"}
        for i, source in enumerate(job["setup"]):
            run_cell(source, ns, f"set-up cell {i + 1}")
        if job["answer"] is None:
            rec = {"missing_answer": True}
        else:
            try:
                run_cell(job["answer"], ns, "your answer cell")
            except BaseException as exc:  # the learner's code: report it, whatever it is
                rec = {"init_error": f"your answer cell raised {error_text(exc)}",
                       "init_exception": type(exc).__name__}
            else:
                put_back()
                rec = extract(ns, job["seed"])
        put_back()
        if job.get("pickled"):
            pickle(rec, record)
        else:
            try:
                data = encode(rec)
            except rejected as exc:       # not a tree of plain data: say why, save nothing
                print(exc)                  # the grader says what this exit code means
                code = REJECTED_EXIT
                return
            with open(record, "wb") as f:
                f.write(data)
        code = 0
    except BaseException:
        import traceback
        traceback.print_exc()
    finally:
        os._exit(code)


def read_regular(path, limit, tail=False):
    """The bytes of the regular file at `path` (no symlink, FIFO or device: whatever is left in
    the sandbox may have replaced it), at most `limit` (the last ones if `tail`); None if it is
    not one, b"" if missing, False if over the limit (and not `tail`)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except FileNotFoundError:
        return b""
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return None
        if st.st_size > limit:
            if not tail:
                return False
            os.lseek(fd, st.st_size - limit, os.SEEK_SET)
        chunks, left = [], limit + 1
        while left > 0 and (chunk := os.read(fd, min(left, 1 << 20))):
            chunks.append(chunk)
            left -= len(chunk)
        data = b"".join(chunks)
        return data[-limit:] if tail else (data if len(data) <= limit else False)
    finally:
        os.close(fd)


def run_job(job, joined=None):
    """Run one job in its sandbox (joined here unless `joined` already is it); (header, payload)."""
    if job.get("ns_pid") and job["ns_pid"] != joined:
        join_sandbox(job["ns_pid"], job.get("uid", 65534), seccomp=job.get("seccomp"))
    folder = tempfile.mkdtemp(prefix="job-", dir="/tmp")
    pid = os.fork()
    if pid == 0:
        runner(job, folder)
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
    try:                       # the runner's group; in a sandbox the grader removes the rest
        os.killpg(pid, signal.SIGKILL)
    except OSError:
        pass
    if status[0] == "timeout":
        os.waitpid(pid, 0)
    header = {"status": status[0], "exitcode": status[1], "cpu_s": cpu}
    payload = b""
    if status[0] == "exited":
        data = read_regular(os.path.join(folder, RECORD), MAX_RECORD)
        if data is False:
            header["status"] = "too_large"
        elif data:
            payload = data
    header["tail"] = (read_regular(os.path.join(folder, "output.txt"), TAIL, tail=True) or b"").decode(errors="replace")
    if not job.get("ns_pid"):          # unsandboxed: the real /tmp, remove what this job had
        shutil.rmtree(folder, ignore_errors=True)
    return header, payload


def handler():
    """handle(job) for serve(): run the job in its sandbox; the reply. Under --reuse (the defence
    off) one worker runs every job, each in the sandbox of the first."""
    joined = []

    def handle(job):
        try:
            header, payload = run_job(job, joined[0] if joined else None)
        except Exception as exc:        # the sandbox could not be joined: the grader says so
            header, payload = {"status": "failed", "exitcode": None,
                               "problem": f"{type(exc).__name__}: {exc}"}, b""
        joined[:] = [job.get("ns_pid")]
        return header, payload, None
    return handle


def warm(lessons):
    global ENCODE, PICKLE, REJECTED, ERROR_TEXT, COMPILED, LIBRARY
    import torch
    # what autograd's first backward pass imports (sympy, for symbolic shapes): once here, not
    # in every re-run's fork (0.13 s of CPU each)
    import torch.fx.experimental.symbolic_shapes  # noqa: F401

    from tinygpt_course.checks.common import compiled, error_text
    from tinygpt_course.checks.record import RecordRejected, encode
    from tinygpt_course.data import get_batch
    get_batch()         # the names, read and checked once: every job's set-up cuts its batch
    ENCODE, PICKLE, REJECTED, ERROR_TEXT, COMPILED = encode, torch.save, RecordRejected, error_text, compiled
    for name in lessons:               # the lessons' extract halves, imported once
        EXTRACTS[name] = importlib.import_module(f"tinygpt_course.checks.{name}.extract").extract
    LIBRARY = Library.take()


def all_lessons():
    """Every lesson with an extract half (tinygpt_course.checks.<lesson>.extract): what the
    spawner warms, not knowing which lessons its class grades."""
    import tinygpt_course.checks as checks
    return sorted(m.name for m in pkgutil.iter_modules(checks.__path__)
                  if m.ispkg and importlib.util.find_spec(f"tinygpt_course.checks.{m.name}.extract"))


def serve_pipes(inp_fd, out_fd, reuse):
    """Be a zygote on these two pipe ends: say ready, then serve() jobs until `inp_fd` ends."""
    inp = os.fdopen(inp_fd, "rb", buffering=0, closefd=False)
    out = os.fdopen(out_fd, "wb", buffering=0, closefd=False)
    sys.stdout = sys.stderr                  # a stray print must never land in the replies
    wire.write(out, {"status": "ready"}, b"")
    serve(inp, out, handler(), reuse)


def spawn_loop(ctl):
    """The spawner: for each request on the control socket `ctl` (a word, "fresh" or "reuse",
    with three descriptors: the job pipe's read end, the reply pipe's write end, a log), fork a
    zygote serving them (serve_pipes, its stderr that log) and answer with a pidfd of it; end
    when the grader hangs up. The spawner keeps none of the passed ends: a zygote sees the end
    of its jobs when its grading worker closes the pipe or dies."""
    import gc
    gc.freeze()
    huge_pages()            # each zygote's fork copies less; the zygotes share these pages
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)      # zygotes that end are reaped by the kernel
    me = os.getpid()
    while True:
        try:
            word, fds, _, _ = socket.recv_fds(ctl, 16, 3)
        except OSError:
            return
        if not word:                                    # the grader hung up
            return
        if len(fds) != 3 or word not in (b"fresh", b"reuse"):
            for fd in fds:
                os.close(fd)
            ctl.send(b"refused")
            continue
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                signal.signal(signal.SIGCHLD, signal.SIG_DFL)   # serve() waits for its workers
                ctl.close()
                libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)     # gone with the spawner
                if os.getppid() == me:
                    os.dup2(fds[2], 2)
                    null = os.open(os.devnull, os.O_RDWR)
                    for fd in (0, 1):                   # nothing of the spawner's own stdio
                        os.dup2(null, fd)
                    os.close(null)
                    os.close(fds[2])
                    serve_pipes(fds[0], fds[1], word == b"reuse")
                    code = 0
            finally:
                os._exit(code)
        pidfd = os.pidfd_open(pid)
        for fd in fds:
            os.close(fd)
        try:
            socket.send_fds(ctl, [b"spawned"], [pidfd])
        except OSError:
            return
        finally:
            os.close(pidfd)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    reuse, spawner = "--reuse" in argv, "--spawner" in argv
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)     # gone with the grader
    libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)   # no ptrace, no /proc/<pid>/mem, for it and its forks
    if os.geteuid() == 0:
        os.setgroups([])                      # a root grader's groups stay here
    if spawner:                               # stdin is the control socket
        ctl = socket.socket(fileno=os.dup(0))
        sys.stdout = sys.stderr
        warm(all_lessons())
        ctl.send(b"ready")
        spawn_loop(ctl)
        return
    warm([a for a in argv if not a.startswith("--")])
    huge_pages()                              # each job's fork copies less (zygote.huge_pages)
    serve_pipes(0, 1, reuse)


if __name__ == "__main__":
    main()
