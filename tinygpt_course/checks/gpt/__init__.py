"""The gpt lesson's checks, one per group of printout lines.

In the notebook::

    from tinygpt_course.checks import gpt as checks
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
from .extract import extract  # noqa: F401
from .judge import LESSON

CHECKS = LESSON.checks
DEFAULT_SEED = LESSON.default_seed
NAMES = ("GPT", "xb", "yb")                       # what the checks read from the notebook
# printout lines whose numbers depend on the order the learner's __init__ draws random numbers
FREE = ("loss before training", "untrained, it writes")


def Printout(notebook_globals):
    """The runner's printout: each `with printout.step(check):` block that fails in the
    learner's code says why in one paragraph, and the cell goes on."""
    return notebook.Printout(LESSON, notebook_globals, NAMES)


def check(name, *objects):
    """Run one check in this kernel; raise CheckFailed with the diagnosis when it fails.

    ``check(name, globals())`` reads GPT, xb and yb from the notebook (a missing one fails in
    the learner's terms); ``check(name, GPT, xb, yb)`` takes them."""
    if len(objects) == 1 and isinstance(objects[0], dict):
        notebook.check_in(LESSON, name, objects[0], NAMES, free=FREE)
    else:
        notebook.check(LESSON, name, dict(zip(NAMES, objects)), free=FREE)


def explain_numbers(printout):
    """Say how the printed lines, and only those, compare with the documented ones."""
    notebook.explain_numbers(printout, free=FREE, what="loss and untrained letters")
