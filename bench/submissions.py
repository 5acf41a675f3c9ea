"""Make a throw-away course with a class of multihead submissions (used by grade_class.py and tests).

The answers are derived from the reference answer in source/ (the cell with grade_id
'multihead'), so they follow the lesson when it changes; a change that breaks a derivation
raises instead of silently producing a right answer under a wrong name.
"""
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

ASSIGNMENT = "multihead"
ANSWER_ID = "multihead"
REPO = Path(__file__).resolve().parent.parent


def _answer_cell(nb):
    for cell in nb["cells"]:
        if cell.get("metadata", {}).get("nbgrader", {}).get("grade_id") == ANSWER_ID:
            return cell
    raise LookupError(f"no cell with grade_id {ANSWER_ID!r}")


def reference_answer(source_nb_path):
    """The reference answer: the solution cell with the BEGIN/END SOLUTION marker lines dropped."""
    nb = json.loads(Path(source_nb_path).read_text())
    lines = "".join(_answer_cell(nb)["source"]).splitlines()
    return "\n".join(ln for ln in lines if not re.match(r"\s*### (BEGIN|END) SOLUTION", ln))


def _replace(text, pattern, repl, name):
    new, n = re.subn(pattern, repl, text)
    if n == 0:
        raise ValueError(f"cannot derive the {name!r} answer: {pattern!r} not in the reference")
    return new


def answers(reference):
    """Answer source per kind; None means the released stub (unanswered)."""
    return {
        "right": reference,
        # heads added up instead of laid side by side: [B, T, 16] reaches a Linear(32, 32)
        "summed": _replace(reference, r"torch\.cat\(\[(.*?)\],\s*dim=-1\)", r"sum(\1)", "summed"),
        # a plain list: the heads' weights are invisible to parameters()
        "plainlist": _replace(reference, r"nn\.ModuleList\((\[.*?\])\)", r"\1", "plainlist"),
        "unanswered": None,
        # a notebook that cannot be read at all
        "notjson": None,
        # an answer that dies when the cell runs
        "raises": "raise RuntimeError('broken submission')\n",
    }


KINDS = ("right", "summed", "plainlist", "unanswered")   # the mix the benchmark cycles through


def make_course(dest, course_src=REPO):
    """Copy nbgrader_config.py and source/ to dest and generate the assignment there."""
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    shutil.copy(Path(course_src) / "nbgrader_config.py", dest / "nbgrader_config.py")
    shutil.copytree(Path(course_src) / "source", dest / "source", dirs_exist_ok=True)
    subprocess.run([sys.executable, "-m", "nbgrader", "generate_assignment", ASSIGNMENT, "--force"],
                   cwd=dest, check=True, capture_output=True, env=_env())
    return dest


def _env():
    env = dict(os.environ)
    # nbgrader runs `alembic` by name: make this interpreter's bin directory come first
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    return env


def submit(course, student, kind):
    """Write submitted/<student>/multihead/multihead.ipynb: the release notebook with an answer."""
    course = Path(course)
    release = course / "release" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb"
    out = course / "submitted" / student / ASSIGNMENT / f"{ASSIGNMENT}.ipynb"
    out.parent.mkdir(parents=True, exist_ok=True)
    if kind == "notjson":
        out.write_text('{"cells": [ this is not json')
        return out
    nb = json.loads(release.read_text())
    src = answers(reference_answer(course / "source" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb"))[kind]
    if src is not None:
        _answer_cell(nb)["source"] = src
    out.write_text(json.dumps(nb, indent=1))
    return out


def make_class(course, n, kinds=KINDS):
    """n submissions cycling through kinds; returns {student: kind}."""
    roster = {f"s{i:03d}_{kinds[i % len(kinds)]}": kinds[i % len(kinds)] for i in range(n)}
    for student, kind in roster.items():
        submit(course, student, kind)
    return roster


def env():
    return _env()
