"""Grading kernels forked from the warm template: each enters its own sandbox before it runs a
line, and a learner sees the same notebook results as from a kernel started afresh.

Each defence is run twice: in a forked kernel that joins its sandbox (the snippet is stopped)
and in one that is forked but does not join (the snippet succeeds), which shows the test can
fail and that joining the sandbox is what stops it.
"""
import functools
import json
import logging
import os
import pwd
import resource
import shutil
import socket
import subprocess
import tempfile
import textwrap
import threading
import time
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient
from traitlets.config import Config

from tinygpt_course.grading import template as template_mod
from tinygpt_course.grading.kernel import SandboxedKernelManager
from tinygpt_course.grading.sandbox import Sandbox
from test_sandbox import course, escaping_sleeper, survivors  # noqa: F401  (course: a fixture)
from test_sandbox import test_the_grading_kernel_runs_sandboxed_and_can_be_interrupted as interrupted

REPO = Path(__file__).resolve().parents[1]
JOINED = [pytest.param(True, id="joined"), pytest.param(False, id="not-joined")]


class Unjoined(SandboxedKernelManager):
    _join_sandbox = False
    _by_handle = False      # its kernel's sockets are outside, reached by links at the sandbox's paths


class OutsideItsCgroups(SandboxedKernelManager):
    _join_cgroups = False


class ByPath(SandboxedKernelManager):
    _by_handle = False


def execute(nb, folder, fork=True, join=True, config=None, **options):
    """Run `nb` as grading does, in `folder`, with its kernel forked (and joining its sandbox) or started."""
    cfg = Config(config or {})
    cfg.SandboxedKernelManager.fork_from_template = fork
    NotebookClient(nb, kernel_manager_class=SandboxedKernelManager if join else Unjoined, config=cfg,
                   resources={"metadata": {"path": str(folder)}}, **options).execute()
    return nb


def run_kernel(code, own, join=True, fork=True, timeout=60, config=None):
    """Run `code` in one cell of a grading kernel with cwd `own`; (text output, error name)."""
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(textwrap.dedent(code))])
    execute(nb, own, fork, join, config, timeout=timeout, allow_errors=True)
    outs = nb.cells[0].outputs
    return ("".join(o.get("text", "") for o in outs if o.output_type == "stream"),
            next((o["ename"] for o in outs if o.output_type == "error"), None))


def test_a_forked_kernel_runs_sandboxed_and_can_be_interrupted(course):
    interrupted(course, fork=True)


def test_the_kernel_is_forked(course):
    """The fork path is the one taken: torch is there before the first cell imports it (what it
    saves is measured by bench/, not asserted here: tests check behaviour, never timings)."""
    out, err = run_kernel("import sys; print('torch' in sys.modules)", course[1])
    assert (out, err) == ("True\n", None)
    out, err = run_kernel("import sys; print('torch' in sys.modules)", course[1], fork=False)
    assert (out, err) == ("False\n", None)


def test_a_forked_kernel_maps_the_templates_memory_in_huge_pages(course):
    """The template put what it imported in 2 MB pages before forking (zygote.huge_pages): the
    kernel forked from it maps them so (where this kernel can; a started kernel maps none)."""
    from test_zygote import collapsible
    if not collapsible():
        pytest.skip("this kernel does not put anonymous memory in 2 MB pages when asked (MADV_COLLAPSE)")
    code = "print(int(next(l.split()[1] for l in open('/proc/self/smaps_rollup') if l.startswith('AnonHugePages:'))) >> 10)"
    out, err = run_kernel(code, course[1])
    assert err is None and int(out) >= 16, out      # MiB: the rest split where the fork wrote
    with open("/sys/kernel/mm/transparent_hugepage/enabled") as f:
        only_when_asked = "[madvise]" in f.read()
    if only_when_asked:                             # no 2 MB page unless a process asks for it
        out, err = run_kernel(code, course[1], fork=False)
        assert (out, err) == ("0\n", None)


@pytest.mark.parametrize("join", JOINED)
def test_cannot_read_the_course_the_notebook_or_root(course, join):
    root, own = course
    (own / "multihead.ipynb").write_text("hidden tests")
    out, err = run_kernel(f"""
        import os
        for path in [{str(root / 'source' / 'secret.txt')!r}, {str(root / 'gradebook.db')!r},
                     {str(own / 'multihead.ipynb')!r}]:
            try:
                print(path, open(path).read())
            except OSError as exc:
                print(path, 'blocked')
        print('root', os.path.exists('/root'))
    """, own, join)
    assert err is None, out
    lines = out.splitlines()
    if join:
        assert all(ln.endswith("blocked") for ln in lines[:3]) and lines[3] == "root False", out
    else:
        assert "the solution" in out and "grades" in out and "hidden tests" in out, out


