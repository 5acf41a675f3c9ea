"""One shard of a class too large for one pod (a Kubernetes Indexed Job's pod: hub/z2jh/grade-job.yaml).

    tinygpt-grade-class multihead --shards N [--shard-index I]      # I defaults to $JOB_COMPLETION_INDEX

The class (every submitted/<student>/<assignment>/, sorted by student id) is dealt out in turn: shard I
of N grades the students at positions I, I + N, I + 2N, ... It grades them with tinygpt-grade-class's
own code (cli._main, handed in as `grade`), in a private copy of the course: the course's nbgrader_config.py, the
assignment's source/ and release/ (what a broken notebook is graded as), a copy of the gradebook
taken under the gradebook lock, its students' earlier autograded/ folders (so graded work is skipped,
as tinygpt-grade-class skips it), and each of its students' submitted folder as a link to the real
one (the owner check sees the real owners). The course's own gradebook and autograded/ are never
written here.

Its results, in <course>/shards/<assignment>/<I>/: the copy's gradebook (gradebook.db), its students'
autograded/ folders and result.json (which students, which were graded, flagged, failed). They appear
in one rename when the shard is done, so a shard's results are whole or absent, and a shard run again
replaces only its own. merge.py puts them in the course's gradebook and autograded/.
The exit status is 0 when the results are written (a submission nbgrader cannot grade is recorded in
them, not a failure of the shard, which would only make Kubernetes retry it in vain), else non-zero.
"""
import json
import os
import shutil
import sqlite3
import sys
import tempfile
from pathlib import Path

RESULTS = "shards"           # <course>/shards/<assignment>/<index>/


def share(students, index, shards):
    """The students shard `index` of `shards` grades: every shards-th of the sorted class."""
    return [s for i, s in enumerate(sorted(students)) if i % shards == index]


def results_root(course, assignment):
    return Path(course) / RESULTS / assignment


def shard_index(given):
    if given is not None:
        return given
    try:
        return int(os.environ["JOB_COMPLETION_INDEX"])
    except (KeyError, ValueError):
        sys.exit("tinygpt-grade-class: --shards needs --shard-index or JOB_COMPLETION_INDEX "
                 "(a Kubernetes Indexed Job sets it)")


def sqlite_path(db_url):
    if not db_url.startswith("sqlite:///"):
        sys.exit(f"tinygpt-grade-class: grading in shards needs the SQLite gradebook, not {db_url}")
    return db_url[len("sqlite:///"):]


def copy_gradebook(db_url, dest):
    """A consistent copy of the gradebook, taken while holding the gradebook lock (lock.py)."""
    from nbgrader.api import Gradebook
    from .lock import install_gradebook_lock
    install_gradebook_lock()
    with Gradebook(db_url):            # holds the lock: no writer is half-way through
        src = sqlite3.connect(sqlite_path(db_url))
        dst = sqlite3.connect(dest)
        try:
            src.backup(dst)
        finally:
            src.close()
            dst.close()


def run(args, logs_base, grade):
    """Grade this shard with `grade(argv, logs_base)` (tinygpt-grade-class's own grading, on the
    shard's private copy of the course); return the exit status."""
    from .submissions import find_submissions, load_course
    from ..grading.owner import submission_problem

    shards, index = args.shards, shard_index(args.shard_index)
    if not 0 <= index < shards:
        sys.exit(f"tinygpt-grade-class: shard index {index} is not in 0..{shards - 1}")
    course = Path(os.getcwd())                          # tinygpt-grade-class has gone there
    assignment = args.assignment
    coursedir = load_course(assignment)
    submissions = find_submissions(coursedir, assignment)
    mine = share(submissions, index, shards)
    print(f"tinygpt-grade-class: shard {index} of {shards}: {len(mine)} of {len(submissions)} submissions",
          file=sys.stderr)

    def rel(path):
        return os.path.relpath(path, course)

    work = Path(tempfile.mkdtemp(prefix=f"tinygpt-shard-{index}-"))   # in the run's own temporary folder
    shutil.copy2(course / "nbgrader_config.py", work / "nbgrader_config.py")
    for folder in (coursedir.source_directory, coursedir.release_directory):   # release/: the repair hook's
        path = coursedir.format_path(folder, ".", assignment)
        if os.path.isdir(path):
            shutil.copytree(path, work / rel(path), symlinks=True)
    db = sqlite_path(coursedir.db_url)
    (work / rel(db)).parent.mkdir(parents=True, exist_ok=True)
    copy_gradebook(coursedir.db_url, work / rel(db))
    # each submission copied by handle (not linked: a link would be the submission's folder, and
    # what is graded must be data); one that is not plain data of its student's is flagged instead
    from ..grading.submission_tree import SubmissionTree
    config = getattr(coursedir, "course_config", coursedir.config)
    problems = {s: p for s in mine if (p := submission_problem(submissions[s], s, config=config))}
    for student in mine:
        copy = work / rel(submissions[student])
        copy.parent.mkdir(parents=True, exist_ok=True)
        if student not in problems:
            problems[student] = SubmissionTree(config=config).copy(submissions[student], copy, student)
        done = coursedir.format_path(coursedir.autograded_directory, student, assignment)
        if os.path.isdir(done):
            shutil.copytree(done, work / rel(done), symlinks=True)
    problems = {s: p for s, p in problems.items() if p}
    for student, problem in sorted(problems.items()):
        print(f"FLAGGED, not graded: {student}: {problem}", file=sys.stderr)
    flagged = sorted(problems)

    code = 0
    if mine:
        argv = [assignment, "--course-dir", str(work), "--jobs", str(args.jobs), "--retries", str(args.retries),
                "--submission-timeout", str(args.submission_timeout)]
        argv += ["--force"] * args.force + ["--no-progress"] * args.no_progress
        argv += ["--logs", os.path.join(args.logs, f"shard-{index}")] if args.logs else []
        try:
            code = grade(argv, logs_base)
        finally:
            os.chdir(course)

    graded = sorted(s for s in mine if s not in flagged and os.path.isdir(
        work / rel(coursedir.format_path(coursedir.autograded_directory, s, assignment))))
    result = {"assignment": assignment, "index": index, "shards": shards, "class": sorted(submissions),
              "students": mine, "graded": graded, "flagged": flagged,
              "failed": sorted(set(mine) - set(graded) - set(flagged)), "exit": code}

    root = results_root(course, assignment)
    root.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{index}.partial-", dir=root))
    try:
        shutil.copy2(work / rel(db), staging / "gradebook.db")
        for student in graded:
            done = rel(coursedir.format_path(coursedir.autograded_directory, student, assignment))
            shutil.copytree(work / done, staging / "autograded" / student, symlinks=True)
        (staging / "result.json").write_text(json.dumps(result, indent=1))
        os.chmod(staging, 0o700)
        final = root / str(index)
        if final.is_dir() and not final.is_symlink():          # this shard's earlier results
            old = Path(tempfile.mkdtemp(prefix=f".{index}.old-", dir=root))
            os.rename(final, old / "results")
            os.rename(staging, final)
            shutil.rmtree(old)
        else:
            os.rename(staging, final)
    except OSError as exc:
        shutil.rmtree(staging, ignore_errors=True)
        print(f"tinygpt-grade-class: shard {index}: cannot write its results in {root}: {exc}", file=sys.stderr)
        return 3
    print(f"tinygpt-grade-class: shard {index} of {shards}: graded {len(graded)}, flagged {len(flagged)}, "
          f"failed {len(result['failed'])}; results in {final}", file=sys.stderr)
    return 0
