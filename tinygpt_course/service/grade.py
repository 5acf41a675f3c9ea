"""The grading service's worker side: one submission, start to end (runner.py's step 3).

A worker of the service's pool (classroom.pool.WorkerPool, forked from the kernel template and
kept alive) gets a Job: it collects that one inbound submission (OneSubmission: CheckedCollect of
that name alone), autogrades it with tinygpt-grade-class's own step, generates and releases its
feedback to that student alone, and answers an Outcome. The service's parent (runner.py) and its
burst to a Kubernetes Job (burst.py) use these steps; neither imports the other's code for them.
"""
import os
import sys
from dataclasses import dataclass

from ..grading.exchange import CheckedCollect


def _shown(text, cap=200):
    from ..grading.submission_tree import shown
    return shown(str(text), cap)


def _remove(path):
    try:
        os.remove(path)
    except FileNotFoundError:
        pass


# --- a worker: one submission, start to end -------------------------------------------------


@dataclass(frozen=True)
class Job:
    """One submission for a worker to grade."""
    entry_id: int
    student: str
    assignment: str
    key: str                 # its inbound folder's name
    submitted: str           # its timestamp, as the name says it
    feedback: bool           # generate and release the feedback (not for received_only)
    db_url: str
    course_id: str
    log: str                 # the logs' path, without ending

    def logs(self):
        """Its steps' logs: collect; autograde (classroom.worker.grade's); feedback and release."""
        return [self.log + ".collect.log", self.log + ".autograde.log", self.log + ".feedback.log"]


@dataclass(frozen=True)
class Outcome:
    """How a submission's grading went: kind "graded" (result: the queue's), "refused" (the
    submission is not data, or not the student's) or "failed"; reason: what the teacher reads."""
    kind: str
    result: dict = None
    reason: str = None


class OneSubmission(CheckedCollect):
    """CheckedCollect of the one inbound submission named `key`: the service grades what it
    queued, never another submission of that learner in its place (CheckedCollect alone falls
    back to the one before a refused one)."""

    def __init__(self, key, **kwargs):
        super().__init__(**kwargs)
        self.key = key

    def _preferred(self, records):
        return [r for r in records if r["filename"] == self.key]


def _warm_feedback():
    """Import what generate_feedback uses, here, once: the forked workers inherit it."""
    import nbconvert  # noqa: F401
    from nbgrader.converters import GenerateFeedback  # noqa: F401


def _warm_zygotes(assignments):
    """Start this worker's re-run zygote for each lesson now, not in the first learner's wait."""
    from ..grading.rerun import _server
    from ..checks.protocol import load_lesson
    for assignment in assignments:
        try:
            load_lesson(assignment)
            _server([assignment], True)
        except Exception:           # no lesson of that name, or no zygote: it starts when needed
            pass


def serve(conn, index, lessons=()):
    """A service worker (forked by WorkerPool): tinygpt-grade-class's worker loop
    (classroom.worker.serve: its slot's sandbox uid, the gradebook lock), each Job graded by
    grade_submission and answered with its Outcome, its re-run zygote for each of `lessons`
    started before the first."""
    from ..classroom.worker import serve as worker_loop
    worker_loop(conn, index, handle=grade_submission, name="tgs-worker", warm=lambda: _warm_zygotes(lessons))


class _App:
    """nbgrader's app for `nbgrader <argv>`, as the command line makes it (the course's
    nbgrader_config.py read), in this process; cleared on leaving."""

    def __init__(self, *argv):
        self.argv = list(argv)

    def __enter__(self):
        from nbgrader.apps.nbgraderapp import NbGraderApp
        NbGraderApp.clear_instance()
        self.top = NbGraderApp.instance()
        try:
            self.top.initialize(self.argv)
        except BaseException:
            self.__exit__()
            raise
        return self.top.subapp

    def __exit__(self, *exc):
        from nbgrader.apps.nbgraderapp import NbGraderApp
        if getattr(self.top, "subapp", None) is not None:      # a fresh one for the next command
            type(self.top.subapp).clear_instance()
        NbGraderApp.clear_instance()
        return False


def _run(*argv):
    """`nbgrader <argv>` in this process: its exit status."""
    from jupyter_core.application import NoStart
    try:
        with _App(*argv) as app:
            app.start()
    except NoStart:
        return 0
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    return 0


