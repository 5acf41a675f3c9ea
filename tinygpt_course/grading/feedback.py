"""Feedback that teaches without leaking the hidden tests.

Stock ``nbgrader generate_feedback`` shows the hidden tests' source, and a failing hidden
test's traceback prints the lines around the failure. ExplainChecks (after GetGrades) replaces
every hidden region with one comment line and every graded test cell's outputs with one line:
the check's name, its points, and the diagnosis when it failed. Tracebacks of test cells are
dropped, since they quote test code. Any other output that quotes a line of a hidden test (a
learner's code that printed the graded copy it ran in, or updated an earlier display) is
replaced by a note.
"""
import re

from nbformat.v4 import new_output
from traitlets import List

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


def hidden_lines(nb):
    """The stripped lines of every hidden region in the notebook."""
    lines = set()
    for cell in nb.cells:
        for block in HIDDEN.findall(cell.source if cell.cell_type == "code" else ""):
            lines |= {ln.strip() for ln in block.splitlines()[1:-1] if ln.strip() and not ln.strip().startswith("#")}
    return lines


def output_text(output):
    parts = [output.get("text", ""), output.get("evalue", "")] + list(output.get("traceback", []))
    for value in output.get("data", {}).values():
        parts.append(value if isinstance(value, str) else "\n".join(value) if isinstance(value, list) else "")
    return "\n".join(p if isinstance(p, str) else "".join(p) for p in parts)


QUOTED = ("(output removed from this feedback: it quoted the code of a hidden check)\n")


class ExplainChecks(NbGraderPreprocessor):
    # nbgrader's base class declares this without config=True, so nbconvert's exporter, which
    # passes it to every preprocessor, got the warning "display_data_priority not recognized"
    display_data_priority = List(['text/html', 'application/pdf', 'text/latex', 'image/svg+xml', 'image/png',
                                  'image/jpeg', 'text/plain'], help="As nbgrader's GetGrades").tag(config=True)

    def preprocess(self, nb, resources):
        self._hidden = hidden_lines(nb)
        return super().preprocess(nb, resources)

    def preprocess_cell(self, cell, resources, index):
        if cell.cell_type != "code":
            return cell, resources
        if not is_grade(cell) or is_solution(cell):
            cell.outputs = [new_output("stream", name="stdout", text=QUOTED)
                            if any(line in output_text(o) for line in self._hidden) else o
                            for o in cell.outputs]
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
