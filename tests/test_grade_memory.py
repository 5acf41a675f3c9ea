"""tinygpt-grade-class's default --jobs counts memory as well as cores (classroom/cli.py
jobs_for_cores): as many workers as keep the cores busy (cores + 1) and no more than the memory
budget holds (GRADER_MIB for the grader and its kernel template, WORKER_MIB per worker, measured by
hub/measure_grading_memory.py); the budget is --memory-budget, else $TINYGPT_GRADE_MEMORY_MB (the
hub sets it in teachers' servers), else the memory available now. The grading Job and hub/README's
sizing agree with it. No grading here: the rule alone (the measuring is the script's)."""
import re
from pathlib import Path

import pytest
import yaml

from tinygpt_course.classroom import cli
from tinygpt_course.classroom.cli import GRADER_MIB, MEMORY_ENV, WORKER_MIB, jobs_for_cores, memory_budget

REPO = Path(__file__).resolve().parents[1]


def run_mib(jobs):
    return GRADER_MIB + jobs * WORKER_MIB


@pytest.mark.parametrize("cores", [1, 2, 4, 16, 64])
def test_without_a_budget_the_cores_decide(cores):
    jobs, threads = jobs_for_cores(cores)
    assert jobs == cores + 1 and threads == max(1, cores // jobs)


@pytest.mark.parametrize("cores", [1, 2, 4, 16, 64])
@pytest.mark.parametrize("budget", [0, 500, GRADER_MIB + WORKER_MIB - 1, 1024, 1536, 4096, 16384, 10 ** 6])
def test_the_most_workers_the_cores_and_the_budget_both_allow(cores, budget):
    jobs, threads = jobs_for_cores(cores, budget)
    assert 1 <= jobs <= cores + 1
    assert jobs == 1 or run_mib(jobs) <= budget, "more workers than the budget holds"
    assert jobs == cores + 1 or run_mib(jobs + 1) > budget, "one more worker would have fitted both"
    assert threads == max(1, cores // jobs)


def test_the_hubs_default_budget_on_a_big_machine():
    """The issue's case: 16 cores gave 17 workers the hub's plan did not count. With the hub's
    default budget (hub/jupyterhub_config.py) the run stays within it."""
    default = float(re.search(r'"TINYGPT_GRADE_MEMORY_MB", "(\d+)"', (REPO / "hub" / "jupyterhub_config.py")
                              .read_text())[1])
    jobs, _ = jobs_for_cores(16, default)
    assert jobs < 17 and run_mib(jobs) <= default


def test_where_the_budget_comes_from(monkeypatch):
    monkeypatch.setenv(MEMORY_ENV, "2048")
    assert memory_budget(1000.0) == (1000.0, "--memory-budget")
    assert memory_budget(None) == (2048.0, f"${MEMORY_ENV}")
    monkeypatch.delenv(MEMORY_ENV)
    budget, source = memory_budget(None)
    assert source == "available now" and abs(budget - cli.available_mib()) < 512     # it moves meanwhile
    monkeypatch.setenv(MEMORY_ENV, "lots")
    with pytest.raises(SystemExit, match="not a number of MiB"):
        memory_budget(None)


def _mib(quantity):
    m = re.fullmatch(r"(\d+)(Gi|Mi)", quantity)
    return int(m[1]) * {"Gi": 1024, "Mi": 1}[m[2]]


def test_the_grading_job_follows_the_rule_for_its_limits():
    (doc,) = yaml.safe_load_all((REPO / "hub" / "z2jh" / "grade-job.yaml").read_text())
    (ctr,) = doc["spec"]["template"]["spec"]["containers"]
    cmd, limits = ctr["command"], ctr["resources"]["limits"]
    env = {e["name"]: e["value"] for e in ctr["env"]}
    memory = _mib(limits["memory"])
    assert int(env[MEMORY_ENV]) == memory, "the pod sees the node's memory: the Job must name its limit"
    assert (int(cmd[cmd.index("--jobs") + 1]), int(env["OMP_NUM_THREADS"])) == jobs_for_cores(int(limits["cpu"]), memory)


def test_the_sizing_plan_states_the_rules_figures():
    text = (REPO / "hub" / "README.md").read_text()
    plan = text[text.index("## How many learners fit"):]
    default = int(re.search(r'"TINYGPT_GRADE_MEMORY_MB", "(\d+)"', (REPO / "hub" / "jupyterhub_config.py")
                            .read_text())[1])
    jobs, _ = jobs_for_cores(16, default)
    for figure in (f"{GRADER_MIB} MiB", f"{WORKER_MIB} MiB per worker", f"`TINYGPT_GRADE_MEMORY_MB` ({default} MiB",
                   f"{jobs} workers"):
        assert figure in plan, f"hub/README.md's sizing does not say {figure!r}"
