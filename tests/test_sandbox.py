"""The grading sandbox, from inside: what learner code cannot do. Fast (a few seconds).

Each test runs the same snippet with the sandbox on and off: off, the snippet succeeds, which
shows the test can fail and that the sandbox is what stops it.
"""
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import pytest

from tinygpt_course.grading.sandbox import Sandbox, SandboxUnavailable

ON_OFF = [pytest.param(True, id="sandboxed"), pytest.param(False, id="unsandboxed")]


def run(code, enabled, folder, timeout=60, sandbox=None):
    """Run Python `code` as grading runs learner code: in the sandbox, in a folder of its own
    on the sandbox's /tmp (unsandboxed: in `folder`)."""
    sandbox = sandbox or Sandbox(enabled=enabled)
    argv = sandbox.wrap([sys.executable, "-c", textwrap.dedent(code)], chdir="/tmp/work")
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, cwd=folder,
                          env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"})


@pytest.fixture
def course(tmp_path):
    """A course folder with a secret, and the learner's own writable folder inside it."""
    (tmp_path / "source").mkdir()
    (tmp_path / "source" / "secret.txt").write_text("the solution")
    (tmp_path / "gradebook.db").write_text("grades")
    own = tmp_path / "autograded" / "alice" / "multihead"
    own.mkdir(parents=True)
    return tmp_path, own


@pytest.mark.parametrize("enabled", ON_OFF)
def test_cannot_read_the_course_or_root(course, enabled):
    root, own = course
    proc = run(f"""
        import os
        found = []
        for path in ({str(root / 'source' / 'secret.txt')!r}, {str(root / 'gradebook.db')!r}, "../../../gradebook.db"):
            try:
                found.append(open(path).read())
            except OSError:
                pass
        try:
            found += os.listdir("/root")
        except OSError:
            pass
        print(len(found))
    """, enabled, own)
    assert proc.returncode == 0, proc.stderr
    readable = int(proc.stdout.split()[-1])
    assert (readable == 0) == enabled, proc.stdout


@pytest.mark.parametrize("enabled", ON_OFF)
def test_cannot_write_outside_its_folder(course, enabled):
    root, own = course
    target = root / "source" / "planted.txt"
    proc = run(f"""
        open("mine.txt", "w").write("ok")          # its own folder: allowed
        print(open("mine.txt").read())
        try:
            open({str(target)!r}, "w").write("planted")
        except OSError:
            pass
    """, enabled, own)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["ok"]
    assert (own / "mine.txt").exists() != enabled      # sandboxed, its folder is not the host's
    assert target.exists() != enabled


@pytest.mark.parametrize("enabled", ON_OFF)
def test_cannot_see_other_processes(course, enabled):
    proc = run("import os; print(len([p for p in os.listdir('/proc') if p.isdigit()]))", enabled, course[1])
    assert proc.returncode == 0, proc.stderr
    seen = int(proc.stdout.split()[-1])
    assert (seen <= 3) == enabled, seen          # bwrap's init, python, maybe nothing else


@pytest.mark.parametrize("enabled", ON_OFF)
def test_cannot_reach_a_port_on_the_host(course, enabled):
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    port = server.getsockname()[1]
    try:
        proc = run(f"""
            import socket
            try:
                socket.create_connection(("127.0.0.1", {port}), timeout=3).close()
                print("connected")
            except OSError as exc:
                print("refused", exc)
        """, enabled, course[1])
    finally:
        server.close()
    assert proc.returncode == 0, proc.stderr
    assert ("connected" in proc.stdout) != enabled, proc.stdout


def escaping_sleeper(marker):
    """Code that leaves a `sleep <marker>` behind, in its own session, with its output closed."""
    return f"""
        import os
        if os.fork() == 0:
            os.setsid()
            if os.fork() == 0:
                null = os.open(os.devnull, os.O_RDWR)
                for fd in (0, 1, 2):
                    os.dup2(null, fd)
                os.execv("/bin/sleep", ["sleep", "{marker}"])
            os._exit(0)
        print("parent done")
    """


