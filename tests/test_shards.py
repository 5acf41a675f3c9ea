"""Grading past one pod without a cluster: N shard runs, then the merge, equal tinygpt-grade-class.

A class of 6 multihead submissions (a right answer, summed heads, a plain list, the stub, a notebook
that is not JSON, damaged metadata that nbgrader cannot grade) in two copies of one course: one graded
by `tinygpt-grade-class`, the other by 3 shard processes at once, each with its own
JOB_COMPLETION_INDEX as a Kubernetes Indexed Job gives its pods, then `--merge-shards 3`. Shard 1
fails the first time (its results' place is taken by a file), the merge refuses and names it, shard 1
runs again alone, and the merge then fills the gradebook: the per-student, per-cell scores and
comments, and the autograded notebooks, are those of tinygpt-grade-class, failure reported the same.
"""
import json
import shutil
import subprocess
import sys

import pytest

from tinygpt_course.classroom.shard import share
from tinygpt_course.testing import submissions as subs

KINDS = ("right", "summed", "plainlist", "unanswered", "notjson", "badmeta")
SHARDS = 3


def grade(course, *args, index=None):
    env = subs.env()
    if index is not None:
        env["JOB_COMPLETION_INDEX"] = str(index)
    return subprocess.Popen([sys.executable, "-m", "tinygpt_course.classroom", "multihead", "--no-progress",
                             "--course-dir", str(course), *args], env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)


def finish(proc):
    out, _ = proc.communicate(timeout=900)
    return proc.returncode, out


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    root = tmp_path_factory.mktemp("shards")
    base = subs.make_course(root / "base")
    roster = subs.make_class(base, len(KINDS), kinds=KINDS)
    whole, sharded = root / "whole", root / "sharded"
    shutil.copytree(base, whole)
    shutil.copytree(base, sharded)
    results = sharded / "shards" / "multihead"
    results.mkdir(parents=True)
    (results / "1").write_text("in the way: shard 1 cannot write its results the first time\n")

    procs = [grade(whole, "--jobs", "2")]
    procs += [grade(sharded, "--shards", str(SHARDS), "--jobs", "1", index=i) for i in range(SHARDS)]
    (rc_whole, out_whole), *first = [finish(p) for p in procs]
    state = {"root": root, "roster": roster, "whole": whole, "sharded": sharded, "results": results,
             "rc_whole": rc_whole, "out_whole": out_whole, "first": first}

    state["refused"] = finish(grade(sharded, "--merge-shards", str(SHARDS)))
    state["scores_after_refusal"] = subs.gradebook_scores(sharded)
    state["kept"] = {i: (results / str(i) / "result.json").stat().st_mtime_ns for i in (0, 2)}
    (results / "1").unlink()
    state["rerun"] = finish(grade(sharded, "--shards", str(SHARDS), "--jobs", "1", index=1))
    state["kept_after"] = {i: (results / str(i) / "result.json").stat().st_mtime_ns for i in (0, 2)}
    state["shard_results"] = {i: json.loads((results / str(i) / "result.json").read_text()) for i in range(SHARDS)}
    state["merged"] = finish(grade(sharded, "--merge-shards", str(SHARDS)))
    return state


def test_the_class_is_dealt_out_whole():
    students = [f"s{i:03d}" for i in range(10)]
    parts = [share(students, i, 3) for i in range(3)]
    assert sorted(s for p in parts for s in p) == students
    assert [len(p) for p in parts] == [4, 3, 3]


def test_a_failed_shard_is_named_and_reruns_alone(graded):
    (rc0, out0), (rc1, out1), (rc2, out2) = graded["first"]
    assert rc0 == 0 and rc2 == 0, out0[-3000:] + out2[-3000:]
    assert rc1 != 0 and "cannot write its results" in out1, out1[-3000:]
    rc, out = graded["refused"]
    assert rc == 2 and "no results from shard 1 of 3" in out, out[-3000:]
    assert graded["scores_after_refusal"] == {}, "a refused merge wrote to the gradebook"
    rc, out = graded["rerun"]
    assert rc == 0 and "shard 1 of 3" in out, out[-3000:]
    assert graded["kept_after"] == graded["kept"], "running shard 1 again touched the other shards' results"
    assert [r["students"] for r in graded["shard_results"].values()] == \
        [share(graded["roster"], i, SHARDS) for i in range(SHARDS)]


def test_merged_shards_equal_tinygpt_grade_class(graded):
    whole = subs.gradebook_scores(graded["whole"])
    sharded = subs.gradebook_scores(graded["sharded"])
    assert whole, "tinygpt-grade-class graded nothing:\n" + graded["out_whole"][-3000:]
    totals = subs.totals(whole)
    assert totals["s000_right"] == 7 and 0 < totals["s002_plainlist"] < 7, totals
    rc, out = graded["merged"]
    assert sharded == whole, "per-cell scores after the merge differ from tinygpt-grade-class:\n" + out[-3000:]
    nb_whole, nb_sharded = subs.autograded_notebooks(graded["whole"]), subs.autograded_notebooks(graded["sharded"])
    assert nb_sharded.keys() == nb_whole.keys() and len(nb_whole) == len(KINDS) - 1
    assert nb_sharded == nb_whole, "\n".join(subs.differences(nb_whole, nb_sharded))
    # the broken submission: reported by both, and the exit status says so
    assert graded["rc_whole"] == 1 and subs.failed_students(graded["out_whole"]) == ["s005_badmeta"], \
        graded["out_whole"][-3000:]
    assert rc == 1 and subs.failed_students(out) == ["s005_badmeta"], out[-3000:]
    assert not graded["results"].exists(), "merged results are left behind"


def test_the_merge_refuses_shards_of_another_class(tmp_path):
    """Results that do not make one class (a shard of another run) are refused, nothing merged."""
    from tinygpt_course.classroom.merge import load_results
    root = tmp_path / "multihead"
    for i, students in enumerate([["a", "c"], ["b"]]):
        (root / str(i)).mkdir(parents=True)
        (root / str(i) / "result.json").write_text(json.dumps(
            {"shards": 2, "class": ["a", "b", "c"] if i == 0 else ["a", "b"], "students": students}))
    assert "not one class" in load_results(root, 2)[1]
    assert "no results from shard 2 of 3" in load_results(root, 3)[1]
