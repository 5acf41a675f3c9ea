"""The solution's record: what the judges compare a learner's record with.

At grading time ``reference_record`` runs the lesson's solution (from source/) through the
lesson's extract in the sandbox, with the grader's seed, once per grading process and seed.
``python -m tinygpt_course.grading.reference [lesson ...]`` writes, for the notebooks' own
visible checks, ``tinygpt_course/checks/<lesson>/reference.rec``: the same record for the
lesson's default seed, stored as data in the records' own format (tinygpt_course.checks.record;
tests/test_checks_head_block.py and test_checks_gpt.py check it is current).
"""
import argparse
import os
import sys

from .lesson import read_lesson
from .rerun import rerun
from .sandbox import Sandbox

_cache = {}
REFERENCE = "reference.rec"     # beside each lesson's judge


def reference_record(lesson_source, seed, sandbox, timeout=120):
    """The record of the lesson's solution for `seed` (cached; forked workers inherit it)."""
    key = (lesson_source.digest, int(seed))
    if key not in _cache:
        result = rerun(sandbox, lesson_source.name, lesson_source.setup, lesson_source.solution, seed, timeout)
        if result.record is None:
            raise RuntimeError(f"the solution of {lesson_source.name} did not run in the sandbox: {result.problem}")
        _cache[key] = result.record
    return _cache[key]


def source_notebook(course, lesson):
    return os.path.join(course, "source", lesson, f"{lesson}.ipynb")


def write_reference(course, lesson, dest=None):
    """Write the default-seed record of `lesson` beside its judge; return the path."""
    import tinygpt_course.checks
    from ..checks.record import encode
    src = read_lesson(source_notebook(course, lesson))
    rec = reference_record(src, src.lesson.default_seed, Sandbox())
    dest = dest or os.path.join(os.path.dirname(tinygpt_course.checks.__file__), lesson, REFERENCE)
    with open(dest, "wb") as f:
        f.write(encode(rec))
    return dest


def main(argv=None):
    p = argparse.ArgumentParser(description="Write the stored solution records of the lessons' visible checks.")
    p.add_argument("lessons", nargs="*", help="lessons (default: every source/<lesson>/ with checks)")
    p.add_argument("--course-dir", default=".", help="the course folder holding source/ (default: .)")
    args = p.parse_args(argv)
    lessons = args.lessons or sorted(
        d for d in os.listdir(os.path.join(args.course_dir, "source"))
        if os.path.isfile(source_notebook(args.course_dir, d)) and read_lesson(source_notebook(args.course_dir, d)))
    for lesson in lessons:
        print(write_reference(args.course_dir, lesson))
    return 0


if __name__ == "__main__":
    sys.exit(main())
