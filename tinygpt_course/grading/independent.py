"""Independent checks: the learner's code cannot change the verdict of a graded check.

Stock nbgrader runs the hidden tests in the learner's kernel, after the learner's code, which
can replace ``torch.allclose``, rewrite later cells or print the expected lines. This step runs
after nbgrader's Execute. It re-runs the learner's answer cell in a fresh process (the trusted
set-up cells from source/, a scratch folder, no access to the course folder, fixed weights from
a seed drawn now), judges the record in this process, which never ran learner code, and
withdraws the points of every check the independent run does not confirm.
"""
import multiprocessing
import os
import secrets
import tempfile

import nbformat
from nbformat.v4 import new_output
from traitlets import Integer

from nbgrader.coursedir import CourseDirectory
from nbgrader.preprocessors import NbGraderPreprocessor
from nbgrader.utils import is_grade, is_solution

from . import sandbox
from .lesson import answer_sources, checks_module, run_trusted, test_ids, trusted_sources

FLAG = "IndependentCheckFailed"


def off_limits(coursedir):
    """What the learner's re-run may not read: instructor files, other learners' work."""
    root = coursedir.root
    paths = [os.path.join(root, d) for d in (coursedir.source_directory, coursedir.submitted_directory,
                                             coursedir.autograded_directory, coursedir.feedback_directory)]
    paths += [os.path.join(root, "gradebook.db"), os.path.join(root, "nbgrader_config.py")]
    if coursedir.db_url.startswith("sqlite:///"):
        paths.append(coursedir.db_url[len("sqlite:///"):])
    return paths


class IndependentChecks(NbGraderPreprocessor):
    timeout = Integer(120, help="Seconds the independent re-run may take").tag(config=True)
    memory_limit_mb = Integer(6144, help="Address-space cap for the re-run, in MB").tag(config=True)

    def preprocess(self, nb, resources):
        info = resources["nbgrader"]
        coursedir = CourseDirectory(config=self.config)
        source_path = os.path.join(coursedir.format_path(coursedir.source_directory, ".", info["assignment"]),
                                   info["notebook"] + ".ipynb")
        source = nbformat.read(source_path, as_version=4)
        module = checks_module(source)
        if module is None:
            return nb, resources
        verdicts = self.verdicts(source, module, answer_sources(source, nb), off_limits(coursedir))
        resources.setdefault("tinygpt", {})["verdicts"] = verdicts
        flagged = []
        for cell in nb.cells:
            gid = cell.metadata.get("nbgrader", {}).get("grade_id")
            if not (is_grade(cell) and not is_solution(cell) and gid in verdicts):
                continue
            ok, message = verdicts[gid]
            kernel_ok = not any(o.output_type == "error" for o in cell.outputs)
            if not ok and kernel_ok:
                flagged.append(gid)
                why = f"this check passed in your notebook but not when your answer was re-run on its own: {message}"
                cell.outputs.append(new_output("error", ename=FLAG, evalue=why, traceback=[f"{FLAG}: {why}"]))
        resources["tinygpt"]["flagged"] = flagged
        if flagged:
            self.log.warning("FLAGGED %s/%s: %s passed in the learner's kernel but not in the "
                             "independent re-run", info["student"], info["assignment"], ", ".join(flagged))
        return nb, resources

    def verdicts(self, source, module, answers, blocked):
        """{check id: (passed, message)} from the sandboxed extract and the local judge."""
        ids = test_ids(source)
        answer = next(iter(answers.values()), None)
        with tempfile.TemporaryDirectory(prefix="tinygpt-rerun-") as scratch:
            out = os.path.join(scratch, "record.pt")
            job = {"checks": module.__name__, "trusted": trusted_sources(source), "answer": answer,
                   "seed": secrets.randbelow(2 ** 31), "out": out,
                   "blocked": blocked}
            failure = self._run_sandbox(job, scratch)
            if failure:
                return {gid: (False, failure) for gid in ids}
            import torch
            try:
                rec = torch.load(out, weights_only=True)
                assert isinstance(rec, dict)
            except Exception as exc:
                return {gid: (False, f"the re-run left no readable result ({exc})") for gid in ids}
        ns = run_trusted(source)
        result = {}
        for gid in ids:
            try:
                result[gid] = tuple(module.judge_ns(ns, gid, rec))
            except Exception as exc:  # a malformed record is the submission's fault, not a crash
                result[gid] = (False, f"the re-run's result could not be checked ({type(exc).__name__}: {exc})")
        return result

    def _run_sandbox(self, job, scratch):
        """Run the re-run in a process forked from a forkserver with torch imported; None, or
        what went wrong in the learner's terms."""
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": scratch, "TMPDIR": scratch,
               "MPLBACKEND": "Agg", "PYTHONDONTWRITEBYTECODE": "1",
               "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
        job = dict(job, scratch=scratch)
        proc = _forkserver().Process(target=sandbox.child, args=(job, env, self.memory_limit_mb * 2 ** 20))
        proc.start()
        proc.join(self.timeout)
        if proc.is_alive():
            proc.kill()
            proc.join()
            return f"your answer, re-run on its own, ran past the {self.timeout} s limit (an endless loop?)"
        if proc.exitcode != 0 or not os.path.exists(job["out"]):
            output = os.path.join(scratch, "output.txt")
            lines = open(output, errors="replace").read().strip().splitlines() if os.path.exists(output) else []
            tail = lines[-1] if lines else "no message"
            if "MemoryError" in tail or "can't allocate memory" in tail:
                return "your answer, re-run on its own, ran out of memory"
            return f"your answer, re-run on its own, stopped with exit code {proc.exitcode}: {tail[:300]}"
        return None


_context = None


def _forkserver():
    """One forkserver per grader process, started with torch imported: each re-run is a fork of
    a clean process that never ran learner code, without paying torch's import again."""
    global _context
    if _context is None:
        _context = multiprocessing.get_context("forkserver")
        _context.set_forkserver_preload(["torch", "tinygpt_course.grading.sandbox"])
    return _context


class RecordFlags(NbGraderPreprocessor):
    """After SaveAutoGrades: write why a submission was flagged into the gradebook."""

    def preprocess(self, nb, resources):
        flagged = resources.get("tinygpt", {}).get("flagged")
        if not flagged:
            return nb, resources
        from nbgrader.api import Gradebook
        info = resources["nbgrader"]
        verdicts = resources["tinygpt"]["verdicts"]
        text = "FLAGGED by the independent re-run: " + "; ".join(
            f"{gid} passed in the learner's kernel but not on its own ({verdicts[gid][1]})" for gid in flagged)
        with Gradebook(info["db_url"]) as gb:
            for cell in nb.cells:
                if is_solution(cell) and cell.cell_type == "code":
                    comment = gb.find_comment(cell.metadata.nbgrader["grade_id"], info["notebook"],
                                              info["assignment"], info["student"])
                    comment.auto_comment = text
                    gb.db.commit()
                    break
        return nb, resources
