"""The exchange takes data, not paths (issue 17, item 8), through the real nbgrader exchange with
real student accounts: each student fetches and submits with their own `nbgrader`, then tampers
with their own inbound submission as they can (they own it; its name is in submit's output):
the notebook replaced by a symlink to the teacher's source notebook and `notes.html` -> the
gradebook; a FIFO; an 1100-deep folder chain. The teacher (root, as CI grades) collects, grades,
generates and releases feedback with the course's config. Needs root (useradd)."""
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import nbformat
import pytest

from tinygpt_course.testing import hub as hh
from tinygpt_course.testing.course import load_script, BIN, make_course, nbgrader, scores
from tinygpt_course.testing.notebooks import points, solution, with_answer

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("useradd"),
                                reason="makes Unix users (useradd): needs root")
HONEST, LINK, FIFO, DEEP = "tgxhonest", "tgxlink", "tgxfifo", "tgxdeep"
STUDENTS = (HONEST, LINK, FIFO, DEEP)
SQLITE = b"SQLite format 3"


def _as(student, *args, check=True):
    return hh.run_as(student, [str(BIN / "nbgrader"), *args], {"PATH": f"{BIN}:/usr/bin:/bin"}, check=check)


def _submit(student):
    """`nbgrader submit` as the student; the inbound folder it made (its name is in submit's log)."""
    r = _as(student, "submit", "multihead")
    return Path(re.search(r"Destination: (.+)", r.stderr + r.stdout)[1].strip())


def _shell(student, script):
    hh.run_as(student, ["sh", "-c", script], {"PATH": "/usr/bin:/bin"})


DEEP_CHAIN = ("import os, sys\nfd = os.open(sys.argv[1], os.O_RDONLY)\nfor _ in range(1100):\n"
              "    os.mkdir('a', dir_fd=fd); n = os.open('a', os.O_RDONLY, dir_fd=fd); os.close(fd); fd = n\n")


def _files(*roots):
    return [p for root in roots if root.exists() for p in root.rglob("*") if p.is_file() and not p.is_symlink()]


def _teachers(path):
    """What of the teacher's a file holds: the gradebook's bytes, or a line of the solution (in a
    feedback page too, whose highlighting splits a line into tags)."""
    import html
    data = path.read_bytes()
    text = html.unescape(re.sub(r"<[^>]+>", "", data.decode(errors="replace")))
    return (["the gradebook"] if SQLITE in data else []) + [s for s in hh.solution_lines() if s in text]


@pytest.fixture(scope="module")
def classroom():
    """A course (the teacher's, 0700), its exchange (hub/exchange_setup.py) and four students
    who submitted: the honest one the right answer, the others the release, then tampered."""
    closed = hh.closed_to_others(BIN)
    if closed is not None:
        pytest.fail(f"the student accounts cannot run {BIN}/nbgrader: {closed} is closed to other users "
                    f"(mode {closed.stat().st_mode & 0o777:o}); clone the checkout where other users may enter")
    base = Path(tempfile.mkdtemp(prefix="tinygpt-exchange-", dir="/var/tmp"))
    base.chmod(0o755)
    exchange = base / "exchange"
    try:
        setup = load_script(Path(__file__).parents[1] / "hub" / "exchange_setup.py", "exchange_setup")
        setup.prepare(str(exchange), {"tinygpt": (0, 0)}, log=lambda msg: None)
        course = make_course(base / "course", extra_config=f"c.Exchange.root = {str(exchange)!r}\n"
                                                           "c.RobustExecute.timeout = 30\n")
        course.chmod(0o700)
        nbgrader(course, "release_assignment", "multihead")
        inbound = {}
        for student in STUDENTS:
            hh.add_user(student)
            home = hh.home(student)
            (home / "nbgrader_config.py").write_text(f"c = get_config()\nc.Exchange.root = {str(exchange)!r}\n"
                                                     "c.CourseDirectory.course_id = 'tinygpt'\n")
            _as(student, "fetch_assignment", "multihead")
            if student == HONEST:
                nb = home / "multihead" / "multihead.ipynb"
                nbformat.write(with_answer(nb, solution("multihead")), nb)
                os.chown(nb, hh.uid(student), hh.uid(student))
            if student == FIFO:                   # an earlier, plain submission: collected instead
                inbound["fifo-first"] = _submit(student)
            inbound[student] = _submit(student)
        sub = inbound[LINK]
        _shell(LINK, f"ln -sf '{course}/source/multihead/multihead.ipynb' '{sub}/multihead.ipynb' && "
                     f"ln -s '{course}/gradebook.db' '{sub}/notes.html'")
        _shell(FIFO, f"mkfifo '{inbound[FIFO]}/pipe'")
        hh.run_as(DEEP, ["python3", "-c", DEEP_CHAIN, str(inbound[DEEP])], {"PATH": "/usr/bin:/bin"})
        collect = nbgrader(course, "collect", "multihead", check=False)
        yield course, exchange, inbound, collect
    finally:
        for student in STUDENTS:
            hh.remove_user(student)
        subprocess.run(["rm", "-rf", str(base)])        # the 1100-deep chain: shutil.rmtree recurses