@pytest.mark.parametrize("join", JOINED)
def test_writes_only_its_own_folder(course, join):
    root, own = course
    out, err = run_kernel(f"""
        open('mine.txt', 'w').write('ok')
        print(open('mine.txt').read())
        try:      # inside the sandbox the course folder is not there
            open({str(root / 'pwned.txt')!r}, 'w').write('x')
        except OSError:
            pass
    """, own, join)
    assert (out, err) == ("ok\n", None), out
    assert not (own / "mine.txt").exists()          # the kernel's folder is the sandbox's own
    assert (root / "pwned.txt").exists() != join


@pytest.mark.parametrize("join", JOINED)
def test_sees_no_process_outside_its_sandbox(course, join):
    out, err = run_kernel("""
        import os
        cmdlines = []
        for pid in filter(str.isdigit, os.listdir('/proc')):
            if int(pid) == os.getpid():
                continue          # the kernel itself: a fork of the template, under its name
            try:
                cmdlines.append(open(f'/proc/{pid}/cmdline', 'rb').read().replace(b'\\0', b' ').decode())
            except OSError:
                pass
        print(any('kernelfork.server' in c for c in cmdlines), len(cmdlines))
    """, course[1], join)
    assert err is None, out
    template_visible, count = out.split()
    assert (template_visible == "False") == join, out
    if join:
        assert int(count) <= 2, out       # bubblewrap's init and the placeholder


@pytest.mark.parametrize("join", JOINED)
def test_cannot_reach_a_port_on_the_host(course, join):
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    try:
        out, err = run_kernel(f"""
            import socket
            try:
                socket.create_connection(('127.0.0.1', {server.getsockname()[1]}), timeout=3)
                print('connected')
            except OSError:
                print('blocked')
        """, course[1], join)
    finally:
        server.close()
    assert err is None and (out == "blocked\n") == join, out


@pytest.mark.parametrize("join", JOINED)
def test_nothing_outlives_the_kernel(course, join):
    marker = f"{31500 + int(join)}{os.getpid()}"
    out, err = run_kernel(escaping_sleeper(marker), course[1], join)
    assert (out, err) == ("parent done\n", None)
    assert (survivors(marker, expected=not join) == []) == join


SWAP_AND_DROP = """
    import glob, os, socket
    for path in glob.glob('/tmp/kernel/ipc-*'):     # each socket becomes a link to a host path
        os.unlink(path)
        os.symlink({target!r}, path)
    for fd in map(int, os.listdir('/proc/self/fd')):   # and every connection of the grader's drops
        try:
            s = socket.socket(fileno=os.dup(fd))
        except OSError:
            continue
        try:
            if s.family == socket.AF_UNIX and not s.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN):
                s.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        finally:
            s.close()
    print('swapped')
"""


@pytest.mark.parametrize("manager", [SandboxedKernelManager, ByPath], ids=["by-handle", "by-path"])
@pytest.mark.parametrize("fork", [True, False], ids=["forked", "started"])
def test_a_kernel_cannot_point_the_grader_at_a_host_socket(course, tmp_path, manager, fork):
    """The kernel swaps its five sockets for links to a socket on the host and drops the grader's
    connections: ZeroMQ reconnects at once (every 100 ms). By path (the defence off), the grader
    follows the links on the host and, as root, connects to the host's socket again and again; by
    handle it comes back to the kernel's own sockets, and the host's sees no connection."""
    from nbclient.exceptions import CellTimeoutError, DeadKernelError
    host = tempfile.mkdtemp(prefix="host-", dir="/tmp")     # a short path: a socket's holds 107 bytes
    target = os.path.join(host, "host.sock")
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(target)
    listener.listen(64)
    listener.settimeout(0.2)
    seen, stop = [], threading.Event()

    def accept():
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except OSError:
                continue
            seen.append(1)
            conn.close()

    thread = threading.Thread(target=accept)
    thread.start()
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(textwrap.dedent(SWAP_AND_DROP.format(target=target))),
                                         nbformat.v4.new_code_cell("import time; time.sleep(3); print('here')")])
    cfg = Config()
    cfg.SandboxedKernelManager.fork_from_template = fork
    try:
        NotebookClient(nb, kernel_manager_class=manager, config=cfg, timeout=15, allow_errors=True,
                       resources={"metadata": {"path": str(course[1])}}).execute()
    except (CellTimeoutError, DeadKernelError, RuntimeError):
        pass                    # the kernel may not answer once its connections dropped: not the point
    finally:
        stop.set()
        thread.join()
        listener.close()
        shutil.rmtree(host, ignore_errors=True)
    assert (len(seen) == 0) == (manager is SandboxedKernelManager), f"{len(seen)} connections to the host's socket"


ADD_KEY = """
    import ctypes, platform
    libc = ctypes.CDLL(None, use_errno=True)
    nr = {{"x86_64": 248, "aarch64": 217}}[platform.machine()]
    key = libc.syscall(nr, b"user", b"{marker}", b"secret", 6, ctypes.c_int(-4))   # the user keyring
    print("refused %d" % ctypes.get_errno() if key < 0 else "made")
    if key >= 0:
        libc.syscall(nr + 2, 15, key, 60)          # keyctl(KEYCTL_SET_TIMEOUT): gone in a minute
"""


