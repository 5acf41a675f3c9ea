"""Headless execution time of the whole multihead lesson against the floor: a notebook that
only imports torch, matplotlib and ipywidgets. Both run in this one process, alternating, so
the ratio compares like with like on this machine.

    python bench/lesson_time.py --repeat 3
"""
import argparse
import statistics
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient
from nbformat.v4 import new_code_cell, new_notebook
from tqdm import tqdm

LESSON = Path(__file__).resolve().parents[1] / "source" / "multihead" / "multihead.ipynb"


def run(nb, path):
    start = time.perf_counter()
    NotebookClient(nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(path)}}).execute()
    return time.perf_counter() - start


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    floor_nb = new_notebook(cells=[new_code_cell("import torch, matplotlib.pyplot, ipywidgets")])
    lesson, floor = [], []
    for _ in tqdm(range(args.repeat), desc="lesson vs imports-only"):
        floor.append(run(nbformat.from_dict(floor_nb), LESSON.parent))
        lesson.append(run(nbformat.read(LESSON, 4), LESSON.parent))
    ml, mf = statistics.median(lesson), statistics.median(floor)
    print(f"whole lesson: median {ml:.2f} s  {[round(t, 2) for t in lesson]}")
    print(f"imports only: median {mf:.2f} s  {[round(t, 2) for t in floor]}")
    print(f"ratio: {ml / mf:.2f}x")


if __name__ == "__main__":
    main()
