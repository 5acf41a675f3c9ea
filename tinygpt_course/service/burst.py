"""The grading service's burst path on Kubernetes: a queue longer than its pod can grade soon goes
to an Indexed Job (hub/z2jh/grade-job.yaml), then comes back as grades and feedback.

The service's pod grades `jobs` submissions at once (hub/z2jh/grading-service.yaml). When more are
due than that, and more than ``c.GradingBurst.over`` (0: never), GradingBurst.step():

1. **claims** the overflow (decide(): those beyond what the pod's workers take next) as the
   service's own (Queue.claim with the service's owner: a service that stops gives them back at
   its next start, Queue.recover), one assignment per Job;
2. **collects** each into submitted/ (grade.py: the service's own collect of that one inbound submission),
   in a child process (nbgrader's apps run there, never in the service's parent);
3. **creates** an Indexed Job from the teacher's grade-job.yaml (job_manifest: the same pod, the
   assignment, N shards for the students listed, N = shards_for()), through the Kubernetes API with
   the pod's service account (a Role allowing create, get and delete of jobs.batch, nothing else);
4. when the Job is **complete** (or failed, or past `job_timeout`), in a child process again:
   puts each listed student's grades from the shard that graded them into the gradebook
   (classroom/merge.py's copy_submission) and their autograded/ folder in place, releases their
   feedback (grade.py: the service's generate_feedback and CheckedReleaseFeedback steps), and the parent
   marks each queue entry done, or failed with the reason (again once, then flagged, as the pod's
   own gradings); then deletes the Job and its shards' results.

A student is merged from the shard whose result.json lists them as graded: their submitted folder
cannot change while the burst holds their entry (the queue hands out no other submission of that
learner's assignment meanwhile), so a shard's grading of it is the grading of that entry, whatever
other shards saw. The Job's pods grade every ungraded submission of the assignment they find
(tinygpt-grade-class --shards deals the whole submitted/ class); only the listed students are merged.
"""
import json
import math
import multiprocessing
import os
import re
import shutil
import ssl
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field

import yaml
from traitlets import Float, Integer, Unicode
from traitlets.config import LoggingConfigurable

from .queue import State

STATE_FILE = "grading_service_burst.json"     # in the course folder: the Job under way, for a restart
BURST_LABEL = "tinygpt.example.org/burst"      # on the Jobs this module makes: the course folder's name
STUDENTS_ANNOTATION = "tinygpt.example.org/students"
ACCOUNT = "/var/run/secrets/kubernetes.io/serviceaccount"   # token, ca.crt, namespace


# --- deciding, on data ----------------------------------------------------------------------

def decide(summary, capacity, over):
    """How many due submissions to hand to a Job: those beyond the `capacity` the pod's workers take
    next, once more than `over` are due (over 0: never). summary: Queue.summary()."""
    due = summary["counts"][State.QUEUED]
    if over <= 0 or due <= over:
        return 0
    return max(0, due - capacity)


def shards_for(students, per_pod, max_pods):
    """The Job's shard count: a pod per `per_pod` students, at most `max_pods`, at least 1."""
    return max(1, min(max_pods, math.ceil(students / per_pod)))


# --- the Job: grade-job.yaml, filled in -----------------------------------------------------

def load_template(path):
    """The one Job of a grade-job.yaml."""
    with open(path) as f:
        (doc,) = [d for d in yaml.safe_load_all(f) if d]
    if doc.get("kind") != "Job" or doc["spec"].get("completionMode") != "Indexed":
        raise ValueError(f"{path} is not an Indexed Job (hub/z2jh/grade-job.yaml)")
    return doc


def _set_option(command, option, value):
    if option not in command:
        raise ValueError(f"the grading Job's command has no {option}: {command}")
    command[command.index(option) + 1] = str(value)


