"""What a learner sees, run for real: a lesson's release notebook with an answer typed in, run
through nbgrader's Validate (what the Validate button runs), which executes every cell in order:
the first cell that raised is where JupyterLab's Run All stops.

Used by tests/test_validate.py, and as a script that counts, for a checkout of the course, the
catalogue's mistakes that get an honest Validate verdict and no raw traceback in the runner:

    python -m tinygpt_course.testing.learner [--repo DIR] [lesson ...]

(--repo: another checkout with the same catalogue layout; its tinygpt_course is the one the
notebooks import).
"""
import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import nbformat

from . import catalogue
from .course import BIN, REPO
from .notebooks import cell, grade_id, printed, release_path, with_answer

SUCCESS = "Success! Your notebook passes all the tests."
LESSONS = ("multihead", "head", "block")     # the lessons whose runner Validate runs (gpt trains)

# Run in a fresh process with the checkout's tinygpt_course: nbgrader's Validator as the Validate
# button runs it, keeping the notebook it executed (the preprocessors work on it in place, so it
# is kept even when one of them fails) and the report it printed.
VALIDATE_ONE = r'''
import io, sys
import nbformat
from traitlets.config import Config
from nbgrader.validator import Validator

path, timeout = sys.argv[1], int(sys.argv[2])

class Keeping(Validator):
    def _preprocess(self, nb):
        self.executed = nb
        return super()._preprocess(nb)

# the kernel's sockets are files in this run's own folder (its cwd), not tcp ports: over tcp
# jupyter_client picks free ports that the kernel binds only later, and a kernel started beside
# it may take one first; the kernel then dies before kernel_info (jupyter/jupyter_client#154;
# 1 of 240 kernels started six at a time died so here, 0 of 240 over ipc)
validator = Keeping(config=Config({"Execute": {"timeout": timeout}, "KernelManager": {"transport": "ipc"}}))
validator.stream, validator.executed = io.StringIO(), None
try:
    validator.validate_and_print(path)
except Exception as exc:             # what the Validate dialog shows then: nbgrader's error
    validator.stream.write(f"nbgrader validate failed: {type(exc).__name__}: {exc}\n")
open(path + ".report.txt", "w").write(validator.stream.getvalue())
nbformat.write(validator.executed or nbformat.read(path, as_version=4), path + ".executed.ipynb")
'''


def run_env(repo):
    env = dict(os.environ)
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    env["PYTHONPATH"] = os.pathsep.join([str(repo)] + [p for p in [env.get("PYTHONPATH")] if p])
    return env


def learner_notebook(repo, lesson, answer):
    """The release notebook of `lesson` with `answer` typed into its answer cell."""
    return with_answer(release_path(lesson, repo), answer, lesson)


def runs(lesson, repo=REPO):
    """The catalogue answers a learner could type and Validate: right ones, mistakes and crashes
    in an untouched notebook (not the tampering, the attacks nor the notebook surgery)."""
    return [a for a in catalogue.answers(lesson, Path(repo) / "tests" / "catalogue")
            if a.notebook is None and a.sort in ("right", "mistake", "crash")]