@pytest.mark.parametrize("fork", [True, False], ids=["forked", "started"])
@pytest.mark.parametrize("denied", [pytest.param(None, id="filtered"), pytest.param([], id="no-filter")])
def test_a_kernel_key_is_refused_and_never_reaches_the_next_learner(course, fork, denied):
    """Kernel keyrings are in no namespace: a key one learner's kernel adds to its user keyring is
    listed in /proc/keys by the next learner's kernel of the same worker (the defence off,
    c.Sandbox.denied_syscalls = []). With the seccomp filter add_key fails with EPERM."""
    config = {} if denied is None else {"Sandbox": {"denied_syscalls": denied}}
    marker = f"tinygpt-key-{os.getpid()}-{int(fork)}-{denied is None}"
    out, err = run_kernel(ADD_KEY.format(marker=marker), course[1], fork=fork, config=config)
    assert err is None and out == ("refused 1\n" if denied is None else "made\n"), (out, err)
    out, err = run_kernel("print(open('/proc/keys').read())", course[1], fork=fork, config=config)
    assert err is None and (marker in out) == (denied is not None), out


def test_runs_as_nobody_without_capabilities_under_the_caps(course):
    """As a started kernel in the same sandbox: uid and gid 65534 (no other group but the
    sandbox's), no capability in any set, no_new_privs, the sandbox's rlimits (no RLIMIT_NPROC
    where its pids cgroup caps the processes: the grader's own)."""
    code = """
        import os, resource
        status = dict(line.split(':', 1) for line in open('/proc/self/status'))
        print(os.getuid(), os.getgid(), set(os.getgroups()) <= {65534},
              *(int(status[k], 16) for k in ('CapInh', 'CapPrm', 'CapEff', 'CapBnd', 'CapAmb')),
              status['NoNewPrivs'].strip(),
              *(resource.getrlimit(r)[0] for r in (resource.RLIMIT_AS, resource.RLIMIT_CPU, resource.RLIMIT_NPROC)))
    """
    forked, started = run_kernel(code, course[1]), run_kernel(code, course[1], fork=False)
    sandbox = Sandbox()
    assert forked == started == (" ".join(["65534", "65534", "True", "0", "0", "0", "0", "0", "1",
                                            str(sandbox.memory_limit_mb * 2 ** 20), str(sandbox.cpu_limit_s),
                                            str(sandbox.rlimits().get("nproc", resource.getrlimit(resource.RLIMIT_NPROC)[0]))])
                                  + "\n", None), (forked, started)


KERNEL_FLOOD = """
    import os
    n = 0
    for _ in range(200):
        try:
            os.posix_spawn("/bin/sleep", ["sleep", "3141597"], {})
        except OSError:
            break
        n += 1
    print(n)
"""


@pytest.mark.skipif(os.geteuid() != 0, reason="a root grader's cgroups")
@pytest.mark.parametrize("manager", [SandboxedKernelManager, OutsideItsCgroups], ids=["in-its-cgroups", "outside"])
def test_a_forked_kernel_counts_against_its_sandboxs_cgroups(course, manager):
    """A forked kernel joins its sandbox's memory and pids cgroups, not only its cgroup
    namespace: a flood of 200 stops below c.Sandbox.max_processes (64 here; a root grader sets no
    RLIMIT_NPROC beside the pids cgroup). Left outside them, all 200 start."""
    cfg = Config()
    cfg.Sandbox.max_processes = 64
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(textwrap.dedent(KERNEL_FLOOD))])
    NotebookClient(nb, kernel_manager_class=manager, config=cfg, resources={"metadata": {"path": str(course[1])}},
                   timeout=120, allow_errors=True).execute()
    started = int("".join(o.get("text", "") for o in nb.cells[0].outputs if o.output_type == "stream").split()[-1])
    assert (started < 64) == (manager is SandboxedKernelManager), started


def test_a_template_that_cannot_start_means_a_cold_sandboxed_start(course, monkeypatch, caplog):
    def broken():
        raise template_mod.TemplateUnavailable("the kernel template did not start (test)")
    monkeypatch.setattr(template_mod, "template", broken)
    with caplog.at_level(logging.WARNING):
        out, err = run_kernel("import os, sys; print(os.getuid(), 'torch' in sys.modules)", course[1])
    assert (out, err) == ("65534 False\n", None)
    assert "starting the kernel instead" in caplog.text


