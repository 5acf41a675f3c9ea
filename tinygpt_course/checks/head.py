"""The head lesson's checks, one per group of printout lines.

In the notebook::

    from tinygpt_course.checks import head as checks
    checks.check("shapes", Head, embed, xb)

A passing check prints a line starting with a tick; a failing one raises CheckFailed with the
likely mistake and its fix.
"""
import torch
from torch import nn

from . import CheckFailed
from .head_extract import HEAD_SIZE, LAST, N_EMBD, PARTS, changed_last_letter, extract  # noqa: F401
from .head_judge import (ATOL, EXPECTED_PARAMS, UNANSWERED, attention, expected, structure_problem,
                         value_problem, weights_problem)

DEFAULT_SEED = 2024  # the fixed weights the in-notebook checks load (grading draws its own)

# name -> the printout lines it covers (shown to the learner and the teacher)
CHECKS = {
    "shapes": "out / weights",
    "weight_count": "weights to learn / buffers",
    "rows_and_mask": "every row adds up to 1 | nothing above the diagonal",
    "attention_weights": "window 0 / position 7 takes / position 2 takes",
    "out_is_weighted_values": "out is weights @ value(h)",
    "causal": "change position 7",
}


def _judge_shapes(rec, exp):
    if rec.get("error"):
        return False, weights_problem(rec)
    out, w = rec.get("out"), rec.get("weights")
    if out is None or list(out.shape) != [32, 8, HEAD_SIZE]:
        return False, value_problem(rec, exp, None) or "out should be [32, 8, 16]."
    if w is None or list(w.shape) != [32, 8, 8]:
        return False, weights_problem(rec)
    return True, "out: [32, 8, 16], weights: [32, 8, 8]"


def _judge_weight_count(rec, exp):
    problem = structure_problem(rec["structure"], for_count=True)
    if problem:
        return False, problem
    return True, f"weights to learn: {EXPECTED_PARAMS} | the mask is a registered buffer"


def _judge_rows_and_mask(rec, exp):
    problem = weights_problem(rec)
    if problem:
        return False, problem
    return True, "every row adds up to 1 | nothing above the diagonal, checked with fixed weights"


def _judge_attention_weights(rec, exp):
    problem = weights_problem(rec)
    if problem:
        return False, problem
    w = rec["weights"]
    if torch.allclose(w, exp["weights"], atol=ATOL):
        return True, "the weights of every window and position, checked with fixed weights"
    for weights, message in exp["misses"]:
        if torch.allclose(w, weights, atol=ATOL):
            return False, message
    return False, ("the weights are not the softmax of the masked, scaled scores "
                   "q @ k^T * head_size ** -0.5, with q = self.query(x) and k = self.key(x).")


def _judge_out_is_weighted_values(rec, exp):
    w = rec.get("weights")
    if rec.get("error") or w is None or list(w.shape) != [32, 8, 8]:
        problem = weights_problem(rec)
    else:
        problem = value_problem(rec, exp, w)
    if problem:
        return False, problem
    return True, "out is weights @ value(h), checked with fixed weights"


def _judge_causal(rec, exp):
    out, out2 = rec.get("out"), rec.get("changed_out")
    if out is None or out2 is None or out.shape != out2.shape or out.dim() != 3 or out.shape[1] <= LAST:
        return False, weights_problem(rec) or weights_problem(rec, "changed_") or "forward gave no [32, 8, 16] output."
    if not torch.allclose(out[:, :LAST], out2[:, :LAST], atol=ATOL):
        return False, ("changing the last letter changed earlier positions: they see the future. "
                       "Mask the scores above the diagonal with float('-inf') before the softmax.")
    if torch.allclose(out[:, LAST], out2[:, LAST], atol=ATOL):
        return False, "changing the last letter did not change the last position's output."
    return True, "change position 7: positions 0-6 stay the same | position 7 changes"


_JUDGES = {"shapes": _judge_shapes, "weight_count": _judge_weight_count,
           "rows_and_mask": _judge_rows_and_mask, "attention_weights": _judge_attention_weights,
           "out_is_weighted_values": _judge_out_is_weighted_values, "causal": _judge_causal}


def judge(name, rec, embed, xb):
    """(passed, message) for check `name` on the record `rec` that extract() made."""
    if name not in _JUDGES:
        raise KeyError(f"unknown check {name!r}; the checks are {list(_JUDGES)}")
    if rec.get("init_error") == "unanswered":
        return False, UNANSWERED
    if rec.get("init_error"):
        return False, f"Head(16) failed: {rec['init_error']}"
    problem = structure_problem(rec["structure"], for_count=name == "weight_count")
    if problem:
        return False, problem
    return _JUDGES[name](rec, expected(rec["seed"], embed, xb))


def check(name, Head, embed, xb, seed=DEFAULT_SEED):
    """Run one check in this kernel; raise CheckFailed with the diagnosis when it fails."""
    ok, message = judge(name, extract(Head, embed, xb, seed), embed, xb)
    if not ok:
        raise CheckFailed(f"[{CHECKS[name]}] {message}")
    print("\u2713", message)


def explain_numbers(head, Head, embed, xb, runner_seed):
    """Say whether the printed weight lines match the documented ones, and why not."""
    with torch.random.fork_rng(), torch.no_grad():
        torch.manual_seed(runner_seed)  # the order of the task: key, query, value
        k, q, v = (nn.Linear(N_EMBD, HEAD_SIZE, bias=False) for _ in PARTS)
        x = embed(xb)
        documented = attention(q(x), k(x), torch.eye(x.shape[1]).expand(x.shape[0], -1, -1))[0]
        try:
            head(x)
        except Exception:
            pass  # the checks below name the problem
    printed = getattr(head, "weights", None)
    if torch.is_tensor(printed) and printed.shape[1:] == documented.shape and torch.allclose(
            printed[0], documented, atol=1e-4):
        print("\u2713 your two weight lines are the documented ones.")
        return
    rec = extract(Head, embed, xb, DEFAULT_SEED)
    if judge("attention_weights", rec, embed, xb)[0]:
        print("Your weight lines differ from the documented ones, and that is fine: your __init__ "
              "draws its random numbers in another order than the reference (key, then query, then "
              "value), so your head starts from other random weights. With the same starting "
              "weights your Head gives exactly the reference's numbers, and that is what the "
              "graded checks test.")
    else:
        print("Your weight lines differ from the documented ones: the checks below say what to fix.")


# The grading protocol (tinygpt_course.grading): `ns` is the namespace of the lesson's trusted
# set-up cells (from source/), plus, for extract_ns only, the learner's answer cell.
def extract_ns(ns, seed):
    return extract(ns["Head"], ns["embed"], ns["xb"], seed)


def judge_ns(ns, name, rec):
    return judge(name, rec, ns["embed"], ns["xb"])