def survivors(marker):
    """Kill the `sleep <marker>` processes left (half a second on) and return their pids."""
    time.sleep(0.5)
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if f"sleep {marker}" in open(f"/proc/{pid}/cmdline", "rb").read().replace(b"\0", b" ").decode():
                found.append(int(pid))
        except OSError:
            pass
    for pid in found:
        os.kill(pid, 9)
    return found


@pytest.mark.parametrize("enabled", ON_OFF)
def test_nothing_outlives_the_run(course, enabled):
    marker = f"{31400 + int(enabled)}{os.getpid()}"
    proc = run(escaping_sleeper(marker), enabled, course[1])
    assert proc.returncode == 0, proc.stderr
    assert (survivors(marker) == []) == enabled


def test_runs_as_nobody_with_the_caps(course):
    proc = run("""
        import os, resource
        print(os.getuid(), resource.getrlimit(resource.RLIMIT_AS)[0], resource.getrlimit(resource.RLIMIT_CPU)[0])
    """, True, course[1])
    assert proc.returncode == 0, proc.stderr
    uid, mem, cpu = map(int, proc.stdout.split())
    sandbox = Sandbox()
    assert uid == sandbox.uid == 65534
    assert mem == sandbox.memory_limit_mb * 2 ** 20 and cpu == sandbox.cpu_limit_s


def test_no_silent_fallback():
    with pytest.raises(SandboxUnavailable, match="apt-get install bubblewrap.*c.Sandbox.enabled = False"):
        Sandbox(bwrap="/nonexistent/bwrap").require()
    with pytest.warns(UserWarning, match="UNSANDBOXED"):
        Sandbox(enabled=False, bwrap="/nonexistent/bwrap").require()


def test_read_only_paths_under_tmp_stay_visible(tmp_path, course):
    """A venv or extra folder under /tmp must survive the sandbox's private /tmp."""
    extra = Path(tempfile.mkdtemp(prefix="venv-like-"))        # the sandbox's uid can read it
    os.chmod(extra, 0o755)
    (extra / "lib.txt").write_text("library")
    sandbox = Sandbox(read_only_paths=[str(extra)])
    argv = sandbox.wrap([sys.executable, "-c", f"print(open({str(extra / 'lib.txt')!r}).read())"])
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    shutil.rmtree(extra)
    assert proc.returncode == 0 and proc.stdout.strip() == "library", proc.stderr


def test_the_grading_kernel_runs_sandboxed_and_can_be_interrupted(course, fork=False):
    """nbgrader's kernel, started (tests/test_kernelfork.py: forked): inside the sandbox, and an
    endless loop stops at the cell timeout (the interrupt reaches a kernel in its own session and
    PID namespace) so later cells run."""
    import nbformat
    from nbclient import NotebookClient
    from traitlets.config import Config

    from tinygpt_course.grading.kernel import SandboxedKernelManager
    root, own = course
    nb = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_code_cell(f"import os; print(os.getuid(), os.path.exists({str(root / 'gradebook.db')!r}))"),
        nbformat.v4.new_code_cell("while True:\n    pass"),
        nbformat.v4.new_code_cell("print('after')")])
    cfg = Config()
    cfg.SandboxedKernelManager.fork_from_template = fork
    NotebookClient(nb, kernel_manager_class=SandboxedKernelManager, config=cfg, resources={"metadata": {"path": str(own)}},
                   timeout=2, interrupt_on_timeout=True, allow_errors=True).execute()
    assert nb.cells[0].outputs[0]["text"].split() == ["65534", "False"]
    assert nb.cells[1].outputs[-1]["ename"] == "KeyboardInterrupt"
    assert nb.cells[2].outputs[0]["text"] == "after\n"
