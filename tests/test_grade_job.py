"""The grading Job's container (hub/z2jh/grade-job.yaml) run on this machine under exactly its
constraints, without a cluster.

As in the Job's pod: the teacher's uid and group from its securityContext (setpriv --reuid/--regid
--init-groups), the capability bounding set its `capabilities` leave (drop ALL, add SETUID, SETGID),
no inheritable capability, no_new_privs exactly when it sets allowPrivilegeEscalation false; the files
it mounts over /etc/passwd, /etc/subuid and /etc/subgid are values.yaml's (bound in a mount namespace
of the run's own, as the pod's subPath mounts do); newuidmap/newgidmap as the image has them
(build-image.sh: copies with the file capabilities CAP_SETUID, CAP_SETGID, not set-uid); its command,
with the course folder and the shard count set for this machine (its --jobs 3 kept). What is not reproduced: the
pod's own user namespace (hostUsers false: one more level of nesting) and its seccomp/AppArmor
(Unconfined: nothing is filtered here either).

A class of three multihead submissions (the right answer twice, summed heads, each with a probe in
front of it) is graded as shard 0 of 1 and merged by the teacher. The probe's cell makes a marker
file naming its student in its sandbox's /tmp and waits (50 s at most) until the test, outside, has
seen the process through /proc/<pid>/root and released it: every process of every sandbox the probe
ran in (the kernel and the independent re-run) is the teacher's first subordinate uid + its grading
worker's index outside (60000, 60001, 60002: a uid per worker), never the teacher's. With the
constraints the Job had before (allowPrivilegeEscalation false, every capability dropped), and with
the bounding set empty alone, grading refuses before running any learner code, naming the two settings.
"""
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

import pytest
import yaml

from tinygpt_course.testing import catalogue
from tinygpt_course.testing import submissions as subs
from tinygpt_course.testing.course import load_script

REPO = Path(__file__).resolve().parents[1]
Z2JH = REPO / "hub" / "z2jh"
PROBE = f"/tmp/tinygpt-uid-probe-{uuid.uuid4().hex[:12]}"
PROBE_CODE = f'''import os as _os, time as _time
open("{PROBE}", "w").write(__STUDENT__ + " " + _os.urandom(8).hex())    # student, sandbox
for _ in range(500):          # the test, outside, releases this once it has seen the process
    if _os.path.exists("{PROBE}-seen"):
        break
    _time.sleep(0.1)
'''
STUDENTS = {"s000_probe": "right", "s001_summed": "summed", "s002_probe": "right"}
# util-linux's unshare + mount: the pod's read-only subPath mounts over /etc, for this run alone
MOUNTS = ('mount --bind "$1" /etc/passwd && mount --bind "$2" /etc/subuid && mount --bind "$2" /etc/subgid '
          '&& shift 2 && exec "$@"')


def job():
    (doc,) = yaml.safe_load_all((Z2JH / "grade-job.yaml").read_text())
    pod = doc["spec"]["template"]["spec"]
    (ctr,) = pod["containers"]
    return pod, ctr


def setpriv(pod, ctr):
    """setpriv's options for the container's securityContext."""
    psc, sc = pod["securityContext"], ctr["securityContext"]
    caps = sc.get("capabilities") or {}
    assert caps.get("drop") == ["ALL"], caps
    opts = ["--reuid", str(psc["runAsUser"]), "--regid", str(psc["runAsGroup"]), "--init-groups",
            "--inh-caps", "-all", "--bounding-set", ",".join(["-all", *(f"+{c.lower()}" for c in caps.get("add", []))])]
    return opts + ["--no-new-privs"] * (sc.get("allowPrivilegeEscalation") is False)


class Watcher(threading.Thread):
    """Finds the processes whose root holds the probe's marker (they are in its sandbox), notes
    their uids and gids as /proc shows them outside, and releases them."""

    def __init__(self):
        super().__init__(daemon=True)
        self.seen, self.sandboxes, self.done, self.by_student = {}, set(), threading.Event(), {}

    def run(self):
        while not self.done.is_set():
            for pid in filter(str.isdigit, os.listdir("/proc")):
                try:
                    os.stat(f"/proc/{pid}/root{PROBE}")
                    status = dict(ln.split(":", 1) for ln in open(f"/proc/{pid}/status") if ":" in ln)
                except OSError:
                    continue
                self.seen[pid] = (status["Uid"].split(), status["Gid"].split(), status["Name"].strip())
                try:
                    student, sandbox = open(f"/proc/{pid}/root{PROBE}").read().split()
                except (OSError, ValueError):
                    continue            # not written yet
                self.by_student.setdefault(student, set()).add(status["Uid"].split()[0])
                self.sandboxes.add(sandbox)
                catalogue.touch_in_sandbox(pid, f"{PROBE}-seen")
            time.sleep(0.2)


