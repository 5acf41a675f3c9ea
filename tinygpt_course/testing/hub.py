"""For tests/test_hub.py: local Unix users, a world-readable course venv, a live JupyterHub.

Everything here is real: useradd/userdel, runuser, pip, jupyterhub, configurable-http-proxy.
Processes are ended by their ids only (the hub, and processes owned by the test's own users).
"""
import grp
import json
import os
import pwd
import re
import secrets
import shutil
import signal
import subprocess
import sys
import time
import tomllib
import urllib.error
import urllib.request
from pathlib import Path

from .course import REPO, copy_course, free_port

USER_TAG = "tinygpt-course hub test"   # the GECOS field marks users this test created


def ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


def missing_tools() -> list[str]:
    """What the live hub test needs from the machine, as a list of what is missing."""
    missing = []
    if os.geteuid() != 0:
        missing.append("root (to create Unix users and run the hub)")
    for tool in ("useradd", "userdel", "groupadd", "groupdel", "chpasswd", "runuser"):
        if not shutil.which(tool):
            missing.append(tool)
    if not shutil.which("configurable-http-proxy"):
        missing.append("configurable-http-proxy (npm install -g configurable-http-proxy@5.3.0)")
    if not os.access("/usr/bin/chromium", os.X_OK):
        missing.append("/usr/bin/chromium (apt-get install chromium)")
    if subprocess.run(["/usr/bin/python3", "-c", "import venv, ensurepip"],
                      capture_output=True).returncode != 0:
        missing.append("/usr/bin/python3 with venv (apt-get install python3-venv)")
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        missing.append("playwright (pip install -e .[test])")
    return missing


def pins() -> dict[str, str]:
    """name -> 'name==version' from pyproject.toml (dependencies and the test extra)."""
    meta = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    out = {}
    for spec in meta["dependencies"] + meta["optional-dependencies"]["test"]:
        out[re.split(r"[=<>!~ \[]", spec, maxsplit=1)[0].lower()] = spec
    return out


def make_course_venv(base: Path, log) -> Path:
    """A venv from /usr/bin/python3 that every user can read, with the course and jupyterhub.

    The test's own venv when every user can already read it and the repo (course.sh makes it from
    /usr/bin/python3); else a new one under base, with the course installed from a copy (not
    editable: the repo may be unreadable to them). TINYGPT_HUB_TEST_VENV names one to reuse, or
    is "new" to always make one (as CI does when its clone is private)."""
    reuse = os.environ.get("TINYGPT_HUB_TEST_VENV", "")
    if reuse and reuse != "new":
        return Path(reuse)
    if reuse != "new" and readable_by_all(Path(sys.prefix)) and readable_by_all(REPO) and \
            (Path(sys.prefix) / "bin" / "jupyterhub-singleuser").exists() and \
            Path(os.path.realpath(sys.executable)).is_relative_to("/usr"):
        return Path(sys.prefix)      # the test venv itself: every user can already read it
    venv = base / "venv"
    src = base / "course-src"      # a copy, so pip's in-tree build leaves the work tree alone
    src.mkdir()
    shutil.copy(REPO / "pyproject.toml", src)
    shutil.copy(REPO / "README.md", src)
    shutil.copytree(REPO / "tinygpt_course", src / "tinygpt_course",
                    ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    subprocess.run(["/usr/bin/python3", "-m", "venv", str(venv)], check=True)
    p = pins()
    cmd = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check",
           str(src), p["torch"], p["jupyterhub"]]
    r = subprocess.run(cmd, capture_output=True, text=True)
    log.write_text(r.stdout + r.stderr)
    assert r.returncode == 0, f"pip install into the hub venv failed, see {log}"
    # as course.sh setup does: "view feedback" opens the feedback (hub/labextension/)
    shutil.copytree(REPO / "hub" / "labextension" / "tinygpt-feedback",
                    venv / "share" / "jupyter" / "labextensions" / "tinygpt-feedback")
    shutil.rmtree(src)
    return venv


def course_source_copy(base: Path) -> Path:
    """The course's nbgrader_config.py and source/, where every user can read them (the hub copies
    them into the teacher's course folder at their server's first start)."""
    src = copy_course(base / "course")
    subprocess.run(["chmod", "-R", "a+rX", str(src)], check=True)
    return src


def readable_by_all(path: Path) -> bool:
    """Can any user read and enter path and every folder above it?"""
    path = path.resolve()
    for p in [path, *path.parents]:
        if p.stat().st_mode & 0o005 != 0o005:
            return False
    return True


# --- users ---------------------------------------------------------------------------------------

def remove_user(name: str) -> None:
    """Remove a user this test created (marked by USER_TAG), ending their processes by pid first."""
    try:
        pw = pwd.getpwnam(name)
    except KeyError:
        return
    if pw.pw_gecos != USER_TAG:
        raise RuntimeError(f"user {name} exists and was not made by this test: not touching it")
    kill_uid_processes(pw.pw_uid)
    subprocess.run(["userdel", "-r", name], capture_output=True)


def add_group(group: str, ours: set[str]) -> None:
    """groupadd; a leftover of an interrupted run (no members but ours) is made anew."""
    try:
        members = set(grp.getgrnam(group).gr_mem)
    except KeyError:
        members = None
    if members is not None:
        if members - ours:
            raise RuntimeError(f"group {group} exists with other members {members - ours}: not touching it")
        subprocess.run(["groupdel", group], check=True)
    subprocess.run(["groupadd", group], check=True)


def remove_group(group: str) -> None:
    try:
        if grp.getgrnam(group).gr_mem:
            return            # not ours alone (our users are removed before this)
    except KeyError:
        return
    subprocess.run(["groupdel", group], capture_output=True)


