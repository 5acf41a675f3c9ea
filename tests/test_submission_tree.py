"""SubmissionTree (tinygpt_course/grading/submission_tree.py): a submission is taken as data, by
handle, within bounds, or refused whole. Fast: no nbgrader command, files in tmp_path."""
import os
import subprocess

import pytest
from traitlets.config import Config

from tinygpt_course.grading.submission_tree import SubmissionTree

DEEP = 1100          # deeper than Python's recursion limit: a recursive walk raises RecursionError


def chain(folder, depth, name="a"):
    """depth folders nested in folder, made one by one relative to the last (os.makedirs recurses)."""
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    for _ in range(depth):
        os.mkdir(name, dir_fd=fd)
        inner = os.open(name, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
        os.close(fd)
        fd = inner
    os.close(fd)


def remove(path):
    subprocess.run(["rm", "-rf", str(path)], check=True)       # shutil.rmtree recurses too


@pytest.fixture
def submission(tmp_path):
    sub = tmp_path / "alice+multihead+2026-12-01 10:00:00.000000 UTC+x"
    (sub / "data").mkdir(parents=True)
    (sub / "multihead.ipynb").write_text('{"cells": []}')
    (sub / "data" / "notes.txt").write_text("mine")
    (sub / ".ipynb_checkpoints").mkdir()
    (sub / ".ipynb_checkpoints" / "old.ipynb").write_text("{}")
    yield sub
    remove(tmp_path)


def test_plain_data_is_copied_as_it_is(submission, tmp_path):
    dest = tmp_path / "copy"
    assert SubmissionTree().check(submission) is None
    assert SubmissionTree().copy(submission, dest) is None
    assert (dest / "multihead.ipynb").read_text() == '{"cells": []}'
    assert (dest / "data" / "notes.txt").read_text() == "mine"
    assert (dest / "multihead.ipynb").stat().st_mtime_ns == (submission / "multihead.ipynb").stat().st_mtime_ns
    assert not (dest / ".ipynb_checkpoints").exists(), "nbgrader's CourseDirectory.ignore is not applied"


@pytest.mark.parametrize("make, kind, thing", [
    (lambda s, t: os.replace(_link(t / "teacher.ipynb", s / "x"), s / "multihead.ipynb"), "symlink", "multihead.ipynb"),
    (lambda s, t: os.symlink(t / "gradebook.db", s / "notes.html"), "symlink", "notes.html"),
    (lambda s, t: os.symlink("/dev/zero", s / "data" / "zero.txt"), "symlink", "data/zero.txt"),
    (lambda s, t: os.mkfifo(s / "pipe"), "fifo", "pipe"),
    (lambda s, t: chain(s / "data", DEEP), "too_deep", "data/a/a/a/a/a/a/a/a/a/a"),
    (lambda s, t: [(s / "data" / f"f{i}").touch() for i in range(1200)], "too_many", "data/"),
    (lambda s, t: (s / "data" / "big.bin").write_bytes(b"x" * 3000), "too_large", "data/big.bin"),
])
def test_anything_else_refuses_the_submission(submission, tmp_path, make, kind, thing):
    (tmp_path / "teacher.ipynb").write_text("THE SOLUTION")
    (tmp_path / "gradebook.db").write_text("SQLite format 3")
    make(submission, tmp_path)
    config = Config()
    config.CourseDirectory.max_file_size = 2          # kB
    dest = tmp_path / "copy"
    for refusal in (SubmissionTree(config=config).check(submission),
                    SubmissionTree(config=config).copy(submission, dest)):
        assert refusal is not None and refusal.kind == kind, refusal
        assert refusal.path.startswith(f"{submission.name}/{thing}"), refusal
    assert not dest.exists(), "a refused submission left a partial copy"


def _link(target, at):
    os.symlink(target, at)
    return at


def test_a_file_of_another_user_is_refused(submission):
    if os.geteuid() != 0:
        pytest.skip("chown needs root")
    os.chown(submission / "data" / "notes.txt", 2, 2)          # bin's (a system account every Debian has)
    refusal = SubmissionTree().check(submission, "daemon")
    assert refusal.kind == "owner" and "notes.txt belongs to bin, not to daemon" in str(refusal)


def test_names_are_shown_without_control_characters(submission):
    os.symlink("/etc/passwd", submission / "evil\n\x1b[2Jname")
    refusal = SubmissionTree().check(submission)
    assert refusal.kind == "symlink" and "\n" not in str(refusal) and "\x1b" not in str(refusal)
    assert "evil\\n\\x1b[2Jname" in refusal.path
