"""Benchmark: grade a class with stock `nbgrader autograde` and with tinygpt-grade-class, in one run.

    python bench/grade_class.py --n 40

Makes N submissions (right, heads summed, plain list, unanswered, in turn) in a temporary copy of
the course, measures the floor (start a kernel and import torch), grades the class: sequential
`nbgrader autograde multihead --create` with every kernel started as stock nbgrader starts it
(``c.SandboxedKernelManager.fork_from_template = False``: the baseline), the same plain command
with the course's config as it is (kernels forked from the warm template), and
`tinygpt-grade-class multihead`, twice (timed without memory samples, then sampled: Watch);
measures the floor again, and prints wall times, the speed-ups against the baseline, the cost
per submission against the floor, CPU time, peak memory, and whether the gradebooks hold the
same per-cell scores and the autograded notebooks are the same. See bench/README.md.
"""
import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil
from tqdm import tqdm

from tinygpt_course.testing import submissions as subs


def children_cpu():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def measure_floor():
    """Seconds to start the notebook's kernel and import torch in it (shutdown not counted)."""
    from jupyter_client.manager import start_new_kernel
    t0 = time.perf_counter()
    km, kc = start_new_kernel(kernel_name="python3")
    try:
        reply = kc.execute_interactive("import torch", timeout=300)
        assert reply["content"]["status"] == "ok", reply["content"]
        return time.perf_counter() - t0
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)


def tree_pss(top):
    """The memory of a process (psutil.Process) and all its descendants: their proportional set
    sizes added up, so a page the forks share counts once in all (bytes; 0 once it is gone)."""
    try:
        procs = [top] + top.children(recursive=True)
    except psutil.NoSuchProcess:
        return 0
    pss = 0
    for p in procs:
        try:
            pss += p.memory_full_info().pss
        except psutil.Error:
            pass
    return pss


class Watch(threading.Thread):
    """While a command runs: peak memory of it and all its descendants (the sum of their
    proportional set sizes, sampled every `memory_every` seconds; None: not sampled), and a
    progress bar counting autograded notebooks (every 0.5 s).

    A memory sample reads /proc/<pid>/smaps_rollup of every process of the command: 25 ms of CPU
    for tinygpt-grade-class's 25-30 processes (measured). The two nbgrader runs keep one core of
    two busy; tinygpt-grade-class keeps both, and sampled every 0.5 s its run at 100 took 21.0 s
    against 20.0 s unsampled (three pairs, the same CPU in its own processes); sampled every 2 s,
    its peak at 24 came out 0.80 GB against 0.96 (too few samples in 7 s). So main() times it in
    a run without samples and takes its peak from a second run, sampled every 0.5 s."""

    def __init__(self, proc, course, n, desc, memory_every=0.5):
        super().__init__(daemon=True)
        self.proc, self.course, self.peak = psutil.Process(proc.pid), Path(course), 0
        self.memory_every = memory_every
        self.bar = tqdm(total=n, desc=desc, unit="nb", dynamic_ncols=True)
        self.done = threading.Event()

    def run(self):
        sampled = None
        while not self.done.wait(0.5):
            if self.memory_every is not None and (sampled is None or
                                                  time.monotonic() - sampled >= self.memory_every - 0.01):
                sampled = time.monotonic()
                self.peak = max(self.peak, tree_pss(self.proc))
            self.bar.update(self.graded() - self.bar.n)

    def graded(self):
        """Autograded notebooks nbgrader is done with: it makes them read-only last."""
        done = 0
        for p in self.course.glob("autograded/*/multihead/*.ipynb"):
            try:
                done += not p.stat().st_mode & 0o200
            except OSError:
                pass
        return done

    def stop(self):
        self.done.set()
        self.join()
        self.bar.update(self.graded() - self.bar.n)
        self.bar.close()


CPUACCT = Path("/sys/fs/cgroup/cpuacct")


def cpu_group():
    """A fresh cgroup-v1 cpuacct group (root only), or None. Sandboxed kernels are killed with
    their PID namespace, so their CPU time never reaches getrusage(RUSAGE_CHILDREN); a cgroup
    counts every process started inside it, sandboxed or not."""
    try:
        group = Path(tempfile.mkdtemp(prefix="tinygpt-bench-", dir=CPUACCT))
        return group if (group / "cpuacct.usage").exists() else None
    except OSError:
        return None