def add_user(name: str, groups: tuple[str, ...] = ()) -> str:
    """useradd as hub/README.md says (home 0700), with a random password; returns the password."""
    remove_user(name)   # a leftover of an interrupted run
    extra = ["-G", ",".join(groups)] if groups else []
    subprocess.run(["useradd", "-m", "-K", "HOME_MODE=0700", "-s", "/bin/bash", "-c", USER_TAG, *extra, name],
                   check=True)
    password = secrets.token_urlsafe(12)
    subprocess.run(["chpasswd"], input=f"{name}:{password}\n", text=True, check=True)
    return password


def pids_of_uid(uid: int) -> list[int]:
    pids = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            if d.stat().st_uid == uid:
                pids.append(int(d.name))
        except FileNotFoundError:
            pass
    return pids


def kill_uid_processes(uid: int) -> None:
    for sig in (signal.SIGTERM, signal.SIGKILL):
        pids = pids_of_uid(uid)
        for pid in pids:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        if not pids:
            return
        deadline = time.time() + 10
        while time.time() < deadline and pids_of_uid(uid):
            time.sleep(0.2)


def uid(name: str) -> int:
    return pwd.getpwnam(name).pw_uid


def home(name: str) -> Path:
    return Path(pwd.getpwnam(name).pw_dir)


def run_as(user: str, args: list[str], env: dict, cwd: Path | None = None, check: bool = True,
           timeout: float = 600) -> subprocess.CompletedProcess:
    """Run a command as a local user (runuser), with exactly the given environment."""
    full_env = {"HOME": str(home(user)), "USER": user, "LOGNAME": user, "LANG": "C.UTF-8", **env}
    cmd = ["runuser", "-u", user, "--", "env", "-i", *[f"{k}={v}" for k, v in full_env.items()], *args]
    r = subprocess.run(cmd, cwd=cwd or home(user), capture_output=True, text=True, timeout=timeout)
    if check and r.returncode != 0:
        raise AssertionError(f"as {user}: {' '.join(args)} exited {r.returncode}\n"
                             f"--- stdout\n{r.stdout[-4000:]}\n--- stderr\n{r.stderr[-4000:]}")
    return r


# --- the hub -------------------------------------------------------------------------------------

class Hub:
    """JupyterHub (hub/jupyterhub_config.py) with configurable-http-proxy on free loopback ports."""

    def __init__(self, venv: Path, state: Path, exchange: Path, teachers, student_group: str, log: Path,
                 course_source: Path, memory_mb: int):
        self.venv, self.state, self.exchange, self.log = venv, state, exchange, log
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.env = {
            **{k: v for k, v in os.environ.items() if k in ("LANG", "LC_ALL", "TZ")},
            "PATH": os.pathsep.join([str(venv / "bin"), "/usr/local/bin", "/usr/bin", "/bin",
                                     "/usr/sbin", "/sbin"]),
            "HOME": "/root",
            "TINYGPT_TEACHERS": ",".join(teachers),
            "TINYGPT_STUDENTS": "",                 # students: the members of the group
            "TINYGPT_STUDENT_GROUP": student_group,
            "TINYGPT_EXCHANGE": str(exchange),
            "TINYGPT_VENV": str(venv),
            "TINYGPT_HUB_STATE": str(state),
            "TINYGPT_HUB_BIND_URL": f"http://127.0.0.1:{self.port}",
            "TINYGPT_HUB_API_URL": f"http://127.0.0.1:{free_port()}",
            "TINYGPT_PROXY_API_URL": f"http://127.0.0.1:{free_port()}",
            "TINYGPT_CHP": shutil.which("configurable-http-proxy"),
            "TINYGPT_COURSE_SOURCE": str(course_source),
            "TINYGPT_LEARNER_MEMORY_MB": str(memory_mb),
        }
        # TINYGPT_HUB_TEST_CONFIG: another config file (to check that the test catches a broken one)
        self.config = os.environ.get("TINYGPT_HUB_TEST_CONFIG", str(REPO / "hub" / "jupyterhub_config.py"))
        self.proc = None

    def role_env(self, role: str) -> dict:
        """The environment the hub gives a user's server (and so a Jupyter terminal) of that role."""
        cfg = self.state / "jupyter"
        return {"PATH": self.env["PATH"],
                "JUPYTER_CONFIG_PATH": os.pathsep.join([str(cfg / role), str(cfg / "common")])}

    def start(self, timeout: float = 120) -> None:
        self.state.mkdir(parents=True, exist_ok=True)
        self._logf = open(self.log, "w")
        self.proc = subprocess.Popen(
            [str(self.venv / "bin" / "jupyterhub"), "-f", self.config],
            cwd=self.state, env=self.env, stdout=self._logf, stderr=subprocess.STDOUT,
            start_new_session=True)
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"jupyterhub exited {self.proc.returncode}:\n{self.log.read_text()[-4000:]}")
            try:
                with urllib.request.urlopen(f"{self.url}/hub/api", timeout=5) as r:
                    if r.status == 200 and "version" in json.load(r):
                        return
            except (urllib.error.URLError, ConnectionError, OSError):
                pass
            time.sleep(0.5)
        raise AssertionError(f"jupyterhub did not answer in {timeout}s:\n{self.log.read_text()[-4000:]}")

    def stop(self) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)      # the hub stops the users' servers and its proxy
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=10)
        # the proxy, if the hub left it behind
        pid_file = self.state / "jupyterhub-proxy.pid"
        if pid_file.exists():
            try:
                pid = int(pid_file.read_text().strip())
                cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
                if b"configurable-http-proxy" in cmdline:
                    os.kill(pid, signal.SIGKILL)
            except (ValueError, FileNotFoundError, ProcessLookupError):
                pass
        # anything else still in the hub's own process group
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self._logf.close()
