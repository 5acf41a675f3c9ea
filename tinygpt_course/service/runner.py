"""The grading service: each submission graded as it arrives, its feedback released to its learner.

The service process reads the course as `nbgrader autograde` does (classroom.submissions), starts
the kernel template and keeps `c.GradingService.jobs` grading workers forked from it alive
(classroom.pool.WorkerPool): each starts its re-run zygote once and keeps it. Then, in a loop:

1. **notice**: the names in the exchange's inbound folder (``<root>/<course>/inbound``), each
   ``student+assignment+timestamp[+random]``, parsed as data (nothing there is opened or
   followed here), those of the assignments the teacher turned on added to the queue
   (service.queue: each once, a newer submission superseding the older one still waiting);
2. **claim** the oldest due entry (the queue applies the per-learner rate limit) for an idle
   worker; the queue never hands out two submissions of one learner's assignment at once;
3. in the worker (grade.py, ``grade_submission``), that learner alone: **collect** that one inbound
   submission (``OneSubmission``, CheckedCollect: copied by handle, data only, refused if not
   the student's); **autograde** it with tinygpt-grade-class's own step (classroom.worker.grade:
   `nbgrader autograde <a> --student <s> --force` in-process, the course's config: the same
   scores per cell as a batch run); **generate_feedback** and **release_feedback**
   (CheckedReleaseFeedback) for that student alone; the scores read back from the gradebook;
4. **done**: the queue records the scores (GRADED), or the failure (again once, then FLAGGED
   with its reason). A worker still on one submission after `submission_timeout` is killed
   and replaced: a harmful submission costs its own learner's slot, nobody else's.

A service that stops while grading (killed, the machine restarted) leaves its entries GRADING:
the next start gives them back to the queue (Queue.recover: their owner, ``host:pid:start
time``, is gone). One service per course at a time (an flock next to the queue file).
"""
import fcntl
import functools
import os
import socket
import sys
import time
from dataclasses import dataclass

from traitlets import Bool, Float, Integer, List, Unicode
from traitlets.config import LoggingConfigurable

from .grade import Job, Outcome, _remove, _shown, _warm_feedback, serve
from .queue import BadName, Queue

QUEUE_FILE = "grading_service.sqlite"       # in the course folder: the queue, the teacher's
LOG_FOLDER = "grading_service_logs"         # in the course folder: the logs of failed gradings
LOCK_WAIT = 30                              # seconds a start waits for the service before it to go


