"""The judge runs within a budget (tinygpt_course/grading/childjudge.py), and a record is data
(tinygpt_course/checks/record.py): two defences against one attack, each shown alone.

A record whose structure holds a 1 KB tuple graph that shares its 64 levels (2^64 leaves once
expanded) makes the multihead judge's `set()` spin. Taken back pickled (torch.load with
weights_only=True accepts it: c.IndependentChecks.records_as_data = False) and judged in a child
with a budget, it is flagged within the budget; judged in the grader's own process as well
(c.IndependentChecks.judge_in_child = False) `nbgrader autograde` never reaches the classmate
graded after it. Taken back as data (the default), it never reaches a judge: the re-run's
encoder refuses a tree that deep, and the decoder refuses anything off the lesson's table.
"""
import io
import os
import signal
import subprocess
import time
from pathlib import Path

import nbformat
import pytest
import torch

from tinygpt_course.checks import notebook, record
from tinygpt_course.checks.protocol import Kind, load_lesson
from tinygpt_course.grading.childjudge import judge_in_child, parse_reply
from tinygpt_course.grading.verdicts import read_verdicts
from tinygpt_course.testing.course import BIN, env, make_course, scores, submit
from tinygpt_course.testing.notebooks import release_path, solution, with_answer

LEVELS = 64
BUDGET = 10                 # seconds of wall clock and of CPU for one learner's judging in these tests
# In the re-run only (the learner's kernel has get_ipython), the answer's forward reaches up the
# stack to the record the extract is making and makes its head types the sharing graph. (The
# re-run puts the library back before the extract, so a replaced helper would not do: forward is
# learner code the extract has to call.)
SPIN = f"""
try:
    get_ipython()
except NameError:
    import sys
    _forward = MultiHead.forward

    def _spinning(self, x):
        g = ("Head",)
        for _ in range({LEVELS}):
            g = (g, g)
        frame = sys._getframe(1)
        while frame is not None:
            rec = frame.f_locals.get("rec")
            if isinstance(rec, dict) and isinstance(rec.get("structure"), dict):
                rec["structure"]["head_types"] = [g, g]
            frame = frame.f_back
        return _forward(self, x)
    MultiHead.forward = _spinning
"""


def sharing_graph(levels=LEVELS):
    g = ("Head",)
    for _ in range(levels):
        g = (g, g)
    return g


def spinning_record():
    """The solution's stored record with its head types made the sharing graph, through torch.save
    and torch.load(weights_only=True) as a pickled re-run's record comes back."""
    ref = notebook.reference("multihead")
    rec = dict(ref, structure=dict(ref["structure"], head_types=[sharing_graph(), sharing_graph()]))
    graph = io.BytesIO()
    torch.save(sharing_graph(), graph)
    assert graph.tell() < 4096                      # 2^64 leaves in a few KB
    buf = io.BytesIO()
    torch.save(rec, buf)
    return torch.load(io.BytesIO(buf.getvalue()), weights_only=True), ref


def test_a_spinning_record_is_flagged_within_the_budget():
    lesson = load_lesson("multihead")
    rec, ref = spinning_record()
    t0 = time.monotonic()
    verdicts = judge_in_child(lesson, tuple(lesson.checks), rec, ref, wall_s=3, cpu_s=3)
    assert time.monotonic() - t0 < 3 + 5
    assert set(verdicts) == set(lesson.checks)
    assert all(v.kind is Kind.NO_RESULT and not v.passed for v in verdicts.values())
    assert any("took" in v.message for v in verdicts.values())
    honest = judge_in_child(lesson, tuple(lesson.checks), ref, ref, wall_s=30, cpu_s=30)
    assert all(v.passed for v in honest.values()), honest


def test_the_same_record_spins_in_the_graders_process():
    """The defence off: the judge in this process, in a child killed after 3 s, has not finished."""
    lesson = load_lesson("multihead")
    rec, ref = spinning_record()
    pid = os.fork()
    if pid == 0:
        try:
            for gid in lesson.checks:
                lesson.verdict(gid, rec, ref)
        finally:
            os._exit(0)
    time.sleep(3)
    done, _ = os.waitpid(pid, os.WNOHANG)
    if not done:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    assert done == 0, "the judge finished: the record does not spin"


