"""The worker side of tinygpt-grade-class: forked processes that grade submissions one by one.

A worker grades a submission by running nbgrader's own command, `nbgrader autograde
<assignment> --student <id> --force`, in-process (nbgrader.apps.nbgraderapp.NbGraderApp, a fresh
app per submission), so every step and preprocessor the course's nbgrader_config.py lists runs
exactly as with the command line. What differs from one `nbgrader autograde` process grading the
class: the imports are inherited from the parent (fork) instead of paid per process; several
workers grade at once; and every Gradebook opened while grading holds an exclusive lock (flock
on the gradebook's folder) until it is closed, so workers take turns on the SQLite gradebook ("database is locked" cannot
happen, however many workers write at once).
"""
import fcntl
import hashlib
import os
import sys
import tempfile
import threading
import time

from nbgrader import api

_state = {"pid": None, "fd": None, "depth": 0, "waited": 0.0}
_thread_lock = threading.RLock()


def lock_path_for(db_url):
    """What to flock: the SQLite gradebook's folder (no lock file is left behind anywhere);
    for another database, a file in the temporary folder."""
    if db_url.startswith("sqlite:///"):
        return os.path.dirname(os.path.abspath(db_url[len("sqlite:///"):]))
    digest = hashlib.sha1(db_url.encode()).hexdigest()[:16]
    return os.path.join(tempfile.gettempdir(), f"tinygpt-gradebook-{digest}.lock")


def _open_lock(path):
    if os.path.isdir(path):
        return os.open(path, os.O_RDONLY)        # flock works on a folder's descriptor too
    try:
        return os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    except PermissionError:          # another user's lock file: flock works read-only too
        return os.open(path, os.O_RDONLY)


def _acquire(db_url):
    _thread_lock.acquire()
    try:
        if _state["depth"] == 0:
            if _state["pid"] != os.getpid():
                # flock belongs to the open file: a forked child must open its own, or it
                # would share (and never wait for) its parent's lock
                _state.update(pid=os.getpid(), fd=_open_lock(lock_path_for(db_url)))
            t0 = time.perf_counter()
            fcntl.flock(_state["fd"], fcntl.LOCK_EX)
            _state["waited"] += time.perf_counter() - t0
        _state["depth"] += 1
    except BaseException:
        _thread_lock.release()
        raise


def _release():
    try:
        _state["depth"] -= 1
        if _state["depth"] == 0:
            fcntl.flock(_state["fd"], fcntl.LOCK_UN)
    finally:
        _thread_lock.release()


def install_gradebook_lock():
    """Make every nbgrader Gradebook hold the gradebook's file lock from opening to close()."""
    gb = api.Gradebook
    if getattr(gb, "_tinygpt_locked", False):
        return
    orig_init, orig_close = gb.__init__, gb.close

    def __init__(self, db_url, *args, **kwargs):
        _acquire(db_url)
        self._tinygpt_holds_lock = True
        try:
            orig_init(self, db_url, *args, **kwargs)
        except BaseException:
            self._tinygpt_holds_lock = False
            _release()
            raise

    def close(self):
        try:
            orig_close(self)
        finally:
            if getattr(self, "_tinygpt_holds_lock", False):
                self._tinygpt_holds_lock = False
                _release()

    gb.__init__, gb.close, gb._tinygpt_locked = __init__, close, True
    gb._tinygpt_original = orig_init, orig_close


def uninstall_gradebook_lock():
    """Undo install_gradebook_lock (for tests that compare with and without it)."""
    gb = api.Gradebook
    if getattr(gb, "_tinygpt_locked", False):
        gb.__init__, gb.close = gb._tinygpt_original
        gb._tinygpt_locked = False


def lock_wait_seconds():
    return _state["waited"]


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


def serve(conn):
    """A worker's loop (in a forked process): grade what the parent sends until it hangs up.

    A worker grades many submissions, as one `nbgrader autograde` process does, so what
    nbgrader and the grading steps set up once per process is set up once per worker.
    """
    install_gradebook_lock()
    while True:
        try:
            job = conn.recv()
        except (EOFError, OSError, KeyboardInterrupt):
            break
        if job is None:
            break
        assignment, student, log_path = job
        try:
            code = grade(assignment, student, log_path)
        except KeyboardInterrupt:
            break
        try:
            conn.send((student, code))
        except (OSError, KeyboardInterrupt):
            break
    os._exit(0)
