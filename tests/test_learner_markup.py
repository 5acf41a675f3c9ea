"""Issue 20 item 5 in real Chromium: learner output is data, never script, where a teacher or a
learner opens it. A right answer whose cell also displays a <script>, an <img onerror>, a
Javascript output, a forged image/png, an SVG and markdown output, in a notebook to which a
markdown cell and a raw HTML cell with script were added, is graded by the real `nbgrader
autograde` and `generate_feedback`; a real formgrader (the teacher's Jupyter server with
nbgrader's extension, on the course) shows the submission, and the feedback page is opened in
the same Jupyter origin. Each probe, if it ran, would record itself and POST /api/kernels with
the teacher's _xsrf cookie (the issue's attack: a kernel started as the teacher). With
SanitizeOutputs the probes neither run nor reach the API, and the plots still show; with it
switched off they run, and the POST starts a kernel."""
import importlib
import json
import os
import sqlite3
import subprocess
import sys

import nbformat
import pytest

from tinygpt_course.testing import catalogue
from tinygpt_course.testing.course import free_port, make_course, nbgrader, scores
from tinygpt_course.testing.notebooks import with_answer

pytest_plugins = [f"{__package__}.conftest_browser" if __package__ else "conftest_browser"]
browser = importlib.import_module(pytest_plugins[0])
TOKEN = browser.TOKEN

TEST_CONFIG = "c.RobustExecute.timeout = 60\nc.IndependentChecks.timeout = 60\n"
OFF = ("c.Autograde.autograde_preprocessors = [p for p in c.Autograde.autograde_preprocessors if p is not SanitizeOutputs]\n"
       "c.GenerateFeedback.preprocessors = [p for p in c.GenerateFeedback.preprocessors if p is not SanitizeOutputs]\n")
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


def grade(course):
    right = catalogue.answer("multihead", "01_right_comprehension").code
    nb = with_answer(course / "release" / "multihead" / "multihead.ipynb", right + "\n" + PROBES)
    nb.cells.insert(1, nbformat.v4.new_markdown_cell(MARKDOWN_CELL))
    raw = nbformat.v4.new_raw_cell(RAW_CELL)
    raw.metadata["raw_mimetype"] = "text/html"
    nb.cells.insert(2, raw)
    folder = course / "submitted" / "mallory" / "multihead"
    folder.mkdir(parents=True)
    nbformat.write(nb, folder / "multihead.ipynb")
    nbgrader(course, "autograde", "multihead", "--create")
    nbgrader(course, "generate_feedback", "multihead")
    with sqlite3.connect(course / "gradebook.db") as db:
        (submission,) = db.execute("SELECT id FROM submitted_notebook").fetchone()
    return submission


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
    course = make_course(tmp / "course", extra_config=TEST_CONFIG + ("" if request.param else OFF))
    submission = grade(course)
    server = Formgrader(course, tmp)
    try:
        yield {"on": request.param, "course": course, "server": server, "submission": submission}
    finally:
        server.close()


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
