"""The multihead lesson's checks package: its notebook calls ``Printout``, ``explain_numbers``
and ``check`` (tinygpt_course.checks.notebook.InKernel); grading uses the two halves,
``extract`` and ``judge`` (tinygpt_course.checks.protocol).
"""
from ..common import changed_last_letter  # noqa: F401  (the runner cell uses it)
from ..notebook import InKernel
from .extract import extract  # noqa: F401  (bound before any learner code runs)
from .judge import LESSON

CheckFailed, CHECKS, Printout, check, explain_numbers, hint = InKernel(
    LESSON,
    names=("MultiHead", "Head", "embed", "xb"),             # what the checks read from the notebook
    free=("head 1 at position 7 takes", "head 2 at position 7 takes"),   # follow the draw order
    what="two weight lines",
).exports()
