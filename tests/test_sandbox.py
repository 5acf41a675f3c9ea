"""The grading sandbox, from inside: what learner code cannot do. Fast (a few seconds).

Each test runs the same snippet with the sandbox on and off: off, the snippet succeeds, which
shows the test can fail and that the sandbox is what stops it.
"""
import os
import shutil
import socket
import subprocess
import sys
import textwrap
import time

import pytest

from tinygpt_course.grading.kernel import SandboxedKernelManager
from tinygpt_course.grading.sandbox import Sandbox, SandboxUnavailable
from tinygpt_course.testing.notebooks import printed
from tinygpt_course.testing.processes import processes_of, until_none_of

# a uid of this test process's own: no account's (accounts are below 70000, teachers' subordinate ids
# from 100000), no other sandbox's. RLIMIT_NPROC counts every process of the uid on the machine:
# with 65534 a grading run elsewhere (another test, another engineer's) fills a no-cgroup sandbox's cap
# (RLIMIT_NPROC) before its code starts and the sandbox cannot even start Python
OWN_UID = 70000 + os.getpid() % 30000

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


def survivors(marker, expected=False):
    """Kill the `sleep <marker>` processes left and return their pids.

    `expected`: the defence is off and one should be left: wait until it is there (the escaped
    process may still be on its way to exec `sleep` on a loaded machine; 120 s at most). Else look
    half a second on: looking too early could only let a survivor pass unseen, never fail a
    sandbox that works (its PID namespace is gone, with everything in it, when the run returns)."""
    deadline = time.monotonic() + (120 if expected else 0.5)
    while True:
        time.sleep(0.5 if not expected else 0.1)
        found = []
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                if f"sleep {marker}" in open(f"/proc/{pid}/cmdline", "rb").read().replace(b"\0", b" ").decode():
                    found.append(int(pid))
            except OSError:
                pass
        if found or time.monotonic() > deadline:
            break
    for pid in found:
        os.kill(pid, 9)
    return found


@pytest.mark.parametrize("enabled", ON_OFF)
def test_nothing_outlives_the_run(course, enabled):
    marker = f"{31400 + int(enabled)}{os.getpid()}"
    proc = run(escaping_sleeper(marker), enabled, course[1])
    assert proc.returncode == 0, proc.stderr
    assert (survivors(marker, expected=not enabled) == []) == enabled


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
    """A venv or extra folder under /tmp must survive the sandbox's private /tmp, and be shown
    even below a folder the sandbox's uid cannot enter (pytest's, 0700: a clone in /root)."""
    extra = tmp_path / "venv-like"
    extra.mkdir(mode=0o755)
    (extra / "lib.txt").write_text("library")
    sandbox = Sandbox(read_only_paths=[str(extra)])
    argv = sandbox.wrap([sys.executable, "-c", f"print(open({str(extra / 'lib.txt')!r}).read())"])
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=60)
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
    # the endless loop gets 2 s; the other cells the time a loaded machine may need
    NotebookClient(nb, kernel_manager_class=SandboxedKernelManager, config=cfg, resources={"metadata": {"path": str(own)}},
                   timeout_func=lambda cell: 2 if "while True" in cell.source else 120,
                   interrupt_on_timeout=True, allow_errors=True).execute()
    # streams joined: one print may arrive as several messages
    assert printed(nb.cells[0]).split() == ["65534", "False"]
    assert nb.cells[1].outputs[-1]["ename"] == "KeyboardInterrupt"
    assert printed(nb.cells[2]) == "after\n"


class KeepsRoot(Sandbox):
    """The sandbox without its uid drop: what a root grader's sandbox was before."""

    def _drop_to(self):
        return None


ROOT_ONLY = pytest.mark.skipif(os.geteuid() != 0, reason="a root grader's defences")
WRITE = """
    import errno
    written = 0
    try:
        with open("/tmp/work/big", "wb") as f:
            for _ in range({mb} // 16):
                f.write(b"x" * (16 << 20))
                f.flush()
                written += 16
    except OSError as exc:
        print(errno.errorcode[exc.errno])
    print(written)
"""


