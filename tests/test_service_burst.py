"""The grading service's burst path (tinygpt_course/service/burst.py) end to end, without a cluster.

One course and a real nbgrader exchange in a temporary folder (as tests/test_service.py); four
learners submit with the real `nbgrader submit`. The real service (`tinygpt-grading-service run`,
one worker) runs with the burst on (c.GradingBurst.over = 1). Kubernetes alone is stood in for:
creating the Job runs its pods' command -- the one job_manifest() made from hub/z2jh/grade-job.yaml,
`tinygpt-grade-class <assignment> --shards N ...` -- once per index with JOB_COMPLETION_INDEX, as
the Indexed Job's pods, on the course folder the pods mount; the Job is complete when all exit 0,
failed when one does not. Shown:

- the overflow goes to one Job (one assignment, the students listed, N from shards_for), the
  pod's own worker grades the rest; every submission is GRADED exactly once, with the scores the
  gradebook holds, which are the right ones for each answer;
- each learner fetches their own feedback, burst or not, with the real `nbgrader fetch_feedback`;
- the Job is deleted, its shards' results and the burst's state file are gone;
- a Job one of whose shards fails: that shard's learners are QUEUED again with the reason (the
  others graded), and the service grades them itself after.
"""
import json
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tinygpt_course.service.queue import State
from tinygpt_course.service.runner import QUEUE_FILE
from tinygpt_course.testing import catalogue
from tinygpt_course.testing.course import env, make_course, nbgrader, scores, service_entries
from tinygpt_course.testing.notebooks import points, solution
from tinygpt_course.testing.submissions import hand_in

ANSWERS = {"ann": solution("multihead"), "bob": catalogue.answer("multihead", "06_plain_list"),
           "cat": catalogue.answer("multihead", "02_right_loop_append"),
           "dan": catalogue.answer("multihead", "07_wrong_dim"),
           "eve": solution("multihead"), "fay": catalogue.answer("multihead", "06_plain_list"),
           "gus": catalogue.answer("multihead", "02_right_loop_append"), "hal": solution("multihead")}
FULL = sum(points("multihead").values())
JOB_YAML = Path(__file__).resolve().parents[1] / "hub" / "z2jh" / "grade-job.yaml"

# The service, with Kubernetes' Job API stood in for by local processes.
DRIVER = textwrap.dedent('''
    import json, os, subprocess, sys
    from tinygpt_course.service import burst, cli

    COURSE, LOG, FAIL_SHARD = sys.argv[1], sys.argv[2], int(sys.argv[3])
    POD_HOME = "/home/jovyan/"            # where the Job's pods mount the teacher's home

    class LocalJobs:
        """create: the Job's pods' command, once per index (JOB_COMPLETION_INDEX), on COURSE."""
        procs = {}

        def create(self, manifest):
            spec = manifest["spec"]
            (ctr,) = spec["template"]["spec"]["containers"]
            cmd = [os.path.join(COURSE, c[len(POD_HOME) + len("tinygpt"):].lstrip("/")) if c.startswith(POD_HOME)
                   else c for c in ctr["command"]]
            pod_env = {e["name"]: e["value"] for e in ctr["env"] if e["name"] != "HOME"}
            with open(LOG, "a") as f:
                f.write(json.dumps({"created": manifest}) + "\\n")
            procs = []
            for index in range(spec["completions"]):
                if index == FAIL_SHARD:          # its results' place taken: the shard exits non-zero
                    results = os.path.join(COURSE, "shards", cmd[1])
                    os.makedirs(results, exist_ok=True)
                    open(os.path.join(results, str(index)), "w").close()
                procs.append(subprocess.Popen(cmd, env={**os.environ, **pod_env, "JOB_COMPLETION_INDEX": str(index)},
                                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
            self.procs[manifest["metadata"]["name"]] = procs
            return manifest

        def get(self, name):
            codes = [p.poll() for p in self.procs[name]]
            if None in codes:
                return {"status": {"active": codes.count(None)}}
            kind = "Complete" if not any(codes) else "Failed"
            return {"status": {"conditions": [{"type": kind, "status": "True"}]}}

        def delete(self, name):
            with open(LOG, "a") as f:
                f.write(json.dumps({"deleted": name}) + "\\n")

    burst.KubeJobs = LocalJobs        # what GradingBurst talks to when it is given no API

    sys.exit(cli.main(["run", "--course-dir", COURSE]))
''')


def _submit(base, exchange, student):
    """The learner hands in ANSWERS[student] from their own folder; that folder."""
    home = base / "learners" / student
    answer = ANSWERS[student]
    hand_in(home, exchange, student, getattr(answer, "code", answer))
    return home


def _expected(student):
    return catalogue.expected_points(ANSWERS[student], "multihead")



