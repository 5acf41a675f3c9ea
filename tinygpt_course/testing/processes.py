"""Processes as tests see them from /proc."""


def running(pid):
    """Whether process `pid` still runs: there, and not a zombie waiting to be reaped (a process
    that ended counts as gone even before its parent collects it)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"    # the name in (...) may hold spaces
    except OSError:
        return False
