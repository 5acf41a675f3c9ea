"""Feedback that teaches without leaking the hidden tests.

Stock ``nbgrader generate_feedback`` shows the hidden tests' source, and a failing hidden
test's traceback prints the lines around the failure. ExplainChecks (after GetGrades) replaces
every hidden region with one comment line and every graded test cell's outputs with one line:
the check's name, its points, and the diagnosis when it failed. Tracebacks of test cells are
dropped, since they quote test code. Any other output that quotes a line of a hidden test (a
learner's code that printed the graded copy it ran in, or updated an earlier display) is
replaced by a note; so is any output or verdict that quotes a line of the solution (from
``source/``) the learner did not write themselves, as an answer that found the solution at
grading time and printed or raised it would. A verdict quotes at most one line of learner text
(tinygpt_course.checks.protocol.quote). It goes into an error output, which nbconvert shows as
text (escaped by ``ansi2html``), never into a field rendered as markdown: a learner text that must
go into one goes through sanitize_outputs.shown (as RecordFlags' gradebook comment does).
"""
import os
import re

import nbformat
from nbformat.v4 import new_output
from traitlets import List, Unicode

from nbgrader.coursedir import CourseDirectory
from nbgrader.preprocessors import NbGraderPreprocessor
from nbgrader.utils import is_grade, is_solution

from ..checks.protocol import quote

HIDDEN = re.compile(r"^[ \t]*### BEGIN HIDDEN TESTS.*?^[ \t]*### END HIDDEN TESTS[^\n]*\n?", re.M | re.S)
SOLUTION = re.compile(r"^[ \t]*### BEGIN SOLUTION.*?^[ \t]*### END SOLUTION[^\n]*\n?", re.M | re.S)
MIN_SECRET = 8        # shorter lines (``)``, ``pass``) say nothing of the solution


def course_notebook(config, info, folder="source"):
    """The notebook `info` (resources["nbgrader"]) names, from the course's `folder` (source,
    release), or None."""
    if not info.get("assignment") or not info.get("notebook"):
        return None
    coursedir = CourseDirectory(config=config)
    path = os.path.join(coursedir.format_path(getattr(coursedir, f"{folder}_directory"), ".", info["assignment"]),
                        info["notebook"] + ".ipynb")
    try:
        return nbformat.read(path, as_version=4)
    except (OSError, ValueError):
        return None


def code_line(line):
    """A line of code as compared here: its comment dropped, its whitespace collapsed."""
    return " ".join(re.sub(r"(^|\s)#.*$", "", line).split())


def region_lines(pattern, nb):
    """The code lines inside the `pattern` regions of the notebook's code cells."""
    lines = set()
    for cell in nb.cells if nb is not None else ():
        if cell.cell_type == "code":
            for block in pattern.findall(cell.source):
                lines |= {code_line(ln) for ln in block.splitlines()[1:-1]}
    return {ln for ln in lines if len(ln) >= MIN_SECRET}


class Secrets:
    """Lines no feedback or gradebook comment may quote: the hidden tests' and the solution's,
    less the solution lines the learner wrote in their own answer (that is their code)."""

    def __init__(self, source_nb, submitted_nb=None, answer=None):
        learner = set()
        for cell in submitted_nb.cells if submitted_nb is not None else ():
            if cell.cell_type == "code" and is_solution(cell):
                learner |= {code_line(ln) for ln in cell.source.splitlines()}
        learner |= {code_line(ln) for ln in (answer or "").splitlines()}
        self.lines = (region_lines(HIDDEN, source_nb) | region_lines(HIDDEN, submitted_nb)
                      | (region_lines(SOLUTION, source_nb) - learner))

    def quoted_in(self, text):
        flat = " ".join(str(text).split())
        return any(line in flat for line in self.lines)

    def scrub(self, text):
        """`text`, or a note in its place when it quotes a secret line."""
        return SCRUBBED if self.quoted_in(text) else text


SCRUBBED = "(not shown: the message quoted the solution or a hidden check)"


def hide(source):
    return HIDDEN.sub("# (hidden check: its code is not shown)\n", source).rstrip("\n")


def verdict(cell):
    errors = [o for o in cell.outputs if o.output_type == "error"]
    if not errors:
        return None
    # the last error is the independent re-run's, when there is one; else the kernel's own
    e = errors[-1]
    return quote(f"{e.get('ename', 'Error')}: {e.get('evalue', '')}".strip())


def output_text(output):
    parts = [output.get("text", ""), output.get("evalue", "")] + list(output.get("traceback", []))
    for value in output.get("data", {}).values():
        parts.append(value if isinstance(value, str) else "\n".join(value) if isinstance(value, list) else "")
    return "\n".join(p if isinstance(p, str) else "".join(p) for p in parts)


QUOTED = ("(output removed from this feedback: it quoted the code of a hidden check or of the solution)\n")


class FeedbackStep(NbGraderPreprocessor):
    """A step of generate_feedback's pipeline. nbgrader's base class declares display_data_priority
    without config=True, so nbconvert's exporter, which passes it to every preprocessor, warned
    "display_data_priority not recognized" on every run, once per step of ours."""
    display_data_priority = List(['text/html', 'application/pdf', 'text/latex', 'image/svg+xml', 'image/png',
                                  'image/jpeg', 'text/plain'], help="As nbgrader's GetGrades").tag(config=True)


class ExplainChecks(FeedbackStep):

    def preprocess(self, nb, resources):
        self._secrets = Secrets(course_notebook(self.config, resources.get("nbgrader", {})), nb)
        return super().preprocess(nb, resources)

    def preprocess_cell(self, cell, resources, index):
        if cell.cell_type != "code":
            return cell, resources
        if not is_grade(cell) or is_solution(cell):
            cell.outputs = [new_output("stream", name="stdout", text=QUOTED)
                            if self._secrets.quoted_in(output_text(o)) else o
                            for o in cell.outputs]
            return cell, resources
        nbg = cell.metadata.nbgrader
        score, points = nbg.get("score"), nbg.get("points")
        problem = verdict(cell)
        problem = None if problem is None else self._secrets.scrub(problem)
        cell.source = hide(cell.source)
        head = f"check '{nbg['grade_id']}': {score} of {points} points"
        if problem is None:
            cell.outputs = [new_output("stream", name="stdout", text=f"\u2713 {head}\n")]
        else:
            cell.outputs = [new_output("error", ename="CheckFailed", evalue=problem,
                                       traceback=[f"\u2717 {head}", problem])]
        return cell, resources


class WrapLongLines(FeedbackStep):
    """Last in generate_feedback: the page wraps a long line of a check's message or an output (the
    page shows them preformatted, where a long line ran off the right edge) instead of
    scrolling; the text itself is unchanged. After CSSHTMLHeaderPreprocessor, which sets the
    page's inlined CSS."""

    css = Unicode("pre, .output_text pre, .output_error pre { white-space: pre-wrap; overflow-wrap: anywhere; }",
                  help="CSS added to the feedback page").tag(config=True)

    def preprocess(self, nb, resources):
        inlining = resources.setdefault("inlining", {})
        inlining["css"] = list(inlining.get("css") or []) + [self.css]
        return nb, resources
