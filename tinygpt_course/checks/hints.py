"""Hint ladders: for every mistake a judge can name, three rungs, from the idea down to a nudge.

The ladders are data, kept beside each lesson's checks in ``<lesson>/hints.toml`` (the lesson's own
mistakes, ``Lesson.mistakes``) and in ``hints.toml`` here (the mistakes the shared steps name,
``protocol.SHARED_MISTAKES``, and the raw Python and torch errors learners hit). Each table is one
mistake id with three strings:

    [softmax_axis]
    idea = "..."    # rung 1: the idea, a sentence or two with a tiny example
    where = "..."   # rung 2: where it goes wrong in the learner's code (line, attribute, shape)
    nudge = "..."   # rung 3: a concrete nudge that still leaves the line to write

No rung ever holds a line of the solution or of a hidden test (tests/test_hints.py checks that
against source/). Reading a ladder needs no torch: the class report reads them in the grader.
"""
import tomllib
from functools import cache
from importlib import resources

RUNGS = ("idea", "where", "nudge")
SHARED = ""          # the shared ladders' "lesson": tinygpt_course/checks/hints.toml


def _read(lesson):
    folder = resources.files("tinygpt_course.checks")
    path = folder.joinpath(lesson, "hints.toml") if lesson else folder.joinpath("hints.toml")
    if not path.is_file():
        return {}
    return tomllib.loads(path.read_text(encoding="utf-8"))


@cache
def ladders(lesson):
    """Every ladder a learner of `lesson` may be shown: mistake id -> (idea, where, nudge).
    The lesson's own ladder wins over a shared one of the same id."""
    out = {}
    for source in (SHARED, lesson):
        for mistake, rungs in _read(source).items():
            missing = [r for r in RUNGS if not isinstance(rungs.get(r), str) or not rungs[r].strip()]
            if missing:
                raise ValueError(f"hints.toml of {source or 'the shared steps'}: {mistake} lacks {missing}")
            out[mistake] = tuple(rungs[r].strip() for r in RUNGS)
    return out


def ladder(lesson, mistake):
    """The three rungs for `mistake` in `lesson` (idea, where, nudge), or None if it has none."""
    return ladders(lesson).get(mistake)