class GradingService(LoggingConfigurable):
    """The service's settings (``c.GradingService`` in nbgrader_config.py) and its loop."""

    assignments = List(Unicode(), help=(
        "The assignments the service grades as they are submitted, e.g. ['head', 'multihead']; "
        "submissions of any other assignment are left for the teacher (tinygpt-grade-class). Empty: "
        "the service grades nothing.")).tag(config=True)
    received_only = List(Unicode(), help=(
        "Exam assignments: graded as they arrive (the teacher sees the grades), but no feedback is "
        "released, and the queue's result says received_only: the learner is shown only that the "
        "submission was received. Graded whether or not they are also in `assignments`.")).tag(config=True)
    jobs = Integer(0, help=(
        "Submissions graded at once, each by a worker kept alive between submissions "
        "(0: as tinygpt-grade-class chooses: the usable cores + 1, no more than "
        "$TINYGPT_GRADE_MEMORY_MB holds at 650 MiB + 350 MiB per worker).")).tag(config=True)
    submission_timeout = Float(600, help=(
        "Seconds one submission may take (collect, autograde, feedback) before its worker is "
        "killed and the submission counts as failed (0: no limit).")).tag(config=True)
    poll_interval = Float(0.2, help=(
        "Seconds between two looks at the exchange's inbound folder (a look reads its names "
        "only).")).tag(config=True)
    per_minute = Integer(1, help=(
        "Gradings of one learner's submissions a minute, at most; more wait (HELD), or are "
        "refused (refuse_over_limit).")).tag(config=True)
    per_day = Integer(20, help=(
        "Gradings of one learner's submissions a day, at most; more wait (HELD), or are "
        "refused (refuse_over_limit).")).tag(config=True)
    refuse_over_limit = Bool(False, help=(
        "What happens to a submission over the rate limit: False, it is kept (HELD) and graded at "
        "the time the limit names; True, it is REFUSED, and the learner is told when they may "
        "submit again.")).tag(config=True)
    max_attempts = Integer(2, help=(
        "Times a submission is tried before it is FLAGGED for the teacher (a crash, a time-out, a "
        "submission that is not data).")).tag(config=True)

    def __init__(self, course_dir, queue=None, **kwargs):
        super().__init__(**kwargs)
        self.course = os.path.abspath(course_dir)
        self.queue = queue if queue is not None else self.open_queue()
        self.owner = owner_id(os.getpid())
        self.seen = set()            # inbound names looked at already
        self.burst = None            # GradingBurst, made at start()
        self.pool = None

    def open_queue(self):
        """The course's queue (QUEUE_FILE in the course folder), with this service's limits."""
        return Queue(os.path.join(self.course, QUEUE_FILE), per_minute=self.per_minute, per_day=self.per_day,
                     max_attempts=self.max_attempts, refuse_over_limit=self.refuse_over_limit)

    # --- the parent: notice, claim, hand out, record ---------------------------------------

    def start(self, coursedir):
        """Make ready to grade (after locate): prepare every assignment's checks (the solution
        run once, here), start the kernel template and the workers."""
        from ..classroom.cli import default_jobs, jobs_for_cores, memory_budget
        from ..classroom.pool import WorkerPool
        from ..classroom.submissions import prepare_checks
        from ..grading.sandbox import Sandbox
        config = coursedir.course_config
        self.log_dir = os.path.join(self.course, LOG_FOLDER)
        os.makedirs(self.log_dir, exist_ok=True)
        jobs = self.jobs or jobs_for_cores(default_jobs(), memory_budget(None)[0])[0]
        if jobs > 1:        # the workers' kernels share the cores (classroom/cli.py says why)
            os.environ.setdefault("OMP_NUM_THREADS", str(max(1, default_jobs() // jobs)))
        Sandbox(config=config).check_workers(jobs)      # SandboxUnavailable: refuse before grading
        from ..grading.rerun import start_spawner
        start_spawner()     # every re-run zygote (the solutions', each worker's) a fork of one warm process
        for assignment in sorted(self.enabled):
            prepare_checks(coursedir, assignment)
        _warm_feedback()
        self.pool = WorkerPool(jobs, self.submission_timeout or None,
                               serve=functools.partial(serve, lessons=tuple(sorted(self.enabled))))
        from .burst import GradingBurst      # past one pod: the overflow to an Indexed Job (off by default)
        self.burst = GradingBurst(self, config=config, log=self.log)
        self.log.info("grading %s as submitted (%s received only), %d at a time; inbound: %s",
                      ", ".join(sorted(self.assignments)) or "nothing",
                      ", ".join(sorted(self.received_only)) or "none", jobs, self.inbound)

    def locate(self, coursedir):
        """What to grade and where it arrives: the assignments turned on, the inbound folder."""
        from nbgrader.exchange.default.exchange import Exchange
        self.coursedir = coursedir
        self.enabled = set(self.assignments) | set(self.received_only)
        self.inbound = os.path.join(Exchange(config=coursedir.course_config).root, coursedir.course_id, "inbound")

    def run(self, coursedir, once=False):
        """Grade until stopped; with once, what is waiting now (due), then return."""
        recovered = self.queue.recover(alive)
        for entry in recovered:
            self.log.warning("back in the queue: %s/%s (id %d): the service stopped while grading it",
                             entry.student, entry.assignment, entry.id)
        # what arrived while the service was down is queued before the slow start (the checks'
        # solutions run, the workers): the learners' Grading panels say "queued" meanwhile
        self.locate(coursedir)
        self.scan()
        self.start(coursedir)
        try:
            while True:
                self.scan()
                self.hand_out()
                self.burst.step()
                if once and not self.pool.busy() and not self.burst.busy():
                    return
                for finished in self.pool.wait(self.poll_interval):
                    self.finish(finished)
        finally:
            if self.burst is not None:
                self.burst.close()
            self.pool.close()

    def scan(self):
        """Queue the inbound submissions not seen yet (of the assignments turned on), oldest
        first: a learner's newer submission supersedes an older one still waiting."""
        try:
            names = os.listdir(self.inbound)           # names only: nothing is opened or followed
        except FileNotFoundError:
            return
        found = []
        for name in names:
            if name in self.seen or not written(self.inbound, name):
                continue
            self.seen.add(name)
            sub = parse_inbound(name)
            if sub is None:
                self.log.warning("not a submission's name, left alone: %s", _shown(name))
            elif sub.assignment in self.enabled:
                found.append(sub)
        for sub in sorted(found, key=lambda s: s.time):
            try:
                self.queue.add(sub.student, sub.assignment, sub.key, sub.stamp)
            except BadName as exc:                     # not nbgrader ids: the queue refuses them
                self.log.warning("not queued: %s (%s)", _shown(sub.key), exc)

    def hand_out(self):
        """Claim entries for the idle workers. The queue never hands out a submission while another
        of the same learner's assignment is being graded (both would be collected into one folder)."""
        while self.pool.idle():
            entry = self.queue.claim(self.owner)
            if entry is None:
                return
            if entry.assignment not in self.enabled:
                self.queue.failed(entry.id, f"the grading service does not grade {entry.assignment} "
                                            "(c.GradingService.assignments)", owner=self.owner)
            else:
                self.give(entry)

    def give(self, entry):
        job = Job(entry.id, entry.student, entry.assignment, entry.key, entry.submitted,
                  feedback=entry.assignment not in self.received_only,
                  db_url=self.coursedir.db_url, course_id=self.coursedir.course_id,
                  log=os.path.join(self.log_dir, f"{entry.id}.{entry.attempts}"))
        self.pool.give(self.pool.idle()[0], (entry, job, time.monotonic()), job)

    def finish(self, finished):
        from ..classroom.pool import TIMED_OUT
        entry, job, t0 = finished.job
        took = time.monotonic() - t0
        out = finished.reply
        if out is None:
            reason = (f"still grading after {self.submission_timeout:g} s: stopped "
                      "(c.GradingService.submission_timeout)" if finished.exitcode == TIMED_OUT
                      else f"the grading worker died (exit {finished.exitcode})")
            out = Outcome("failed", reason=reason)
        if out.kind == "graded":
            self.queue.done(entry.id, out.result, owner=self.owner)
            for path in job.logs():
                _remove(path)
            score, most = out.result["total"]
            self.log.info("graded %s/%s (id %d): %g/%g%s in %.1f s", entry.student, entry.assignment, entry.id,
                          score, most, ", feedback released" if out.result["feedback"] else ", received only", took)
        else:
            self.queue.failed(entry.id, out.reason, owner=self.owner)
            self.log.error("not graded %s/%s (id %d, attempt %d): %s; logs: %s.*", entry.student, entry.assignment,
                           entry.id, entry.attempts, out.reason, job.log)


# --- names, owners ------------------------------------------------------------------------

def written(inbound, name):
    """False while `nbgrader submit` is still writing inbound/name: it copies the files, then
    writes timestamp.txt and, last, submission_secret.txt (looked at again at the next scan).
    Only whether that name exists in that folder is asked, nothing followed nor read: anything
    that is not a plain folder of its own counts as written, and collect refuses it, with why."""
    try:
        fd = os.open(os.path.join(inbound, name), os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError:
        return True
    try:
        os.stat("submission_secret.txt", dir_fd=fd, follow_symlinks=False)
        return True
    except OSError:
        return False
    finally:
        os.close(fd)



@dataclass(frozen=True)
class Inbound:
    """An inbound submission as its folder's name says: nbgrader submit names it
    ``student+assignment+timestamp`` (``+random`` after, with add_random_string)."""
    key: str
    student: str
    assignment: str
    stamp: str
    time: object             # the timestamp, parsed (a datetime)


def parse_inbound(name):
    """The Inbound a folder's name says, or None if it is not a submission's name. Data only:
    whether the student and assignment are ids nbgrader accepts is the queue's to check."""
    from nbgrader.utils import parse_utc
    parts = name.split("+")
    if len(parts) not in (3, 4) or not all(parts[:3]):
        return None
    try:
        when = parse_utc(parts[2])
    except (ValueError, OverflowError):
        return None
    return Inbound(name, parts[0], parts[1], parts[2], when)


def _start_time(pid):
    """When process `pid` started (clock ticks since boot, /proc/<pid>/stat), or None if there
    is none: with the pid, it names one process for good (pids are reused)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def owner_id(pid):
    """The queue's owner of what this process grades: ``host:pid:start time``."""
    return f"{socket.gethostname()}:{pid}:{_start_time(pid)}"


def alive(owner):
    """Whether the process an owner id names still runs. Another host's cannot be seen from
    here: a course has one service (the lock), so that one is taken as gone."""
    try:
        host, pid, start = owner.rsplit(":", 2)
        return host == socket.gethostname() and _start_time(int(pid)) == start
    except (AttributeError, ValueError):
        return False


def lock(course, wait=LOCK_WAIT):
    """Hold the course's service lock (an flock on a file beside the queue) for this process's
    life; wait up to `wait` seconds for a service stopping to let go. The descriptor, or None
    if another service holds it."""
    fd = os.open(os.path.join(course, QUEUE_FILE + ".lock"), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    deadline = time.monotonic() + wait
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return fd
        except BlockingIOError:
            if time.monotonic() > deadline:
                os.close(fd)
                return None
            time.sleep(0.2)
