"""How much memory a teacher's `tinygpt-grade-class` takes, per grading worker: for sizing the hub.

    python hub/measure_grading_memory.py [--jobs 1 2 3] [--per-worker 2] [--json out.json]

Makes a class of right multihead answers in a throw-away copy of the course (the same class
tests/test_classroom.py and bench/ build: tinygpt_course.testing.submissions), --per-worker
submissions for each worker, and grades it with `tinygpt-grade-class multihead --jobs J` for each J.
While it grades, every 0.2 s it adds up PSS and USS over the grading process tree (the grader, the
kernel template, every worker, nbgrader's re-run and every sandboxed kernel: all descendants, from
/proc/<pid>/smaps_rollup, as hub/measure_kernel_memory.py reads them). It prints the peak of each
sum per J, then a straight line through the peaks: what the grader takes whatever J (the fixed
part) and what each further worker adds (tinygpt_course.classroom.cli.GRADER_MIB and WORKER_MIB
are set from these). Linux only; as root, as the hub's teachers' grading runs learner code as
another uid (the grading sandbox).
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def _kernel_memory_module():
    """hub/measure_kernel_memory.py, loaded by path (hub/ is not a package): one copy of the /proc reading."""
    import importlib.util
    spec = importlib.util.spec_from_file_location("measure_kernel_memory", HERE / "measure_kernel_memory.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_kernel_memory = _kernel_memory_module()
children, memory = _kernel_memory.children, _kernel_memory.memory


class Sampler(threading.Thread):
    """Every `every` s: PSS and USS summed over pid and its descendants; keeps the peaks."""

    def __init__(self, pid, every=0.2):
        super().__init__(daemon=True)
        self.pid, self.every = pid, every
        self.peak_pss = self.peak_uss = 0.0
        self.peak_procs = 0
        self.samples = 0
        self.done = threading.Event()

    def run(self):
        while not self.done.wait(self.every):
            pss = uss = 0.0
            procs = 0
            for p in [self.pid, *children(self.pid)]:
                try:
                    m = memory(p)
                except (FileNotFoundError, ProcessLookupError, AttributeError, KeyError):
                    continue            # gone between the listing and the read
                pss, uss, procs = pss + m["pss_mib"], uss + m["uss_mib"], procs + 1
            self.samples += 1
            if pss > self.peak_pss:
                self.peak_pss, self.peak_procs = pss, procs
            self.peak_uss = max(self.peak_uss, uss)


def grade(course, jobs):
    """Grade course with --jobs jobs, sampling; returns the peaks (MiB) and the wall time."""
    from tinygpt_course.testing import submissions as subs
    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "tinygpt_course.classroom", "multihead", "--jobs", str(jobs),
                             "--force", "--no-progress", "--course-dir", str(course)],
                            env=subs.env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    sampler = Sampler(proc.pid)
    sampler.start()
    out, _ = proc.communicate(timeout=3600)
    sampler.done.set()
    sampler.join()
    if proc.returncode != 0:
        sys.exit(f"tinygpt-grade-class --jobs {jobs} exited {proc.returncode}:\n{out[-3000:]}")
    return {"jobs": jobs, "peak_pss_mib": round(sampler.peak_pss), "peak_uss_mib": round(sampler.peak_uss),
            "processes_at_peak": sampler.peak_procs, "samples": sampler.samples,
            "wall_s": round(time.perf_counter() - t0, 1)}


def line(points):
    """Least-squares (intercept, slope) through (x, y) points."""
    n = len(points)
    mx, my = sum(x for x, _ in points) / n, sum(y for _, y in points) / n
    sxx = sum((x - mx) ** 2 for x, _ in points)
    slope = sum((x - mx) * (y - my) for x, y in points) / sxx
    return my - slope * mx, slope


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--jobs", type=int, nargs="+", default=[1, 2, 3], help="the --jobs values to grade with")
    p.add_argument("--per-worker", type=int, default=2, help="submissions per worker (default 2)")
    p.add_argument("--json", help="write the figures here too")
    args = p.parse_args()
    from tinygpt_course.testing import submissions as subs
    root = Path(tempfile.mkdtemp(prefix="tinygpt-grading-memory-", dir="/var/tmp"))
    try:
        base = subs.make_course(root / "base")
        n = args.per_worker * max(args.jobs)
        for i in range(n):
            subs.submit(base, f"s{i:02d}", "right")
        print(f"a class of {n} right multihead answers; sampling PSS and USS over the grading process tree "
              f"every 0.2 s (/proc/<pid>/smaps_rollup); {os.cpu_count()} cores", flush=True)
        results = []
        for jobs in args.jobs:
            course = root / f"jobs{jobs}"
            shutil.copytree(base, course)
            for i in range(args.per_worker * jobs, n):        # per_worker submissions per worker
                shutil.rmtree(course / "submitted" / f"s{i:02d}")
            r = grade(course, jobs)
            results.append(r)
            print(f"--jobs {jobs}: {args.per_worker * jobs} submissions in {r['wall_s']} s; peak PSS "
                  f"{r['peak_pss_mib']} MiB, peak USS {r['peak_uss_mib']} MiB ({r['processes_at_peak']} "
                  f"processes at the PSS peak, {r['samples']} samples)", flush=True)
        summary = {"runs": results}
        if len(results) > 1:
            for kind in ("pss", "uss"):
                fixed, per = line([(r["jobs"], r[f"peak_{kind}_mib"]) for r in results])
                summary[f"fixed_{kind}_mib"], summary[f"worker_{kind}_mib"] = round(fixed), round(per)
                print(f"{kind.upper()}: the grader's fixed part {fixed:.0f} MiB + {per:.0f} MiB per worker")
        if args.json:
            Path(args.json).write_text(json.dumps(summary, indent=1))
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
