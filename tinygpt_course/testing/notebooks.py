"""The lessons' notebooks as tests and docs read them.

The set-up cells, the answer cell and the check ids come from grading's own reader of a source
notebook (tinygpt_course.grading.lesson.read_lesson), so a test runs the lesson as grading sees it.
"""
import contextlib
import functools
import io
import re
from pathlib import Path

import nbformat

from ..grading.lesson import grade_id, read_lesson
from .course import REPO


def source_path(lesson, repo=REPO):
    return Path(repo) / "source" / lesson / f"{lesson}.ipynb"


def release_path(lesson, repo=REPO):
    return Path(repo) / "release" / lesson / f"{lesson}.ipynb"


def cell(nb, gid):
    """The cell of nb (a notebook or its path) whose nbgrader grade_id is gid."""
    if not isinstance(nb, nbformat.NotebookNode):
        nb = nbformat.read(nb, as_version=4)
    for c in nb.cells:
        if grade_id(c) == gid:
            return c
    raise KeyError(f"no cell with grade_id {gid!r}")


def printed(c):
    """What a code cell printed (its stream outputs, joined)."""
    return "".join(o.get("text", "") for o in c.get("outputs", []) if o.output_type == "stream")


def fenced(markdown):
    """The lines of the first ``` block of a markdown text (a documented printout)."""
    return re.search(r"```\n(.*?)\n```", markdown, re.S).group(1).splitlines()


@functools.lru_cache(maxsize=None)
def lesson_source(lesson, repo=REPO):
    """grading's LessonSource of the lesson: set-up cells, answer cell id, solution, check ids."""
    return read_lesson(source_path(lesson, repo))


SOLUTION_MARKERS = re.compile(r"^[ \t]*### (BEGIN|END) SOLUTION[ \t]*(\n|\Z)", re.M)


def without_markers(code):
    """code without nbgrader's `### BEGIN/END SOLUTION` lines."""
    return SOLUTION_MARKERS.sub("", code)


def solution(lesson, repo=REPO):
    """The lesson's answer as the teacher wrote it: the solution cell without nbgrader's markers."""
    return without_markers(lesson_source(lesson, repo).solution)


def blank(lesson, repo=REPO):
    """The answer cell as released: each solution region replaced by nbgrader's stub."""
    return re.sub(r"### BEGIN SOLUTION\n.*?### END SOLUTION", "raise NotImplementedError()",
                  lesson_source(lesson, repo).solution, flags=re.S)


def points(lesson, repo=REPO):
    """{check id: points} from the source notebook's test cells, in notebook order."""
    nb = nbformat.read(source_path(lesson, repo), 4)
    return {c.metadata.nbgrader["grade_id"]: c.metadata.nbgrader["points"] for c in nb.cells
            if c.metadata.get("nbgrader", {}).get("grade") and not c.metadata.nbgrader.get("solution")}


def with_answer(notebook, answer, lesson=None):
    """The notebook (or the one at its path) with its answer cell's code replaced by answer.
    The answer cell is the lesson's (the notebook's tinygpt.lesson metadata, or `lesson`)."""
    nb = notebook if isinstance(notebook, nbformat.NotebookNode) else nbformat.read(notebook, as_version=4)
    lesson = lesson or nb.metadata["tinygpt"]["lesson"]
    cell(nb, lesson_source(lesson).answer_id).source = answer
    return nb


def namespace(lesson, answer):
    """The lesson's set-up cells, then answer, run in this process as the notebook runs them (what
    they print is dropped): the globals the runner and the check cells see. An answer that
    raises at its top level raises here (the catalogue's plain answers never do)."""
    from ..checks.common import compiled
    ns = {"__name__": "__lesson__"}
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        for i, code in enumerate(lesson_source(lesson).setup):
            exec(compiled(code, f"<set-up cell {i + 1}>"), ns)
        exec(compiled(answer, "<your answer cell>"), ns)
    return ns


def record(lesson, answer, seed):
    """The raw record grading's re-run makes of `answer`, made here in this process: the
    lesson's extract on the namespace() of its set-up cells and the answer, as data (encoded and
    decoded against the lesson's table, as grading reads it back)."""
    import importlib

    from ..checks.protocol import load_lesson
    from ..checks.record import as_data
    extract = importlib.import_module(load_lesson(lesson).extract_module).extract
    return as_data(extract(namespace(lesson, answer), seed), load_lesson(lesson).schema)


@functools.lru_cache(maxsize=None)
def solution_record(lesson, seed):
    """record() of the lesson's solution (made once per lesson and seed)."""
    return record(lesson, solution(lesson), seed)


def marked_lines(nb, *regions):
    """The stripped, non-blank lines inside every `### BEGIN <region>` ... `### END <region>` of
    nb's cells, for the regions named ("SOLUTION", "HIDDEN TESTS")."""
    lines = set()
    for c in nb.cells:
        for region in regions:
            for block in re.findall(rf"### BEGIN {region}\n(.*?)### END {region}", c.source, re.S):
                lines |= {ln.strip() for ln in block.splitlines() if ln.strip()}
    return lines


def run_checks(lesson, answer):
    """Set-up, answer, then the runner, the numbers note and every check cell of the source
    notebook, in one namespace as the learner's kernel runs them. Returns (what the runner and
    the note printed, {check id: the CheckFailed its cell raised, or None})."""
    from ..checks import CheckFailed
    from ..checks.protocol import load_lesson
    ns, nb = namespace(lesson, answer), nbformat.read(source_path(lesson), as_version=4)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(cell(nb, "runner").source, ns)
        exec(cell(nb, "numbers_note").source, ns)
    raised = {}
    for check_id in load_lesson(lesson).checks:
        try:
            with contextlib.redirect_stdout(io.StringIO()):
                exec(cell(nb, check_id).source, ns)
            raised[check_id] = None
        except CheckFailed as failed:
            raised[check_id] = failed
    return out.getvalue(), raised


def execute(nb, folder, timeout=180, env=None):
    """nb (a notebook, or the path of one to read) run from top to bottom in a fresh python3
    kernel started in folder, as a learner's Run All runs it; returns the executed notebook."""
    from nbclient import NotebookClient
    if not isinstance(nb, nbformat.NotebookNode):
        nb = nbformat.read(nb, as_version=4)
    NotebookClient(nb, timeout=timeout, kernel_name="python3",
                   resources={"metadata": {"path": str(folder)}}).execute(**({"env": env} if env else {}))
    return nb


def same_record(a, b):
    """Two extract records hold the same values: floating tensors within the judges' own
    tolerance (protocol.close: float32 sums in another order, as another CPU's vector kernels
    add them, differ in the last bits), everything else exactly (shapes, integer tensors such
    as drawn letters, names, numbers)."""
    import torch

    from ..checks.protocol import close
    if torch.is_tensor(a):
        if not (torch.is_tensor(b) and a.dtype == b.dtype and a.shape == b.shape):
            return False
        return close(a, b) if a.is_floating_point() else torch.equal(a, b)
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(same_record(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return isinstance(b, (list, tuple)) and len(a) == len(b) and all(map(same_record, a, b))
    return a == b
