"""Independent checks: the learner's code cannot change the verdict of a graded check.

Stock nbgrader runs the hidden tests in the learner's kernel, after the learner's code, which
can replace ``torch.allclose``, rewrite later cells or print the expected lines. Two steps here:

- ``PrepareChecks`` runs first, before any learner code: it reads from ``source/`` everything
  grading trusts (the lesson, its set-up cells, its solution, its check ids), draws the seed of
  this grading process and gets the solution's record for that seed (the solution run through
  the lesson's extract, in the sandbox).
- ``IndependentChecks`` runs after nbgrader's Execute: it re-runs the learner's answer cell on
  its own (the trusted set-up cells, then the answer, then the extract, in the sandbox, with the
  same seed), judges the record against the solution's in a child forked from this process
  (which never runs learner code or notebook text), within ``judge_timeout`` seconds and
  ``judge_cpu_s`` CPU seconds (tinygpt_course.grading.childjudge: a record built to make a judge
  spin flags that learner, and the class goes on), and withdraws the points of every check the
  learner's kernel passed but the re-run did not confirm.
"""
import os
import secrets

from nbformat.v4 import new_output
from traitlets import Bool, Float, Integer

from nbgrader.coursedir import CourseDirectory
from nbgrader.preprocessors import NbGraderPreprocessor
from nbgrader.utils import is_grade, is_solution

from ..checks.protocol import QUOTE_LIMIT, quote
from .childjudge import judge_in_child
from .feedback import Secrets, course_notebook
from .lesson import answer_source, read_lesson
from .reference import reference_record
from .rerun import rerun
from .sandbox import Sandbox
from .sanitize_outputs import shown

FLAG = "IndependentCheckFailed"
_SEED = []


def grading_seed():
    """One seed per grading run, drawn when it first grades (forked workers inherit it): the
    notebook's documented numbers cannot be replayed, and every learner gets the same weights."""
    if not _SEED:
        _SEED.append(secrets.randbelow(2 ** 31))
    return _SEED[0]


class PrepareChecks(NbGraderPreprocessor):
    """Before any learner code runs: what grading trusts, from source/, and the solution's record."""

    timeout = Integer(120, help="Seconds the solution's run in the sandbox may take").tag(config=True)

    def preprocess(self, nb, resources):
        info = resources["nbgrader"]
        coursedir = CourseDirectory(config=self.config)
        path = os.path.join(coursedir.format_path(coursedir.source_directory, ".", info["assignment"]),
                            info["notebook"] + ".ipynb")
        state = resources.setdefault("tinygpt", {})
        state["source"] = source = read_lesson(path) if os.path.isfile(path) else None
        if source is not None:
            sandbox = Sandbox(config=self.config, log=self.log)
            sandbox.require()
            state["seed"] = grading_seed()
            state["ref"] = reference_record(source, state["seed"], sandbox, self.timeout)
        return nb, resources


class IndependentChecks(NbGraderPreprocessor):
    """After Execute: re-run the answer in the sandbox, judge it in a child within a budget, withdraw
    unconfirmed points."""

    timeout = Integer(120, help="Seconds the independent re-run may take").tag(config=True)
    judge_timeout = Float(60, help=(
        "Seconds (wall clock) judging one learner's record may take, in a child process: past them "
        "every check of that learner fails with 'checking your answer took longer than N s' and "
        "grading goes on")).tag(config=True)
    judge_cpu_s = Integer(60, help="CPU seconds the child process that judges one learner's record may use"
                          ).tag(config=True)
    judge_in_child = Bool(True, help=(
        "Judge each record in a child process within judge_timeout and judge_cpu_s. False judges in "
        "the grader's own process, with no budget: a record made to be slow stops the class "
        "(tests only)")).tag(config=True)
    records_as_data = Bool(True, help=(
        "Take each re-run's record back as data checked against the lesson's table "
        "(tinygpt_course/checks/record.py) before any judge reads it. False takes it back pickled, "
        "loaded with torch.load(weights_only=True): an object graph from a process the learner "
        "controls (tests only)")).tag(config=True)

    def preprocess(self, nb, resources):
        state = resources.get("tinygpt", {})
        source = state.get("source")
        if source is None:
            return nb, resources
        verdicts = self.verdicts(source, answer_source(source, nb), state)
        state["verdicts"] = verdicts
        flagged = []
        for cell in nb.cells:
            gid = cell.metadata.get("nbgrader", {}).get("grade_id")
            if not (is_grade(cell) and not is_solution(cell) and gid in verdicts):
                continue
            v = verdicts[gid]
            kernel_ok = not any(o.output_type == "error" for o in cell.outputs)
            if not v.passed and kernel_ok:
                flagged.append(gid)
                why = ("this check passed in your notebook but not when your answer was re-run on its own: "
                       + quote(v.message, QUOTE_LIMIT))
                cell.outputs.append(new_output("error", ename=FLAG, evalue=why, traceback=[f"{FLAG}: {why}"]))
        state["flagged"] = flagged
        if flagged:
            info = resources["nbgrader"]
            self.log.warning("FLAGGED %s/%s: %s passed in the learner's kernel but not in the "
                             "independent re-run", info["student"], info["assignment"], ", ".join(flagged))
        return nb, resources

    def verdicts(self, source, answer, state):
        """{check id: Verdict} from the sandboxed re-run and the local judge."""
        from ..checks.protocol import Kind, Verdict
        lesson = source.lesson
        if answer is None:
            missing = Verdict.fail(Kind.NO_RESULT, "no answer: the answer cell is missing or is no longer a code cell")
            return {gid: missing for gid in source.test_ids}
        sandbox = Sandbox(config=self.config, log=self.log)
        result = rerun(sandbox, source.name, source.setup, answer, state["seed"], self.timeout,
                       pickled=not self.records_as_data)
        if result.record is None:
            failed = Verdict.fail(Kind.NO_RESULT, result.problem)
            return {gid: failed for gid in source.test_ids}
        if not self.judge_in_child:
            return {gid: lesson.verdict(gid, result.record, state["ref"]) for gid in source.test_ids}
        return judge_in_child(lesson, source.test_ids, result.record, state["ref"], self.judge_timeout,
                              self.judge_cpu_s)


class RecordFlags(NbGraderPreprocessor):
    """After SaveAutoGrades: write why a submission was flagged into the gradebook. nbgrader's
    feedback page renders the comment as markdown with raw HTML kept, so the learner's message in
    it is shown (a code span), never rendered."""

    def preprocess(self, nb, resources):
        flagged = resources.get("tinygpt", {}).get("flagged")
        if not flagged:
            return nb, resources
        from nbgrader.api import Gradebook
        info = resources["nbgrader"]
        verdicts = resources["tinygpt"]["verdicts"]
        scrub = Secrets(course_notebook(self.config, info), nb).scrub    # a comment the learner may read
        text = "FLAGGED by the independent re-run: " + "; ".join(
            f"{gid} passed in the learner's kernel but not on its own ({shown(scrub(quote(verdicts[gid].message, 600)))})"
            for gid in flagged)
        with Gradebook(info["db_url"]) as gb:
            for cell in nb.cells:
                if is_solution(cell) and cell.cell_type == "code":
                    comment = gb.find_comment(cell.metadata.nbgrader["grade_id"], info["notebook"],
                                              info["assignment"], info["student"])
                    comment.auto_comment = text
                    gb.db.commit()
                    break
        return nb, resources
