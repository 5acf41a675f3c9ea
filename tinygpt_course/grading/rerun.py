"""The grader's side of the re-run: the re-run zygote, a fresh sandbox per job, the records.

One zygote per grading process (a forked class-grading worker has its own; in a class run, a
fork of the spawner below): ``python -m tinygpt_course.rerun.server``, which imports torch and
the extracts once and forks
a fresh worker per job before the job is read (see that module). Each job, the solution's run
(tinygpt_course.grading.reference) as any learner's, gets a bubblewrap sandbox of its own,
removed when the reply is in: no file, IPC object or process of one job is there for the next,
and no process that runs a job has held another's data. This module never imports the server:
learner code runs only over there. Records come back as bytes, which are data: checked against
the lesson's table (``tinygpt_course.checks.<lesson>.schema``) before anything is built from them
(tinygpt_course.checks.record); a record off the table fails that learner's checks with "the
record is not what the checks produce". ``pickled=True`` is that defence switched off (tests
only): the record saved with torch.save and loaded with ``torch.load(weights_only=True)``, whose
object graph may share its parts (a few KB that never finishes being hashed).

A class run (tinygpt-grade-class, the grading service) starts a *spawner* first
(:func:`start_spawner`, shared with the workers it forks by :func:`share`): a zygote of
zygotes that has imported torch and every lesson's extract once and forks each process's
zygote on request (:class:`Spawner`), instead of each starting its own and importing torch
again (0.9 s of CPU each, measured). A process without one, or whose spawner failed, starts its
zygote as before.
"""
import io
import logging
import os
import select
import signal
import socket
import subprocess
import tempfile
from dataclasses import dataclass

from .. import wire
from ..checks.protocol import quote
from .template import TemplateUnavailable, start_sandbox, start_warm

READY_TIMEOUT = 180
LOG = logging.getLogger("tinygpt_course.rerun")     # what a job's sandbox writes to its output


@dataclass(frozen=True)
class RerunResult:
    """A re-run's record, or (record None) what went wrong, in the learner's terms."""
    record: object
    problem: str = ""
    cpu_s: float = None      # CPU seconds of the re-run's process (bench/breakdown.py reads it)


class ServerGone(RuntimeError):
    pass


