"""Benchmark: the grading service (issue 30) against stock sequential nbgrader, in one run.

    python bench/grading_service.py          # --n 9 learners one after another, --burst 24

Learners hand in with the real `nbgrader submit --student` from folders of their own (their
nbgrader config, their exchange cache; no Unix users, as tests/test_service.py does), with the
answers bench/grade_class.py grades (right, heads summed, plain list, unanswered, in turn;
tinygpt_course/testing/submissions.py). Three copies of one course, each with its own exchange:

- **service**: `tinygpt-grading-service run` (not --once) is started, and warmed by one
  submission per worker; then the N learners submit one after another, each timed from `nbgrader
  submit` returning to their feedback being fetchable (the page at the path the learner's
  `nbgrader fetch_feedback` looks up, polled every 20 ms; then the real fetch_feedback must get
  it); then a burst of B learners submit within `--spread` seconds, timed to the last feedback;
- **stock, one at a time**: right after each of those N learners, the same notebook is submitted
  to this course and graded as a teacher would by hand, at once: stock `nbgrader collect`,
  `autograde --create`, `generate_feedback`, `release_feedback`, each `--student` that learner,
  kernels started as stock nbgrader starts them (``c.SandboxedKernelManager.fork_from_template =
  False``, grade_class.py's baseline); its time from submit to fetchable beside the service's;
- **stock, the burst**: the same B notebooks submitted, then the four commands for the class,
  `nbgrader autograde` timed as grade_class.py times it (progress, cgroup CPU, peak memory).

Prints each figure beside the stock one, the CPU per submission (cgroup v1 cpuacct when root),
what the service costs when nobody submits (its memory, the sum of the proportional set sizes of
it and all its processes, sampled every 0.5 s, and its CPU over `--idle` seconds after warming:
it polls the inbound folder), its peak memory, the load average seen, and whether the service's per-cell scores and autograded notebooks equal
stock nbgrader's for the same submissions; exit status 1 if they differ, a learner did not fetch
their own page, or a submission was not graded once. See bench/README.md.
"""
import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import psutil
from nbgrader.utils import notebook_hash
from tqdm import tqdm

from grade_class import cpu_group, timed, tree_pss        # this folder is sys.path[0] when run as a script
from tinygpt_course.service.queue import Queue, State
from tinygpt_course.service.runner import QUEUE_FILE
from tinygpt_course.testing import submissions as subs
from tinygpt_course.testing.course import BIN

A = subs.ASSIGNMENT
COURSE_ID = "tinygpt"           # the course's nbgrader_config.py says so
POLL = 0.02                     # seconds between two looks for a released feedback page


def now():
    return time.perf_counter()


def usage(group):
    """CPU seconds of every process in a cpuacct group so far (nan without one)."""
    return int((group / "cpuacct.usage").read_text()) / 1e9 if group else float("nan")


def joiner(group):
    """A preexec_fn putting the child in the group (None without one)."""
    return (lambda: (group / "cgroup.procs").write_text(str(os.getpid()))) if group else None


def remove_group(group):
    if group:
        time.sleep(0.5)
        try:
            group.rmdir()
        except OSError:
            pass


def run_nbgrader(cwd, args, log, group=None):
    """`nbgrader <args>` in cwd (its output appended to log, its CPU to group): wall seconds.
    A failure stops the bench: every figure after it would be of something else."""
    t0 = now()
    with open(log, "a") as out:
        out.write(f"\n$ nbgrader {' '.join(args)}  (in {cwd})\n")
        out.flush()
        proc = subprocess.run([str(BIN / "nbgrader"), *args], cwd=cwd, env=subs.env(), stdout=out,
                              stderr=subprocess.STDOUT, preexec_fn=joiner(group))
    if proc.returncode != 0:
        raise RuntimeError(f"nbgrader {' '.join(args)} exited {proc.returncode} (log: {log})")
    return now() - t0


