"""hub/supervise.py keeps the hub running without systemd: a command that dies is started again,
one that exits 78 (a setting the hub cannot work with) is not, SIGHUP restarts it, and SIGTERM
stops the command alone: what it started in a session of its own (the hub's learners' servers) lives
on. The command here is a small Python program standing in for the hub: it counts its starts in a
file, starts a child in its own session, and exits with the status it is told."""
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tinygpt_course.testing.course import REPO
from tinygpt_course.testing.processes import running

SUPERVISE = REPO / "hub" / "supervise.py"
# the stand-in hub: $1 a folder; each start appends its pid to starts, starts a "server" (sleep, a
# session of its own) once, then exits with the status in the file `exit` if there is one, else
# sleeps until SIGTERM (which it records)
HUB = r'''
import os, signal, subprocess, sys, time
d = sys.argv[1]
with open(f"{d}/starts", "a") as f:
    f.write(f"{os.getpid()}\n")
if not os.path.exists(f"{d}/server"):
    s = subprocess.Popen(["sleep", "300"], start_new_session=True)
    open(f"{d}/server", "w").write(str(s.pid))
def term(*_):
    open(f"{d}/terms", "a").write(f"{os.getpid()}\n")
    sys.exit(0)
signal.signal(signal.SIGTERM, term)
if os.path.exists(f"{d}/exit"):
    code = int(open(f"{d}/exit").read())
    os.remove(f"{d}/exit")
    sys.exit(code)
while True:
    time.sleep(1)
'''


def _lines(path):
    return path.read_text().split() if path.exists() else []


def _until(check, what, timeout=60):
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"not within {timeout} s: {what}"
        time.sleep(0.1)


@pytest.fixture
def hub(tmp_path):
    (tmp_path / "hub.py").write_text(HUB)
    procs = []

    def start(first_exit=None):
        if first_exit is not None:
            (tmp_path / "exit").write_text(str(first_exit))
        p = subprocess.Popen([sys.executable, str(SUPERVISE), "--", sys.executable, str(tmp_path / "hub.py"),
                              str(tmp_path)], stderr=open(tmp_path / "supervise.log", "w"))
        procs.append(p)
        return p
    yield start, tmp_path
    for p in procs:
        if p.poll() is None:
            p.kill()
            p.wait()
    for pid in [*_lines(tmp_path / "server"), *_lines(tmp_path / "starts")]:     # the "server" lives on
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
            if b"sleep\x00300" in cmdline or str(tmp_path).encode() in cmdline:   # ours, not a reused pid
                os.kill(int(pid), signal.SIGKILL)
        except (FileNotFoundError, ProcessLookupError):
            pass


def test_a_crashed_hub_is_started_again_and_sigterm_stops_it_alone(hub):
    start, d = hub
    sup = start(first_exit=1)                          # the first start crashes
    _until(lambda: len(_lines(d / "starts")) == 2, "a second start after the crash")
    server = int((d / "server").read_text())
    hub_pid = int(_lines(d / "starts")[-1])
    _until(lambda: running(hub_pid) and len(_lines(d / "starts")) == 2, "the second start running")
    sup.send_signal(signal.SIGHUP)                     # restart now
    _until(lambda: len(_lines(d / "starts")) == 3, "a start after SIGHUP")
    assert _lines(d / "terms") == [str(hub_pid)], "SIGHUP must stop the running command with SIGTERM"
    sup.send_signal(signal.SIGTERM)
    assert sup.wait(30) == 0
    assert len(_lines(d / "terms")) == 2 and len(_lines(d / "starts")) == 3, "stopped, and not started again"
    assert running(server), "the hub's servers (sessions of their own) must outlive the hub's stop"
    log = (d / "supervise.log").read_text()
    assert "exited with status 1" in log and "restarting in 2 s" in log, log


def test_a_setting_the_hub_cannot_work_with_stops_the_supervisor(hub):
    start, d = hub
    sup = start(first_exit=78)
    assert sup.wait(30) == 78
    assert len(_lines(d / "starts")) == 1, "exit 78 must not be restarted"
    assert "not restarting" in (d / "supervise.log").read_text()
