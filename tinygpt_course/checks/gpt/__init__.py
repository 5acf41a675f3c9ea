"""The gpt lesson's checks package: its notebook calls ``Printout``, ``explain_numbers`` and
``check`` (tinygpt_course.checks.notebook.InKernel); grading uses the two halves, ``extract``
and ``judge`` (tinygpt_course.checks.protocol).
"""
from ..common import on_call  # noqa: F401  (the runner cell uses it)
from ..notebook import InKernel
from .extract import extract  # noqa: F401  (bound before any learner code runs)
from .judge import LESSON

CheckFailed, CHECKS, Printout, check, explain_numbers, hint = InKernel(
    LESSON,
    names=("GPT", "xb", "yb"),                              # what the checks read from the notebook
    free=("loss before training", "untrained, it writes",   # numbers that follow the learner's draw order
          "output layer gets, window 0 position 7"),        # and its initialisation (std 0.02: 0.99)
    what="loss and untrained letters",
).exports()
