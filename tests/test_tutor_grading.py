"""Hints used never change a score (issue 22 item 2), with the real `nbgrader autograde`: one
wrong answer submitted twice, once as is and once with the tutor's widget state (the hint rungs
used, as JupyterLab saves it into the notebook) and the hint button's output in the failing check
cell, gets the same score in every cell; the autograded copy keeps the rungs used as checked data
(metadata.tinygpt.hints_used) and no widget state."""
import nbformat

from tinygpt_course.testing import catalogue, notebooks
from tinygpt_course.testing.course import autograded_notebooks, make_course, nbgrader, scores, submit

ANSWER = catalogue.answer("multihead", "01_right_comprehension").code.replace("super().__init__()", "pass")
USED = {"lesson": "multihead", "check": "shapes", "mistake": "missing_super_init", "rungs": [1, 2, 3]}


def with_hints_used(nb):
    nb.metadata["widgets"] = {"application/vnd.jupyter.widget-state+json": {"version_major": 2, "version_minor": 0, "state": {
        "0123456789abcdef": {"model_name": "VBoxModel", "model_module": "@jupyter-widgets/controls",
                             "model_module_version": "2.0.0", "state": {"tinygpt_hints": USED}}}}}
    notebooks.cell(nb, "shapes").outputs = [nbformat.v4.new_output("display_data", data={
        "text/plain": "[hint button: run checks.hint('shapes') for the next hint]",
        "application/vnd.jupyter.widget-view+json": {"version_major": 2, "version_minor": 0,
                                                     "model_id": "0123456789abcdef"}})]
    return nb


def test_hints_used_change_no_score(tmp_path):
    course = make_course(tmp_path / "course")
    release = course / "release" / "multihead" / "multihead.ipynb"
    submit(course, "plain", "multihead", notebooks.with_answer(nbformat.read(release, as_version=4), ANSWER))
    submit(course, "hinted", "multihead",
           with_hints_used(notebooks.with_answer(nbformat.read(release, as_version=4), ANSWER)))
    nbgrader(course, "autograde", "multihead")
    plain, hinted = scores(course, "multihead", "plain"), scores(course, "multihead", "hinted")
    assert plain == hinted and sum(plain.values()) < sum(notebooks.points("multihead").values()), (plain, hinted)
    graded = nbformat.read(course / "autograded" / "hinted" / "multihead" / "multihead.ipynb", as_version=4)
    assert "widgets" not in graded.metadata and graded.metadata["tinygpt"]["hints_used"] == [USED]
    same = autograded_notebooks(course)
    assert same["plain"] == same["hinted"]
