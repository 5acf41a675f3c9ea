"""Where one graded submission's CPU goes: kernels started (stock) and forked from the template.

    python bench/breakdown.py            # --repeat 3 --k 4

Measured in this one run, for the multihead lesson, both ways (``fork_from_template`` off, then on):

- **kernel start**: the kernel's own CPU from its start to its first reply (its getrusage, read
  by a silent user expression; for a fork, from the fork);
- **each cell** of the source notebook (the solution and the hidden tests in, as nbgrader runs the
  autograded copy): the kernel's CPU across the cell; the set-up cell holds the imports;
- **kernel exit, bubblewrap, the fork**: every process of the kernel's run, measured by a cpuacct
  group (root only) around it, less the two above and less this process's own CPU;
- **the re-run**: CPU of the independent re-run's process, as the re-run server reports it;
- **nbgrader's own work**: CPU of the ``nbgrader autograde`` process itself (its getrusage at exit),
  per submission: grading 1 submission, then 1 + K, the difference divided by K;
- **all processes**: the same two commands measured by a cgroup-v1 cpuacct group (root only),
  per submission: a separate measurement of the same work, to set beside the sum of the parts
  (they differ by the machine's drift between the runs, a few tenths of a second on a shared VM).

Median of --repeat runs for the kernel and re-run parts. See bench/README.md.
"""
import argparse
import asyncio
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient
from tqdm import tqdm
from traitlets.config import Config

from grade_class import cpu_group, timed
from tinygpt_course.grading import template as template_mod
from tinygpt_course.grading.kernel import SandboxedKernelManager
from tinygpt_course.grading.lesson import read_lesson
from tinygpt_course.grading.rerun import rerun
from tinygpt_course.grading.sandbox import Sandbox
from tinygpt_course.testing import submissions as subs

LESSON = "multihead"
CPU = "(lambda r: r.ru_utime + r.ru_stime)(__import__('resource').getrusage(0))"
SELF_CPU = """import atexit, resource, sys
atexit.register(lambda: sys.stderr.write("SELF-CPU %f\\n" % sum(resource.getrusage(resource.RUSAGE_SELF)[:2])))
from nbgrader.apps.nbgraderapp import main
sys.argv = ["nbgrader"] + sys.argv[1:]
main()
"""


class Metered(NotebookClient):
    """nbclient, asking the kernel for its own CPU time at start and after each code cell."""

    async def _kernel_cpu(self):
        reply = await self.kc.execute_interactive("", silent=True, store_history=False,
                                                  user_expressions={"cpu": CPU}, timeout=30)
        return float(reply["content"]["user_expressions"]["cpu"]["data"]["text/plain"])

    async def async_start_new_kernel_client(self):
        kc = await super().async_start_new_kernel_client()
        self.cpu = [("kernel start", await self._kernel_cpu())]
        return kc

    async def async_execute_cell(self, cell, cell_index, execution_count=None, store_history=True):
        cell = await super().async_execute_cell(cell, cell_index, execution_count, store_history)
        if cell.cell_type == "code":
            gid = cell.metadata.get("nbgrader", {}).get("grade_id") or f"cell {cell_index}"
            self.cpu.append((gid, await self._kernel_cpu()))
        return cell


def in_group(pids):
    """A fresh cpuacct group holding `pids` (and what they start from now on); None if not root."""
    group = cpu_group()
    if group:
        for pid in pids:
            (group / "cgroup.procs").write_text(str(pid))
    return group


def leave_group(group, pids):
    usage = int((group / "cpuacct.usage").read_text()) / 1e9
    for pid in pids:
        (group.parent / "cgroup.procs").write_text(str(pid))
    for _ in range(100):        # the sandbox's last processes may still be on their way out
        try:
            group.rmdir()
            break
        except OSError:
            time.sleep(0.05)
    return usage


