"""tinygpt-grading-service (tinygpt_course/service): each submission graded as it arrives.

One course and a real nbgrader exchange in a temporary folder; each learner has a folder of
their own (their nbgrader config, their exchange cache) and hands in with the real `nbgrader
fetch_assignment` and `nbgrader submit --student` (no Unix users: the grader's own files, which
the checked collect takes as the grader's). Then, on that one course:

1. ann (the solution) and bob (a plain list: partial credit; a notes.html of his beside it)
   submit; `run --once` grades both while, at the same time, a copy of the course collects and
   grades the same submissions with `tinygpt-grade-class` (the batch): the same scores per cell,
   the same autograded notebooks; each learner fetches, with the real `nbgrader
   fetch_feedback`, their own page and no other (zed's stale page in feedback/ stays
   unreleased: the release is of the graded learner alone; bob's notes.html is not released);
2. cat, dan and eve submit (eve's inbound folder then holds a symlink: not data); the service
   (one worker) is SIGKILLed while it grades cat, then started again: every submission waiting
   is graded exactly once, cat's again from the start, and eve's is flagged; `status` says so,
   with eve's reason;
3. ann submits again (a plain list now), fay a right answer whose kernel zeroes every other
   learner's grades in the gradebook (the catalogue's attack), gus one whose model asks for 4 TB:
   the service (two workers) grades them: fay's and gus's harm costs only their own grades (the
   others' stay as graded, hal's right answer beside them gets full marks); ann's newer grade
   replaces her first in the gradebook (what the formgrader shows); and the class report, built
   now from what the service graded, says the same.
"""
import csv
import os
import re
import shutil
import signal
import subprocess
import sys
import time

import pytest

from tinygpt_course.service.queue import Queue, State
from tinygpt_course.service.runner import QUEUE_FILE
from tinygpt_course.testing import catalogue
from tinygpt_course.testing.course import (BIN, autograded_notebooks, differences, env, gradebook_scores, make_course,
                                           nbgrader, scores, service_entries)
from tinygpt_course.testing.notebooks import points, solution
from tinygpt_course.testing.processes import running
from tinygpt_course.testing.submissions import hand_in

ANSWERS = {"ann": solution("multihead"), "fay": catalogue.answer("multihead", "34_attack_gradebook_others"),
           "gus": catalogue.answer("multihead", "22_runaway_memory"), "hal": solution("multihead"), "bob": catalogue.answer("multihead", "06_plain_list"),
           "cat": catalogue.answer("multihead", "02_right_loop_append"),
           "dan": catalogue.answer("multihead", "07_wrong_dim"), "eve": solution("multihead")}
FULL = sum(points("multihead").values())


def _service(course, *args, **popen):
    cmd = [sys.executable, "-m", "tinygpt_course.service.cli", *args, "--course-dir", str(course)]
    return subprocess.Popen(cmd, env=env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **popen)


def _finish(proc, timeout=600):
    out, _ = proc.communicate(timeout=timeout)
    return proc.returncode, out


def _submit(base, exchange, student, answer=None):
    """The learner hands in ANSWERS[student] (or `answer`) from their own folder; the inbound
    folder's name."""
    answer = ANSWERS[student] if answer is None else answer
    extra = {"notes.html": "<p>bob's notes</p>"} if student == "bob" else None    # his, never released
    return hand_in(base / "learners" / student, exchange, student, getattr(answer, "code", answer), extra=extra)


def _expected(student):
    return catalogue.expected_points(ANSWERS[student], "multihead")



