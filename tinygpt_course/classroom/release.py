"""tinygpt-release: nbgrader's release_assignment, refused while it would hand out answers.

A lesson's set-up cells define, working, the classes of the lessons before it (the block lesson
gives learners Head and MultiHead). Releasing a lesson therefore hands out the answers of those
lessons, so it waits until each of them is past its deadline in the gradebook (nbgrader's due
date: `nbgrader db assignment add head --duedate=...`, or the formgrader's Manage Assignments).

    tinygpt-release LESSON [--force] [-- nbgrader's own options]

Run in the course folder (where nbgrader_config.py is), as `nbgrader release_assignment` is. It
prints each lesson the release would give away and its deadline; with one not past (or none set)
it refuses (exit 3) unless --force; then it runs `nbgrader release_assignment LESSON`.
"""
import argparse
import datetime
import re
import shutil
import subprocess
import sys
from pathlib import Path

REFUSED = 3


def lessons_in_order():
    from ..report.collect import LESSONS
    return LESSONS


def given_away(setup_code, lesson):
    """The earlier lessons whose class the set-up code defines: [(lesson, class)]."""
    from ..checks.protocol import load_lesson
    order = lessons_in_order()
    earlier = order[:order.index(lesson)] if lesson in order else ()
    defined = set(re.findall(r"^class (\w+)\b", setup_code, re.M))
    return [(e, load_lesson(e).task_class) for e in earlier if load_lesson(e).task_class in defined]


def setup_code(course, lesson):
    """The code of the lesson's cells outside its answer and hidden-test regions: what a learner
    gets running (the source notebook, as the release is generated from it)."""
    import nbformat
    path = Path(course) / "source" / lesson / f"{lesson}.ipynb"
    nb = nbformat.read(path, as_version=4)
    return "\n".join(c.source for c in nb.cells if c.cell_type == "code"
                     and "### BEGIN SOLUTION" not in c.source and "### BEGIN HIDDEN TESTS" not in c.source)


def deadlines(names):
    """{lesson: its due date (naive UTC) or None}, from the course's gradebook."""
    from nbgrader.api import Gradebook, MissingEntry
    from nbgrader.apps.baseapp import NbGrader
    app = NbGrader()
    app.initialize([])            # the course's config, as nbgrader's own commands read it
    out = {}
    with Gradebook(app.coursedir.db_url) as gb:
        for name in names:
            try:
                out[name] = gb.find_assignment(name).duedate
            except MissingEntry:
                out[name] = None
    return out


def main(argv=None):
    p = argparse.ArgumentParser(prog="tinygpt-release", description=__doc__.split("\n\n")[0])
    p.add_argument("lesson")
    p.add_argument("--force", action="store_true", help="release even before the earlier lessons' deadlines")
    argv = list(sys.argv[1:] if argv is None else argv)
    rest = argv[argv.index("--") + 1:] if "--" in argv else []      # nbgrader's own options
    args = p.parse_args(argv[:argv.index("--")] if "--" in argv else argv)
    args.nbgrader_args = rest
    course = Path.cwd()
    away = given_away(setup_code(course, args.lesson), args.lesson)
    due = deadlines([e for e, _ in away])
    now = datetime.datetime.now(datetime.timezone.utc).replace(tzinfo=None)
    early = []
    for earlier, cls in away:
        when = due[earlier]
        state = "no deadline set" if when is None else f"due {when:%Y-%m-%d %H:%M} UTC" + (
            ", passed" if when <= now else ", not passed")
        print(f"{args.lesson}'s set-up holds {cls}, the answer of {earlier}: {state}")
        if when is None or when > now:
            early.append(earlier)
    if early and not args.force:
        print(f"tinygpt-release: not releasing {args.lesson}: it would hand out the answers of "
              f"{', '.join(early)} before their deadline. Set or wait for the deadline "
              f"(nbgrader db assignment add {early[0]} --duedate=...), or pass --force.", file=sys.stderr)
        return REFUSED
    nbgrader = shutil.which("nbgrader") or str(Path(sys.executable).parent / "nbgrader")
    return subprocess.call([nbgrader, "release_assignment", args.lesson, *args.nbgrader_args])


if __name__ == "__main__":
    sys.exit(main())
