"""How much memory one learner takes: run the lesson as a learner would and read /proc.

    python hub/measure_kernel_memory.py [--assignment multihead] [--json out.json]

Takes the student notebook (release/<assignment>/<assignment>.ipynb), puts the reference answer
(the source notebook's solution=true cell, markers removed) into the answer cell, and executes every
cell with nbclient in a fresh python3 kernel, keeping the kernel alive afterwards. Then it reads the
kernel process's memory from /proc/<pid>/smaps_rollup (RSS, PSS, USS) and /proc/<pid>/status
(VmHWM, the peak RSS). For the whole learner it also starts an idle Jupyter server (JupyterLab and
nbgrader's extensions loaded, one request for /lab served) and reads the same figures.

PSS splits shared pages (the Python and torch libraries) between the processes that map them, so
on a node where many learners run the same image, PSS is the fair per-learner share; RSS counts the
shared libraries in full for each learner (an upper bound), and USS (private pages only) is what
each further learner adds once the libraries are in memory (the lower bound). Linux only.
"""
import argparse
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import nbformat
from nbclient import NotebookClient

REPO = Path(__file__).resolve().parent.parent
MiB = 1024 * 1024


def memory(pid: int) -> dict:
    """RSS, PSS, USS (private) and the peak RSS of one process, in MiB."""
    fields = {}
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
        m = re.match(r"(\w+):\s+(\d+) kB", line)
        if m:
            fields[m.group(1)] = int(m.group(2)) * 1024
    status = Path(f"/proc/{pid}/status").read_text()
    hwm = int(re.search(r"VmHWM:\s+(\d+) kB", status).group(1)) * 1024
    return {
        "rss_mib": round(fields["Rss"] / MiB, 1),
        "pss_mib": round(fields["Pss"] / MiB, 1),
        "uss_mib": round((fields.get("Private_Clean", 0) + fields.get("Private_Dirty", 0)) / MiB, 1),
        "peak_rss_mib": round(hwm / MiB, 1),
    }


def answered_notebook(assignment: str):
    """The release notebook with the source notebook's reference answer in its answer cell."""
    src = nbformat.read(REPO / "source" / assignment / f"{assignment}.ipynb", as_version=4)
    nb = nbformat.read(REPO / "release" / assignment / f"{assignment}.ipynb", as_version=4)
    solutions = {c.metadata["nbgrader"]["grade_id"]: c.source for c in src.cells
                 if c.metadata.get("nbgrader", {}).get("solution")}
    filled = 0
    for cell in nb.cells:
        gid = cell.metadata.get("nbgrader", {}).get("grade_id")
        if gid in solutions:
            cell.source = "\n".join(l for l in solutions[gid].splitlines()
                                    if "### BEGIN SOLUTION" not in l and "### END SOLUTION" not in l)
            filled += 1
    assert filled == len(solutions) > 0, f"filled {filled} of {len(solutions)} answer cells"
    return nb


def measure_kernel(assignment: str) -> dict:
    nb = answered_notebook(assignment)
    with tempfile.TemporaryDirectory() as cwd:
        client = NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": cwd}})
        with client.setup_kernel():
            pid = client.km.provisioner.pid
            time.sleep(1)
            idle = memory(pid)
            t0 = time.time()
            for index, cell in enumerate(nb.cells):
                client.execute_cell(cell, index)
            seconds = time.time() - t0
            time.sleep(1)
            after = memory(pid)
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])
              if o.get("output_type") == "error"]
    assert not errors, f"the lesson raised: {errors[0].get('ename')}: {errors[0].get('evalue')}"
    return {"idle_kernel": idle, "kernel_after_lesson": after, "lesson_seconds": round(seconds, 1)}


def measure_server() -> dict:
    """An idle Jupyter server with JupyterLab and nbgrader's extensions, after serving /lab once."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with tempfile.TemporaryDirectory() as cwd:
        cmd = [sys.executable, "-m", "jupyter", "lab", "--no-browser", f"--port={port}", "--ip=127.0.0.1",
               "--IdentityProvider.token=measure", f"--ServerApp.root_dir={cwd}"]
        if os.geteuid() == 0:
            cmd.append("--allow-root")
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=cwd)
        try:
            deadline = time.time() + 120
            while True:
                try:
                    with urllib.request.urlopen(f"http://127.0.0.1:{port}/lab?token=measure", timeout=10) as r:
                        r.read()
                    break
                except OSError:
                    if time.time() > deadline or proc.poll() is not None:
                        raise RuntimeError("jupyter lab did not start")
                    time.sleep(0.5)
            time.sleep(2)
            return memory(proc.pid)
        finally:
            proc.terminate()
            proc.wait(timeout=30)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--assignment", default="multihead")
    ap.add_argument("--json", help="also write the figures to this file")
    args = ap.parse_args()
    import torch
    out = {"assignment": args.assignment, "python": sys.version.split()[0], "torch": torch.__version__,
           "torch_threads": torch.get_num_threads(), "cpus": os.cpu_count()}
    out.update(measure_kernel(args.assignment))
    out["idle_server"] = measure_server()
    k, s = out["kernel_after_lesson"], out["idle_server"]
    learner_pss = k["pss_mib"] + s["pss_mib"]
    learner_rss = k["rss_mib"] + s["rss_mib"]
    out["learner_pss_mib"] = round(learner_pss, 1)
    out["learner_rss_mib"] = round(learner_rss, 1)
    out["learner_uss_mib"] = round(k["uss_mib"] + s["uss_mib"], 1)
    out["kernels_per_gib_by_pss"] = round(1024 / k["pss_mib"], 1)
    out["learners_per_gib_by_pss"] = round(1024 / learner_pss, 1)
    out["learners_per_gib_by_rss"] = round(1024 / learner_rss, 1)
    out["learners_per_gib_by_uss"] = round(1024 / out["learner_uss_mib"], 1)
    print(json.dumps(out, indent=1))
    print(f"\none learner's kernel after the lesson: RSS {k['rss_mib']} MiB, PSS {k['pss_mib']} MiB, "
          f"USS {k['uss_mib']} MiB, peak RSS {k['peak_rss_mib']} MiB (lesson ran in {out['lesson_seconds']} s)")
    print(f"with their idle server (PSS {s['pss_mib']} MiB): {learner_pss:.0f} MiB by PSS -> "
          f"{out['learners_per_gib_by_pss']} learners per GiB; {learner_rss:.0f} MiB by RSS -> "
          f"{out['learners_per_gib_by_rss']} per GiB (shared libraries counted in full, the worst case); "
          f"{out['learner_uss_mib']:.0f} MiB by USS -> {out['learners_per_gib_by_uss']} per GiB "
          f"(each further learner once the libraries are shared)")
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
