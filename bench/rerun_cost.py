"""Benchmark: CPU per independent re-run job, each job in a fresh fork of the zygote and a fresh
sandbox (the default) against one process and one sandbox for every job (``fresh=False``, the
design it replaced), in one run on one machine.

    python bench/rerun_cost.py --jobs 16 --repeat 3

Each measurement is a fresh Python process that re-runs the lesson's solution k times through
tinygpt_course.grading.rerun and then lets the zygote end (stdin closed, so every process it
forked has been waited for); its CPU is every process it started (getrusage RUSAGE_CHILDREN
around it). CPU per job = (CPU of 1 + N jobs - CPU of 1 job) / N: the zygote's start (Python,
``import torch``) cancels out. See bench/README.md.
"""
import argparse
import resource
import statistics
import subprocess
import sys

CHILD = """
import sys
from tinygpt_course.grading import rerun as R
from tinygpt_course.grading.lesson import read_lesson
from tinygpt_course.grading.sandbox import Sandbox
from tinygpt_course.testing.notebooks import source_path
src, sandbox = read_lesson(source_path("multihead")), Sandbox()
k, fresh = int(sys.argv[1]), sys.argv[2] == "fresh"
for _ in range(k):
    assert R.rerun(sandbox, "multihead", src.setup, src.solution, 1, 120, fresh=fresh).record
for server in R._servers.values():
    server.proc.stdin.close()       # the zygote ends once its workers have: all of them waited for
    server.proc.wait()
    if server.kept is not None:
        server.kept.close()
"""


def cpu_of(k, mode):
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run([sys.executable, "-c", CHILD, str(k), mode], check=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--jobs", type=int, default=16, help="re-runs per measurement (default 16)")
    p.add_argument("--repeat", type=int, default=3, help="measurements of each (default 3)")
    args = p.parse_args(argv)
    per_job = {}
    for mode in ("fresh", "shared"):
        runs = []
        for _ in range(args.repeat):
            one, many = cpu_of(1, mode), cpu_of(1 + args.jobs, mode)
            runs.append((many - one) / args.jobs)
        per_job[mode] = statistics.median(runs)
        print(f"{mode:6s}: CPU per re-run job {per_job[mode]:.3f} s (median of {args.repeat}: "
              f"{', '.join(f'{r:.3f}' for r in runs)})", flush=True)
    print(f"fresh - shared: {per_job['fresh'] - per_job['shared']:+.3f} s CPU per job")
    return 0


if __name__ == "__main__":
    sys.exit(main())