def lesson_outputs(nb_path, folder, fork, probe=None):
    """Per code cell: each stream's text joined (however it was split into messages), then its
    other outputs; `probe`, a cell run after the lesson's, gives the last."""
    nb = nbformat.read(nb_path, 4)
    if probe:
        nb.cells.append(nbformat.v4.new_code_cell(probe))
    nb = execute(nb, folder, fork, timeout=120)
    cells = []
    for cell in nb.cells:
        outs = cell.get("outputs", [])
        streams = {name: "".join(o.text for o in outs if o.output_type == "stream" and o.name == name)
                   for name in ("stdout", "stderr")}
        others = []
        for out in outs:
            if out.output_type == "stream":
                continue
            data = dict(out.get("data", {}))
            data.pop("application/vnd.jupyter.widget-view+json", None)     # a fresh model id each run
            others.append((out.output_type, out.get("ename"), data))
        cells.append((streams, others))
    return cells


@pytest.mark.slow
def test_a_forked_kernel_gives_the_lesson_the_same_results(tmp_path):
    """The multihead lesson with its solution, forked and started afresh: every output the same,
    the explorer's PNG to the byte, though the forked kernel drew it in the frame the template
    kept (plots.Frame: only the plots drawn) and the cold one drew it whole."""
    source = REPO / "source" / "multihead" / "multihead.ipynb"
    probe = "from tinygpt_course import plots\nprint(plots._pictures[2, 8].framed)"
    forked, cold = lesson_outputs(source, tmp_path, True, probe), lesson_outputs(source, tmp_path, False, probe)
    assert (forked.pop()[0]["stdout"], cold.pop()[0]["stdout"]) == ("1\n", "0\n")
    assert any("image/png" in o[2] for _, others in forked for o in others), "the explorer drew no picture"
    assert forked == cold


AS_USER = r'''
import json, os, sys
import nbformat
from nbclient import NotebookClient
from traitlets.config import Config
from tinygpt_course.grading.kernel import SandboxedKernelManager
from tinygpt_course.grading.sandbox import SandboxUnavailable
out = {}
for fork in (True, False):
    cfg = Config()
    cfg.SandboxedKernelManager.fork_from_template = fork
    cfg.Sandbox.allow_grader_uid = sys.argv[2] == "allow"
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(
        "import os, sys; print(os.getuid(), os.getcwd(), 'torch' in sys.modules)")])
    client = NotebookClient(nb, kernel_manager_class=SandboxedKernelManager, config=cfg, timeout=120,
                            resources={"metadata": {"path": sys.argv[1]}})
    try:
        with client.setup_kernel():
            client.execute_cell(nb.cells[0], 0)
            pid = client.km.provisioner.process.pid     # the forked kernel, or bubblewrap
            status = dict(line.split(":", 1) for line in open(f"/proc/{pid}/status"))
    except SandboxUnavailable as exc:
        out[str(fork)] = {"refused": str(exc)}
        continue
    out[str(fork)] = {"inside": "".join(o.get("text", "") for o in nb.cells[0].outputs), "outside": status["Uid"].split()}
print(json.dumps(out))
'''
SUBUID = 2_000_000_000


@pytest.fixture(scope="module")
def grader_accounts(tmp_path_factory, request):
    """Two unprivileged accounts, as CI (root) makes them: one with subordinate ids, one without;
    a venv both can read (the test's own where it can, else a new one: a clone may be private)."""
    from tinygpt_course.testing import hub
    if os.geteuid() != 0 or not all(shutil.which(t) for t in ("useradd", "userdel", "usermod", "runuser", "newuidmap")):
        pytest.skip("needs root, useradd/usermod/runuser and newuidmap (apt-get install uidmap)")
    # not below pytest's folder: every pytest session of root makes /tmp/pytest-of-root 0700 again
    # (another one on this machine would lock the accounts out mid-test)
    base = Path(tempfile.mkdtemp(prefix="tinygpt-graders-", dir="/var/tmp"))
    os.chmod(base, 0o755)
    venv = request.getfixturevalue("users_venv")
    # names of this run's own: another run of this test on the machine has its own accounts
    users = {"sub": f"tgsb{os.getpid() % 10 ** 6}s", "plain": f"tgsb{os.getpid() % 10 ** 6}p"}
    for name in users.values():
        subprocess.run(["userdel", name], capture_output=True)
        subprocess.run(["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", name], check=True)
    subprocess.run(["usermod", "--add-subuids", f"{SUBUID}-{SUBUID + 65535}", "--add-subgids",
                    f"{SUBUID}-{SUBUID + 65535}", users["sub"]], check=True)
    script = base / "as_user.py"
    script.write_text(AS_USER)
    script.chmod(0o644)

    @functools.lru_cache(maxsize=None)
    def run_as(role, mode="refuse"):
        """Both kernels (forked, started) graded as the account: {"True"/"False": what each saw}."""
        user = users[role]
        home = base / role
        home.mkdir(exist_ok=True)
        shutil.chown(home, user, user)
        proc = subprocess.run(["runuser", "-u", user, "--", "env", f"HOME={home}",
                               f"PATH={venv / 'bin'}:/usr/bin:/bin", str(venv / "bin" / "python"), str(script),
                               str(home), mode], capture_output=True, text=True, timeout=600, cwd=home)
        assert proc.returncode == 0, proc.stderr[-3000:]
        return json.loads(proc.stdout.splitlines()[-1]), pwd.getpwnam(user).pw_uid

    run_as.users, run_as.venv, run_as.base = users, venv, base
    yield run_as
    for name in users.values():
        subprocess.run(["userdel", name], capture_output=True)
    shutil.rmtree(base, ignore_errors=True)