def test_a_bulky_record_gives_a_capped_message():
    """A record whose head sizes are a list of a million numbers: the judge formats it into its
    message (7 MB); what comes back from the child is capped."""
    lesson = load_lesson("multihead")
    _, ref = spinning_record()
    rec = dict(ref, structure=dict(ref["structure"], head_key_sizes=list(range(1_000_000))))
    assert len(lesson.verdict("shapes", rec, ref).message) > 1_000_000      # the judge's own message
    verdicts = judge_in_child(lesson, tuple(lesson.checks), rec, ref, wall_s=60, cpu_s=60)
    assert all(v.mistake == "head_size" and len(v.message) <= 2000 for v in verdicts.values()), \
        {k: (v.mistake, len(v.message)) for k, v in verdicts.items()}


def test_a_spinning_record_is_no_record():
    """The defence on: the encoder refuses the graph at its depth, at once; the pickled bytes, or
    the graph flattened by hand, are refused by the decoder; the honest record goes through."""
    rec, ref = spinning_record()
    schema = load_lesson("multihead").schema
    t0 = time.monotonic()
    with pytest.raises(record.RecordRejected, match="nested deeper"):
        record.encode(rec)
    assert time.monotonic() - t0 < 1
    buf = io.BytesIO()
    torch.save(rec, buf)
    with pytest.raises(record.RecordRejected):
        record.decode(buf.getvalue(), schema)
    deep = record.encode({**{k: v for k, v in ref.items() if k != "structure"},
                          "structure": dict(ref["structure"], head_types=[[["Head"]]] * 2)})
    with pytest.raises(record.RecordRejected, match="head_types/0/0"):
        record.decode(deep, schema)
    assert record.decode(record.encode(ref), schema)["structure"] == ref["structure"]


def test_a_reply_off_the_schema_is_no_verdict():
    ids = ("shapes", "causal")
    assert parse_reply(b'[["shapes", true, "passed", null, "ok"], ["causal", true, "passed", null, "ok"]]', ids)
    for bad in (b'[["shapes", true, "passed", null, "ok"]]',
                b'[["shapes", true, "wrong_value", "x", "ok"], ["causal", true, "passed", null, "ok"]]',
                b'[["shapes", false, "wrong_value", "Not An Id", "m"], ["causal", true, "passed", null, "ok"]]',
                b'[["other", true, "passed", null, "ok"], ["causal", true, "passed", null, "ok"]]',
                b'{"shapes": true}', b"[" * 100000):
        assert parse_reply(bad, ids) is None, bad


# --- the real nbgrader autograde: the class goes on -----------------------------------------------

