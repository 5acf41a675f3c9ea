"""hub/jupyterhub_config.py's parts that run without a hub: the idle culler as the hub starts and
stops it, each server's log file (hub/server_log.py), and what a teacher's server is told about
grading memory. The live hub (tests/test_hub.py) runs them with real users.

The culler: the hub stops a service with SIGINT and waits Spawner.interrupt_timeout (30 s) before
SIGTERM. A hub started with SIGINT ignored (a script's `jupyterhub &`) starts its services with it
ignored too: the culler, started with `python -m jupyterhub_idle_culler`, sat out the 30 s at every
hub restart. Here the culler is started with the config's own command, SIGINT ignored, in a session
of its own (as the hub's service spawner starts it), and stopped with SIGINT: it must be gone well
before the hub would give up on it; the old command is not (the defence switched off).
"""
import json
import os
import pwd
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tinygpt_course.testing.course import REPO, load_script

HUB = REPO / "hub"
BOUND_S = 10            # well under the hub's wait (interrupt_timeout, checked below)

LOAD_CONFIG = """
import json, sys, types
from traitlets.config import Config
c = Config(); f = {config!r}; g = {{'get_config': lambda: c, '__file__': f, '__name__': 'cfg'}}
exec(compile(open(f).read(), f, 'exec'), g)
spawner = types.SimpleNamespace(user=types.SimpleNamespace(name=sys.argv[1]), environment={{}}, cmd=[])
g['pre_spawn_hook'](spawner)
print(json.dumps({{'services': c.JupyterHub.services if 'services' in c.JupyterHub else [], 'environment': spawner.environment,
                  'poll_interval': c.Spawner.poll_interval}}))
"""


