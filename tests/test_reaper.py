"""tinygpt_course/reaper.py: a grading command that is its pid namespace's first process (a
Kubernetes pod's command) reaps the sandboxes' orphans and passes SIGTERM on to the command.
Each test runs a command as PID 1 of a pid namespace of its own (unshare, as root)."""
import os
import signal
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="a pid namespace of the test's own (unshare, as root)")

SANDBOXES = """
    import os, subprocess, sys, time
    from tinygpt_course.reaper import become_init
    from tinygpt_course.grading.sandbox import Sandbox
    if sys.argv[1] == "init":
        become_init()
    for _ in range(4):                       # each sandbox hands its own pid 1 to the namespace's init
        subprocess.run(Sandbox().wrap(["/bin/true"], chdir="/tmp/work"), check=True)
    def others():                            # processes left in the namespace, but its init and this one
        return [p for p in os.listdir("/proc") if p.isdigit() and int(p) not in (1, os.getpid())]
    deadline = time.monotonic() + (30 if sys.argv[1] == "init" else 0)
    while others() and time.monotonic() < deadline:
        time.sleep(0.05)
    print(os.getpid(), len(others()))
"""


def as_pid1(code, *args, timeout=120):
    return subprocess.run(["unshare", "--pid", "--fork", "--mount-proc", sys.executable, "-c",
                           textwrap.dedent(code), *args],
                          capture_output=True, text=True, timeout=timeout, cwd="/")


@pytest.mark.parametrize("init", [True, False], ids=["as-init", "plain"])
def test_pid1_reaps_every_sandboxs_orphan(init):
    """As PID 1, the command runs as pid 2 and nothing of its four sandboxes is left; without
    become_init (the defence off), each sandbox's own pid 1 stays, a zombie nobody reaps."""
    proc = as_pid1(SANDBOXES, "init" if init else "plain")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == (["2", "0"] if init else ["1", "4"]), proc.stdout + proc.stderr


STOPPED = """
    import os, signal, sys, time
    from tinygpt_course.reaper import become_init
    how, defence, sent = sys.argv[1:4]
    if how == "early":          # PID 1 installs its handlers only once the command has sent SIGTERM
        install = signal.signal
        def late(signum, handler):
            while os.getpid() == 1 and not os.path.exists(sent):
                time.sleep(0.01)
            return install(signum, handler)
        signal.signal = late
    if defence == "off":        # the signals are not blocked across the fork
        signal.pthread_sigmask = lambda how, mask: set()
    become_init()
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(3))
    if how == "killed":
        os.kill(os.getpid(), signal.SIGKILL)
    os.kill(1, signal.SIGTERM)               # what the kubelet sends a pod's first process
    open(sent, "w").close()
    for _ in range(300):                     # a sleep ends on the signal, whose handler exits with 3
        time.sleep(0.1)
    sys.exit(4)                              # 30 s and the signal never came
"""


@pytest.mark.parametrize("how, defence, code", [("stopped", "on", 3), ("early", "on", 3), ("early", "off", 4),
                                                ("killed", "on", 128 + signal.SIGKILL)])
def test_pid1_passes_sigterm_on_and_exits_with_the_commands_status(how, defence, code, tmp_path):
    """SIGTERM sent to PID 1 reaches the command, whose status comes back; one sent before PID 1
    has its handlers waits for them (blocked across the fork); with the block off (the defence
    off) it is dropped, as PID 1 drops any signal it has no handler for, and the command is never
    stopped."""
    proc = as_pid1(STOPPED, how, defence, str(tmp_path / "sent"), timeout=90)
    assert proc.returncode == code, proc.stderr


def test_anywhere_else_it_does_nothing():
    proc = subprocess.run([sys.executable, "-c", "import os; from tinygpt_course.reaper import become_init; "
                           "pid = os.getpid(); become_init(); print(os.getpid() == pid)"],
                          capture_output=True, text=True, timeout=60, cwd="/")
    assert proc.stdout.split() == ["True"], proc.stderr
