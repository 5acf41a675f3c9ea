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
print(json.dumps({{'services': c.JupyterHub.services if 'services' in c.JupyterHub else [],
                  'roles': c.JupyterHub.load_roles if 'load_roles' in c.JupyterHub else [], 'environment': spawner.environment,
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


# --- grading on submit (TINYGPT_GRADING_SERVICE): its two services, as the teacher

def _free_port():
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_no_grading_service_unless_switched_on(config):
    assert [s["name"] for s in config["services"]] == ["idle-culler"]
    assert all(role["name"] != "user" for role in config["roles"])     # the hub's own user role


def test_the_grading_services_run_as_the_teacher_and_learners_reach_the_page_only(tmp_path):
    cfg = load_config(tmp_path, TINYGPT_GRADING_SERVICE="on", TINYGPT_TEACHERS="nobody,teacher2",
                      TINYGPT_STUDENTS="alice", TINYGPT_GRADING_PORT="10177")
    services = {s["name"]: s for s in cfg["services"]}
    assert set(services) == {"idle-culler", "grading-runner", "grading"}
    runner, page = services["grading-runner"], services["grading"]
    course = os.path.join(os.path.expanduser("~nobody"), "tinygpt")
    assert runner["user"] == page["user"] == "nobody"                   # the first teacher: never root, never a student
    assert runner["command"][1:] == ["run", "--course-dir", course]
    assert runner["command"][0].endswith("/bin/tinygpt-grading-service")
    assert page["command"][-4:] == ["--course-dir", course, "--teachers", "nobody,teacher2"]
    assert page["url"] == "http://127.0.0.1:10177" and page["oauth_no_confirm"] is True
    assert "user" not in services["idle-culler"]                        # the hub's own, as before
    # learners: their own rights and access to this service alone (not access:services, every service)
    (user_role,) = [r for r in cfg["roles"] if r["name"] == "user"]
    assert sorted(user_role["scopes"]) == ["access:services!service=grading", "self"]
    with pytest.raises(AssertionError, match="TINYGPT_GRADING_SERVICE"):
        load_config(tmp_path, TINYGPT_GRADING_SERVICE="yes")


def test_the_grading_page_starts_as_the_hub_starts_it(tmp_path):
    """The service's command as the hub's service spawner runs it: dropped to the teacher's uid
    (jupyterhub.spawner.set_user_setuid, the spawner's own), the hub's JUPYTERHUB_* settings,
    SIGINT ignored as inherited; it listens, sends a visitor without a token to the hub's OAuth,
    and stops at the hub's first signal."""
    if os.geteuid() != 0:
        pytest.skip("the hub runs as root")
    import urllib.error
    import urllib.request

    from jupyterhub.spawner import set_user_setuid
    port = _free_port()
    cfg = load_config(tmp_path, TINYGPT_GRADING_SERVICE="on", TINYGPT_TEACHERS="nobody", TINYGPT_GRADING_PORT=str(port))
    (page,) = [s for s in cfg["services"] if s["name"] == "grading"]
    env = {**page["environment"], "JUPYTERHUB_SERVICE_URL": page["url"], "JUPYTERHUB_SERVICE_NAME": "grading",
           "JUPYTERHUB_SERVICE_PREFIX": "/services/grading/", "JUPYTERHUB_API_URL": "http://127.0.0.1:9/hub/api",
           "JUPYTERHUB_API_TOKEN": "not-a-token", "JUPYTERHUB_CLIENT_ID": "service-grading", "HOME": "/"}
    become = set_user_setuid(page["user"], chdir=False)

    def as_the_hub():
        _ignore_sigint()            # as inherited from a hub started as a background job
        become()
    proc = subprocess.Popen(page["command"], env=env, preexec_fn=as_the_hub,
                            start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

    class NoRedirect(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args, **kwargs):
            return None
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                urllib.request.build_opener(NoRedirect).open(f"{page['url']}/services/grading/api/mine", timeout=10)
                raise AssertionError("answered without a login")
            except urllib.error.HTTPError as e:
                assert e.code == 302 and "/hub/api/oauth2/authorize" in e.headers["Location"], e.headers
                break
            except urllib.error.URLError:
                assert proc.poll() is None and time.monotonic() < deadline, proc.stdout.read()[-3000:]
                time.sleep(0.2)
        with open(f"/proc/{proc.pid}/status") as f:
            uids = [line.split()[1:] for line in f if line.startswith("Uid:")][0]
        assert set(uids) == {str(pwd.getpwnam("nobody").pw_uid)}
        proc.send_signal(signal.SIGINT)                 # the hub's first stop signal: it stops
        assert proc.wait(BOUND_S) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
