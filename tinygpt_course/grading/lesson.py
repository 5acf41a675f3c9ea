"""What the grading steps read from a lesson's source notebook."""
import contextlib
import importlib
import io

from nbgrader.utils import is_grade, is_solution


def checks_module(source):
    """The lesson's checks module (notebook metadata tinygpt.checks), or None."""
    name = source.metadata.get("tinygpt", {}).get("checks")
    return importlib.import_module(name) if name else None


def _grade_id(cell):
    return cell.metadata.get("nbgrader", {}).get("grade_id")


def trusted_sources(source):
    """The code cells before the first answer cell: the lesson's set-up, from source/."""
    cells = []
    for cell in source.cells:
        if is_solution(cell):
            break
        if cell.cell_type == "code" and not is_grade(cell):
            cells.append(cell.source)
    return cells


def test_ids(source):
    return [_grade_id(c) for c in source.cells if is_grade(c) and not is_solution(c) and c.cell_type == "code"]


def answer_sources(source, submitted):
    """{answer id: the learner's code, or None when the cell is gone or is no longer code}."""
    by_id = {_grade_id(c): c for c in submitted.cells}
    answers = {}
    for cell in source.cells:
        if is_solution(cell) and cell.cell_type == "code":
            mine = by_id.get(_grade_id(cell))
            answers[_grade_id(cell)] = mine.source if mine is not None and mine.cell_type == "code" else None
    return answers


_trusted_cache = {}


def run_trusted(source):
    """The namespace of the trusted set-up cells, run in this (the grader's) process."""
    key = "\n\0".join(trusted_sources(source))
    if key not in _trusted_cache:
        ns = {"__name__": "__lesson__"}
        with contextlib.redirect_stdout(io.StringIO()):
            for i, code in enumerate(trusted_sources(source)):
                exec(compile(code, f"<set-up cell {i + 1}>", "exec"), ns)
        _trusted_cache[key] = ns
    return _trusted_cache[key]
