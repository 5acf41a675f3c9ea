"""Headless execution time of each lesson against the floor: a notebook that only imports torch,
matplotlib and ipywidgets. All run in this one process, alternating (floor, head, multihead,
block, floor, head, ...), so the ratios compare like with like on this machine, however busy.

    python bench/lesson_time.py --repeat 5

Prints, per lesson: the median wall time of the whole run (kernel start to shutdown, as
nbconvert and nbgrader pay it), its ratio to the floor's median, and where the time goes: the
median of each cell's own time (nbclient's execute_input -> execute_reply) for the set-up cell,
the plot cell and all the other cells together. The floor's one cell is printed the same way,
so "kernel" (start, messages, shutdown) is what the runs pay outside their cells.
"""
import argparse
import os
import statistics
import time
from datetime import datetime
from pathlib import Path

import nbformat
from nbclient import NotebookClient
from nbformat.v4 import new_code_cell, new_notebook
from tqdm import tqdm

SOURCE = Path(__file__).resolve().parents[1] / "source"
LESSONS = ("head", "multihead", "block")
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


def run(nb, path):
    """Wall seconds to execute nb headless, and {cell name: seconds}."""
    start = time.perf_counter()
    NotebookClient(nb, timeout=300, kernel_name="python3",
                   resources={"metadata": {"path": str(path)}}).execute()
    wall = time.perf_counter() - start
    cells = {}
    for i, c in enumerate(c for c in nb.cells if c.cell_type == "code"):
        cells[c.metadata.get("nbgrader", {}).get("grade_id", f"cell {i}")] = cell_seconds(c)
    return wall, cells


def breakdown(runs):
    """Median seconds of: the set-up cell, the plot cell, every other cell together, and the
    run outside its cells (kernel start, messages, shutdown). The floor's one cell is its set-up."""
    med = statistics.median
    first = lambda cells: next(iter(cells))
    parts = {"setup": med([cells[first(cells)] for _, cells in runs]),
             "plot": med([cells.get("plot", 0) for _, cells in runs]),
             "other cells": med([sum(s for name, s in cells.items()
                                     if name not in (first(cells), "plot")) for _, cells in runs]),
             "kernel": med([wall - sum(cells.values()) for wall, cells in runs])}
    return "  ".join(f"{name} {seconds:.2f}" for name, seconds in parts.items())


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5, help="runs of each notebook (median used)")
    parser.add_argument("--lessons", nargs="+", default=list(LESSONS), choices=LESSONS)
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

    walls = {name: [wall for wall, _ in results] for name, results in runs.items()}
    floor = statistics.median(walls["floor"])
    print(f"{os.cpu_count()} cores, load average {load_before[0]:.2f} before, "
          f"{load_after[0]:.2f} after; {args.repeat} runs each, medians")
    print(f"{'floor':10s} {floor:5.2f} s  1.00x  ({FLOOR})  {breakdown(runs['floor'])}"
          f"  [{', '.join(f'{t:.2f}' for t in walls['floor'])}]")
    for lesson in args.lessons:
        median = statistics.median(walls[lesson])
        ratio = median / floor
        print(f"{lesson:10s} {median:5.2f} s  {ratio:4.2f}x  "
              f"({'within' if ratio <= TARGET else 'over'} {TARGET}x) {breakdown(runs[lesson])}"
              f"  [{', '.join(f'{t:.2f}' for t in walls[lesson])}]")


if __name__ == "__main__":
    main()