def timed(cmd, course, n, desc, log, memory_every=0.5):
    group = cpu_group()
    cpu0, t0 = children_cpu(), time.perf_counter()
    join = (lambda: (group / "cgroup.procs").write_text(str(os.getpid()))) if group else None
    with open(log, "w") as out:
        proc = subprocess.Popen(cmd, cwd=course, env=subs.env(), stdout=out, stderr=subprocess.STDOUT,
                                preexec_fn=join)
        watch = Watch(proc, course, n, desc, memory_every)
        watch.start()
        proc.wait()
        watch.stop()
    if group:
        cpu = int((group / "cpuacct.usage").read_text()) / 1e9
        time.sleep(0.5)
        try:
            group.rmdir()
        except OSError:
            pass
    else:
        cpu = children_cpu() - cpu0
    return {"wall": time.perf_counter() - t0, "cpu": cpu, "peak": watch.peak, "rc": proc.returncode,
            "log": log, "cpu_source": "cgroup cpuacct" if group else "getrusage (misses sandboxed kernels)"}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--n", type=int, default=40, help="submissions (default 40)")
    p.add_argument("--jobs", type=int, default=0, help="tinygpt-grade-class --jobs (default: its own)")
    p.add_argument("--floor-runs", type=int, default=3, help="floor measurements before and after (default 3)")
    p.add_argument("--keep", action="store_true", help="keep the temporary courses")
    p.add_argument("--memory-every", type=float, default=0.5,
                   help="seconds between peak-memory samples (default 0.5; each reads every process's "
                        "smaps_rollup, which slows a run that keeps the cores busy: tinygpt-grade-class "
                        "is timed in a run without samples, its memory measured in a second run)")
    p.add_argument("--course-src", type=Path, default=subs.REPO,
                   help="the course (nbgrader_config.py, source/) to grade with, e.g. a checkout of an "
                        "earlier commit, run with a Python whose tinygpt_course is that commit's (default: this repo)")
    args = p.parse_args(argv)

    tmp = Path(tempfile.mkdtemp(prefix="tinygpt-bench-grade-class-"))
    cores = len(os.sched_getaffinity(0))
    print(f"course copies in {tmp}; {cores} cores; load average {os.getloadavg()[0]:.1f}", flush=True)
    base = subs.make_course(tmp / "base", args.course_src)
    roster = subs.make_class(base, args.n)
    kinds = {k: list(roster.values()).count(k) for k in subs.KINDS}
    stock, plain, fast, fast_mem = tmp / "stock", tmp / "plain", tmp / "fast", tmp / "fast-memory"
    for copy in (stock, plain, fast, fast_mem):
        shutil.copytree(base, copy)
    with open(stock / "nbgrader_config.py", "a") as f:
        f.write("\nc.SandboxedKernelManager.fork_from_template = False   # bench baseline: stock kernel starts\n")

    autograde = [sys.executable, "-m", "nbgrader", "autograde", "multihead", "--create"]
    floors = [measure_floor() for _ in tqdm(range(args.floor_runs), desc="floor (before)")]
    r_stock = timed(autograde, stock, args.n, "nbgrader autograde, started kernels", tmp / "stock.log", args.memory_every)
    r_plain = timed(autograde, plain, args.n, "nbgrader autograde, forked kernels", tmp / "plain.log", args.memory_every)
    cmd = [str(Path(sys.executable).parent / "tinygpt-grade-class"), "multihead", "--no-progress"]
    if args.jobs:
        cmd += ["--jobs", str(args.jobs)]
    r_fast = timed(cmd, fast, args.n, "tinygpt-grade-class (timed)", tmp / "fast.log", None)
    r_fast_mem = timed(cmd, fast_mem, args.n, "tinygpt-grade-class (memory)", tmp / "fast-memory.log",
                       args.memory_every)
    r_fast["peak"], r_fast["rc"] = r_fast_mem["peak"], r_fast["rc"] or r_fast_mem["rc"]
    floors += [measure_floor() for _ in tqdm(range(args.floor_runs), desc="floor (after)")]

    s_stock = subs.gradebook_scores(stock)
    nb_stock = subs.autograded_notebooks(stock)
    same = {}
    for name, course in (("plain", plain), ("fast", fast), ("fast-memory", fast_mem)):
        s_other, nb_other = subs.gradebook_scores(course), subs.autograded_notebooks(course)
        diff = sorted({k[0] for k in set(s_stock) | set(s_other) if s_stock.get(k) != s_other.get(k)})
        nb_diff = sorted(s for s in set(nb_stock) | set(nb_other) if nb_stock.get(s) != nb_other.get(s))
        same[name] = (diff, nb_diff, list(subs.differences(nb_stock, nb_other)))
    totals = subs.totals(s_stock)
    by_kind = {k: sorted({totals.get(s) for s, kk in roster.items() if kk == k}, key=str) for k in subs.KINDS}

    floor = statistics.median(floors)
    jobs = args.jobs or cores + 1   # tinygpt-grade-class's default
    n = args.n
    print()
    print(f"submissions: {n} ({', '.join(f'{k} {v}' for k, v in kinds.items())}); total scores by kind "
          f"(stock): {by_kind}")
    print(f"floor, start a kernel + import torch: median {floor:.2f} s "
          f"(min {min(floors):.2f}, max {max(floors):.2f}, {len(floors)} runs, before and after)")
    for name, r, used in [("nbgrader autograde, started kernels", r_stock, 1),
                          ("nbgrader autograde, forked kernels", r_plain, 1),
                          (f"tinygpt-grade-class ({jobs} jobs)", r_fast, min(jobs, cores))]:
        per = r["wall"] / n
        print(f"{name:40s} wall {r['wall']:7.1f} s | per submission {per:5.2f} s = {per / floor:4.2f}x floor, "
              f"{r['wall'] * used / n:5.2f} core-s = {r['wall'] * used / n / floor:4.2f}x floor | "
              f"CPU {r['cpu'] / n:5.2f} s/submission | peak memory {r['peak'] / 2**30:4.2f} GB | exit {r['rc']}")
    print(f"CPU measured by {r_stock['cpu_source']}; course from {args.course_src}; peak memory sampled every "
          f"{args.memory_every:g} s, tinygpt-grade-class's in a second run (its wall {r_fast_mem['wall']:.1f} s, "
          f"CPU {r_fast_mem['cpu'] / n:.2f} s/submission), its first run unsampled")
    print(f"speed-up of plain nbgrader autograde with forked kernels (vs started): {r_stock['wall'] / r_plain['wall']:.2f}x")
    print(f"speed-up of tinygpt-grade-class (vs nbgrader autograde, started kernels): "
          f"{r_stock['wall'] / r_fast['wall']:.2f}x")
    for name, label in (("plain", "nbgrader autograde, forked kernels"), ("fast", "tinygpt-grade-class"),
                        ("fast-memory", "tinygpt-grade-class, the memory run")):
        diff, nb_diff, lines = same[name]
        print(f"{label} vs started kernels: scores identical (per student, per cell): "
              f"{'yes' if not diff and s_stock else 'NO: ' + ', '.join(diff)} ({len(s_stock)} entries); "
              f"autograded notebooks identical (cells, sources, text outputs, pictures): "
              f"{'yes' if not nb_diff and nb_stock else 'NO: ' + ', '.join(nb_diff)} ({len(nb_stock)} notebooks)")
        for line in lines:
            print(f"    {line}")
    right = next(st for st, kind in roster.items() if kind == "right")
    subprocess.run([sys.executable, "-m", "nbgrader", "generate_feedback", "multihead", "--student", right],
                   cwd=fast, env=subs.env(), capture_output=True)
    html = list((fast / "feedback" / right / "multihead").glob("*.html"))
    png = bool(html) and "data:image/png;base64," in html[0].read_text()
    print(f"feedback of {right} (tinygpt-grade-class): {'holds the PNG' if png else 'NO PNG'}")
    print(f"machine: {cores} cores, load average {os.getloadavg()[0]:.1f} at the end (other work counts)")
    if args.keep:
        print(f"kept: {tmp} (logs: stock.log, plain.log, fast.log, fast-memory.log)")
    else:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0 if s_stock and png and not any(d or nd for d, nd, _ in same.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
