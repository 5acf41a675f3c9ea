"""tinygpt_course.zygote.serve: the one way the kernel template and the re-run zygote fork a
worker per job. Fast: plain processes, no sandbox."""
import os
import subprocess
import sys
import time

from tinygpt_course import wire

SERVER = '''
import os, sys, time
from tinygpt_course import wire
from tinygpt_course.zygote import serve

def handle(job):
    def then():                       # a keeper waiting for its kernel
        deadline = time.monotonic() + 20
        while not os.path.exists(job["hold"]) and time.monotonic() < deadline:
            time.sleep(0.01)
    return {"n": job["n"], "pid": os.getpid(), "ppid": os.getppid()}, None, then if job.get("hold") else None

inp = os.fdopen(0, "rb", buffering=0, closefd=False)
out = os.fdopen(1, "wb", buffering=0, closefd=False)
wire.write(out, {"ready": os.getpid()})
serve(inp, out, handle, reuse="--reuse" in sys.argv)
'''


def start(*args):
    proc = subprocess.Popen([sys.executable, "-c", SERVER, *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    ready, _ = wire.read_reply(proc.stdout.fileno(), 30)
    return proc, ready["ready"]


def ask(proc, job):
    wire.write(proc.stdin, job)
    return wire.read_reply(proc.stdout.fileno(), 10)[0]


def test_every_job_gets_a_fresh_worker_and_a_keeper_waits_beside_the_next(tmp_path):
    proc, server = start()
    hold = tmp_path / "kernel-ended"
    first = ask(proc, {"n": 1, "hold": str(hold)})       # its worker goes on waiting after the reply
    second = ask(proc, {"n": 2})                          # answered while the first still waits
    third = ask(proc, {"n": 3})
    pids = [r["pid"] for r in (first, second, third)]
    assert len(set(pids)) == 3 and server not in pids, (server, pids)
    assert {r["ppid"] for r in (first, second, third)} == {server}
    os.kill(first["pid"], 0)                              # the first worker is still there
    hold.touch()
    proc.stdin.close()                                    # the grader is done: the server ends
    assert proc.wait(timeout=20) == 0
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            os.kill(first["pid"], 0)
        except ProcessLookupError:
            break
        time.sleep(0.05)
    else:
        raise AssertionError("the waiting worker did not end")


def test_with_reuse_one_worker_reads_every_job():
    """The defence off (--reuse, tests only): one process holds every job it was sent."""
    proc, server = start("--reuse")
    pids = {ask(proc, {"n": n})["pid"] for n in range(3)}
    proc.stdin.close()
    assert proc.wait(timeout=20) == 0
    assert len(pids) == 1 and server not in pids
