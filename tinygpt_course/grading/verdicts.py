"""Keep the verdicts grading trusted in nbgrader's own autograded notebook, for the class report.

The gradebook holds scores and comments, not *why* a check failed. ``RecordVerdicts`` (after
IndependentChecks, in the autograde pipeline) writes, into the metadata of each graded test cell
of the notebook nbgrader saves in ``autograded/``, the verdict of the independent re-run: passed,
its kind, the mistake id it names and its message (one capped line, scrubbed of any line of the
solution or of a hidden test). The notebook's metadata says which lesson judged it, whether the
re-run judged it at all, which checks were flagged (passed in the learner's kernel but not on
their own) and whether the submitted notebook was broken (kept as ``.broken``, graded as the
release). These are the re-run's verdicts, judged in the grader: never text the learner's kernel
printed. Scores, outputs and feedback are unchanged (feedback renders no metadata), and no file
is added to ``autograded/``.

A learner can put any metadata into the notebook they submit, so the step first removes its key
from the notebook and from every cell, then writes it where grading has something to say.
``tinygpt_course.report`` reads it with :func:`read_verdicts`.
"""
import os

from traitlets import Integer, Unicode

from nbgrader.coursedir import CourseDirectory
from nbgrader.preprocessors import NbGraderPreprocessor
from nbgrader.utils import is_grade, is_solution

from ..checks.protocol import quote
from .feedback import Secrets, course_notebook

KEY = "tinygpt_grading"
VERSION = 1


class RecordVerdicts(NbGraderPreprocessor):
    """After IndependentChecks: each test cell's verdict (kind, mistake, message) as cell metadata."""

    key = Unicode(KEY, help="Metadata key (notebook and test cells) the verdicts are kept under; "
                            "the class report reads the same key").tag(config=True)
    quote_limit = Integer(300, help="Characters of a verdict's message kept (its first line)").tag(config=True)

    def preprocess(self, nb, resources):
        nb.metadata.pop(self.key, None)           # whatever the learner's notebook said
        for cell in nb.cells:
            cell.metadata.pop(self.key, None)
        info = resources.get("nbgrader", {})
        state = resources.get("tinygpt", {})
        source, verdicts = state.get("source"), state.get("verdicts")
        nb.metadata[self.key] = {
            "version": VERSION,
            "lesson": source.name if source is not None else None,
            "judged": verdicts is not None,
            "flagged": sorted(state.get("flagged") or []),
            "broken": self._broken(info),
        }
        if not verdicts:
            return nb, resources
        scrub = Secrets(course_notebook(self.config, info), nb).scrub
        for cell in nb.cells:
            gid = cell.metadata.get("nbgrader", {}).get("grade_id")
            if is_grade(cell) and not is_solution(cell) and gid in verdicts:
                v = verdicts[gid]
                cell.metadata[self.key] = {"check": gid, "passed": bool(v.passed), "kind": v.kind.value,
                                           "mistake": v.mistake, "message": scrub(quote(v.message, self.quote_limit))}
        return nb, resources

    def _broken(self, info):
        """The submitted notebook was not valid JSON: repair.pre_convert_hook kept it as .broken."""
        if not info.get("assignment") or not info.get("student") or not info.get("notebook"):
            return False
        coursedir = CourseDirectory(config=self.config)
        folder = coursedir.format_path(coursedir.submitted_directory, info["student"], info["assignment"])
        return os.path.isfile(os.path.join(folder, info["notebook"] + ".ipynb.broken"))


def read_verdicts(nb, key=KEY):
    """What RecordVerdicts kept in an autograded notebook (a dict of plain JSON values):
    ``{"lesson", "judged", "flagged", "broken", "checks": {check id: {passed, kind, mistake,
    message}}}``, or None when the notebook holds none (graded before this step existed)."""
    meta = nb.get("metadata", {}).get(key)
    if not isinstance(meta, dict):
        return None
    checks = {}
    for cell in nb.get("cells", []):
        v = cell.get("metadata", {}).get(key)
        if isinstance(v, dict) and isinstance(v.get("check"), str):
            checks[v["check"]] = v
    return {**meta, "checks": checks}
