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
import time
import tomllib
import urllib.error
import urllib.request
from pathlib import Path

from .course import REPO, free_port, load_script

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
    for spec in meta["dependencies"] + [d for extra in meta["optional-dependencies"].values() for d in extra]:
        out[re.split(r"[=<>!~ \[]", spec, maxsplit=1)[0].lower()] = spec
    return out


def make_course_venv(base: Path, log) -> Path:
    """The venv of the hub's users, made the way hub/README.md says: `course.sh setup hub` (from
    /usr/bin/python3, the course library installed NOT editable, jupyterhub), in base/venv.
    TINYGPT_HUB_TEST_VENV names one made so before, to reuse (the test checks that nothing in it
    leads back to a checkout)."""
    reuse = os.environ.get("TINYGPT_HUB_TEST_VENV", "")
    if reuse and reuse != "new":
        return Path(reuse)
    venv = base / "venv"
    # from a private checkout, as hub/README.md has it (its files readable by their owner alone):
    # whatever setup copies into the venv must still be readable by the students
    private = base / "private-checkout"
    _copy_tracked(private)
    subprocess.run(["chmod", "-R", "go-rwx", str(private)], check=True)
    r = subprocess.run(["bash", str(private / "course.sh"), "setup", "hub"], capture_output=True, text=True,
                       env={**os.environ, "TINYGPT_VENV": str(venv)})
    log.write_text(r.stdout + r.stderr)
    shutil.rmtree(private, ignore_errors=True)
    assert r.returncode == 0, f"course.sh setup hub failed, see {log}:\n{r.stderr[-3000:]}"
    unreadable = [str(p) for p in venv.rglob("*") if not p.is_symlink() and not p.stat().st_mode & 0o004]
    assert not unreadable, f"the students cannot read {len(unreadable)} files of the venv: {unreadable[:5]}"
    return venv


def _copy_tracked(dest: Path):
    """This checkout's tracked (and new, not ignored) files, copied with their modes into dest."""
    files = subprocess.run(["git", "-C", str(REPO), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                           capture_output=True, check=True).stdout
    for rel in filter(None, files.decode().split("\0")):
        if (REPO / rel).is_file():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / rel, dest / rel)


def editable_traces(venv: Path) -> list[str]:
    """What in the venv would lead a reader back into a checkout: editable-install finders, .pth
    files naming a folder outside the venv, an editable install's record."""
    found = []
    for site in venv.glob("lib/python3*/site-packages"):
        for p in site.iterdir():
            if p.name.startswith("__editable__"):
                found.append(str(p))
            elif p.suffix == ".pth":
                for line in p.read_text(errors="replace").splitlines():
                    if line.startswith("/") and not line.startswith(str(venv)):
                        found.append(f"{p}: {line}")
        for d in site.glob("tinygpt_course-*.dist-info/direct_url.json"):
            if json.loads(d.read_text()).get("dir_info", {}).get("editable"):
                found.append(str(d))
    return found


def make_checkout(base: Path, group: str) -> Path:
    """The hub's copy of the course repository (hub/README.md's /opt/tinygpt-course): this
    checkout's tracked files, readable by root and the teachers' group alone (it holds source/,
    the catalogue, the guide)."""
    dest = base / "checkout"
    _copy_tracked(dest)
    subprocess.run(["chgrp", "-R", group, str(dest)], check=True)
    subprocess.run(["chmod", "-R", "u+rwX,g+rX,g-w,o-rwx", str(dest)], check=True)
    return dest


def solution_lines(repo: Path = REPO, min_len: int = 20) -> list[str]:
    """Every line inside `### BEGIN SOLUTION` of every source notebook, stripped, of min_len
    characters or more (shorter ones, like `return idx`, are in torch's own code too)."""
    import nbformat

    from .notebooks import marked_lines
    lines = set()
    for nb_path in sorted((repo / "source").glob("*/*.ipynb")):
        lines |= {ln for ln in marked_lines(nbformat.read(nb_path, as_version=4), "SOLUTION") if len(ln) >= min_len}
    return sorted(lines)


