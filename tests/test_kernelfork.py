"""Grading kernels forked from the warm template: each enters its own sandbox before it runs a
line, and a learner sees the same notebook results as from a kernel started afresh.

Each defence is run twice: in a forked kernel that joins its sandbox (the snippet is stopped)
and in one that is forked but does not join (the snippet succeeds), which shows the test can
fail and that joining the sandbox is what stops it.
"""
import logging
import os
import socket
import textwrap
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


def execute(nb, folder, fork=True, join=True, **options):
    """Run `nb` as grading does, in `folder`, with its kernel forked (and joining its sandbox) or started."""
    cfg = Config()
    cfg.SandboxedKernelManager.fork_from_template = fork
    NotebookClient(nb, kernel_manager_class=SandboxedKernelManager if join else Unjoined, config=cfg,
                   resources={"metadata": {"path": str(folder)}}, **options).execute()
    return nb


def run_kernel(code, own, join=True, fork=True, timeout=60):
    """Run `code` in one cell of a grading kernel with cwd `own`; (text output, error name)."""
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(textwrap.dedent(code))])
    execute(nb, own, fork, join, timeout=timeout, allow_errors=True)
    outs = nb.cells[0].outputs
    return ("".join(o.get("text", "") for o in outs if o.output_type == "stream"),
            next((o["ename"] for o in outs if o.output_type == "error"), None))


def test_a_forked_kernel_runs_sandboxed_and_can_be_interrupted(course):
    interrupted(course, fork=True)


def test_the_kernel_is_forked_and_fast(course):
    """The fork path is the one taken: torch is there before the first cell imports it."""
    run_kernel("pass", course[1])                      # the template starts once per process
    t0 = time.perf_counter()
    out, err = run_kernel("import sys; print('torch' in sys.modules)", course[1])
    assert (out, err) == ("True\n", None)
    assert time.perf_counter() - t0 < 10               # generous: a cold start with torch is about 3 s
    out, err = run_kernel("import sys; print('torch' in sys.modules)", course[1], fork=False)
    assert (out, err) == ("False\n", None)


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
    assert (survivors(marker) == []) == join


def test_runs_as_nobody_without_capabilities_under_the_caps(course):
    """As a started kernel in the same sandbox: uid and gid 65534 (no other group but the
    sandbox's), no capability in any set, no_new_privs, the sandbox's rlimits."""
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
                                            str(sandbox.max_processes)]) + "\n", None), (forked, started)


def test_a_template_that_cannot_start_means_a_cold_sandboxed_start(course, monkeypatch, caplog):
    def broken():
        raise template_mod.TemplateUnavailable("the kernel template did not start (test)")
    monkeypatch.setattr(template_mod, "template", broken)
    with caplog.at_level(logging.WARNING):
        out, err = run_kernel("import os, sys; print(os.getuid(), 'torch' in sys.modules)", course[1])
    assert (out, err) == ("65534 False\n", None)
    assert "starting the kernel instead" in caplog.text


def lesson_outputs(nb_path, folder, fork):
    """Per code cell: each stream's text joined (however it was split into messages), then its
    other outputs."""
    nb = execute(nbformat.read(nb_path, 4), folder, fork, timeout=120)
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
    the explorer's PNG to the byte."""
    source = REPO / "source" / "multihead" / "multihead.ipynb"
    forked, cold = lesson_outputs(source, tmp_path, True), lesson_outputs(source, tmp_path, False)
    assert any("image/png" in o[2] for _, others in forked for o in others), "the explorer drew no picture"
    assert forked == cold
