"""Issue 20's attacks graded as a class: `tinygpt-grade-class` with 3 workers, as the grader
runs it, beside 5 right answers, in one run.

The class is the catalogue's right answers 01-05, its case for each row of the issue's first
table (43-46, 60-64: tests/test_catalogue.py grades them with `nbgrader autograde`) and, for its
second table, a process flood (3000 sleeping processes), a memory bomb (4 children holding 1 GiB
each) and a shared-memory fill (4 GiB: /dev/shm files, then SysV segments), in tests/data/floods/.
The memory cap is the test course's (c.Sandbox.memory_limit_mb = 2048, read back from its
config): the bomb and the fill ask for twice the cap, well inside a shared 24 GiB machine.

Checked: every learner graded with the expected score, the integrity checks of the catalogue's
own run, no symlink, FIFO, device, set-uid file or deep folder under autograded/, feedback/ or
the temp folder, each learner's log intact, nothing left over (process, cgroup, /dev/shm file,
SysV IPC object), and the machine still answers. With its defence switched off, the flood
starts them all (test_the_flood_starts_them_all_without_the_process_cap; the memory bomb and the
fill are shown without theirs at a small size in tests/test_sandbox.py, never at full size).
"""
import os
import re
import shutil
import sqlite3
import subprocess
import sys
import threading

import nbformat
import pytest

from tinygpt_course.testing import catalogue
from tinygpt_course.testing.catalogue import leftover_processes, settled, submit, trusted_state
from tinygpt_course.testing.course import REPO, env, make_course, nbgrader
from tinygpt_course.testing.notebooks import printed
from tinygpt_course.testing.processes import processes_of, uid_of

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="a root grader's defences (CI runs as root)")

CAP_MB = 2048
CONFIG = ("c.RobustExecute.timeout = 30\nc.IndependentChecks.timeout = 60\n"
          f"c.Sandbox.memory_limit_mb = {CAP_MB}\n")
RIGHT = ["01_right_comprehension", "02_right_loop_append", "03_right_concat_dim2", "04_right_proj_first",
         "05_right_stray_random"]
# the catalogue's case for each row of the issue's first table
FIRST_TABLE = ["43_attack_heap_search", "44_attack_previous_reply", "45_attack_solution_in_error",
               "60_attack_symlinks", "61_attack_deep_folder", "62_attack_setuid_copy", "63_attack_big_file",
               "64_attack_stderr", "46_attack_script_output"]
FLOODS = [catalogue.parse(p, "multihead") for p in sorted((REPO / "tests" / "data" / "floods").glob("*.py"))]
CLASS = [catalogue.answer("multihead", n) for n in RIGHT + FIRST_TABLE] + FLOODS
SLEEPERS = ("sleep 3141593", "sleep 2718281")
NOBODY = 65534
# a root grader's workers run learner code as c.Sandbox.uid + their index: 65534, 65535, 65536 for --jobs 3
LEARNER_UIDS = {NOBODY + k for k in range(3)}


def grade_class(course, jobs=3):
    """tinygpt-grade-class on the course, its output to files (a leftover would hold a pipe)."""
    (course / "tmp").mkdir(exist_ok=True)
    with open(course / "grade.out", "w+") as out:
        proc = subprocess.Popen([sys.executable, "-m", "tinygpt_course.classroom", "multihead", "--jobs", str(jobs),
                                 "--no-progress", "--course-dir", str(course), "--logs", str(course / "logs")],
                                env={**env(), "TMPDIR": str(course / "tmp")}, stdout=out, stderr=subprocess.STDOUT)
        watch = Watch(proc.pid)
        code = proc.wait(timeout=3600)
        watch.stop()
    return code, (course / "grade.out").read_text(), watch


def children(pid):
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(p) for p in f.read().split()]
    except OSError:
        return []