def job_manifest(template, *, name, assignment, students, shards, course):
    """The Job that grades `students`' submissions of `assignment` in `shards` pods: grade-job.yaml's
    (template, a dict) with its name, the assignment, the shard count (completions, parallelism,
    --shards) and the students (an annotation, for people) set; its pods untouched."""
    job = json.loads(json.dumps(template))          # a deep copy: the template serves every burst
    meta = job["metadata"]
    meta["name"] = name
    meta.setdefault("labels", {})[BURST_LABEL] = re.sub(r"[^A-Za-z0-9_.-]", "-", course)[:63].strip("-_.") or "course"
    meta.setdefault("annotations", {})[STUDENTS_ANNOTATION] = ",".join(sorted(students))
    spec = job["spec"]
    spec["completions"] = spec["parallelism"] = shards
    (container,) = spec["template"]["spec"]["containers"]
    command = container["command"]
    if command[:1] != ["tinygpt-grade-class"]:
        raise ValueError(f"the grading Job does not run tinygpt-grade-class: {command}")
    command[1] = assignment
    _set_option(command, "--shards", shards)
    return job


def job_state(job):
    """"complete", "failed" or "running", from the Job's conditions (status.conditions)."""
    for condition in (job.get("status") or {}).get("conditions") or []:
        if condition.get("status") == "True" and condition.get("type") in ("Complete", "Failed"):
            return condition["type"].lower()
    return "running"


class KubeJobs:
    """jobs.batch in the pod's own namespace, through the Kubernetes API as the pod's service
    account (what automountServiceAccountToken would give; grading-service.yaml mounts it in the
    runner alone). The token is read at each call: Kubernetes renews it in place."""

    def __init__(self, account=ACCOUNT, server=None):
        self.account = account
        with open(os.path.join(account, "namespace")) as f:
            self.namespace = f.read().strip()
        host, port = os.environ.get("KUBERNETES_SERVICE_HOST"), os.environ.get("KUBERNETES_SERVICE_PORT", "443")
        self.server = server or (f"https://{host}:{port}" if host else "https://kubernetes.default.svc")
        self.tls = ssl.create_default_context(cafile=os.path.join(account, "ca.crt"))

    def _call(self, method, path, body=None):
        with open(os.path.join(self.account, "token")) as f:
            token = f.read().strip()
        request = urllib.request.Request(
            f"{self.server}/apis/batch/v1/namespaces/{self.namespace}/jobs{path}", method=method,
            data=None if body is None else json.dumps(body).encode(),
            headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json",
                     "Accept": "application/json"})
        with urllib.request.urlopen(request, context=self.tls, timeout=30) as answer:
            return json.loads(answer.read() or b"{}")

    def create(self, manifest):
        return self._call("POST", "", manifest)

    def get(self, name):
        """The Job, or None when there is none of that name."""
        try:
            return self._call("GET", f"/{name}")
        except urllib.error.HTTPError as exc:
            if exc.code == 404:
                return None
            raise

    def delete(self, name):
        """Delete the Job and its pods (background propagation); none of that name is fine."""
        try:
            self._call("DELETE", f"/{name}", {"kind": "DeleteOptions", "apiVersion": "v1",
                                               "propagationPolicy": "Background"})
        except urllib.error.HTTPError as exc:
            if exc.code != 404:
                raise


# --- the steps that run nbgrader: in a child process ----------------------------------------

def _collect_all(jobs, log):
    """Collect each job's one inbound submission (grade.collect): {entry id: Outcome or None}."""
    from ..classroom.worker import _redirect_output
    from .grade import collect
    _redirect_output(log)
    out = {}
    for job in jobs:
        try:
            out[job.entry_id] = collect(job)
        except Exception as exc:         # noqa: BLE001 -- that submission fails, the others go on
            from .grade import Outcome, _shown
            out[job.entry_id] = Outcome("failed", reason=f"collect: {type(exc).__name__}: {_shown(exc)}")
    return out


def shard_results(course, assignment, shards):
    """{student: shard index} of the students a shard of the last Job graded (its result.json)."""
    from ..classroom.shard import results_root
    graded = {}
    for index in range(shards):
        path = results_root(course, assignment) / str(index) / "result.json"
        if path.is_file():
            graded.update({s: index for s in json.loads(path.read_text())["graded"]})
    return graded


