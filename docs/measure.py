"""Measure what the teacher's guide states as measured, on this machine, and write
docs/measured.json (the guide generator reads it; docs/README.md says how each figure was made).

    python docs/measure.py                 # both measurements
    python docs/measure.py --only grading  # or: --only lessons

- grading: a temporary course with every lesson in source/; N copies of each lesson's solution
  submitted; `nbgrader autograde <lesson>` (the real command, this repository's
  nbgrader_config.py) run for each lesson in turn, `--rounds` times, the order reversed every
  other round, so every lesson meets the same machine load. Per lesson: the median wall seconds per submission and
  its ratio to multihead's. (Not CPU time: the kernels and re-runs run in bubblewrap sandboxes
  that nbgrader's process does not reap, so getrusage misses them.)
- service: the grading service (issue 30) on this machine, by bench/grading_service.py (--json):
  its memory and CPU left alone once warm, its peak memory and CPU per submission while grading
  learners one after another and a burst of them, each beside stock nbgrader's; the figures the
  guide's "Grading on submit" section states (what the service costs a hub).
- lessons: each source notebook executed headless as a learner runs it (nbclient, Run All),
  timing the whole run and the training cell, with the CPU seconds of the training cell; plus
  what a learner reads and writes: the words of its markdown and the lines of its answer.
"""
import argparse
import json
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

import nbformat

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "docs" / "measured.json"
BIN = Path(sys.executable).parent


def lessons():
    return sorted(p.name for p in (REPO / "source").iterdir() if (p / f"{p.name}.ipynb").exists())


def solution_cell(nb):
    return next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("solution") and c.cell_type == "code")


def measure_grading(n, rounds):
    env = {"PATH": f"{BIN}:/usr/bin:/bin"}
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        course = Path(tmp)
        shutil.copy(REPO / "nbgrader_config.py", course)
        for lesson in lessons():
            shutil.copytree(REPO / "source" / lesson, course / "source" / lesson)
            subprocess.run([BIN / "nbgrader", "generate_assignment", lesson, "--force"], cwd=course,
                           env=env, check=True, capture_output=True)
        for r in range(rounds):
            order = lessons() if r % 2 == 0 else lessons()[::-1]   # ABBA: no lesson always runs first
            for lesson in order:
                src = nbformat.read(REPO / "source" / lesson / f"{lesson}.ipynb", 4)
                answer = re.sub(r"\s*### (BEGIN|END) SOLUTION", "", solution_cell(src).source)
                for i in range(n):
                    nb = nbformat.read(course / "release" / lesson / f"{lesson}.ipynb", 4)
                    solution_cell(nb).source = answer
                    folder = course / "submitted" / f"s{i}" / lesson
                    folder.mkdir(parents=True, exist_ok=True)
                    nbformat.write(nb, folder / f"{lesson}.ipynb")
                start = time.perf_counter()
                proc = subprocess.run([BIN / "nbgrader", "autograde", lesson, "--create", "--force"], cwd=course,
                                      env=env, capture_output=True, text=True)
                wall = time.perf_counter() - start
                if proc.returncode:
                    raise SystemExit(f"autograde {lesson} failed:\n{proc.stderr[-2000:]}")
                results.setdefault(lesson, []).append({"wall_s": wall / n})
                print(f"round {r + 1} {lesson}: {wall / n:.1f} s wall per submission", flush=True)
    med = {lesson: {"wall_s": statistics.median(x["wall_s"] for x in runs)}
           for lesson, runs in results.items()}
    base = med["multihead"]
    return {"submissions_per_run": n, "rounds": rounds, "per_submission": med,
            "ratio_to_multihead": {lesson: {k: m[k] / base[k] for k in m} for lesson, m in med.items()}}


def measure_lessons():
    from nbclient import NotebookClient
    out = {}
    for lesson in lessons():
        path = REPO / "source" / lesson / f"{lesson}.ipynb"
        nb = nbformat.read(path, 4)
        words = sum(len(re.sub(r"```.*?```", "", c.source, flags=re.S).split()) for c in nb.cells if c.cell_type == "markdown")
        answer = re.sub(r"\s*### (BEGIN|END) SOLUTION", "", solution_cell(nb).source)
        stub = re.sub(r"### BEGIN SOLUTION.*?### END SOLUTION", "", solution_cell(nb).source, flags=re.S)
        written = len([ln for ln in answer.splitlines() if ln.strip() and not ln.strip().startswith("#")]) - len(
            [ln for ln in stub.splitlines() if ln.strip() and not ln.strip().startswith("#")])
        training = next((c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == "training"), None)
        if training is not None:   # the training cell reports its own CPU time
            training.source = "import time as _t\n_cpu = _t.process_time()\n" + training.source + \
                "\nprint('@@CPU@@', _t.process_time() - _cpu)"
        start = time.perf_counter()
        NotebookClient(nb, timeout=900, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}}).execute()
        wall = time.perf_counter() - start
        entry = {"markdown_words": words, "answer_lines": written, "run_s": wall}
        if training is not None:
            text = "".join(o.get("text", "") for o in training.outputs if o.output_type == "stream")
            entry["training_cpu_s"] = float(text.split("@@CPU@@")[1].split()[0])
            t = training.metadata.get("execution", {})
            parse = lambda s: datetime.fromisoformat(s.replace("Z", "+00:00"))  # noqa: E731
            entry["training_wall_s"] = (parse(t["shell.execute_reply"]) - parse(t["iopub.execute_input"])).total_seconds()
        out[lesson] = entry
        print(lesson, entry, flush=True)
    return out


def measure_service(n, burst):
    """bench/grading_service.py's figures (it prints its full report as it runs)."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "service.json"
        proc = subprocess.run([sys.executable, str(REPO / "bench" / "grading_service.py"), "--n", str(n),
                               "--burst", str(burst), "--json", str(out)], cwd=REPO)
        if proc.returncode:
            raise SystemExit(f"bench/grading_service.py exited {proc.returncode}: its figures are not kept")
        return json.loads(out.read_text())


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--only", choices=("grading", "lessons", "service"))
    p.add_argument("--n", type=int, default=6, help="submissions per lesson and run (default 6)")
    p.add_argument("--rounds", type=int, default=2, help="alternating rounds (default 2)")
    p.add_argument("--learners", type=int, default=9,
                   help="service: learners submitting one after another (default 9)")
    p.add_argument("--burst", type=int, default=24, help="service: learners submitting in a burst (default 24)")
    args = p.parse_args(argv)
    data = json.loads(OUT.read_text()) if OUT.exists() else {}
    if args.only in (None, "lessons"):
        data["lessons"] = measure_lessons()
    if args.only in (None, "grading"):
        data["grading"] = measure_grading(args.n, args.rounds)
    if args.only in (None, "service"):
        data["service"] = measure_service(args.learners, args.burst)      # dated on its own
    if args.only == "service":
        OUT.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
        print(OUT)
        return
    import os
    data["machine"] = {"cores": os.cpu_count(), "load_average_at_end": os.getloadavg()[0],
                       "date": datetime.now().strftime("%Y-%m-%d")}
    OUT.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    print(OUT)


if __name__ == "__main__":
    sys.exit(main())
