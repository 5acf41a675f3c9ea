"""Headless execution time of each lesson against the floor: a notebook that only imports torch,
matplotlib and ipywidgets. All run in this one process, alternating (floor, head, multihead,
block, floor, head, ...), so the ratios compare like with like on this machine, however busy.

    python bench/lesson_time.py --repeat 5

Prints, for the floor and each lesson: the median wall time of a whole run (kernel start to
shutdown, as nbconvert and nbgrader pay it) and its ratio to the floor's; the median CPU time of
the kernel process and its ratio (on a busy machine the wall time swells with others' work, the
CPU time hardly); and where the wall time goes: the median time of the set-up cell, the plot
cell, all other cells together (each cell's execute_input -> execute_reply, as nbclient records
it), and the rest (kernel start, messages, shutdown).
"""
import argparse
import os
import resource
import statistics
import time
from datetime import datetime
from pathlib import Path

import nbformat
from nbclient import NotebookClient
from nbformat.v4 import new_code_cell, new_notebook
from tqdm import tqdm

SOURCE = Path(__file__).resolve().parents[1] / "source"
LESSONS = ("head", "multihead", "block")      # the lessons with the attention explorer
ALL = sorted(d.name for d in SOURCE.iterdir() if (d / f"{d.name}.ipynb").is_file())
FLOOR = "import torch, matplotlib.pyplot, ipywidgets"
TARGET = 1.2


def cell_seconds(cell):
    """The cell's own time in its kernel, from the timestamps nbclient records."""
    times = cell.metadata.get("execution", {})
    start, end = times.get("iopub.execute_input"), times.get("shell.execute_reply")
    if not (start and end):
        return 0.0
    parse = lambda stamp: datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    return (parse(end) - parse(start)).total_seconds()


def children_cpu():
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run(nb, path):
    """Wall seconds to execute nb headless, the kernel's CPU seconds, and {cell name: seconds}.

    The kernel is this process's child and is waited for at shutdown, so its CPU time (all its
    threads, start to exit) shows in RUSAGE_CHILDREN: a figure other work on the machine hardly
    changes, unlike the wall time."""
    start, cpu = time.perf_counter(), children_cpu()
    NotebookClient(nb, timeout=300, kernel_name="python3",
                   resources={"metadata": {"path": str(path)}}).execute()
    wall, cpu = time.perf_counter() - start, children_cpu() - cpu
    cells = {}
    for i, c in enumerate(c for c in nb.cells if c.cell_type == "code"):
        cells[c.metadata.get("nbgrader", {}).get("grade_id", f"cell {i}")] = cell_seconds(c)
    return wall, cpu, cells


def breakdown(runs):
    """Median seconds of the set-up cell, the plot cell, every other cell together, and the
    wall time outside the cells (kernel start, messages, shutdown). The floor has one cell."""
    med = statistics.median
    first = lambda cells: next(iter(cells))
    return [med([cells[first(cells)] for _, _, cells in runs]),
            med([cells.get("plot", 0) for _, _, cells in runs]),
            med([sum(s for name, s in cells.items() if name not in (first(cells), "plot"))
                 for _, _, cells in runs]),
            med([wall - sum(cells.values()) for wall, _, cells in runs])]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5, help="runs of each notebook (median used)")
    parser.add_argument("--lessons", nargs="+", default=list(LESSONS), choices=ALL,
                        help=f"default: {' '.join(LESSONS)}")
    args = parser.parse_args()

    floor_nb = new_notebook(cells=[new_code_cell(FLOOR)])
    runs = {name: [] for name in ["floor", *args.lessons]}
    load_before = os.getloadavg()
    for _ in tqdm(range(args.repeat), desc="floor and lessons, alternating"):
        runs["floor"].append(run(nbformat.from_dict(floor_nb), SOURCE))
        for lesson in args.lessons:
            path = SOURCE / lesson / f"{lesson}.ipynb"
            runs[lesson].append(run(nbformat.read(path, as_version=4), path.parent))
    load_after = os.getloadavg()

    median = {name: (statistics.median(r[0] for r in results), statistics.median(r[1] for r in results))
              for name, results in runs.items()}
    print(f"{os.cpu_count()} cores, load average {load_before[0]:.2f} before and "
          f"{load_after[0]:.2f} after; {args.repeat} runs of each, alternating; medians")
    print(f"floor: {FLOOR}")
    print(f"{'':10s} {'wall':>7s} {'ratio':>6s} {'kernel CPU':>11s} {'ratio':>6s}   "
          f"wall in: set-up cell, plot cell, other cells, outside cells   all wall times")
    for name, results in runs.items():
        wall, cpu = median[name]
        ratio, cpu_ratio = wall / median["floor"][0], cpu / median["floor"][1]
        verdict = "" if name == "floor" else f"{'within' if ratio <= TARGET else 'OVER'} {TARGET}x"
        print(f"{name:10s} {wall:6.2f}s {ratio:5.2f}x {cpu:10.2f}s {cpu_ratio:5.2f}x   "
              + "  ".join(f"{s:5.2f}" for s in breakdown(results))
              + f"   [{', '.join(f'{r[0]:.2f}' for r in results)}] {verdict}")


if __name__ == "__main__":
    main()
