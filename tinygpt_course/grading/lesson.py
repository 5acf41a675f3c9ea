"""What grading trusts about a lesson, read from its source notebook before any learner code runs.

Everything here comes from ``source/<assignment>/<notebook>.ipynb``: the lesson's name (notebook
metadata ``tinygpt.lesson``), its set-up cells, the solution cell, and the ids of its test cells.
The grader never executes any of it in its own process: the set-up and the solution run in the
sandbox (tinygpt_course.grading.rerun).
"""
import hashlib
from dataclasses import dataclass

import nbformat
from nbgrader.utils import is_grade, is_solution

from ..checks.protocol import load_lesson


def grade_id(cell):
    return cell.metadata.get("nbgrader", {}).get("grade_id")


@dataclass(frozen=True)
class LessonSource:
    name: str              # the lesson: tinygpt_course.checks.<name>
    setup: tuple           # code of the set-up cells, in order
    answer_id: str         # grade_id of the answer cell
    solution: str          # the solution cell's code
    test_ids: tuple        # grade_ids of the test cells == the lesson's check ids
    digest: str            # of all the above: a cache key

    @property
    def lesson(self):
        return load_lesson(self.name)


def read_lesson(path):
    """The LessonSource of a source notebook, or None when it is not a checked lesson."""
    nb = nbformat.read(path, as_version=4)
    name = nb.metadata.get("tinygpt", {}).get("lesson")
    if not name:
        return None
    setup, answer = [], None
    for cell in nb.cells:
        if is_solution(cell) and cell.cell_type == "code":
            answer = answer or cell
        elif answer is None and cell.cell_type == "code" and not is_grade(cell):
            setup.append(cell.source)
    tests = tuple(grade_id(c) for c in nb.cells if is_grade(c) and not is_solution(c) and c.cell_type == "code")
    lesson = load_lesson(name)
    if set(tests) != set(lesson.checks):
        raise ValueError(f"{path}: the test cells {sorted(tests)} are not the checks of lesson "
                         f"{name!r} {sorted(lesson.checks)}")
    digest = hashlib.sha256(repr((name, setup, grade_id(answer), answer.source, tests)).encode()).hexdigest()
    return LessonSource(name, tuple(setup), grade_id(answer), answer.source, tests, digest)


def answer_source(lesson_source, submitted):
    """The learner's answer cell's code, or None when the cell is gone or is no longer code."""
    for cell in submitted.cells:
        if grade_id(cell) == lesson_source.answer_id:
            return cell.source if cell.cell_type == "code" else None
    return None
