"""Submissions are who they say: a submission whose files belong to another Unix user is not
graded as the student it names.

On a shared machine every learner submits as their own Unix user, so the owner of a submission's
files says who made it. Files may belong to the student named (their own submission) or to the
grading user (nbgrader collect copies submissions as the teacher; CheckedCollect only copies
those whose owner matches). Anything else, for example bob's files in submitted/alice/, is a
spoof: ``CheckOwner`` (first sanitize step) refuses to grade it, ``tinygpt-grade-class`` reports
it and leaves it aside, and CheckedCollect never collects it.
"""
import os
import pwd

from nbgrader.coursedir import CourseDirectory
from nbgrader.preprocessors import NbGraderPreprocessor


class SpoofedSubmission(Exception):
    """A submission whose files belong to someone other than the student it names."""


def user_name(uid):
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid {uid}"


def owner_problem(folder, student, grader_uid=None):
    """None if every file under `folder` belongs to `student` or to the grading user; else why not."""
    grader_uid = os.geteuid() if grader_uid is None else grader_uid
    try:
        student_uid = pwd.getpwnam(student).pw_uid
    except KeyError:
        student_uid = None
    paths = [folder] + [os.path.join(d, f) for d, dirs, files in os.walk(folder) for f in dirs + files]
    for path in paths:
        uid = os.lstat(path).st_uid
        if uid not in (grader_uid, student_uid):
            return (f"{os.path.relpath(path, os.path.dirname(folder))} belongs to {user_name(uid)}, "
                    f"not to {student}: not graded as {student} (a submission made for someone else?)")
    return None


class CheckOwner(NbGraderPreprocessor):
    """First sanitize step: refuse to grade a submission whose files belong to another user."""

    def preprocess(self, nb, resources):
        info = resources["nbgrader"]
        coursedir = CourseDirectory(config=self.config)
        folder = coursedir.format_path(coursedir.submitted_directory, info["student"], info["assignment"])
        problem = owner_problem(folder, info["student"]) if os.path.isdir(folder) else None
        if problem:
            self.log.error("FLAGGED %s/%s: %s", info["student"], info["assignment"], problem)
            raise SpoofedSubmission(problem)
        return nb, resources
