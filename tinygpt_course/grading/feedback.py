"""Feedback that teaches without leaking the hidden tests.

Stock ``nbgrader generate_feedback`` shows the hidden tests' source, and a failing hidden
test's traceback prints the lines around the failure. ExplainChecks (after GetGrades) replaces
every hidden region with one comment line and every graded test cell's outputs with one line:
the check's name, its points, and the diagnosis when it failed. Tracebacks of test cells are
dropped, since they quote test code.
"""
import re

from nbformat.v4 import new_output

from nbgrader.preprocessors import NbGraderPreprocessor
from nbgrader.utils import is_grade, is_solution

HIDDEN = re.compile(r"^[ \t]*### BEGIN HIDDEN TESTS.*?^[ \t]*### END HIDDEN TESTS[^\n]*\n?", re.M | re.S)


def hide(source):
    return HIDDEN.sub("# (hidden check: its code is not shown)\n", source).rstrip("\n")


def verdict(cell):
    errors = [o for o in cell.outputs if o.output_type == "error"]
    if not errors:
        return None
    # the last error is the independent re-run's, when there is one; else the kernel's own
    e = errors[-1]
    return f"{e.get('ename', 'Error')}: {e.get('evalue', '')}".strip()


class ExplainChecks(NbGraderPreprocessor):
    def preprocess_cell(self, cell, resources, index):
        if cell.cell_type != "code" or not is_grade(cell) or is_solution(cell):
            return cell, resources
        nbg = cell.metadata.nbgrader
        score, points = nbg.get("score"), nbg.get("points")
        problem = verdict(cell)
        cell.source = hide(cell.source)
        head = f"check '{nbg['grade_id']}': {score} of {points} points"
        if problem is None:
            cell.outputs = [new_output("stream", name="stdout", text=f"\u2713 {head}\n")]
        else:
            cell.outputs = [new_output("error", ename="CheckFailed", evalue=problem,
                                       traceback=[f"\u2717 {head}", problem])]
        return cell, resources
