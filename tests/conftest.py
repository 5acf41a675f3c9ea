"""pytest's side: the shared fixtures and which tests are fast. Every helper the tests, bench/
and docs/ share is in tinygpt_course.testing (course, notebooks, catalogue, ...)."""
import pytest

from tinygpt_course.testing.course import make_course


@pytest.fixture(scope="session")
def course(tmp_path_factory):
    """A multihead course with its release generated (tinygpt_course.testing.course.make_course)."""
    return make_course(tmp_path_factory.mktemp("course"))


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
        "test_catalogue_checks", "test_testing", "test_hints", "test_class_report_page"}


def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.module.__name__.rsplit(".", 1)[-1] not in FAST:
            item.add_marker(pytest.mark.slow)
    items.sort(key=lambda item: item.get_closest_marker("slow") is not None)   # stable: fast first