def kernel_parts(fork, folder, repeat):
    """[(part, CPU s)] for the lesson's kernel: start, each cell, and the kernel's processes'
    CPU outside those (median of `repeat` runs)."""
    cfg = Config()
    cfg.SandboxedKernelManager.fork_from_template = fork
    if fork:        # the template starts once per grading process: not a per-submission cost
        Metered(nbformat.v4.new_notebook(), kernel_manager_class=SandboxedKernelManager, config=cfg,
                resources={"metadata": {"path": str(folder)}}).execute()
    pids = [os.getpid()] + ([template_mod.template().proc.pid] if fork else [])
    runs = []
    for _ in tqdm(range(repeat), desc=f"kernel, {'forked' if fork else 'started'}"):
        nb = nbformat.read(subs.REPO / "source" / LESSON / f"{LESSON}.ipynb", 4)
        client = Metered(nb, kernel_manager_class=SandboxedKernelManager, config=cfg, timeout=120,
                         resources={"metadata": {"path": str(folder)}})
        group, mine = in_group(pids), time.process_time()
        client.execute()
        mine = time.process_time() - mine
        total = leave_group(group, pids) - mine if group else float("nan")
        cpu = client.cpu
        parts = [cpu[0]] + [(name, t - cpu[i][1]) for i, (name, t) in enumerate(cpu[1:])]
        outside = total - cpu[-1][1]
        runs.append(parts + [("kernel exit, bubblewrap, the fork", outside)])
    return [(name, statistics.median(r[i][1] for r in runs)) for i, (name, _) in enumerate(runs[0])]


def rerun_cpu(repeat):
    src = read_lesson(subs.REPO / "source" / LESSON / f"{LESSON}.ipynb")
    sandbox = Sandbox()
    rerun(sandbox, LESSON, src.setup, src.solution, 1, 120)          # the server starts once
    return statistics.median(rerun(sandbox, LESSON, src.setup, src.solution, 1, 120).cpu_s
                             for _ in range(repeat))


def nbgrader_cpu(tmp, fork, n):
    """(nbgrader's own CPU, every process's CPU) for grading n right answers in one command."""
    course = subs.make_course(tmp / f"{'forked' if fork else 'started'}-{n}")
    subs.make_class(course, n, kinds=("right",))
    with open(course / "nbgrader_config.py", "a") as f:
        f.write(f"\nc.SandboxedKernelManager.fork_from_template = {fork}\n")
    r = timed([sys.executable, "-c", SELF_CPU, "autograde", LESSON, "--create"], course, n,
              f"nbgrader autograde, {n}", course / "autograde.log")
    log = Path(r["log"]).read_text()
    if r["rc"]:
        raise SystemExit(f"nbgrader autograde failed:\n{log[-3000:]}")
    own = float(next(ln.split()[1] for ln in log.splitlines() if ln.startswith("SELF-CPU")))
    return own, r["cpu"]


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--repeat", type=int, default=3, help="runs of the kernel and the re-run (default 3)")
    p.add_argument("--k", type=int, default=4, help="extra submissions for the per-submission nbgrader figures")
    args = p.parse_args(argv)
    tmp = Path(tempfile.mkdtemp(prefix="tinygpt-bench-breakdown-"))
    folder = tmp / "kernel"
    folder.mkdir()
    print(f"load average {os.getloadavg()[0]:.2f}", flush=True)
    table = {}
    for fork in (False, True):
        parts = kernel_parts(fork, folder, args.repeat)
        one = nbgrader_cpu(tmp, fork, 1)
        many = nbgrader_cpu(tmp, fork, 1 + args.k)
        own, total = ((b - a) / args.k for a, b in zip(one, many))
        parts += [("the re-run", rerun_cpu(args.repeat)), ("nbgrader's own work", own)]
        parts.append(("sum of the parts", sum(t for _, t in parts)))
        table[fork] = (parts, total, one)
    names = [name for name, _ in table[False][0]]
    print(f"\nCPU seconds per submission, {LESSON} lesson (load average {os.getloadavg()[0]:.2f} at the end)")
    print(f"{'':32s} {'started':>8s} {'forked':>8s}")
    for i, name in enumerate(names):
        print(f"{name:32s} {table[False][0][i][1]:8.3f} {table[True][0][i][1]:8.3f}")
    print(f"{'all processes (cgroup)':32s} {table[False][1]:8.3f} {table[True][1]:8.3f}"
          f"   (the nbgrader commands: a separate measurement of the same work)")
    print(f"{'once per command (1 submission)':32s} {table[False][2][1]:8.3f} {table[True][2][1]:8.3f}"
          f"   (nbgrader start, the reference run, the re-run server, the template, and 1 submission)")
    shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    asyncio.set_event_loop(asyncio.new_event_loop())
    sys.exit(main())
