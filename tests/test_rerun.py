"""The sandboxed re-run server: one job cannot reach the next, nor outlast its limit. Fast."""
import os

import pytest

from tinygpt_course.grading.rerun import rerun
from tinygpt_course.grading.sandbox import Sandbox
from tinygpt_course.testing.processes import running


def clear_zygotes():
    """Close this process's re-run zygotes and spawner: the next job starts new ones."""
    from tinygpt_course.grading import rerun as module
    for server in module._servers.values():
        server.close()
    module._servers.clear()
    if module._spawner is not None:
        module._spawner.close()
        module._spawner = None


def new_zygotes(kind):
    """Zygotes new from here on: started on their own, or forked by a new spawner."""
    from tinygpt_course.grading import rerun as module
    clear_zygotes()
    if kind == "spawned":
        module.start_spawner()


@pytest.fixture(params=["started", "spawned"])
def zygotes(request):
    """Each job's zygote started on its own (`python -m tinygpt_course.rerun.server`), or forked by
    this process's spawner (a class run's): the same defences either way."""
    new_zygotes(request.param)
    yield request.param
    clear_zygotes()


def report(answer, timeout=20, enabled=True):
    """Run `answer` as a learner's answer cell; it reports by raising (the record's init_error)."""
    result = rerun(Sandbox(enabled=enabled), "multihead", [], answer, 1, timeout)
    return result.record["init_error"] if result.record else result.problem


PLANT = """
import os
open("/tmp/planted", "w").write("x")
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        import time; time.sleep(300)
    os._exit(0)
raise Exception("planted")
"""
LOOK = """
import os
def forked_python(p):   # the runner and what it forked (bwrap and the placeholder are there too)
    try:
        return b"rerun.server" in open(f"/proc/{p}/cmdline", "rb").read()
    except OSError:
        return False
others = [p for p in os.listdir("/proc") if p.isdigit() and int(p) not in (os.getpid(), os.getppid()) and forked_python(p)]
raise Exception(f"planted file: {os.path.exists('/tmp/planted')}, other processes: {len(others)}")
"""


def test_a_job_leaves_nothing_for_the_next(zygotes):
    assert "planted" in report(PLANT)
    assert report(LOOK).endswith("planted file: False, other processes: 0")


def test_without_the_sandbox_the_next_job_would_see_it():
    # the server's clean-up is the sandbox's: unsandboxed, only the job's own folder goes
    report(PLANT, enabled=False)
    try:
        assert "planted file: True" in report(LOOK, enabled=False)
    finally:
        import os
        os.path.exists("/tmp/planted") and os.unlink("/tmp/planted")


def test_an_endless_loop_is_stopped_at_the_limit():
    assert "ran past the 1 s limit" in report("while True:\n    pass", timeout=1)
    assert "planted file: False" in report(LOOK)       # the server still serves


def test_a_long_error_is_a_record_too():
    """An answer cell raising 5000 characters: its record (the first 2000, after where it came
    from) fits the table, so the learner reads what raised, not that the record is off."""
    got = report('raise ValueError("x" * 5000)')
    assert got.startswith("your answer cell raised ValueError: xxx") and len(got) > 2000, got[:200]


def test_a_crash_is_reported_in_the_learners_terms():
    assert "stopped with exit code 3" in report("import os\nos._exit(3)")
    assert "ran out of memory" in report("x = bytearray(10 ** 11)") or "MemoryError" in report("x = bytearray(10 ** 11)")


@pytest.mark.parametrize("answer", ["import os, signal\nos.kill(os.getppid(), signal.SIGKILL)",
                                    "import os, signal\nos.kill(1, signal.SIGKILL)"])
def test_killing_the_server_costs_only_that_job(answer, zygotes):
    problem = report(answer)
    assert "re-run" in problem
    assert "planted file: False" in report(LOOK)        # a fresh server takes over


