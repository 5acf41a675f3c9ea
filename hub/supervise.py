"""Keep one command running, as the systemd units do, where there is no systemd (a container whose
PID 1 is not systemd, a machine run by hand).

    python3 hub/supervise.py [--pidfile FILE] -- COMMAND [ARG...]

Starts COMMAND and starts it again 2 s after it exits, whatever its exit status (Restart=always,
RestartSec=2), except 78: a setting the hub cannot work with (jupyterhub_config.py says which and
exits 78, RestartPreventExitStatus=78), which a restart would not fix, so this exits 78 too. A
command that keeps dying soon after its start is restarted after 2, 4, 8 ... s, 60 s at most, so
a broken set-up does not spin. SIGTERM or SIGINT (Ctrl-C) to this process: SIGTERM to the command
alone (KillMode=process: the hub's learners' servers are sessions of their own and keep running),
wait for it, exit. SIGHUP: restart the command now (`systemctl restart`). The command starts with
SIGINT and SIGTERM at their defaults, whatever this process inherited, in a session of its own (so
a Ctrl-C reaches it once, through this). Each start and exit is written to stderr with the time.
tests/test_supervise.py runs it.
"""
import argparse
import os
import signal
import subprocess
import sys
import time

EX_CONFIG = 78          # hub/jupyterhub_config.py: a setting the hub cannot work with
RESTART_S = 2           # as RestartSec=2 in hub/systemd/*.service
MAX_WAIT_S = 60
STEADY_S = 30           # a command that ran this long was healthy: the next restart waits RESTART_S


def log(msg):
    print(f"[supervise {time.strftime('%Y-%m-%d %H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def _default_signals():
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_DFL)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--pidfile", help="write this process's pid here (for kill -HUP / -TERM)")
    p.add_argument("command", nargs=argparse.REMAINDER, help="-- then the command and its arguments")
    args = p.parse_args(argv)
    cmd = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not cmd:
        p.error("no command: supervise.py -- COMMAND [ARG...]")
    if args.pidfile:
        with open(args.pidfile, "w") as f:
            f.write(f"{os.getpid()}\n")

    wanted = {"stop": False, "restart": False}
    child = None

    def on_signal(sig, _frame):
        wanted["stop" if sig in (signal.SIGTERM, signal.SIGINT) else "restart"] = True
        if child is not None and child.poll() is None:
            child.send_signal(signal.SIGTERM)

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, on_signal)

    fast_exits = 0
    while True:
        started = time.monotonic()
        child = subprocess.Popen(cmd, preexec_fn=_default_signals, start_new_session=True)
        if wanted["stop"] or wanted["restart"]:      # a signal while it was being started
            child.send_signal(signal.SIGTERM)
        log(f"started {cmd[0]} (pid {child.pid})")
        code = child.wait()                          # a signal's handler runs, then it waits on
        log(f"{cmd[0]} (pid {child.pid}) exited with status {code}")
        if wanted["stop"]:
            return code if code >= 0 else 0
        if code == EX_CONFIG:
            log(f"exit status {EX_CONFIG}: a setting it cannot work with (its log says which); not restarting")
            return EX_CONFIG
        if wanted["restart"]:
            wanted["restart"] = False
            continue
        fast_exits = 0 if time.monotonic() - started >= STEADY_S else fast_exits + 1
        wait_s = min(MAX_WAIT_S, RESTART_S * 2 ** max(0, fast_exits - 1))
        log(f"restarting in {wait_s} s")
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline and not wanted["stop"]:
            time.sleep(0.1)
        if wanted["stop"]:
            return 0
        wanted["restart"] = False


if __name__ == "__main__":
    sys.exit(main())
