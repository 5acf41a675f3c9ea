"""The grading service's page (tinygpt_course/service/web.py) over a real queue file.

The service runs as the hub runs it (its tornado app on a port, HubOAuth asking the hub who a
token belongs to); the hub's one answer it needs, GET <hub>/api/user (who holds this token, with
which scopes), comes from a small stand-in here, so that no hub has to start: tests/test_hub.py
runs the live hub with real users and browsers. What is checked: a learner sees their own
submissions only, an exam's as "received" only, the teachers' page escapes the learner-made
strings and is refused to anyone else; each defence is also switched off to show the check fails.
"""
import asyncio
import http.server
import json
import sqlite3
import threading
import urllib.error
import urllib.request

import pytest
from tornado import ioloop

from tinygpt_course.service import web
from tinygpt_course.service.queue import Queue
from tinygpt_course.service.runner import QUEUE_FILE

SCOPE = "access:services!service=grading"
TOKENS = {      # token: the hub's model of its holder
    "alice-token": {"kind": "user", "name": "alice", "scopes": [SCOPE]},
    "bob-token": {"kind": "user", "name": "bob", "scopes": [SCOPE]},
    "teacher-token": {"kind": "user", "name": "teacher", "scopes": [SCOPE]},
    "carol-elsewhere": {"kind": "user", "name": "carol", "scopes": ["access:services!service=other"]},
    "culler-token": {"kind": "service", "name": "idle-culler", "scopes": [SCOPE]},
}
STAMP = "2026-12-04 20:{:02d}:00.000000 UTC"
EVIL = "<script>alert('x')</script><img src=x onerror=alert(1)>"


class _Hub(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        token = (self.headers.get("Authorization") or "").removeprefix("token ")
        model = TOKENS.get(token) if self.path.endswith("/api/user") else None
        self.send_response(200 if model else 403)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(json.dumps(model or {"message": "no such token"}).encode())

    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def hub():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Hub)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_port}/hub/api"
    server.shutdown()


def _add(q, student, assignment, minute):
    return q.add(student, assignment, f"{student}+{assignment}+{STAMP.format(minute)}", STAMP.format(minute))


@pytest.fixture(scope="module")
def course(tmp_path_factory):
    """A course whose queue holds: alice's head graded, her multihead queued behind bob's head,
    her block an exam graded (received_only), her gpt flagged; bob's head queued; eve's flagged
    with a learner-made reason that is markup."""
    course = tmp_path_factory.mktemp("course")
    q = Queue(str(course / QUEUE_FILE), per_minute=None, per_day=None, max_attempts=1)
    for student, assignment, minute in [("alice", "head", 0), ("alice", "block", 1), ("alice", "gpt", 2),
                                        ("eve", "gpt", 3)]:
        _add(q, student, assignment, minute)
        e = q.claim("tester")
        if assignment == "head":
            q.done(e.id, {"scores": {"head_shapes": [2, 2], "head_mask": [1, 3]}, "total": [3, 5], "feedback": True})
        elif assignment == "block":
            q.done(e.id, {"scores": {"block_ln": [4, 4]}, "total": [4, 4], "feedback": False, "received_only": True})
        else:
            q.failed(e.id, EVIL * 100 if student == "eve" else "autograde: Traceback (/home/teacher/tinygpt/x)")
    _add(q, "bob", "head", 4)
    _add(q, "alice", "multihead", 5)
    q.close()
    (course / "nbgrader_config.py").write_text("c = get_config()\nc.GradingService.received_only = ['exam']\n")
    return course


@pytest.fixture(scope="module")
def serve(hub):
    """serve(course, **make_app kwargs) -> the service's base URL, each on a port of its own, in a
    thread with its own event loop."""
    loops = []

    def start(course, teachers=("teacher",), received_only=None):
        received = received_only            # None: the course's config, read again as it changes (as the hub runs it)
        ready, where = threading.Event(), {}

        def run():
            asyncio.set_event_loop(asyncio.new_event_loop())
            auth = web.HubOAuth(api_url=hub, api_token="service-token", oauth_client_id="service-grading",
                                access_scopes={SCOPE}, cache_max_age=0, hub_prefix="/hub/",
                                oauth_redirect_uri="http://127.0.0.1/services/grading/oauth_callback")
            app = web.make_app(course, teachers, received, hub_auth=auth, prefix="/services/grading/")
            server = app.listen(0, "127.0.0.1")
            where["port"] = next(iter(server._sockets.values())).getsockname()[1]
            loops.append(ioloop.IOLoop.current())
            ready.set()
            ioloop.IOLoop.current().start()
        threading.Thread(target=run, daemon=True).start()
        assert ready.wait(30)
        return f"http://127.0.0.1:{where['port']}/services/grading/"
    yield start
    for loop in loops:
        loop.add_callback(loop.stop)


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args, **kwargs):
        return None