@pytest.mark.parametrize("fork", ["True", "False"], ids=["forked", "started"])
def test_a_teacher_account_runs_learner_code_as_its_subordinate_uid(grader_accounts, fork):
    """A grader that is not root (CI makes the account): the kernel, forked (through the
    template's NS_GET_PARENT dance) or started, is uid 65534 in the sandbox and the account's
    first subordinate uid outside, never the account's own. Without subordinate ids grading
    refuses; accepted with c.Sandbox.allow_grader_uid, it runs as the account: the defence off."""
    inside = f"65534 /tmp/work {fork}\n"         # torch already there: the forked kernel
    with_subuid, _ = grader_accounts("sub")
    assert with_subuid[fork]["inside"] == inside, with_subuid
    assert with_subuid[fork]["outside"] == [str(SUBUID)] * 4, with_subuid
    refused, _ = grader_accounts("plain")
    assert "subordinate ids" in refused[fork]["refused"], refused
    own, uid = grader_accounts("plain", "allow")
    assert own[fork]["inside"] == inside and own[fork]["outside"] == [str(uid)] * 4, own


FD2 = """
    import os, stat
    try:
        os.ftruncate(2, 0)
        print("truncated")
    except OSError:
        print("not truncated")
    print(stat.S_ISFIFO(os.fstat(2).st_mode))
    os.write(2, b"\\rFLAGGED bob (forged)\\n")
    for _ in range(1000):
        os.write(1, b"y" * 999 + b"\\n")
"""


@pytest.mark.parametrize("fork", [True, False], ids=["forked", "started"])
def test_the_kernels_fd_2_is_a_pipe_the_grader_logs(course, fork, caplog, capfd):
    """fd 2 (and 1) of the kernel is a pipe the grader reads: the grader's stderr cannot be
    truncated or written; each line is logged marked with the student and control characters
    spelled out, each capped, 256 KiB in all. Unsandboxed, the kernel writes the grader's own stderr."""
    from tinygpt_course.grading.template import LINE_CAP, LOG_CAP
    with caplog.at_level(logging.INFO):
        out, err = run_kernel(FD2, course[1], fork=fork)
    # (ipykernel also echoes what reaches fd 1 and 2 into the cell, as for any kernel)
    assert out.startswith("not truncated\nTrue\n") and err is None, out[:300]
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("[kernel of alice/multihead] ")]
    assert "[kernel of alice/multihead] \\rFLAGGED bob (forged)" in lines, lines[:5]
    assert max(map(len, lines)) < LINE_CAP + 100
    assert sum(len(ln) for ln in lines) < LOG_CAP and "more bytes of output not logged" in lines[-1], lines[-1]
    assert "FLAGGED" not in capfd.readouterr().err
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(textwrap.dedent(FD2))])
    cfg = Config()
    cfg.Sandbox.enabled = False
    with pytest.warns(UserWarning, match="UNSANDBOXED"):
        NotebookClient(nb, kernel_manager_class=SandboxedKernelManager, config=cfg,
                       resources={"metadata": {"path": str(course[1])}}, timeout=60).execute()
    assert "\rFLAGGED bob (forged)" in capfd.readouterr().err     # defence off: the grader's own stderr


GRADED_AS_TEACHER = ["01_right_comprehension", "06_plain_list", "36_attack_detached_sleeper", "62_attack_setuid_copy"]


def test_a_teacher_account_grades_with_nbgrader_autograde(grader_accounts):
    """The whole unprivileged path end to end, as CI (root) can run it: the account with
    subordinate ids runs the real `nbgrader autograde` on its own course (the kernel forked from
    the template, the independent re-run and the reference run, each in a sandbox nested in the
    account's user namespace). Every answer gets the catalogue's score, and the set-uid copy and
    the detached sleeper stay in their sandboxes: neither is in autograded/ or outlives grading."""
    from tinygpt_course.testing import catalogue
    from tinygpt_course.testing.course import make_course
    user, venv = grader_accounts.users["sub"], grader_accounts.venv
    course = make_course(grader_accounts.base / "sub-course",
                         extra_config="c.RobustExecute.timeout = 60\nc.IndependentChecks.timeout = 120\n")
    answers = [catalogue.answer("multihead", n) for n in GRADED_AS_TEACHER]
    for a in answers:
        catalogue.submit(course, a.name, a.code, a.notebook)
    subprocess.run(["chown", "-R", f"{user}:{user}", str(course)], check=True)
    home = grader_accounts.base / "sub"
    home.mkdir(exist_ok=True)
    shutil.chown(home, user, user)
    proc = subprocess.run(["runuser", "-u", user, "--", "env", f"HOME={home}", f"PATH={venv / 'bin'}:/usr/bin:/bin",
                           str(venv / "bin" / "nbgrader"), "autograde", "multihead", "--create"],
                          capture_output=True, text=True, timeout=1800, cwd=course)
    try:
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert "UNSANDBOXED" not in proc.stderr and "allow_grader_uid" not in proc.stderr
        for a in answers:
            assert catalogue.scored(course, a) == a.expect, (a.name, proc.stderr[-2000:])
        assert not list((course / "autograded").rglob("python-suid"))
        assert catalogue.settled(lambda: catalogue.leftover_processes(course)) == []
    finally:
        for pid, _, cmd in catalogue.leftover_processes(course):
            if "sleep 2718281" in cmd:
                os.kill(int(pid), 9)


