"""tinygpt-grade-class grades a class as sequential `nbgrader autograde` does, in parallel.

Real nbgrader on a throw-away copy of the course with a small class: a right answer, a wrong
one (plain list: partial credit), a notebook that is not JSON (the course's repair hook grades
the released notebook in its place), and one whose answer cell's nbgrader metadata is damaged
(nbgrader reports an error for it and goes on with the others), and the right answer with a test
cell edited and another deleted (graded in full, and named in the integrity summary).
"""
import multiprocessing
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from nbgrader.api import Gradebook

from tinygpt_course.classroom.lock import install_gradebook_lock
from tinygpt_course.grading.integrity import KINDS
from tinygpt_course.testing import submissions as subs

ROSTER = {"ann": "right", "bob": "plainlist", "cat": "notjson", "abe": "badmeta", "dee": "tampered"}
GRADED = ["ann", "bob", "cat", "dee"]     # abe (graded first) handed in one nbgrader cannot grade
FULL_MARKS = 7


def grade_class(course, *args):
    return subprocess.run([sys.executable, "-m", "tinygpt_course.classroom", "multihead",
                           "--no-progress", "--course-dir", str(course), "--logs", f"{course}-logs", *args],
                          capture_output=True, text=True, env=subs.env(), timeout=600)


def notebook_mtimes(course):
    return {p.parts[-3]: p.stat().st_mtime_ns for p in Path(course, "autograded").glob("*/multihead/*.ipynb")}


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    """The same class graded by stock `nbgrader autograde` and by tinygpt-grade-class (at once)."""
    root = tmp_path_factory.mktemp("classroom")
    base = subs.make_course(root / "base")
    for student, kind in ROSTER.items():
        subs.submit(base, student, kind)
    stock, fast = root / "stock", root / "fast"
    shutil.copytree(base, stock)
    shutil.copytree(base, fast)
    env = subs.env()
    with open(root / "stock.log", "w") as log_stock, open(root / "fast.log", "w") as log_fast:
        p_stock = subprocess.Popen([sys.executable, "-m", "nbgrader", "autograde", "multihead", "--create"],
                                   cwd=stock, env=env, stdout=log_stock, stderr=subprocess.STDOUT)
        p_fast = subprocess.Popen([sys.executable, "-m", "tinygpt_course.classroom", "multihead",
                                   "--jobs", "3", "--no-progress", "--course-dir", str(fast),
                                   "--logs", str(root / "fast-logs")],
                                  env=env, stdout=log_fast, stderr=subprocess.STDOUT)
        rc_fast, rc_stock = p_fast.wait(timeout=600), p_stock.wait(timeout=600)
    return {"root": root, "stock": stock, "fast": fast, "rc_stock": rc_stock, "rc_fast": rc_fast,
            "out_stock": (root / "stock.log").read_text(), "out_fast": (root / "fast.log").read_text()}


def copy_of(graded, name):
    dest = graded["root"] / name
    shutil.copytree(graded["fast"], dest)      # copy2 keeps the files' times
    return dest


def test_scores_and_notebooks_equal_sequential_nbgrader(graded):
    stock = subs.gradebook_scores(graded["stock"])
    fast = subs.gradebook_scores(graded["fast"])
    assert stock, "stock nbgrader graded nothing:\n" + graded["out_stock"][-3000:]
    # a real grading happened: the right answer has full marks, the plain list lost points
    totals = subs.totals(stock)
    assert totals["ann"] == FULL_MARKS and 0 < totals["bob"] < FULL_MARKS, totals
    assert fast == stock, "per-cell gradebook scores differ from sequential nbgrader autograde"
    nb_stock, nb_fast = subs.autograded_notebooks(graded["stock"]), subs.autograded_notebooks(graded["fast"])
    assert nb_fast == nb_stock, "autograded notebooks differ from sequential nbgrader autograde " \
        "(stock vs tinygpt-grade-class):\n" + "\n".join(subs.differences(nb_stock, nb_fast))


