"""The block lesson's checks, one per group of printout lines.

In the notebook::

    from tinygpt_course.checks import block as checks
    printout = checks.Printout(globals())        # the runner cell, step by step
    with printout.step('shapes'):
        ...
    checks.explain_numbers(printout)             # the numbers note
    checks.check("shapes", globals())            # a visible check cell

A passing check prints a line starting with a tick; a failing one raises CheckFailed with the
likely mistake and its fix. ``extract`` (learner side) and ``judge`` (trusted) are the two
halves grading uses; see tinygpt_course.checks.protocol. Nothing here computes the lesson's
answer: the expected values are the solution's record (reference.pt) and the documented
printout (printout.txt), both stored data.
"""
from .. import CheckFailed  # noqa: F401  (the check cells raise it)
from .. import notebook
from ..common import changed_last_letter  # noqa: F401  (the runner cell uses it)
from .extract import extract  # noqa: F401
from .judge import LESSON

CHECKS = LESSON.checks
DEFAULT_SEED = LESSON.default_seed
NAMES = ("Block", "MultiHead", "embed", "xb")     # what the checks read (Block() builds MultiHead by name)
# printout lines whose numbers depend on the order the learner's __init__ draws random numbers
FREE = ("out at window 0, position 7 starts",)

_in_kernel = notebook.InKernel(LESSON, NAMES, FREE, what="`out at window 0, position 7` numbers")
Printout, check, explain_numbers = _in_kernel.Printout, _in_kernel.check, _in_kernel.explain_numbers
