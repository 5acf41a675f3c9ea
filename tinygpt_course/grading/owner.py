"""Submissions are who they say: a submission whose files belong to another Unix user is not
graded as the student it names.

On a shared machine every learner submits as their own Unix user, so the owner of a submission's
files says who made it. Files may belong to the student named (their own submission) or to the
grading user (nbgrader collect copies submissions as the teacher; CheckedCollect only copies
those whose owner matches). Anything else, for example bob's files in submitted/alice/, is a
spoof: ``CheckOwner`` (first sanitize step) refuses to grade it, ``tinygpt-grade-class`` reports
it and leaves it aside, and CheckedCollect never collects it. The same walk refuses what is not
plain data (a symlink, a FIFO, an 1100-deep chain: ``submission_tree.py``).
"""
import os

from nbgrader.coursedir import CourseDirectory
from nbgrader.preprocessors import NbGraderPreprocessor


class SpoofedSubmission(Exception):
    """A submission whose files belong to someone other than the student it names, or that is
    not plain data (a symlink, a FIFO, too deep: submission_tree.py)."""


def submission_problem(folder, student, grader_uid=None, config=None):
    """None if `folder` (submitted/<student>/<assignment>, or an inbound submission) holds only
    regular files and folders within SubmissionTree's bounds, each the student's or the grading
    user's; else the Refusal. The folder's own parent (submitted/<student>) must not be a symlink
    either: an LMS zip unpacked there could make submitted/alice a link to source/."""
    from .submission_tree import Refusal, SubmissionTree, shown
    parent = os.path.dirname(os.path.abspath(folder))
    if os.path.islink(parent):
        return Refusal("symlink", shown(os.path.basename(parent)), "is a symlink: only regular files and folders are taken")
    return SubmissionTree(config=config).check(folder, student, grader_uid)


class CheckOwner(NbGraderPreprocessor):
    """First sanitize step: refuse to grade a submission whose files belong to another user, or
    that is not plain data (pre_convert_hook has already moved such a one aside; this is the
    check again, for a hook left out of the config)."""

    def preprocess(self, nb, resources):
        info = resources["nbgrader"]
        coursedir = CourseDirectory(config=self.config)
        folder = coursedir.format_path(coursedir.submitted_directory, info["student"], info["assignment"])
        problem = submission_problem(folder, info["student"], config=self.config) if os.path.lexists(folder) else None
        if problem:
            self.log.error("FLAGGED %s/%s: %s", info["student"], info["assignment"], problem)
            raise SpoofedSubmission(problem)
        return nb, resources
