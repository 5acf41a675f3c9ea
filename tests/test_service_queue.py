"""The grading service's queue (tinygpt_course.service.queue): in order, each submission once,
through duplicate events, replacements, restarts, crashes and concurrent claimers; the rate limit
per learner; names and files it refuses. Real SQLite files, real processes, a fake clock. Fast."""
import contextlib
import hashlib
import multiprocessing
import os
import sqlite3
import time

import pytest

from tinygpt_course.service.queue import STOPPED, BadName, Entry, Queue, QueueError, QueueFileError, State

T0 = 1_800_000_000.0
RESULT = {"scores": {"head_shapes": [2, 2], "head_mask": [0, 3]}, "total": [2, 5], "feedback": True}
ANY = dict(per_minute=None, per_day=None)        # no rate limit: for what is not about it


class Clock:
    def __init__(self, t=T0):
        self.t = t

    def __call__(self):
        return self.t


def stamp(i):
    """nbgrader's timestamp (its default timestamp_format) of the i-th second after 20:00."""
    return f"2026-12-04 20:{i // 60:02d}:{i % 60:02d}.000000 UTC"


def submit(q, student, assignment="multihead", i=0):
    """The event of an inbound folder, named as `nbgrader submit` names it."""
    return q.add(student, assignment, f"{student}+{assignment}+{stamp(i)}", stamp(i))


def claimed_at(q, clock, t):
    """What claim() hands out at t, when it handed out nothing just before."""
    clock.t = t - 0.5
    assert q.claim("service") is None
    clock.t = t
    return q.claim("service")


def grade_all(q, owner="service"):
    """Claim and grade until nothing is due; the keys graded, in order."""
    graded = []
    while (e := q.claim(owner)) is not None:
        q.done(e.id, RESULT)
        graded.append(e.key)
    return graded


@pytest.fixture
def path(tmp_path):
    return tmp_path / "grading_service.sqlite"


def test_duplicate_events_grade_a_submission_once(path):
    q = Queue(path, **ANY)
    first = submit(q, "alice")
    assert submit(q, "alice") == first                  # seen twice before grading
    e = q.claim("service")
    assert submit(q, "alice").state is State.GRADING    # seen again while grading
    q.done(e.id, RESULT)
    assert submit(q, "alice").state is State.GRADED     # and after
    assert Queue(path, **ANY).add(first.student, first.assignment, first.key, first.submitted).id == first.id
    assert grade_all(q) == [] and len(q.entries()) == 1
    # an old submission seen again after a newer one replaced it stays replaced
    old, new = submit(q, "bob", i=1), submit(q, "bob", i=2)
    assert submit(q, "bob", i=1).state is State.SUPERSEDED
    assert grade_all(q) == [new.key] and q.latest("bob", "multihead").id == new.id != old.id


def test_a_submission_replaced_while_queued_is_not_graded(path):
    q = Queue(path, **ANY)
    older, other = submit(q, "alice", i=1), submit(q, "alice", "head", i=2)
    newer = submit(q, "alice", i=3)
    [replaced] = q.entries(states=[State.SUPERSEDED])
    assert replaced.id == older.id and newer.key in replaced.reason
    # events out of order (a rescan lists the folders in any order): the older one comes in replaced
    late = submit(q, "bob", i=9), submit(q, "bob", i=8)
    assert [e.state for e in late] == [State.QUEUED, State.SUPERSEDED]
    assert grade_all(q) == [other.key, newer.key, late[0].key]
    # replaced while being graded: that grading goes on, the newer one is graded after it
    submit(q, "carol", i=1)
    grading = q.claim("service")
    replacement = submit(q, "carol", i=2)
    assert [e.state for e in q.entries("carol")] == [State.GRADING, State.QUEUED]
    assert q.claim("another") is None and q.next_due() is None     # not both at once (one folder)
    q.done(grading.id, RESULT)
    assert grade_all(q) == [replacement.key]


def test_a_restart_mid_queue_grades_every_waiting_submission_once(path):
    clock = Clock()
    before = Queue(path, clock=clock)
    events = [(f"s{n}", "multihead", f"s{n}+multihead+{stamp(n)}", stamp(n)) for n in range(6)]
    for event in events:
        before.add(*event)
    before.done(before.claim("service-1").id, RESULT)
    before.claim("service-1")
    before.close()                                        # the service stops while grading that one

    after = Queue(path, clock=clock)
    for event in events:                                  # the restarted service sees every folder again
        after.add(*event)
    recovered = after.recover(alive=lambda owner: False)
    assert [e.key for e in recovered] == [events[1][2]] and recovered[0].reason == STOPPED
    assert grade_all(after, "service-2") == [e[2] for e in events[1:]]
    assert [e.attempts for e in after.entries()] == [1, 2, 1, 1, 1, 1]
    assert {e.state for e in after.entries()} == {State.GRADED}