def test_collect_refuses_what_is_not_data_and_collects_the_class(classroom):
    course, exchange, inbound, collect = classroom
    assert collect.returncode == 0, collect.stderr[-3000:]
    lines = collect.stderr.splitlines()
    for student, thing in ((LINK, "multihead.ipynb is a symlink"), (FIFO, "pipe is a FIFO"),
                           (DEEP, "/a/a/a/a/a/a/a/a/a/a/a is 11 folders deep")):
        assert any(f"not collected: {student}+multihead+" in ln and thing in ln for ln in lines), \
            f"no refusal naming {student} and {thing!r}:\n{collect.stderr[-3000:]}"
    submitted = course / "submitted"
    assert sorted(p.name for p in submitted.iterdir()) == [FIFO, HONEST]
    got = (submitted / FIFO / "multihead" / "timestamp.txt").read_text()
    assert got == (inbound["fifo-first"] / "timestamp.txt").read_text(), "not the FIFO student's earlier submission"
    assert not [p for p in submitted.rglob("*") if p.is_symlink() or not (p.is_file() or p.is_dir())]
    assert all(os.path.exists(p) for p in inbound.values()), "a refused submission was removed from inbound"


def test_the_class_is_graded_and_no_teacher_file_reaches_a_learner(classroom):
    course, exchange, inbound, collect = classroom
    nbgrader(course, "autograde", "multihead")
    assert sum(scores(course, "multihead", HONEST).values()) == sum(points("multihead").values())
    assert sum(scores(course, "multihead", FIFO).values()) == 0
    nbgrader(course, "generate_feedback", "multihead")
    # a copy of the gradebook and a link to it among the feedback, as a collect that followed
    # links would have left them: release_feedback publishes the notebook's feedback alone
    fb = course / "feedback" / HONEST / "multihead"
    shutil.copy(course / "gradebook.db", fb / "notes.html")
    os.symlink(course / "gradebook.db", fb / "link.html")
    nbgrader(course, "release_feedback", "multihead")
    released = sorted(p.read_bytes() for p in (exchange / "tinygpt" / "feedback").iterdir())
    pages = sorted((course / "feedback" / s / "multihead" / "multihead.html").read_bytes() for s in (HONEST, FIFO))
    assert released == pages, "released feedback is not the two graded students' multihead.html"
    assert sorted(p.name for p in (course / "feedback").iterdir()) == [FIFO, HONEST]
    # nothing of the teacher's in what a learner gets (the honest answer is the solution: theirs)
    honest_page = (fb / "multihead.html").read_bytes()
    for path in _files(course / "feedback" / FIFO, exchange / "tinygpt" / "feedback"):
        if path.read_bytes() != honest_page:
            assert not _teachers(path), f"{path} holds {_teachers(path)[:2]}"
    r = _as(LINK, "fetch_feedback", "multihead", check=False)
    assert not list(hh.home(LINK).glob("multihead/feedback/*/*")), r.stderr[-2000:]


def test_submitted_folders_that_are_not_data_are_flagged_and_the_class_graded(tmp_path):
    """submitted/ as an LMS zip unpacked there leaves it (files of the grader): tinygpt-grade-class
    flags each student whose folder is not data and grades the class; plain `nbgrader autograde`
    moves such a folder aside before nbgrader walks it."""
    from tinygpt_course.testing.course import env, submit
    course = make_course(tmp_path / "course", extra_config="c.RobustExecute.timeout = 30\n")
    release = course / "release" / "multihead" / "multihead.ipynb"
    submit(course, "honest", "multihead", with_answer(release, solution("multihead")))
    for student in ("deep", "link", "notes"):
        submit(course, student, "multihead", release)
    chain_in = course / "submitted" / "deep" / "multihead"
    subprocess.run(["python3", "-c", DEEP_CHAIN, str(chain_in)], check=True)
    nb = course / "submitted" / "link" / "multihead" / "multihead.ipynb"
    nb.unlink()
    nb.symlink_to(course / "source" / "multihead" / "multihead.ipynb")
    (course / "submitted" / "notes" / "multihead" / "notes.html").symlink_to(course / "gradebook.db")
    try:
        proc = subprocess.run([str(BIN / "tinygpt-grade-class"), "multihead", "--no-progress"], cwd=course,
                              env=env(), capture_output=True, text=True, timeout=900)
        assert proc.returncode == 0, proc.stderr[-3000:]
        for student, thing in (("deep", "multihead/a/a/a/a/a/a/a/a/a/a/a is 11 folders deep"),
                               ("link", "multihead/multihead.ipynb is a symlink"),
                               ("notes", "multihead/notes.html is a symlink")):
            assert f"FLAGGED, not graded: {student}: {thing}" in proc.stderr, proc.stderr[-3000:]
        assert sorted(p.name for p in (course / "autograded").iterdir()) == ["honest"]
        assert sum(scores(course, "multihead", "honest").values()) == sum(points("multihead").values())

        # plain nbgrader autograde: the flagged folders are moved aside, nothing of them graded
        plain = nbgrader(course, "autograde", "multihead", check=False)
        for student in ("deep", "link", "notes"):
            assert not (course / "submitted" / student / "multihead").exists(), plain.stderr[-3000:]
            assert len(list((course / "submitted" / student).glob(".refused-multihead-*"))) == 1
            assert re.search(rf"FLAGGED, not graded: \S*submitted/{student}/multihead: ", plain.stderr)
        assert sorted(p.name for p in (course / "autograded").iterdir()) == ["honest"]
        nbgrader(course, "generate_feedback", "multihead")
        assert sorted(p.name for p in (course / "feedback").iterdir()) == ["honest"]
        for path in _files(course / "feedback", course / "autograded"):
            assert SQLITE not in path.read_bytes(), f"{path} is the gradebook"
    finally:
        subprocess.run(["rm", "-rf", str(tmp_path / "course" / "submitted" / "deep")])
