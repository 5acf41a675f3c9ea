"""A class of multihead submissions in a throw-away course (bench/grade_class.py and
tests/test_classroom.py).

The answers are derived from the reference answer in source/ (the cell with grade_id
'multihead'), so they follow the lesson when it changes; a change that breaks a derivation
raises instead of silently producing a right answer under a wrong name.
"""
import json
import re
from pathlib import Path

import nbformat

# what bench/grade_class.py reads from here besides the class itself
from .course import (REPO, autograded_notebooks, differences, env, gradebook_scores, make_course,  # noqa: F401
                     nbgrader, totals)
from .notebooks import cell, source_path, with_answer, without_markers

ASSIGNMENT = "multihead"
KINDS = ("right", "summed", "plainlist", "unanswered")
TAMPERED = {"changed": "shapes", "deleted": "causal"}    # the test cells the "tampered" kind edits, deletes   # the mix the benchmark cycles through


def _answer_cell(nb):
    for c in nb["cells"]:
        if c.get("metadata", {}).get("nbgrader", {}).get("grade_id") == ASSIGNMENT:
            return c
    raise LookupError(f"no cell with grade_id {ASSIGNMENT!r}")


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
        # the right answer in a cell whose nbgrader metadata was damaged (graded, no points):
        # nbgrader reports an error for this submission and grades the others
        "badmeta": reference,
        # the right answer, a test cell edited (its check replaced by `pass`) and another deleted:
        # grading puts both back from source and says so (grading.integrity)
        "tampered": reference,
    }


def submit(course, student, kind):
    """Write submitted/<student>/multihead/multihead.ipynb: the release notebook with an answer
    of that kind (the reference answer read from the course's own source/)."""
    course = Path(course)
    release = course / "release" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb"
    out = course / "submitted" / student / ASSIGNMENT / f"{ASSIGNMENT}.ipynb"
    out.parent.mkdir(parents=True, exist_ok=True)
    if kind == "notjson":
        out.write_text('{"cells": [ this is not json')
        return out
    nb = json.loads(release.read_text())
    # read as it is (not through grading's reader): the course may be an earlier commit's
    reference = without_markers(cell(source_path(ASSIGNMENT, course), ASSIGNMENT).source)
    src = answers(reference)[kind]
    if src is not None:
        _answer_cell(nb)["source"] = src
    if kind == "badmeta":
        _answer_cell(nb)["metadata"]["nbgrader"]["grade"] = True
    if kind == "tampered":
        ids = [c.get("metadata", {}).get("nbgrader", {}).get("grade_id") for c in nb["cells"]]
        nb["cells"][ids.index(TAMPERED["changed"])]["source"] = "pass  # the check, edited away\n"
        del nb["cells"][ids.index(TAMPERED["deleted"])]
    out.write_text(json.dumps(nb, indent=1))
    return out


def make_class(course, n, kinds=KINDS):
    """n submissions cycling through kinds; returns {student: kind}."""
    roster = {f"s{i:03d}_{kinds[i % len(kinds)]}": kinds[i % len(kinds)] for i in range(n)}
    for student, kind in roster.items():
        submit(course, student, kind)
    return roster


def failed_students(output):
    """The students tinygpt-grade-class's summary names as failed (``failed: a, b (logs ...)``),
    as a sorted list; [] when the summary names none."""
    m = re.search(r"^tinygpt-grade-class: failed: (.+?) \(", output, re.M)
    return sorted(m[1].split(", ")) if m else []


def hand_in(home, exchange, student, answer, assignment="multihead", course_id="tinygpt", extra=None):
    """A learner without a Unix user hands in: in a folder of their own, `home` (made at their
    first hand-in: their nbgrader config naming `exchange` and an exchange cache of their own,
    the assignment fetched with the real `nbgrader fetch_assignment`), the answer cell's code
    replaced by `answer`, `extra` ({file name: text}) written beside the notebook, then the real
    `nbgrader submit --student`. Returns the inbound folder's name (submit's log names it)."""
    home = Path(home)
    if not (home / "nbgrader_config.py").exists():
        home.mkdir(parents=True, exist_ok=True)
        (home / "nbgrader_config.py").write_text(
            f"c = get_config()\nc.Exchange.root = {str(exchange)!r}\nc.CourseDirectory.course_id = {course_id!r}\n"
            f"c.Exchange.cache = {str(home / 'cache')!r}\n")
        nbgrader(home, "fetch_assignment", assignment, "--student", student)
    nb = home / assignment / f"{assignment}.ipynb"
    nbformat.write(with_answer(nb, answer), nb)
    for name, text in (extra or {}).items():
        (nb.parent / name).write_text(text)
    done = nbgrader(home, "submit", assignment, "--student", student)
    return re.search(r"Destination: (.+)", done.stderr)[1].strip().rsplit("/", 1)[-1]