def claimer(path, n, barrier, out):
    q = Queue(path)                                       # its own connection, in its own process
    barrier.wait()
    claimed = []
    while (e := q.claim(f"claimer-{n}")) is not None:
        claimed.append(e.id)
        time.sleep(0.002)                                 # grading it: the others claim meanwhile
        q.done(e.id, RESULT, owner=f"claimer-{n}")
    out.put(claimed)


def test_claimers_in_separate_processes_never_get_the_same_entry(path):
    with Queue(path) as q:
        ids = [submit(q, f"s{n}", i=n).id for n in range(120)]
    ctx = multiprocessing.get_context("fork")
    barrier, out = ctx.Barrier(3), ctx.Queue()
    procs = [ctx.Process(target=claimer, args=(path, n, barrier, out)) for n in range(3)]
    for p in procs:
        p.start()
    got = [out.get(timeout=60) for _ in procs]
    for p in procs:
        p.join(30)
    assert sorted(sum(got, [])) == ids                    # each entry once, none lost
    assert all(e.state is State.GRADED and e.attempts == 1 for e in Queue(path).entries())


class Interleaved(Queue):
    """A claim during which `other` claims, between choosing its entry and marking it."""
    def _choose(self, db, now):
        row = super()._choose(db, now)
        try:
            self.between = self.other.claim("second")
        except sqlite3.OperationalError as e:            # locked: it has to wait its turn
            self.between = e
        return row


class NoTransaction(Interleaved):
    def _transaction(self, begin):
        return contextlib.nullcontext(self._db)          # each statement on its own


def test_a_claim_chooses_and_marks_in_one_write_transaction(path):
    def race(cls, begin):
        path.unlink(missing_ok=True)
        first = type("Q", (cls,), {"BEGIN": begin})(path, **ANY)
        first.other = type("Q", (Queue,), {"BEGIN": begin})(path, timeout=0, **ANY)
        e1, e2 = submit(first, "alice"), submit(first, "bob")
        try:
            return first.claim("first"), first.between, first.other.claim("second"), (e1.id, e2.id)
        finally:
            first.other.close()
            first.close()

    got, between, later, (e1, e2) = race(Interleaved, "BEGIN IMMEDIATE")
    assert got.id == e1 and isinstance(between, sqlite3.OperationalError) and later.id == e2
    # the defence switched off: a deferred transaction cannot write after the other claimer did
    with pytest.raises(sqlite3.OperationalError, match="locked"):
        race(Interleaved, "BEGIN DEFERRED")
    # and without a transaction both claimers grade the same submission
    got, between, later, (e1, e2) = race(NoTransaction, "BEGIN IMMEDIATE")
    assert got.id == between.id == e1


def claim_and_hang(path, out):
    q = Queue(path, **ANY)
    e = q.claim(f"pid:{os.getpid()}")
    out.put(e.id)
    time.sleep(600)                                       # killed mid-grade


def pid_alive(owner):
    try:
        os.kill(int(owner.removeprefix("pid:")), 0)
    except ProcessLookupError:
        return False
    return True


def test_a_crash_mid_grade_is_retried_then_flagged_with_the_reason(path):
    q = Queue(path, max_attempts=2, **ANY)
    crashing, fine = submit(q, "alice"), submit(q, "bob")
    ctx = multiprocessing.get_context("fork")
    for attempt in (1, 2):
        out = ctx.Queue()
        p = ctx.Process(target=claim_and_hang, args=(path, out))
        p.start()
        assert out.get(timeout=60) == crashing.id         # the retry comes first: it is the oldest
        p.kill()
        p.join(30)
        [recovered] = q.recover(alive=pid_alive)
        assert (recovered.id, recovered.attempts, recovered.reason) == (crashing.id, attempt, STOPPED)
        assert recovered.state is (State.QUEUED if attempt == 1 else State.FLAGGED)
    assert grade_all(q) == [fine.key]                    # not a third time: flagged for the teacher
    assert [e.key for e in q.summary()["flagged"]] == [crashing.key]


def test_failures_retry_until_max_attempts_then_flag_and_the_teacher_may_retry(path):
    q = Queue(path, max_attempts=3, **ANY)
    e = submit(q, "alice")
    for n in (1, 2, 3):
        assert q.claim("service").id == e.id
        after = q.failed(e.id, f"the kernel died ({n})")
        assert after.state is (State.QUEUED if n < 3 else State.FLAGGED) and after.reason == f"the kernel died ({n})"
    assert q.claim("service") is None
    assert q.retry(e.id).state is State.QUEUED
    assert grade_all(q) == [e.key]
    with pytest.raises(QueueError):                      # graded: not again
        q.retry(e.id)
    once = Queue(path.with_name("once.sqlite"), max_attempts=1, **ANY)
    e = submit(once, "alice")
    assert once.failed(once.claim("service").id, "\x1b[2Jboom").state is State.FLAGGED
    assert once.entries()[0].reason == "?[2Jboom"            # a terminal's escapes are not kept


