"""What a learner sees, run for real: a lesson's release notebook with an answer typed in, run
through nbgrader's Validate (what the Validate button runs), which executes every cell in order:
the first cell that raised is where JupyterLab's Run All stops.

Used by tests/test_validate.py, and as a script that counts, for a checkout of the course, the
catalogue mistakes that get an honest Validate verdict and no raw traceback in the runner:

    python tests/learner_runs.py [--repo DIR] [lesson ...]

(for another checkout, put it first on PYTHONPATH so its tinygpt_course is the one imported).
"""
import argparse
import ast
import importlib.util
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import nbformat

HERE = Path(__file__).resolve().parent
BIN = Path(sys.executable).parent
SUCCESS = "Success! Your notebook passes all the tests."
ANSWER_ID = {"multihead": "multihead", "head": "head", "block": "block"}
SOLUTION = re.compile(r"^[ \t]*### (BEGIN|END) SOLUTION\n", re.M)


def grade_id(cell):
    return cell.metadata.get("nbgrader", {}).get("grade_id")


def run_env(repo):
    env = dict(os.environ)
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    env["PYTHONPATH"] = os.pathsep.join([str(repo)] + [p for p in [env.get("PYTHONPATH")] if p])
    return env


def learner_notebook(repo, lesson, answer):
    """The release notebook of `lesson` with `answer` typed into its answer cell."""
    nb = nbformat.read(Path(repo) / "release" / lesson / f"{lesson}.ipynb", as_version=4)
    cell = next(c for c in nb.cells if grade_id(c) == ANSWER_ID[lesson])
    cell.source = answer
    return nb


def solution(repo, lesson):
    """The source notebook's answer cell without nbgrader's solution markers."""
    nb = nbformat.read(Path(repo) / "source" / lesson / f"{lesson}.ipynb", as_version=4)
    return SOLUTION.sub("", next(c for c in nb.cells if grade_id(c) == ANSWER_ID[lesson]).source)


