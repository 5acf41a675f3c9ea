"""Tests of the tests: every answer in tests/catalogue/multihead/ graded by the real `nbgrader
autograde` with the course's configuration, in one class run, against its expected score per
check; the attacks among them stopped by the sandbox, and shown to work without it."""
import html
import os
import re
import sqlite3
import subprocess

import nbformat
import pytest

from tinygpt_course.testing import catalogue
from tinygpt_course.testing.catalogue import leftover_processes, settled, submit, trusted_state
from tinygpt_course.testing.course import BIN, env, make_course, nbgrader

CATALOGUE = catalogue.answers("multihead")
BY_NAME = {a.name: a for a in CATALOGUE}
TEST_CONFIG = "c.RobustExecute.timeout = 20\nc.IndependentChecks.timeout = 40\n"


def run_class(course, answers):
    for a in answers:
        submit(course, a.name, a.code, a.notebook)
    before = trusted_state(course)
    (course / "tmp").mkdir()
    # output to files, not pipes: without the sandbox a leftover process would hold a pipe open
    with open(course / "autograde.out", "w+") as out, open(course / "autograde.err", "w+") as err:
        code = subprocess.run([str(BIN / "nbgrader"), "autograde", "multihead", "--create"], cwd=course,
                              env={**env(), "TMPDIR": str(course / "tmp")}, stdout=out, stderr=err,
                              timeout=3600).returncode
    run = subprocess.CompletedProcess([], code, (course / "autograde.out").read_text(),
                                      (course / "autograde.err").read_text())
    leftovers = settled(lambda: leftover_processes(course))
    feedback = nbgrader(course, "generate_feedback", "multihead", check=False)
    return {"course": course, "run": run, "feedback": feedback, "leftovers": leftovers,
            "trusted_before": before, "trusted_after": trusted_state(course)}


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    return run_class(make_course(tmp_path_factory.mktemp("catalogue"), extra_config=TEST_CONFIG), CATALOGUE)


def test_catalogue_has_every_kind():
    sorts = {a.sort for a in CATALOGUE}
    assert {"right", "mistake", "crash", "tampering", "attack", "spoofed"} <= sorts, sorts
    right = {a.name for a in CATALOGUE if a.sort == "right"}
    assert {"01_right_comprehension", "02_right_loop_append", "03_right_concat_dim2", "04_right_proj_first",
            "05_right_stray_random"} <= right, right
    attacks = " ".join(a.name for a in CATALOGUE if a.sort == "attack")
    for what in ("gradebook_own", "gradebook_others", "detached_gradebook", "detached_sleeper", "rewrite_source",
                 "print_hidden", "replay_reference", "dirfd_source", "heap_search", "previous_reply",
                 "solution_in_error", "script_output"):
        assert what in attacks, what
    notebooks = {a.notebook for a in CATALOGUE if a.notebook}
    assert notebooks == {"invalid-json", "rename", "delete-tests", "duplicate-tests", "markdown-answer", "spoof"}


GRADED = [a for a in CATALOGUE if a.sort != "spoofed"]


def test_class_run_finishes(graded):
    course, run, feedback = graded["course"], graded["run"], graded["feedback"]
    failed = re.findall(r"There was an error processing assignment '\w+' for student '(\w+)'", run.stderr)
    # nbgrader exits 1 because it refused the spoofed submission, and for nothing else
    assert run.returncode == 1 and failed == ["41_spoofed_submission"], run.stderr[-3000:]
    assert feedback.returncode == 0, feedback.stderr[-3000:]
    assert catalogue.ungraded(course, GRADED) == []   # every learner has an autograded copy and feedback


