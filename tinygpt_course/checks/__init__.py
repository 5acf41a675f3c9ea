"""Checks with diagnoses for the lessons' printouts.

Each lesson's checks are split in two halves so that grading can run them in two processes:
``extract`` runs the learner's code and records raw numbers (it is the only half that touches
learner code), ``judge`` compares those numbers with what trusted code computes and names the
likely mistake. In the notebook both halves run in the learner's kernel; under
``nbgrader autograde`` the grading step in ``tinygpt_course.grading`` runs ``extract`` in a
sandboxed process and ``judge`` in a clean one.
"""


class CheckFailed(AssertionError):
    """A check that failed, with a diagnosis in the learner's terms."""
