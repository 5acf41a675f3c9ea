"""Running a lesson's checks in the learner's own kernel (visible checks, Validate).

The learner's record is made with the lesson's default seed and judged against
``reference.pt``: the record of the lesson's solution for that seed, stored as data beside the
judge. Grading does not use this: it re-runs the answer in a sandbox with a seed of its own.
"""
import functools
import importlib
from importlib import resources

import torch

from . import CheckFailed


@functools.lru_cache(maxsize=None)
def reference(lesson_name):
    """The stored record of the lesson's solution, for its default seed."""
    path = resources.files(f"tinygpt_course.checks.{lesson_name}") / "reference.pt"
    with resources.as_file(path) as p:
        return torch.load(p, weights_only=True)


def verdict(lesson, check_id, ns):
    """The Verdict of one check for the names in ns (the learner's MultiHead, embed, xb, ...)."""
    extract = importlib.import_module(lesson.extract_module).extract
    return lesson.verdict(check_id, extract(ns, lesson.default_seed), reference(lesson.name))


def check(lesson, check_id, ns):
    """Print a tick and the message, or raise CheckFailed naming the likely mistake."""
    v = verdict(lesson, check_id, ns)
    if not v.passed:
        raise CheckFailed(f"[{lesson.checks[check_id]}] {v.message}")
    print("\u2713", v.message)
