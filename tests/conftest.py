"""pytest's side: the shared fixtures and which tests are fast. Every helper the tests, bench/
and docs/ share is in tinygpt_course.testing (course, notebooks, catalogue, ...)."""
import shutil
import tempfile
from pathlib import Path

import pytest

from tinygpt_course.testing.course import make_course


@pytest.fixture(scope="session")
def course(tmp_path_factory):
    """A multihead course with its release generated (tinygpt_course.testing.course.make_course)."""
    return make_course(tmp_path_factory.mktemp("course"))


@pytest.fixture(scope="session")
def users_venv():
    """The venv of the hub's users, as hub/README.md makes it (`course.sh setup hub`: from
    /usr/bin/python3, the course library not editable), once per session (2-5 min), for every test
    whose other Unix users run the course (test_hub, test_kernelfork's and test_roster's accounts,
    test_grade_job's Job): under /var/tmp, readable by all (a clone may be private, and the grading
    sandbox mounts its own /tmp). Ask for it after a test's own skip checks (request.getfixturevalue)."""
    from tinygpt_course.testing import hub
    base = Path(tempfile.mkdtemp(prefix="tinygpt-venv-", dir="/var/tmp"))
    base.chmod(0o755)
    try:
        yield hub.make_course_venv(base, base / "venv.log")
    finally:
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def empty_gradebook(tmp_path):
    """The URL of an empty gradebook in tmp_path: nbgrader's tables, made from nbgrader's own
    schema. (A new Gradebook() would also stamp alembic's version, asking alembic in a
    subprocess for seconds; nothing here migrates.)"""
    from nbgrader.api import Base
    from sqlalchemy import create_engine
    url = f"sqlite:///{tmp_path}/gradebook.db"
    engine = create_engine(url)
    Base.metadata.create_all(bind=engine)
    engine.dispose()
    return url


# Fast unit tests (seconds, no nbgrader command, no server, no browser) run first; the rest is
# marked slow: `pytest -m "not slow"` runs only the fast ones.
FAST = {"test_sandbox", "test_rerun", "test_repair", "test_gradebook_lock", "test_data", "test_env_pins",
        "test_z2jh_values", "test_exchange_setup", "test_checks", "test_checks_gpt", "test_checks_head_block",
        "test_catalogue_checks", "test_testing", "test_hints", "test_class_report_page", "test_submission_tree",
        "test_imports", "test_seccomp", "test_record", "test_anchors", "test_zygote", "test_gradients",
        "test_mutants", "test_no_solution_in_library", "test_integrity", "test_course_python",
        "test_grade_memory", "test_hub_config", "test_supervise", "test_portable", "test_service_queue", "test_service_web",
        "test_z2jh_service", "test_once", "test_ready", "test_launch", "test_reaper"}


# Modules that watch the whole machine (every process of the sandbox uids, the memory left, the
# host's IPC objects) or make Unix users and share the users' venv (a session fixture, minutes):
# marked `alone`. `course.sh test` runs the rest two modules at a time (pytest-xdist, --dist
# loadfile: a module's fixtures stay in one process), then these one after another, with nothing
# else running that a look at the machine could mistake for theirs.
# The slow modules that take longest, in minutes (the slowest-tests report of a CI run, 2 cores).
LONGEST = {"test_validate": 6, "test_catalogue": 5, "test_judge_budget": 4, "test_catalogue_gpt": 3,
           "test_browser": 3, "test_after_answer": 2, "test_class_report": 2, "test_shards": 2,
           "test_service": 3, "test_service_burst": 2, "test_export": 1, "test_lesson_gpt": 1}
ALONE = {"test_hub", "test_roster", "test_kernelfork", "test_grade_job", "test_class_sandbox",
         "test_exchange_data"}


def pytest_collection_modifyitems(config, items):
    for item in items:
        name = item.module.__name__.rsplit(".", 1)[-1]
        if name not in FAST:
            item.add_marker(pytest.mark.slow)
        if name in ALONE:
            item.add_marker(pytest.mark.alone)
    # stable: fast first, then the slow modules that take longest (minutes: a notebook run per
    # catalogue answer, a graded class), so that running two at a time does not end with one of
    # them alone; the rest in their own order
    items.sort(key=lambda item: (item.get_closest_marker("slow") is not None,
                                 -LONGEST.get(item.module.__name__.rsplit(".", 1)[-1], 0)))