@pytest.mark.parametrize("answer", CATALOGUE, ids=[a.name for a in CATALOGUE])
def test_expected_score(graded, answer):
    assert catalogue.scored(graded["course"], answer) == answer.expect, answer.why


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
        for a in CATALOGUE:
            if a.sort in ("tampering", "attack") and "right answer" not in a.why:
                sub = gb.find_submission("multihead", a.name)
                assert sub.score < sub.max_score, a.name
        flagged = gb.find_comment("multihead", "multihead", "multihead", "23_tamper_allclose")
        assert flagged.auto_comment and "FLAGGED" in flagged.auto_comment
        right = gb.find_comment("multihead", "multihead", "multihead", "01_right_comprehension")
        assert not (right.auto_comment or "").startswith("FLAGGED")


def test_feedback_never_shows_a_hidden_line(graded):
    assert catalogue.leaked_lines(graded["course"], GRADED) == {}


@pytest.mark.parametrize("student, diagnosis", [
    ("06_plain_list", "nn.ModuleList"), ("08_summed", "torch.cat(..., dim=-1)"),
    ("12_same_head_twice", "same head"), ("14_wrong_order", "wrong order"),
    ("20_endless_loop", "did not finish within"), ("42_endless_loop_top_level", "s limit"), ("21_os_exit", "kernel died"),
    ("23_tamper_allclose", "re-run on its own"), ("28_invalid_json", "could not be read")])
def test_feedback_names_the_mistake(graded, student, diagnosis):
    page = html.unescape((graded["course"] / "feedback" / student / "multihead" / "multihead.html").read_text())
    assert diagnosis in page


def test_a_learner_error_shows_neither_bulk_nor_the_solution(graded):
    """45 raises 200000 characters over 100 lines, after whatever definitions of MultiHead its
    process held: its feedback and its gradebook comment quote one capped line."""
    course, name = graded["course"], "45_attack_solution_in_error"
    page = catalogue.feedback_text(course, name)
    assert "MultiHead() failed" in page and "A" * 300 not in page
    from nbgrader.api import Gradebook
    with Gradebook(f"sqlite:///{course}/gradebook.db") as gb:
        comment = gb.find_comment("multihead", "multihead", "multihead", name).auto_comment or ""
    assert "A" * 300 not in comment


def test_learner_script_is_never_live_markup(graded):
    """46's displays reach the autograded notebook (what the formgrader shows) and the feedback
    as text, checked images or cleaned HTML only (tests/test_learner_markup.py opens them)."""
    course, name = graded["course"], "46_attack_script_output"
    nb = nbformat.read(course / "autograded" / name / "multihead" / "multihead.ipynb", as_version=4)
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            data = out.get("data", {})
            assert set(data) <= {"text/plain", "text/html", "image/png", "image/jpeg"}, set(data)
            assert "__tinygpt_probe" not in data.get("text/html", "") and "onerror" not in data.get("image/png", "")
    page = (course / "feedback" / name / "multihead" / "multihead.html").read_text()
    assert "__tinygpt_probe" in page                    # shown, as text
    assert not re.search(r"<[^>]*__tinygpt_probe", page), "in a tag: an attribute the browser runs"
    assert not re.search(r"<script[^>]*>[^<]*__tinygpt_probe", page), "in a script"


def test_nothing_learner_code_wrote_reaches_the_host(graded):
    """No symlink, FIFO, device, set-uid file or deep folder under autograded/, feedback/ or the
    grader's temp folder, and no file there larger than nbgrader's own (the 1 GiB file)."""
    course = graded["course"]
    assert catalogue.reached_the_host(course / "autograded", course / "feedback", course / "tmp") == []


def test_the_graders_log_is_intact(graded):
    """The kernel's fd 2 is a pipe the grader logs, each line marked with the student: the log
    is not truncated (the first learner's lines are there) and the forged line is marked."""
    err = graded["run"].stderr
    assert "01_right_comprehension" in err.split("64_attack_stderr")[0], err[:2000]
    forged = [ln for ln in err.splitlines() if "(forged)" in ln]
    assert forged and all("[kernel of 64_attack_stderr/multihead] " in ln and "\\r\\x1b" in ln for ln in forged), forged


