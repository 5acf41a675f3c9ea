"""Shared fixtures: a temporary nbgrader course made from this repository, real nbgrader CLI."""
import os
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent          # nbgrader calls alembic by name: keep it on PATH
SPEC = REPO / "tests" / "data" / "multihead-spec-printout.md"   # the spec's printout, copied in


def run_env():
    env = dict(os.environ)
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    return env


def nbgrader(course, *args, check=True, timeout=1800):
    proc = subprocess.run([str(BIN / "nbgrader"), *args], cwd=course, env=run_env(),
                          capture_output=True, text=True, timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError(f"nbgrader {' '.join(args)} exited {proc.returncode}:\n{proc.stderr[-4000:]}")
    return proc


def make_course(path, assignments=("multihead",), extra_config=""):
    """A course folder: this repo's nbgrader_config.py and source/, assignments generated."""
    path.mkdir(parents=True, exist_ok=True)
    shutil.copy(REPO / "nbgrader_config.py", path / "nbgrader_config.py")
    with open(path / "nbgrader_config.py", "a") as f:
        f.write("\n" + extra_config + "\n")
    for a in assignments:
        shutil.copytree(REPO / "source" / a, path / "source" / a)
        nbgrader(path, "generate_assignment", a, "--force")
    return path


def grade_id(cell):
    return cell.metadata.get("nbgrader", {}).get("grade_id")


def with_answer(notebook_path, answer, grade="multihead"):
    """The notebook with the answer cell's source replaced."""
    nb = nbformat.read(notebook_path, as_version=4)
    for cell in nb.cells:
        if grade_id(cell) == grade:
            cell.source = answer
    return nb


def scores(course, assignment, student, notebook=None):
    from nbgrader.api import Gradebook
    with Gradebook(f"sqlite:///{course}/gradebook.db") as gb:
        nb = gb.find_submission_notebook(notebook or assignment, assignment, student)
        return {g.name: g.score for g in nb.grades}


@pytest.fixture(scope="session")
def course(tmp_path_factory):
    return make_course(tmp_path_factory.mktemp("course"))


# Fast unit tests (seconds, no nbgrader command, no server, no browser) run first; the rest is
# marked slow: `pytest -m "not slow"` runs only the fast ones.
FAST = {"test_sandbox", "test_rerun", "test_repair", "test_gradebook_lock", "test_data", "test_env_pins",
        "test_z2jh_values", "test_exchange_setup", "test_checks", "test_checks_gpt"}


def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.module.__name__.rsplit(".", 1)[-1] not in FAST:
            item.add_marker(pytest.mark.slow)
    items.sort(key=lambda item: item.get_closest_marker("slow") is not None)   # stable: fast first
