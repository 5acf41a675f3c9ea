"""grading/integrity.py: what grading put back, read back as data and written to the gradebook
comment of the cell it concerns (a real nbgrader gradebook, no grading run: fast)."""
import nbformat
import pytest
from nbgrader.api import Gradebook

from tinygpt_course.grading.integrity import KEY, KINDS, CommentIntegrity, integrity


def _cell(kind, grade_id, **flags):
    make = nbformat.v4.new_code_cell if kind == "code" else nbformat.v4.new_markdown_cell
    cell = make("x = 1\n")
    cell.metadata["nbgrader"] = {"grade_id": grade_id, "solution": False, "grade": False,
                                 "locked": False, "task": False, **flags}
    return cell


@pytest.fixture
def lesson(tmp_path):
    """A lesson of a code answer, a written answer and a test cell; one learner's submission."""
    db_url = f"sqlite:///{tmp_path / 'gradebook.db'}"
    with Gradebook(db_url) as gb:
        gb.add_assignment("lesson")
        gb.add_notebook("lesson", "lesson")
        gb.add_solution_cell("answer", "lesson", "lesson")
        gb.add_solution_cell("explain", "lesson", "lesson")
        gb.add_grade_cell("shapes", "lesson", "lesson", max_score=1, cell_type="code")
        gb.add_student("ann")
        gb.add_submission("lesson", "ann")
    nb = nbformat.v4.new_notebook(cells=[
        _cell("code", "answer", solution=True),
        _cell("markdown", "explain", solution=True),
        _cell("code", "shapes", grade=True, locked=True, points=1)])
    resources = {"nbgrader": {"db_url": db_url, "notebook": "lesson", "assignment": "lesson", "student": "ann"}}
    return nb, resources


def _comments(resources):
    with Gradebook(resources["nbgrader"]["db_url"]) as gb:
        return {name: gb.find_comment(name, "lesson", "lesson", "ann").auto_comment or ""
                for name in ("answer", "explain")}


def test_each_note_goes_on_the_comment_of_the_cell_it_names(lesson):
    """A written answer put back is said on its own comment; a test cell (nbgrader keeps it no
    comment) on the code answer's, naming it; nothing said twice."""
    nb, resources = lesson
    nb.metadata[KEY] = [{"kind": "cell_deleted", "cell": "explain"}, {"kind": "cell_changed", "cell": "shapes"}]
    CommentIntegrity().preprocess(nb, resources)
    comments = _comments(resources)
    assert comments["explain"] == f"INTEGRITY: {KINDS['cell_deleted']}: explain. Grading used the course's own cells."
    assert comments["answer"] == f"INTEGRITY: {KINDS['cell_changed']}: shapes. Grading used the course's own cells."


def test_an_untouched_notebook_leaves_the_comments_alone(lesson):
    nb, resources = lesson
    CommentIntegrity().preprocess(nb, resources)
    assert _comments(resources) == {"answer": "", "explain": ""}


def test_what_the_notebook_carries_is_read_as_data():
    """Entries off the vocabulary, of the wrong type, or past the bounds are dropped or cut."""
    nb = {"metadata": {KEY: [{"kind": "cell_changed", "cell": "shapes"}, {"kind": "<b>made up</b>", "cell": "x"},
                             {"kind": "cell_deleted", "cell": ["not", "a", "name"]}, "text",
                             {"kind": "cell_deleted", "cell": "c" * 500}] + [{"kind": "cell_changed", "cell": "n"}] * 80}}
    notes = integrity(nb)
    assert notes[:2] == [("cell_changed", "shapes"), ("cell_deleted", "c" * 80)]
    assert len(notes) == 2 + 50 - 5
    assert integrity({"metadata": {KEY: "cell_changed"}}) == [] and integrity({}) == []
