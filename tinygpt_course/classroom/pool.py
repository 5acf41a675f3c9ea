"""The forked workers of tinygpt-grade-class and the queue that feeds them."""
import collections
import multiprocessing
import multiprocessing.connection
import os
import sys
import time
from pathlib import Path

TIMED_OUT = 124          # a submission's exit status when it ran past the limit (as timeout(1) says it)


def _error_lines(log_path, limit=6):
    try:
        lines = Path(log_path).read_text(errors="replace").splitlines()
    except OSError:
        return []
    errors = [ln for ln in lines if "| ERROR]" in ln or ln.startswith(("Traceback", "nbgrader."))]
    return (errors or lines)[-limit:]


class _Worker:
    """A forked worker process and the pipe to it. `index` (0..jobs-1, kept by a worker that
    replaces a dead one) is the worker's slot: its learner code runs as a uid of the slot's own
    (c.Sandbox.worker; README 'The grading sandbox')."""

    def __init__(self, ctx, index):
        from .worker import serve
        self.conn, child = ctx.Pipe()
        self.index = index
        # not a daemon: the grading steps start processes of their own (the re-run's forkserver)
        self.proc = ctx.Process(target=serve, args=(child, index), daemon=False)
        self.proc.start()
        child.close()
        self.job = None

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


def run_pool(assignment, students, jobs, log_dir, retries, progress=True, limit_s=None):
    """Grade students with up to jobs forked workers; return {student: (exit code, log path)}.

    A worker that dies mid-submission (it should not: learner code runs in nbgrader's kernel)
    counts as a failure of that submission, and a new worker takes its place. So does a worker
    still on one submission after `limit_s` seconds (None: no limit): whatever made it hang (a
    learner's record that makes a judge spin in a grading step without a budget of its own), it
    is killed, the submission fails with exit status TIMED_OUT and the class goes on.
    """
    from tqdm import tqdm

    ctx = multiprocessing.get_context("fork")
    try:                # one kernel template for all workers (they fork their kernels from it)
        from ..grading.template import TemplateUnavailable, share
        share(ctx)
    except TemplateUnavailable:
        pass            # each worker tries its own, or starts its kernels
    queue = collections.deque((s, 0) for s in students)
    results, workers = {}, []
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
        workers = [_Worker(ctx, i) for i in range(min(jobs, len(students)))]
        while queue or any(w.job for w in workers):
            for w in workers:
                if w.job is None and queue:
                    student, attempt = queue.popleft()
                    w.job = (student, attempt, os.path.join(log_dir, f"{student}.{attempt}.log"))
                    w.started = time.monotonic()
                    w.conn.send((assignment, student, w.job[2]))
            for w in [w for w in workers if w.job and limit_s and time.monotonic() - w.started > limit_s]:
                student, attempt, log = w.job
                w.kill()
                with open(log, "a") as f:
                    f.write(f"\n[tinygpt-grade-class] killed: still grading this submission after {limit_s:g} s "
                            "(--submission-timeout)\n")
                workers[workers.index(w)] = _Worker(ctx, w.index)
                finish(student, attempt, TIMED_OUT, log)
            busy = {w.conn: w for w in workers if w.job} | {w.proc.sentinel: w for w in workers if w.job}
            if not busy:
                continue
            left = [limit_s - (time.monotonic() - w.started) for w in workers if w.job] if limit_s else []
            wake = max(0.0, min(left)) + 0.1 if left else None      # when the next submission runs out
            for ready in multiprocessing.connection.wait(list(busy), timeout=wake):
                w = busy[ready]
                if w.job is None:
                    continue
                student, attempt, log = w.job
                try:
                    _, code = w.conn.recv() if w.conn.poll() else (None, None)
                except (EOFError, OSError):
                    code = None
                if code is None:                          # the worker died
                    w.proc.join(5)
                    code = w.proc.exitcode or 1
                    w.stop(1)
                    workers[workers.index(w)] = new = _Worker(ctx, w.index)
                    w = new
                w.job = None
                finish(student, attempt, code, log)
    finally:
        bar.close()
        for w in workers:     # after Ctrl-C the workers got it too: nbgrader cleans up its kernel
            w.stop(15)
    return results
