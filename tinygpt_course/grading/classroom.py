"""tinygpt-grade-class: autograde a whole class on all cores.

    tinygpt-grade-class multihead [--jobs N] [--force] [--course-dir DIR]

Grades every submitted/<student>/<assignment>/ exactly as `nbgrader autograde <assignment>` does
with the course's nbgrader_config.py (each submission is graded by nbgrader's own autograde
command, run in a worker process forked from this one), several submissions at a time, with a
progress bar (each with cores/jobs threads: OMP_NUM_THREADS, unless set). Gradebook access is
serialised by a lock. A submission nbgrader cannot grade is reported (with its log) and
never stops the others; it is tried once more at the end.
Submissions already graded are skipped unless --force: graded means autograded/<student>/
<assignment>/ holds every submitted notebook, is not older than the submission, and the
gradebook has the submission. The exit status is 1 if any submission failed, as nbgrader's.
"""
import argparse
import collections
import multiprocessing
import multiprocessing.connection
import os
import re
import shutil
import sys
import tempfile
import time
from pathlib import Path


def _parse_args(argv):
    p = argparse.ArgumentParser(
        prog="tinygpt-grade-class",
        description="Autograde every submission of an assignment in parallel, as `nbgrader autograde` does.")
    p.add_argument("assignment", help="assignment id, e.g. multihead")
    p.add_argument("--jobs", "-j", type=int, default=0,
                   help="submissions graded at once (default: usable cores + 1, since part of each "
                        "submission waits on the kernel's start and the gradebook lock)")
    p.add_argument("--force", "-f", action="store_true", help="regrade submissions already graded")
    p.add_argument("--course-dir", default=".", help="the course folder, holding nbgrader_config.py (default: .)")
    p.add_argument("--retries", type=int, default=1, help="times a failed submission is tried again (default: 1)")
    p.add_argument("--logs", metavar="DIR", help="keep every submission's nbgrader log in DIR "
                   "(default: a temporary folder, kept and named only when a submission failed)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    return p.parse_args(argv)


def default_jobs():
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover (not Linux)
        return max(1, os.cpu_count() or 1)


def load_course(assignment):
    """Read the course config as `nbgrader autograde` does; return its CourseDirectory.

    This also imports nbgrader and whatever the config's preprocessors import, once, here:
    the forked workers inherit them instead of paying nbgrader's start per submission.
    """
    from nbgrader.apps.autogradeapp import AutogradeApp
    from nbgrader.apps.nbgraderapp import NbGraderApp
    from nbgrader.converters import Autograde
    from traitlets.utils.importstring import import_item

    app = NbGraderApp.instance()
    app.initialize(["autograde", assignment])
    sub = app.subapp
    coursedir = sub.coursedir
    coursedir.assignment_id = assignment
    converter = Autograde(coursedir=coursedir, parent=sub)
    for pp in list(converter.sanitize_preprocessors) + list(converter.autograde_preprocessors):
        if isinstance(pp, str):
            import_item(pp)
    AutogradeApp.clear_instance()
    NbGraderApp.clear_instance()
    try:    # the course's grading steps use torch in the grader too: import it once, here
        import torch  # noqa: F401
    except ImportError:
        pass
    return coursedir


def prepare_checks(coursedir, assignment):
    """Draw the grading seed and run each checked notebook's solution once, here, so the forked
    workers inherit both instead of each running the solution again."""
    import glob

    from tinygpt_course.grading.independent import PrepareChecks
    step = PrepareChecks(config=coursedir.config)
    for path in sorted(glob.glob(os.path.join(coursedir.format_path(coursedir.source_directory, ".", assignment),
                                              "*.ipynb"))):
        name = os.path.splitext(os.path.basename(path))[0]
        step.preprocess(None, {"nbgrader": {"assignment": assignment, "notebook": name}})


def find_submissions(coursedir, assignment):
    """{student: submitted folder} for every submitted/<student>/<assignment>/ holding a notebook."""
    import glob
    pattern = re.compile(coursedir.format_path(coursedir.submitted_directory, "(?P<student>[^/]+)",
                                               re.escape(assignment), escape=True) + "$")
    excluded = set(filter(None, coursedir.student_id_exclude.split(",")))
    found = {}
    for folder in sorted(glob.glob(coursedir.format_path(coursedir.submitted_directory, "*", assignment))):
        m = pattern.match(folder)
        if m and m["student"] not in excluded and glob.glob(os.path.join(folder, coursedir.notebook_id + ".ipynb")):
            found[m["student"]] = folder
    return found


def _newest_mtime(folder, names=None):
    times = [os.path.getmtime(os.path.join(d, f)) for d, _, fs in os.walk(folder) for f in fs
             if names is None or f in names]
    return max(times, default=None)


def is_graded(coursedir, assignment, student, submitted, gradebook):
    """Whether nbgrader's output for this submission is there, up to date, and in the gradebook."""
    students, names = gradebook
    if student not in students:
        return False
    dest = coursedir.format_path(coursedir.autograded_directory, student, assignment)
    # the notebooks nbgrader grades: those of the assignment (it skips any other)
    notebooks = {f for f in os.listdir(submitted) if f.endswith(".ipynb") and f[:-len(".ipynb")] in names}
    if not os.path.isdir(dest) or not notebooks <= set(os.listdir(dest)):
        return False
    new, old = coursedir.get_existing_timestamp(submitted), coursedir.get_existing_timestamp(dest)
    if new is not None and old is not None:          # nbgrader's own rule (timestamp.txt)
        return not new > old
    src_time, dest_time = _newest_mtime(submitted), _newest_mtime(dest, notebooks or None)
    return src_time is not None and dest_time is not None and src_time <= dest_time


def gradebook_state(coursedir, assignment):
    """(students with a submission, the assignment's notebook names) from the gradebook;
    None if the assignment is not there."""
    from nbgrader.api import Gradebook, MissingEntry
    with Gradebook(coursedir.db_url, coursedir.course_id) as gb:
        try:
            a = gb.find_assignment(assignment)
        except MissingEntry:
            return None
        return {s.student.id for s in a.submissions}, {nb.name for nb in a.notebooks}


def _error_lines(log_path, limit=6):
    try:
        lines = Path(log_path).read_text(errors="replace").splitlines()
    except OSError:
        return []
    errors = [ln for ln in lines if "| ERROR]" in ln or ln.startswith(("Traceback", "nbgrader."))]
    return (errors or lines)[-limit:]


class _Worker:
    """A forked worker process and the pipe to it."""

    def __init__(self, ctx):
        from tinygpt_course.grading.classroom_worker import serve
        self.conn, child = ctx.Pipe()
        # not a daemon: the grading steps start processes of their own (the re-run's forkserver)
        self.proc = ctx.Process(target=serve, args=(child,), daemon=False)
        self.proc.start()
        child.close()
        self.job = None

    def stop(self, timeout):
        try:
            self.conn.send(None)
        except OSError:
            pass
        self.proc.join(timeout)
        if self.proc.is_alive():
            self.proc.terminate()
            self.proc.join(5)
        self.conn.close()


def run_pool(assignment, students, jobs, log_dir, retries, progress=True):
    """Grade students with up to jobs forked workers; return {student: (exit code, log path)}.

    A worker that dies mid-submission (it should not: learner code runs in nbgrader's kernel)
    counts as a failure of that submission, and a new worker takes its place.
    """
    from tqdm import tqdm

    ctx = multiprocessing.get_context("fork")
    queue = collections.deque((s, 0) for s in students)
    results, workers = {}, []
    tqdm.monitor_interval = 0          # no tqdm monitor thread alive while forking
    bar = tqdm(total=len(students), desc=f"grading {assignment}", unit="nb", disable=not progress,
               dynamic_ncols=True, file=sys.stderr)

    def finish(student, attempt, code, log):
        if code != 0 and attempt < retries:
            queue.append((student, attempt + 1))    # once more, after the others
            return
        results[student] = (code, log)
        if code != 0:
            bar.write(f"FAILED {student} (exit {code}); log: {log}")
            for line in _error_lines(log):
                bar.write(f"    {line}")
        bar.update(1)
        bar.set_postfix(failed=sum(1 for c, _ in results.values() if c != 0), refresh=False)

    try:
        workers = [_Worker(ctx) for _ in range(min(jobs, len(students)))]
        while queue or any(w.job for w in workers):
            for w in workers:
                if w.job is None and queue:
                    student, attempt = queue.popleft()
                    w.job = (student, attempt, os.path.join(log_dir, f"{student}.{attempt}.log"))
                    w.conn.send((assignment, student, w.job[2]))
            busy = {w.conn: w for w in workers if w.job} | {w.proc.sentinel: w for w in workers if w.job}
            for ready in multiprocessing.connection.wait(list(busy)):
                w = busy[ready]
                if w.job is None:
                    continue
                student, attempt, log = w.job
                try:
                    _, code = w.conn.recv() if w.conn.poll() else (None, None)
                except (EOFError, OSError):
                    code = None
                if code is None:                          # the worker died
                    w.proc.join(5)
                    code = w.proc.exitcode or 1
                    w.stop(1)
                    workers[workers.index(w)] = new = _Worker(ctx)
                    w = new
                w.job = None
                finish(student, attempt, code, log)
    finally:
        bar.close()
        for w in workers:     # after Ctrl-C the workers got it too: nbgrader cleans up its kernel
            w.stop(15)
    return results


def main(argv=None):
    args = _parse_args(sys.argv[1:] if argv is None else argv)
    course = Path(args.course_dir).resolve()
    logs = Path(args.logs).resolve() if args.logs else None
    if not (course / "nbgrader_config.py").is_file():
        sys.exit(f"tinygpt-grade-class: no nbgrader_config.py in {course}")
    os.chdir(course)
    # nbgrader runs `alembic` by name: make sure this interpreter's scripts are on PATH
    os.environ["PATH"] = os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", "")

    # one more worker than cores: a submission spends part of its time waiting (kernel start-up,
    # the gradebook lock); measured on 2 cores, 24 submissions: 1.39x the floor with 2 workers,
    # 1.32x with 3
    jobs = args.jobs if args.jobs > 0 else default_jobs() + 1
    # jobs kernels share the cores: torch's default (a thread per core in every process) would
    # have them spin against each other (measured: +20% CPU per submission on 2 cores).
    # Set before torch is imported here; workers, kernels and re-runs inherit it.
    if jobs > 1:
        os.environ.setdefault("OMP_NUM_THREADS", str(max(1, default_jobs() // jobs)))

    from tinygpt_course.grading.classroom_worker import install_gradebook_lock
    install_gradebook_lock()
    coursedir = load_course(args.assignment)
    submissions = find_submissions(coursedir, args.assignment)
    if not submissions:
        sys.exit(f"tinygpt-grade-class: no submissions in "
                 f"{coursedir.format_path(coursedir.submitted_directory, '*', args.assignment)}")
    gradebook = gradebook_state(coursedir, args.assignment)
    if gradebook is None:
        sys.exit(f"tinygpt-grade-class: no assignment {args.assignment!r} in the gradebook: "
                 f"run `nbgrader generate_assignment {args.assignment}` first")
    from tinygpt_course.grading.owner import owner_problem
    spoofed = {s: problem for s, folder in submissions.items() if (problem := owner_problem(folder, s))}
    for student, problem in sorted(spoofed.items()):
        print(f"FLAGGED, not graded: {student}: {problem}", file=sys.stderr)
    todo = [s for s, folder in submissions.items() if s not in spoofed
            and (args.force or not is_graded(coursedir, args.assignment, s, folder, gradebook))]
    skipped = len(submissions) - len(todo) - len(spoofed)
    from tinygpt_course.grading.sandbox import SandboxUnavailable
    try:
        prepare_checks(coursedir, args.assignment)
    except SandboxUnavailable as exc:
        sys.exit(f"tinygpt-grade-class: {exc}")
    print(f"tinygpt-grade-class: {len(submissions)} submissions of {args.assignment}: "
          f"{len(todo)} to grade, {skipped} already graded (skipped{'' if args.force else '; --force regrades'}), "
          f"{jobs} at a time", file=sys.stderr)

    if logs:
        logs.mkdir(parents=True, exist_ok=True)
        log_dir = str(logs)
    else:
        log_dir = tempfile.mkdtemp(prefix=f"tinygpt-grade-class-{args.assignment}-")
    t0 = time.perf_counter()
    results = run_pool(args.assignment, todo, jobs, log_dir, args.retries, progress=not args.no_progress)
    failed = sorted(s for s, (code, _) in results.items() if code != 0)
    graded = sum(1 for code, _ in results.values() if code == 0)
    print(f"tinygpt-grade-class: graded {graded}, skipped {skipped}, failed {len(failed)}, "
          f"flagged {len(spoofed)} in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    if spoofed:
        print(f"tinygpt-grade-class: flagged and left aside (files of another user): {', '.join(sorted(spoofed))}",
              file=sys.stderr)
    if failed:
        print(f"tinygpt-grade-class: failed: {', '.join(failed)} (logs in {log_dir})", file=sys.stderr)
        return 1
    if not logs:
        shutil.rmtree(log_dir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
