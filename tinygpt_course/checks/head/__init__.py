"""The head lesson's checks, one per group of printout lines.

In the notebook::

    from tinygpt_course.checks import head as checks
    checks.check("shapes", Head, embed, xb)

A passing check prints a line starting with a tick; a failing one raises CheckFailed with the
likely mistake and its fix. ``extract`` (learner side) and ``judge`` (trusted) are the two
halves grading uses; see tinygpt_course.checks.protocol.
"""
import torch
from torch import nn

from ...config import SIZES
from .. import notebook
from ..common import changed_last_letter  # noqa: F401  (the runner cell uses it)
from .extract import PARTS, extract  # noqa: F401
from .judge import LESSON

CHECKS = LESSON.checks
DEFAULT_SEED = LESSON.default_seed


def check(name, Head, embed, xb):
    """Run one check in this kernel; raise CheckFailed with the diagnosis when it fails."""
    notebook.check(LESSON, name, {"Head": Head, "embed": embed, "xb": xb})


def explain_numbers(head, Head, embed, xb, runner_seed):
    """Say whether the printed weight lines match the documented ones, and why not."""
    with torch.random.fork_rng():
        torch.manual_seed(runner_seed)  # the task's order: key, query, value
        drawn = {part: nn.Linear(SIZES.n_embd, SIZES.head_size, bias=False).weight for part in PARTS}
    mine = {part: getattr(getattr(head, part, None), "weight", None) for part in PARTS}
    same = all(torch.is_tensor(mine[p]) and mine[p].shape == drawn[p].shape and torch.equal(mine[p], drawn[p])
               for p in PARTS)
    passes = notebook.verdict(LESSON, "attention_weights", {"Head": Head, "embed": embed, "xb": xb}).passed
    if same and passes:
        print("\u2713 your two weight lines are the documented ones.")
    elif passes:
        print("Your weight lines differ from the documented ones, and that is fine: your __init__ "
              "draws its random numbers in another order than the reference (key, then query, then "
              "value), so your head starts from other random weights. With the same starting "
              "weights your Head gives exactly the reference's numbers, and that is what the "
              "graded checks test.")
    else:
        print("Your weight lines differ from the documented ones: the checks below say what to fix.")
