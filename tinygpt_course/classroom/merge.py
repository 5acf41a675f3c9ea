"""The merge step after a class graded in shards (shard.py): the gradebook filled from N results.

    tinygpt-grade-class multihead --merge-shards N

Reads <course>/shards/<assignment>/0 .. N-1/ and, only when all N are there and agree (the same class,
dealt out whole, each student once), puts each of the shards' submissions into the course's
gradebook (every column of nbgrader's submission, notebook, grade and comment rows, as the shard's
own nbgrader autograde wrote them; the student's record too) under the gradebook lock, and their
autograded/ folder in place of the old one. Then the shards' results are removed. A shard with no
results is named, and nothing is merged: run that shard again (alone), then merge. Merging again is
harmless: it writes the same rows and files. The exit status is 1 if a submission failed (as
tinygpt-grade-class), 2 if the results are missing or disagree.
"""
import json
import os
import shutil
import sys
import warnings

from .shard import results_root


def _copy_columns(src, dst):
    """Every column of an nbgrader row but its keys (ids and links between tables)."""
    from sqlalchemy import inspect
    for attr in inspect(src).mapper.column_attrs:
        column = attr.columns[0]
        if not (column.primary_key or column.foreign_keys):
            setattr(dst, attr.key, getattr(src, attr.key))


def copy_submission(src, dst, assignment, student):
    """The student's submission of `assignment` from gradebook src into gradebook dst."""
    from nbgrader.api import MissingEntry
    from sqlalchemy import inspect
    sub = src.find_submission(assignment, student)
    dst.update_or_create_student(student, **{a.key: getattr(sub.student, a.key) for a in inspect(sub.student).mapper.column_attrs
                                             if not a.columns[0].primary_key})
    try:
        target = dst.find_submission(assignment, student)
    except MissingEntry:
        target = dst.add_submission(assignment, student)
    _copy_columns(sub, target)
    for nb in sub.notebooks:
        tnb = dst.find_submission_notebook(nb.name, assignment, student)
        _copy_columns(nb, tnb)
        for grade in nb.grades:
            _copy_columns(grade, dst.find_grade(grade.name, nb.name, assignment, student))
        for comment in nb.comments:
            _copy_columns(comment, dst.find_comment(comment.name, nb.name, assignment, student))
    dst.db.commit()


def load_results(root, shards):
    """({index: result.json}, problem or None)."""
    results, missing = {}, []
    for index in range(shards):
        path = root / str(index) / "result.json"
        if path.is_file():
            results[index] = json.loads(path.read_text())
        else:
            missing.append(index)
    if missing:
        return results, (f"no results from shard{'s' if len(missing) > 1 else ''} "
                         f"{', '.join(map(str, missing))} of {shards} in {root}: run "
                         f"{'them' if len(missing) > 1 else 'it'} again (JOB_COMPLETION_INDEX="
                         f"{','.join(map(str, missing))}; the others' results are kept), then merge")
    classes = {tuple(r["class"]) for r in results.values()}
    dealt = sorted(s for r in results.values() for s in r["students"])
    if {r["shards"] for r in results.values()} != {shards} or len(classes) != 1 or dealt != sorted(classes.pop()):
        return results, (f"the results in {root} are not one class dealt into {shards} shards (shards of "
                         "another run, or submissions changed between shards): grade all shards again")
    return results, None


def run(args):
    from nbgrader.api import Gradebook, MissingEntry
    from sqlalchemy.exc import SAWarning
    from .lock import install_gradebook_lock
    from .submissions import find_submissions, load_course

    assignment, shards = args.assignment, args.merge_shards
    coursedir = load_course(assignment)
    root = results_root(os.getcwd(), assignment)
    results, problem = load_results(root, shards)
    if problem:
        print(f"tinygpt-grade-class: nothing merged: {problem}", file=sys.stderr)
        return 2
    graded_class = set(next(iter(results.values()))["class"])
    newer = sorted(set(find_submissions(coursedir, assignment)) - graded_class)
    if newer:
        print(f"tinygpt-grade-class: not in these shards (submitted since): {', '.join(newer)}", file=sys.stderr)

    install_gradebook_lock()
    graded = [(index, s) for index, result in sorted(results.items()) for s in result["graded"]]
    with Gradebook(coursedir.db_url, coursedir.course_id) as gb, warnings.catch_warnings():
        # nbgrader's add_submission builds its rows in a way SQLAlchemy 2 warns about (harmless)
        warnings.simplefilter("ignore", SAWarning)
        for index, result in sorted(results.items()):
            with Gradebook(f"sqlite:///{root / str(index) / 'gradebook.db'}", coursedir.course_id) as shard_gb:
                for student in result["students"]:
                    try:      # a submission nbgrader could not grade has its row too, as in one run
                        shard_gb.find_submission(assignment, student)
                    except MissingEntry:
                        continue
                    copy_submission(shard_gb, gb, assignment, student)
    for index, student in graded:
        place_autograded(coursedir, root / str(index), student, assignment)
    failed = sorted(s for r in results.values() for s in r["failed"])
    flagged = sorted(s for r in results.values() for s in r["flagged"])
    shutil.rmtree(root)
    print(f"tinygpt-grade-class: merged {shards} shards: graded {len(graded)}, failed {len(failed)}, "
          f"flagged {len(flagged)}", file=sys.stderr)
    from .outcome import report_problems
    return 1 if report_problems(flagged, failed, "the shards' logs say why") else 0


def place_autograded(coursedir, shard, student, assignment):
    """A shard's autograded folder of `student` (in the shard's results folder `shard`) put in the
    course's autograded/ in one rename: the teacher's copy is whole, old or new, never half."""
    dest = coursedir.format_path(coursedir.autograded_directory, student, assignment)
    staging = dest + ".merging"
    shutil.rmtree(staging, ignore_errors=True)
    shutil.copytree(os.path.join(shard, "autograded", student), staging, symlinks=True)
    if os.path.isdir(dest):
        shutil.rmtree(dest)
    os.makedirs(os.path.dirname(dest), exist_ok=True)
    os.rename(staging, dest)