def validate(repo, nb, folder, timeout=30):
    """nbgrader's Validate on nb, saved in folder (a learner's folder: no course config), as the
    Validate button runs it: nbgrader's Validator in one process (here a fresh one, with `repo`'s
    tinygpt_course). Returns (the report `nbgrader validate` prints, the notebook as Validate
    executed it). nb.metadata['stopped_at'] is the grade_id of the first cell that raised: where
    JupyterLab's Run All, which runs the same cells in the same order, stops (None: nowhere)."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "lesson.ipynb"
    nbformat.write(nb, path)
    subprocess.run([sys.executable, __file__, "--validate-one", str(path), "--timeout", str(timeout)],
                   cwd=folder, env=run_env(repo), capture_output=True, text=True, timeout=1800)
    executed = nbformat.read(str(path) + ".executed.ipynb", as_version=4)
    executed.metadata["stopped_at"] = stopped_at(executed)
    return Path(str(path) + ".report.txt").read_text(), executed


def stopped_at(nb):
    """The grade_id of the first code cell that raised, or of the last one that started before
    the kernel died (the cells after it never ran)."""
    started = None
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        if cell.get("execution_count") is None:
            return grade_id(started or cell)
        if any(o.output_type == "error" for o in cell.outputs):
            return grade_id(cell)
        started = cell
    return None


def _validate_one(path, timeout):
    """In a fresh process: Validator.validate_and_print on path, keeping what it executed."""
    import io
    from traitlets.config import Config
    from nbgrader.validator import Validator

    class Keeping(Validator):
        def _preprocess(self, nb):
            self.executed = nb            # the preprocessors work on it in place: kept even if one fails
            return super()._preprocess(nb)
    validator = Keeping(config=Config({"Execute": {"timeout": timeout}}))
    validator.stream = io.StringIO()
    validator.executed = None
    try:
        validator.validate_and_print(path)
    except Exception as exc:             # what the Validate dialog shows then: nbgrader's error
        validator.stream.write(f"nbgrader validate failed: {type(exc).__name__}: {exc}\n")
    Path(path + ".report.txt").write_text(validator.stream.getvalue())
    nbformat.write(validator.executed or nbformat.read(path, as_version=4), path + ".executed.ipynb")


def errors(nb, gid):
    cell = next(c for c in nb.cells if grade_id(c) == gid)
    return [o for o in cell.outputs if o.output_type == "error"]


def text(nb, gid):
    cell = next(c for c in nb.cells if grade_id(c) == gid)
    return "".join(o.get("text", "") for o in cell.outputs if o.output_type == "stream")


def catalogue_mistakes(repo):
    """multihead: (name, answer) of every catalogue mistake (not right, not tampering, plain notebook)."""
    spec = importlib.util.spec_from_file_location("catalogue_parse", Path(repo) / "tests" / "test_catalogue.py")
    sys.path.insert(0, str(Path(repo) / "tests"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    right, wrong = [], []
    for path in module.CATALOGUE:
        expect, why, transform, answer = module.parse(path)
        if transform or why.startswith(("tampering", "attack", "spoof")):   # mistakes only
            continue
        full = all(points > 0 for points in expect.values())
        (right if full else wrong).append((path.stem, answer))
    return right, wrong


def literal(path, name):
    """The literal value assigned to `name` in a Python file (read, never run)."""
    tree = ast.parse(Path(path).read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == name for t in node.targets):
            return ast.literal_eval(node.value)
    raise KeyError(f"{path} assigns no {name}")


def wrong_and_right(path):
    """WRONG and RIGHT of tests/test_lessons_head_block.py: imported, or read as literals where the
    module cannot be imported (an older checkout)."""
    try:
        sys.path.insert(0, str(Path(path).parent))
        spec = importlib.util.spec_from_file_location("lessons_head_block", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module.WRONG, module.RIGHT
    except ImportError:
        return literal(path, "WRONG"), literal(path, "RIGHT")


def head_block_diagnoses(repo, lesson):
    """{wrong answer's name: the words its failing check must say} for head/block."""
    found = {}
    for les, what, *_, diagnosis in wrong_and_right(Path(repo) / "tests" / "test_lessons_head_block.py")[0]:
        if les == lesson:
            found.setdefault(what, diagnosis)
    return found


def head_block_mistakes(repo, lesson):
    """head/block: (name, answer) of every distinct wrong answer in tests/test_lessons_head_block.py,
    and the right ones (the solution, and RIGHT's answers in other words)."""
    path = Path(repo) / "tests" / "test_lessons_head_block.py"
    base = solution(repo, lesson)
    seen, wrong = set(), []
    all_wrong, all_right = wrong_and_right(path)
    for les, what, old, new, *_ in all_wrong:
        if les == lesson and (old, new) not in seen and base.count(old) == 1:
            seen.add((old, new))
            wrong.append((what, base.replace(old, new)))
    right = [("reference", base)] + [(what, base.replace(old, new)) for les, what, old, new in all_right
                                      if les == lesson and base.count(old) == 1]
    return right, wrong


def measure(repo, lesson, answers, work):
    rows = []
    for name, answer in answers:
        out, ran = validate(repo, learner_notebook(repo, lesson, answer), Path(work) / lesson / name)
        runner_errors = errors(ran, "runner")
        rows.append({"name": name, "success": SUCCESS in out, "runner_traceback": bool(runner_errors),
                     "stopped_at": ran.metadata.get("stopped_at"), "validate": out})
        print(f"  {lesson:9} {name:40} validate={'Success' if SUCCESS in out else 'failed '} "
              f"runner_traceback={bool(runner_errors)} run_all_stopped_at={ran.metadata.get('stopped_at')}",
              flush=True)
    return rows


def main(argv=None):
    p = argparse.ArgumentParser()
    p.add_argument("--validate-one", help=argparse.SUPPRESS)
    p.add_argument("--timeout", type=int, default=30, help=argparse.SUPPRESS)
    p.add_argument("--repo", default=str(HERE.parent))
    p.add_argument("--out", default=None, help="write the rows as JSON here")
    p.add_argument("lessons", nargs="*", default=["multihead", "head", "block"])
    args = p.parse_args(argv)
    if args.validate_one:
        return _validate_one(args.validate_one, args.timeout)
    report = {}
    with tempfile.TemporaryDirectory() as work:
        for lesson in args.lessons:
            right, wrong = catalogue_mistakes(args.repo) if lesson == "multihead" else head_block_mistakes(args.repo, lesson)
            r_rows = measure(args.repo, lesson, right, work)
            w_rows = measure(args.repo, lesson, wrong, work)
            good = [r for r in w_rows if not r["success"] and not r["runner_traceback"]]
            report[lesson] = {"right": r_rows, "wrong": w_rows}
            print(f"{lesson}: {len(good)}/{len(w_rows)} mistakes get a failing Validate and no runner "
                  f"traceback; {sum(r['success'] for r in r_rows)}/{len(r_rows)} right answers get Success",
                  flush=True)
    if args.out:
        Path(args.out).write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