def _run_until_settled(base, course, students, fail_shard=-1, timeout=900):
    """The hooked service until every entry of `students` is GRADED or FLAGGED; its output,
    the Job API calls, the entries."""
    driver, log = base / "driver.py", base / f"jobs-{fail_shard}.jsonl"
    driver.write_text(DRIVER)
    proc = subprocess.Popen([sys.executable, str(driver), str(course), str(log), str(fail_shard)], env=env(),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    deadline = time.monotonic() + timeout
    try:
        while True:
            entries = service_entries(course) if (course / QUEUE_FILE).exists() else {}
            if all(s in entries and entries[s].state in (State.GRADED, State.FLAGGED) for s in students):
                break
            if proc.poll() is not None or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    calls = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
    return out, calls, service_entries(course)


@pytest.fixture(scope="module")
def course_and_exchange(tmp_path_factory):
    base = tmp_path_factory.mktemp("burst")
    exchange = base / "exchange"
    course = make_course(base / "course", extra_config=(
        f"c.Exchange.root = {str(exchange)!r}\nc.GradingService.assignments = ['multihead']\n"
        "c.GradingService.jobs = 1\nc.GradingService.per_minute = 10\nc.RobustExecute.timeout = 30\n"
        f"c.GradingBurst.over = 1\nc.GradingBurst.per_pod = 1\nc.GradingBurst.max_pods = 2\n"
        f"c.GradingBurst.job_template = {str(JOB_YAML)!r}\nc.GradingBurst.check_interval = 0.5\n"))
    nbgrader(course, "release_assignment", "multihead")
    return base, course, exchange


@pytest.fixture(scope="module")
def burst_run(course_and_exchange):
    base, course, exchange = course_and_exchange
    homes = {s: _submit(base, exchange, s) for s in ("ann", "bob", "cat", "dan")}
    out, calls, entries = _run_until_settled(base, course, list(homes))
    return {"base": base, "course": course, "exchange": exchange, "homes": homes, "out": out, "calls": calls,
            "entries": entries}


def test_the_overflow_is_graded_by_one_job_and_the_rest_by_the_pod(burst_run):
    out, calls, entries = burst_run["out"], burst_run["calls"], burst_run["entries"]
    created = [c["created"] for c in calls if "created" in c]
    assert len(created) == 1, out[-4000:]
    (job,) = created
    listed = job["metadata"]["annotations"]["tinygpt.example.org/students"].split(",")
    # one worker claims the oldest; 3 due, more than over=1: the 2 beyond the worker's next one
    assert len(listed) == 2 and job["spec"]["completions"] == 2, job["metadata"]
    cmd = job["spec"]["template"]["spec"]["containers"][0]["command"]
    assert cmd[:4] == ["tinygpt-grade-class", "multihead", "--shards", "2"]
    assert [c for c in calls if "deleted" in c] == [{"deleted": job["metadata"]["name"]}]
    assert {s: (e.state, e.attempts) for s, e in entries.items()} == {
        s: (State.GRADED, 1) for s in ("ann", "bob", "cat", "dan")}, out[-4000:]
    for student, entry in entries.items():
        got = scores(burst_run["course"], "multihead", student)
        assert {k: score for k, (score, _) in entry.result["scores"].items()} == got, (student, entry.result)
        assert entry.result["total"] == [sum(got.values()), FULL] and entry.result["feedback"] is True
        assert {k: got[k] for k in _expected(student)} == _expected(student), student
    graded_by_pod = re.findall(r"graded (\w+)/multihead \(id", out)
    assert sorted(graded_by_pod + listed) == ["ann", "bob", "cat", "dan"], out[-4000:]


def test_every_learner_fetches_their_own_feedback(burst_run):
    course = burst_run["course"]
    for student, home in burst_run["homes"].items():
        nbgrader(home, "fetch_feedback", "multihead", "--student", student)
        fetched = [p.read_bytes() for p in (home / "multihead" / "feedback").glob("*/*.html")]
        mine = (course / "feedback" / student / "multihead" / "multihead.html").read_bytes()
        assert fetched == [mine], f"{student} fetched {len(fetched)} pages, not their own one"


def test_the_job_leaves_nothing_behind(burst_run):
    course = burst_run["course"]
    assert not (course / "shards" / "multihead").exists()
    assert not (course / "grading_service_burst.json").exists()


def test_a_failed_shard_sends_its_learners_back_to_the_queue(burst_run):
    base, course, exchange = burst_run["base"], burst_run["course"], burst_run["exchange"]
    before = service_entries(course)
    # four: the one worker takes eve, the burst the two beyond its next (fay and gus, one in each
    # shard: the whole submitted class is dealt in turn), and shard 1 fails
    new = ("eve", "fay", "gus", "hal")
    for student in new:
        _submit(base, exchange, student)
    out, calls, entries = _run_until_settled(base, course, list(new), fail_shard=1)
    created = [c["created"] for c in calls if "created" in c]
    assert len(created) >= 1, out[-4000:]
    listed = created[0]["metadata"]["annotations"]["tinygpt.example.org/students"].split(",")
    assert len(listed) == 2, out[-4000:]
    assert re.search(r"burst: not graded (\w+)/multihead .*the grading Job did not grade it", out), out[-4000:]
    for student in new:
        assert entries[student].state is State.GRADED, (student, entries[student], out[-4000:])
        got = scores(course, "multihead", student)
        assert {k: got[k] for k in _expected(student)} == _expected(student), student
    # a learner of the failed shard was tried twice: once in the Job, once by the pod
    assert any(entries[s].attempts == 2 for s in listed), ({s: entries[s].attempts for s in listed}, out[-4000:])
    assert {s: before[s] for s in before} == {s: entries[s] for s in before}, "earlier grades were touched"
