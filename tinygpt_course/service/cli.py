"""tinygpt-grading-service: the course's grading service, and the teacher's look at it.

    tinygpt-grading-service run [--course-dir DIR] [--once] [--jobs N]
    tinygpt-grading-service status [--course-dir DIR] [--last N]

`run` grades each submission of the assignments turned on (c.GradingService.assignments in the
course's nbgrader_config.py) as it arrives in the exchange, and releases its feedback to its
learner (runner.py says how); it runs until stopped (SIGTERM, Ctrl-C). --once grades what is
waiting now and exits. `status` prints the queue: what waits, the last grades, and every
submission flagged for the teacher with the reason.
"""
import argparse
import logging
import os
import signal
import sys
import time
from pathlib import Path

from .queue import Queue, State
from .runner import LOG_FOLDER, QUEUE_FILE, GradingService, lock

PROG = "tinygpt-grading-service"


def _parse_args(argv):
    p = argparse.ArgumentParser(prog=PROG, description="Grade each submission as it arrives and release its "
                                "feedback to its learner; or show what the service has done.")
    commands = p.add_subparsers(dest="command", required=True)
    run = commands.add_parser("run", help="grade submissions as they arrive (until stopped)")
    run.add_argument("--once", action="store_true", help="grade what is waiting now, then exit")
    run.add_argument("--jobs", "-j", type=int, default=0,
                     help="submissions graded at once (default: c.GradingService.jobs)")
    status = commands.add_parser("status", help="what waits, the last grades, the flagged submissions")
    status.add_argument("--last", type=int, default=10, metavar="N", help="the last N grades (default: 10)")
    for command in (run, status):
        command.add_argument("--course-dir", default=".",
                             help="the course folder, holding nbgrader_config.py (default: .)")
    return p.parse_args(argv)


def main(argv=None):
    args = _parse_args(sys.argv[1:] if argv is None else argv)
    if args.command == "run":
        from ..reaper import become_init
        become_init()           # a pod's first process: reap its sandboxes' orphans (reaper.py)
    course = Path(args.course_dir).resolve()
    if not (course / "nbgrader_config.py").is_file():
        sys.exit(f"{PROG}: no nbgrader_config.py in {course}")
    if args.command == "status":
        return status(course, args.last)
    from ..classroom.cli import in_own_tmp
    return in_own_tmp("tinygpt-grading-service-", run, course, args)


def _stop(signum, frame):
    raise SystemExit(0)         # the workers are stopped on the way out (runner: pool.close)


def run(course, args):
    from ..classroom.lock import install_gradebook_lock
    from ..classroom.submissions import load_course
    from ..grading.sandbox import SandboxUnavailable
    os.chdir(course)
    # nbgrader runs `alembic` by name: this interpreter's scripts on PATH
    os.environ["PATH"] = os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", "")
    log = logging.getLogger(PROG)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("[%(name)s %(asctime)s %(levelname)s] %(message)s", "%H:%M:%S"))
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    log.propagate = False
    held = lock(course)         # kept open while this process runs
    if held is None:
        sys.exit(f"{PROG}: another grading service runs on {course} (it holds {QUEUE_FILE}.lock)")
    signal.signal(signal.SIGTERM, _stop)
    install_gradebook_lock()
    coursedir = load_course("")         # the course's config, nbgrader and the grading steps imported once
    service = GradingService(course, config=coursedir.course_config, log=log)
    if args.jobs > 0:
        service.jobs = args.jobs
    if not (service.assignments or service.received_only):
        nothing = (f"{PROG}: no assignment to grade: list them in nbgrader_config.py, e.g. "
                   "c.GradingService.assignments = ['head', 'multihead']")
        if (os.environ.get("JUPYTERHUB_SERVICE_NAME") or os.environ.get("KUBERNETES_SERVICE_HOST")) and not args.once:
            # a hub's service or a Kubernetes pod: exiting would have the hub (the Deployment)
            # start it again at once, for ever
            log.error("%s; waiting until stopped (restart the hub after setting them)", nothing)
            while True:
                signal.pause()          # SIGTERM: _stop
        sys.exit(nothing)
    try:
        service.run(coursedir, once=args.once)
    except SandboxUnavailable as exc:
        sys.exit(f"{PROG}: {exc}")
    except KeyboardInterrupt:
        return 130
    return 0


def _when(t):
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t)) if t else "-"


def status(course, last=10):
    """Print the queue: counts, the oldest waiting, the last grades, the flagged with reasons."""
    path = course / QUEUE_FILE
    if not path.exists():
        print(f"{PROG}: no queue in {course}: the service has not run here")
        return 0
    with Queue(str(path)) as queue:
        s = queue.summary(last)
    counts = s["counts"]
    waiting = counts[State.QUEUED] + counts[State.HELD]
    print(f"queue: {waiting} waiting ({counts[State.QUEUED]} due, {counts[State.HELD]} held by the rate limit), "
          f"{counts[State.GRADING]} grading, {counts[State.GRADED]} graded, {counts[State.FLAGGED]} flagged, "
          f"{counts[State.SUPERSEDED]} superseded, {counts[State.REFUSED]} refused")
    oldest = s["oldest_queued"]
    if oldest is not None:
        print(f"oldest waiting: {oldest.student}/{oldest.assignment}, queued {_when(oldest.enqueued)} "
              f"({time.time() - oldest.enqueued:.0f} s ago)")
    if s["last_graded"]:
        print("last graded:")
    for e in s["last_graded"]:
        score, most = e.result["total"]
        said = "received only" if e.result.get("received_only") else \
            "feedback released" if e.result["feedback"] else "no feedback"
        print(f"  {_when(e.finished)}  {e.student}/{e.assignment}  {score:g}/{most:g}  ({said})")
    if s["flagged"]:
        print(f"FLAGGED, not graded ({len(s['flagged'])}; logs in {course / LOG_FOLDER}/<id>.*):")
    for e in s["flagged"]:
        print(f"  id {e.id}: {e.student}/{e.assignment} submitted {e.submitted}, tried {e.attempts} times: {e.reason}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