@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    """ann and bob submitted, graded by `run --once`; the same submissions by the batch."""
    base = tmp_path_factory.mktemp("service")
    exchange = base / "exchange"
    course = make_course(base / "course", extra_config=(
        f"c.Exchange.root = {str(exchange)!r}\nc.GradingService.assignments = ['multihead']\n"
        "c.RobustExecute.timeout = 30\n"))
    nbgrader(course, "release_assignment", "multihead")
    batch = base / "batch"
    shutil.copytree(course, batch)
    # a page in feedback/ of a learner nobody grades now: the release of one learner leaves it
    stale = course / "feedback" / "zed" / "multihead"
    stale.mkdir(parents=True)
    (stale / "multihead.html").write_text("<p>zed's old feedback</p>")
    (stale / "submission_secret.txt").write_text("zedsecret")
    (stale / "timestamp.txt").write_text("2026-01-01 00:00:00.000000 UTC")
    keys = {s: _submit(base, exchange, s) for s in ("ann", "bob")}
    service = _service(course, "run", "--once")
    nbgrader(batch, "collect", "multihead")
    grade_class = subprocess.run([sys.executable, "-m", "tinygpt_course.classroom", "multihead", "--no-progress",
                                  "--course-dir", str(batch)], env=env(), capture_output=True, text=True, timeout=600)
    code, out = _finish(service)
    assert code == 0, out[-4000:]
    assert grade_class.returncode == 0, grade_class.stderr[-4000:]
    return {"base": base, "exchange": exchange, "course": course, "batch": batch, "keys": keys, "out": out}


def test_each_learner_is_graded_and_fetches_their_own_feedback(graded):
    course, exchange = graded["course"], graded["exchange"]
    entries = service_entries(course)
    assert sorted(entries) == ["ann", "bob"], graded["out"][-3000:]
    for student, entry in entries.items():
        assert (entry.state, entry.attempts, entry.key) == (State.GRADED, 1, graded["keys"][student]), entry
        got = scores(course, "multihead", student)
        assert {k: score for k, (score, _) in entry.result["scores"].items()} == got, entry.result
        assert sum(most for _, most in entry.result["scores"].values()) == FULL, entry.result
        assert entry.result["feedback"] is True and entry.result["total"] == [sum(got.values()), FULL]
        assert {k: got[k] for k in _expected(student)} == _expected(student)
    pages = {s: (course / "feedback" / s / "multihead" / "multihead.html").read_bytes() for s in entries}
    assert pages["ann"] != pages["bob"]
    assert (course / "feedback" / "bob" / "multihead" / "notes.html").exists()
    released = sorted(p.read_bytes() for p in (exchange / "tinygpt" / "feedback").iterdir())
    assert released == sorted(pages.values()), "the exchange holds other pages than ann's and bob's " \
                                               "(bob's notes.html, zed's page?)"
    for student in entries:
        home = graded["base"] / "learners" / student
        nbgrader(home, "fetch_feedback", "multihead", "--student", student)
        fetched = [p.read_bytes() for p in (home / "multihead" / "feedback").glob("*/*.html")]
        assert fetched == [pages[student]], f"{student} fetched {len(fetched)} pages, not their own one"


def test_scores_and_notebooks_equal_the_batch(graded):
    service, batch = gradebook_scores(graded["course"]), gradebook_scores(graded["batch"])
    assert {k[0] for k in service} == {"ann", "bob"}, graded["out"][-3000:]
    assert service == batch, "per-cell scores differ from tinygpt-grade-class on the same submissions"
    nb_service, nb_batch = autograded_notebooks(graded["course"]), autograded_notebooks(graded["batch"])
    assert nb_service == nb_batch, "\n".join(differences(nb_batch, nb_service))


def _children(pid):
    """The processes whose parent is `pid`."""
    found = []
    for p in filter(str.isdigit, os.listdir("/proc")):
        try:
            if open(f"/proc/{p}/stat").read().rsplit(")", 1)[1].split()[1] == str(pid):
                found.append(int(p))
        except (OSError, IndexError):
            continue
    return found


