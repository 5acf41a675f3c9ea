"""How a class's grading ends: the submissions left aside and those that failed, named (one
step shared by tinygpt-grade-class, its shards and their merge), and what the graded ones show
of tampering, one line per learner."""
import glob
import json
import os
import sys


def report_problems(flagged, failed, where_logs):
    """Name the submissions left aside and those that failed; True if any failed (exit status 1)."""
    if flagged:
        print(f"tinygpt-grade-class: flagged and left aside (files of another user, or not plain files and folders): {', '.join(sorted(flagged))}",
              file=sys.stderr)
    if failed:
        print(f"tinygpt-grade-class: failed: {', '.join(sorted(failed))} ({where_logs})", file=sys.stderr)
    return bool(failed)


def integrity_lines(coursedir, assignment, students):
    """One line per learner whose autograded notebooks hold an integrity signal: a read-only cell
    edited or a graded cell deleted (grading.integrity), a check the independent re-run flagged, a
    notebook that was not valid JSON (grading.verdicts). Decided on the notebooks' data."""
    from tinygpt_course.grading.integrity import signals
    lines = []
    for student in sorted(students):
        folder = coursedir.format_path(coursedir.autograded_directory, student, assignment)
        found = []
        for path in sorted(glob.glob(os.path.join(glob.escape(folder), "*.ipynb"))):
            try:
                with open(path) as f:
                    found += signals(json.load(f))
            except (OSError, ValueError):
                continue
        if found:
            lines.append(f"{student}: {'; '.join(found)}")
    return lines


def report_integrity(coursedir, assignment, students):
    """Print integrity_lines under one heading (nothing when there are none)."""
    lines = integrity_lines(coursedir, assignment, students)
    if lines:
        print(f"tinygpt-grade-class: integrity, {len(lines)} learner{'s' if len(lines) > 1 else ''} "
              "(what grading put back or did not confirm):", file=sys.stderr)
        for line in lines:
            print(f"  {line}", file=sys.stderr)
