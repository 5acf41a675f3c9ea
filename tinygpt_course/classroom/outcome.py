"""How a class's grading ends: the submissions left aside and those that failed, named (one
step shared by tinygpt-grade-class, its shards and their merge)."""
import sys


def report_problems(flagged, failed, where_logs):
    """Name the submissions left aside and those that failed; True if any failed (exit status 1)."""
    if flagged:
        print(f"tinygpt-grade-class: flagged and left aside (files of another user, or not plain files and folders): {', '.join(sorted(flagged))}",
              file=sys.stderr)
    if failed:
        print(f"tinygpt-grade-class: failed: {', '.join(sorted(failed))} ({where_logs})", file=sys.stderr)
    return bool(failed)