# --- issue 20 item 3: every job in a process and a sandbox that never held another job's data --
# Each attack runs right after a job that left something behind, with the defence on (a fresh
# fork of the zygote and a fresh sandbox per job) and off (fresh=False: the zygote reads every
# job and forks each runner from there, into one sandbox kept for every job).

ON_OFF = [pytest.param(True, id="fresh"), pytest.param(False, id="defence_off")]
SECRET = "SECRET-" + "0123456789abcdef" * 2
# a job that held a secret: as the solution's run holds the solution (padded to the size of a
# lesson's job, so that its text is not in a block the next job's own parsing reuses at once)
HOLDER = f"secret = {SECRET!r}\n" + "# the solution would be here\n" * 400 + "raise Exception('held')"
HEAP_SEARCH = r'''
import re
found = set()
with open("/proc/self/maps") as maps, open("/proc/self/mem", "rb", buffering=0) as mem:
    for line in maps:
        fields = line.split()
        lo, hi = (int(v, 16) for v in fields[0].split("-"))
        if fields[1].startswith("rw") and hi - lo < 2 ** 30:
            try:
                mem.seek(lo)
                found |= set(re.findall(rb"SECRET-([0-9a-f]{32})", mem.read(hi - lo)))
            except OSError:
                pass
raise Exception(f"heap holds: {sorted(found)}")
'''
PREVIOUS_REPLY = '''
import sys
frame, reply = sys._getframe(), None
while frame is not None:
    value = frame.f_locals.get("payload")
    if isinstance(value, bytes) and value:
        reply = value
    frame = frame.f_back
if reply is None:
    raise Exception("no earlier reply here")
open("record.bin", "wb").write(reply)
import os
os._exit(0)
'''
SHM = '''
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
libc.shmat.restype = ctypes.c_void_p
'''
LEAVE = SHM + '''
open("/dev/shm/left", "w").write("for the next learner")   # /dev itself is read-only
os.makedirs("/tmp/kept/inner")
os.chmod("/tmp/kept/inner", 0o555)
os.chmod("/tmp/kept", 0o555)
shmid = libc.shmget(0x7e57, 4096, 0o1000 | 0o666)           # IPC_CREAT
ctypes.memmove(libc.shmat(shmid, None, 0), b"hello next", 10)
raise Exception(f"left three things, shm {shmid}")
'''
FIND = SHM + '''
found = [what for what, path in (("dev", "/dev/shm/left"), ("tmp", "/tmp/kept")) if os.path.exists(path)]
shmid = libc.shmget(0x7e57, 0, 0)
if shmid >= 0:
    found.append("shm: " + ctypes.string_at(libc.shmat(shmid, None, 0), 10).decode())
raise Exception(f"found: {found}")
'''
def two_jobs(first, second, fresh, setup=()):
    sandbox = Sandbox()
    rerun(sandbox, "multihead", setup, first, 7, 60, fresh=fresh)
    return rerun(sandbox, "multihead", setup, second, 7, 60, fresh=fresh)


@pytest.mark.parametrize("fresh", ON_OFF)
def test_the_heap_holds_no_earlier_job(fresh, zygotes):
    got = two_jobs(HOLDER, HEAP_SEARCH, fresh).record["init_error"]
    assert ("heap holds: []" in got) == fresh, got
    if not fresh:
        assert SECRET[7:] in got


@pytest.mark.parametrize("fresh", ON_OFF)
def test_the_previous_reply_is_not_there_to_take(fresh, zygotes):
    from tinygpt_course.grading.lesson import read_lesson
    from tinygpt_course.testing.notebooks import source_path
    setup = read_lesson(source_path("multihead")).setup
    sandbox = Sandbox()
    from tinygpt_course.testing.catalogue import answer
    right = rerun(sandbox, "multihead", setup, answer("multihead", "01_right_comprehension").code, 7, 60,
                  fresh=fresh).record
    assert "out" in right and "init_error" not in right, right
    taken = rerun(sandbox, "multihead", setup, PREVIOUS_REPLY, 7, 60, fresh=fresh)
    if fresh:
        assert "no earlier reply here" in taken.record["init_error"], taken
    else:
        assert taken.record is not None and taken.record["out"].equal(right["out"])


