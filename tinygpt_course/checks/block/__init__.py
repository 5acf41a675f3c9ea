"""The block lesson's checks package: its notebook calls ``Printout``, ``explain_numbers`` and
``check`` (tinygpt_course.checks.notebook.InKernel); grading uses the two halves, ``extract``
and ``judge`` (tinygpt_course.checks.protocol).
"""
from ..common import changed_last_letter, on_call  # noqa: F401  (the runner cell uses them)
from ..notebook import InKernel
from .extract import extract  # noqa: F401  (bound before any learner code runs)
from .judge import LESSON

CheckFailed, CHECKS, Printout, check, explain_numbers, hint = InKernel(
    LESSON,
    names=("Block", "MultiHead", "embed", "xb"),            # what the checks read (Block() needs MultiHead)
    free=("out at window 0, position 7 starts",),           # numbers that follow the learner's draw order
    what="`out at window 0, position 7` numbers",
).exports()
