"""How the grader and its warm helper processes talk over a pipe (the re-run server, the kernel
template): a message is a 4-byte big-endian length and a JSON header, optionally followed by a
4-byte length and raw bytes. Plain framing, nothing that runs code; both sides import it."""
import json
import os
import select
import struct
import time


class Gone(RuntimeError):
    """The other side ended, or did not answer in time."""


def write(f, header, payload=None):
    data = json.dumps(header).encode()
    msg = struct.pack(">I", len(data)) + data
    if payload is not None:
        msg += struct.pack(">I", len(payload)) + payload
    f.write(msg)
    f.flush()


def _take(f, n):
    """n bytes from a blocking file (buffered or raw: a raw one may return fewer per read)."""
    chunks = []
    while n:
        chunk = f.read(n)
        if not chunk:
            break
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)


def read(f):
    """The next header from a blocking file, or None at its end (the server's side)."""
    head = _take(f, 4)
    if len(head) < 4:
        return None
    (n,) = struct.unpack(">I", head)
    return json.loads(_take(f, n))


def _read_exact(fd, n, deadline):
    chunks = []
    while n:
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            raise Gone("no answer in time")
        chunk = os.read(fd, min(n, 1 << 20))
        if not chunk:
            raise Gone("it ended")
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)


def read_reply(fd, timeout, payload=False):
    """(header, payload bytes or None) from a file descriptor, within `timeout` seconds (the
    grader's side); raises Gone."""
    deadline = time.monotonic() + timeout
    (n,) = struct.unpack(">I", _read_exact(fd, 4, deadline))
    header = json.loads(_read_exact(fd, n, deadline))
    if not payload:
        return header, None
    (m,) = struct.unpack(">I", _read_exact(fd, 4, deadline))
    return header, _read_exact(fd, m, deadline)
