"""The block lesson's checks, one per group of printout lines.

In the notebook::

    from tinygpt_course.checks import block as checks
    checks.check("shapes", Block, MultiHead, embed, xb)

A passing check prints a line starting with a tick; a failing one raises CheckFailed with the
likely mistake and its fix. ``extract`` (learner side) and ``judge`` (trusted) are the two
halves grading uses; see tinygpt_course.checks.protocol.
"""
import torch
from torch import nn

from ...config import SIZES
from .. import notebook
from ..common import changed_last_letter  # noqa: F401  (the runner cell uses it)
from .extract import extract  # noqa: F401
from .judge import LESSON

CHECKS = LESSON.checks
DEFAULT_SEED = LESSON.default_seed


def check(name, Block, MultiHead, embed, xb):
    """Run one check in this kernel; raise CheckFailed with the diagnosis when it fails.
    (MultiHead is the set-up cell's: Block() builds it by name.)"""
    notebook.check(LESSON, name, {"Block": Block, "MultiHead": MultiHead, "embed": embed, "xb": xb})


def explain_numbers(block, Block, MultiHead, embed, xb, runner_seed):
    """Say whether the printed lines match the documented ones, and why not."""
    C, H = SIZES.n_embd, SIZES.ffwd_hidden
    with torch.random.fork_rng():
        torch.manual_seed(runner_seed)  # the task's order: the attention, then the feed-forward
        drawn = {f"sa.{n}": p for n, p in MultiHead().named_parameters()}
        ffwd = nn.Sequential(nn.Linear(C, H), nn.ReLU(), nn.Linear(H, C))
        drawn.update({f"ffwd.{n}": p for n, p in ffwd.named_parameters()})
    mine = dict(block.named_parameters())
    same = all(n in mine and mine[n].shape == p.shape and torch.equal(mine[n], p) for n, p in drawn.items())
    ns = {"Block": Block, "MultiHead": MultiHead, "embed": embed, "xb": xb}
    passes = all(notebook.verdict(LESSON, n, ns).passed for n in ("layer_norms", "residuals"))
    if same and passes:
        print("\u2713 your Block starts from the documented weights and passes the checks: your "
              "lines are the documented ones.")
    elif passes:
        print("Your numbers differ from the documented ones, and that is fine: your __init__ draws "
              "its random numbers in another order than the reference (the attention first, then "
              "the feed-forward), so your Block starts from other random weights. With the same "
              "starting weights it gives exactly the reference's numbers, and that is what the "
              "graded checks test.")
    else:
        print("Your lines may differ from the documented ones: the checks below say what to fix.")
