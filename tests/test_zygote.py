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


# --- the warm processes' memory in 2 MB pages (zygote.huge_pages) -------------------------------

HUGE = r'''
import os, sys
from tinygpt_course.zygote import huge_pages

def anon_huge_mib():
    return int(next(l.split()[1] for l in open("/proc/self/smaps_rollup") if l.startswith("AnonHugePages:"))) // 1024

data = bytearray(os.urandom(1 << 20) * 48)            # 48 MiB of anonymous memory, written
before = anon_huge_mib()
collapsed = huge_pages()
after = anon_huge_mib()
r, w = os.pipe()
pid = os.fork()
if pid == 0:                                          # a fork writes its own copy
    data[: 1 << 22] = bytes(1 << 22)
    os.write(w, str(anon_huge_mib()).encode())
    os._exit(0)
os.waitpid(pid, 0)
print(before, collapsed, after, os.read(r, 20).decode(), any(data[: 1 << 22]))
'''


def collapsible():
    """Whether this kernel puts anonymous memory in 2 MB pages when asked (MADV_COLLAPSE, Linux
    6.1, transparent huge pages not "never")."""
    import ctypes
    import mmap
    try:
        with open("/sys/kernel/mm/transparent_hugepage/enabled") as f:
            if "[never]" in f.read():
                return False
    except OSError:
        return False
    from tinygpt_course.zygote import HUGE_PAGE, MADV_COLLAPSE, libc
    area = mmap.mmap(-1, 2 * HUGE_PAGE, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    area.write(b"x" * (2 * HUGE_PAGE))
    start = ctypes.addressof(ctypes.c_char.from_buffer(area))
    start = -(-start // HUGE_PAGE) * HUGE_PAGE        # the one whole 2 MB page inside
    return libc.madvise(ctypes.c_void_p(start), ctypes.c_size_t(HUGE_PAGE), MADV_COLLAPSE) == 0


def test_a_warm_process_puts_its_memory_in_huge_pages_and_a_fork_still_copies_what_it_writes():
    """huge_pages() collapses the process's anonymous memory (48 MiB written) into 2 MB pages;
    a fork shares them and still writes its own copy (the parent's data unchanged), and
    where the kernel cannot, nothing changes."""
    out = subprocess.run([sys.executable, "-c", HUGE], capture_output=True, text=True, timeout=60, check=True).stdout
    before, collapsed, after, in_fork, parent_kept = out.split()
    assert parent_kept == "True"            # the child's write did not reach the parent
    if not collapsible():
        assert collapsed == "0"
        return
    assert int(collapsed) >= 40 and int(after) >= int(before) + 40, out
    assert int(in_fork) >= 32, out          # the fork maps them as 2 MB pages too