@pytest.fixture(scope="module")
def restarted(graded):
    """cat, dan, eve submitted; the service SIGKILLed while grading cat; then `run --once`."""
    base, course, exchange = graded["base"], graded["course"], graded["exchange"]
    keys = {s: _submit(base, exchange, s) for s in ("cat", "dan", "eve")}
    (exchange / "tinygpt" / "inbound" / keys["eve"] / "notes.html").symlink_to(course / "gradebook.db")
    first = _service(course, "run", "--jobs", "1", start_new_session=True)
    try:
        deadline = time.monotonic() + 300
        collected = course / "submitted" / "cat" / "multihead"
        while not ((cat := service_entries(course).get("cat")) and cat.state is State.GRADING and collected.exists()):
            if first.poll() is not None or time.monotonic() > deadline:      # cut short: what it said
                os.killpg(first.pid, signal.SIGKILL)
                pytest.fail(f"cat was not being graded:\n{_finish(first)[1][-3000:]}")
            time.sleep(0.05)
        workers = _children(first.pid)
        os.kill(first.pid, signal.SIGKILL)
        killed = _finish(first)[1]
        while_killed = service_entries(course)
        deadline = time.monotonic() + 60
        while [p for p in workers if running(p)] and time.monotonic() < deadline:
            time.sleep(0.1)
        # what the killed service's processes did after it: nothing (they went with it)
        after_kill = {"running": [p for p in workers if running(p)],
                      "autograded": (course / "autograded" / "cat" / "multihead" / "multihead.ipynb").exists()}
    finally:
        if first.poll() is None:
            os.killpg(first.pid, signal.SIGKILL)
    code, out = _finish(_service(course, "run", "--once"))
    assert code == 0, out[-4000:]
    status = subprocess.run([sys.executable, "-m", "tinygpt_course.service.cli", "status", "--course-dir", str(course)],
                            env=env(), capture_output=True, text=True, timeout=120)
    return {**graded, "keys": keys, "killed": killed, "while_killed": while_killed, "out": out,
            "after_kill": after_kill, "status": status}


def test_a_killed_service_grades_every_waiting_submission_exactly_once(restarted):
    course, before = restarted["course"], restarted["while_killed"]
    assert before["cat"].state is State.GRADING and before["dan"].state is State.QUEUED, before
    assert "graded cat/" not in restarted["killed"], "cat was graded before the kill: nothing was cut short"
    assert restarted["after_kill"] == {"running": [], "autograded": False}, \
        "a worker of the killed service graded on: the next service would grade cat beside it"
    entries = service_entries(course)
    assert "back in the queue: cat/multihead" in restarted["out"], restarted["out"][-3000:]
    # cat: claimed once by the killed service, once after; dan: once; ann and bob: not again
    assert {s: (e.state, e.attempts) for s, e in entries.items()} == {
        "ann": (State.GRADED, 1), "bob": (State.GRADED, 1), "cat": (State.GRADED, 2), "dan": (State.GRADED, 1),
        "eve": (State.FLAGGED, 2)}, restarted["out"][-3000:]
    assert [re.findall(rf"graded {s}/multihead", restarted["out"]) for s in ("cat", "dan")] == \
        [["graded cat/multihead"], ["graded dan/multihead"]], restarted["out"][-3000:]
    for student in ("cat", "dan"):
        got = scores(course, "multihead", student)
        assert {k: got[k] for k in _expected(student)} == _expected(student)
        assert entries[student].result["total"] == [sum(got.values()), FULL]
    assert not (course / "submitted" / "eve").exists(), "eve's submission, not data, was collected"
    assert len(list((restarted["exchange"] / "tinygpt" / "feedback").iterdir())) == 4      # ann, bob, cat, dan


def test_status_names_the_flagged_submission_and_why(restarted):
    status = restarted["status"]
    assert status.returncode == 0, status.stderr[-2000:]
    out = status.stdout
    assert "4 graded, 1 flagged" in out, out
    flagged = out.split("FLAGGED", 1)[1]
    line = next(ln for ln in flagged.splitlines() if "eve/multihead" in ln)
    assert "not collected" in line and "notes.html is a symlink" in line, out
    assert re.search(rf"cat/multihead +{FULL:g}/{FULL:g} +\(feedback released\)", out), out