class Spawned:
    """A zygote the spawner forked, where RerunServer keeps its Popen: the ends of its two pipes
    and a pidfd (not our child: it has no exit status for us, 0 once it has ended)."""

    def __init__(self, job_w, reply_r, pidfd):
        self.stdin = os.fdopen(job_w, "wb", buffering=0)
        self.stdout = os.fdopen(reply_r, "rb", buffering=0)
        self.pidfd = pidfd

    def poll(self):
        if self.pidfd is None or select.select([self.pidfd], [], [], 0)[0]:
            return 0
        return None

    def kill(self):
        if self.pidfd is not None:
            try:
                signal.pidfd_send_signal(self.pidfd, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def wait(self):
        if self.pidfd is not None:
            select.select([self.pidfd], [], [], 10)
            os.close(self.pidfd)
            self.pidfd = None
        self.stdin.close()
        self.stdout.close()
        return 0


class Spawner:
    """``python -m tinygpt_course.rerun.server --spawner``: warm once, it forks a zygote per
    request (two pipe ends and a log, passed over a Unix socket). Shared by forked workers
    (:func:`share`), one request at a time, as the kernel template is."""

    lock = None             # set when shared
    failed = is_ready = False

    def __init__(self):
        self.sock, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.log = tempfile.TemporaryFile()
        self.owner = os.getpid()
        self.proc = start_warm("tinygpt_course.rerun.server", "--spawner", stdin=theirs,
                               stdout=subprocess.DEVNULL, stderr=self.log)
        theirs.close()

    def ready(self):
        """Wait until the spawner has said it is ready (once: a shared one is, before the fork)."""
        if not self.is_ready:
            self.sock.settimeout(READY_TIMEOUT)
            if self.sock.recv(16) != b"ready":
                raise ServerGone("the re-run spawner did not start")
            self.is_ready = True

    def spawn(self, reuse, log):
        """A zygote forked by the spawner (Spawned), its stderr `log`; ServerGone if none came."""
        job_r, job_w = os.pipe()
        reply_r, reply_w = os.pipe()
        fds = []
        try:
            if self.lock is not None and not self.lock.acquire(timeout=60):
                raise ServerGone("the shared re-run spawner is held by a worker that died")
            try:
                self.ready()
                self.sock.settimeout(30)
                socket.send_fds(self.sock, [b"reuse" if reuse else b"fresh"], [job_r, reply_w, log.fileno()])
                word, fds, _, _ = socket.recv_fds(self.sock, 16, 1)
            finally:
                if self.lock is not None:
                    self.lock.release()
            if word != b"spawned" or len(fds) != 1:
                raise ServerGone(f"the re-run spawner answered {word!r}")
        except (OSError, ServerGone) as exc:
            self.failed = True
            for fd in (job_w, reply_r, *fds):
                os.close(fd)
            raise ServerGone(f"the re-run spawner: {exc}") from None
        finally:
            os.close(job_r)
            os.close(reply_w)
        return Spawned(job_w, reply_r, fds[0])

    def close(self):
        self.sock.close()
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()


_spawner = None


def start_spawner():
    """Start this process's spawner now and go on (it imports torch beside the grader's work);
    its zygotes serve this process and, once shared, the workers it forks."""
    global _spawner
    if _spawner is None or _spawner.failed or _spawner.proc.poll() is not None:
        _spawner = Spawner()
    return _spawner


def share(ctx):
    """This process's spawner, if it has one, for the processes it forks from now on (one request
    at a time)."""
    if _spawner is not None and not _spawner.failed:
        try:
            _spawner.ready()
        except (OSError, ServerGone) as exc:
            _spawner.failed = True
            LOG.warning("the re-run spawner did not start (%s): each worker starts its own zygote", exc)
            return
        _spawner.lock = ctx.Lock()


def _spawner_here():
    """The spawner this process may use: its own, or the one its parent shared; else None."""
    s = _spawner
    if s is None or s.failed or (s.owner != os.getpid() and s.lock is None):
        return None
    return s


class RerunServer:
    """The zygote. fresh=False is the defence switched off (tests only): the zygote reads every
    job itself, and every job runs in one sandbox kept for them all. Starting it does not wait
    for it (it imports torch: a second of CPU); its first job waits until it is ready. Forked by
    this process's spawner where there is one, else started."""

    is_ready = False

    def __init__(self, lessons, fresh=True):
        self.fresh, self.kept = fresh, None
        self.log = tempfile.TemporaryFile()
        spawner = _spawner_here()
        if spawner is not None:
            try:
                self.proc = spawner.spawn(not fresh, self.log)
                return
            except ServerGone as exc:
                LOG.warning("%s: starting a re-run zygote of its own", exc)
        self.proc = start_warm("tinygpt_course.rerun.server", *lessons, *([] if fresh else ["--reuse"]),
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log)

    def ready(self):
        """Wait until the zygote has said it is ready (once); ServerGone if it did not start."""
        if not self.is_ready:
            header, _ = self._read(READY_TIMEOUT)
            if header.get("status") != "ready":
                raise ServerGone(f"the re-run server did not start: {self._log_tail()}")
            self.is_ready = True
        return self

    def _log_tail(self):
        self.log.seek(0)
        lines = self.log.read().decode(errors="replace").strip().splitlines()
        return quote(lines[-1]) if lines else "no message"

    def _read(self, timeout):
        try:
            return wire.read_reply(self.proc.stdout.fileno(), timeout, payload=True)
        except wire.Gone as exc:
            raise ServerGone(f"the re-run server: {exc}") from None

    def sandbox_for(self, sandbox):
        """The sandbox (tinygpt_course.grading.template.Sandboxed) the next job runs in: a fresh
        one, or (defence off) the one kept for every job; None unsandboxed."""
        if not sandbox.enabled:
            return None
        start = lambda: start_sandbox(sandbox, "/tmp", None, LOG, "a re-run")  # noqa: E731
        if self.fresh:
            return start()
        if self.kept is None or self.kept.placeholder.poll() is not None:
            self.kept = start()
        return self.kept

    def run(self, sandbox, job):
        self.ready()
        box = self.sandbox_for(sandbox)
        try:
            # unsandboxed (an opt-out), memory and CPU are still capped, as they were
            limits = {k: v for k, v in sandbox.rlimits().items() if sandbox.enabled or k != "nproc"}
            wire.write(self.proc.stdin, {**job, "ns_pid": box.ns_pid if box else None, "limits": limits,
                                         "uid": sandbox.uid, "seccomp": sandbox.seccomp_program()})
            return self._read(job["timeout"] + 60)
        except (BrokenPipeError, OSError) as exc:
            raise ServerGone(f"the re-run server ended ({exc})") from None
        finally:
            if box is not None and self.fresh:      # the job's sandbox goes, all of it
                box.close()

    def close(self):
        if self.kept is not None:
            self.kept.close()
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()


_servers = {}


def _key(lessons, fresh):
    """One zygote per process (a forked worker starts its own) and set of lessons."""
    return (os.getpid(), tuple(lessons), fresh)


def _server(lessons, fresh):
    server = _servers.get(_key(lessons, fresh))
    if server is None or server.proc.poll() is not None:
        server = _servers[_key(lessons, fresh)] = RerunServer(lessons, fresh)
    return server


def start(lessons):
    """Start this process's re-run zygote for each of `lessons` now, without waiting for it: a
    class-grading worker, as it gets its first submission, so that the zygote imports torch
    while the learner's notebook runs, not in the re-run's wait."""
    for lesson in lessons:
        _server([lesson], True)


NOT_A_RECORD = "the record is not what the checks produce"


def rerun(sandbox, lesson, setup, answer, seed, timeout, fresh=True, pickled=False, bound=True):
    """Run `answer` after the set-up cells in a sandbox of its own and extract with `seed`.
    fresh=False switches the per-job process and sandbox off, pickled=True the record as data,
    bound=False the library put back before the extract (tests only)."""
    from ..checks.protocol import load_lesson
    from ..checks.record import REJECTED_EXIT, RecordRejected, decode
    job = {"lesson": lesson, "setup": list(setup), "answer": answer, "seed": int(seed), "timeout": timeout,
           "pickled": bool(pickled), "bound": bool(bound)}
    try:
        header, payload = _server([lesson], fresh).run(sandbox, job)
    except (ServerGone, TemplateUnavailable) as exc:   # a hung or killed server: the next job gets a fresh one
        server = _servers.pop(_key([lesson], fresh), None)
        if server is not None:
            server.close()
        return RerunResult(None, f"your answer could not be re-run on its own ({quote(exc)})")
    if header["status"] == "failed":
        return RerunResult(None, f"your answer could not be re-run on its own ({quote(header.get('problem'))})")
    tail = (header.get("tail") or "").strip().splitlines()
    last = tail[-1] if tail else "no message"
    if header["status"] == "timeout":
        return RerunResult(None, f"your answer, re-run on its own, ran past the {timeout} s limit (an endless loop?)")
    if header["status"] == "too_large":
        return RerunResult(None, "your answer, re-run on its own, left a result too large to read")
    if header["exitcode"] == REJECTED_EXIT:
        return RerunResult(None, f"{NOT_A_RECORD} ({quote(last)})")
    if header["exitcode"] != 0 or not payload:
        if "MemoryError" in last or "can't allocate memory" in last:
            return RerunResult(None, "your answer, re-run on its own, ran out of memory")
        return RerunResult(None, f"your answer, re-run on its own, stopped with exit code "
                                 f"{header['exitcode']}: {quote(last)}")
    if not pickled:
        try:
            return RerunResult(decode(payload, load_lesson(lesson).schema), cpu_s=header.get("cpu_s"))
        except RecordRejected as exc:
            return RerunResult(None, f"{NOT_A_RECORD} ({quote(exc)})")
    import torch
    try:
        rec = torch.load(io.BytesIO(payload), weights_only=True)
    except Exception as exc:
        return RerunResult(None, f"the re-run left no readable result ({type(exc).__name__})")
    if not isinstance(rec, dict):
        return RerunResult(None, "the re-run left no readable result (not a record)")
    return RerunResult(rec, cpu_s=header.get("cpu_s"))
