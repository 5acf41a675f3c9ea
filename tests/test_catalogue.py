"""Tests of the tests: every answer in tests/catalogue/ graded by the real `nbgrader autograde`
with the course's configuration, in one class run, against its expected score per check."""
import hashlib
import html
import json
import os
import re
import sqlite3
import subprocess
from pathlib import Path

import nbformat
import pytest

from conftest import BIN, grade_id, make_course, nbgrader, run_env, scores, with_answer

CATALOGUE = sorted((Path(__file__).parent / "catalogue").glob("*.py"))
TEST_CONFIG = "c.RobustExecute.timeout = 20\nc.IndependentChecks.timeout = 40\n"


def parse(path):
    text = path.read_text()
    head = dict(re.findall(r"^# (expect|why|notebook): (.*)$", text, re.M))
    expect = {k: float(v) for k, v in (kv.split("=") for kv in head["expect"].split())}
    answer = "\n".join(ln for ln in text.splitlines() if not re.match(r"# (expect|why|notebook):", ln))
    return expect, head["why"], head.get("notebook"), answer.strip("\n")


SPOOFER_UID = 4242   # not the grader, not a user named like any student


def submit(course, student, answer, transform):
    folder = course / "submitted" / student / "multihead"
    folder.mkdir(parents=True)
    if transform == "spoof":      # the right files, made by somebody else
        nbformat.write(with_answer(course / "release" / "multihead" / "multihead.ipynb", answer),
                       folder / "multihead.ipynb")
        for path in (folder, folder / "multihead.ipynb"):
            os.chown(path, SPOOFER_UID, SPOOFER_UID)
        return
    nb = with_answer(course / "release" / "multihead" / "multihead.ipynb", answer)
    tests = [c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade") and grade_id(c) != "multihead"]
    name = "multihead.ipynb"
    if transform == "invalid-json":
        (folder / name).write_text(nbformat.writes(nb)[:-200])
        return
    if transform == "rename":
        name = "multihead-mine.ipynb"
    elif transform == "delete-tests":
        nb.cells = [c for c in nb.cells if c not in tests]
    elif transform == "duplicate-tests":
        nb.cells = nb.cells + [nbformat.from_dict(json.loads(json.dumps(c))) for c in tests]
    elif transform == "markdown-answer":
        cell = next(c for c in nb.cells if grade_id(c) == "multihead")
        cell.cell_type = "markdown"
        cell.pop("outputs"), cell.pop("execution_count")
    else:
        assert transform is None, f"unknown notebook transform {transform}"
    nbformat.write(nb, folder / name)


def kind(path):
    return parse(path)[1].split(":")[0]


def trusted_state(course):
    """Every trusted file's inode, times and content: a rewrite with the same bytes shows too."""
    paths = sorted((course / "source").rglob("*")) + [course / "nbgrader_config.py"]
    return {str(p): (p.stat().st_ino, p.stat().st_mtime_ns, p.stat().st_ctime_ns,
                     hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else None) for p in paths}


def leftover_processes(course):
    """Processes still running whose working folder is in the course, or the attack's sleeper."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cwd = os.readlink(f"/proc/{pid}/cwd")
            cmd = open(f"/proc/{pid}/cmdline", "rb").read().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if cwd.startswith(str(course)) or "sleep 2718281" in cmd:
            found.append((pid, cwd, cmd))
    return found


def run_class(course, paths):
    for path in paths:
        _, _, transform, answer = parse(path)
        submit(course, path.stem, answer, transform)
    before = trusted_state(course)
    # output to files, not pipes: without the sandbox a leftover process would hold a pipe open
    with open(course / "autograde.out", "w+") as out, open(course / "autograde.err", "w+") as err:
        code = subprocess.run([str(BIN / "nbgrader"), "autograde", "multihead", "--create"], cwd=course,
                              env=run_env(), stdout=out, stderr=err, timeout=3600).returncode
    run = subprocess.CompletedProcess([], code, (course / "autograde.out").read_text(),
                                      (course / "autograde.err").read_text())
    leftovers = leftover_processes(course)
    feedback = nbgrader(course, "generate_feedback", "multihead", check=False)
    return {"course": course, "run": run, "feedback": feedback, "leftovers": leftovers,
            "trusted_before": before, "trusted_after": trusted_state(course)}


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    return run_class(make_course(tmp_path_factory.mktemp("catalogue"), extra_config=TEST_CONFIG), CATALOGUE)


def test_catalogue_has_every_kind():
    kinds = {kind(p) for p in CATALOGUE}
    assert {"tampering", "attack", "spoofed"} <= kinds, kinds
    assert sum("_right_" in p.stem for p in CATALOGUE) >= 5
    attacks = " ".join(p.stem for p in CATALOGUE if kind(p) == "attack")
    for what in ("gradebook_own", "gradebook_others", "detached_gradebook", "detached_sleeper", "rewrite_source",
                 "print_hidden", "replay_reference", "dirfd_source"):
        assert what in attacks, what


GRADED = [p for p in CATALOGUE if kind(p) != "spoofed"]


def test_class_run_finishes(graded):
    course, run, feedback = graded["course"], graded["run"], graded["feedback"]
    failed = re.findall(r"There was an error processing assignment '\w+' for student '(\w+)'", run.stderr)
    # nbgrader exits 1 because it refused the spoofed submission, and for nothing else
    assert run.returncode == 1 and failed == ["41_spoofed_submission"], run.stderr[-3000:]
    assert feedback.returncode == 0, feedback.stderr[-3000:]
    for path in GRADED:   # every learner has an autograded copy and feedback
        assert (course / "autograded" / path.stem / "multihead" / "multihead.ipynb").exists(), path.stem
        assert (course / "feedback" / path.stem / "multihead" / "multihead.html").exists(), path.stem


@pytest.mark.parametrize("path", CATALOGUE, ids=[p.stem for p in CATALOGUE])
def test_expected_score(graded, path):
    expect, why, _, _ = parse(path)
    got = scores(graded["course"], "multihead", path.stem)
    assert {k: got.get(k, 0.0) or 0.0 for k in expect} == expect, why


def test_spoofed_submission_is_not_graded(graded):
    course = graded["course"]
    assert not (course / "autograded" / "41_spoofed_submission" / "multihead" / "multihead.ipynb").exists()
    assert "belongs to uid 4242, not to 41_spoofed_submission" in graded["run"].stderr


def test_attacks_leave_the_trusted_files_untouched(graded):
    assert graded["trusted_after"] == graded["trusted_before"]


def test_attacks_leave_no_manual_score_and_no_process(graded):
    with sqlite3.connect(graded["course"] / "gradebook.db") as db:
        assert db.execute("SELECT count(*) FROM grade WHERE manual_score IS NOT NULL").fetchone()[0] == 0
    assert graded["leftovers"] == []


def test_tampering_scores_below_full_and_is_flagged(graded):
    from nbgrader.api import Gradebook
    course = graded["course"]
    with Gradebook(f"sqlite:///{course}/gradebook.db") as gb:
        for path in CATALOGUE:
            if kind(path) in ("tampering", "attack") and "right answer" not in parse(path)[1]:
                sub = gb.find_submission("multihead", path.stem)
                assert sub.score < sub.max_score, path.stem
        flagged = gb.find_comment("multihead", "multihead", "multihead", "23_tamper_allclose")
        assert flagged.auto_comment and "FLAGGED" in flagged.auto_comment
        right = gb.find_comment("multihead", "multihead", "multihead", "01_right_comprehension")
        assert not (right.auto_comment or "").startswith("FLAGGED")


def hidden_lines():
    src = nbformat.read(Path(__file__).parents[1] / "source/multihead/multihead.ipynb", as_version=4)
    lines = set()
    for cell in src.cells:
        for block in re.findall(r"### BEGIN HIDDEN TESTS\n(.*?)### END HIDDEN TESTS", cell.source, re.S):
            lines |= {ln.strip() for ln in block.splitlines() if ln.strip()}
    assert lines
    return lines


def solution_lines():
    src = nbformat.read(Path(__file__).parents[1] / "source/multihead/multihead.ipynb", as_version=4)
    cell = next(c for c in src.cells if c.metadata.get("nbgrader", {}).get("solution"))
    block = re.search(r"### BEGIN SOLUTION\n(.*?)### END SOLUTION", cell.source, re.S).group(1)
    return {ln.strip() for ln in block.splitlines() if ln.strip()}


def test_feedback_never_shows_a_hidden_line(graded):
    course = graded["course"]
    for path in GRADED:
        own = parse(path)[3]   # the learner's own code may hold lines like the solution's
        lines = hidden_lines() | {ln for ln in solution_lines() if ln not in own}
        page = html.unescape(re.sub(r"<[^>]+>", "", (course / "feedback" / path.stem / "multihead" / "multihead.html").read_text()))
        leaked = [ln for ln in lines if ln in page]
        assert not leaked, (path.stem, leaked)
        assert "BEGIN HIDDEN TESTS" not in page


@pytest.mark.parametrize("student, diagnosis", [
    ("06_plain_list", "nn.ModuleList"), ("08_summed", "torch.cat(..., dim=-1)"),
    ("12_same_head_twice", "same head"), ("14_wrong_order", "wrong order"),
    ("20_endless_loop", "did not finish within"), ("42_endless_loop_top_level", "s limit"), ("21_os_exit", "kernel died"),
    ("23_tamper_allclose", "re-run on its own"), ("28_invalid_json", "could not be read")])
def test_feedback_names_the_mistake(graded, student, diagnosis):
    page = html.unescape((graded["course"] / "feedback" / student / "multihead" / "multihead.html").read_text())
    assert diagnosis in page


def test_the_attacks_work_without_the_sandbox(tmp_path):
    """The defence is what stops them: with c.Sandbox.enabled = False the same answers reach the
    gradebook, the source notebook and outlive grading."""
    course = make_course(tmp_path / "unsandboxed", extra_config=TEST_CONFIG + "c.Sandbox.enabled = False\n")
    attacks = [p for p in CATALOGUE if p.stem.split("_", 1)[1] in
               ("attack_gradebook_own", "attack_detached_sleeper", "attack_rewrite_source")]
    result = run_class(course, attacks)
    try:
        with sqlite3.connect(course / "gradebook.db") as db:
            assert db.execute("SELECT count(*) FROM grade WHERE manual_score IS NOT NULL").fetchone()[0] > 0
        assert any("sleep 2718281" in cmd for _, _, cmd in result["leftovers"])
        assert result["trusted_after"] != result["trusted_before"]
        assert "UNSANDBOXED" in result["run"].stderr
    finally:
        for pid, _, cmd in leftover_processes(course):
            if "sleep 2718281" in cmd:
                os.kill(int(pid), 9)