def test_broken_submission_does_not_stop_the_others(graded):
    # like nbgrader, the command says the run had an error, and names the submission
    assert graded["rc_stock"] == 1 and graded["rc_fast"] == 1, graded["out_fast"][-3000:]
    assert subs.failed_students(graded["out_fast"]) == ["abe"], graded["out_fast"][-3000:]
    assert sorted(notebook_mtimes(graded["fast"])) == GRADED, graded["out_fast"][-3000:]
    totals = subs.totals(subs.gradebook_scores(graded["fast"]))
    assert totals["ann"] == FULL_MARKS, totals


def test_second_run_skips_graded_and_regrades_a_resubmission(graded):
    course = copy_of(graded, "rerun")
    before = notebook_mtimes(course)
    # bob hands in again, this time the right answer: his submission is newer than his grading
    shutil.rmtree(course / "submitted" / "bob")
    subs.submit(course, "bob", "right")
    run = grade_class(course)
    after = notebook_mtimes(course)
    for student in ["ann", "cat", "dee"]:
        assert after[student] == before[student], f"{student} was graded again:\n{run.stderr[-3000:]}"
    assert after["bob"] != before["bob"], "a newer submission was not regraded"
    assert subs.totals(subs.gradebook_scores(course))["bob"] == FULL_MARKS
    assert "skipped 3" in run.stderr, run.stderr[-3000:]
    assert "abe" not in after, "the broken submission left an autograded notebook"


def test_force_regrades_everything(graded):
    course = copy_of(graded, "force")
    for student in ["abe", "bob", "cat", "dee"]:      # a class of one keeps the test fast
        shutil.rmtree(course / "submitted" / student)
    before, scores = notebook_mtimes(course), subs.gradebook_scores(course)
    run = grade_class(course, "--force")
    assert run.returncode == 0 and "graded 1, skipped 0" in run.stderr, run.stderr[-3000:]
    assert notebook_mtimes(course)["ann"] != before["ann"], f"--force did not regrade ann:\n{run.stderr[-3000:]}"
    assert subs.gradebook_scores(course) == scores


def _hold_gradebook(db_url, holding, release):
    install_gradebook_lock()
    with Gradebook(db_url, "tinygpt"):
        holding.set()
        release.wait(60)


def _open_gradebook(db_url, entered):
    install_gradebook_lock()
    with Gradebook(db_url, "tinygpt"):
        entered.set()


def test_workers_take_turns_on_the_gradebook(graded):
    """While one worker has the gradebook open, another cannot open it: no 'database is locked'."""
    db_url = f"sqlite:///{graded['fast'] / 'gradebook.db'}"
    ctx = multiprocessing.get_context("fork")
    holding, release, entered = ctx.Event(), ctx.Event(), ctx.Event()
    holder = ctx.Process(target=_hold_gradebook, args=(db_url, holding, release))
    holder.start()
    try:
        assert holding.wait(60), "the first worker never opened the gradebook"
        other = ctx.Process(target=_open_gradebook, args=(db_url, entered))
        other.start()
        assert not entered.wait(2), "a second worker opened the gradebook while the first had it open"
        release.set()
        assert entered.wait(60), "the second worker never got the gradebook after the first closed it"
        other.join(60)
    finally:
        release.set()
        holder.join(60)