def own_cpu_s(pid):
    """CPU seconds (user + system) a process has used itself, not its children's; None once gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def grade(course, timeout, cpu_over=None):
    """`nbgrader autograde multihead` in course, its own process group. Returns (its exit status,
    or None when it was killed; the CPU seconds its own process used, as last seen). Killed past
    `timeout` s, or once its own process (not the kernels nor the judges it starts) has used more
    than `cpu_over` CPU seconds: a judge spinning in the grader's process, measured in CPU time, so
    that the test does not hang on how fast or busy the machine is."""
    proc = subprocess.Popen([str(BIN / "nbgrader"), "autograde", "multihead", "--create"], cwd=course, env=env(),
                            stdout=subprocess.DEVNULL, stderr=open(course / "autograde.err", "w"),
                            start_new_session=True)
    deadline, cpu = time.monotonic() + timeout, 0.0
    while proc.poll() is None:
        cpu = own_cpu_s(proc.pid) or cpu
        if time.monotonic() > deadline or (cpu_over is not None and cpu > cpu_over):
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            return None, cpu
        time.sleep(0.2)
    return proc.returncode, cpu


def spinner_and_classmate(course):
    right = solution("multihead")
    submit(course, "a_spinner", "multihead", with_answer(release_path("multihead"), right + SPIN))
    submit(course, "b_classmate", "multihead", with_answer(release_path("multihead"), right))
    return course


# What the grader's own process may use for two learners: a judge that spins in it passes this, a
# judge in a child within BUDGET never adds to it (test_nbgrader_flags_the_spinner_... checks).
SPUN = 4 * BUDGET
CONFIG = f"c.IndependentChecks.judge_timeout = {BUDGET}\nc.IndependentChecks.judge_cpu_s = {BUDGET}\n"
PICKLED = "c.IndependentChecks.records_as_data = False\n"     # the record's defence off: the budget alone


def test_nbgrader_flags_the_spinner_and_grades_the_classmate(tmp_path):
    course = spinner_and_classmate(make_course(tmp_path / "on", extra_config=CONFIG + PICKLED))
    status, cpu = grade(course, timeout=1200)
    assert status == 0, (course / "autograde.err").read_text()[-3000:]
    assert cpu < SPUN, f"the grader's own process used {cpu:.1f} CPU s: the spun threshold below says nothing"
    classmate = scores(course, "multihead", "b_classmate")
    full = sum(classmate.values())
    assert full > 0 and all(s > 0 for s in classmate.values()), classmate
    assert sum(scores(course, "multihead", "a_spinner").values()) < full
    nb = nbformat.read(course / "autograded" / "a_spinner" / "multihead" / "multihead.ipynb", as_version=4)
    judged = read_verdicts(nb)
    assert all(v["kind"] == Kind.NO_RESULT.value for v in judged["checks"].values()), judged
    assert all(f"took longer than {BUDGET} s" in v["message"] or "CPU time" in v["message"]
               for v in judged["checks"].values()), judged
    assert judged["flagged"], judged


def test_without_the_budget_nbgrader_never_reaches_the_classmate(tmp_path):
    off = CONFIG + PICKLED + "c.IndependentChecks.judge_in_child = False\n"
    course = spinner_and_classmate(make_course(tmp_path / "off", extra_config=off))
    status, cpu = grade(course, timeout=900, cpu_over=SPUN)
    assert status is None, "nbgrader autograde finished: the judge did not spin"
    assert cpu > SPUN, f"killed at the wall-clock bound, its own process at {cpu:.1f} CPU s"
    assert not (course / "autograded" / "b_classmate").exists()


def test_records_as_data_stop_the_spinner_before_any_judge(tmp_path):
    """The budget off, the record's defence on: the spinner's checks fail as no record, the
    classmate gets full marks, and nbgrader finishes."""
    off = CONFIG + "c.IndependentChecks.judge_in_child = False\n"
    course = spinner_and_classmate(make_course(tmp_path / "data", extra_config=off))
    assert grade(course, timeout=1200)[0] == 0, (course / "autograde.err").read_text()[-3000:]
    classmate = scores(course, "multihead", "b_classmate")
    assert classmate and all(s > 0 for s in classmate.values()), classmate
    assert sum(scores(course, "multihead", "a_spinner").values()) < sum(classmate.values())
    nb = nbformat.read(course / "autograded" / "a_spinner" / "multihead" / "multihead.ipynb", as_version=4)
    judged = read_verdicts(nb)
    assert all(v["kind"] == Kind.NO_RESULT.value and "the record is not what the checks produce" in v["message"]
               for v in judged["checks"].values()), judged
    assert judged["flagged"], judged


# --- tinygpt-grade-class: a submission that hangs a worker does not stop the class ----------------

HUNG = 90    # --submission-timeout: the classmate's whole grading fits in it many times over


def test_grade_class_kills_a_hung_submission_and_grades_the_rest(tmp_path):
    """The judge's own budget off (judge_in_child = False), so that the spinner hangs its worker:
    --submission-timeout kills that worker, the spinner fails, the classmate is graded in full.
    Without the limit (--submission-timeout 0) the command would never return."""
    import sys
    off = PICKLED + "c.IndependentChecks.judge_in_child = False\n"
    course = spinner_and_classmate(make_course(tmp_path / "class", extra_config=off))
    proc = subprocess.run([sys.executable, "-m", "tinygpt_course.classroom", "multihead", "--no-progress",
                           "--course-dir", str(course), "--jobs", "2", "--retries", "0",
                           "--submission-timeout", str(HUNG), "--logs", str(tmp_path / "logs")],
                          capture_output=True, text=True, env=env(), timeout=1500)
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert "failed: a_spinner" in proc.stderr, proc.stderr[-3000:]
    classmate = scores(course, "multihead", "b_classmate")
    assert classmate and all(s > 0 for s in classmate.values()), classmate
    assert f"still grading this submission after {HUNG} s" in (tmp_path / "logs" / "a_spinner.0.log").read_text()