# A class graded by `tinygpt-grade-class --jobs 3` as the teacher account (no cgroup: the process cap is
# RLIMIT_NPROC): the first learner floods (bounded: 600 sleepers, above the cap of 512) and holds its
# sandbox full until the other learners' grading has ended, taking again every place a process that
# ended leaves; each right answer waits, in its answer cell, until the flood is holding, then starts a
# thread (as ipykernel, zmq and torch do when they need one: whether they need one while the flood
# holds is chance), so its kernel's cells and its whole re-run run beside the full sandbox.
# A watcher outside (root) sees every process of every sandbox, releases them, and notes its uid.
RUN = f"tinygpt-class-{os.getpid()}"
FLOOD_MAX, SLEEPER = 600, "sleep 1414213"    # the flood's bound and its sleepers' command line, its own
FLOOD_HOLD = f'''
import os as _os, time as _time
open("/tmp/{RUN}-holding", "w").close()
for _ in range(15000):     # released by the test once the other learners are graded (300 s at most)
    if _os.path.exists("/tmp/{RUN}-release"):
        break
    if _started < {FLOOD_MAX}:     # a place another process left: the flood takes it
        try:
            _os.posix_spawn("/bin/sleep", {SLEEPER.split()!r}, {{}})
            _started += 1
        except OSError:
            pass
    _time.sleep(0.02)
'''
RIGHT_WAIT = f'''import os as _os, time as _time
open("/tmp/{RUN}-waiting", "w").close()
for _ in range(1200):      # released by the test once the flood holds its sandbox full (120 s at most)
    if _os.path.exists("/tmp/{RUN}-go"):
        break
    _time.sleep(0.1)
import threading as _threading
_probe = _threading.Thread(target=len, args=((),))   # a thread, as a kernel starts when it needs one
_probe.start()
_probe.join()
'''
CLASS_RIGHT = ["01_right_comprehension", "02_right_loop_append"]


class ClassWatch(threading.Thread):
    """Every process whose root holds one of the run's markers (it is in a learner's sandbox):
    its uid and gid outside; the worker (its $TINYGPT_GRADING_WORKER) of each sandbox's bubblewrap
    that a worker started; releases the right answers once the flood holds, and the flood once
    every right answer's log has its worker's exit line."""

    def __init__(self, logs, teacher_uid):
        super().__init__(daemon=True)
        self.logs, self.teacher_uid = logs, teacher_uid
        self.seen, self.by_worker, self.most_flooded = {}, {}, 0
        self.done, self.held = threading.Event(), False
        self.start()

    @staticmethod
    def status(pid):
        return dict(ln.split(":", 1) for ln in open(f"/proc/{pid}/status") if ":" in ln)

    def worker_of(self, pid):
        """The grading worker that started this sandbox process: the first process of the
        teacher's above it, if a worker (its name tgc-worker-<index>, tinygpt-grade-class's)."""
        for _ in range(6):
            pid = self.status(pid)["PPid"].strip()
            st = self.status(pid)
            if int(st["Uid"].split()[0]) == self.teacher_uid:
                name = st["Name"].strip()
                return int(name.rsplit("-", 1)[1]) if name.startswith("tgc-worker-") else None
        return None

    def ended(self, student):
        """The worker's exit line ends the student's log: their grading is over."""
        try:
            lines = (self.logs / f"{student}.0.log").read_text(errors="replace").rstrip().splitlines()
        except OSError:
            return False
        return bool(lines) and lines[-1].startswith("[tinygpt-grade-class] exit")

    def run(self):
        from tinygpt_course.testing import catalogue
        while not self.done.is_set():
            graded = all(self.ended(n) for n in CLASS_RIGHT)
            flooded = 0
            for pid in filter(str.isdigit, os.listdir("/proc")):
                try:
                    marks = [m for m in ("holding", "waiting") if os.path.exists(f"/proc/{pid}/root/tmp/{RUN}-{m}")]
                    if not marks:
                        continue
                    st = self.status(pid)
                    self.seen[pid] = (st["Uid"].split(), st["Gid"].split(), st["Name"].strip(), marks[0])
                    if st["Name"].strip() == "bwrap":
                        worker = self.worker_of(pid)
                        if worker is not None:
                            self.by_worker.setdefault(worker, set()).add(st["Uid"].split()[0])
                    if marks[0] == "holding":
                        flooded += st["Name"].strip() == "sleep"
                        self.held = True
                    if marks[0] == "holding" and graded:
                        catalogue.touch_in_sandbox(pid, f"/tmp/{RUN}-release")
                    if marks[0] == "waiting" and self.held:
                        catalogue.touch_in_sandbox(pid, f"/tmp/{RUN}-go")
                except (OSError, KeyError, IndexError, ValueError):
                    continue
            self.most_flooded = max(self.most_flooded, flooded)
            self.done.wait(0.3)