def merge_students(coursedir, course, assignment, shards, students):
    """Put each of `students` that a shard graded into the gradebook and autograded/, from that
    shard's results in `course` (merge.py's copy, for these students alone); {student: shard index}."""
    from nbgrader.api import Gradebook
    from ..classroom.merge import copy_submission, place_autograded
    from ..classroom.shard import results_root
    root = results_root(course, assignment)
    graded = {s: i for s, i in shard_results(course, assignment, shards).items() if s in students}
    with Gradebook(coursedir.db_url, coursedir.course_id) as gb:
        for student, index in sorted(graded.items()):
            with Gradebook(f"sqlite:///{root / str(index) / 'gradebook.db'}", coursedir.course_id) as shard_gb:
                copy_submission(shard_gb, gb, assignment, student)
    for student, index in graded.items():
        place_autograded(coursedir, root / str(index), student, assignment)
    return graded


def _settle_all(coursedir, course, assignment, shards, jobs, log):
    """After the Job: merge the listed students, release their feedback; {entry id: Outcome}."""
    from ..classroom.worker import _redirect_output
    from .grade import Outcome, _run, _shown, gradebook_result, release
    _redirect_output(log)
    try:
        graded = merge_students(coursedir, course, assignment, shards, {j.student for j in jobs})
    except Exception as exc:             # noqa: BLE001 -- every entry fails, with why
        reason = f"merging the grading Job's shards: {type(exc).__name__}: {_shown(exc)}"
        return {j.entry_id: Outcome("failed", reason=reason) for j in jobs}
    out = {}
    for job in jobs:
        if job.student not in graded:
            out[job.entry_id] = Outcome("failed", reason="the grading Job did not grade it (no shard's results "
                                                         "list it as graded; its pods' logs say why)")
            continue
        try:
            result, notebooks = gradebook_result(job)
            if not job.feedback:
                out[job.entry_id] = Outcome("graded", {**result, "feedback": False, "received_only": True})
            elif _run("generate_feedback", job.assignment, "--student", job.student, "--force") != 0:
                out[job.entry_id] = Outcome("failed", reason="nbgrader generate_feedback failed")
            elif not release(job, notebooks):
                out[job.entry_id] = Outcome("failed", reason="the feedback was not released (the log says why)")
            else:
                out[job.entry_id] = Outcome("graded", {**result, "feedback": True})
        except Exception as exc:         # noqa: BLE001
            out[job.entry_id] = Outcome("failed", reason=f"after the grading Job: {type(exc).__name__}: {_shown(exc)}")
    return out


def _child(conn, step, *args):
    try:
        conn.send(step(*args))
    finally:
        conn.close()


@dataclass
class Burst:
    """One Job under way: its entries (grade.Job, by entry id) and where it is."""
    name: str
    assignment: str
    shards: int
    jobs: dict                       # entry id -> grade.Job
    phase: str = "collecting"        # collecting, grading, settling
    started: float = field(default_factory=time.monotonic)
    checked: float = 0.0
    child: object = None             # (Process, Connection) of the step running