def test_the_attacks_work_without_the_sandbox(tmp_path):
    """The defence is what stops them: with c.Sandbox.enabled = False the same answers reach the
    gradebook, the source notebook and outlive grading, stop nbgrader for the symlinks' learner and
    leave the interpreter's copy in autograded/. (64's fd 2, unsandboxed, truncates this very log,
    with the warnings checked here: tests/test_kernelfork.py shows it on its own.)"""
    course = make_course(tmp_path / "unsandboxed", extra_config=TEST_CONFIG + "c.Sandbox.enabled = False\n")
    attacks = [BY_NAME[n] for n in ("33_attack_gradebook_own", "36_attack_detached_sleeper", "37_attack_rewrite_source",
                                     "60_attack_symlinks", "62_attack_setuid_copy")]
    result = run_class(course, attacks)
    try:
        # the symlinks stop nbgrader for that learner; the interpreter's copy stays on the host
        # (set-uid while it was graded; nbgrader's set_permissions makes it 0444 afterwards)
        err = result["run"].stderr
        assert "error processing assignment 'multihead' for student '60_attack_symlinks'" in err, err[-2000:]
        assert list((course / "autograded").rglob("python-suid")), "the set-uid copy was not left"
        with sqlite3.connect(course / "gradebook.db") as db:   # the attacker's own grades, every one
            manual = db.execute("SELECT a.student_id, count(*) FROM grade g "
                                "JOIN submitted_notebook n ON g.notebook_id = n.id "
                                "JOIN submitted_assignment a ON n.assignment_id = a.id "
                                "WHERE g.manual_score IS NOT NULL GROUP BY a.student_id").fetchall()
        assert manual == [("33_attack_gradebook_own", len(BY_NAME["33_attack_gradebook_own"].expect))], manual
        assert any("sleep 2718281" in cmd for _, _, cmd in result["leftovers"])
        assert result["trusted_after"] != result["trusted_before"]
        assert "UNSANDBOXED" in result["run"].stderr
    finally:
        for pid, _, cmd in leftover_processes(course):
            if "sleep 2718281" in cmd:
                os.kill(int(pid), 9)


def test_the_class_report_counts_each_mistake(graded):
    """tinygpt-class-report on this very class (graded once, by the fixture): each plain answer
    is listed under exactly the mistakes the lesson's judge names for it run here as plain
    Python (its header's one, and what its other failed checks see), right answers under none,
    and each count is its learners; a crash, attack or tampering that loses points is listed
    under what the re-run named (a crash under one mistake); the spoofed submission is ungraded,
    with CheckOwner's reason; the tampering ones are flagged."""
    from tinygpt_course.report import write_report
    from tinygpt_course.testing import report
    page = open(write_report(graded["course"], "multihead", progress=False), encoding="utf-8").read()
    who, counts = report.listed(page)
    assert counts == {m: len(learners) for m, learners in who.items()}
    got = report.by_learner(who)
    wants = {a.name: report.expected_mistakes(a) for a in GRADED}
    unnamed = [name for name, want in wants.items() if want is None]
    for a in GRADED:
        if wants[a.name] is None:
            assert got.get(a.name), f"{a.name} lost points but is listed under no mistake"
            assert a.sort != "crash" or len(got[a.name]) == 1, (a.name, got[a.name])
        else:
            assert got.get(a.name, set()) == wants[a.name], (a.name, a.why)
    named = set(counts) | {m for want in wants.values() for m in want or ()}
    assert {m: counts.get(m, 0) for m in named} == {   # each mistake: its learners, exactly
        m: sum(m in (got.get(name, set()) if want is None else want) for name, want in wants.items()) for m in named}
    print(f"class report: {len(counts)} mistakes, {sum(counts.values())} learner-mistakes; named by the re-run "
          f"only: {({name: sorted(got[name]) for name in unnamed})}")
    problems = report.section(page, "Flagged and ungraded submissions")
    assert re.search(r"<code>41_spoofed_submission</code>.*?ungraded.*?belongs to uid 4242", problems, re.S)
    assert re.search(r"<code>23_tamper_allclose</code>.*?flagged.*?FLAGGED", problems, re.S)