@pytest.fixture(scope="module")
def graded(request):
    from tinygpt_course.testing import hub
    roster = load_script(Z2JH / "roster.py", "tinygpt_z2jh_roster")
    if os.geteuid() != 0 or not all(shutil.which(t) for t in ("setpriv", "unshare", "setcap", "newuidmap")):
        pytest.skip("needs root, setpriv, unshare, setcap (libcap2-bin) and newuidmap (uidmap)")
    pod, ctr = job()
    uid, gid = pod["securityContext"]["runAsUser"], pod["securityContext"]["runAsGroup"]
    values = yaml.safe_load((Z2JH / "values.yaml").read_text())["custom"]["tinygpt"]
    teacher = next(name for name, u in values["teachers"].items() if u == uid)
    first = int(values["subids"].split(":")[1])
    assert values["subids"] == roster.subids(values) and first not in (uid, gid)

    # not below pytest's folder: its root is 0700 again whenever another pytest run of root's starts
    base = Path(tempfile.mkdtemp(prefix="tinygpt-gradejob-"))
    os.chmod(base, 0o755)
    etc = base / "etc"
    etc.mkdir()
    (etc / "passwd").write_text(values["passwd"])
    (etc / "subids").write_text(values["subids"])
    tools = base / "bin"          # the image's newuidmap/newgidmap: file capabilities, not set-uid
    tools.mkdir()
    for tool, cap in (("newuidmap", "cap_setuid+ep"), ("newgidmap", "cap_setgid+ep")):
        shutil.copyfile(shutil.which(tool), tools / tool)
        os.chmod(tools / tool, 0o755)
        subprocess.run(["setcap", cap, str(tools / tool)], check=True)
    for d in (base, etc, tools):
        os.chmod(d, 0o755)

    (etc / "none").write_text("")

    def as_job(args, opts, path_first=(tools,), subids="subids"):
        env = {"HOME": str(base / "home"), "OMP_NUM_THREADS": "1", "JOB_COMPLETION_INDEX": "0", "LANG": "C.UTF-8",
               "PATH": os.pathsep.join([*map(str, path_first), str(venv / "bin"), "/usr/bin", "/bin"])}
        cmd = ["unshare", "--mount", "--propagation", "private", "sh", "-c", MOUNTS, "sh", str(etc / "passwd"),
               str(etc / subids), "setpriv", *opts, "--", "env", "-i", *(f"{k}={v}" for k, v in env.items()), *args]
        return subprocess.Popen(cmd, cwd=base / "home", text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)

    # the venv: this one where the teacher's uid can use it, else one made as for the hub's users
    venv = Path(sys.prefix)
    (base / "home").mkdir()
    os.chown(base / "home", uid, gid)
    check = as_job(["python", "-c", "import tinygpt_course, nbgrader, torch"], setpriv(pod, ctr))
    if check.wait(timeout=300) != 0:
        venv = request.getfixturevalue("users_venv")

    course = subs.make_course(base / "home" / "tinygpt")
    import json
    for student, kind in STUDENTS.items():      # each with the probe, naming its student
        subs.submit(course, student, kind)
        probe_nb = course / "submitted" / student / "multihead" / "multihead.ipynb"
        nb = json.loads(probe_nb.read_text())
        cell = next(c for c in nb["cells"] if c["metadata"].get("nbgrader", {}).get("grade_id") == "multihead")
        cell["source"] = PROBE_CODE.replace("__STUDENT__", repr(student)) + "".join(cell["source"])
        probe_nb.write_text(json.dumps(nb, indent=1))
    subprocess.run(["chown", "-R", f"{uid}:{gid}", str(base / "home")], check=True)

    cmd = list(ctr["command"])
    jobs = int(cmd[cmd.index("--jobs") + 1])      # the Job's own --jobs: one worker per submission here
    assert jobs == len(STUDENTS), (jobs, cmd)
    for flag, value in (("--shards", "1"), ("--course-dir", str(course))):
        cmd[cmd.index(flag) + 1] = value
    old = {**ctr, "securityContext": {**ctr["securityContext"], "allowPrivilegeEscalation": False,
                                      "capabilities": {"drop": ["ALL"]}}}
    only_caps = {**ctr, "securityContext": {**ctr["securityContext"], "capabilities": {"drop": ["ALL"]}}}
    state = {"uid": uid, "gid": gid, "first": first, "teacher": teacher, "course": course}
    for name, c, path_first in (("old", old, (tools,)), ("no caps", only_caps, (tools,)), ("set-uid", ctr, ())):
        proc = as_job(cmd, setpriv(pod, c), path_first)
        out, _ = proc.communicate(timeout=900)      # read while it runs: a full pipe would stall it
        state[name] = (proc.returncode, out, (course / "shards").exists())

    watcher = Watcher()
    watcher.start()
    proc = as_job(cmd, setpriv(pod, ctr))
    try:
        out, _ = proc.communicate(timeout=1800)
    finally:
        watcher.done.set()
        watcher.join()
    state["job"] = (proc.returncode, out)
    state["watcher"] = watcher
    result = course / "shards" / "multihead" / "0" / "result.json"
    state["result"] = (json.loads(result.read_text()), result.stat().st_uid) if result.exists() else (None, None)
    # the teacher merges, in their own pod (restricted: no escalation, no capability)
    teacher_pod = {**ctr, "securityContext": {**ctr["securityContext"], "allowPrivilegeEscalation": False,
                                              "capabilities": {"drop": ["ALL"]}}}
    merge = as_job(["tinygpt-grade-class", "multihead", "--merge-shards", "1", "--no-progress", "--course-dir",
                    str(course)], setpriv(pod, teacher_pod))
    out, _ = merge.communicate(timeout=900)
    state["merge"] = (merge.returncode, out)
    state["scores"] = subs.totals(subs.gradebook_scores(course))

    # the defence off: no subordinate ids, and the course accepts the grader's uid (allow_grader_uid):
    # the same probe, graded the same way, is the teacher's uid outside, and the watcher sees it
    off = base / "home" / "tinygpt-off"
    shutil.copytree(course, off, symlinks=True, ignore=shutil.ignore_patterns("shards", "s001_summed", "s002_probe"))
    with open(off / "nbgrader_config.py", "a") as f:
        f.write("\nc.Sandbox.allow_grader_uid = True\n")
    subprocess.run(["chown", "-R", f"{uid}:{gid}", str(off)], check=True)
    cmd_off = list(cmd)
    cmd_off[cmd_off.index("--course-dir") + 1] = str(off)
    watcher_off = Watcher()
    watcher_off.start()
    proc = as_job(cmd_off + ["--force"], setpriv(pod, ctr), subids="none")
    try:
        state["off"] = (proc.communicate(timeout=1800)[0], watcher_off)
    finally:
        watcher_off.done.set()
        watcher_off.join()
    yield state
    shutil.rmtree(base, ignore_errors=True)