def test_a_submission_still_being_written_is_queued_once_it_is_whole(tmp_path):
    """`nbgrader submit` writes submission_secret.txt last: a scan in between leaves the folder
    for the next one (collected half-written, it would fail and spend an attempt); a link
    where a folder should be is queued, for collect to refuse with why."""
    from tinygpt_course.service.runner import GradingService
    inbound = tmp_path / "inbound"
    inbound.mkdir()
    service = GradingService(str(tmp_path), queue=Queue(str(tmp_path / QUEUE_FILE)))
    service.inbound, service.enabled = str(inbound), {"multihead"}
    stamp = "2026-12-04 21:00:00.000000 UTC"
    folder = inbound / f"ann+multihead+{stamp}"
    folder.mkdir()
    (folder / "multihead.ipynb").write_text("{}")
    (folder / "timestamp.txt").write_text(stamp)
    service.scan()
    assert service.queue.entries() == []
    (folder / "submission_secret.txt").write_text("0" * 128)
    (inbound / f"bob+multihead+{stamp}").symlink_to(folder)
    service.scan()
    assert sorted(e.student for e in service.queue.entries()) == ["ann", "bob"]


AGAIN = catalogue.answer("multihead", "06_plain_list")       # ann's second submission


@pytest.fixture(scope="module")
def harmful(restarted):
    """ann again, fay (an attack on the gradebook), gus (runaway memory), hal (right): `run
    --once --jobs 2`; then the class report."""
    base, course, exchange = restarted["base"], restarted["course"], restarted["exchange"]
    with open(course / "nbgrader_config.py", "a") as f:     # ann's second grading may come within a minute
        f.write("\nc.GradingService.per_minute = 10\n")
    before = {s: scores(course, "multihead", s) for s in ("bob", "cat", "dan")}
    first_ann = gradebook_submission(course, "ann")
    keys = {"ann": _submit(base, exchange, "ann", AGAIN)}
    keys.update({s: _submit(base, exchange, s) for s in ("fay", "gus", "hal")})
    code, out = _finish(_service(course, "run", "--once", "--jobs", "2"))
    assert code == 0, out[-4000:]
    report = subprocess.run([str(BIN / "tinygpt-class-report"), "multihead", "--quiet", "--course-dir", str(course)],
                            env=env(), capture_output=True, text=True, timeout=300)
    return {**restarted, "keys": keys, "out": out, "before": before, "first_ann": first_ann, "report": report}


def gradebook_submission(course, student):
    """The timestamp of `student`'s multihead submission in the gradebook (the one it keeps)."""
    from nbgrader.api import Gradebook
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        return gb.find_submission("multihead", student).timestamp


def test_harm_costs_only_the_harmful_learners_own_grades(harmful):
    course, entries = harmful["course"], service_entries(harmful["course"])
    for student in ("fay", "gus", "hal"):
        assert (entries[student].state, entries[student].attempts) == (State.GRADED, 1), harmful["out"][-3000:]
        got = scores(course, "multihead", student)
        assert {k: got[k] for k in _expected(student)} == _expected(student), student
    assert scores(course, "multihead", "hal") == points("multihead")          # beside the harm, full marks
    assert {s: scores(course, "multihead", s) for s in ("bob", "cat", "dan")} == harmful["before"], \
        "a learner's grades changed when another's submission was graded"


def test_a_newer_submission_replaces_the_grade_the_formgrader_shows(harmful):
    course = harmful["course"]
    with Queue(str(course / QUEUE_FILE)) as queue:
        ann = queue.entries(student="ann")
    assert [(e.state, e.key) for e in ann][-1] == (State.GRADED, harmful["keys"]["ann"])
    assert len([e for e in ann if e.state is State.GRADED]) == 2
    got = scores(course, "multihead", "ann")
    assert {k: got[k] for k in AGAIN.expect} == AGAIN.expect and got != points("multihead")
    newer = gradebook_submission(course, "ann")
    assert newer > harmful["first_ann"], "the gradebook keeps ann's first submission"


def test_the_class_report_is_built_from_what_the_service_graded(harmful):
    report = harmful["report"]
    assert report.returncode == 0, report.stderr[-3000:]
    course = harmful["course"]
    with open(course / "reports" / "multihead-learners.csv", newline="") as f:
        rows = {r["student"]: r for r in csv.DictReader(f)}
    assert set(rows) >= {"ann", "bob", "cat", "dan", "fay", "gus", "hal"}
    for student, row in rows.items():
        if student in ANSWERS and student != "eve":
            assert float(row["score"]) == sum(scores(course, "multihead", student).values()), student
    assert float(rows["ann"]["score"]) == sum(AGAIN.expect.values())
