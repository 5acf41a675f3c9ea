"""tinygpt-release (tinygpt_course/classroom/release.py): a lesson whose set-up holds earlier
lessons' answers is released only after their deadline, with the real nbgrader gradebook and
exchange; --force releases anyway.
"""
import subprocess

import pytest

from tinygpt_course.classroom.release import REFUSED, given_away, setup_code
from tinygpt_course.testing.course import BIN, env, make_course, nbgrader


@pytest.fixture(scope="module")
def course(tmp_path_factory):
    return make_course(tmp_path_factory.mktemp("course"), assignments=("head", "multihead"))


def release(course, lesson, exchange, *extra):
    exchange.mkdir(exist_ok=True)
    return subprocess.run([str(BIN / "tinygpt-release"), lesson, *extra, "--", f"--Exchange.root={exchange}"],
                          cwd=course, env=env(), capture_output=True, text=True, timeout=600)


def released(exchange, lesson):
    return (exchange / "tinygpt" / "outbound" / lesson / f"{lesson}.ipynb").exists()


def test_each_lesson_gives_away_the_lessons_before_it():
    from tinygpt_course.testing.course import REPO
    assert given_away(setup_code(REPO, "head"), "head") == []
    assert given_away(setup_code(REPO, "multihead"), "multihead") == [("head", "Head")]
    assert [e for e, _ in given_away(setup_code(REPO, "gpt"), "gpt")] == ["head", "multihead", "block"]


def test_release_waits_for_the_earlier_deadline(course, tmp_path):
    exchange = tmp_path / "exchange"
    first = release(course, "multihead", exchange)
    assert first.returncode == REFUSED and "no deadline set" in first.stdout, first
    assert "answers of head" in first.stderr and not released(exchange, "multihead")

    nbgrader(course, "db", "assignment", "add", "head", "--duedate=2099-01-01 00:00:00")
    early = release(course, "multihead", exchange)
    assert early.returncode == REFUSED and "not passed" in early.stdout and not released(exchange, "multihead"), early

    forced = release(course, "multihead", exchange, "--force")     # the defence switched off
    assert forced.returncode == 0 and released(exchange, "multihead"), forced

    nbgrader(course, "db", "assignment", "add", "head", "--duedate=2020-01-01 00:00:00")
    later = tmp_path / "exchange2"
    after = release(course, "multihead", later)
    assert after.returncode == 0 and "passed" in after.stdout and released(later, "multihead"), after


def test_a_lesson_that_gives_nothing_away_is_released_at_once(course, tmp_path):
    exchange = tmp_path / "exchange"
    out = release(course, "head", exchange)
    assert out.returncode == 0 and out.stdout == "" and released(exchange, "head"), out