def test_file_size_is_capped(course):
    """RLIMIT_FSIZE: a 400 MB file stops at 256 MB (EFBIG); without the cap it is written."""
    on = run(WRITE.format(mb=400), True, course[1], sandbox=Sandbox(tmp_size_mb=1024))
    off = run(WRITE.format(mb=400), True, course[1], sandbox=Sandbox(tmp_size_mb=1024, file_size_limit_mb=0))
    assert on.stdout.split() == ["EFBIG", "256"], on.stderr
    assert off.stdout.split() == ["400"], off.stderr


def test_tmp_has_a_size(course):
    on = run(WRITE.format(mb=128), True, course[1], sandbox=Sandbox(tmp_size_mb=64, file_size_limit_mb=0))
    off = run(WRITE.format(mb=128), True, course[1], sandbox=Sandbox(tmp_size_mb=256, file_size_limit_mb=0))
    assert on.stdout.split()[0] == "ENOSPC" and int(on.stdout.split()[1]) <= 64, on.stdout + on.stderr
    assert off.stdout.split() == ["128"], off.stderr


def test_every_writable_mount_is_sized_nosuid_nodev(course):
    """The folders learner code can write: only /tmp and /dev/shm, tmpfs with a size, nosuid and
    nodev (bubblewrap's root and /dev are tmpfs too, remounted read-only)."""
    proc = run("""
        import os
        for line in open("/proc/self/mounts"):
            dev, path, fs, opts = line.split()[:4]
            opts = opts.split(",")
            # devpts: no file can be made there, only terminals (bubblewrap's own instance)
            if "rw" in opts and os.path.isdir(path) and fs not in ("proc", "devpts"):
                print(path, fs, "nosuid" in opts and "nodev" in opts, any(o.startswith("size=") for o in opts))
    """, True, course[1])
    rows = [ln.split() for ln in proc.stdout.splitlines()]
    assert sorted(r[0] for r in rows) == ["/dev/shm", "/tmp"], rows
    assert all(r[1:] == ["tmpfs", "True", "True"] for r in rows), rows


@ROOT_ONLY
def test_memory_cgroup_counts_files(course):
    """With a memory cgroup, files in the sandbox's tmpfs count: 512 MB written under a 256 MB
    cap stop short (or the writer is killed); without the cgroup they are all written."""
    sandbox = Sandbox(memory_limit_mb=256, tmp_size_mb=1024, file_size_limit_mb=0)
    assert sandbox.cgroup is not None, "a root grader on this machine can make cgroups"
    on = run(WRITE.format(mb=512), True, course[1], sandbox=sandbox)
    off = run(WRITE.format(mb=512), True, course[1],
              sandbox=Sandbox(memory_limit_mb=256, tmp_size_mb=1024, file_size_limit_mb=0, use_cgroup=False,
                              uid=OWN_UID))
    assert on.returncode != 0 or int(on.stdout.split()[-1]) < 512, on.stdout
    assert off.stdout.split() == ["512"], off.stderr


BOMB = """
    import os, signal
    kids = []
    for _ in range(4):                     # 4 children of 200 MB: each under the address-space cap
        r, w = os.pipe()
        kid = os.fork()
        if kid == 0:
            block = b"x" * (200 << 20)
            os.write(w, b"1")
            signal.pause()
        os.close(w)
        os.read(r, 1)                      # it holds its share, or was killed
        kids.append(kid)
    print(sum(os.waitpid(kid, os.WNOHANG) == (0, 0) for kid in kids))   # those holding at once
"""
SYSV = """
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    libc.shmat.restype = ctypes.c_void_p
    libc.shmget.argtypes, libc.shmat.argtypes = [ctypes.c_int, ctypes.c_size_t, ctypes.c_int], [ctypes.c_int, ctypes.c_void_p, ctypes.c_int]
    libc.shmdt.argtypes = [ctypes.c_void_p]
    for _ in range(4):                     # 4 segments of 200 MB, detached: in no address space
        at = libc.shmat(libc.shmget(0, 200 << 20, 0o1600), None, 0)
        ctypes.memset(at, 1, 200 << 20)
        libc.shmdt(at)
        print(200, flush=True)
"""