def get(url, token=None):
    """(status, headers, body text) of a GET, redirects not followed."""
    req = urllib.request.Request(url, headers={"Authorization": f"token {token}"} if token else {})
    try:
        with urllib.request.build_opener(_NoRedirect).open(req, timeout=30) as r:
            return r.status, r.headers, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.headers, e.read().decode()


def mine(base, token):
    status, headers, body = get(base + "api/mine", token)
    assert status == 200, body
    assert headers["Content-Type"].startswith("application/json")
    return json.loads(body)


@pytest.fixture(scope="module")
def base(course, serve):
    return serve(course)


def test_a_learner_sees_their_own_submissions_only(base):
    alice = mine(base, "alice-token")
    assert alice["user"] == "alice"
    assert set(alice["assignments"]) == {"head", "block", "gpt", "multihead"}
    head = alice["assignments"]["head"]
    assert head["state"] == "graded" and head["total"] == [3, 5] and head["feedback"] is True
    assert head["scores"] == {"head_shapes": [2, 2], "head_mask": [1, 3]}
    assert alice["assignments"]["multihead"] == {"state": "queued", "submitted": STAMP.format(5), "attempts": 0,
                                                 "place": 2}                  # behind bob's head
    bob = mine(base, "bob-token")
    assert bob == {"user": "bob", "assignments": {"head": {"state": "queued", "submitted": STAMP.format(4),
                                                           "attempts": 0, "place": 1}}}
    # the user is the hub's, never one the request names
    status, _, body = get(base + "api/mine?student=bob&user=bob", "alice-token")
    assert json.loads(body)["user"] == "alice"
    assert mine(base, "teacher-token") == {"user": "teacher", "assignments": {}}


def test_a_failure_is_the_teachers_a_rate_limit_the_learners(base):
    gpt = mine(base, "alice-token")["assignments"]["gpt"]
    assert gpt == {"state": "flagged", "submitted": STAMP.format(2), "attempts": 1}, gpt   # no reason, no path


def test_an_exam_shows_received_only(course, base, serve):
    block = mine(base, "alice-token")["assignments"]["block"]
    assert block == {"state": "received", "submitted": STAMP.format(1)}
    # an exam of the course's config (c.GradingService.received_only): "received" while it waits too
    q = Queue(str(course / QUEUE_FILE), per_minute=None, per_day=None)
    _add(q, "dan", "exam", 6)
    q.close()
    TOKENS["dan-token"] = {"kind": "user", "name": "dan", "scopes": [SCOPE]}
    assert mine(base, "dan-token")["assignments"] == {"exam": {"state": "received", "submitted": STAMP.format(6)}}
    # the defence switched off: the exam's setting not read, its place shows
    off = serve(course, received_only=())
    assert mine(off, "dan-token")["assignments"]["exam"]["state"] == "queued"


def test_without_access_to_the_service_nothing_is_shown(base):
    status, headers, _ = get(base + "api/mine")             # no token, no cookie: to the hub's OAuth
    assert status == 302 and "/hub/api/oauth2/authorize" in headers["Location"], headers
    for token in ("carol-elsewhere", "culler-token"):      # another service's scope; not a user
        status, _, body = get(base + "api/mine", token)
        assert status == 403, (token, body)


def test_the_teachers_page_is_refused_to_learners(course, base, serve):
    status, _, body = get(base, "alice-token")
    assert status == 403 and "eve" not in body
    status, headers, page = get(base, "teacher-token")
    assert status == 200 and headers["Content-Type"].startswith("text/html")
    assert "default-src 'none'" in headers["Content-Security-Policy"]
    assert "Flagged, not graded (2)" in page and "eve" in page and "3/5" in page and "received only" in page
    # the defence switched off: alice among the teachers
    assert get(serve(course, teachers=("teacher", "alice")), "alice-token")[0] == 200


def test_the_teachers_page_escapes_and_bounds_learner_made_text(base, monkeypatch):
    page = get(base, "teacher-token")[2]
    assert "<script" not in page and "<img" not in page
    assert "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt;" in page
    assert page.count("&lt;script&gt;") <= web.TEXT_LIMIT // len(EVIL) + 1         # bounded, not 100 copies
    # the defence switched off: not escaped
    monkeypatch.setattr(web.html, "escape", lambda text, quote=True: text)
    assert "<script>alert('x')</script>" in get(base, "teacher-token")[2]


def test_the_queue_is_only_read(course, tmp_path, serve):
    q = web.open_queue(str(course))
    with pytest.raises(sqlite3.OperationalError, match="readonly"):
        q._db.execute("DELETE FROM entries")
    q.close()
    assert web.open_queue(str(tmp_path)) is None                    # no queue yet: nothing made
    assert not (tmp_path / QUEUE_FILE).exists()
    assert mine(serve(tmp_path), "alice-token") == {"user": "alice", "assignments": {}}
    (tmp_path / QUEUE_FILE).write_bytes(b"not a queue" * 100)        # another file: refused, left as it is
    assert get(serve(tmp_path), "alice-token")[0] == 403
    assert get(serve(tmp_path) + "api/mine", "alice-token")[0] == 503
    assert (tmp_path / QUEUE_FILE).read_bytes() == b"not a queue" * 100


