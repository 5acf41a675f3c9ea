"""Issue 20 item 5 in real Chromium: learner output is data, never script, where a teacher or a
learner opens it. A right answer whose cell also displays a <script>, an <img onerror>, a
Javascript output, a forged image/png, an SVG and markdown output, in a notebook to which a
markdown cell and a raw HTML cell with script were added, is graded by the real `nbgrader
autograde` and `generate_feedback`; a real formgrader (the teacher's Jupyter server with
nbgrader's extension, on the course) shows the submission, and the feedback page is opened in
the same Jupyter origin. Each probe, if it ran, would record itself and POST /api/kernels with
the teacher's _xsrf cookie (the issue's attack: a kernel started as the teacher). With
SanitizeOutputs the probes neither run nor reach the API, and the plots still show; with it
switched off they run, and the POST starts a kernel.

Issue 27 item 5, in the same graded class: trudy's right answer also displays pictures from the
teacher's own server (/logout, /hub/logout), a picture and a styled background from an outside
address (a listener on 127.0.0.2 this test runs), and a link; and her MultiHead() raises, in the
re-run only, a message holding an <img onerror>, a markdown picture from the outside address and a
markdown link, which RecordFlags quotes into the gradebook comment the feedback page renders as
markdown. Every request the page makes is recorded: with the defences, none goes to the listener
or to a path the learner chose, no handler runs, no link of hers is there and the teacher is still
logged in; switched off (the comment quoted as it is, SanitizeOutputs out), the listener is hit,
/logout is requested and the teacher is logged out."""
import importlib
import json
import os
import sqlite3
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

import nbformat
import pytest

from tinygpt_course.testing import catalogue
from tinygpt_course.testing.course import free_port, gradebook_scores, make_course, nbgrader, scores
from tinygpt_course.testing.notebooks import with_answer

pytest_plugins = [f"{__package__}.conftest_browser" if __package__ else "conftest_browser"]
browser = importlib.import_module(pytest_plugins[0])
TOKEN = browser.TOKEN

TEST_CONFIG = "c.RobustExecute.timeout = 60\nc.IndependentChecks.timeout = 60\n"
OFF = ("c.Autograde.autograde_preprocessors = [p for p in c.Autograde.autograde_preprocessors if p is not SanitizeOutputs]\n"
       "c.GenerateFeedback.preprocessors = [p for p in c.GenerateFeedback.preprocessors if p is not SanitizeOutputs]\n"
       "import tinygpt_course.grading.independent as _independent\n"
       "_independent.shown = str    # the comment quotes the learner's message as it is\n")
# what each probe would do in the teacher's page: say it ran, and start a kernel as the teacher
PROBE = ("(window.__probes=window.__probes||[]).push('NAME');var m=document.cookie.match(/_xsrf=([^;]+)/);"
         "fetch('/api/kernels',{method:'POST',headers:{'X-XSRFToken':m?m[1]:''},body:'{}'});")
PROBES = f'''
from IPython.display import HTML, Javascript, display
_probe = {PROBE!r}
_attr = lambda name: _probe.replace("NAME", name).replace("'", "&#39;")
display(HTML("<script>" + _probe.replace("NAME", "html-script") + "</script>"))
display(HTML("<img src='/no-such-picture.png' onerror='" + _attr("img-onerror") + "'>"))
display(Javascript(_probe.replace("NAME", "javascript")))
display({{"image/png": "x' onerror='" + _attr("forged-png") + "' x='", "text/plain": "a picture"}}, raw=True)
display({{"image/svg+xml": "<svg xmlns='http://www.w3.org/2000/svg' onload='" + _attr("svg-onload") + "'></svg>"}}, raw=True)
display({{"text/markdown": "<img src='/no-such.png' onerror='" + _attr("markdown-output") + "'>"}}, raw=True)
'''
MARKDOWN_CELL = (f"A note from the learner <script>{PROBE.replace('NAME', 'markdown-script')}</script>\n\n"
                 f"<img src='/no-such.png' onerror=\"{PROBE.replace('NAME', 'markdown-img')}\">")
RAW_CELL = f"<script>{PROBE.replace('NAME', 'raw-html')}</script>"


# The listener that stands for an outside address is on 127.0.0.2, a local address: Chromium's
# Local Network Access would block a request to it from the feedback page (served here by
# page.route, so of no known address, taken as public), which a real outside address is not.
# Switched off, the browser asks that address as it would any other: what reaches the listener is
# what the page requests.
CHROMIUM_EXTRA_ARGS = ["--disable-features=LocalNetworkAccessChecks,PrivateNetworkAccessRespectPreflightResults,"
                       "BlockInsecurePrivateNetworkRequests,PrivateNetworkAccessSendPreflights"]
# paths of the teacher's own server a learner's picture would have the teacher's browser fetch
LEARNER_PATHS = ("/logout", "/hub/logout")