class Watch(threading.Thread):
    """While the class is graded: the grader's processes (whose cgroups are theirs), the most
    processes one of their sandboxes had (its pids cgroup's pids.current), the most processes
    the learner uids (65534-65536) had on the machine, which of them ran a process of the
    grader's tree, and the least memory the machine had available."""

    def __init__(self, pid):
        super().__init__(daemon=True)
        self.pid, self.graders, self.most_nobody, self.least_available = pid, {pid}, 0, meminfo()["MemAvailable"]
        self.most_in_a_sandbox, self.learner_uids = 0, set()
        self.done = threading.Event()
        self.start()

    def run(self):
        while not self.done.is_set():
            todo = [self.pid]
            while todo:           # the grader's tree down to its workers, the template and re-run servers
                p = todo.pop()
                kids = children(p)
                self.learner_uids.update(uid_of(k) for k in kids if uid_of(k) in LEARNER_UIDS)
                kids = [k for k in kids if uid_of(k) == 0]
                self.graders.update(kids)
                todo += kids
            self.most_nobody = max(self.most_nobody, len(processes_of(*LEARNER_UIDS)))
            for cgroup in cgroups_of(self.graders):
                try:
                    with open(os.path.join(cgroup, "pids.current")) as f:
                        self.most_in_a_sandbox = max(self.most_in_a_sandbox, int(f.read()))
                except (OSError, ValueError):
                    pass
            self.least_available = min(self.least_available, meminfo()["MemAvailable"])
            self.done.wait(0.5)

    def stop(self):
        self.done.set()
        self.join()