def load_config(tmp_path, user="teacher", **env):
    """The hub's config as the hub reads it (as root, its state and exchange under tmp_path), and
    what its pre_spawn_hook sets for `user`'s server."""
    teacher = pwd.getpwuid(os.getuid()).pw_name
    env = {**os.environ, "TINYGPT_HUB_STATE": str(tmp_path / "state"), "TINYGPT_EXCHANGE": str(tmp_path / "exchange"),
           "TINYGPT_TEACHERS": teacher, "TINYGPT_LEARNER_CGROUP": "off", **env}
    r = subprocess.run([sys.executable, "-c", LOAD_CONFIG.format(config=str(HUB / "jupyterhub_config.py")),
                        teacher if user == "teacher" else user],
                       capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def config(tmp_path_factory):
    return load_config(tmp_path_factory.mktemp("hubconfig"), TINYGPT_CULL_TIMEOUT="3600")


def _ignore_sigint():
    signal.signal(signal.SIGINT, signal.SIG_IGN)      # as inherited from a shell's background job


def stop_as_the_hub_does(command, tmp_path):
    """Start `command` as the hub starts a service (its own session, SIGINT ignored as inherited),
    once it is running send SIGINT as the hub's first stop signal; return seconds until it exited,
    or None if it was still running after BOUND_S (then it is killed)."""
    log = tmp_path / "culler.log"
    env = {**os.environ, "JUPYTERHUB_API_TOKEN": "not-a-token",
           "JUPYTERHUB_API_URL": "http://127.0.0.1:9/hub/api"}    # nothing listens: each cull logs an error
    with open(log, "w") as out:
        proc = subprocess.Popen(command, env=env, stdout=out, stderr=subprocess.STDOUT,
                                preexec_fn=_ignore_sigint, start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while "Connection refused" not in log.read_text():      # its first cull ran: it is in its loop
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(0.1)
        t0 = time.monotonic()
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(BOUND_S)
            return time.monotonic() - t0
        except subprocess.TimeoutExpired:
            return None
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_the_hub_waits_long_for_a_service_that_ignores_its_first_signal():
    from jupyterhub.spawner import LocalProcessSpawner
    assert LocalProcessSpawner().interrupt_timeout >= 2 * BOUND_S


def test_the_culler_stops_at_the_hubs_first_signal(config, tmp_path):
    (service,) = config["services"]
    assert service["name"] == "idle-culler"
    command = service["command"]
    assert command[1] == str(HUB / "idle_culler.py") and "--timeout=3600" in command
    took = stop_as_the_hub_does(command, tmp_path)
    assert took is not None, f"the culler was still running {BOUND_S} s after SIGINT"
    print(f"the culler, started with SIGINT ignored, exited {took:.2f} s after SIGINT")


def test_the_culler_without_its_wrapper_sits_out_the_signal(config, tmp_path):
    """The defence switched off: the command the config had before."""
    command = [sys.executable, "-m", "jupyterhub_idle_culler", *config["services"][0]["command"][2:]]
    assert stop_as_the_hub_does(command, tmp_path) is None


def test_no_culler_when_switched_off(tmp_path):
    assert not load_config(tmp_path, TINYGPT_CULL_TIMEOUT="0")["services"]


def test_teachers_servers_get_the_grading_memory_budget(config, tmp_path):
    from tinygpt_course.classroom.cli import MEMORY_ENV
    assert config["environment"][MEMORY_ENV] == "1536"                 # the documented default
    assert load_config(tmp_path, **{MEMORY_ENV: "4096"})["environment"][MEMORY_ENV] == "4096"
    assert MEMORY_ENV not in load_config(tmp_path, user="somestudent")["environment"]


# --- each server's log file

def _load_server_log():
    return load_script(HUB / "server_log.py", "server_log")


server_log = _load_server_log()


def _as_nobody(args, **kw):
    nobody = pwd.getpwnam("nobody")
    kw.setdefault("capture_output", "stdout" not in kw)
    return subprocess.run(args, user=nobody.pw_uid, group=nobody.pw_gid, extra_groups=[], text=True, **kw)


@pytest.fixture
def open_dir():
    """A folder every user may pass through (pytest's tmp_path is root's alone, which would hide
    the log's own mode)."""
    import shutil
    import tempfile
    base = Path(tempfile.mkdtemp(prefix="tinygpt-logtest-", dir="/var/tmp"))
    os.chmod(base, 0o711)
    yield base
    shutil.rmtree(base)


def test_a_server_writes_its_own_log_that_nobody_else_reads(open_dir):
    """As CappedSpawner.start does: the hub (root) opens the log, a process of another uid writes
    through the descriptor it is handed, and cannot open the file itself; the next start keeps the
    last log as .log.1."""
    if os.geteuid() != 0:
        pytest.skip("the hub runs as root")
    folder = open_dir / "logs"
    fd = server_log.open_log(str(folder), "alice")
    try:
        _as_nobody([sys.executable, "-c", "import sys; print('server says hi', flush=True); "
                    "print('kernel warns', file=sys.stderr)"], stdout=fd, stderr=fd, check=True)
    finally:
        os.close(fd)
    log = folder / "alice.log"
    text = log.read_text()
    assert "alice's server starting" in text and "server says hi" in text and "kernel warns" in text, text
    assert (log.stat().st_uid, log.stat().st_mode & 0o777) == (0, 0o600)
    assert (folder.stat().st_uid, folder.stat().st_mode & 0o777) == (0, 0o700)
    assert _as_nobody(["cat", str(log)]).returncode != 0
    # the check fails where the defence is off: a folder and file others may read
    os.chmod(folder, 0o755), os.chmod(log, 0o644)
    assert _as_nobody(["cat", str(log)]).stdout == text
    # the next start: root's and private again, the last server's log kept
    os.close(server_log.open_log(str(folder), "alice"))
    assert (folder.stat().st_mode & 0o777, log.stat().st_mode & 0o777) == (0o700, 0o600)
    assert "server says hi" in (folder / "alice.log.1").read_text() and "server says hi" not in log.read_text()
    with pytest.raises(ValueError):
        server_log.open_log(str(folder), "../etc/passwd")


def test_a_log_past_its_bound_is_moved_aside_and_the_server_writes_on(tmp_path):
    folder = tmp_path / "logs"
    fd = server_log.open_log(str(folder), "bob")
    try:
        os.write(fd, b"x" * 5000)
        assert not server_log.trim(str(folder), "bob", 10_000)
        assert server_log.trim(str(folder), "bob", 4096)
        os.write(fd, b"after the trim\n")                  # the server's descriptor appends at the new end
    finally:
        os.close(fd)
    log = (folder / "bob.log").read_bytes()
    assert log.endswith(b"after the trim\n") and b"bob.log.1" in log and len(log) < 200, log[:300]
    assert (folder / "bob.log.1").read_bytes().count(b"x") == 5000
    assert oct((folder / "bob.log.1").stat().st_mode & 0o777) == oct(0o600)


def test_the_hub_polls_often_enough_to_bound_the_logs(config):
    assert config["poll_interval"] <= 30
