"""Make a throw-away course with a class of multihead submissions (used by grade_class.py and tests).

The answers are derived from the reference answer in source/ (the cell with grade_id
'multihead'), so they follow the lesson when it changes; a change that breaks a derivation
raises instead of silently producing a right answer under a wrong name.
"""
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

ASSIGNMENT = "multihead"
ANSWER_ID = "multihead"
REPO = Path(__file__).resolve().parent.parent


def _answer_cell(nb):
    for cell in nb["cells"]:
        if cell.get("metadata", {}).get("nbgrader", {}).get("grade_id") == ANSWER_ID:
            return cell
    raise LookupError(f"no cell with grade_id {ANSWER_ID!r}")


def reference_answer(source_nb_path):
    """The reference answer: the solution cell with the BEGIN/END SOLUTION marker lines dropped."""
    nb = json.loads(Path(source_nb_path).read_text())
    lines = "".join(_answer_cell(nb)["source"]).splitlines()
    return "\n".join(ln for ln in lines if not re.match(r"\s*### (BEGIN|END) SOLUTION", ln))


def _replace(text, pattern, repl, name):
    new, n = re.subn(pattern, repl, text)
    if n == 0:
        raise ValueError(f"cannot derive the {name!r} answer: {pattern!r} not in the reference")
    return new


def answers(reference):
    """Answer source per kind; None means the released stub (unanswered)."""
    return {
        "right": reference,
        # heads added up instead of laid side by side: [B, T, 16] reaches a Linear(32, 32)
        "summed": _replace(reference, r"torch\.cat\(\[(.*?)\],\s*dim=-1\)", r"sum(\1)", "summed"),
        # a plain list: the heads' weights are invisible to parameters()
        "plainlist": _replace(reference, r"nn\.ModuleList\((\[.*?\])\)", r"\1", "plainlist"),
        "unanswered": None,
        # a notebook that cannot be read at all
        "notjson": None,
        # an answer that dies when the cell runs
        "raises": "raise RuntimeError('broken submission')\n",
        # the right answer in a cell whose nbgrader metadata was damaged (graded, no points):
        # nbgrader reports an error for this submission and grades the others
        "badmeta": reference,
    }


KINDS = ("right", "summed", "plainlist", "unanswered")   # the mix the benchmark cycles through


def make_course(dest, course_src=REPO):
    """Copy nbgrader_config.py and source/ to dest and generate the assignment there."""
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    shutil.copy(Path(course_src) / "nbgrader_config.py", dest / "nbgrader_config.py")
    shutil.copytree(Path(course_src) / "source", dest / "source", dirs_exist_ok=True)
    subprocess.run([sys.executable, "-m", "nbgrader", "generate_assignment", ASSIGNMENT, "--force"],
                   cwd=dest, check=True, capture_output=True, env=_env())
    return dest


def _env():
    env = dict(os.environ)
    # nbgrader runs `alembic` by name: make this interpreter's bin directory come first
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    return env


def submit(course, student, kind):
    """Write submitted/<student>/multihead/multihead.ipynb: the release notebook with an answer."""
    course = Path(course)
    release = course / "release" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb"
    out = course / "submitted" / student / ASSIGNMENT / f"{ASSIGNMENT}.ipynb"
    out.parent.mkdir(parents=True, exist_ok=True)
    if kind == "notjson":
        out.write_text('{"cells": [ this is not json')
        return out
    nb = json.loads(release.read_text())
    src = answers(reference_answer(course / "source" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb"))[kind]
    if src is not None:
        _answer_cell(nb)["source"] = src
    if kind == "badmeta":
        _answer_cell(nb)["metadata"]["nbgrader"]["grade"] = True
    out.write_text(json.dumps(nb, indent=1))
    return out


def make_class(course, n, kinds=KINDS):
    """n submissions cycling through kinds; returns {student: kind}."""
    roster = {f"s{i:03d}_{kinds[i % len(kinds)]}": kinds[i % len(kinds)] for i in range(n)}
    for student, kind in roster.items():
        submit(course, student, kind)
    return roster


def env():
    return _env()


def gradebook_scores(course, assignment=ASSIGNMENT):
    """{(student, notebook, cell): (auto score, manual score, needs manual grade)} plus each
    answer cell's automatic comment, read with nbgrader's own Gradebook."""
    from nbgrader.api import Gradebook
    out = {}
    with Gradebook(f"sqlite:///{Path(course).resolve() / 'gradebook.db'}", "tinygpt") as gb:
        for sub in gb.find_assignment(assignment).submissions:
            for nb in sub.notebooks:
                for g in nb.grades:
                    out[(sub.student.id, nb.name, g.name)] = (g.auto_score, g.manual_score, g.needs_manual_grade)
                for c in nb.comments:
                    out[(sub.student.id, nb.name, c.name, "comment")] = c.auto_comment
    return out


def totals(scores):
    """{student: total automatic score} from gradebook_scores()."""
    tot = {}
    for key, val in scores.items():
        if len(key) == 3:
            tot[key[0]] = tot.get(key[0], 0) + (val[0] or 0)
    return tot


def autograded_notebooks(course, assignment=ASSIGNMENT):
    """{student: the autograded notebook reduced to what grading decides}: per cell its type,
    source, nbgrader metadata and text outputs (stream text, with consecutive pieces of one
    stream joined as Jupyter shows them; error name and value; text/plain)."""
    import nbformat
    out = {}
    for path in sorted(Path(course, "autograded").glob(f"*/{assignment}/*.ipynb")):
        nb = nbformat.read(path, as_version=4)
        cells = []
        for cell in nb.cells:
            outs = []
            for o in cell.get("outputs", []):
                if o.output_type == "stream" and outs and outs[-1][0] == o.name:
                    # the kernel flushes a print in one piece or two, as it happens: join them
                    outs[-1] = (o.name, outs[-1][1] + o.text)
                elif o.output_type == "stream":
                    outs.append((o.name, o.text))
                elif o.output_type == "error":
                    outs.append((o.ename, o.evalue))
                else:
                    outs.append((o.output_type, o.get("data", {}).get("text/plain")))
            cells.append((cell.cell_type, cell.source, dict(cell.metadata.get("nbgrader", {})), outs))
        out[path.parts[-3]] = cells
    return out


def differences(a, b, limit=5):
    """Where two autograded_notebooks() results differ, as readable lines (at most limit)."""
    lines = []
    for student in sorted(set(a) | set(b)):
        x, y = a.get(student), b.get(student)
        if x == y:
            continue
        if x is None or y is None or len(x) != len(y):
            lines.append(f"{student}: {'no notebook' if x is None else len(x)} vs "
                         f"{'no notebook' if y is None else len(y)} cells")
            continue
        for i, (cx, cy) in enumerate(zip(x, y)):
            if cx != cy:
                field = next(j for j in range(4) if cx[j] != cy[j])
                what = ("cell type", "source", "nbgrader metadata", "outputs")[field]
                vx, vy = cx[field], cy[field]
                if field == 3:      # the first output that differs
                    k = next((k for k in range(max(len(vx), len(vy)))
                              if k >= min(len(vx), len(vy)) or vx[k] != vy[k]), 0)
                    what, vx, vy = f"output {k}", vx[k:k + 1], vy[k:k + 1]
                lines.append(f"{student} cell {i} {what}: {vx!r:.400} vs {vy!r:.400}")
    return lines[:limit]