@dataclass
class Learner:
    """A learner's own folder for one course's exchange: their config, their cache, their
    notebook (fetched once per course and copied, as `nbgrader fetch_assignment` would leave it)."""
    home: Path
    exchange: Path
    student: str
    kind: str

    def make(self, notebook):
        (self.home / A).mkdir(parents=True)
        (self.home / "nbgrader_config.py").write_text(
            f"c = get_config()\nc.Exchange.root = {str(self.exchange)!r}\n"
            f"c.CourseDirectory.course_id = {COURSE_ID!r}\nc.Exchange.cache = {str(self.home / 'cache')!r}\n")
        shutil.copy(notebook, self.home / A / f"{A}.ipynb")
        return self

    def submit(self, log):
        run_nbgrader(self.home, ("submit", A, "--student", self.student), log)
        return now()

    def page(self):
        """Where the learner's `nbgrader fetch_feedback` looks for the feedback of their (one)
        submission: the exchange's feedback folder, the page named by the hash of the secret
        `nbgrader submit` left in their cache (nbgrader/exchange/default/fetch_feedback.py)."""
        sub, = (self.home / "cache" / COURSE_ID).glob(f"{self.student}+{A}+*")
        secret = (sub / "submission_secret.txt").read_text()
        return self.exchange / COURSE_ID / "feedback" / f"{notebook_hash(secret=secret, notebook_id=A)}.html"

    def fetch(self, log):
        """The real `nbgrader fetch_feedback`: (its wall seconds, the pages it fetched, as bytes)."""
        took = run_nbgrader(self.home, ("fetch_feedback", A, "--student", self.student), log)
        return took, [p.read_bytes() for p in (self.home / A / "feedback").glob("*/*.html")]


def learners(tmp, exchange, roster, notebooks):
    return {s: Learner(tmp / "learners" / exchange.name / s, exchange, s, k).make(notebooks[s])
            for s, k in roster.items()}


class Service:
    """`python -m tinygpt_course.service.cli run` on a course, in a cpuacct group of its own."""

    def __init__(self, course, jobs, log):
        self.group, self.log = cpu_group(), log
        cmd = [sys.executable, "-m", "tinygpt_course.service.cli", "run", "--course-dir", str(course)]
        self.out = open(log, "w")
        self.proc = subprocess.Popen(cmd + (["--jobs", str(jobs)] if jobs else []), env=subs.env(), stdout=self.out,
                                     stderr=subprocess.STDOUT, preexec_fn=joiner(self.group), start_new_session=True)

    def check(self):
        if self.proc.poll() is not None:
            self.out.flush()
            tail = Path(self.log).read_text()[-3000:]
            raise RuntimeError(f"the grading service exited {self.proc.returncode}:\n{tail}")

    def cpu(self):
        return usage(self.group)

    def memory(self):
        """The service's memory now (workers, kernel templates, kernels, sandboxes): tree_pss."""
        try:
            return tree_pss(psutil.Process(self.proc.pid))
        except psutil.NoSuchProcess:
            return 0

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)      # its own session: it and its workers
                self.proc.wait()
        self.out.close()
        remove_group(self.group)


def wait_pages(service, pending, timeout, bar=None):
    """Poll until each of `pending` ({key: page path}, a Pending the caller may add to
    meanwhile) exists and `pending` is closed: {key: when its page was first seen}. Gives up
    `timeout` seconds after the last addition, or when the service is found dead."""
    seen, last_added, expected = {}, now(), None
    while True:
        closed = pending.closed         # read first: once closed, the keys read next are all of them
        keys = list(pending)
        for key in keys:
            if key in seen:
                continue
            if pending[key].exists():
                seen[key] = now()
                if bar is not None:
                    bar.update(1)
        if len(keys) != expected:
            expected, last_added = len(keys), now()
        if closed and all(k in seen for k in keys):
            return seen
        service.check()
        if now() - last_added > timeout:
            missing = sorted(set(keys) - set(seen))
            raise RuntimeError(f"no feedback after {timeout:.0f} s for {missing} (service log: {service.log})")
        time.sleep(POLL)


class Pending(dict):
    """Pages to wait for, added while the learners submit; closed once the last one is added."""

    def __init__(self, pages=(), closed=False):
        super().__init__(pages)
        self.closed = closed


def by_hand(student):
    """The teacher's stock nbgrader commands that grade one learner's submission and release
    its feedback, in order."""
    return [("collect", A, "--student", student), ("autograde", A, "--student", student, "--create"),
            ("generate_feedback", A, "--student", student), ("release_feedback", A, "--student", student)]


def load_sampler(samples, stop):
    while not stop.wait(5):
        samples.append(os.getloadavg()[0])


