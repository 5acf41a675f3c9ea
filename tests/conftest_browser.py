"""Fixtures for the real-browser test: a JupyterLab 4 server on a temp copy of the student
lesson, and Debian's Chromium driven by Playwright. Loaded by tests/test_browser.py through
`pytest_plugins`; everything it starts is stopped in `finally`."""
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request

import pytest

from tinygpt_course.testing.course import load_script, REPO as ROOT, free_port

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
TOKEN = "tinygpt-browser-test"
SCREENSHOTS = ROOT / "screenshots"

# JupyterLab user settings for the test only (JUPYTERLAB_SETTINGS_DIR, the venv is untouched):
# no news pop-up over the page, and every cell attached to the page so selectors find it.
LAB_SETTINGS = {
    "@jupyterlab/apputils-extension/notification": {"fetchNews": "false", "checkForUpdates": False},
    "@jupyterlab/notebook-extension/tracker": {"windowingMode": "none"},
}


def course_lab_overrides():
    """The JupyterLab overrides the course gives learners and teachers (hub/roles.py LAB_OVERRIDES:
    on a hub and with course.sh): among them, widget state saved into the notebook."""
    roles = load_script(ROOT / "hub" / "roles.py", "tinygpt_hub_roles")
    return roles.LAB_OVERRIDES


def browser_skip_reason():
    """Skip only where the browser is missing and we are not in CI (CI=true must run it)."""
    if not os.path.exists(CHROMIUM) and os.environ.get("CI", "").lower() != "true":
        return f"{CHROMIUM} is missing (apt-get install chromium, or run `bash course.sh test`)"
    return None


def wait_for_server(url, proc, log, timeout=120):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"jupyter lab exited with {proc.returncode}:\n{log.read_text()}")
        try:
            with urllib.request.urlopen(url, timeout=5) as r:
                if r.status == 200:
                    return
        except OSError:
            time.sleep(0.5)
    raise TimeoutError(f"jupyter lab did not answer {url} in {timeout}s:\n{log.read_text()}")


def stop(proc, base):
    """End the server and its kernels (which run in sessions of their own), politely first."""
    if proc.poll() is None:
        try:
            urllib.request.urlopen(urllib.request.Request(
                f"{base}/api/shutdown?token={TOKEN}", method="POST"), timeout=10).close()
            proc.wait(timeout=30)                      # the server shuts its kernels down
        except (OSError, subprocess.TimeoutExpired):
            pass
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=20)
        except (subprocess.TimeoutExpired, ProcessLookupError):
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait(timeout=20)


def skip_without_browser():
    reason = browser_skip_reason()
    if reason:
        pytest.skip(reason)


@pytest.fixture
def screenshots():
    SCREENSHOTS.mkdir(exist_ok=True)
    return SCREENSHOTS


@pytest.fixture
def lab(tmp_path):
    """JupyterLab serving a fresh copy of release/multihead; yields the lesson's URL."""
    skip_without_browser()
    lesson = tmp_path / "lesson"
    shutil.copytree(ROOT / "release" / "multihead", lesson)
    settings = tmp_path / "lab-user-settings"
    for name, values in LAB_SETTINGS.items():
        path = settings / f"{name}.jupyterlab-settings"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(values))
    app_settings = tmp_path / "lab-app-settings"     # the course's own overrides (hub/roles.py)
    app_settings.mkdir()
    (app_settings / "overrides.json").write_text(json.dumps(course_lab_overrides()))
    bin_dir = os.path.dirname(sys.executable)
    env = dict(os.environ, PATH=bin_dir + os.pathsep + os.environ.get("PATH", ""),
               JUPYTERLAB_SETTINGS_DIR=str(settings),
               JUPYTERLAB_WORKSPACES_DIR=str(tmp_path / "lab-workspaces"),
               JUPYTER_CONFIG_DIR=str(tmp_path / "jupyter-config"),   # no stray user config,
               JUPYTER_DATA_DIR=str(tmp_path / "jupyter-data"),       # kernels or extensions
               JUPYTER_RUNTIME_DIR=str(tmp_path / "jupyter-runtime"))
    port = free_port()
    log = tmp_path / "jupyter-lab.log"
    cmd = [sys.executable, "-m", "jupyterlab", "--no-browser", "--allow-root",
           f"--port={port}", "--ip=127.0.0.1", "--ServerApp.port_retries=0",
           f"--ServerApp.token={TOKEN}", f"--ServerApp.root_dir={lesson}",
           f"--LabApp.app_settings_dir={app_settings}"]
    with open(log, "wb") as out:
        proc = subprocess.Popen(cmd, cwd=lesson, env=env, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_for_server(f"{base}/api/status?token={TOKEN}", proc, log)
        yield f"{base}/lab/tree/multihead.ipynb?token={TOKEN}"
    finally:
        stop(proc, base)


@pytest.fixture
def page(request):
    """A Chromium page (Debian's browser: `playwright install` cannot download one here), with
    the test module's CHROMIUM_EXTRA_ARGS if it has them. A failing test leaves
    screenshots/failed_<test>.png."""
    skip_without_browser()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM,
                                    args=CHROMIUM_ARGS + list(getattr(request.module, "CHROMIUM_EXTRA_ARGS", ())))
        try:
            context = browser.new_context(viewport={"width": 1400, "height": 1000})
            context.set_default_timeout(60_000)
            page = context.new_page()
            failed_before = request.session.testsfailed
            yield page
            if request.session.testsfailed > failed_before:   # leave a picture for CI logs
                page.screenshot(path=SCREENSHOTS / f"failed_{request.node.name}.png")
        finally:
            browser.close()
