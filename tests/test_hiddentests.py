"""RestoreHiddenTests (tinygpt_course/grading/hiddentests.py): nbgrader's OverwriteCells, on the
gradebook the real `nbgrader generate_assignment` made, reports no checksum change for the released
hidden-test cells of an untouched notebook, and still reports a test cell the learner changed.
Without the step, the untouched release is reported (the false positive it removes)."""
import logging

import nbformat
from nbgrader.preprocessors import OverwriteCells
from traitlets.config import Config

from tinygpt_course.grading.hiddentests import RestoreHiddenTests

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
