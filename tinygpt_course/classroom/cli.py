"""tinygpt-grade-class: autograde a whole class on all cores.

    tinygpt-grade-class multihead [--jobs N] [--memory-budget MIB] [--force] [--course-dir DIR]

Grades every submitted/<student>/<assignment>/ exactly as `nbgrader autograde <assignment>` does
with the course's nbgrader_config.py (each submission is graded by nbgrader's own autograde
command, run in a worker process forked from this one), several submissions at a time, with a
progress bar (each with cores/jobs threads: OMP_NUM_THREADS, unless set). By default as many at
once as the cores keep busy (cores + 1) and the memory budget holds (jobs_for_cores). Gradebook access is
serialised by a lock. A submission nbgrader cannot grade is reported (with its log) and
never stops the others; it is tried once more at the end.
Submissions already graded are skipped unless --force: graded means autograded/<student>/
<assignment>/ holds every submitted notebook, is not older than the submission, and the
gradebook has the submission. The exit status is 1 if any submission failed, as nbgrader's.
"""
import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

# nbgrader (lock.py, submissions.py) is imported in _main, after the kernel template has been
# started: its imports (2 s of CPU) and the template's run side by side


def _parse_args(argv):
    p = argparse.ArgumentParser(
        prog="tinygpt-grade-class",
        description="Autograde every submission of an assignment in parallel, as `nbgrader autograde` does.")
    p.add_argument("assignment", help="assignment id, e.g. multihead")
    p.add_argument("--jobs", "-j", type=int, default=0,
                   help="submissions graded at once (default: usable cores + 1, since part of each "
                        "submission waits on the kernel's start and the gradebook lock, fewer if the "
                        "memory budget holds fewer)")
    p.add_argument("--memory-budget", type=float, metavar="MIB", default=None,
                   help=f"memory the run may take, in MiB, which bounds the default --jobs: {GRADER_MIB} "
                        f"for the grader and {WORKER_MIB} per worker (default: ${MEMORY_ENV}, set by "
                        "the hub in teachers' servers, else the memory available now)")
    p.add_argument("--force", "-f", action="store_true", help="regrade submissions already graded")
    p.add_argument("--course-dir", default=".", help="the course folder, holding nbgrader_config.py (default: .)")
    p.add_argument("--retries", type=int, default=1, help="times a failed submission is tried again (default: 1)")
    p.add_argument("--submission-timeout", type=float, default=1800, metavar="S",
                   help="seconds one submission may take before its worker is killed and it counts as failed "
                        "(default: 1800; 0: no limit)")
    p.add_argument("--logs", metavar="DIR", help="keep every submission's nbgrader log in DIR "
                   "(default: a temporary folder, kept and named only when a submission failed)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    # past one pod (shard.py, merge.py; hub/z2jh/grade-job.yaml)
    p.add_argument("--shards", type=int, metavar="N", help="grade only one shard of the class split into N "
                   "(a Kubernetes Indexed Job's pod); its results go to shards/<assignment>/<index>/")
    p.add_argument("--shard-index", type=int, metavar="I", help="which shard, 0..N-1 (default: $JOB_COMPLETION_INDEX)")
    p.add_argument("--merge-shards", type=int, metavar="N", help="put the results of shards 0..N-1 into the "
                   "gradebook and autograded/ (after every shard is done)")
    return p.parse_args(argv)


def default_jobs():
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover (not Linux)
        return max(1, os.cpu_count() or 1)


# What a run takes, in MiB of PSS summed over its process tree at its peak (hub/measure_grading_memory.py,
# multihead, torch 2.13.0+cpu, 2 cores, 4 December 2026, three runs: 907-979, 1199-1275 and
# 1532-1569 MiB with 1, 2 and 3 workers; a line through each run: 563-695 MiB + 286-331 MiB per
# worker): the grader, its kernel template and nbgrader whatever the number of workers, and each
# worker with its nbgrader autograde, kernel and re-run. Above every peak measured, and the part per
# worker above the steepest run's, since a budget for many workers leans on it; hub/README.md's
# sizing counts the teacher's grading with these.
GRADER_MIB = 650
WORKER_MIB = 350
MEMORY_ENV = "TINYGPT_GRADE_MEMORY_MB"


def jobs_for_cores(cores, memory_mib=None):
    """(submissions graded at once, torch threads each) for a machine or pod of `cores` cores and,
    if given, `memory_mib` MiB for the whole run: the default of --jobs, and what
    hub/z2jh/grade-job.yaml sets for its pods' CPU and memory limits. Cores + 1 keeps the cores
    busy; the memory bound keeps the run within what the hub's sizing plan gives it (at least one
    worker, however small the budget: one submission at a time is sequential nbgrader's own)."""
    jobs = cores + 1
    if memory_mib is not None:
        jobs = min(jobs, max(1, int((memory_mib - GRADER_MIB) // WORKER_MIB)))
    return jobs, max(1, cores // jobs)


def available_mib():
    """MemAvailable from /proc/meminfo, in MiB (None where there is none)."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return None


def memory_budget(arg):
    """(MiB, where it came from): --memory-budget, else $TINYGPT_GRADE_MEMORY_MB, else MemAvailable."""
    if arg is not None:
        return arg, "--memory-budget"
    if os.environ.get(MEMORY_ENV, "").strip():
        try:
            return float(os.environ[MEMORY_ENV]), f"${MEMORY_ENV}"
        except ValueError:
            sys.exit(f"tinygpt-grade-class: {MEMORY_ENV}={os.environ[MEMORY_ENV]!r} is not a number of MiB")
    return available_mib(), "available now"


def in_own_tmp(prefix, run, *args):
    """run(*args) with every temporary file it makes (multiprocessing's, nbgrader's, the
    kernels') in one folder that goes when it ends, however it ends."""
    run_tmp = tempfile.mkdtemp(prefix=prefix)
    tempfile.tempdir = os.environ["TMPDIR"] = run_tmp
    try:
        return run(*args)
    finally:
        shutil.rmtree(run_tmp, ignore_errors=True)


def main(argv=None):
    from ..reaper import become_init
    become_init()               # a Job's first process: reap its sandboxes' orphans (reaper.py)
    logs_base = tempfile.gettempdir()          # failed submissions' logs are kept there
    return in_own_tmp("tinygpt-grade-class-run-", _main, argv, logs_base)


def _main(argv, logs_base):
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
    # ... and no more than the memory budget holds (the hub gives teachers' servers one, which its
    # sizing plan counts beside the learners)
    budget, budget_from = memory_budget(args.memory_budget)
    if args.memory_budget is not None:      # a shard's own run (shard.py) reads it from there
        os.environ[MEMORY_ENV] = str(args.memory_budget)
    if args.jobs > 0:
        jobs, why = args.jobs, "--jobs"
    else:
        jobs = jobs_for_cores(default_jobs(), budget)[0]
        why = f"cores + 1 = {default_jobs() + 1}" + ("" if budget is None else
              f"; memory {budget:.0f} MiB ({budget_from}) for {GRADER_MIB} + {WORKER_MIB} MiB per worker")
    # jobs kernels share the cores: torch's default (a thread per core in every process) would
    # have them spin against each other (measured: +20% CPU per submission on 2 cores).
    # Set before torch is imported here; workers, kernels and re-runs inherit it.
    if jobs > 1:
        os.environ.setdefault("OMP_NUM_THREADS", str(max(1, default_jobs() // jobs)))

    if not (args.merge_shards or args.shards):      # (a shard's own run starts one for its copy)
        # the kernel template imports torch, matplotlib, ipykernel and draws once (2 s of CPU):
        # started now, it does so on the other core while this process imports nbgrader, reads
        # the course and runs the solution, instead of after them
        from tinygpt_course.grading import rerun, template
        template.start()
        rerun.start_spawner()       # and the re-run zygotes' spawner (the solution's, the workers')
    from .lock import install_gradebook_lock
    from .outcome import report_integrity, report_problems
    from .pool import run_pool
    from .submissions import find_submissions, gradebook_state, is_graded, load_course, prepare_checks
    install_gradebook_lock()
    if args.merge_shards:
        from .merge import run as merge
        return merge(args)
    if args.shards:
        from .shard import run as shard
        return shard(args, logs_base, grade=_main)      # the shard grades its copy as this does
    coursedir = load_course(args.assignment)
    submissions = find_submissions(coursedir, args.assignment)
    if not submissions:
        sys.exit(f"tinygpt-grade-class: no submissions in "
                 f"{coursedir.format_path(coursedir.submitted_directory, '*', args.assignment)}")
    gradebook = gradebook_state(coursedir, args.assignment)
    if gradebook is None:
        sys.exit(f"tinygpt-grade-class: no assignment {args.assignment!r} in the gradebook: "
                 f"run `nbgrader generate_assignment {args.assignment}` first")
    # before anything reads a submission (is_graded reads timestamp.txt, nbgrader walks it): one
    # that is not plain data of its student's (a symlink, a FIFO, a deep chain) is left aside
    from tinygpt_course.grading.owner import submission_problem
    config = getattr(coursedir, "course_config", coursedir.config)
    spoofed = {s: problem for s, folder in submissions.items()
               if (problem := submission_problem(folder, s, config=config))}
    for student, problem in sorted(spoofed.items()):
        print(f"FLAGGED, not graded: {student}: {problem}", file=sys.stderr)
    todo = [s for s, folder in submissions.items() if s not in spoofed
            and (args.force or not is_graded(coursedir, args.assignment, s, folder, gradebook))]
    skipped = len(submissions) - len(todo) - len(spoofed)
    from tinygpt_course.grading.sandbox import Sandbox, SandboxUnavailable
    try:       # each worker a uid of its own (c.Sandbox.worker): refuse before grading if one has none
        Sandbox(config=getattr(coursedir, "course_config", coursedir.config)).check_workers(min(jobs, len(todo)))
        lessons = prepare_checks(coursedir, args.assignment)
    except SandboxUnavailable as exc:
        sys.exit(f"tinygpt-grade-class: {exc}")
    print(f"tinygpt-grade-class: {len(submissions)} submissions of {args.assignment}: "
          f"{len(todo)} to grade, {skipped} already graded (skipped{'' if args.force else '; --force regrades'}), "
          f"{jobs} at a time ({why})", file=sys.stderr)

    if logs:
        logs.mkdir(parents=True, exist_ok=True)
        log_dir = str(logs)
    else:
        log_dir = tempfile.mkdtemp(prefix=f"tinygpt-grade-class-{args.assignment}-", dir=logs_base)
    t0 = time.perf_counter()
    results = run_pool(args.assignment, todo, jobs, log_dir, args.retries, progress=not args.no_progress,
                       limit_s=args.submission_timeout or None, lessons=lessons)
    failed = sorted(s for s, (code, _) in results.items() if code != 0)
    graded = sum(1 for code, _ in results.values() if code == 0)
    print(f"tinygpt-grade-class: graded {graded}, skipped {skipped}, failed {len(failed)}, "
          f"flagged {len(spoofed)} in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    report_integrity(coursedir, args.assignment, [s for s, (code, _) in results.items() if code == 0])
    if report_problems(spoofed, failed, f"logs in {log_dir}"):
        return 1
    if not logs:
        shutil.rmtree(log_dir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
