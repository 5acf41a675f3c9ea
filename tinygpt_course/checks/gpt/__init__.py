"""The gpt lesson's checks in the notebook: its runner, numbers note and check cells use
``Printout``, ``explain_numbers`` and ``check`` (see tinygpt_course.checks.notebook.InKernel);
grading uses the two halves, ``extract`` and ``judge`` (tinygpt_course.checks.protocol).
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

_in_kernel = notebook.InKernel(LESSON, NAMES, FREE, what="loss and untrained letters")
Printout, check, explain_numbers = _in_kernel.Printout, _in_kernel.check, _in_kernel.explain_numbers