def test_the_job_grades_its_shard_as_the_teacher(graded):
    rc, out = graded["job"]
    assert rc == 0, out[-4000:]
    result, owner = graded["result"]
    assert result and result["graded"] == list(STUDENTS), out[-4000:]
    assert owner == graded["uid"], "the shard's results are the teacher's files"
    rc, out = graded["merge"]
    assert rc == 0, out[-3000:]
    assert graded["scores"]["s000_probe"] == graded["scores"]["s002_probe"] == 7, graded["scores"]
    assert 0 < graded["scores"]["s001_summed"] < 7, graded["scores"]


def test_learner_code_runs_as_the_teachers_subordinate_uid_outside(graded):
    """Each of the Job's --jobs 3 workers grades one submission (worker k the k-th: the pool hands
    them out in order): every process of its sandboxes (kernel and re-run) is the teacher's first
    subordinate id + k outside, 60000, 60001, 60002, never the teacher's 2000."""
    watcher, first = graded["watcher"], graded["first"]
    assert len(watcher.sandboxes) >= 2 * len(STUDENTS), \
        f"the probe was seen in {len(watcher.sandboxes)} sandboxes (kernel, re-run)"
    assert watcher.by_student == {s: {str(first + k)} for k, s in enumerate(STUDENTS)}, watcher.by_student
    for pid, (uids, gids, name) in watcher.seen.items():
        assert len(set(uids)) == 1 and gids == uids, (pid, name, uids, gids)     # values' subuid = subgid
        assert int(uids[0]) in range(first, first + len(STUDENTS)) and str(graded["uid"]) not in uids


def test_the_uid_check_sees_the_grader_where_the_defence_is_off(graded):
    """Without subordinate ids, with c.Sandbox.allow_grader_uid: learner code is the teacher's uid."""
    out, watcher = graded["off"]
    assert watcher.seen, "the probe was not seen with the defence off:\n" + out[-3000:]
    assert all(uids == [str(graded["uid"])] * 4 for uids, _, _ in watcher.seen.values()), watcher.seen


def test_the_jobs_old_constraints_are_refused_with_the_fix(graded):
    rc, out, wrote = graded["old"]
    assert rc != 0 and not wrote, out[-3000:]
    assert "no_new_privs" in out and "allowPrivilegeEscalation: true" in out and "add: [SETUID, SETGID]" in out, \
        out[-3000:]
    rc, out, wrote = graded["no caps"]
    assert rc != 0 and not wrote, out[-3000:]
    assert "bounding set lacks CAP_SETUID and CAP_SETGID" in out and "add: [SETUID, SETGID]" in out, out[-3000:]


def test_a_set_uid_newuidmap_without_capabilities_code_cannot_map(graded):
    """Why the image gives newuidmap a file capability: Debian 12's set-uid newuidmap (built without
    the seteuid-to-the-caller step of newer shadow) opens and writes uid_map as root, which needs
    CAP_DAC_OVERRIDE and CAP_SYS_ADMIN too; under the Job's bounding set it cannot map."""
    if b"Could not seteuid" in Path(shutil.which("newuidmap")).read_bytes():
        pytest.skip("this newuidmap drops to its caller's uid: set-uid works with SETUID, SETGID alone")
    rc, out, wrote = graded["set-uid"]
    assert rc != 0 and not wrote and "could not map uid" in out, out[-3000:]
