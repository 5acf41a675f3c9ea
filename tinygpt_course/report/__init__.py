"""tinygpt-class-report <lesson>: what the class got wrong, as one static HTML page.

Run from the course's root after ``nbgrader autograde <lesson>`` (or ``tinygpt-grade-class``). It
reads nbgrader's gradebook and the verdicts grading kept in each autograded notebook
(tinygpt_course.grading.verdicts), and writes ``reports/<lesson>.html`` (plots inlined as PNG
data: URIs, so the page is one file): the score distribution and each check's pass rate, each
mistake with how many learners made it, who, and its hint ladder, the flagged and ungraded
submissions with the reason, who scored what (each learner's points, hints opened and a link to
the submission in the formgrader; the same rows in ``reports/<lesson>-learners.csv``), and a
learner x mistake table across the graded lessons, with names. Trusted
code: it never imports anything that runs learner code (no extract, no re-run, no kernel).
"""
import argparse
import os
import sys

from tqdm import tqdm

from .collect import LESSONS, course_paths, lesson_results
from .page import build_page, learners_csv


def describe(lesson):
    """mistake id -> its one-line description, for the shared steps' mistakes (the lesson's own
    are described by their ladder: importing the lesson's judge would import its checks package,
    extract and all)."""
    from ..checks.protocol import SHARED_MISTAKES
    return SHARED_MISTAKES.get


def write_report(root, lesson, output=None, progress=True, formgrader=None):
    """Write the report of `lesson` for the course at `root`; returns its path."""
    coursedir = course_paths(root)
    bar = tqdm if progress else None
    results = lesson_results(coursedir, lesson, bar)
    if results is None:
        raise LookupError(f"the gradebook {coursedir.db_url} has no assignment {lesson!r}: run nbgrader autograde first")
    others = [lesson_results(coursedir, name, bar) if name != lesson else results for name in LESSONS]
    all_results = [r for r in others if r is not None]
    if lesson not in LESSONS:
        all_results.append(results)
    output = os.path.abspath(output or os.path.join(root, "reports", f"{lesson}.html"))
    os.makedirs(os.path.dirname(output), exist_ok=True)
    table = os.path.splitext(output)[0] + "-learners.csv"
    page = build_page(results, all_results, describe(lesson), formgrader=formgrader or default_formgrader(),
                      csv_name=os.path.basename(table))
    with open(output, "w", encoding="utf-8") as f:
        f.write(page)
    with open(table, "w", encoding="utf-8", newline="") as f:
        f.write(learners_csv(results))
    return output


def default_formgrader():
    """The formgrader's address on this server: under the hub's prefix for this user's server
    (JUPYTERHUB_SERVICE_PREFIX, /user/<teacher>/), else at the root of a plain JupyterLab."""
    return os.environ.get("JUPYTERHUB_SERVICE_PREFIX", "/").rstrip("/") + "/formgrader"


def main(argv=None):
    parser = argparse.ArgumentParser(prog="tinygpt-class-report", description=__doc__.split("\n\n")[0])
    parser.add_argument("lesson", help="the assignment (head, multihead, block, gpt)")
    parser.add_argument("--course-dir", default=".", help="the course's root (default: here)")
    parser.add_argument("-o", "--output", help="the page to write (default: <course>/reports/<lesson>.html)")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    parser.add_argument("--formgrader", help="the formgrader's address, for each learner's link (default: "
                                             "this server's, $JUPYTERHUB_SERVICE_PREFIX/formgrader on a hub)")
    args = parser.parse_args(argv)
    if not args.lesson.isidentifier():
        parser.error(f"not a lesson name: {args.lesson!r}")
    try:
        path = write_report(args.course_dir, args.lesson, args.output, progress=not args.quiet,
                            formgrader=args.formgrader)
    except LookupError as exc:
        print(f"tinygpt-class-report: {exc}", file=sys.stderr)
        return 2
    print(path)
    return 0