def test_the_summary_names_what_grading_put_back(graded):
    """tinygpt-grade-class ends with one line per learner whose notebook was tampered with or
    was not JSON, decided on the autograded notebooks' data; the untouched ones are not named."""
    out = graded["out_fast"]
    lines = [ln.strip() for ln in out.split("tinygpt-grade-class: integrity", 1)[-1].splitlines()[1:]
             if ln.startswith("  ")]
    dee = [ln for ln in lines if ln.startswith("dee: ")]
    assert dee == [f"dee: cell deleted: {subs.TAMPERED['deleted']}; cell changed: {subs.TAMPERED['changed']}"], out
    assert [ln for ln in lines if ln.startswith("cat: ")] == ["cat: not valid JSON: the release graded in its place"], out
    assert not [ln for ln in lines if ln.startswith(("ann:", "bob:"))], out
    with Gradebook(f"sqlite:///{graded['fast']}/gradebook.db") as gb:     # put back: full marks
        assert gb.find_submission("multihead", "dee").score == FULL_MARKS
        comment = gb.find_comment("multihead", "multihead", "multihead", "dee").auto_comment or ""
        for kind, cell in (("cell_changed", subs.TAMPERED["changed"]), ("cell_deleted", subs.TAMPERED["deleted"])):
            assert f"{KINDS[kind]}: {cell}" in comment and "INTEGRITY: " in comment, comment   # plain text
        assert "INTEGRITY" not in (gb.find_comment("multihead", "multihead", "multihead", "ann").auto_comment or "")


def test_the_class_report_flags_the_tampered_notebook(graded, tmp_path):
    """The class report's flagged table says the same, as the page's text (escaped HTML)."""
    from tinygpt_course.grading.integrity import KINDS
    page = tmp_path / "report.html"
    run = subprocess.run([str(Path(sys.executable).parent / "tinygpt-class-report"), "multihead", "--course-dir",
                          str(graded["fast"]), "-o", str(page), "--quiet"], capture_output=True, text=True,
                         env=subs.env(), timeout=600)
    assert run.returncode == 0, run.stderr
    html = page.read_text()
    flagged = html.split("<h2>Flagged and ungraded submissions</h2>", 1)[1].split("<h2>", 1)[0]
    row = flagged[flagged.index("<code>dee</code>"):].split("</tr>", 1)[0]
    assert f"{KINDS['cell_changed']}: {subs.TAMPERED['changed']}" in row, row
    assert f"{KINDS['cell_deleted']}: {subs.TAMPERED['deleted']}" in row, row
    assert "<code>ann</code>" not in html.split("Flagged and ungraded", 1)[1].split("<h2>", 1)[0]


def test_without_the_notes_the_tampering_goes_unseen(graded, tmp_path):
    """The defence off: the same learner graded with the two Note steps taken out of the
    course's config is not named."""
    course = tmp_path / "course"
    shutil.copytree(graded["fast"], course)
    for student in ["abe", "ann", "bob", "cat"]:      # dee alone keeps the test fast
        shutil.rmtree(course / "submitted" / student)
    config = course / "nbgrader_config.py"
    config.write_text(config.read_text().replace("NoteDeletedCells, RestoreDeletedCells()", "RestoreDeletedCells()")
                      .replace("RestoreHiddenTests, NoteChangedCells,", "RestoreHiddenTests,"))
    run = grade_class(course, "--force")
    assert run.returncode == 0 and "graded 1" in run.stderr, run.stderr
    assert "dee: cell" not in run.stderr, run.stderr


def test_feedback_runs_without_a_config_warning_and_fetches_nothing(graded, tmp_path):
    """generate_feedback reads the course's steps with no "not recognized" warning (issue 19:
    nbgrader's base class left display_data_priority unconfigurable; grading.feedback.FeedbackStep),
    and its page loads no script, style or picture from another host (no MathJax from a CDN)."""
    course = tmp_path / "course"
    shutil.copytree(graded["fast"], course)
    run = subprocess.run([sys.executable, "-m", "nbgrader", "generate_feedback", "multihead", "--student", "ann"],
                         cwd=course, env=subs.env(), capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr
    assert "not recognized" not in run.stdout + run.stderr, run.stderr
    page = (course / "feedback" / "ann" / "multihead" / "multihead.html").read_text()
    import re
    assert re.findall(r"<(?:script|link|img)[^>]*(?:src|href)=[\"'](?:https?:)?//", page) == [], \
        "the feedback page fetches something from outside the machine"
    from tinygpt_course.grading.feedback import WrapLongLines
    assert WrapLongLines.css.default_value in page          # a long message wraps, not off the edge