def grade_class_as_teacher(grader_accounts, name, extra=""):
    """The class above graded by the teacher account's `tinygpt-grade-class --jobs 3 --retries 0`."""
    from tinygpt_course.testing import catalogue
    from tinygpt_course.testing.course import gradebook_scores, make_course, totals
    user, venv = grader_accounts.users["sub"], grader_accounts.venv
    course = make_course(grader_accounts.base / name, extra_config=(
        "c.RobustExecute.timeout = 600\nc.IndependentChecks.timeout = 600\n" + extra))
    flood = catalogue.parse(REPO / "tests" / "data" / "floods" / "90_attack_process_flood.py", "multihead")
    assert "range(3000)" in flood.code and "_started" in flood.code     # FLOOD_HOLD counts on _started
    flood_code = flood.code.replace("range(3000)", f"range({FLOOD_MAX})").replace("3141593", SLEEPER.split()[1])
    catalogue.submit(course, "00_flood", flood_code + FLOOD_HOLD, None)
    for n in CLASS_RIGHT:
        catalogue.submit(course, n, RIGHT_WAIT + catalogue.answer("multihead", n).code, None)
    subprocess.run(["chown", "-R", f"{user}:{user}", str(course)], check=True)
    home = grader_accounts.base / "sub"
    home.mkdir(exist_ok=True)
    shutil.chown(home, user, user)
    teacher_uid = pwd.getpwnam(user).pw_uid
    watch = ClassWatch(course / "logs", teacher_uid)
    try:
        proc = subprocess.run(["runuser", "-u", user, "--", "env", f"HOME={home}", f"PATH={venv / 'bin'}:/usr/bin:/bin",
                               str(venv / "bin" / "python"), "-m", "tinygpt_course.classroom", "multihead", "--jobs", "3",
                               "--retries", "0", "--no-progress", "--logs", str(course / "logs")],
                              capture_output=True, text=True, timeout=1800, cwd=course)
    finally:
        watch.done.set()
        watch.join()
        for pid, _, cmd in catalogue.leftover_processes(course, (SLEEPER,)):
            if SLEEPER in cmd:
                os.kill(int(pid), 9)
    return {"proc": proc, "watch": watch, "scores": totals(gradebook_scores(course)), "uid": teacher_uid,
            "left": catalogue.settled(lambda: catalogue.leftover_processes(course, (SLEEPER,)))}


@pytest.fixture(scope="module")
def teacher_class(grader_accounts):
    on = grade_class_as_teacher(grader_accounts, "class-on")
    off = grade_class_as_teacher(grader_accounts, "class-off", "c.Sandbox.separate_workers = False\n")
    return on, off


def test_a_teacher_accounts_class_keeps_a_flood_to_its_own_worker(teacher_class):
    """Graded as a teacher account by tinygpt-grade-class --jobs 3, without a cgroup: the flood
    fills its sandbox, and every right answer graded beside it gets full marks. Each worker's
    sandboxes are the account's first subordinate uid + the worker's index outside (the flood's
    and the forked kernels' too: all of the three, never the teacher's)."""
    on, _ = teacher_class
    out = on["proc"].stderr[-3000:]
    assert on["proc"].returncode == 0 and "graded 3, skipped 0, failed 0" in on["proc"].stderr, out
    assert on["watch"].most_flooded > 100, on["watch"].most_flooded
    assert {n: on["scores"].get(n) for n in CLASS_RIGHT} == {n: 7 for n in CLASS_RIGHT}, (on["scores"], out)
    first = SUBUID
    assert on["watch"].by_worker and all(uids == {str(first + w)} for w, uids in on["watch"].by_worker.items()), \
        on["watch"].by_worker
    assert set(on["watch"].by_worker) == {0, 1, 2}, on["watch"].by_worker
    uids = {u[0] for u, _, _, _ in on["watch"].seen.values()}
    assert uids == {str(first + k) for k in range(3)} and str(on["uid"]) not in uids, uids
    for uid, gid, name, _ in on["watch"].seen.values():
        assert len(set(uid)) == 1 and gid == uid, (uid, gid, name)     # the account's subuid and subgid ranges are one
    assert on["left"] == []
    print(f"defence on: scores {on['scores']}, most sleepers of the flood at once {on['watch'].most_flooded}, "
          f"uids by worker {on['watch'].by_worker}")