def validate(repo, nb, folder, timeout=30, whole=600):
    """nbgrader's Validate on nb, saved in folder (a learner's folder: no course config), as the
    Validate button runs it: nbgrader's Validator in one process (here a fresh one, with `repo`'s
    tinygpt_course). Returns (the report `nbgrader validate` prints, the notebook as Validate
    executed it). nb.metadata['stopped_at'] is the grade_id of the first cell that raised: where
    JupyterLab's Run All, which runs the same cells in the same order, stops (None: nowhere).

    `timeout` is each cell's (the Validator's own); `whole` bounds the run. The kernel talks over
    ipc in `folder`, where the button's server uses tcp (why: VALIDATE_ONE). The run is a session
    of its own and its output goes to files, not pipes: when it ends, anything it left (a kernel
    whose shutdown failed, a process the answer started) is killed with it, and cannot keep the
    caller waiting for the end of a pipe. A run that outlives `whole` is killed, and its report
    says so, with the Validator's own stderr: that answer's tests fail, no other's."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "lesson.ipynb"
    nbformat.write(nb, path)
    log = folder / "validate.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-c", VALIDATE_ONE, str(path), str(timeout)], cwd=folder,
                                env=run_env(repo), stdin=subprocess.DEVNULL, stdout=out, stderr=out,
                                start_new_session=True)
        try:
            proc.wait(timeout=whole)
            stuck = False
        except subprocess.TimeoutExpired:
            stuck = True
        finally:
            try:
                os.killpg(proc.pid, signal.SIGKILL)    # the run's session: whatever is left of it
            except ProcessLookupError:
                pass
            proc.wait()
    report, executed = Path(str(path) + ".report.txt"), Path(str(path) + ".executed.ipynb")
    if stuck or not (report.exists() and executed.exists()):
        why = f"did not finish within {whole} s" if stuck else f"ended with code {proc.returncode}"
        tail = log.read_text(errors="replace")[-4000:]
        return f"the test's validate run {why} and wrote no report; its stderr ends:\n{tail}", \
            _unexecuted(nb)
    executed = nbformat.read(executed, as_version=4)
    executed.metadata["stopped_at"] = stopped_at(executed)
    return report.read_text(), executed


def _unexecuted(nb):
    nb = nbformat.from_dict(nb)
    nb.metadata["stopped_at"] = "validate did not finish"
    return nb


def stopped_at(nb):
    """The grade_id of the first code cell that raised, or of the last one that started before
    the kernel died (the cells after it never ran)."""
    started = None
    for c in nb.cells:
        if c.cell_type != "code":
            continue
        if c.get("execution_count") is None:
            return grade_id(started or c)
        if any(o.output_type == "error" for o in c.outputs):
            return grade_id(c)
        started = c
    return None


def errors(nb, gid):
    return [o for o in cell(nb, gid).outputs if o.output_type == "error"]


def text(nb, gid):
    return printed(cell(nb, gid))


def measure(repo, lesson, answers, work):
    rows = []
    for a in answers:
        out, ran = validate(repo, learner_notebook(repo, lesson, a.code), Path(work) / lesson / a.name)
        runner_errors = errors(ran, "runner")
        rows.append({"name": a.name, "success": SUCCESS in out, "runner_traceback": bool(runner_errors),
                     "stopped_at": ran.metadata.get("stopped_at"), "validate": out})
        print(f"  {lesson:9} {a.name:40} validate={'Success' if SUCCESS in out else 'failed '} "
              f"runner_traceback={bool(runner_errors)} run_all_stopped_at={ran.metadata.get('stopped_at')}",
              flush=True)
    return rows


def main(argv=None):
    p = argparse.ArgumentParser(description="Count the catalogue's mistakes that Validate names honestly.")
    p.add_argument("--repo", default=str(REPO))
    p.add_argument("--out", default=None, help="write the rows as JSON here")
    p.add_argument("lessons", nargs="*", default=list(LESSONS))
    args = p.parse_args(argv)
    report = {}
    with tempfile.TemporaryDirectory() as work:
        for lesson in args.lessons:
            answers = runs(lesson, args.repo)
            r_rows = measure(args.repo, lesson, [a for a in answers if a.sort == "right"], work)
            w_rows = measure(args.repo, lesson, [a for a in answers if a.sort != "right"], work)
            good = [r for r in w_rows if not r["success"] and not r["runner_traceback"]]
            report[lesson] = {"right": r_rows, "wrong": w_rows}
            print(f"{lesson}: {len(good)}/{len(w_rows)} mistakes get a failing Validate and no runner "
                  f"traceback; {sum(r['success'] for r in r_rows)}/{len(r_rows)} right answers get Success",
                  flush=True)
    if args.out:
        Path(args.out).write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
