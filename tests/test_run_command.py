"""The README's run command starts JupyterLab on the lesson."""
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from conftest import REPO


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_course_lab_opens_the_lesson(tmp_path):
    port, token = free_port(), "t0ken"
    env = dict(os.environ, TINYGPT_VENV=sys.prefix, JUPYTER_RUNTIME_DIR=str(tmp_path))
    log = open(tmp_path / "lab.log", "w+")
    proc = subprocess.Popen(["bash", str(REPO / "course.sh"), "lab", "--no-browser", f"--port={port}",
                             f"--ServerApp.token={token}", "--ServerApp.ip=127.0.0.1"],
                            cwd=tmp_path, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline, body = time.time() + 180, None
        while time.time() < deadline and body is None:
            time.sleep(2)
            assert proc.poll() is None, Path(log.name).read_text()[-3000:]
            try:
                url = f"http://127.0.0.1:{port}/api/contents/release/multihead/multihead.ipynb?token={token}"
                body = urllib.request.urlopen(url, timeout=5).read().decode()
            except OSError:
                pass
        assert body and '"MultiHead' in body.replace("class MultiHead", '"MultiHead')

        page = urllib.request.urlopen(f"http://127.0.0.1:{port}/?token={token}", timeout=10)
        assert page.url.split("?")[0].endswith("/lab/tree/release/multihead/multihead.ipynb"), page.url
        overrides = Path(sys.prefix, "share/jupyter/lab/settings/overrides.json").read_text()
        assert '"fetchNews": "false"' in overrides
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)
