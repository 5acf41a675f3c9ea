"""The block lesson's checks, one per group of printout lines.

In the notebook::

    from tinygpt_course.checks import block as checks
    checks.check("shapes", Block, MultiHead, embed, xb)

A passing check prints a line starting with a tick; a failing one raises CheckFailed with the
likely mistake and its fix.
"""
import torch
from torch import nn

from . import CheckFailed
from .block_extract import HIDDEN, LAST, N_EMBD, changed_last_letter, extract  # noqa: F401
from .block_judge import (ATOL, UNANSWERED, expected_params, forward_problem, layers, norms_problem,
                          residual_problem, structure_problem)

DEFAULT_SEED = 2024  # the fixed weights the in-notebook checks load (grading draws its own)

# name -> the printout lines it covers (shown to the learner and the teacher)
CHECKS = {
    "shapes": "h / out",
    "weight_count": "weights to learn",
    "layer_norms": "attention gets / feed-forward gets",
    "residuals": "out is h + attention's output + feed-forward's output / out at position 7",
    "causal": "change position 7",
}


def _judge_shapes(rec, f, x, MultiHead):
    problem = forward_problem(rec)
    if problem and not problem.startswith("forward never calls"):
        return False, problem
    return True, "h: [32, 8, 32], out: [32, 8, 32]"


def _judge_weight_count(rec, f, x, MultiHead):
    want = expected_params(MultiHead)
    return True, (f"weights to learn: {sum(want.values())} | attention {want['sa']} | "
                  f"feed-forward {want['ffwd']} | layer norms {want['ln1'] + want['ln2']}")


def _judge_layer_norms(rec, f, x, MultiHead):
    problem = forward_problem(rec) or norms_problem(rec, x, f)
    if problem:
        return False, problem
    return True, "the attention gets ln1(x), the feed-forward ln2(x + attention), checked with fixed weights"


def _judge_residuals(rec, f, x, MultiHead):
    problem = forward_problem(rec) or residual_problem(rec, x, f)
    if problem:
        return False, problem
    return True, "out is x + attention's output + feed-forward's output, checked with fixed weights"


def _judge_causal(rec, f, x, MultiHead):
    problem = forward_problem(rec) or forward_problem(rec, "changed_")
    if problem:
        return False, problem
    out, out2 = rec["out"], rec["changed_out"]
    if not torch.allclose(out[:, :LAST], out2[:, :LAST], atol=ATOL):
        return False, ("changing the last letter changed earlier positions: something in your forward "
                       "mixes positions. A layer norm over the whole window (nn.LayerNorm([8, 32]) or "
                       "F.layer_norm(x, x.shape[1:])) does: normalise each position's 32 numbers alone.")
    if torch.allclose(out[:, LAST], out2[:, LAST], atol=ATOL):
        return False, "changing the last letter did not change the last position's output."
    return True, "change position 7: positions 0-6 stay the same | position 7 changes"


_JUDGES = {"shapes": _judge_shapes, "weight_count": _judge_weight_count,
           "layer_norms": _judge_layer_norms, "residuals": _judge_residuals, "causal": _judge_causal}


def judge(name, rec, MultiHead, embed, xb):
    """(passed, message) for check `name` on the record `rec` that extract() made."""
    if name not in _JUDGES:
        raise KeyError(f"unknown check {name!r}; the checks are {list(_JUDGES)}")
    if rec.get("init_error") == "unanswered":
        return False, UNANSWERED
    if rec.get("init_error"):
        return False, f"Block() failed: {rec['init_error']}"
    problem = structure_problem(rec["structure"], MultiHead)
    if problem:
        return False, problem
    with torch.no_grad():
        x = embed(xb)
    return _JUDGES[name](rec, layers(rec["seed"], MultiHead), x, MultiHead)


def check(name, Block, MultiHead, embed, xb, seed=DEFAULT_SEED):
    """Run one check in this kernel; raise CheckFailed with the diagnosis when it fails."""
    ok, message = judge(name, extract(Block, embed, xb, seed), MultiHead, embed, xb)
    if not ok:
        raise CheckFailed(f"[{CHECKS[name]}] {message}")
    print("\u2713", message)


def explain_numbers(block, Block, MultiHead, embed, xb, runner_seed):
    """Say whether the printed lines match the documented ones, and why not."""
    with torch.random.fork_rng():
        torch.manual_seed(runner_seed)  # the order of the task: attention, then feed-forward
        reference = {f"sa.{n}": p for n, p in MultiHead().named_parameters()}
        ffwd = nn.Sequential(nn.Linear(N_EMBD, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, N_EMBD))
        reference.update({f"ffwd.{n}": p for n, p in ffwd.named_parameters()})
    mine = dict(block.named_parameters())
    same = all(n in mine and mine[n].shape == p.shape and torch.equal(mine[n], p) for n, p in reference.items())
    rec = extract(Block, embed, xb, DEFAULT_SEED)
    passes = all(judge(n, rec, MultiHead, embed, xb)[0] for n in ("layer_norms", "residuals"))
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


# The grading protocol (tinygpt_course.grading): `ns` is the namespace of the lesson's trusted
# set-up cells (from source/), plus, for extract_ns only, the learner's answer cell.
def extract_ns(ns, seed):
    return extract(ns["Block"], ns["embed"], ns["xb"], seed)


def judge_ns(ns, name, rec):
    return judge(name, rec, ns["MultiHead"], ns["embed"], ns["xb"])
