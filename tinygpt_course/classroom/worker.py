"""The worker side of tinygpt-grade-class: forked processes that grade submissions one by one.

A worker grades a submission by running nbgrader's own command, `nbgrader autograde
<assignment> --student <id> --force`, in-process (nbgrader.apps.nbgraderapp.NbGraderApp, a fresh
app per submission), so every step and preprocessor the course's nbgrader_config.py lists runs
exactly as with the command line. What differs from one `nbgrader autograde` process grading the
class: the imports are inherited from the parent (fork) instead of paid per process; several
workers grade at once; and gradebook writes take turns (lock.py).
"""
import os
import sys

from .lock import install_gradebook_lock, lock_wait_seconds


def _redirect_output(log_path):
    """Send this process's stdout/stderr (and its kernel's, which inherits them) to log_path."""
    sys.stdout.flush()
    sys.stderr.flush()
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)


def grade(assignment, student, log_path):
    """Autograde one student's submission with nbgrader's own command, logging to log_path.

    Returns nbgrader's exit status: 1 when nbgrader reports an error for the submission.
    """
    from jupyter_core.application import NoStart
    from nbgrader.apps.autogradeapp import AutogradeApp
    from nbgrader.apps.nbgraderapp import NbGraderApp

    _redirect_output(log_path)
    # a fresh app per submission, as a fresh `nbgrader autograde --student` would make
    AutogradeApp.clear_instance()
    NbGraderApp.clear_instance()
    waited = lock_wait_seconds()
    code = 0
    try:
        app = NbGraderApp.instance()
        app.initialize(["autograde", assignment, "--student", student, "--force"])
        app.start()
    except NoStart:                    # how a Jupyter app with a subcommand says it is done
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except Exception:
        import traceback
        traceback.print_exc()
        code = 1
    finally:
        AutogradeApp.clear_instance()
        NbGraderApp.clear_instance()
        print(f"[tinygpt-grade-class] exit {code}; waited {lock_wait_seconds() - waited:.2f} s "
              "for the gradebook lock", file=sys.stderr)
        sys.stdout.flush()
        sys.stderr.flush()
    return code


def grade_job(job):
    """tinygpt-grade-class's job: (assignment, student, log path) -> (student, nbgrader's exit status)."""
    assignment, student, log_path = job
    return student, grade(assignment, student, log_path)


def serve(conn, index=0, handle=grade_job, name="tgc-worker", warm=None):
    """A worker's loop (in a forked process): `handle` each job the parent sends and send back
    what it returns, until the parent hangs up. tinygpt-grade-class's workers grade submissions
    (grade_job); the grading service's (service/runner.py) a submission's whole round.

    A worker grades many submissions, as one `nbgrader autograde` process does, so what
    nbgrader and the grading steps set up once per process is set up once per worker (and
    `warm()`, if given, before the first job: the service's re-run zygotes).
    `index` is the worker's slot (0..jobs-1): its learner code runs as a uid of that slot's own
    outside (c.Sandbox.worker reads it from $TINYGPT_GRADING_WORKER), so where no pids cgroup
    caps a sandbox, RLIMIT_NPROC counts this worker's sandboxes apart from the others'.
    """
    import ctypes
    import signal
    from tinygpt_course.grading.sandbox import WORKER_ENV
    signal.signal(signal.SIGTERM, signal.SIG_DFL)       # a parent's own handler is not the worker's
    os.environ[WORKER_ENV] = str(index)
    # its name in ps and /proc/<pid>/comm (the environment there is the one the parent was started with)
    ctypes.CDLL(None).prctl(15, f"{name}-{index}".encode()[:15], 0, 0, 0)      # PR_SET_NAME
    install_gradebook_lock()
    from .once import install as build_once
    build_once()            # nbgrader's metadata schema and gradebook engine, once per worker
    if warm is not None:
        warm()
    while True:
        try:
            job = conn.recv()
        except (EOFError, OSError, KeyboardInterrupt):
            break
        if job is None:
            break
        try:
            reply = handle(job)
        except KeyboardInterrupt:
            break
        try:
            conn.send(reply)
        except (OSError, KeyboardInterrupt):
            break
    # os._exit skips atexit: remove this worker's sandbox cgroups first (a class run leaves none)
    from tinygpt_course.grading.sandbox import Cgroups
    Cgroups.sweep_mine()
    os._exit(0)