def meminfo():
    """/proc/meminfo in MiB."""
    with open("/proc/meminfo") as f:
        return {ln.split(":")[0]: int(ln.split()[1]) // 1024 for ln in f}


def sysv_objects():
    """The host's SysV IPC objects of the learner uids, as (kind, key, id)."""
    found = set()
    for kind in ("shm", "sem", "msg"):
        with open(f"/proc/sysvipc/{kind}") as f:
            head = f.readline().split()
            for line in f:
                row = dict(zip(head, line.split()))
                if int(row["uid"]) in LEARNER_UIDS or int(row["cuid"]) in LEARNER_UIDS:
                    found.add((kind, row["key"], row[{"shm": "shmid", "sem": "semid", "msg": "msqid"}[kind]]))
    return found


def shm_files():
    """The host's /dev/shm entries of the learner uids."""
    found = set()
    for name in os.listdir("/dev/shm"):
        try:
            if os.lstat(os.path.join("/dev/shm", name)).st_uid in LEARNER_UIDS:
                found.add(name)
        except OSError:
            pass
    return found


def shm_used_mb():
    st = os.statvfs("/dev/shm")
    return (st.f_blocks - st.f_bfree) * st.f_frsize >> 20


def cgroups_of(graders):
    """Sandbox cgroups (tinygpt-sandbox-<grader pid>-<n>) still there of one of `graders`, below
    the cgroups the graders make theirs in (this process's own: the grader is its child)."""
    from tinygpt_course.grading.sandbox import Cgroups
    found = []
    for root in Cgroups._roots().values():
        found += [os.path.join(root, n) for n in os.listdir(root)
                  if n.startswith("tinygpt-sandbox-") and n.split("-")[2].isdigit() and int(n.split("-")[2]) in graders]
    return found


def leftovers(course, graders):
    """What the run left: processes (in the course, the sleepers, a grader process), cgroups."""
    procs = leftover_processes(course, SLEEPERS) + [(str(p), "", "grader process") for p in graders if uid_of(p) is not None]
    return procs + cgroups_of(graders)


def config_value(course, section, name):
    """A value of the course's nbgrader_config.py, as nbgrader's config loader reads it."""
    from traitlets.config.loader import PyFileConfigLoader
    return PyFileConfigLoader("nbgrader_config.py", path=str(course)).load_config()[section][name]


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    course = make_course(tmp_path_factory.mktemp("class-sandbox"), extra_config=CONFIG)
    for a in CLASS:
        submit(course, a.name, a.code, a.notebook)
    before = {"trusted": trusted_state(course), "sysv": sysv_objects(), "shm": shm_files(),
              "shm_used": shm_used_mb(), "mem": meminfo()}
    code, out, watch = grade_class(course)
    left = settled(lambda: leftovers(course, watch.graders - {os.getpid()}))
    after = {"trusted": trusted_state(course), "sysv": sysv_objects(), "shm": shm_files(),
             "shm_used": shm_used_mb(), "mem": meminfo()}
    feedback = nbgrader(course, "generate_feedback", "multihead", check=False)
    yield {"course": course, "code": code, "out": out, "watch": watch, "leftovers": left, "before": before,
           "after": after, "feedback": feedback}
    for pid, _, cmd in leftover_processes(course, SLEEPERS):    # only if a test above failed
        if any(m in cmd for m in SLEEPERS):
            os.kill(int(pid), 9)


def test_the_class_is_the_issues_tables():
    assert len(CLASS) == len({a.name for a in CLASS}) == 17
    assert [a.name for a in FLOODS] == ["90_attack_process_flood", "91_attack_memory_bomb", "92_attack_shm_fill"]
    assert all(a.sort == "attack" for a in FLOODS) and all(catalogue.answer("multihead", n).sort == "right" for n in RIGHT)


def test_the_test_course_has_the_cap_the_attacks_exceed(graded):
    """The bomb and the fill ask for 4 GiB, twice the cap: only the cap stops them."""
    cap = config_value(graded["course"], "Sandbox", "memory_limit_mb")
    assert cap == CAP_MB and 4096 >= 2 * cap
    assert config_value(graded["course"], "Sandbox", "max_processes") < 3000


def test_every_learner_is_graded(graded):
    course = graded["course"]
    assert graded["code"] == 0 and f"graded {len(CLASS)}, skipped 0, failed 0" in graded["out"], graded["out"][-3000:]
    assert graded["feedback"].returncode == 0, graded["feedback"].stderr[-3000:]
    assert catalogue.ungraded(course, CLASS) == []


# the flood's own score depends on where its kernel breaks at the cap (its data file says so)
COMPARED = [a for a in CLASS if a.name != "90_attack_process_flood"]


@pytest.mark.parametrize("answer", COMPARED, ids=[a.name for a in COMPARED])
def test_expected_score(graded, answer):
    assert catalogue.scored(graded["course"], answer) == answer.expect, answer.why


def test_the_trusted_files_are_untouched_and_no_manual_score(graded):
    assert graded["after"]["trusted"] == graded["before"]["trusted"]
    with sqlite3.connect(graded["course"] / "gradebook.db") as db:
        assert db.execute("SELECT count(*) FROM grade WHERE manual_score IS NOT NULL").fetchone()[0] == 0


def test_feedback_shows_no_hidden_line_and_no_bulk(graded):
    """As in the catalogue's own run: no line of the hidden tests or the solution in anyone's
    feedback, 45's error quoted in one capped line, 46's script shown as text only."""
    course = graded["course"]
    assert catalogue.leaked_lines(course, CLASS) == {}
    error_page = catalogue.feedback_text(course, "45_attack_solution_in_error")
    assert "MultiHead() failed" in error_page and "A" * 300 not in error_page
    script_page = (course / "feedback" / "46_attack_script_output" / "multihead" / "multihead.html").read_text()
    assert "__tinygpt_probe" in script_page and not re.search(r"<[^>]*__tinygpt_probe", script_page)


def test_nothing_learner_code_wrote_reaches_the_host(graded):
    """No symlink, FIFO, device, set-uid file or deep folder under autograded/, feedback/, the
    temp folder or the logs, no file larger than nbgrader's own, none of the attacks' names."""
    course = graded["course"]
    assert catalogue.reached_the_host(course / "autograded", course / "feedback", course / "tmp", course / "logs") == []


def test_each_learners_log_is_intact(graded):
    """tinygpt-grade-class logs each submission to a file of its own: 64's fd 2 is a pipe the
    grader reads, so its forged line is in its own log, marked and spelled out, and no other log
    (01's, whom it names) holds it or was truncated (each ends with the worker's exit line)."""
    logs = graded["course"] / "logs"
    for a in CLASS:
        text = (logs / f"{a.name}.0.log").read_text()
        assert text.rstrip().splitlines()[-1].startswith("[tinygpt-grade-class] exit 0;"), (a.name, text[-2000:])
        if a.name != "64_attack_stderr":
            assert "(forged)" not in text, a.name
    forged = [ln for ln in (logs / "64_attack_stderr.0.log").read_text().splitlines() if "(forged)" in ln]
    assert forged and all("[kernel of 64_attack_stderr/multihead] " in ln and "\\r\\x1b" in ln for ln in forged), forged
    assert not [ln for ln in graded["out"].splitlines() if "FLAGGED" in ln], graded["out"][-2000:]


def answer_output(course, student):
    """What the answer cell printed in the learner's autograded notebook."""
    nb = nbformat.read(course / "autograded" / student / "multihead" / "multihead.ipynb", as_version=4)
    return printed(next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == "multihead"))