def test_recover_requeues_only_the_entries_of_dead_owners(path):
    q = Queue(path, **ANY)
    a, b = submit(q, "alice"), submit(q, "bob")
    assert q.claim("a").id == a.id and q.claim("b").id == b.id
    assert [e.id for e in q.recover(alive=lambda owner: owner == "a")] == [b.id]
    assert [e.state for e in q.entries()] == [State.GRADING, State.QUEUED]
    with pytest.raises(QueueError):                      # the dead owner's late word is not taken
        q.done(b.id, RESULT, owner="b")
    q.done(a.id, RESULT, owner="a")
    assert q.claim("c").id == b.id


def test_the_rate_limit_per_minute_holds_one_learner_only(path):
    clock = Clock()
    q = Queue(path, clock=clock)                          # the default: 1 a minute, 20 a day
    first = submit(q, "alice", "head")
    assert q.claim("service").id == first.id
    clock.t = T0 + 10
    held, bob = submit(q, "alice", "multihead", i=1), submit(q, "bob", i=2)
    assert q.claim("service").id == bob.id               # bob does not wait behind alice
    [held] = q.entries(states=[State.HELD])
    assert held.not_before == T0 + 60 and "1 a minute" in held.reason
    assert q.position(held.id) is None and q.next_due() == T0 + 60
    assert claimed_at(q, clock, T0 + 60).id == held.id


def test_the_rate_limit_per_day(path):
    clock = Clock()
    q = Queue(path, clock=clock)
    for n in range(20):
        clock.t = T0 + 61 * n
        e = submit(q, "alice", f"a{n}", i=n)
        assert q.claim("service").id == e.id
    clock.t = T0 + 61 * 20
    over = submit(q, "alice", "a20", i=20)
    assert q.claim("service") is None
    assert q.entries(states=[State.HELD])[0].not_before == T0 + 86400    # the first one a day old
    assert claimed_at(q, clock, T0 + 86400).id == over.id


def test_held_submissions_are_graded_later_in_their_order(path):
    clock = Clock()
    q = Queue(path, clock=clock)
    submit(q, "alice", "head")
    q.claim("service")
    held = [submit(q, "alice", a, i=n).key for n, a in enumerate(["multihead", "block", "gpt"], 1)]
    clock.t = T0 + 1
    assert q.claim("service") is None and len(q.entries(states=[State.HELD])) == 3
    order = []
    for minute in (1, 2, 3):
        order.append(claimed_at(q, clock, T0 + 60 * minute).key)
        assert q.claim("service") is None                # one a minute
    assert order == held


def test_over_the_limit_may_be_refused_with_the_time_to_wait(path):
    clock = Clock()
    q = Queue(path, clock=clock, refuse_over_limit=True)
    submit(q, "alice", "head")
    q.claim("service")
    submit(q, "alice", i=1)
    clock.t = T0 + 5
    assert q.claim("service") is None
    refused = q.latest("alice", "multihead")
    assert refused.state is State.REFUSED and refused.not_before - clock() == 55
    clock.t = T0 + 3600
    assert q.claim("service") is None                    # refused stays refused
    again = submit(q, "alice", i=2)                       # the learner submits again
    assert q.claim("service").id == again.id


@pytest.mark.parametrize("refuse", [False, True])
def test_the_services_settings_are_the_queues(tmp_path, refuse):
    """c.GradingService in nbgrader_config.py sets the queue it grades from: the limits, the tries,
    and whether what is over the limit is kept (HELD) or REFUSED."""
    from traitlets.config import Config
    from tinygpt_course.service.runner import GradingService
    config = Config()
    config.GradingService.update(per_minute=2, per_day=7, max_attempts=3, refuse_over_limit=refuse)
    queue = GradingService(str(tmp_path), config=config).queue
    try:
        assert queue.limits == ((2, 60), (7, 86400)) and queue.max_attempts == 3
        assert queue.refuse_over_limit is refuse
    finally:
        queue.close()


BAD = [("student", "../alice"), ("student", "alice bob"), ("student", ""), ("student", "a" * 65),
       ("student", "alïce"), ("student", None), ("assignment", "he+ad"), ("assignment", "head\n"),
       ("key", "a/b"), ("key", ".."), ("key", "a\x00b"), ("key", "a\nb"), ("key", "a\tb"), ("key", "a\x1b[2J"),
       ("key", ""), ("key", "é" * 128), ("key", "k\udcff"), ("submitted", "yesterday"), ("submitted", None)]


