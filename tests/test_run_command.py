"""The README's run commands: `course.sh lab` (learner) and `course.sh teach` (teacher) start
JupyterLab on START.md; only the teacher's has nbgrader's Formgrader and Create Assignment.
`course.sh torch-index` asks PyTorch's CPU index for torch only where it answers."""
import http.server
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from tinygpt_course.testing.course import REPO, free_port

START = "notebooks/START.md"
TEACHER_LAB = ("@jupyter/nbgrader:formgrader", "@jupyter/nbgrader:course-list", "@jupyter/nbgrader:create-assignment")


class Lab:
    """`bash course.sh <mode>` on a free port, until the lab answers."""

    def __init__(self, mode, tmp_path):
        self.port, self.token = free_port(), "t0ken"
        env = dict(os.environ, TINYGPT_VENV=sys.prefix, JUPYTER_RUNTIME_DIR=str(tmp_path / mode))
        env.pop("JUPYTER_CONFIG_PATH", None)
        self.log = open(tmp_path / f"{mode}.log", "w+")
        self.proc = subprocess.Popen(
            ["bash", str(REPO / "course.sh"), mode, "--no-browser", f"--port={self.port}",
             f"--ServerApp.token={self.token}", "--ServerApp.ip=127.0.0.1"],
            cwd=tmp_path, env=env, stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline, body = time.time() + 240, None
        while time.time() < deadline and body is None:
            time.sleep(2)
            assert self.proc.poll() is None, Path(self.log.name).read_text()[-3000:]
            try:
                body = self.get(f"/api/contents/{START}")
            except OSError:
                pass
        assert body and "head" in json.loads(body)["content"], "the lab does not serve START.md"

    def get(self, path):
        sep = "&" if "?" in path else "?"
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}{sep}token={self.token}", timeout=10) as r:
            self.last_url = r.url
            return r.read().decode()

    def status(self, path):
        try:
            self.get(path)
            return 200
        except urllib.error.HTTPError as e:
            return e.code

    def page_config(self):
        html = self.get("/lab")
        return json.loads(re.search(r'id="jupyter-config-data"[^>]*>(.*?)</script>', html, re.S).group(1))

    def stop(self):
        os.killpg(self.proc.pid, signal.SIGTERM)
        self.proc.wait(timeout=30)


@pytest.fixture
def lab(tmp_path):
    labs = []

    def start(mode):
        labs.append(Lab(mode, tmp_path))
        return labs[-1]
    yield start
    for lab_ in labs:
        lab_.stop()


def test_course_lab_is_the_learners_lab_on_start(lab):
    learner = lab("lab")
    learner.get("/")
    assert learner.last_url.split("?")[0].endswith(f"/lab/tree/{START}"), learner.last_url
    disabled = learner.page_config()["disabledExtensions"]
    assert all(e in disabled for e in TEACHER_LAB), f"the learner's lab has teacher extensions on: {disabled}"
    assert learner.status("/formgrader") == 404, "the learner's server has the formgrader"
    assert learner.status("/assignments") != 404, "the learner's server lost the Assignment List"
    overrides = Path(sys.prefix, "etc/tinygpt/common/lab-settings/overrides.json").read_text()
    assert '"fetchNews": "false"' in overrides and "Markdown Preview" in overrides


def test_course_teach_has_the_teachers_tools(lab):
    teacher = lab("teach")
    teacher.get("/")
    assert teacher.last_url.split("?")[0].endswith(f"/lab/tree/{START}"), teacher.last_url
    disabled = teacher.page_config()["disabledExtensions"]
    assert not any(e in disabled for e in TEACHER_LAB), f"the teacher's lab lacks teacher extensions: {disabled}"
    assert teacher.status("/formgrader") == 200, "the teacher's server has no formgrader"
    # the formgrader works on this repo's course (nbgrader_config.py at the root)
    assert "multihead" in teacher.get("/formgrader/api/assignments")


def test_torch_index_only_where_it_answers(tmp_path):
    (tmp_path / "torch").mkdir()
    (tmp_path / "torch" / "index.html").write_text("<a href='torch-2.13.0+cpu.whl'>torch</a>")
    handler = lambda *a: http.server.SimpleHTTPRequestHandler(*a, directory=str(tmp_path))  # noqa: E731
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        index = f"http://127.0.0.1:{server.server_address[1]}"
        run = lambda url: subprocess.run(["bash", str(REPO / "course.sh"), "torch-index"], capture_output=True,  # noqa: E731
                                         text=True, env=dict(os.environ, TINYGPT_TORCH_INDEX=url), check=True)
        up = run(index)
        assert up.stdout.strip() == f"--extra-index-url={index}", up
        down = run(f"http://127.0.0.1:{free_port()}/nothing")
        assert down.stdout.strip() == "" and "cannot be reached" in down.stderr, down
    finally:
        server.shutdown()


def test_the_image_recipe_asks_the_same_torch_index():
    """environment.yml (conda, repo2docker, the hub image) gets torch from course.sh's CPU index."""
    default = re.search(r"TORCH_CPU_INDEX=\$\{TINYGPT_TORCH_INDEX:-(\S+)\}", (REPO / "course.sh").read_text()).group(1)
    assert re.search(rf"^\s*-\s*--extra-index-url\s+{re.escape(default)}\s*$",
                     (REPO / "environment.yml").read_text(), re.M), default