@pytest.mark.parametrize("fresh", ON_OFF)
def test_no_file_folder_or_shared_memory_is_left_for_the_next_job(fresh, zygotes):
    got = two_jobs(LEAVE, FIND, fresh).record["init_error"]
    if fresh:
        assert got.endswith("found: []"), got
    else:
        assert got.endswith("found: ['dev', 'tmp', 'shm: hello next']"), got


def lesson_setup():
    from tinygpt_course.grading.lesson import read_lesson
    from tinygpt_course.testing.notebooks import source_path
    return read_lesson(source_path("multihead"))


# The attacks read what an earlier job left in memory the allocator had not yet reused. Whether
# the heap search's own job overwrites the solution's text is the same for every round one zygote
# serves, and differs between zygotes (measured: 20 of 42 new started zygotes never kept it whole,
# 0 of 10 spawned): each defence-off round runs on new zygotes, until one passes (all 16 lose it
# about once in 10^5)
TRIES = 16


@pytest.mark.parametrize("fresh", ON_OFF)
@pytest.mark.parametrize("attack, before", [("43_attack_heap_search", "solution"),
                                            ("44_attack_previous_reply", "01_right_comprehension")])
def test_the_catalogues_attacks_pass_only_with_the_defence_off(attack, before, fresh, zygotes):
    """Graded right after the solution's run (the reference) or a right answer, the catalogue's
    answer passes every check when its re-run shares a process with that job, none of those a
    forward returning x fails when it does not. The zygotes are new for the test: a process that
    had run other answers (this worker's earlier tests) would hold their definitions too.

    What a shared process keeps of an earlier job is freed memory until the allocator reuses it,
    so the defence off is shown by a pass in one of TRIES rounds, each on new zygotes (about half
    of them lose the solution's text under the heap search's own job, in every round), and the
    defence on by no pass in any of three."""
    from tinygpt_course.testing.catalogue import answer
    src, sandbox = lesson_setup(), Sandbox()
    rounds = []
    for _ in range(3 if fresh else TRIES):
        if rounds and not fresh:
            new_zygotes(zygotes)
        ref = rerun(sandbox, "multihead", src.setup, src.solution, 7, 60, fresh=fresh).record
        if before != "solution":
            rerun(sandbox, "multihead", src.setup, answer("multihead", before).code, 7, 60, fresh=fresh)
        rec = rerun(sandbox, "multihead", src.setup, answer("multihead", attack).code, 7, 60, fresh=fresh).record
        rounds.append({gid for gid in src.test_ids if src.lesson.verdict(gid, rec, ref).passed})
        if not fresh and rounds[-1] == set(src.test_ids):
            break
    if fresh:
        assert all(passed == {"weight_count", "causal"} for passed in rounds), rounds
    else:
        assert rounds[-1] == set(src.test_ids), rounds


# --- the course library is put back before the extract runs (tinygpt_course/rerun/bound.py) -------

# a MultiHead stored right whose forward gives x back: honestly it earns what "forward returns x"
# earns; the lines after it make the extract record heads that forward never ran
def honest_x():
    """The lesson's solution with a forward that gives x back."""
    from tinygpt_course.testing.notebooks import solution
    right = solution("multihead")
    return right[:right.index("    def forward(self, x):")] + "    def forward(self, x):\n        return x\n"


FORGERIES = {
    "helper replaced": '''
import sys
_ex = sys.modules["tinygpt_course.checks.multihead.extract"]
_real_run = _ex._run
def _forged_run(m, x, rec, prefix):
    _real_run(m, x, rec, prefix)
    rec[prefix + "head_outs"] = [h(x).detach().clone() for h in m.heads]
    rec[prefix + "head_calls"] = [0, 1]
_ex._run = _forged_run
''',
    "code replaced": '''
import sys
def _forged_run(m, x, rec, prefix):
    forward_record(m, x, rec, prefix, [])
    rec[prefix + "head_outs"] = [h(x).detach().clone() for h in m.heads]
    rec[prefix + "head_calls"] = [0, 1]
sys.modules["tinygpt_course.checks.multihead.extract"]._run.__code__ = _forged_run.__code__
''',
}