_TRY_READ = """
import json, sys
readable = []
for p in json.load(sys.stdin):
    try:
        with open(p, 'rb') as f:
            f.read(1)
        readable.append(p)
    except OSError:
        pass
print(json.dumps(readable))
"""


def readable_as(user: str, paths: list[str]) -> list[str]:
    """Those of paths that user can open and read."""
    r = run_as(user, ["/usr/bin/python3", "-I", "-c", _TRY_READ], {"PATH": "/usr/bin:/bin"},
               input=json.dumps(paths))
    return json.loads(r.stdout)


def files_holding(user: str, lines: list[str], roots: list[str], owners: list[str], skip: Path) -> list[str]:
    """Files user can read that hold one of lines: everything under roots, and the files of owners
    in /tmp and /var/tmp (outside skip, which roots cover); grep run as that user, the patterns on
    its stdin (never in a file they could read)."""
    owned = " -o ".join(f"-user {o}" for o in owners)
    script = (f'extra=$(find /tmp /var/tmp -xdev -type f \\( {owned} \\) -not -path "{skip}/*" 2>/dev/null); '
              f'grep -rlIF -f - {" ".join(roots)} $extra 2>/dev/null; true')
    r = run_as(user, ["sh", "-c", script], {"PATH": "/usr/bin:/bin"}, input="\n".join(lines) + "\n")
    return [line for line in r.stdout.splitlines() if line.strip()]


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


def remove_cgroups(users) -> None:
    """The learners' cgroups the hub made for these users (hub/learner_cgroup.py), and its parent
    folder where it is empty: a hub stopped without stopping the servers leaves them."""
    module = load_script(REPO / "hub" / "learner_cgroup.py", "tinygpt_hub_learner_cgroup")
    if module.version() is not None:
        module.remove_empty_parents(users)


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


def closed_to_others(path: Path) -> Path | None:
    """The first folder on the way to `path` that other users cannot enter (no o+x), or None:
    a student account runs nothing below it (a checkout cloned into a `mktemp -d` folder, 0700)."""
    for folder in reversed([Path(path), *Path(path).parents]):
        if folder.is_dir() and not folder.stat().st_mode & 0o001:
            return folder
    return None


def home(name: str) -> Path:
    return Path(pwd.getpwnam(name).pw_dir)


def run_as(user: str, args: list[str], env: dict, cwd: Path | None = None, check: bool = True,
           timeout: float = 600, input: str | None = None) -> subprocess.CompletedProcess:
    """Run a command as a local user (runuser), with exactly the given environment."""
    full_env = {"HOME": str(home(user)), "USER": user, "LOGNAME": user, "LANG": "C.UTF-8", **env}
    cmd = ["runuser", "-u", user, "--", "env", "-i", *[f"{k}={v}" for k, v in full_env.items()], *args]
    r = subprocess.run(cmd, cwd=cwd or home(user), capture_output=True, text=True, timeout=timeout, input=input)
    if check and r.returncode != 0:
        raise AssertionError(f"as {user}: {' '.join(args)} exited {r.returncode}\n"
                             f"--- stdout\n{r.stdout[-4000:]}\n--- stderr\n{r.stderr[-4000:]}")
    return r


# --- the hub -------------------------------------------------------------------------------------