@ROOT_ONLY
@pytest.mark.parametrize("code", [BOMB, SYSV], ids=["children", "sysv-shm"])
def test_memory_cgroup_counts_children_and_shared_memory(course, code):
    """Several children, each under the address-space cap, or SysV segments no address space
    holds: 800 MB asked under a 512 MB cap, the sandbox's memory cgroup stops them (fewer than
    4 hold, or the asker is killed); without the cgroup all 800 MB are held (the class-sized
    attacks, tests/test_class_sandbox.py, never run without it)."""
    on = run(code, True, course[1], sandbox=Sandbox(memory_limit_mb=512))
    off = run(code, True, course[1], sandbox=Sandbox(memory_limit_mb=512, use_cgroup=False, uid=OWN_UID))
    held = sum(map(int, on.stdout.split()))
    assert held < (4 if code is BOMB else 800), on.stdout + on.stderr
    assert sum(map(int, off.stdout.split())) == (4 if code is BOMB else 800), off.stdout + off.stderr


def sandbox_uids(sandbox, marker):
    """The outside uids (real, effective, saved, fs) of a process running in `sandbox`."""
    proc = subprocess.Popen(sandbox.wrap(["/bin/sleep", marker]), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            for pid in filter(str.isdigit, os.listdir("/proc")):
                try:
                    if open(f"/proc/{pid}/cmdline", "rb").read() == b"/bin/sleep\0" + marker.encode() + b"\0":
                        status = dict(ln.split(":", 1) for ln in open(f"/proc/{pid}/status"))
                        return status["Uid"].split(), status["Groups"].split()
                except OSError:
                    pass
            time.sleep(0.05)
    finally:
        proc.kill()
        proc.wait()


@ROOT_ONLY
def test_a_root_graders_sandbox_runs_as_nobody_outside(course):
    on = sandbox_uids(Sandbox(), f"3141{os.getpid()}")
    off = sandbox_uids(KeepsRoot(), f"3142{os.getpid()}")
    assert on == (["65534"] * 4, []), on
    assert off[0] == ["0"] * 4, off


FLOOD = """
    import os, time
    n = 0
    for _ in range(300):
        try:
            if os.fork() == 0:
                time.sleep(30)
                os._exit(0)
            n += 1
        except OSError:
            break
    print(n)
"""


@ROOT_ONLY
def test_a_process_flood_is_bounded_for_a_root_grader(course):
    """RLIMIT_NPROC (64 here, no cgroup) stops a fork flood once learner code runs as a uid that
    is not root outside; with the sandbox as root it is not applied: all 300 start. The sandbox's
    end kills them."""
    until_none_of(OWN_UID)
    on = run(FLOOD, True, course[1], sandbox=Sandbox(max_processes=64, use_cgroup=False, uid=OWN_UID))
    off = run(FLOOD, True, course[1], sandbox=KeepsRoot(max_processes=64, use_cgroup=False))
    assert int(on.stdout.split()[-1]) < 64, on.stdout + on.stderr
    assert off.stdout.split() == ["300"], off.stdout + off.stderr


SPAWN_FLOOD = """
    import os, sys
    n = 0
    for _ in range(3000):
        try:
            os.posix_spawn("/bin/sleep", ["sleep", "31415{pid}"], {{}})
        except OSError:
            break
        n += 1
    print(n, flush=True)
    sys.stdin.read()                       # the sleepers live until the test is done with them
"""



class NprocToo(Sandbox):
    """The sandbox with RLIMIT_NPROC set beside its pids cgroup, as it was (half the cgroup's
    cap here, so that the uid's count, not the cgroup, stops the flood)."""

    def rlimits(self):
        return {**super().rlimits(), "nproc": self.max_processes // 2}


@ROOT_ONLY
@pytest.mark.parametrize("kind", [Sandbox, NprocToo], ids=["pids-cgroup", "nproc-too"])
def test_one_sandboxs_flood_leaves_the_next_room(course, kind):
    """With a pids cgroup per sandbox, a flood stops at its own sandbox's cap and the next
    sandbox (another learner's, graded at once) starts and makes a thread. With RLIMIT_NPROC
    as well, which counts every sandbox's processes of uid 65534 together, it cannot start.
    (Both as a uid of the test's own, so that no other sandbox on the machine counts.)"""
    sandbox = kind(max_processes=64, uid=OWN_UID)
    assert sandbox.cgroup is not None
    until_none_of(OWN_UID)
    flood = subprocess.Popen(sandbox.wrap([sys.executable, "-c", textwrap.dedent(SPAWN_FLOOD.format(pid=os.getpid()))],
                                          chdir="/tmp/work"), stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        started = int(flood.stdout.readline())
        assert 0 < started < 64, started
        other = run("import threading; t = threading.Thread(target=print, args=('ok',)); t.start(); t.join()",
                    True, course[1], sandbox=kind(max_processes=64, uid=OWN_UID))
    finally:
        flood.kill()
        flood.wait()
    assert (other.stdout.split() == ["ok"]) == (kind is Sandbox), other.stdout + other.stderr


@ROOT_ONLY
@pytest.mark.parametrize("separate", [True, False], ids=["a-uid-per-worker", "one-uid"])
def test_without_a_cgroup_one_workers_flood_leaves_the_next_worker_room(course, separate):
    """A root grader without pids cgroups (c.Sandbox.use_cgroup False): the cap is RLIMIT_NPROC,
    which counts every process of the uid. Worker 0's flood stops at the cap; worker 1's sandbox
    runs as uid + 1 outside, so it starts and makes a thread. With every worker on one uid
    (c.Sandbox.separate_workers False, the defence off) it cannot start."""
    def sandbox(worker):
        return Sandbox(max_processes=64, uid=OWN_UID, use_cgroup=False, worker=worker, separate_workers=separate)
    assert sandbox(0).cgroup is None and sandbox(1).outside_uid() == OWN_UID + separate
    until_none_of(OWN_UID, OWN_UID + 1)
    flood = subprocess.Popen(sandbox(0).wrap([sys.executable, "-c", textwrap.dedent(SPAWN_FLOOD.format(pid=os.getpid()))],
                                             chdir="/tmp/work"), stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        started = int(flood.stdout.readline())
        assert 0 < started < 64, started
        assert len(processes_of(OWN_UID)) == 64, "the uid's cap is what stopped the flood"
        other = run("import threading; t = threading.Thread(target=print, args=('ok',)); t.start(); t.join()",
                    True, course[1], sandbox=sandbox(1))
    finally:
        flood.kill()
        flood.wait()
    assert (other.stdout.split() == ["ok"]) == separate, other.stdout + other.stderr


@ROOT_ONLY
def test_a_root_graders_workers_uids_are_no_accounts(monkeypatch):
    """Worker k runs as c.Sandbox.uid + k: 65534, 65535, 65536 by default (none an account's
    here); grading refuses a uid of an account or of a subordinate range, and root."""
    import pwd
    assert [Sandbox(worker=k).outside_uid() for k in range(3)] == [65534, 65535, 65536]
    Sandbox().check_workers(3)
    taken = pwd.getpwnam("nobody").pw_uid
    with pytest.raises(SandboxUnavailable, match=f"worker 2 .* = {taken}, which is the uid of account 'nobody'"):
        Sandbox(uid=taken - 2).check_workers(3)
    with pytest.raises(SandboxUnavailable, match="= 0, which is root"):
        Sandbox(uid=0).check_workers(1)
    assert Sandbox(uid=taken - 2, separate_workers=False, worker=2).outside_uid() == taken - 2


def test_a_teacher_accounts_workers_get_its_subordinate_ids_in_turn(monkeypatch):
    """Worker k of a teacher account: the first subordinate uid and gid + k; a range smaller
    than the workers is refused, naming the fix."""
    from tinygpt_course.grading import sandbox as sandbox_mod
    monkeypatch.setattr(sandbox_mod.os, "geteuid", lambda: 2000)
    monkeypatch.setattr(sandbox_mod, "subordinate_ranges", lambda: ((60000, 3), (70000, 1000)))
    assert [Sandbox(worker=k).outside_ids() for k in range(3)] == [(60000, 70000), (60001, 70001), (60002, 70002)]
    Sandbox().check_workers(3)
    with pytest.raises(SandboxUnavailable, match="worker 3 .* 3 subordinate uids.*--jobs N needs N.*usermod"):
        Sandbox().check_workers(4)
    assert Sandbox(worker=3, separate_workers=False).outside_ids() == (60000, 70000)
    monkeypatch.setenv("TINYGPT_GRADING_WORKER", "2")
    assert Sandbox().outside_ids() == (60002, 70002)


def test_a_grader_that_is_not_root_is_refused_unless_it_accepts(monkeypatch):
    from tinygpt_course.grading import sandbox as sandbox_mod
    monkeypatch.setattr(sandbox_mod.os, "geteuid", lambda: 1000)
    with pytest.raises(SandboxUnavailable, match="own uid 1000.*subordinate ids.*grade as root.*allow_grader_uid"):
        Sandbox().require()


@ROOT_ONLY
def test_cgroups_of_ended_graders_are_removed(course):
    """A grader killed before it removed its cgroup leaves an empty one; the next removes it."""
    import multiprocessing
    from tinygpt_course.grading.sandbox import Cgroups
    made = Cgroups(2 ** 30, 64)
    ctx = multiprocessing.get_context("fork")
    child = ctx.Process(target=lambda: os._exit(0 if made.procs() else 1))   # makes one, no sweep
    child.start()
    child.join()
    left = [os.path.join(r, f"tinygpt-sandbox-{child.pid}-{Cgroups._n + 1}") for r in made.roots.values()]
    assert all(os.path.isdir(p) for p in left), left
    made.sweep_dead()
    assert not any(os.path.exists(p) for p in left), left


@pytest.mark.parametrize("opts, expected", [
    ([], "None"),
    (["--no-new-privs"], "no_new_privs set (Kubernetes: allowPrivilegeEscalation: false)"),
    (["--bounding-set", "-setuid"], "bounding set lacks CAP_SETUID (Kubernetes"),
    (["--bounding-set", "-all,+setuid,+setgid"], "None"),
    (["--bounding-set", "-all"], "bounding set lacks CAP_SETUID and CAP_SETGID")])
def test_what_keeps_newuidmap_from_working_is_named(opts, expected):
    """newuidmap_blocked reads this process's no_new_privs and bounding set (a real setpriv)."""
    if not shutil.which("setpriv"):
        pytest.skip("needs setpriv (util-linux)")
    code = "from tinygpt_course.grading.sandbox import newuidmap_blocked; print(newuidmap_blocked())"
    out = subprocess.run(["setpriv", *opts, "--", sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert expected in out, out


class StartFails(SandboxedKernelManager):
    """A grading kernel manager whose next starts fail as they do when the machine is short of
    processes or memory for a moment: the sandbox is not made, or the kernel dies before it
    answers kernel_info."""
    failures = []       # what the next starts do: "sandbox" or "dies"; then they start

    async def _async_launch_kernel(self, kernel_cmd, **kw):
        how = StartFails.failures.pop(0) if StartFails.failures else None
        if how == "sandbox":
            from tinygpt_course.grading.template import TemplateUnavailable
            raise TemplateUnavailable("bubblewrap ended before its sandbox was made (made to fail by the test)")
        await super()._async_launch_kernel(kernel_cmd, **kw)
        if how == "dies":
            self._box.kill()


@pytest.mark.parametrize("how", ["sandbox", "dies"])
def test_a_kernel_that_does_not_start_is_started_again(course, how):
    """A start that fails has run no learner code: RobustExecute starts a new kernel, and the
    notebook runs; with start_attempts = 1 (the retry off) the same failure loses the submission."""
    import nbformat
    from traitlets.config import Config

    from tinygpt_course.grading.execute import RobustExecute
    _, own = course
    cfg = Config()
    cfg.SandboxedKernelManager.fork_from_template = False
    cfg.RobustExecute.start_pause = 0.0

    def run(**options):
        nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("print('ran')")])
        RobustExecute(kernel_manager_class=StartFails, config=cfg, timeout=120, **options).preprocess(
            nb, {"metadata": {"path": str(own)}})
        return nb

    StartFails.failures[:] = [how]
    assert printed(run().cells[0]) == "ran\n"
    assert StartFails.failures == []
    StartFails.failures[:] = [how]
    try:
        with pytest.raises(Exception, match="sandbox was made|died before replying"):
            run(start_attempts=1)
    finally:
        StartFails.failures[:] = []


class BadBind(Sandbox):
    """A sandbox bubblewrap refuses to make (a folder to show that does not exist)."""

    def wrap(self, argv, *args, bwrap_args=(), **kwargs):
        return super().wrap(argv, *args, bwrap_args=[*bwrap_args, "--ro-bind", "/nonexistent-tinygpt", "/x"], **kwargs)


def test_a_sandbox_that_is_not_made_says_why():
    """What bubblewrap said is in the error (the grader's log), not lost with its pipe."""
    import logging

    from tinygpt_course.grading.template import TemplateUnavailable, start_sandbox
    with pytest.raises(TemplateUnavailable, match=r"(sandbox was made|did not come up): bwrap: .*nonexistent-tinygpt"):
        start_sandbox(BadBind(), "/tmp", {}, logging.getLogger("test"), "test")