# --- the lab extension's side: hub/labextension/grading.js shows these answers as text lines

def grading_js(script, data):
    """Run `script` under node with hub/labextension/grading.js as `grading` and `data` as `data`."""
    from test_hints import run_node             # node, hints.js as `hints`, data on stdin
    from tinygpt_course.testing.course import REPO
    return run_node(f"const grading = require({json.dumps(str(REPO / 'hub/labextension/grading.js'))});" + script,
                    data)


def test_the_lab_panel_shows_the_answer_as_bounded_text(base):
    alice = mine(base, "alice-token")
    shown = grading_js("console.log(JSON.stringify({pending: grading.pending(data), lines: Object.fromEntries("
                       "Object.entries(grading.assignments(data)).map(([n, v]) => [n, grading.lines(n, v)])),"
                       "urls: ['/hub/', '/base/hub/', '', null].map(grading.serviceUrl)}))", alice)
    assert shown["pending"] is True                                          # multihead waits: it polls on
    assert shown["urls"] == ["/services/grading/", "/base/services/grading/", None, None]
    lines = shown["lines"]
    assert lines["head"] == ["head: graded: 3/5 (feedback: Assignment List, fetch feedback)",
                             "  head_mask: 1/3", "  head_shapes: 2/2"]
    assert lines["block"] == ["block: received"]                             # an exam's: nothing more
    assert lines["multihead"] == ["multihead: queued, place 2"]
    assert lines["gpt"] == ["gpt: could not be graded automatically: your teacher will look at it"]
    # forged answers: bounded, control characters shown as "?", a received one never lists scores
    forged = {"assignments": {"\u001b[2J" + "x" * 500: {"state": "graded", "total": ["<b>", None],
                                                         "scores": {f"c{i}": [1, 1] for i in range(500)}},
                              "exam": {"state": "received", "scores": {"a": [1, 1]}, "total": [1, 1]},
                              "odd": "not a view"}}
    out = grading_js("console.log(JSON.stringify(Object.entries(grading.assignments(data))"
                     ".map(([n, v]) => grading.lines(n, v))))", forged)
    assert out[0][0] == "?[2J" + "x" * 96 + ": graded: ?/?" and len(out[0]) == 1 + 50
    assert out[1] == ["exam: received"] and out[2] == ["odd: unknown"]


def test_an_exam_set_after_the_page_started_is_received_only(tmp_path, serve):
    """The hub starts the page before the teacher's first log-in makes the course folder: an exam
    listed in nbgrader_config.py later is hidden from then on, with no restart."""
    q = Queue(str(tmp_path / QUEUE_FILE), per_minute=None, per_day=None)
    _add(q, "dan", "quiz", 7)
    q.close()
    TOKENS["dan-token"] = {"kind": "user", "name": "dan", "scopes": [SCOPE]}
    page, fixed = serve(tmp_path), serve(tmp_path, received_only=())       # fixed: the config read once, at start
    assert mine(page, "dan-token")["assignments"]["quiz"]["state"] == "queued"     # no config yet: not an exam
    (tmp_path / "nbgrader_config.py").write_text("c = get_config()\nc.GradingService.received_only = ['quiz']\n")
    assert mine(page, "dan-token")["assignments"] == {"quiz": {"state": "received", "submitted": STAMP.format(7)}}
    assert mine(fixed, "dan-token")["assignments"]["quiz"]["state"] == "queued"  # the defence off: its place shows
    (tmp_path / "nbgrader_config.py").write_text("c = get_config(\n")          # caught mid-edit: as it was
    assert mine(page, "dan-token")["assignments"]["quiz"]["state"] == "received"


def test_a_held_submission_says_when_with_the_date_unless_today():
    """A day's limit holds until tomorrow: its time alone ("graded from 09:12") would say this morning."""
    out = grading_js("const now = Date.now() / 1000; console.log(JSON.stringify(["
                     "grading.lines('a', {state: 'held', not_before: now + 60})[0],"
                     "grading.lines('b', {state: 'held', not_before: now + 2 * 86400})[0],"
                     "grading.lines('c', {state: 'refused', not_before: now + 2 * 86400})[0],"
                     "new Date((now + 2 * 86400) * 1000).toLocaleDateString(),"
                     "new Date((now + 60) * 1000).toLocaleDateString(),"
                     "new Date((now + 60) * 1000).toDateString() === new Date().toDateString()]))", {})
    today, later, refused, day_after, this_day, same_day = out
    assert later.startswith("b: waiting") and day_after in later, later
    assert refused.startswith("c: not graded") and day_after in refused, refused
    if same_day:                                            # not a minute before midnight
        assert today.startswith("a: waiting") and this_day not in today, today
