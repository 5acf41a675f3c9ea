"""The forked workers that grade submissions (WorkerPool: kept alive from job to job, for
tinygpt-grade-class and the grading service, tinygpt_course.service.runner) and the queue of a
class run that feeds them (run_pool)."""
import collections
import functools
import gc
import multiprocessing
import multiprocessing.connection
import os
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path

TIMED_OUT = 124          # a submission's exit status when it ran past the limit (as timeout(1) says it)


def _error_lines(log_path, limit=6):
    try:
        lines = Path(log_path).read_text(errors="replace").splitlines()
    except OSError:
        return []
    errors = [ln for ln in lines if "| ERROR]" in ln or ln.startswith(("Traceback", "nbgrader."))]
    return (errors or lines)[-limit:]


def _start(serve, conn, index, parent):
    """A worker's first step (in the forked process): go when its parent goes. A grader killed
    outright (SIGKILL, the OOM killer) leaves no worker grading on its own, beside the next run
    that grades the same submission again. Then serve."""
    from ..zygote import PR_SET_PDEATHSIG, libc
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent:          # the parent went before the line above
        os._exit(1)
    serve(conn, index)


class _Worker:
    """A forked worker process and the pipe to it. `index` (0..size-1, kept by a worker that
    replaces a dead one) is the worker's slot: its learner code runs as a uid of the slot's own
    (c.Sandbox.worker; README 'The grading sandbox'). `serve(conn, index)` is its loop."""

    def __init__(self, ctx, index, serve):
        self.conn, child = ctx.Pipe()
        self.index = index
        # not a daemon: the grading steps start processes of their own (the re-run's forkserver)
        self.proc = ctx.Process(target=_start, args=(serve, child, index, os.getpid()), daemon=False)
        self.proc.start()
        child.close()
        self.job, self.started = None, None

    def kill(self):
        """End a worker stuck in a submission: SIGTERM, then SIGKILL."""
        self.proc.terminate()
        self.proc.join(10)
        if self.proc.is_alive():
            self.proc.kill()
            self.proc.join(10)
        self.conn.close()

    def stop(self, timeout):
        try:
            self.conn.send(None)
        except OSError:
            pass
        self.proc.join(timeout)
        if self.proc.is_alive():
            self.proc.terminate()
            self.proc.join(5)
        self.conn.close()


@dataclass(frozen=True)
class Finished:
    """A job a worker is done with: `reply`, what the worker sent back; or, when the worker was
    lost on it (reply None), `exitcode`: TIMED_OUT if it was killed past the limit, else the
    worker's exit status (a worker dies mid-job only if something killed it)."""
    job: object
    reply: object = None
    exitcode: int = None


