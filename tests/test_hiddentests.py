"""RestoreHiddenTests (tinygpt_course/grading/hiddentests.py): nbgrader's OverwriteCells, on the
gradebook the real `nbgrader generate_assignment` made, reports no checksum change for the released
hidden-test cells of an untouched notebook, and still reports a test cell the learner changed.
Without the step, the untouched release is reported (the false positive it removes)."""
import ast
import builtins
import logging
import re

import nbformat
import pytest
from nbgrader.preprocessors import OverwriteCells
from traitlets.config import Config

from tinygpt_course.grading.hiddentests import RestoreHiddenTests
from tinygpt_course.report.collect import LESSONS
from tinygpt_course.testing.notebooks import release_path, source_path, without_markers

ASSIGNMENT = "multihead"
HIDDEN = "attention_weights"       # the lesson's test cell with hidden tests


class Warnings(logging.Handler):
    def __init__(self):
        super().__init__(logging.WARNING)
        self.messages = []

    def emit(self, record):
        self.messages.append(record.getMessage())


def _sanitize(course, nb, steps):
    """Run the steps (classes) on nb as autograde's sanitize does; returns (nb, warnings)."""
    resources = {"nbgrader": {"notebook": ASSIGNMENT, "assignment": ASSIGNMENT, "student": "alice",
                              "db_url": f"sqlite:///{course}/gradebook.db"}}
    caught = Warnings()
    for step in steps:
        pp = step(config=Config())
        pp.log.addHandler(caught)
        try:
            nb, resources = pp.preprocess(nb, resources)
        finally:
            pp.log.removeHandler(caught)
    return nb, [m for m in caught.messages if "checksum" in m]


def _released(course):
    return nbformat.read(course / "release" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb", as_version=4)


def _cell(nb, grade_id):
    (cell,) = [c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == grade_id]
    return cell


def _source_cell(course):
    src = nbformat.read(course / "source" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb", as_version=4)
    return _cell(src, HIDDEN)


def test_the_untouched_release_is_not_reported_and_gets_its_hidden_tests(course):
    released = _released(course)
    assert "BEGIN HIDDEN TESTS" not in _cell(released, HIDDEN).source
    nb, warned = _sanitize(course, released, [RestoreHiddenTests, OverwriteCells])
    assert warned == [], warned
    assert _cell(nb, HIDDEN).source == _source_cell(course).source      # hidden tests back, for grading


def test_without_the_step_nbgrader_reports_the_untouched_release(course):
    _, warned = _sanitize(course, _released(course), [OverwriteCells])
    assert any(f"cell {HIDDEN} has changed" in m for m in warned), warned


def test_a_changed_test_cell_is_still_reported_and_restored(course):
    nb = _released(course)
    cell = _cell(nb, HIDDEN)
    cell.source = "checks = None  # a learner who switched the checks off\n" + cell.source
    assert cell.source != _cell(_released(course), HIDDEN).source
    nb, warned = _sanitize(course, nb, [RestoreHiddenTests, OverwriteCells])
    assert any(f"cell {HIDDEN} has changed" in m for m in warned), warned
    assert _cell(nb, HIDDEN).source == _source_cell(course).source      # OverwriteCells put it back


# --- the hidden tests hold no secret -----------------------------------------------------------

HIDDEN_REGION = re.compile(r"### BEGIN HIDDEN TESTS\n(.*?)### END HIDDEN TESTS", re.S)


def secrets_in(hidden, released_code):
    """What a hidden-test region holds that the released notebook does not give away: names it
    does not define or import (nor builtins), numbers other than 0, and strings other than an
    assert's message. A learner who reads the region (a pre_run_cell hook can copy each cell the
    kernel runs into an output) learns only these."""
    known = set(dir(builtins))
    for node in ast.walk(ast.parse(released_code)):
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            known.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            known.add(node.id)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            known.update((a.asname or a.name).split(".")[0] for a in node.names)
    tree = ast.parse(hidden)
    messages = {id(n.msg) for n in ast.walk(tree) if isinstance(n, ast.Assert) and n.msg is not None}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and node.id not in known:
            found.append(f"name {node.id}")
        elif isinstance(node, ast.Constant) and id(node) not in messages and node.value not in (0, None):
            found.append(f"constant {node.value!r}")
    return found


@pytest.mark.parametrize("lesson", LESSONS)
def test_the_hidden_tests_hold_no_secret(lesson):
    """Each lesson's hidden tests only guard that the batch is the set-up's (nothing a check
    judges is in them: that lives in the trusted judge and the solution's record), so reading
    them gives a learner nothing. The check can fail: a hidden expected number is found."""
    source = nbformat.read(source_path(lesson), as_version=4)
    released = "\n".join(without_markers(c.source) for c in nbformat.read(release_path(lesson), as_version=4).cells
                         if c.cell_type == "code" and "%" not in c.source.split("\n", 1)[0])
    regions = [m for c in source.cells if c.cell_type == "code" for m in HIDDEN_REGION.findall(c.source)]
    assert regions, f"{lesson}: no hidden tests found (the check would pass on nothing)"
    for region in regions:
        assert secrets_in(region, released) == [], region
    assert sorted(secrets_in("assert abs(xb.sum() - 3.1416) < 1e-4, 'wrong'\n", released)) == ["constant 0.0001", "constant 3.1416"]
