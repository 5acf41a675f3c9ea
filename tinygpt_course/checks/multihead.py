"""The multihead lesson's checks, one per group of printout lines.

In the notebook::

    from tinygpt_course.checks import multihead as checks
    checks.check("shapes", MultiHead, Head, embed, xb)

A passing check prints a line starting with a tick; a failing one raises CheckFailed with the
likely mistake and its fix.
"""
import torch

from . import CheckFailed
from .multihead_extract import HEAD_SIZE, LAST, N_EMBD, N_HEADS, changed_last_letter, extract  # noqa: F401
from .multihead_judge import (ATOL, EXPECTED_PARAMS, UNANSWERED, expected, forward_problem,
                              structure_problem)

DEFAULT_SEED = 2024  # the fixed weights the in-notebook checks load (grading draws its own)

# name -> the printout lines it covers (shown to the learner and the teacher)
CHECKS = {
    "shapes": "h / out / each head gives",
    "weight_count": "weights to learn",
    "out_is_proj": "out is proj(head 1 and head 2 side by side)",
    "attention_weights": "window 0 / head 1 and head 2 at position 7",
    "causal": "change position 7",
}


def _judge_shapes(rec, exp, xb):
    h_shape = [xb.shape[0], xb.shape[1], N_EMBD]
    problem = forward_problem(rec, exp)
    if problem and "shape" not in problem and rec.get("out") is None:
        return False, problem
    outs = [list(o.shape) for o in rec.get("head_outs", [])]
    if outs != [[*h_shape[:2], HEAD_SIZE]] * N_HEADS:
        return False, f"each head should give [32, 8, 16]; yours gave {outs}."
    out = rec.get("out")
    if out is None or list(out.shape) != h_shape:
        return False, problem or f"out should be [32, 8, 32]; yours is {None if out is None else list(out.shape)}."
    return True, "h: [32, 8, 32], out: [32, 8, 32], each head gives [32, 8, 16]"


def _judge_weight_count(rec, exp, xb):
    problem = structure_problem(rec["structure"], for_count=True)
    n = rec["structure"]["n_params"]
    if problem or n != EXPECTED_PARAMS:
        return False, problem or f"weights to learn: {n}, expected {EXPECTED_PARAMS}."
    return True, f"weights to learn: {EXPECTED_PARAMS}"


def _judge_out_is_proj(rec, exp, xb):
    problem = forward_problem(rec, exp)
    if problem:
        return False, problem
    return True, "out is proj(head 1 and head 2 side by side), checked with fixed weights"


def _judge_attention_weights(rec, exp, xb):
    if rec.get("error"):  # the runner never gets to print these lines
        return False, forward_problem(rec, exp)
    got = rec.get("head_weights") or []
    if len(got) != N_HEADS or any(w is None for w in got):
        return False, "the heads kept no attention weights: run every head of self.heads on x in forward."
    for i, (w, e) in enumerate(zip(got, exp["weights"]), 1):
        if w.shape != e.shape or not torch.allclose(w, e, atol=ATOL):
            return False, (f"head {i}'s attention weights for window 0 are not what Head computes on "
                           "the block's input: give each head x itself, unchanged.")
    return True, "window 0 and both heads' weights at position 7, checked with fixed weights"


def _judge_causal(rec, exp, xb):
    out, out2 = rec.get("out"), rec.get("changed_out")
    if out is None or out2 is None or out.shape != out2.shape or out.dim() != 3:
        return False, forward_problem(rec, exp) or f"forward raised {rec.get('changed_error')}"
    if out.shape[1] <= LAST:
        return False, f"out has {out.shape[1]} positions, not 8: {forward_problem(rec, exp)}"

    if not torch.allclose(out[:, :LAST], out2[:, :LAST], atol=ATOL):
        return False, ("changing the last letter changed earlier positions: your forward mixes "
                       "positions (the heads' mask keeps each position from seeing later ones).")
    if torch.allclose(out[:, LAST], out2[:, LAST], atol=ATOL):
        return False, "changing the last letter did not change the last position's output."
    return True, "change position 7: positions 0-6 stay the same | position 7 changes"


_JUDGES = {"shapes": _judge_shapes, "weight_count": _judge_weight_count,
           "out_is_proj": _judge_out_is_proj, "attention_weights": _judge_attention_weights,
           "causal": _judge_causal}


def judge(name, rec, Head, embed, xb):
    """(passed, message) for check `name` on the record `rec` that extract() made."""
    if name not in _JUDGES:
        raise KeyError(f"unknown check {name!r}; the checks are {list(_JUDGES)}")
    if rec.get("init_error") == "unanswered":
        return False, UNANSWERED
    if rec.get("init_error"):
        return False, f"MultiHead() failed: {rec['init_error']}"
    if name != "weight_count" and "out" not in rec and "error" not in rec:
        return False, structure_problem(rec["structure"]) or "MultiHead's layers are not as the task asks."
    if name in ("out_is_proj", "attention_weights", "causal"):
        problem = structure_problem(rec["structure"])
        if problem and not problem.startswith("self.heads is a plain"):
            return False, problem
    return _JUDGES[name](rec, expected(rec, Head, embed, xb), xb)


def check(name, MultiHead, Head, embed, xb, seed=DEFAULT_SEED):
    """Run one check in this kernel; raise CheckFailed with the diagnosis when it fails."""
    ok, message = judge(name, extract(MultiHead, embed, xb, seed), Head, embed, xb)
    if not ok:
        raise CheckFailed(f"[{CHECKS[name]}] {message}")
    print("\u2713", message)


def explain_numbers(mh, MultiHead, Head, embed, xb, runner_seed):
    """Say whether the printed weight lines match the documented ones, and why not."""
    with torch.random.fork_rng(), torch.no_grad():
        torch.manual_seed(runner_seed)
        ref_heads = [Head(HEAD_SIZE) for _ in range(N_HEADS)]  # first in the task's order
        h = embed(xb)
        for head in ref_heads:
            head(h)
        documented = [head.weights[0, LAST] for head in ref_heads]
        printed = []
        for head in getattr(mh, "heads", []):  # the learner's heads, on h again
            head(h)
            printed.append(head.weights[0, LAST])
    if len(printed) == N_HEADS and all(torch.allclose(p, d, atol=1e-4) for p, d in zip(printed, documented)):
        print("\u2713 your two weight lines are the documented ones.")
        return
    rec = extract(MultiHead, embed, xb, DEFAULT_SEED)
    if all(judge(name, rec, Head, embed, xb)[0] for name in ("out_is_proj", "attention_weights")):
        print("Your two weight lines differ from the documented ones, and that is fine: your "
              "__init__ draws its random numbers in another order than the reference (for example "
              "the projection before the heads, or an extra random draw), so your heads start "
              "from other random weights. With the same starting weights your MultiHead gives "
              "exactly the reference's numbers, and that is what the graded checks test.")
    else:
        print("Your weight lines differ from the documented ones: the checks below say what to fix.")


# The grading protocol (tinygpt_course.grading): every lesson's checks module offers these two.
# `ns` is the namespace of the lesson's trusted set-up cells (from source/), plus, for
# extract_ns only, the learner's answer cell run after them.
def extract_ns(ns, seed):
    return extract(ns["MultiHead"], ns["embed"], ns["xb"], seed)


def judge_ns(ns, name, rec):
    return judge(name, rec, ns["Head"], ns["embed"], ns["xb"])
