"""How much memory one learner takes: run the lesson as a learner would and read /proc.

    python hub/measure_kernel_memory.py [--assignment multihead] [--json out.json]

Takes the student notebook (release/<assignment>/<assignment>.ipynb), puts the reference answer
(the source notebook's solution=true cell, markers removed) into the answer cell, and executes every
cell with nbclient in a fresh python3 kernel, keeping the kernel alive afterwards. Then it reads the
kernel process's memory from /proc/<pid>/smaps_rollup (RSS, PSS, USS) and /proc/<pid>/status
(VmHWM, the peak RSS). For the whole learner it also starts a Jupyter server (JupyterLab and
nbgrader's extensions loaded, one request for /lab served) and reads the same figures: that is the
steady learner, server + kernel after the whole lesson.

Then it presses Validate as the learner's JupyterLab does (POST /assignments/validate on that
server, nbgrader's handler): the server imports nbgrader's validator and runs the notebook again in
a second kernel while the first one stays. Every 0.2 s it adds up the PSS of the server, its
children (the validation kernel) and the lesson's kernel; the largest sum is the learner during
Validate. The validation must say the reference answer passes.

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
import threading
import time
import urllib.parse
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


def children(pid: int) -> list[int]:
    """Every descendant of pid (from /proc/<pid>/stat's parent field)."""
    parents = {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                parents[int(d.name)] = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (FileNotFoundError, ProcessLookupError, IndexError, ValueError):
                pass
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        kids = [c for c, parent in parents.items() if parent == p]
        out += kids
        todo += kids
    return out


def pss_uss(pid: int) -> tuple[float, float]:
    try:
        m = memory(pid)
        return m["pss_mib"], m["uss_mib"]
    except (FileNotFoundError, ProcessLookupError, AttributeError):
        return 0.0, 0.0


class JupyterServer:
    """JupyterLab with nbgrader's extensions on a free loopback port, serving folder."""

    def __init__(self, folder: str):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        cmd = [sys.executable, "-m", "jupyter", "lab", "--no-browser", f"--port={self.port}", "--ip=127.0.0.1",
               "--IdentityProvider.token=measure", f"--ServerApp.root_dir={folder}"]
        if os.geteuid() == 0:
            cmd.append("--allow-root")
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=folder)
        deadline = time.time() + 120
        while True:
            try:
                self.request("/lab")
                break
            except OSError:
                if time.time() > deadline or self.proc.poll() is not None:
                    raise RuntimeError("jupyter lab did not start")
                time.sleep(0.5)

    def request(self, path, data=None, timeout=10):
        req = urllib.request.Request(self.url + path, data=data, headers={"Authorization": "token measure"})
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.read()

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=30)


def measure(assignment: str) -> dict:
    """The lesson's kernel, the server, and the peak of both plus the validation kernel."""
    nb = answered_notebook(assignment)
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / f"{assignment}.ipynb"
        nbformat.write(nb, path)
        server = JupyterServer(folder)
        try:
            client = NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": folder}})
            with client.setup_kernel():
                kernel = client.km.provisioner.pid
                time.sleep(1)
                idle = memory(kernel)
                t0 = time.time()
                for index, cell in enumerate(nb.cells):
                    client.execute_cell(cell, index)
                seconds = time.time() - t0
                time.sleep(2)
                after, server_steady = memory(kernel), memory(server.proc.pid)
                errors = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])
                          if o.get("output_type") == "error"]
                assert not errors, f"the lesson raised: {errors[0].get('ename')}: {errors[0].get('evalue')}"
                validate = during_validate(server, path.name, kernel)
                time.sleep(2)            # the validation kernel is gone; the server keeps nbgrader loaded
                validate["after_validate"] = {"kernel": memory(kernel), "server": memory(server.proc.pid)}
        finally:
            server.stop()
    return {"idle_kernel": idle, "kernel_after_lesson": after, "lesson_seconds": round(seconds, 1),
            "idle_server": server_steady, **validate}


