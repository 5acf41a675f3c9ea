"""The grading service's page: each learner's own submissions, and the queue for the teachers.

    python -m tinygpt_course.service.web --course-dir DIR --teachers NAME[,NAME]

A JupyterHub service (hub/jupyterhub_config.py registers it as `grading` and starts it as the
teacher; the hub's proxy routes /services/grading/ to it; the hub's OAuth says who is asking):

- ``GET <prefix>api/mine``: the logged-in user's submissions, one per assignment (the newest), as
  JSON: where it is (queued and its place, held by the rate limit and until when, grading, graded,
  flagged for the teacher), and when graded its score per check and total -- only "received" for
  an exam's (c.GradingService.received_only, or a result that says received_only). Nobody else's:
  the user is the one the hub names, never one a request names. The course's lab extension
  (hub/labextension/index.js) polls it after Submit.
- ``GET <prefix>``: for the teachers only, the queue (what waits, the last grades, the flagged
  submissions with their reasons): `tinygpt-grading-service status` as a page.

It is a separate process from the grader (`tinygpt-grading-service run`, runner.py): it only
reads the queue's file (SQLite read-only: it can never change a grade), and a slow page or a
crash here never stops the grading. The queue's strings are learner-made (names, the reasons that
quote them): the page escapes every one and bounds its length; the JSON is data for the lab
extension, which shows it as text.
"""
import argparse
import html
import json
import os
import signal
import sqlite3
import sys
import threading
import time
import urllib.parse

from jupyterhub.services.auth import HubOAuth, HubOAuthCallbackHandler, HubOAuthenticated
from tornado import ioloop, web
from tornado.log import app_log

from .queue import CONTROL, QueueFile, QueueFileError, State, _bounded, _is_empty
from .runner import QUEUE_FILE

TEXT_LIMIT = 300            # characters of one learner-made string shown (a reason, a name)
LAST = 20                   # the last grades on the teachers' page
# what a learner may read of an entry's reason: the rate limit's (the queue makes it from its
# settings); a failure's reason is the teacher's (it may quote logs and paths)
LEARNER_REASONS = (State.HELD, State.REFUSED)


class ReadOnlyQueue(QueueFile):
    """The queue's file opened read-only (SQLite mode=ro): QueueFile's reads, no write can happen."""

    def __init__(self, path, *, clock=time.time, timeout=10.0):
        self.path, self.clock = os.fspath(path), clock
        self._lock = threading.RLock()
        uri = "file:" + urllib.parse.quote(self.path) + "?mode=ro"
        self._db = sqlite3.connect(uri, uri=True, timeout=timeout, isolation_level=None, check_same_thread=False)
        self._db.row_factory = sqlite3.Row
        try:
            self.empty = _is_empty(self._db, self.path)      # QueueFileError: not a grading queue
        except BaseException:
            self._db.close()
            raise


def open_queue(course):
    """The course's queue, read-only, or None while the grader has not made it yet."""
    path = os.path.join(course, QUEUE_FILE)
    if not os.path.isfile(path):
        return None
    queue = ReadOnlyQueue(path)
    if queue.empty:
        queue.close()
        return None
    return queue


def learner_view(queue, entry, received_only):
    """What the learner may see of their `entry` (a dict for JSON). received_only: the
    assignment is an exam's; then only that it was received, whatever its state."""
    if received_only or (entry.result or {}).get("received_only"):
        return {"state": "received", "submitted": entry.submitted}
    view = {"state": entry.state.value, "submitted": entry.submitted, "attempts": entry.attempts}
    if entry.state is State.QUEUED:
        view["place"] = queue.position(entry.id)       # None: waits for their earlier one
    if entry.state in (State.HELD, State.REFUSED):
        view["not_before"] = entry.not_before
    if entry.state in LEARNER_REASONS and entry.reason:
        view["reason"] = _bounded(entry.reason, TEXT_LIMIT)
    if entry.state is State.GRADED and entry.result:
        view["scores"] = entry.result["scores"]
        view["total"] = entry.result["total"]
        view["feedback"] = entry.result["feedback"]
    return view