class GradingBurst(LoggingConfigurable):
    """The burst path's settings (``c.GradingBurst`` in the course's nbgrader_config.py) and its
    step, which the service calls once per turn of its loop."""

    over = Integer(0, help=(
        "Hand due submissions to a grading Job (Kubernetes) when more than this many are due: those "
        "beyond what the service's own workers take next. 0: never (one machine; a pod that grades "
        "all).")).tag(config=True)
    per_pod = Integer(6, help=(
        "Submissions per pod of the Job: the shard count is the burst's size / per_pod, rounded up "
        "(each pod grades --jobs at a time, grade-job.yaml).")).tag(config=True)
    max_pods = Integer(4, help=(
        "Pods of one Job, at most (they share the teacher's node: ReadWriteOnce).")).tag(config=True)
    job_template = Unicode("/etc/tinygpt/burst/grade-job.yaml", help=(
        "The grading Job to fill in: the teacher's hub/z2jh/grade-job.yaml (image and claim set), "
        "mounted from a ConfigMap (hub/z2jh/grading-service.yaml).")).tag(config=True)
    job_timeout = Float(3600, help=(
        "Seconds a Job may take before it is deleted and its submissions count as failed.")).tag(config=True)
    check_interval = Float(10, help="Seconds between two looks at the Job under way.").tag(config=True)

    def __init__(self, service, api=None, **kwargs):
        super().__init__(**kwargs)
        self.service = service
        self.api = api
        self.burst = None
        self.state_file = os.path.join(service.course, STATE_FILE)
        self.ctx = multiprocessing.get_context("fork")
        if self.over > 0 and api is None:
            try:
                self.api = KubeJobs()
            except OSError as exc:      # not in a pod with the service's account: grade here alone
                self.log.error("c.GradingBurst.over is %d, but there is no Kubernetes service account here (%s): "
                               "no burst, this service grades everything itself", self.over, exc)
                self.over = 0
        if self.over > 0:
            self._forget_old()

    # a Job left by a service that stopped: its entries went back to the queue (Queue.recover)
    def _forget_old(self):
        try:
            with open(self.state_file) as f:
                old = json.load(f)
        except (FileNotFoundError, ValueError):
            return
        self.log.warning("deleting the grading Job %s of a service that stopped (its submissions are queued again)",
                         old.get("name"))
        self._delete(old["name"])
        self._clear_results(old["assignment"])
        os.remove(self.state_file)

    def _delete(self, name):
        try:
            self.api.delete(name)
        except OSError as exc:          # the API out of reach: the Job's ttlSecondsAfterFinished removes it
            self.log.warning("burst: could not delete the grading Job %s: %s", name, exc)

    def _clear_results(self, assignment):
        from ..classroom.shard import results_root
        shutil.rmtree(results_root(self.service.course, assignment), ignore_errors=True)

    def _start_child(self, step, *args):
        ours, theirs = self.ctx.Pipe(duplex=False)
        process = self.ctx.Process(target=_child, args=(theirs, step, *args), daemon=True)
        process.start()
        theirs.close()
        self.burst.child = (process, ours)

    def _child_done(self):
        """The child step's answer once it has one (None meanwhile); a dead child's: {}."""
        process, conn = self.burst.child
        if not conn.poll():
            if process.is_alive():
                return None
            answer = {}
        else:
            try:
                answer = conn.recv()
            except EOFError:
                answer = {}
        process.join()
        conn.close()
        self.burst.child = None
        return answer

    def busy(self):
        """Whether a burst is under way (its submissions are neither graded nor back in the queue)."""
        return self.burst is not None

    def step(self):
        """One turn: start a burst when decide() says so, else move the one under way along."""
        if self.over <= 0:
            return
        if self.burst is None:
            self._start()
        elif self.burst.phase == "collecting":
            self._collected()
        elif self.burst.phase == "grading":
            self._check_job()
        elif self.burst.phase == "settling":
            self._settled()

    def _start(self):
        service = self.service
        n = decide(service.queue.summary(0), len(service.pool.workers), self.over)
        if n == 0:
            return
        # one assignment per Job: the oldest due entry's, and as many of the next as are of it (an
        # entry handed back costs it an attempt, so claim no further than the run of that assignment)
        due = service.queue.entries(states=[State.QUEUED])
        n = min(n, next((i for i, e in enumerate(due) if e.assignment != due[0].assignment), len(due)))
        claimed = []
        while len(claimed) < n:
            entry = service.queue.claim(service.owner)
            if entry is None:
                break
            claimed.append(entry)
        if not claimed:
            return
        assignment = claimed[0].assignment       # another's, claimed past a held entry, goes back
        mine = [e for e in claimed if e.assignment == assignment]
        for entry in claimed:
            if entry.assignment != assignment:
                service.queue.failed(entry.id, "handed back: a grading Job takes one assignment", owner=service.owner)
        if assignment not in service.enabled:
            for entry in mine:
                service.queue.failed(entry.id, f"the grading service does not grade {assignment} "
                                               "(c.GradingService.assignments)", owner=service.owner)
            return
        from .grade import Job
        jobs = {e.id: Job(e.id, e.student, e.assignment, e.key, e.submitted,
                          feedback=e.assignment not in service.received_only, db_url=service.coursedir.db_url,
                          course_id=service.coursedir.course_id,
                          log=os.path.join(service.log_dir, f"{e.id}.{e.attempts}")) for e in mine}
        name = f"tinygpt-burst-{assignment.lower().replace('_', '-')[:30]}-{mine[0].id}"
        self.burst = Burst(name, assignment, shards_for(len(jobs), self.per_pod, self.max_pods), jobs)
        self.log.info("burst: %d submissions of %s to the grading Job %s (%d pods); collecting them",
                      len(jobs), assignment, name, self.burst.shards)
        self._start_child(_collect_all, list(jobs.values()), os.path.join(service.log_dir, f"{name}.collect.log"))

    def _fail(self, entry_ids, reason):
        for entry_id in entry_ids:
            self.service.queue.failed(entry_id, reason, owner=self.service.owner)
            self.burst.jobs.pop(entry_id, None)

    def _collected(self):
        answer = self._child_done()
        if answer is None:
            return
        burst = self.burst
        lost = [i for i in burst.jobs if i not in answer]
        self._fail(lost, "the burst's collect stopped before this submission")
        for entry_id, problem in answer.items():
            if problem is not None:
                self._fail([entry_id], problem.reason)
        if not burst.jobs:
            self.burst = None
            return
        students = [j.student for j in burst.jobs.values()]
        burst.shards = shards_for(len(students), self.per_pod, self.max_pods)
        self._clear_results(burst.assignment)
        with open(self.state_file, "w") as f:        # before the Job: a restart deletes it whatever happens
            json.dump({"name": burst.name, "assignment": burst.assignment}, f)
        try:
            manifest = job_manifest(load_template(self.job_template), name=burst.name,
                                    assignment=burst.assignment, students=students, shards=burst.shards,
                                    course=os.path.basename(self.service.course))
            self.api.create(manifest)
        except (OSError, ValueError, KeyError, yaml.YAMLError) as exc:     # no template, a bad one, the API
            self.log.error("burst: the grading Job could not be created: %s", exc)
            self._fail(list(burst.jobs), f"the grading Job could not be created: {exc}")
            os.remove(self.state_file)
            self.burst = None
            return
        burst.phase, burst.started = "grading", time.monotonic()

    def _check_job(self):
        burst = self.burst
        now = time.monotonic()
        if now - burst.checked < self.check_interval:
            return
        burst.checked = now
        try:
            job = self.api.get(burst.name)
        except OSError as exc:          # urllib's errors too: the API out of reach for now
            self.log.warning("burst: cannot read the Job %s: %s", burst.name, exc)
            job = {}
        state = "failed" if job is None else job_state(job)
        if state == "running" and now - burst.started > self.job_timeout:
            state = "timed out"
        if state == "running":
            return
        self.log.info("burst: the grading Job %s is %s; merging what its shards graded", burst.name, state)
        burst.phase = "settling"
        self._start_child(_settle_all, self.service.coursedir, self.service.course, burst.assignment, burst.shards,
                          list(burst.jobs.values()), os.path.join(self.service.log_dir, f"{burst.name}.settle.log"))

    def _settled(self):
        answer = self._child_done()
        if answer is None:
            return
        burst, queue, owner = self.burst, self.service.queue, self.service.owner
        for entry_id in list(burst.jobs):
            out = answer.get(entry_id)
            if out is not None and out.kind == "graded":
                queue.done(entry_id, out.result, owner=owner)
            else:
                reason = out.reason if out is not None else "the burst's settling stopped"
                job = burst.jobs[entry_id]
                self.log.error("burst: not graded %s/%s (id %d): %s", job.student, job.assignment, entry_id, reason)
                queue.failed(entry_id, reason, owner=owner)
        self.log.info("burst: %s done: %d graded, %d not", burst.name,
                      sum(1 for o in answer.values() if o.kind == "graded"),
                      sum(1 for o in answer.values() if o.kind != "graded"))
        self._delete(burst.name)
        self._clear_results(burst.assignment)
        os.remove(self.state_file)
        self.burst = None

    def close(self):
        """The service stops: a child step is ended; the Job is left for the next start to delete."""
        if self.burst is not None and self.burst.child is not None:
            process, conn = self.burst.child
            process.terminate()
            process.join()
            conn.close()