def fetching(outside):
    """trudy's displays: pictures that fetch (the teacher's log-out, an outside beacon), a
    background from outside, a link; and, in the re-run only (no IPython there), a MultiHead()
    that raises a message with an <img onerror>, a markdown picture from outside and a markdown link."""
    marker = "(window.__probes=window.__probes||[]).push('comment-img')"
    message = (f"<img src=/no-such.png onerror=\"{marker}\"> ![beacon]({outside}/comment-beacon.png) "
               f"[see the answer]({outside}/comment-link)")
    return f'''
import builtins as _builtins
from IPython.display import HTML, display
display(HTML('<img src="/logout"><img src="/hub/logout" alt="hub">'
             '<img src="{outside}/beacon.png" alt="beacon"><div style="background:url({outside}/bg.png)">styled</div>'
             '<a href="{outside}/link">the learner link words</a>'))
_Right = MultiHead


class MultiHead(_Right):
    def __init__(self, *args, **kwargs):
        if not hasattr(_builtins, "get_ipython"):       # the independent re-run
            raise ValueError({message!r})
        super().__init__(*args, **kwargs)
'''


def grade(course, outside):
    right = catalogue.answer("multihead", "01_right_comprehension").code
    release = course / "release" / "multihead" / "multihead.ipynb"
    nb = with_answer(release, right + "\n" + PROBES)
    nb.cells.insert(1, nbformat.v4.new_markdown_cell(MARKDOWN_CELL))
    raw = nbformat.v4.new_raw_cell(RAW_CELL)
    raw.metadata["raw_mimetype"] = "text/html"
    nb.cells.insert(2, raw)
    for student, notebook in (("mallory", nb), ("trudy", with_answer(release, right + "\n" + fetching(outside)))):
        folder = course / "submitted" / student / "multihead"
        folder.mkdir(parents=True)
        nbformat.write(notebook, folder / "multihead.ipynb")
    nbgrader(course, "autograde", "multihead", "--create")
    nbgrader(course, "generate_feedback", "multihead")
    with sqlite3.connect(course / "gradebook.db") as db:
        return dict(db.execute("SELECT submission.student_id, submitted_notebook.id FROM submitted_notebook "
                               "JOIN submitted_assignment AS submission ON submission.id = submitted_notebook.assignment_id"))


class Outside:
    """A listener on another address (127.0.0.2): what the 'outside' of the machine would see."""

    def __init__(self):
        self.hits = []
        hits = self.hits

        class Record(BaseHTTPRequestHandler):
            def do_GET(self):
                hits.append(self.path)
                self.send_response(204)
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.2", 0), Record)
        self.base = f"http://127.0.0.2:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


class Formgrader:
    """The teacher's Jupyter server with nbgrader's formgrader, on the course (its config)."""

    def __init__(self, course, tmp_path):
        venv_etc = os.path.join(sys.prefix, "etc", "tinygpt")
        env = dict(os.environ, PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"],
                   JUPYTER_CONFIG_PATH=f"{venv_etc}/teacher:{venv_etc}/common",
                   JUPYTER_CONFIG_DIR=str(tmp_path / "jupyter-config"), JUPYTER_DATA_DIR=str(tmp_path / "jupyter-data"),
                   JUPYTER_RUNTIME_DIR=str(tmp_path / "jupyter-runtime"))
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.log = tmp_path / "formgrader.log"
        with open(self.log, "wb") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "jupyter_server", "--no-browser", "--allow-root", f"--port={self.port}",
                 "--ip=127.0.0.1", "--ServerApp.port_retries=0", f"--ServerApp.token={TOKEN}",
                 f"--ServerApp.root_dir={course}"],
                cwd=course, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        browser.wait_for_server(f"{self.base}/api/status?token={TOKEN}", self.proc, self.log)

    def kernels(self):
        import urllib.request
        with urllib.request.urlopen(f"{self.base}/api/kernels?token={TOKEN}", timeout=10) as r:
            return json.loads(r.read())

    def close(self):
        browser.stop(self.proc, self.base)


def visit(page, server, url, feedback_html=None):
    """Open `url` in the teacher's browser session; (probes that ran, POSTs to /api/kernels and
    their statuses, PNG pictures shown)."""
    posts = []
    page.on("requestfinished", lambda r: posts.append((r.url, r.response().status))
            if r.method == "POST" and "/api/kernels" in r.url else None)
    page.goto(f"{server.base}/formgrader?token={TOKEN}")         # logged in: the _xsrf cookie is set
    if feedback_html is not None:       # the feedback page, served from the Jupyter origin itself
        page.route(url, lambda route: route.fulfill(body=feedback_html, content_type="text/html"))
    page.goto(url)
    page.wait_for_load_state("networkidle")
    probes = page.evaluate("window.__probes || []")
    pngs = page.locator("img[src^='data:image/png;base64,']").count()
    return probes, posts, pngs