def mine(queue, student, received_only=()):
    """{"user": student, "assignments": {assignment: learner_view}} of the newest submission of
    each of the student's assignments."""
    found = {}
    if queue is not None:
        for assignment in sorted({e.assignment for e in queue.entries(student=student)}):
            entry = queue.latest(student, assignment)
            found[assignment] = learner_view(queue, entry, assignment in received_only)
    return {"user": student, "assignments": found}


# --- the teachers' page: every learner-made string escaped and bounded --------------------------

def _text(value, limit=TEXT_LIMIT):
    return html.escape(_bounded(value, limit), quote=True)


def _when(t):
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t)) if t else "-"


def _table(headings, rows):
    head = "".join(f"<th>{_text(h)}</th>" for h in headings)
    body = "".join("<tr>" + "".join(f"<td>{_text(cell)}</td>" for cell in row) + "</tr>" for row in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def summary_page(queue, course):
    """The queue as an HTML page (the teacher's `tinygpt-grading-service status`)."""
    parts = [f"<h1>Grading service: {_text(course)}</h1>"]
    if queue is None:
        parts.append("<p>No queue yet: the grading service has not run in this course.</p>")
    else:
        s = queue.summary(LAST)
        counts = s["counts"]
        parts.append(_table(["state", "submissions"], [(state.value, counts[state]) for state in State]))
        oldest = s["oldest_queued"]
        parts.append("<h2>Oldest waiting</h2>" + (
            "<p>nothing waits</p>" if oldest is None else
            f"<p>{_text(oldest.student)}/{_text(oldest.assignment)}, queued {_text(_when(oldest.enqueued))} "
            f"({time.time() - oldest.enqueued:.0f} s ago)</p>"))
        parts.append(f"<h2>Last {LAST} graded</h2>" + _table(
            ["finished", "student", "assignment", "score", "feedback"],
            [(_when(e.finished), e.student, e.assignment, "{:g}/{:g}".format(*e.result["total"]),
              "received only" if e.result.get("received_only") else
              "released" if e.result["feedback"] else "none") for e in s["last_graded"]]))
        parts.append(f"<h2>Flagged, not graded ({len(s['flagged'])})</h2>" + _table(
            ["id", "student", "assignment", "submitted", "attempts", "reason"],
            [(e.id, e.student, e.assignment, e.submitted, e.attempts, e.reason or "")
             for e in s["flagged"]]))
    return ("<!DOCTYPE html><html><head><meta charset='utf-8'><title>Grading service</title>"
            "<style>body{font-family:sans-serif} td,th{border:1px solid #ccc;padding:2px 6px;"
            "text-align:left;white-space:pre-wrap}</style></head><body>"
            + "".join(parts) + "</body></html>")


# --- the handlers ---------------------------------------------------------------------------------

class _AuthFromSettings:
    """The app's HubOAuth (make_app's), not the process-wide one HubOAuthenticated would make."""

    def initialize(self):
        self.hub_auth = self.settings["hub_auth"]


class OAuthCallback(_AuthFromSettings, HubOAuthCallbackHandler):
    pass


class _Handler(_AuthFromSettings, HubOAuthenticated, web.RequestHandler):
    def set_default_headers(self):
        # nothing on these pages runs or loads: a learner-made string that escaped the escaping
        # could still not run; framed by pages of this origin only (the lab extension reads
        # api/mine through a hidden frame of its page)
        self.set_header("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'; frame-ancestors 'self'")
        self.set_header("X-Content-Type-Options", "nosniff")
        self.set_header("Cache-Control", "no-store")

    def name(self):
        """The logged-in user's name (the hub's), or 403 for a service's token."""
        user = self.current_user
        if user.get("kind", "user") != "user" or not isinstance(user.get("name"), str):
            raise web.HTTPError(403)
        return user["name"]

    def queue(self):
        try:
            return open_queue(self.settings["course"])
        except (QueueFileError, sqlite3.Error) as exc:
            app_log.error("the queue cannot be read: %s", exc)
            raise web.HTTPError(503, "the grading queue cannot be read") from None


class MineHandler(_Handler):
    @web.authenticated
    def get(self):
        name = self.name()
        queue = self.queue()
        try:
            body = mine(queue, name, self.settings["received_only"]())
        finally:
            if queue is not None:
                queue.close()
        self.set_header("Content-Type", "application/json; charset=utf-8")
        self.finish(json.dumps(body, allow_nan=False))


class SummaryHandler(_Handler):
    @web.authenticated
    def get(self):
        if self.name() not in self.settings["teachers"]:
            raise web.HTTPError(403, "the grading queue is for the course's teachers")
        queue = self.queue()
        try:
            page = summary_page(queue, self.settings["course"])
        finally:
            if queue is not None:
                queue.close()
        self.set_header("Content-Type", "text/html; charset=utf-8")
        self.finish(page)


def make_app(course, teachers, received_only=None, hub_auth=None, prefix=None):
    """The service's tornado application. received_only: the exams (None: the course's
    c.GradingService.received_only, read again whenever its nbgrader_config.py changes); hub_auth:
    a HubOAuth (None: from the environment the hub gives a service, JUPYTERHUB_*); prefix: where
    the proxy routes it ($JUPYTERHUB_SERVICE_PREFIX)."""
    exams = ExamsOf(os.path.abspath(course)) if received_only is None else (lambda fixed=frozenset(received_only): fixed)
    prefix = prefix if prefix is not None else os.environ.get("JUPYTERHUB_SERVICE_PREFIX", "/services/grading/")
    if not prefix.endswith("/"):
        prefix += "/"
    hub_auth = hub_auth if hub_auth is not None else HubOAuth(cache_max_age=60)
    return web.Application([
        (prefix, SummaryHandler),
        (prefix + "api/mine", MineHandler),
        (prefix + "oauth_callback", OAuthCallback),
    ], course=os.path.abspath(course), teachers=frozenset(teachers), received_only=exams,
        hub_auth=hub_auth, cookie_secret=os.urandom(32))


def received_only_of(course):
    """c.GradingService.received_only of the course's nbgrader_config.py (the exams)."""
    from traitlets.config.loader import PyFileConfigLoader
    path = os.path.join(course, "nbgrader_config.py")
    if not os.path.isfile(path):
        return ()
    config = PyFileConfigLoader("nbgrader_config.py", path=course).load_config()
    return tuple(config.GradingService.get("received_only", ()))


class ExamsOf:
    """received_only_of(course), read again when nbgrader_config.py changes. The hub starts this
    page at once, and the teacher's course folder is made at their first log-in: read once at the
    start, an exam would show its score until the next restart of the hub."""

    def __init__(self, course):
        self.path = os.path.join(course, "nbgrader_config.py")
        self.course, self.seen, self.exams = course, None, frozenset()

    def __call__(self):
        try:
            st = os.stat(self.path)
            now = (st.st_mtime_ns, st.st_size, st.st_ino)
        except OSError:
            now = None
        if now != self.seen:
            try:
                self.exams = frozenset(received_only_of(self.course))
            except Exception as exc:        # caught mid-edit: keep what it said before, try again
                app_log.error("%s cannot be read: %s", self.path, exc)
                return self.exams
            self.seen = now
        return self.exams


def _names(text):
    names = [n.strip() for n in text.split(",") if n.strip()]
    if any(CONTROL.search(n) for n in names):
        raise argparse.ArgumentTypeError("names hold no control character")
    return names


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m tinygpt_course.service.web",
                                description="The grading service's page, as a JupyterHub service.")
    p.add_argument("--course-dir", default=".", help="the course folder (holds the queue and nbgrader_config.py)")
    p.add_argument("--teachers", type=_names, required=True, help="who may see the queue, comma-separated")
    args = p.parse_args(sys.argv[1:] if argv is None else argv)
    course = os.path.abspath(args.course_dir)
    url = urllib.parse.urlparse(os.environ.get("JUPYTERHUB_SERVICE_URL", "http://127.0.0.1:10102"))
    app = make_app(course, args.teachers)
    app.listen(url.port, url.hostname or "127.0.0.1", xheaders=True)
    print(f"grading service page for {course} on {url.hostname}:{url.port}", file=sys.stderr, flush=True)
    # the hub stops a service with SIGINT, then SIGTERM 30 s later: stop at the first, even when
    # started with SIGINT ignored (a hub started as a shell's background job passes that on)
    loop = ioloop.IOLoop.current()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.asyncio_loop.add_signal_handler(signum, loop.stop)
    loop.start()


if __name__ == "__main__":
    main()
