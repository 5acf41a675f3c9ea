"""The grader's side of the re-run: start the sandboxed re-run server, send jobs, read records.

One server per grading process (a forked class-grading worker starts its own): bubblewrap
running ``python -m tinygpt_course.rerun.server``, which imports torch once and forks a child
per job (see that module). This module never imports it: learner code runs only over there.
Records come back as bytes and are loaded with ``torch.load(weights_only=True)``: plain
tensors and containers, nothing that could run code here.
"""
import io
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass

from .. import wire
from .sandbox import sandbox_env

READY_TIMEOUT = 180


@dataclass(frozen=True)
class RerunResult:
    """A re-run's record, or (record None) what went wrong, in the learner's terms."""
    record: object
    problem: str = ""
    cpu_s: float = None      # CPU seconds of the re-run's process (bench/breakdown.py reads it)


class ServerGone(RuntimeError):
    pass


class RerunServer:
    def __init__(self, sandbox, lessons):
        self.sandbox = sandbox
        self.log = tempfile.TemporaryFile()
        argv = [sys.executable, "-m", "tinygpt_course.rerun.server", *lessons]
        self.proc = subprocess.Popen(sandbox.wrap(argv, chdir="/tmp"), stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=self.log, env=sandbox_env(),
                                     cwd=tempfile.gettempdir(), start_new_session=True)
        header, _ = self._read(READY_TIMEOUT)
        if header.get("status") != "ready":
            raise ServerGone(f"the re-run server did not start: {self._log_tail()}")

    def _log_tail(self):
        self.log.seek(0)
        return self.log.read().decode(errors="replace")[-1500:] or "no message"

    def _read(self, timeout):
        try:
            return wire.read_reply(self.proc.stdout.fileno(), timeout, payload=True)
        except wire.Gone as exc:
            raise ServerGone(f"the re-run server: {exc}: {self._log_tail()}") from None

    def run(self, job):
        try:
            wire.write(self.proc.stdin, job)
            return self._read(job["timeout"] + 60)
        except (BrokenPipeError, OSError) as exc:
            raise ServerGone(f"the re-run server ended ({exc}): {self._log_tail()}") from None

    def close(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()


_servers = {}


def _key(sandbox, lessons):
    """One server per process (a forked worker starts its own), lessons and sandbox settings."""
    return (os.getpid(), tuple(lessons), sandbox.enabled, sandbox.memory_limit_mb, sandbox.cpu_limit_s)


def _server(sandbox, lessons):
    server = _servers.get(_key(sandbox, lessons))
    if server is None or server.proc.poll() is not None:
        server = _servers[_key(sandbox, lessons)] = RerunServer(sandbox, lessons)
    return server


def rerun(sandbox, lesson, setup, answer, seed, timeout):
    """Run `answer` after the set-up cells in the sandbox and extract with `seed`."""
    import torch
    job = {"lesson": lesson, "setup": list(setup), "answer": answer, "seed": int(seed), "timeout": timeout,
           "memory_limit_mb": sandbox.memory_limit_mb, "cpu_limit_s": sandbox.cpu_limit_s}
    try:
        header, payload = _server(sandbox, [lesson]).run(job)
    except ServerGone as exc:          # a hung or killed server: the next job gets a fresh one
        server = _servers.pop(_key(sandbox, [lesson]), None)
        if server is not None:
            server.close()
        return RerunResult(None, f"your answer could not be re-run on its own ({exc})")
    tail = (header.get("tail") or "").strip().splitlines()
    last = tail[-1] if tail else "no message"
    if header["status"] == "timeout":
        return RerunResult(None, f"your answer, re-run on its own, ran past the {timeout} s limit (an endless loop?)")
    if header["status"] == "too_large":
        return RerunResult(None, "your answer, re-run on its own, left a result too large to read")
    if header["exitcode"] != 0 or not payload:
        if "MemoryError" in last or "can't allocate memory" in last:
            return RerunResult(None, "your answer, re-run on its own, ran out of memory")
        return RerunResult(None, f"your answer, re-run on its own, stopped with exit code "
                                 f"{header['exitcode']}: {last[:300]}")
    try:
        rec = torch.load(io.BytesIO(payload), weights_only=True)
    except Exception as exc:
        return RerunResult(None, f"the re-run left no readable result ({type(exc).__name__})")
    if not isinstance(rec, dict):
        return RerunResult(None, "the re-run left no readable result (not a record)")
    return RerunResult(rec, cpu_s=header.get("cpu_s"))