def test_the_flood_is_bounded(graded):
    """3000 asked: no sandbox of the run ever held more than c.Sandbox.max_processes (its pids
    cgroup), the learner uids never had 3000 processes on the machine, and where the flood's kernel
    lived to print it, fewer than the cap started. Its notebook is graded (test_every_learner_is_graded)."""
    cap = config_value(graded["course"], "Sandbox", "max_processes")
    printed_line = re.search(r"flood: started (\d+) sleeping", answer_output(graded["course"], "90_attack_process_flood"))
    assert printed_line is None or int(printed_line.group(1)) < cap, printed_line.group()
    assert graded["watch"].most_in_a_sandbox <= cap, graded["watch"].most_in_a_sandbox
    assert graded["watch"].most_nobody < 3000, graded["watch"].most_nobody


def test_each_worker_runs_learner_code_as_a_uid_of_its_own(graded):
    """The root grader's 3 workers: their sandboxes ran as 65534, 65535 and 65536 outside (the
    grader's direct children of a learner uid: bubblewrap, started by a worker after launch.py
    dropped to c.Sandbox.uid + the worker's index), never root."""
    assert graded["watch"].learner_uids == LEARNER_UIDS, graded["watch"].learner_uids


def test_the_memory_bomb_and_the_fill_are_stopped_at_the_cap(graded):
    """Where the kernel lived to print it: fewer than the 4 children hold their GiB, and the
    fill placed less than it asked (the memory cgroup counts shared memory too)."""
    course = graded["course"]
    bomb = re.search(r"memory bomb: (\d+) of 4", answer_output(course, "91_attack_memory_bomb"))
    fill = re.search(r"shm fill: placed (\d+) MiB", answer_output(course, "92_attack_shm_fill"))
    assert bomb is None or int(bomb.group(1)) * 1024 < CAP_MB, bomb.group()
    assert fill is None or int(fill.group(1)) < CAP_MB, fill.group()


def test_nothing_is_left_over(graded):
    """No process (a sleeper, one in the course, a grader's), no sandbox cgroup of the run's
    graders, no /dev/shm file or SysV IPC object of the learner uids that was not there before."""
    assert graded["leftovers"] == []
    assert graded["after"]["shm"] - graded["before"]["shm"] == set()
    assert graded["after"]["sysv"] - graded["before"]["sysv"] == set()


def test_the_machine_still_answers(graded):
    """The host's /dev/shm and shared memory did not grow by the fill (4 GiB asked, 1 GiB
    allowed for the other work on this machine), and memory never ran out while grading."""
    before, after = graded["before"], graded["after"]
    assert after["shm_used"] - before["shm_used"] < 1024, (before["shm_used"], after["shm_used"])
    assert after["mem"]["Shmem"] - before["mem"]["Shmem"] < 1024, (before["mem"]["Shmem"], after["mem"]["Shmem"])
    assert graded["watch"].least_available > 1024, graded["watch"].least_available


def test_the_flood_starts_them_all_without_the_process_cap(tmp_path):
    """The defence off: c.Sandbox.max_processes = 0 (no RLIMIT_NPROC, no pids.max), the same
    flood bounded to 600 (above the default cap of 512, safe for the machine): all 600 start."""
    flood = FLOODS[0]
    assert "range(3000)" in flood.code and "os.posix_spawn" in flood.code
    course = make_course(tmp_path / "uncapped", extra_config=CONFIG + "c.Sandbox.max_processes = 0\n")
    submit(course, flood.name, flood.code.replace("range(3000)", "range(600)"), None)
    try:
        code, out, watch = grade_class(course, jobs=1)
        assert code == 0, out[-3000:]
        assert "flood: started 600 sleeping processes" in answer_output(course, flood.name)
        assert settled(lambda: leftovers(course, watch.graders - {os.getpid()})) == []
    finally:
        for pid, _, cmd in leftover_processes(course, SLEEPERS):
            if any(m in cmd for m in SLEEPERS):
                os.kill(int(pid), 9)
        shutil.rmtree(course / "tmp", ignore_errors=True)