def passed(record, ref):
    from tinygpt_course.checks.protocol import load_lesson
    lesson = load_lesson("multihead")
    return sorted(gid for gid in lesson.checks if lesson.verdict(gid, record, ref).passed)


@pytest.mark.parametrize("forgery", FORGERIES)
def test_a_replaced_helper_of_the_extract_forges_nothing(forgery):
    """With the library put back, the forged answer's record is the honest one's; without it
    (bound=False, the defence off) the forgery earns checks its forward never did."""
    from tinygpt_course.grading.lesson import read_lesson
    from tinygpt_course.testing.notebooks import solution, source_path
    setup, sandbox = read_lesson(source_path("multihead")).setup, Sandbox()
    ref = rerun(sandbox, "multihead", setup, solution("multihead"), 11, 60).record
    honest = passed(rerun(sandbox, "multihead", setup, honest_x(), 11, 60).record, ref)
    assert "out_is_proj" not in honest and "shapes" not in honest, honest
    forged = honest_x() + FORGERIES[forgery]
    assert passed(rerun(sandbox, "multihead", setup, forged, 11, 60).record, ref) == honest
    off = passed(rerun(sandbox, "multihead", setup, forged, 11, 60, bound=False).record, ref)
    assert set(off) > set(honest), (off, honest)


# --- every point needs the right computation (Lesson.anchor; tests/test_anchors.py judges records) ---

# a blank answer: heads of the lesson's shape that compute nothing of the lesson's (zeros), and a
# forward that finds the record being made through the stack and fills it with the solution's
# stored record (reference.rec, installed as data for the notebook's checks), returning its out
BLANK_FORGER = '''
import sys
from tinygpt_course.checks import notebook as _nb
_replayed = _nb.reference("multihead")


class Head(nn.Module):
    def __init__(self, head_size):
        super().__init__()
        self.key = nn.Linear(n_embd, head_size, bias=False)
        self.query = nn.Linear(n_embd, head_size, bias=False)
        self.value = nn.Linear(n_embd, head_size, bias=False)

    def forward(self, x):
        return torch.zeros(x.shape[0], x.shape[1], self.key.out_features)


class MultiHead(nn.Module):
    def __init__(self):
        super().__init__()
        self.heads = nn.ModuleList([Head(16) for _ in range(2)])
        self.proj = nn.Linear(n_embd, n_embd)
        self.calls = 0

    def forward(self, x):
        frame = sys._getframe(1)
        while frame is not None and not isinstance(frame.f_locals.get("rec"), dict):
            frame = frame.f_back
        if frame is not None:
            frame.f_locals["rec"].update({k: v for k, v in _replayed.items() if k != "structure"})
        self.calls += 1          # the extract's third pass is the changed batch
        return _replayed["changed_out" if self.calls >= 3 else "out"]
'''


def test_a_blank_answer_that_forges_its_record_scores_nothing(monkeypatch):
    """Re-run in the sandbox with the grader's seed: the forged record scores 0 of 7 and names
    not_computed where its numbers only agree with each other; with the defence off
    (Lesson.anchored = False) the same record scores shapes, weight_count and causal."""
    from tinygpt_course.checks.protocol import load_lesson
    from tinygpt_course.grading.lesson import read_lesson
    from tinygpt_course.testing.notebooks import solution, source_path
    setup, sandbox = read_lesson(source_path("multihead")).setup, Sandbox()
    ref = rerun(sandbox, "multihead", setup, solution("multihead"), 11, 60).record
    forged = rerun(sandbox, "multihead", setup, BLANK_FORGER, 11, 60).record
    assert forged["changed_out"].shape == ref["changed_out"].shape      # the forgery reached the record
    assert passed(forged, ref) == []
    lesson = load_lesson("multihead")
    assert {lesson.verdict(c, forged, ref).mistake for c in ("weight_count", "causal")} == {"not_computed"}
    monkeypatch.setattr(type(lesson), "anchored", False)
    assert passed(forged, ref) == ["causal", "shapes", "weight_count"]


