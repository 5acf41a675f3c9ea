"""The gradebook lock: every nbgrader Gradebook opened while grading holds an exclusive flock on
the gradebook's folder until it is closed, so forked workers take turns on SQLite ("database is
locked" cannot happen, however many write at once)."""
import fcntl
import hashlib
import os
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
