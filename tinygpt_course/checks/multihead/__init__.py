"""The multihead lesson's checks, one per group of printout lines.

In the notebook::

    from tinygpt_course.checks import multihead as checks
    checks.check("shapes", MultiHead, Head, embed, xb)

A passing check prints a line starting with a tick; a failing one raises CheckFailed with the
likely mistake and its fix. ``extract`` (learner side) and ``judge`` (trusted) are the two
halves grading uses; see tinygpt_course.checks.protocol.
"""
import torch

from ...config import SIZES
from .. import notebook
from ..common import changed_last_letter  # noqa: F401  (the runner cell uses it)
from .extract import extract
from .judge import LESSON

CHECKS = LESSON.checks
DEFAULT_SEED = LESSON.default_seed


def check(name, MultiHead, Head, embed, xb):
    """Run one check in this kernel; raise CheckFailed with the diagnosis when it fails."""
    notebook.check(LESSON, name, {"MultiHead": MultiHead, "Head": Head, "embed": embed, "xb": xb})


def explain_numbers(mh, MultiHead, Head, embed, xb, runner_seed):
    """Say whether the printed weight lines match the documented ones, and why not."""
    with torch.random.fork_rng(), torch.no_grad():
        torch.manual_seed(runner_seed)
        ref_heads = [Head(SIZES.head_size) for _ in range(SIZES.n_heads)]  # first in the task's order
        h = embed(xb)
        for head in ref_heads:
            head(h)
        documented = [head.weights[0, SIZES.last] for head in ref_heads]
        printed = []
        for head in getattr(mh, "heads", []):  # the learner's heads, on h again
            head(h)
            printed.append(head.weights[0, SIZES.last])
    if len(printed) == SIZES.n_heads and all(torch.allclose(p, d, atol=1e-4) for p, d in zip(printed, documented)):
        print("\u2713 your two weight lines are the documented ones.")
        return
    ns = {"MultiHead": MultiHead, "Head": Head, "embed": embed, "xb": xb}
    if all(notebook.verdict(LESSON, name, ns).passed for name in ("out_is_proj", "attention_weights")):
        print("Your two weight lines differ from the documented ones, and that is fine: your "
              "__init__ draws its random numbers in another order than the reference (for example "
              "the projection before the heads, or an extra random draw), so your heads start "
              "from other random weights. With the same starting weights your MultiHead gives "
              "exactly the reference's numbers, and that is what the graded checks test.")
    else:
        print("Your weight lines differ from the documented ones: the checks below say what to fix.")