# --- a class run's zygotes are forks of one spawner (grading/rerun.py Spawner) ----------------------

def zygote_pid(server):
    """The pid of a RerunServer's zygote (a spawned one is known by its pidfd)."""
    proc = server.proc
    if getattr(proc, "pidfd", None) is None:
        return proc.pid
    with open(f"/proc/self/fdinfo/{proc.pidfd}") as f:
        return int(next(ln.split()[1] for ln in f if ln.startswith("Pid:")))


def parent_of(pid):
    with open(f"/proc/{pid}/status") as f:
        return int(next(ln.split()[1] for ln in f if ln.startswith("PPid:")))


def zygote_in_a_forked_worker(conn):
    """A class-grading worker's view (forked after share): its job's record and its zygote's parent."""
    from tinygpt_course.grading import rerun as module
    got = report("raise Exception('from the worker')")
    conn.send((got, parent_of(zygote_pid(module._servers[module._key(["multihead"], True)]))))


def test_every_zygote_of_a_class_run_is_a_fork_of_the_spawner(zygotes):
    """The grader's zygote (the solution's run) and a forked worker's both come from the spawner:
    neither imports torch again. Without the spawner each is a process the grader started."""
    import multiprocessing
    from tinygpt_course.grading import rerun as module
    assert "from the grader" in report("raise Exception('from the grader')")
    mine = parent_of(zygote_pid(module._servers[module._key(["multihead"], True)]))
    ctx = multiprocessing.get_context("fork")
    module.share(ctx)
    here, there = ctx.Pipe()
    worker = ctx.Process(target=zygote_in_a_forked_worker, args=(there,))
    worker.start()
    got, theirs = here.recv()
    worker.join(30)
    assert "from the worker" in got
    if zygotes == "spawned":
        assert mine == theirs == module._spawner.proc.pid
    else:
        assert mine == os.getpid() and theirs == worker.pid


@pytest.mark.parametrize("zygotes", ["spawned"], indirect=True)
def test_a_spawner_that_died_costs_no_job(zygotes, caplog):
    """The spawner killed: the next zygote is started as without one, with a warning."""
    from tinygpt_course.grading import rerun as module
    module._spawner.proc.kill()
    module._spawner.proc.wait()
    assert "still graded" in report("raise Exception('still graded')")
    assert "starting a re-run zygote of its own" in caplog.text


GRADER = """
import os, sys
from tinygpt_course.grading import rerun
from tinygpt_course.grading.sandbox import Sandbox
rerun.start_spawner()
rerun.rerun(Sandbox(), "multihead", [], "raise Exception('x')", 1, 20)
server = next(iter(rerun._servers.values()))
with open(f"/proc/self/fdinfo/{server.proc.pidfd}") as f:
    zygote = next(ln.split()[1] for ln in f if ln.startswith("Pid:"))
print(rerun._spawner.proc.pid, zygote, flush=True)
sys.stdin.read()
"""


def test_a_killed_grader_leaves_no_spawner_nor_zygote(tmp_path):
    """SIGKILL to the grader (the OOM killer): its spawner goes with it, and the zygotes with the spawner."""
    import signal
    import subprocess
    import sys
    import time
    grader = subprocess.Popen([sys.executable, "-c", GRADER], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              cwd=tmp_path)
    pids = [int(p) for p in grader.stdout.readline().split()]
    assert len(pids) == 2 and all(os.path.exists(f"/proc/{p}") for p in pids)
    grader.send_signal(signal.SIGKILL)
    grader.wait()
    deadline = time.monotonic() + 10
    while any(running(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not [p for p in pids if running(p)]
