"""Submissions are who they say: the ownership check, and nbgrader collect with and without it.

The "students" are two system users every Debian has (daemon, bin), so real Unix ownership is
checked without creating users. Needs root (to chown), like CI.
"""
import os
import pwd
import shutil
import subprocess

import nbformat
import pytest

from tinygpt_course.grading.owner import submission_problem
from tinygpt_course.testing.course import BIN, env, make_course, nbgrader, scores, submit
from tinygpt_course.testing.notebooks import with_answer

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="chown needs root")
ALICE, BOB = "daemon", "bin"


def chown_tree(path, user):
    uid = pwd.getpwnam(user).pw_uid
    for d, dirs, files in os.walk(path):
        for name in [d] + [os.path.join(d, f) for f in files]:
            os.chown(name, uid, uid)


def test_submission_problem(tmp_path):
    folder = tmp_path / "submitted" / ALICE / "multihead"
    folder.mkdir(parents=True)
    (folder / "multihead.ipynb").write_text("{}")
    assert submission_problem(folder, ALICE) is None              # the grader's own copy
    chown_tree(folder, ALICE)
    assert submission_problem(folder, ALICE) is None              # alice's own files
    chown_tree(folder, BOB)
    problem = submission_problem(folder, ALICE)
    assert problem.kind == "owner" and f"belongs to {BOB}, not to {ALICE}" in str(problem)


def inbound(exchange, student, stamp, owner, marker):
    folder = exchange / "tinygpt" / "inbound" / f"{student}+multihead+{stamp}+{marker}"
    folder.mkdir(parents=True)
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell(marker)])
    nbformat.write(nb, folder / "multihead.ipynb")
    (folder / "timestamp.txt").write_text(stamp)
    chown_tree(folder, owner)


@pytest.mark.parametrize("checked", [True, False], ids=["CheckedCollect", "stock collect"])
def test_collect_keeps_the_real_submission(tmp_path, checked):
    exchange = tmp_path / "exchange"
    extra = f"c.Exchange.root = {str(exchange)!r}\n"
    if not checked:
        extra += "c.ExchangeFactory.collect = 'nbgrader.exchange.default.collect.ExchangeCollect'\n"
    course = make_course(tmp_path / "course", extra_config=extra)
    inbound(exchange, ALICE, "2026-11-30 10:00:00.000000 UTC", ALICE, "real")
    nbgrader(course, "collect", "multihead")
    inbound(exchange, ALICE, "2026-11-30 11:00:00.000000 UTC", BOB, "spoof")   # bob: submit --student=alice
    run = nbgrader(course, "collect", "--update", "multihead")
    got = nbformat.read(course / "submitted" / ALICE / "multihead" / "multihead.ipynb", as_version=4)
    assert got.cells[0].source == ("real" if checked else "spoof")
    if checked:
        assert f"belongs to {BOB}, not to {ALICE}" in run.stderr
    shutil.rmtree(exchange)


def test_grade_class_reports_and_sets_aside_a_spoofed_submission(tmp_path):
    course = make_course(tmp_path / "course", extra_config="c.RobustExecute.timeout = 20\n")
    release = course / "release" / "multihead" / "multihead.ipynb"
    for student in (ALICE, BOB):
        submit(course, student, "multihead", with_answer(release, "class MultiHead(nn.Module):\n    pass"))
    chown_tree(course / "submitted" / ALICE, BOB)          # bob's files under alice's name
    proc = subprocess.run([str(BIN / "tinygpt-grade-class"), "multihead", "--no-progress"], cwd=course,
                          env=env(), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert f"FLAGGED, not graded: {ALICE}: multihead belongs to {BOB}, not to {ALICE}" in proc.stderr
    assert "flagged 1" in proc.stderr
    assert not (course / "autograded" / ALICE).exists()
    assert (course / "submitted" / ALICE / "multihead" / "multihead.ipynb").exists()     # kept aside
    assert sum(scores(course, "multihead", BOB).values()) == 0