@pytest.mark.parametrize("field, value", BAD)
def test_names_that_are_not_nbgrader_ids_are_refused(path, field, value):
    q = Queue(path)
    good = {"student": "alice", "assignment": "head", "key": "alice+head+" + stamp(0), "submitted": stamp(0)}
    with pytest.raises(BadName):
        q.add(**{**good, field: value})
    assert q.entries() == []
    q.add(**good)
    q.add("Alice_01-x", "head", "é" * 127, "2026-12-04T20:00:00+01:00")   # the longest that is fine


def digest(p):
    return hashlib.sha256(p.read_bytes()).hexdigest()


def test_a_file_that_is_not_a_queue_is_refused_and_left_as_it_was(path, empty_gradebook):
    path.write_bytes(b"grades: alice 5/5\n" * 100)
    before = digest(path)
    with pytest.raises(QueueFileError, match="not an SQLite file"):
        Queue(path)
    assert digest(path) == before
    gradebook = empty_gradebook.removeprefix("sqlite:///")       # nbgrader's own schema
    before = digest(path.with_name("gradebook.db"))
    with pytest.raises(QueueFileError, match="another program's"):
        Queue(gradebook)
    assert digest(path.with_name("gradebook.db")) == before
    path.unlink()
    Queue(path).close()
    with contextlib.closing(sqlite3.connect(path)) as db:
        db.execute("PRAGMA user_version=2")
    with pytest.raises(QueueFileError, match="schema 2"):
        Queue(path)
    path.write_bytes(b"")                                 # an empty file becomes a queue
    assert Queue(path).entries() == []


def test_the_file_is_private(path):
    old = os.umask(0o022)
    try:
        with Queue(path) as q:
            submit(q, "alice")
            files = sorted(path.parent.iterdir())
            assert [f.name for f in files] == [path.name, path.name + "-shm", path.name + "-wal"]
            assert {f.stat().st_mode & 0o777 for f in files} == {0o600}
    finally:
        os.umask(old)


def test_position_is_the_place_claim_takes_it_in(path):
    clock = Clock()
    q = Queue(path, clock=clock)
    a, b, c = (submit(q, s, i=n) for n, s in enumerate(["alice", "bob", "carol"]))
    assert [q.position(e.id) for e in (a, b, c)] == [1, 2, 3]
    q.claim("service")
    assert [q.position(e.id) for e in (a, b, c)] == [None, 1, 2]
    held = submit(q, "alice", "head", i=5)
    q.claim("service"), q.claim("service")
    assert q.claim("service") is None and q.position(held.id) is None
    clock.t = T0 + 60
    assert q.position(held.id) == 1 and q.claim("service").id == held.id


def test_summary_and_latest(path):
    clock = Clock()
    q = Queue(path, clock=clock, max_attempts=1, **ANY)
    a, b, c = (submit(q, s, i=n) for n, s in enumerate(["alice", "bob", "carol"]))
    for e, t in ((a, 1), (b, 2)):
        clock.t = T0 + t
        q.done(q.claim("service").id, RESULT)
    q.failed(q.claim("service").id, "nbgrader autograde exited with 1")
    d = submit(q, "dave")
    s = q.summary()
    assert s["counts"][State.GRADED] == 2 and s["counts"]["flagged"] == 1 and s["counts"][State.QUEUED] == 1
    assert sum(s["counts"].values()) == 4
    assert s["oldest_queued"].id == d.id and [e.id for e in s["last_graded"]] == [b.id, a.id]
    assert [(e.id, e.reason) for e in s["flagged"]] == [(c.id, "nbgrader autograde exited with 1")]
    assert q.latest("bob", "multihead").result == RESULT and q.latest("bob", "head") is None
    assert isinstance(s["oldest_queued"], Entry)


def test_done_takes_an_entry_being_graded_and_a_result_of_the_agreed_form(path):
    q = Queue(path, **ANY)
    e = submit(q, "alice")
    with pytest.raises(QueueError):                      # not claimed
        q.done(e.id, RESULT)
    q.claim("service")
    for bad in ({"scores": {"x": [1]}, "total": [1, 1], "feedback": True},
                {"scores": {}, "total": [float("nan"), 1], "feedback": True}, {"total": [1, 1]}):
        with pytest.raises(ValueError):
            q.done(e.id, bad)
    assert q.entries()[0].state is State.GRADING
    with pytest.raises(QueueError):
        q.done(e.id, RESULT, owner="someone else")
    q.done(e.id, RESULT, owner="service")
    with pytest.raises(QueueError):                      # graded once
        q.done(e.id, RESULT)
    with pytest.raises(ValueError):
        q.claim("")