def during_validate(server: JupyterServer, notebook: str, kernel: int) -> dict:
    """Press Validate (nbgrader's handler) and sample the learner's PSS until it answers."""
    peak = {"learner_pss_mib": 0.0, "server_pss_mib": 0.0, "validate_kernel_pss_mib": 0.0, "learner_uss_mib": 0.0}
    done = threading.Event()

    def sample():
        while not done.is_set():
            kids = [k for k in children(server.proc.pid) if k != kernel]
            srv, extra, lesson = pss_uss(server.proc.pid), [pss_uss(k) for k in kids], pss_uss(kernel)
            total = srv[0] + sum(p for p, _ in extra) + lesson[0]
            private = srv[1] + sum(u for _, u in extra) + lesson[1]
            if total > peak["learner_pss_mib"]:
                peak.update(learner_pss_mib=round(total, 1), server_pss_mib=round(srv[0], 1),
                            validate_kernel_pss_mib=round(sum(p for p, _ in extra), 1))
            peak["learner_uss_mib"] = max(peak["learner_uss_mib"], round(private, 1))
            time.sleep(0.2)
    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    t0 = time.time()
    try:
        answer = json.loads(server.request("/assignments/validate", data=urllib.parse.urlencode(
            {"path": notebook}).encode(), timeout=900))
    finally:
        done.set()
        sampler.join()
    assert answer.get("success") and not answer["value"].get("failed") and not answer["value"].get("errored"), \
        f"Validate did not pass the reference answer: {str(answer)[:1500]}"
    return {"during_validate": peak, "validate_seconds": round(time.time() - t0, 1)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--assignment", default="multihead")
    ap.add_argument("--json", help="also write the figures to this file")
    args = ap.parse_args()
    import torch
    out = {"assignment": args.assignment, "python": sys.version.split()[0], "torch": torch.__version__,
           "torch_threads": torch.get_num_threads(), "cpus": os.cpu_count()}
    out.update(measure(args.assignment))
    k, s, v = out["kernel_after_lesson"], out["idle_server"], out["during_validate"]
    steady = k["pss_mib"] + s["pss_mib"]
    out["learner_pss_mib"] = round(steady, 1)
    out["learner_rss_mib"] = round(k["rss_mib"] + s["rss_mib"], 1)
    out["learner_uss_mib"] = round(k["uss_mib"] + s["uss_mib"], 1)
    out["learners_per_gib_by_pss"] = round(1024 / steady, 2)
    out["learners_per_gib_during_validate"] = round(1024 / v["learner_pss_mib"], 2)
    out["learners_per_gib_by_uss"] = round(1024 / out["learner_uss_mib"], 2)
    out["learners_per_gib_by_uss_during_validate"] = round(1024 / v["learner_uss_mib"], 2)
    a = out["after_validate"]
    after = a["kernel"]["pss_mib"] + a["server"]["pss_mib"]
    out["learner_pss_after_validate_mib"] = round(after, 1)
    out["learners_per_gib_after_validate"] = round(1024 / after, 2)
    print(json.dumps(out, indent=1))
    print(f"\none learner after the whole lesson: kernel PSS {k['pss_mib']} MiB (RSS {k['rss_mib']}, "
          f"USS {k['uss_mib']}, peak RSS {k['peak_rss_mib']}; lesson ran in {out['lesson_seconds']} s) + "
          f"server PSS {s['pss_mib']} MiB = {steady:.0f} MiB PSS -> {out['learners_per_gib_by_pss']} learners per GiB")
    print(f"during Validate (a second kernel, {out['validate_seconds']} s): peak {v['learner_pss_mib']} MiB PSS "
          f"(server {v['server_pss_mib']}, validation kernel {v['validate_kernel_pss_mib']}, lesson kernel) -> "
          f"{out['learners_per_gib_during_validate']} learners per GiB if all validate at once")
    print(f"after Validate (server keeps nbgrader loaded): {after:.0f} MiB PSS -> "
          f"{out['learners_per_gib_after_validate']} learners per GiB")
    print(f"private memory (USS: what each further learner adds once the libraries are in memory): "
          f"{out['learner_uss_mib']:.0f} MiB after the lesson -> {out['learners_per_gib_by_uss']} per GiB; "
          f"{v['learner_uss_mib']:.0f} MiB during Validate -> {out['learners_per_gib_by_uss_during_validate']} per GiB")
    print("PSS splits shared libraries among every process that maps them, on the whole machine: where other "
          "processes use the same venv, a learner's PSS is lower than when alone.")
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