class Hub:
    """JupyterHub (hub/jupyterhub_config.py) with configurable-http-proxy on free loopback ports."""

    def __init__(self, venv: Path, state: Path, exchange: Path, teachers, student_group: str, log: Path,
                 checkout: Path, memory_mb: int, grading: bool = False):
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
            "TINYGPT_COURSE_SOURCE": str(checkout),
            "TINYGPT_LEARNER_MEMORY_MB": str(memory_mb),
            "TINYGPT_SERVER_LOGS": str(state / "server-logs"),   # not the machine's /var/log/tinygpt
            "TINYGPT_CULL_TIMEOUT": "0",            # no idle culler until the test's culler stage
            # grading on submit (hub/README.md): the runner and its page as the first teacher; the
            # page on a free port (the default, 10102, may be taken on a shared machine)
            "TINYGPT_GRADING_SERVICE": "on" if grading else "off",
            "TINYGPT_GRADING_PORT": str(free_port()),
        }
        # TINYGPT_HUB_TEST_CONFIG: another config file (to check that the test catches a broken one)
        self.config = os.environ.get("TINYGPT_HUB_TEST_CONFIG", str(checkout / "hub" / "jupyterhub_config.py"))
        self.checkout = checkout
        self.proc = self.proxy = None

    def role_env(self, role: str) -> dict:
        """The environment the hub gives a user's server (and so a Jupyter terminal) of that role."""
        cfg = self.state / "jupyter"
        return {"PATH": self.env["PATH"],
                "JUPYTER_CONFIG_PATH": os.pathsep.join([str(cfg / role), str(cfg / "common")])}

    def proxy_pids(self) -> list[int]:
        """configurable-http-proxy's pid, from its pid file (none if it is not running)."""
        try:
            pid = int((self.state / "jupyterhub-proxy.pid").read_text().strip())
            return [pid] if b"configurable-http-proxy" in Path(f"/proc/{pid}/cmdline").read_bytes() else []
        except (ValueError, FileNotFoundError, ProcessLookupError):
            return []

    def start(self, timeout: float = 120) -> None:
        """The proxy (hub/proxy.py, a process of its own), then the hub."""
        self.state.mkdir(parents=True, exist_ok=True)
        self._logf = open(self.log, "w")
        self.proxy = subprocess.Popen(
            [str(self.venv / "bin" / "python"), str(self.checkout / "hub" / "proxy.py")],
            cwd=self.state, env=self.env, stdout=self._logf, stderr=subprocess.STDOUT, start_new_session=True)
        self.start_hub(timeout)

    def start_hub(self, timeout: float = 120) -> None:
        self.proc = subprocess.Popen(
            [str(self.venv / "bin" / "jupyterhub"), "-f", self.config],
            cwd=self.state, env=self.env, stdout=self._logf, stderr=subprocess.STDOUT,
            start_new_session=True)
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"jupyterhub exited {self.proc.returncode}:\n{self.log.read_text()[-4000:]}")
            if self.proxy.poll() is not None:
                raise AssertionError(f"the proxy exited {self.proxy.returncode}:\n{self.log.read_text()[-4000:]}")
            try:
                with urllib.request.urlopen(f"{self.url}/hub/api", timeout=5) as r:
                    if r.status == 200 and "version" in json.load(r):
                        return
            except (urllib.error.URLError, ConnectionError, OSError):
                pass
            time.sleep(0.5)
        raise AssertionError(f"jupyterhub did not answer in {timeout}s:\n{self.log.read_text()[-4000:]}")

    def stop_hub(self) -> int:
        """SIGTERM to the hub alone, as `systemctl restart` sends it; returns its exit code."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=10)
        try:                     # anything else still in the hub's own process group
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        return self.proc.returncode

    def restart(self, timeout: float = 120) -> None:
        self.stop_hub()
        self.start_hub(timeout)

    def stop(self) -> None:
        """The hub, then the proxy (the users' servers are ended with their users)."""
        if self.proc is None:
            return
        self.stop_hub()
        if self.proxy.poll() is None:
            self.proxy.terminate()
            try:
                self.proxy.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proxy.kill()
                self.proxy.wait(timeout=10)
        self._logf.close()


if __name__ == "__main__":
    # python -m tinygpt_course.testing.hub make-venv DIR: the users' venv in DIR/venv, as the
    # users_venv fixture makes it; course.sh test makes it so while the suite's first part runs
    # and hands it to the second (TINYGPT_HUB_TEST_VENV), whose tests would otherwise wait for it.
    import sys
    if len(sys.argv) != 3 or sys.argv[1] != "make-venv":
        sys.exit("usage: python -m tinygpt_course.testing.hub make-venv DIR")
    folder = Path(sys.argv[2])
    print(make_course_venv(folder, folder / "venv.log"))
