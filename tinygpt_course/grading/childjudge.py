"""Judging one learner's record in a child process, within a CPU and a wall-clock budget.

A record comes from a process the learner controls. Judged in the grader's own process, a record
built to be slow (a 1 KB tuple graph that shares its levels, 2^64 leaves once a judge's ``set()``
hashes it) spins for ever: ``nbgrader autograde`` never reaches the next learner. Here the grader
forks once the record is loaded (the child has the record, the reference and the judges already
in memory: no import, no copy), the child judges every check under RLIMIT_CPU and writes the
verdicts back as plain JSON data (check, passed, kind, mistake, a capped message), and the parent
reads them within the wall-clock budget, kills the child when it runs out, and parses the reply
against a fixed schema. A judge that raises, a child that dies, runs out of time or answers
anything but that schema: every check of that learner gets a NO_RESULT verdict saying so, and
grading goes on with the next learner.
"""
import json
import os
import resource
import select
import signal
import time

from ..checks.protocol import MISTAKE_ID, Kind, Verdict, quote

MESSAGE_LIMIT = 1000        # characters of a verdict's message the child sends back
REPLY_LIMIT = 1 << 20       # bytes of the child's whole reply


def _judge(lesson, test_ids, rec, ref):
    """In the child: [[check, passed, kind, mistake, message], ...] as JSON bytes."""
    rows = []
    for gid in test_ids:
        v = lesson.verdict(gid, rec, ref)
        rows.append([gid, bool(v.passed), Kind(v.kind).value, v.mistake, quote(v.message, MESSAGE_LIMIT)])
    return json.dumps(rows).encode()


def parse_reply(data, test_ids):
    """{check: Verdict} from the child's reply, or None when it is not exactly the schema."""
    try:
        rows = json.loads(data)
    except (ValueError, UnicodeDecodeError, RecursionError):
        return None
    if not isinstance(rows, list) or len(rows) != len(test_ids):
        return None
    verdicts = {}
    for row in rows:
        if not (isinstance(row, list) and len(row) == 5):
            return None
        gid, passed, kind, mistake, message = row
        if gid not in test_ids or gid in verdicts or not isinstance(passed, bool) or not isinstance(message, str):
            return None
        if kind not in {k.value for k in Kind} or (kind == Kind.PASSED.value) != passed:
            return None
        if passed:
            verdicts[gid] = Verdict.ok(quote(message, MESSAGE_LIMIT))
        elif isinstance(mistake, str) and MISTAKE_ID.match(mistake):
            verdicts[gid] = Verdict.fail(kind, quote(message, MESSAGE_LIMIT), mistake)
        else:
            return None
    return verdicts


def _read(fd, deadline):
    """The child's reply (up to REPLY_LIMIT bytes) until it closes the pipe; None past deadline."""
    chunks, size = [], 0
    while True:
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            return None
        chunk = os.read(fd, 65536)
        if not chunk:
            return b"".join(chunks)
        size += len(chunk)
        if size > REPLY_LIMIT:
            return b""
        chunks.append(chunk)


def judge_in_child(lesson, test_ids, rec, ref, wall_s, cpu_s):
    """{check: Verdict} for every check of test_ids, judged in a forked child with `cpu_s` CPU
    seconds and `wall_s` seconds of wall clock; NO_RESULT verdicts when it fails or runs out."""
    test_ids = tuple(test_ids)
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:                                      # the child: judge, write, leave
        code = 1
        try:
            os.close(r)
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            limit = max(1, int(cpu_s))
            resource.setrlimit(resource.RLIMIT_CPU, (limit, limit + 1))
            data = _judge(lesson, test_ids, rec, ref)
            with os.fdopen(w, "wb") as out:
                out.write(data)
            code = 0
        finally:
            os._exit(code)
    os.close(w)
    data = None
    try:
        data = _read(r, time.monotonic() + wall_s)
    finally:                                          # past the deadline, or the grader interrupted
        os.close(r)
        if data is None:
            os.kill(pid, signal.SIGKILL)
        _, status = os.waitpid(pid, 0)
    verdicts = parse_reply(data, test_ids) if data and os.waitstatus_to_exitcode(status) == 0 else None
    if verdicts is not None:
        return verdicts
    if data is None:
        problem = f"checking your answer took longer than {wall_s:g} s"
    elif os.WIFSIGNALED(status) and os.WTERMSIG(status) in (signal.SIGXCPU, signal.SIGKILL):
        problem = f"checking your answer took more than {cpu_s:g} s of CPU time"
    else:
        problem = "your answer's result could not be checked (the checks stopped before they gave a verdict)"
    failed = Verdict.fail(Kind.NO_RESULT, problem)
    return {gid: failed for gid in test_ids}
