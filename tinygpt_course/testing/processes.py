"""Processes as tests see them from /proc."""
import os
import time


def running(pid):
    """Whether process `pid` still runs: there, and not a zombie waiting to be reaped (a process
    that ended counts as gone even before its parent collects it)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"    # the name in (...) may hold spaces
    except OSError:
        return False


def uid_of(pid):
    """The real uid of process `pid`, or None where it is gone."""
    try:
        with open(f"/proc/{pid}/status") as f:
            return int(next(ln for ln in f if ln.startswith("Uid:")).split()[1])
    except (OSError, StopIteration):
        return None


def processes_of(*uids):
    """The pids of the machine's processes whose real uid is one of `uids`, zombies included:
    what RLIMIT_NPROC counts."""
    return [int(p) for p in os.listdir("/proc") if p.isdigit() and uid_of(p) in uids]


def until_none_of(*uids, timeout=60):
    """Wait until no process of `uids` is left. A sandbox's processes die with it, but its pid
    namespace is torn down after its bubblewrap has been waited for, and its own pid 1 is reaped by
    the namespace's init (reaper.py): a flood started while the last one's are still counted stops
    early, and the uid's cap is not what stopped it."""
    deadline = time.monotonic() + timeout
    while left := processes_of(*uids):
        assert time.monotonic() < deadline, f"processes of uids {uids} alive after {timeout} s: {left}"
        time.sleep(0.05)
