"""The gradebook lock of tinygpt-grade-class: forked workers take turns. Fast."""
import multiprocessing
import time

from nbgrader.api import Gradebook

from tinygpt_course.classroom import lock as classroom_worker


def hold(db, spans, locked):
    if locked:
        classroom_worker.install_gradebook_lock()
    else:                       # an earlier test in this process may have installed it
        classroom_worker.uninstall_gradebook_lock()
    with Gradebook(db):
        start = time.monotonic()
        time.sleep(0.3)
        spans.put((start, time.monotonic()))


def overlaps(db, locked):
    ctx = multiprocessing.get_context("fork")
    spans = ctx.Queue()
    procs = [ctx.Process(target=hold, args=(db, spans, locked)) for _ in range(3)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(30)
    got = sorted(spans.get() for _ in procs)
    return any(b[0] < a[1] for a, b in zip(got, got[1:]))


def test_workers_take_turns_only_with_the_lock(empty_gradebook):
    db = empty_gradebook
    assert not overlaps(db, locked=True)
    assert overlaps(db, locked=False)                  # the lock is what serialises them