def collect(job):
    """Collect the job's one inbound submission into submitted/<student>/<assignment>: None, or
    why not (an Outcome)."""
    from nbgrader.auth import Authenticator
    from nbgrader.exchange import ExchangeError
    from nbgrader.utils import parse_utc
    with _App("collect", job.assignment, "--student", job.student, "--update") as app:
        app.coursedir.assignment_id = job.assignment         # what the app's start() would set
        step = OneSubmission(job.key, coursedir=app.coursedir, authenticator=Authenticator(parent=app), parent=app)
        try:
            step.start()
        except ExchangeError as exc:
            return Outcome("failed", reason=f"nbgrader collect failed: {_shown(exc)}")
        refused = dict(step.refused).get(job.key)
        if refused is not None:
            return Outcome("refused", reason=f"not collected: {refused}")
        folder = app.coursedir.format_path(app.coursedir.submitted_directory, job.student, job.assignment)
        there = app.coursedir.get_existing_timestamp(folder) if os.path.isdir(folder) else None
    if not any(r["filename"] == job.key for r in step.src_records) and there is None:
        return Outcome("failed", reason="the submission is no longer in the exchange's inbound folder")
    if there != parse_utc(job.submitted):
        return Outcome("failed", reason=f"submitted/{job.student}/{job.assignment} holds another submission "
                                        f"({there}), not this one")
    return None


def gradebook_result(job):
    """(the queue's result, the submission's notebook names) from the gradebook. The result:
    {"scores": {grade id: [score, max]}, "total": [score, max]}, a notebook's name before each
    grade id when the assignment has several."""
    from nbgrader.api import Gradebook
    with Gradebook(job.db_url, job.course_id) as gb:
        sub = gb.find_submission(job.assignment, job.student)
        several = len(sub.notebooks) > 1
        got = {(f"{nb.name}/{g.name}" if several else g.name): [g.score, g.max_score]
               for nb in sub.notebooks for g in nb.grades}
        return {"scores": got, "total": [sub.score, sub.max_score]}, [nb.name for nb in sub.notebooks]


def release(job, notebooks):
    """Release the job's student's feedback alone (CheckedReleaseFeedback); whether the page of
    each of `notebooks` that has one is in the exchange now (and one at least)."""
    from nbgrader.auth import Authenticator
    from nbgrader.utils import notebook_hash

    from ..grading.exchange import SECRET_BYTES, CheckedReleaseFeedback
    with _App("release_feedback", job.assignment, "--student", job.student) as app:
        app.coursedir.assignment_id = job.assignment
        step = CheckedReleaseFeedback(coursedir=app.coursedir, authenticator=Authenticator(parent=app), parent=app)
        step.start()
        folder = app.coursedir.format_path(app.coursedir.feedback_directory, job.student, job.assignment)
        with open(os.path.join(folder, "submission_secret.txt"), "rb") as f:
            secret = f.read(SECRET_BYTES).decode()
        pages = [name for name in notebooks if os.path.isfile(os.path.join(folder, f"{name}.html"))]
        released = [os.path.join(step.dest_path, f"{notebook_hash(secret=secret, notebook_id=name)}.html")
                    for name in pages]
        return bool(pages) and all(os.path.isfile(path) for path in released)


def grade_submission(job):
    """Collect, autograde, feed back one submission (in a worker); its Outcome."""
    from ..classroom.pool import _error_lines
    from ..classroom.worker import _redirect_output, grade
    collect_log, autograde_log, feedback_log = job.logs()
    step = "collect"
    _redirect_output(collect_log)
    try:
        problem = collect(job)
        if problem is not None:
            return problem
        step = "autograde"
        code = grade(job.assignment, job.student, autograde_log)
        _redirect_output(feedback_log)
        if code != 0:
            said = _error_lines(autograde_log, limit=1)
            return Outcome("failed", reason=f"nbgrader autograde failed (exit {code})"
                                            f"{': ' + _shown(said[-1]) if said else ''}")
        result, notebooks = gradebook_result(job)
        if not job.feedback:        # an exam's: no feedback; the learner is to see "received" only
            return Outcome("graded", {**result, "feedback": False, "received_only": True})
        step = "generate_feedback"
        code = _run("generate_feedback", job.assignment, "--student", job.student, "--force")
        if code != 0:
            return Outcome("failed", reason=f"nbgrader generate_feedback failed (exit {code})")
        step = "release_feedback"
        if not release(job, notebooks):
            return Outcome("failed", reason="the feedback was not released (the log says why)")
        return Outcome("graded", {**result, "feedback": True})
    except Exception as exc:        # a step's own error: this submission fails, the worker goes on
        import traceback
        traceback.print_exc()
        return Outcome("failed", reason=f"{step}: {type(exc).__name__}: {_shown(exc)}")
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