class WorkerPool:
    """`size` workers forked from this process, kept alive from job to job: what a worker sets
    up once (nbgrader's imports, inherited; its re-run zygote) serves every job it gets. They
    fork their grading kernels from this process's kernel template (started here, shared).

    give() a job to an idle worker, wait() for jobs to finish. A worker that dies mid-job, or is
    still on one after `limit_s` seconds (None: no limit), is replaced by a fresh one in its
    slot and the job finishes as lost: whatever one learner's submission does costs that
    submission alone. `serve(conn, index)` is the workers' loop (default: tinygpt-grade-class's,
    worker.serve): it gets each job's message and sends one reply for it.
    """

    def __init__(self, size, limit_s=None, serve=None):
        from ..grading.rerun import share as share_spawner
        from ..grading.template import TemplateUnavailable, share
        from .worker import serve as grade_serve
        self.ctx = multiprocessing.get_context("fork")
        try:            # one kernel template for all workers (they fork their kernels from it)
            share(self.ctx)
        except TemplateUnavailable:
            pass        # each worker tries its own, or starts its kernels
        share_spawner(self.ctx)     # and the re-run spawner, if this process started one
        self.serve, self.limit_s, self.workers = serve or grade_serve, limit_s, []
        # what this process holds (nbgrader's, torch's objects) out of the cyclic garbage
        # collector's sight: a worker's collections scan only what it made itself, instead of
        # walking, and so copying page by page, the heap it shares with this process
        gc.freeze()
        try:
            self.workers = [_Worker(self.ctx, i, self.serve) for i in range(size)]
        except BaseException:
            self.close(1)
            raise

    def idle(self):
        return [w for w in self.workers if w.job is None]

    def busy(self):
        return [w for w in self.workers if w.job is not None]

    def give(self, worker, job, message):
        """Send `message` to an idle worker; wait() returns `job` with its outcome."""
        worker.job, worker.started = job, time.monotonic()
        worker.conn.send(message)

    def _lost(self, w, code):
        """w's job as lost, and a fresh worker in its slot."""
        job, w.job = w.job, None
        self.workers[self.workers.index(w)] = _Worker(self.ctx, w.index, self.serve)
        return Finished(job, exitcode=code)

    def wait(self, timeout=None):
        """The jobs that finished, waiting up to `timeout` seconds (None: until one does)."""
        done, busy = [], {}
        for w in self.busy():
            busy[w.conn] = busy[w.proc.sentinel] = w
        if busy:
            wake = timeout
            if self.limit_s:                    # no later than the next submission runs out
                left = max(0.0, min(self.limit_s - (time.monotonic() - w.started) for w in self.busy())) + 0.1
                wake = left if wake is None else min(wake, left)
            for ready in multiprocessing.connection.wait(list(busy), timeout=wake):
                w = busy[ready]
                if w.job is None:               # its pipe and its sentinel both woke us
                    continue
                try:
                    reply = w.conn.recv() if w.conn.poll() else None
                except (EOFError, OSError):
                    reply = None
                if reply is None:               # the worker died
                    w.proc.join(5)
                    code = w.proc.exitcode or 1
                    w.stop(1)
                    done.append(self._lost(w, code))
                else:
                    done.append(Finished(w.job, reply))
                    w.job = None
        elif timeout:
            time.sleep(timeout)
        for w in [w for w in self.busy() if self.limit_s and time.monotonic() - w.started > self.limit_s]:
            w.kill()
            done.append(self._lost(w, TIMED_OUT))
        return done

    def close(self, timeout=15):
        """Hang up on every worker (after Ctrl-C they got it too: nbgrader cleans up its kernel)."""
        for w in self.workers:
            w.stop(timeout)
        self.workers = []


def run_pool(assignment, students, jobs, log_dir, retries, progress=True, limit_s=None, lessons=()):
    """Grade students with up to jobs forked workers; return {student: (exit code, log path)}.
    Each worker starts its re-run zygote for each of `lessons` as it starts (prepare_checks
    says which), beside its first submission instead of in its wait.

    A worker that dies mid-submission (it should not: learner code runs in nbgrader's kernel)
    counts as a failure of that submission, and a new worker takes its place. So does a worker
    still on one submission after `limit_s` seconds (None: no limit): whatever made it hang (a
    learner's record that makes a judge spin in a grading step without a budget of its own), it
    is killed, the submission fails with exit status TIMED_OUT and the class goes on.
    """
    from tqdm import tqdm

    queue = collections.deque((s, 0) for s in students)
    results, pool = {}, None
    tqdm.monitor_interval = 0          # no tqdm monitor thread alive while forking
    bar = tqdm(total=len(students), desc=f"grading {assignment}", unit="nb", disable=not progress,
               dynamic_ncols=True, file=sys.stderr)

    def finish(student, attempt, code, log):
        if code != 0 and attempt < retries:
            queue.append((student, attempt + 1))    # once more, after the others
            return
        results[student] = (code, log)
        if code != 0:
            bar.write(f"FAILED {student} (exit {code}); log: {log}")
            for line in _error_lines(log):
                bar.write(f"    {line}")
        bar.update(1)
        bar.set_postfix(failed=sum(1 for c, _ in results.values() if c != 0), refresh=False)

    try:
        serve = None
        if lessons:
            from ..grading.rerun import start as start_zygotes
            from .worker import serve as grade_serve
            serve = functools.partial(grade_serve, warm=functools.partial(start_zygotes, tuple(lessons)))
        pool = WorkerPool(min(jobs, len(students)), limit_s, serve=serve)
        while queue or pool.busy():
            for w in pool.idle():
                if not queue:
                    break
                student, attempt = queue.popleft()
                log = os.path.join(log_dir, f"{student}.{attempt}.log")
                pool.give(w, (student, attempt, log), (assignment, student, log))
            for f in pool.wait():
                student, attempt, log = f.job
                if f.reply is not None:
                    code = f.reply[1]
                else:
                    code = f.exitcode
                    if code == TIMED_OUT:
                        with open(log, "a") as out:
                            out.write(f"\n[tinygpt-grade-class] killed: still grading this submission after "
                                      f"{limit_s:g} s (--submission-timeout)\n")
                finish(student, attempt, code, log)
    finally:
        bar.close()
        if pool is not None:
            pool.close(15)
    return results
