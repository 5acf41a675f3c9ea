"""The sandboxed re-run server: one job cannot reach the next, nor outlast its limit. Fast."""
import pytest

from tinygpt_course.grading.rerun import rerun
from tinygpt_course.grading.sandbox import Sandbox


def report(answer, timeout=20, enabled=True):
    """Run `answer` as a learner's answer cell; it reports by raising (the record's init_error)."""
    result = rerun(Sandbox(enabled=enabled), "multihead", [], answer, 1, timeout)
    return result.record["init_error"] if result.record else result.problem


PLANT = """
import os
open("/tmp/planted", "w").write("x")
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        import time; time.sleep(300)
    os._exit(0)
raise Exception("planted")
"""
LOOK = """
import os
others = [p for p in os.listdir("/proc") if p.isdigit() and int(p) not in (1, os.getpid(), os.getppid())]
raise Exception(f"planted file: {os.path.exists('/tmp/planted')}, other processes: {len(others)}")
"""


def test_a_job_leaves_nothing_for_the_next():
    assert "planted" in report(PLANT)
    assert report(LOOK).endswith("planted file: False, other processes: 0")


def test_without_the_sandbox_the_next_job_would_see_it():
    # the server's clean-up is the sandbox's: unsandboxed, only the job's own folder goes
    report(PLANT, enabled=False)
    try:
        assert "planted file: True" in report(LOOK, enabled=False)
    finally:
        import os
        os.path.exists("/tmp/planted") and os.unlink("/tmp/planted")


def test_an_endless_loop_is_stopped_at_the_limit():
    assert "ran past the 1 s limit" in report("while True:\n    pass", timeout=1)
    assert "planted file: False" in report(LOOK)       # the server still serves


def test_a_crash_is_reported_in_the_learners_terms():
    assert "stopped with exit code 3" in report("import os\nos._exit(3)")
    assert "ran out of memory" in report("x = bytearray(10 ** 11)") or "MemoryError" in report("x = bytearray(10 ** 11)")


@pytest.mark.parametrize("answer", ["import os, signal\nos.kill(os.getppid(), signal.SIGKILL)",
                                    "import os, signal\nos.kill(1, signal.SIGKILL)"])
def test_killing_the_server_costs_only_that_job(answer):
    problem = report(answer)
    assert "re-run" in problem
    assert "planted file: False" in report(LOOK)        # a fresh server takes over