@pytest.fixture(scope="module", params=[True, False], ids=["sanitized", "defence_off"])
def graded(request, tmp_path_factory):
    browser.skip_without_browser()
    tmp = tmp_path_factory.mktemp("markup")
    outside = Outside()
    try:
        course = make_course(tmp / "course", extra_config=TEST_CONFIG + ("" if request.param else OFF))
        submissions = grade(course, outside.base)
        server = Formgrader(course, tmp)
        try:
            yield {"on": request.param, "course": course, "server": server, "submission": submissions["mallory"],
                   "submissions": submissions, "outside": outside}
        finally:
            server.close()
    finally:
        outside.close()


def recorded(page, server, url, feedback_html=None):
    """Open `url` as visit() does, recording every request the page makes; (probes that ran,
    the requests' URLs, the hosts the page's own <head> loads its scripts and styles from)."""
    requests = []
    page.on("request", lambda r: requests.append(r.url))
    probes, _, _ = visit(page, server, url, feedback_html)
    template = page.evaluate("[...document.head.querySelectorAll('script[src], link[href]')]"
                             ".map(e => new URL(e.src || e.href, location.href).host)")
    return probes, requests, set(template)


def logged_in(page, server):
    """Whether the teacher's browser session still reaches the server's API (no token: the cookie)."""
    return page.request.get(f"{server.base}/api/contents", max_redirects=0).status == 200


def assert_no_request_of_the_learner(graded, page, url, feedback_html=None):
    server, outside = graded["server"], graded["outside"]
    del outside.hits[:]
    probes, requests, template = recorded(page, server, url, feedback_html)
    own = urlsplit(server.base).netloc
    learner = [u for u in requests
               if urlsplit(u).path in LEARNER_PATHS or urlsplit(u).netloc == urlsplit(outside.base).netloc]
    if graded["on"]:
        assert probes == [] and outside.hits == [] and learner == [], (probes, outside.hits, learner)
        # the page's own server, or where the page's own <head> loads its scripts from (MathJax)
        assert all(urlsplit(u).scheme == "data" or urlsplit(u).netloc in {own} | template for u in requests), requests
        assert page.locator(f"a[href^='{outside.base}']").count() == 0, "the learner's link is there"
        assert logged_in(page, server), "the teacher was logged out"
    else:
        assert outside.hits and any(urlsplit(u).path == "/logout" for u in learner), (outside.hits, learner)
        assert not logged_in(page, server), "the picture of /logout did not log the teacher out"
    return probes


def test_trudy_is_flagged_with_her_message_in_the_comment(graded):
    (comment,) = [text for key, text in gradebook_scores(graded["course"]).items()
                  if key[0] == "trudy" and key[-1] == "comment" and text]
    assert comment.startswith("FLAGGED") and "![beacon](" in comment, comment


def test_formgrader_submission_view_makes_no_request_of_the_learner(graded, page):
    server = graded["server"]
    assert_no_request_of_the_learner(graded, page, f"{server.base}/formgrader/submissions/{graded['submissions']['trudy']}/")
    assert page.locator("text=styled").count() >= 1           # the page is trudy's submission


def test_feedback_page_makes_no_request_of_the_learner(graded, page):
    html = (graded["course"] / "feedback" / "trudy" / "multihead" / "multihead.html").read_text()
    probes = assert_no_request_of_the_learner(graded, page, f"{graded['server'].base}/feedback-probe/multihead.html",
                                              feedback_html=html)
    if graded["on"]:
        assert page.locator("code", has_text="![beacon](").count() >= 1, "the comment is not shown as its text"
        assert page.locator("text=the learner link words").count() >= 1      # a link keeps its text
    else:
        assert "comment-img" in probes, probes


def test_the_probe_costs_no_point(graded):
    got = scores(graded["course"], "multihead", "mallory")
    assert all(v == got[k] for k, v in catalogue.answer("multihead", "01_right_comprehension").expect.items()), got


def test_formgrader_submission_view_runs_no_learner_script(graded, page):
    server = graded["server"]
    probes, posts, pngs = visit(page, server, f"{server.base}/formgrader/submissions/{graded['submission']}/")
    assert page.locator("text=A note from the learner").count() >= 1     # the page is the submission
    if graded["on"]:
        assert probes == [] and posts == [] and server.kernels() == [], (probes, posts)
        assert pngs >= 1, "the plots and the explorer's picture no longer show"
    else:
        assert {"html-script", "img-onerror", "markdown-script", "markdown-img"} <= set(probes), probes
        assert any(status == 201 for _, status in posts), posts      # a kernel, as the teacher


def test_feedback_page_runs_no_learner_script(graded, page):
    server = graded["server"]
    html = (graded["course"] / "feedback" / "mallory" / "multihead" / "multihead.html").read_text()
    probes, posts, pngs = visit(page, server, f"{server.base}/feedback-probe/multihead.html", feedback_html=html)
    if graded["on"]:
        assert probes == [] and posts == [] and server.kernels() == [], (probes, posts)
        assert pngs >= 1, "the plots and the explorer's picture no longer show in the feedback"
    else:
        assert {"html-script", "img-onerror", "markdown-script", "markdown-img"} <= set(probes), probes
        assert any(status == 201 for _, status in posts), posts
