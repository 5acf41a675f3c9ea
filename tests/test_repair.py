"""The repairs nbgrader needs for a class of 800, one by one, without running nbgrader. Fast."""

import nbformat
import pytest
from nbgrader.api import Gradebook

from tinygpt_course.grading.repair import ForgetDuplicates, RestoreDeletedCells, pre_convert_hook


def graded_cell(gid, source="x = 1", points=1, solution=False, cell_type="code"):
    meta = {"nbgrader": {"grade": points is not None, "solution": solution, "locked": not solution,
                         "grade_id": gid, "schema_version": 3, **({"points": points} if points else {})}}
    make = nbformat.v4.new_code_cell if cell_type == "code" else nbformat.v4.new_markdown_cell
    return make(source, metadata=meta)


def test_forget_duplicates_turns_id_less_copies_into_plain_cells():
    kept, copy = graded_cell("check"), graded_cell("check")
    del copy.metadata["nbgrader"]["grade_id"]          # what DeduplicateIds leaves of a copy
    nb = nbformat.v4.new_notebook(cells=[kept, copy])
    ForgetDuplicates()(nb, {})
    assert kept.metadata["nbgrader"]["grade_id"] == "check" and "nbgrader" not in copy.metadata


@pytest.fixture
def course(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)                        # CourseDirectory's default root
    release = tmp_path / "release" / "lesson"
    release.mkdir(parents=True)
    nbformat.write(nbformat.v4.new_notebook(cells=[graded_cell("answer", solution=True, points=None)]),
                   release / "lesson.ipynb")
    folder = tmp_path / "submitted" / "alice" / "lesson"
    folder.mkdir(parents=True)
    return folder


def test_invalid_json_is_kept_and_graded_as_unanswered(course):
    path = course / "lesson.ipynb"
    path.write_text('{"cells": [')
    pre_convert_hook(assignment="lesson", student="alice", notebooks=[str(path)])
    assert (course / "lesson.ipynb.broken").read_text() == '{"cells": ['
    nb = nbformat.read(path, as_version=4)
    assert "could not be read" in nb.cells[0].source and nb.cells[1].metadata["nbgrader"]["grade_id"] == "answer"


def test_a_renamed_notebook_is_graded_under_its_name(course):
    nbformat.write(nbformat.v4.new_notebook(cells=[graded_cell("answer", "mine", solution=True, points=None)]),
                   course / "lesson-copy.ipynb")
    notebooks = []
    pre_convert_hook(assignment="lesson", student="alice", notebooks=notebooks or [str(course / "x.ipynb")])
    nb = nbformat.read(course / "lesson.ipynb", as_version=4)
    assert "lesson-copy.ipynb" in nb.cells[0].source and nb.cells[1].source == "mine"
    assert (course / "lesson-copy.ipynb").exists()


def test_restore_deleted_cells_puts_them_back_in_source_order(empty_gradebook):
    db = empty_gradebook
    order = [("intro", None, False, "markdown"), ("answer", None, True, "code"), ("note", None, False, "markdown"),
             ("check", 2, False, "code")]
    with Gradebook(db) as gb:
        gb.add_assignment("lesson")
        gb.add_notebook("lesson", "lesson")
        for name, points, solution, kind in order:
            gb.add_source_cell(name, "lesson", "lesson", cell_type=kind, locked=not solution, source=f"# {name}")
            if points:
                gb.add_grade_cell(name, "lesson", "lesson", max_score=points, cell_type=kind)
            if solution:
                gb.add_solution_cell(name, "lesson", "lesson")
    nb = nbformat.v4.new_notebook(cells=[graded_cell("intro", points=None, cell_type="markdown"),
                                         graded_cell("answer", points=None, solution=True)])
    nb.cells[0].metadata["nbgrader"]["grade"] = False
    RestoreDeletedCells()(nb, {"nbgrader": {"db_url": db, "notebook": "lesson", "assignment": "lesson",
                                            "student": "alice"}})
    ids = [c.metadata["nbgrader"]["grade_id"] for c in nb.cells]
    assert ids == ["intro", "answer", "check"]
    assert nb.cells[2].metadata["nbgrader"]["points"] == 2


def test_a_renamed_notebooks_name_is_shown_not_rendered(course):
    """A file name is the learner's text: with markup and a backtick in it, the note still renders
    (as nbconvert renders markdown, raw HTML kept) to no element but its code span."""
    from nbconvert.filters.markdown import markdown2html
    name = "a` <img src=x onerror=alert(1)> [l](javascript:x).ipynb"
    nbformat.write(nbformat.v4.new_notebook(cells=[graded_cell("answer", "mine", solution=True, points=None)]),
                   course / name)
    pre_convert_hook(assignment="lesson", student="alice", notebooks=[str(course / "x.ipynb")])
    note = markdown2html(nbformat.read(course / "lesson.ipynb", as_version=4).cells[0].source)
    assert "<img" not in note and "<a " not in note and "&lt;img src=x onerror=alert(1)&gt;" in note, note