def test_with_every_worker_on_one_uid_a_flood_costs_a_classmate_points(teacher_class):
    """The defence off (c.Sandbox.separate_workers = False: every worker the first subordinate
    uid, RLIMIT_NPROC counted over all the teacher's sandboxes): a right answer graded beside the
    flood loses points or is not graded."""
    _, off = teacher_class
    assert off["watch"].most_flooded > 100, off["watch"].most_flooded
    uids = {u[0] for u, _, _, _ in off["watch"].seen.values()}
    assert uids == {str(SUBUID)}, uids
    lost = {n: off["scores"].get(n) for n in CLASS_RIGHT if off["scores"].get(n) != 7}
    assert lost, (off["scores"], off["proc"].stderr[-3000:])
    print(f"defence off: scores {off['scores']}, lost {lost} (of 7 each), most sleepers of the flood at once "
          f"{off['watch'].most_flooded}, uids {uids}; exit {off['proc'].returncode}")


NPROC_AS_TEACHER = r'''
import json, os, subprocess, sys, time
from tinygpt_course.grading.sandbox import Sandbox, sandbox_env
FLOOD = "import os, sys\nn = 0\nfor _ in range(200):\n    try:\n        os.posix_spawn('/bin/sleep', ['sleep', '2718281'], {})\n    except OSError:\n        break\n    n += 1\nprint(n, flush=True)\nsys.stdin.read()\n"
def wrap(worker, separate, limits_first):
    cmd = Sandbox(max_processes=64, worker=worker, separate_workers=separate).wrap([sys.executable, "-I", "-c", CODE[worker]])
    spec = json.loads(cmd[-1])
    spec["limits_first"] = limits_first
    return cmd[:-1] + [json.dumps(spec)]
CODE = [FLOOD, "import threading; t = threading.Thread(target=print, args=('ok',)); t.start(); t.join()"]
SANDBOX_UIDS = {str(Sandbox(worker=k).outside_uid()) for k in (0, 1)}

def uid_of(pid):
    try:
        return next(ln.split()[1] for ln in open(f"/proc/{pid}/status") if ln.startswith("Uid:"))
    except (OSError, StopIteration):
        return None

def settle():
    """Until the last round's sandbox processes are gone (they count until reaped), 60 s at most."""
    for _ in range(600):
        if not any(uid_of(p) in SANDBOX_UIDS for p in os.listdir("/proc") if p.isdigit()):
            return
        time.sleep(0.1)

out = {}
for name, separate, limits_first in (("on", True, False), ("uid alone", True, True), ("off", False, True)):
    settle()
    flood = subprocess.Popen(wrap(0, separate, limits_first), stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                             env=sandbox_env())
    try:
        started = int(flood.stdout.readline())
        other = subprocess.run(wrap(1, separate, limits_first), capture_output=True, text=True, env=sandbox_env(), timeout=120)
    finally:
        flood.kill()
        flood.wait()
    out[name] = [started, other.stdout.strip() or other.stderr.strip()[-200:]]
print(json.dumps(out))
'''


def test_a_teacher_accounts_process_cap_is_counted_per_sandbox(grader_accounts):
    """Without a cgroup, as the teacher account: worker 0's sandbox floods to its RLIMIT_NPROC
    (64) and worker 1's sandbox still starts a thread. Linux (5.14+) counts RLIMIT_NPROC up through
    each user namespace's owner: set before launch.py's namespace (as before), the count is the
    teacher's over every sandbox, so even another subordinate uid for worker 1 does not help
    ("uid alone": on older kernels, which count per uid, it would); set inside it, per sandbox."""
    user, venv, base = grader_accounts.users["sub"], grader_accounts.venv, grader_accounts.base
    script = base / "nproc_as_teacher.py"
    script.write_text(NPROC_AS_TEACHER)
    script.chmod(0o644)
    home = base / "sub"
    home.mkdir(exist_ok=True)
    shutil.chown(home, user, user)
    proc = subprocess.run(["runuser", "-u", user, "--", "env", f"HOME={home}", f"PATH={venv / 'bin'}:/usr/bin:/bin",
                           str(venv / "bin" / "python"), str(script)], capture_output=True, text=True, timeout=600, cwd=home)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.splitlines()[-1])
    assert all(0 < started < 64 for started, _ in out.values()), out
    assert out["on"][1] == "ok", out
    assert out["off"][1] != "ok", out
    print(f"RLIMIT_NPROC 64 as a teacher account: {out}")
    if os.uname().release.split(".")[0].isdigit() and tuple(map(int, os.uname().release.split(".")[:2])) >= (5, 14):
        assert out["uid alone"][1] != "ok", out