class MemorySampler(threading.Thread):
    """The service's memory every 0.5 s; `mark(name)` starts a phase, so each phase's samples
    are kept apart ({phase: [bytes]})."""

    def __init__(self, service):
        super().__init__(daemon=True)
        self.service, self.phase, self.samples = service, "start", {"start": []}
        self.done = threading.Event()

    def mark(self, phase):
        self.phase = phase
        self.samples.setdefault(phase, [])

    def run(self):
        while not self.done.wait(0.5):
            self.samples[self.phase].append(self.service.memory())

    def stop(self):
        self.done.set()
        self.join()

    def peak(self):
        return max((x for xs in self.samples.values() for x in xs), default=0)


def fig(xs):
    if not xs:
        return "n/a (none)"
    return f"median {statistics.median(xs):5.2f} s (min {min(xs):.2f}, max {max(xs):.2f})"


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--n", type=int, default=9, help="learners submitting one after another (default 9)")
    p.add_argument("--burst", type=int, default=24, help="learners submitting in the burst (default 24)")
    p.add_argument("--spread", type=float, default=30.0,
                   help="seconds over which the burst's submits start, evenly (default 30; 0: all at once)")
    p.add_argument("--jobs", type=int, default=0, help="the service's --jobs (default: its own)")
    p.add_argument("--timeout", type=float, default=600, help="seconds to wait for a feedback before giving up")
    p.add_argument("--idle", type=float, default=30,
                   help="seconds the warm service is left alone, to measure its idle memory and CPU (default 30)")
    p.add_argument("--json", metavar="FILE", help="also write the figures to FILE (docs/measure.py reads them)")
    p.add_argument("--keep", action="store_true", help="keep the temporary courses and the logs")
    args = p.parse_args(argv)
    t_bench = now()

    from tinygpt_course.classroom.cli import default_jobs, jobs_for_cores, memory_budget
    jobs = args.jobs or jobs_for_cores(default_jobs(), memory_budget(None)[0])[0]    # as the service chooses
    tmp = Path(tempfile.mkdtemp(prefix="tinygpt-bench-grading-service-"))
    cores = len(os.sched_getaffinity(0))
    loads, stop_loads = [os.getloadavg()[0]], threading.Event()
    threading.Thread(target=load_sampler, args=(loads, stop_loads), daemon=True).start()
    print(f"courses in {tmp}; {cores} cores; load average {loads[0]:.2f}", flush=True)

    # the learners' notebooks: the release with an answer of each kind, in turn (as grade_class)
    base = subs.make_course(tmp / "base")
    roster = subs.make_class(base, jobs + args.n + args.burst)
    names = list(roster)
    warm, single, burst = names[:jobs], names[jobs:jobs + args.n], names[jobs + args.n:]
    notebooks = {s: base / "submitted" / s / A / f"{A}.ipynb" for s in roster}
    courses, exchanges = {}, {}
    stock = "c.SandboxedKernelManager.fork_from_template = False   # kernels started as stock nbgrader does\n"
    for name, extra in (("service", f"c.GradingService.assignments = [{A!r}]\n"), ("stock-one", stock),
                        ("stock-burst", stock)):
        course, exchanges[name] = tmp / name, tmp / f"exchange-{name}"
        shutil.copytree(base, course, ignore=shutil.ignore_patterns("submitted"))
        with open(course / "nbgrader_config.py", "a") as f:
            f.write(f"\n# bench/grading_service.py\nc.Exchange.root = {str(exchanges[name])!r}\n{extra}")
        run_nbgrader(course, ("release_assignment", A), tmp / f"{name}.log")
        courses[name] = course
    svc_l = learners(tmp, exchanges["service"], roster, notebooks)
    one_l = learners(tmp, exchanges["stock-one"], {s: roster[s] for s in warm[:1] + single}, notebooks)
    all_l = learners(tmp, exchanges["stock-burst"], {s: roster[s] for s in burst}, notebooks)
    learner_log = tmp / "learners.log"

    def kinds(group):
        return ", ".join(f"{k} {[roster[s] for s in group].count(k)}" for k in subs.KINDS)

    service = Service(courses["service"], args.jobs, tmp / "service.log")
    mem = MemorySampler(service)
    mem.start()
    try:
        # warm: one submission per worker, at once (the first in each worker pays what a warm
        # worker has already done); the stock course's first round too (its first command's
        # page cache, its gradebook's first writes)
        t_start = now()
        with ThreadPoolExecutor(len(warm)) as pool:
            submitted = list(pool.map(lambda s: svc_l[s].submit(learner_log), warm))
        seen = wait_pages(service, Pending({s: svc_l[s].page() for s in warm}, closed=True), args.timeout,
                          tqdm(total=len(warm), desc="warming the service", unit="feedback"))
        cold = [seen[s] - t for s, t in zip(warm, submitted)]
        started_to_first = min(seen.values()) - t_start

        # left alone, warm: what the service costs while nobody submits (it polls the inbound folder)
        time.sleep(2)                           # the warming gradings' own ending
        mem.mark("idle")
        cpu0 = service.cpu()
        time.sleep(args.idle)
        idle_cpu = (service.cpu() - cpu0) / args.idle
        mem.mark("one at a time")
        stock_group = cpu_group()
        w = warm[0]
        one_l[w].submit(learner_log)
        for step in by_hand(w):
            run_nbgrader(courses["stock-one"], step, tmp / "stock-one.log", stock_group)

        # one learner at a time: the service, then the same notebook by hand with stock nbgrader
        svc_wait, svc_cpu, fetch_wall, own_page = [], [], [], []
        stock_wait, stock_cpu, stock_steps = [], [], {}
        for s in tqdm(single, desc="one at a time (service, then stock)", unit="learner"):
            cpu0 = service.cpu()
            t0 = svc_l[s].submit(learner_log)
            svc_wait.append(wait_pages(service, Pending({s: svc_l[s].page()}, closed=True), args.timeout)[s] - t0)
            took, pages = svc_l[s].fetch(learner_log)
            svc_cpu.append(service.cpu() - cpu0)         # read once the service is idle again
            fetch_wall.append(took)
            own_page.append(pages == [(courses["service"] / "feedback" / s / A / f"{A}.html").read_bytes()])

            cpu0 = usage(stock_group)
            t0 = one_l[s].submit(learner_log)
            for step in by_hand(s):
                stock_steps.setdefault(step[0], []).append(
                    run_nbgrader(courses["stock-one"], step, tmp / "stock-one.log", stock_group))
            stock_wait.append(now() - t0)
            stock_cpu.append(usage(stock_group) - cpu0)
            if not one_l[s].page().exists():
                raise RuntimeError(f"stock release_feedback released no page for {s} (log: {tmp / 'stock-one.log'})")
        remove_group(stock_group)

        # the burst: submit i starts at i * spread / (B - 1); each page polled from its submit's return
        pending, t_end, t_begin = Pending(), {}, {}
        lock = threading.Lock()
        cpu0, t_zero = service.cpu(), now() + 0.5

        def hand_in(i, s):
            time.sleep(max(0.0, t_zero + i * args.spread / max(1, len(burst) - 1) - now()))
            t_begin[s] = now()
            t_end[s] = svc_l[s].submit(learner_log)
            with lock:
                pending[s] = svc_l[s].page()

        mem.mark("burst")
        bar = tqdm(total=len(burst), desc=f"burst of {len(burst)} (feedback released)", unit="feedback")
        with ThreadPoolExecutor(len(burst)) as pool:
            handed = [pool.submit(hand_in, i, s) for i, s in enumerate(burst)]

            def close_when_handed():            # every submit returned (or failed): no more pages to add
                try:
                    for h in handed:
                        h.exception()
                finally:
                    pending.closed = True
            threading.Thread(target=close_when_handed, daemon=True).start()
            seen = wait_pages(service, pending, args.timeout, bar)
            for h in handed:
                h.result()                      # a submit that failed: its error, here
        bar.close()
        time.sleep(1)                           # the last worker's own ending (its done(), its sandbox's)
        burst_cpu = service.cpu() - cpu0
    finally:
        mem.stop()
        service.stop()

    last_submit, last_page = max(t_end.values()), max(seen.values())
    window = last_submit - min(t_begin.values())
    burst_wait = [seen[s] - t_end[s] for s in burst]
    with ThreadPoolExecutor(2) as pool:             # every burst learner fetches their own page
        fetched = list(pool.map(lambda s: svc_l[s].fetch(learner_log)[1], burst))
    own_page += [pages == [(courses["service"] / "feedback" / s / A / f"{A}.html").read_bytes()]
                 for s, pages in zip(burst, fetched)]

    # stock nbgrader, the same burst: submitted, then the teacher's four commands for the class
    with ThreadPoolExecutor(2) as pool:
        list(pool.map(lambda s: all_l[s].submit(learner_log), burst))
    stock_log = tmp / "stock-burst.log"
    collect24 = run_nbgrader(courses["stock-burst"], ("collect", A), stock_log)
    r_auto = timed([sys.executable, "-m", "nbgrader", "autograde", A, "--create"], courses["stock-burst"], len(burst),
                   f"stock nbgrader autograde ({len(burst)})", tmp / "stock-burst-autograde.log")
    if r_auto["rc"] != 0:
        raise RuntimeError(f"stock nbgrader autograde exited {r_auto['rc']} (log: {r_auto['log']})")
    feedback24 = run_nbgrader(courses["stock-burst"], ("generate_feedback", A), stock_log)
    release24 = run_nbgrader(courses["stock-burst"], ("release_feedback", A), stock_log)
    stock_burst = collect24 + r_auto["wall"] + feedback24 + release24
    unreleased = [s for s in burst if not all_l[s].page().exists()]
    stop_loads.set()
    loads.append(os.getloadavg()[0])

    # the same scores per cell, the same autograded notebooks, each submission graded once
    graded = set(single) | set(burst)
    s_svc = {k: v for k, v in subs.gradebook_scores(courses["service"]).items() if k[0] in graded}
    s_stock = {k: v for c in ("stock-one", "stock-burst") for k, v in subs.gradebook_scores(courses[c]).items()
               if k[0] in graded}
    nb_svc = {s: v for s, v in subs.autograded_notebooks(courses["service"]).items() if s in graded}
    nb_stock = {s: v for c in ("stock-one", "stock-burst") for s, v in subs.autograded_notebooks(courses[c]).items()
                if s in graded}
    diff = sorted({k[0] for k in set(s_svc) | set(s_stock) if s_svc.get(k) != s_stock.get(k)})
    nb_diff = sorted(s for s in set(nb_svc) | set(nb_stock) if nb_svc.get(s) != nb_stock.get(s))
    with Queue(str(courses["service"] / QUEUE_FILE)) as queue:
        entries = queue.entries()
    once = sorted(e.student for e in entries if e.state is State.GRADED and e.attempts == 1 and e.result["feedback"])
    # the service's own record (wall clock): noticed in the inbound folder -> claimed -> graded and released
    kept = {e.student: e for e in entries if e.state is State.GRADED}
    svc_own = [kept[s].finished - kept[s].enqueued for s in single if s in kept]
    queued = [kept[s].started - kept[s].enqueued for s in burst if s in kept]
    totals = subs.totals(s_stock)
    by_kind = {k: sorted({totals.get(s) for s in graded if roster[s] == k}, key=str) for k in subs.KINDS}

    svc_med, stock_med = statistics.median(svc_wait), statistics.median(stock_wait)
    cpu_src = "cgroup cpuacct" if service.group else "no cgroup: CPU not measured"
    print()
    print(f"learners: {len(warm)} warming the service ({jobs} workers), {len(single)} one after another "
          f"({kinds(single)}), {len(burst)} in the burst ({kinds(burst)}); total scores by kind (stock): {by_kind}")
    print(f"service start to its first feedback {started_to_first:.1f} s; the {len(warm)} warming submissions, "
          f"submit to feedback: {', '.join(f'{c:.1f}' for c in cold)} s")
    print(f"ONE SUBMISSION, `nbgrader submit` returned -> feedback fetchable ({len(single)} learners, "
          "one after another):")
    print(f"  grading service (warm, {jobs} workers)      {fig(svc_wait)} | CPU {statistics.median(svc_cpu):.2f} s"
          f"/submission (median) | target <= 5 s: {'met' if svc_med <= 5 else 'NOT MET'}")
    print(f"  stock nbgrader by hand, at once           {fig(stock_wait)} | CPU {statistics.median(stock_cpu):.2f} s"
          f"/submission (median) | steps (medians): "
          + ", ".join(f"{k} {statistics.median(v):.2f} s" for k, v in stock_steps.items()))
    print(f"  speed-up (stock median / service median): {stock_med / svc_med:.2f}x; the learner's own "
          f"`nbgrader fetch_feedback` then took {fig(fetch_wall)}")
    print(f"  the service's own record (queue: noticed in inbound -> feedback released) {fig(svc_own)}: "
          f"it starts while `nbgrader submit` is still writing the learner's cache and exiting")
    print(f"BURST: {len(burst)} submissions, first submit started -> last returned {window:.1f} s "
          f"(--spread {args.spread:g})")
    print(f"  grading service: last feedback fetchable {last_page - last_submit:.1f} s after the last submit "
          f"returned (target <= 60 s: {'met' if last_page - last_submit <= 60 else 'NOT MET'}); each learner "
          f"waited {fig(burst_wait)}; CPU {burst_cpu / len(burst):.2f} s/submission; in the queue "
          f"(noticed -> claimed) {fig(queued)}")
    print(f"  stock sequential `nbgrader autograde` of the same {len(burst)}: wall {r_auto['wall']:.1f} s "
          f"({r_auto['wall'] / len(burst):.2f} s/submission), CPU {r_auto['cpu'] / len(burst):.2f} s/submission, "
          f"peak memory {r_auto['peak'] / 2**30:.2f} GB")
    print(f"  stock, all four commands started as the last submit returned: collect {collect24:.1f} s + autograde "
          f"{r_auto['wall']:.1f} s + generate_feedback {feedback24:.1f} s + release_feedback {release24:.1f} s "
          f"= last feedback {stock_burst:.1f} s after the last submit ("
          + (f"{stock_burst / (last_page - last_submit):.1f}x the service's" if last_page - last_submit >= 0.1 else
             "the service's last page was out as the last submit returned: no ratio") + ")")
    print(f"service vs stock, same submissions: scores identical (per student, per cell): "
          f"{'yes' if not diff and s_svc else 'NO: ' + ', '.join(diff)} ({len(s_svc)} entries); autograded "
          f"notebooks identical: {'yes' if not nb_diff and nb_svc else 'NO: ' + ', '.join(nb_diff)} "
          f"({len(nb_svc)} notebooks)")
    for line in subs.differences(nb_stock, nb_svc):
        print(f"    {line}")
    print(f"each learner fetched their own page with `nbgrader fetch_feedback`: "
          f"{'yes' if all(own_page) else 'NO'} ({sum(own_page)} of {len(own_page)}); queue: {len(once)} of "
          f"{len(entries)} entries graded once with feedback released; stock released "
          f"{len(burst) - len(unreleased)} of {len(burst)} burst pages")
    gb = 2 ** 30
    idle_mem = statistics.median(mem.samples["idle"]) if mem.samples["idle"] else float("nan")
    burst_peak = max(mem.samples["burst"], default=0)
    print(f"COST: left alone, warm ({jobs} workers, {args.idle:g} s): memory {idle_mem / gb:.2f} GB, CPU "
          f"{idle_cpu * 3600:.0f} s an hour ({idle_cpu * 100:.2f}% of a core); peak memory while grading "
          f"one at a time {max(mem.samples['one at a time'], default=0) / gb:.2f} GB, in the burst "
          f"{burst_peak / gb:.2f} GB (stock sequential autograde {r_auto['peak'] / gb:.2f} GB)")
    print(f"CPU measured by {cpu_src}; load average {min(loads):.2f} to {max(loads):.2f} during the run "
          f"(sampled every 5 s; other work counts); bench took {now() - t_bench:.0f} s")
    ok = (not diff and not nb_diff and s_svc and all(own_page) and not unreleased
          and len(once) == len(entries) == len(roster))
    if args.json:
        figures = {
            "date": time.strftime("%Y-%m-%d"), "cores": cores, "jobs": jobs, "load": [min(loads), max(loads)],
            "cpu_source": cpu_src, "ok": bool(ok),
            "idle": {"seconds": args.idle, "memory_gb": idle_mem / gb, "cpu_s_per_hour": idle_cpu * 3600},
            "one": {"learners": len(single), "submit_to_feedback_s": svc_med, "stock_s": stock_med,
                    "cpu_s": statistics.median(svc_cpu), "stock_cpu_s": statistics.median(stock_cpu),
                    "peak_memory_gb": max(mem.samples["one at a time"], default=0) / gb},
            "burst": {"learners": len(burst), "spread_s": args.spread, "last_feedback_after_last_submit_s":
                      last_page - last_submit, "stock_s": stock_burst, "cpu_s": burst_cpu / len(burst),
                      "peak_memory_gb": burst_peak / gb, "stock_peak_memory_gb": r_auto["peak"] / gb},
        }
        Path(args.json).write_text(json.dumps(figures, indent=1) + "\n")
    if args.keep:
        print(f"kept: {tmp} (logs: service.log, stock-one.log, stock-burst.log, stock-burst-autograde.log, "
              "learners.log)")
    else:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
