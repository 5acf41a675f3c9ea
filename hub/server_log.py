"""A log file per user's server, root's: what the server, its kernels and terminals print.

The hub (hub/jupyterhub_config.py, CappedSpawner) opens <folder>/<user>.log before it starts the
user's server and hands the open file to the server as its stdout and stderr; the server, running
as the user, writes through that descriptor but cannot open the file (root's, 0600, in a folder
0700 root's): nobody but root reads it, the user themselves included (a learner's server prints
the tokens of its URLs). The file is the server's, not the hub's: a hub restart leaves it writing
there. At each start the last server's log becomes <user>.log.1. What a learner prints to the
server's stderr is theirs to choose, so the hub bounds it: at every poll of a running server
(Spawner.poll_interval) a log past max_bytes is copied to <user>.log.1 and emptied (the server
appends, so it goes on writing at the new end), as logrotate's copytruncate does (what it writes
between the copy and the truncation is lost).
"""
import os
import shutil
import time


def _path(folder, user):
    if not user or "/" in user or user.startswith("."):
        raise ValueError(f"not a user name for a log file: {user!r}")
    return os.path.join(folder, f"{user}.log")


def prepare(folder):
    """The log folder: root's, 0700 (made if missing, its mode set if not)."""
    os.makedirs(folder, mode=0o700, exist_ok=True)
    os.chown(folder, 0, 0)
    os.chmod(folder, 0o700)


def open_log(folder, user):
    """A descriptor appending to <folder>/<user>.log (0600), the last one kept as .log.1: the new
    server's stdout and stderr. The caller closes it once the server has it."""
    prepare(folder)
    path = _path(folder, user)
    if os.path.isfile(path) and not os.path.islink(path) and os.path.getsize(path) > 0:
        os.replace(path, path + ".1")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    os.fchown(fd, 0, 0)
    os.fchmod(fd, 0o600)
    os.write(fd, f"[tinygpt hub] {user}'s server starting, {time.strftime('%Y-%m-%d %H:%M:%S %Z')}\n".encode())
    return fd


def trim(folder, user, max_bytes):
    """If <user>.log is past max_bytes: copy it to <user>.log.1 and empty it. Returns whether it did."""
    path = _path(folder, user)
    try:
        fd = os.open(path, os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        return False
    with os.fdopen(fd, "rb+") as log:
        if not max_bytes or os.fstat(log.fileno()).st_size <= max_bytes:
            return False
        tmp = path + ".1.tmp"
        with open(tmp, "wb") as old:
            os.fchmod(old.fileno(), 0o600)
            shutil.copyfileobj(log, old)
        os.replace(tmp, path + ".1")
        log.truncate(0)
        log.seek(0)
        log.write(f"[tinygpt hub] log past {max_bytes} bytes: the earlier part is in {os.path.basename(path)}.1\n"
                  .encode())
    return True
