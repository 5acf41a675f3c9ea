"""The learner's side runs on a machine without Linux's grading parts (a Mac, Windows under WSL
without bubblewrap): the modules the lessons' set-up cells import, the checks, the tutor and
nbgrader's Validate, in processes where tests/portable/sitecustomize.py took those parts away
(the grading sandbox's modules, /proc, cgroups, prctl and the grader's tools; sys.platform
"darwin"). Each lesson's solution passes every check there, a mistake gets the tutor's hint, and
Validate passes a right answer and fails a blank one. The same run with a set-up cell that reaches
for the grading sandbox, /proc or prctl fails: the guard bites."""
import json
import os
import subprocess
import sys

import nbformat
import pytest

from tinygpt_course.checks.protocol import load_lesson
from tinygpt_course.testing import catalogue, notebooks
from tinygpt_course.testing.course import REPO
from tinygpt_course.testing.learner import learner_notebook

GUARD = REPO / "tests" / "portable"
LESSONS = sorted(p.name for p in (REPO / "source").iterdir() if list(p.glob("*.ipynb")))
# the grader's and the hub's parts of the course library: none is the learner's
GRADER_PARTS = ("tinygpt_course.grading", "tinygpt_course.rerun", "tinygpt_course.kernelfork",
                "tinygpt_course.zygote", "tinygpt_course.classroom", "tinygpt_course.roster",
                "tinygpt_course.report", "tinygpt_course.export")
# Validate's server process loads the course's nbgrader_config.py (from the folder `course.sh lab`
# runs JupyterLab in), which names grading's steps: those modules must import there, and only
# the parts that run learner code in a sandbox are away
VALIDATE_AWAY = ("tinygpt_course.rerun", "tinygpt_course.kernelfork", "tinygpt_course.zygote",
                 "tinygpt_course.classroom", "tinygpt_course.grading.launch")

CHECKS = r'''
import contextlib, io, json, sys
spec, out = json.load(open(sys.argv[1])), {"lessons": {}}

def run(cells, ns):
    with contextlib.redirect_stdout(io.StringIO()) as printed, contextlib.redirect_stderr(io.StringIO()):
        for name, code in cells:
            exec(compile(code, name, "exec"), ns)
    return printed.getvalue()

def verdicts(lesson, answer):
    from tinygpt_course.checks import CheckFailed      # what the check cells raise
    ns = {"__name__": "__lesson__"}
    run([(f"<set-up {i}>", c) for i, c in enumerate(lesson["setup"])] + [("<answer>", answer)]
        + [("<runner>", lesson["runner"]), ("<numbers note>", lesson["numbers_note"])], ns)
    got = {}
    for check_id, code in lesson["checks"].items():
        try:
            run([(check_id, code)], ns)
            got[check_id] = None
        except CheckFailed as failed:
            got[check_id] = failed
    return ns, got

for name, lesson in spec["lessons"].items():
    ns, got = verdicts(lesson, lesson["answer"])
    out["lessons"][name] = {k: None if v is None else str(v)[:300] for k, v in got.items()}

# the tutor: a mistake's failing check offers a hint, and asking for the next rung prints it
mistake = spec["mistake"]
ns, got = verdicts(spec["lessons"][mistake["lesson"]], mistake["answer"])
failed = {k: v for k, v in got.items() if v is not None}
out["tutor"] = {"failed": sorted(failed), "offered": {k: v.hint is not None for k, v in failed.items()}}
if failed:
    check_id = sorted(failed)[0]
    out["tutor"]["next_rung"] = run([("<hint>", f"checks.hint({check_id!r})")], ns)
out["modules"] = sorted(m for m in sys.modules if m.startswith("tinygpt_course"))
json.dump(out, open(sys.argv[2], "w"))
'''

VALIDATE = r'''
import io, json, os, sys
from nbgrader.server_extensions.validate_assignment.handlers import ValidateAssignmentHandler
from nbgrader.validator import Validator
folder, result, kernel_away = sys.argv[1:4]
os.environ["TINYGPT_BLOCKED"] = kernel_away         # the kernel it starts: the learner's side only
# and Linux's sys.platform there: ipykernel's macOS branch needs macOS's own appnope package (the
# course library's branches, if any, see "darwin" in the checks' run)
os.environ.pop("TINYGPT_DARWIN")
config = ValidateAssignmentHandler.load_config(None)   # the Validate button's own: this folder's config
out = {}
for name in ("right", "blank"):
    validator = Validator(config=config)
    validator.stream = io.StringIO()
    validator.validate_and_print(os.path.join(folder, name + ".ipynb"))
    out[name] = validator.stream.getvalue()
out["modules"] = sorted(m for m in sys.modules if m.startswith("tinygpt_course"))
json.dump(out, open(result, "w"))
'''


def guarded(script, args, tmp_path, away, cwd, timeout=900):
    """script run by this venv's Python with the guard on; (exit code, its output, the guard's log)."""
    log = tmp_path / "guard.log"
    env = {**os.environ, "PYTHONPATH": str(GUARD), "TINYGPT_BLOCKED": ",".join(away),
           "TINYGPT_GUARD_LOG": str(log), "TINYGPT_DARWIN": "1", "MPLBACKEND": "Agg"}
    r = subprocess.run([os.path.abspath(sys.executable), "-c", script, *map(str, args)], cwd=cwd, env=env,
                       capture_output=True, text=True, timeout=timeout)
    entries = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
    return r.returncode, r.stdout + r.stderr, entries


def lesson_spec(lesson, answer):
    nb = nbformat.read(notebooks.source_path(lesson), as_version=4)
    return {"setup": list(notebooks.lesson_source(lesson).setup), "answer": answer,
            "runner": notebooks.cell(nb, "runner").source, "numbers_note": notebooks.cell(nb, "numbers_note").source,
            "checks": {c: notebooks.cell(nb, c).source for c in load_lesson(lesson).checks}}


def first_mistake(lesson="head"):
    return next(a for a in catalogue.answers(lesson) if a.sort == "mistake" and a.notebook is None)


def ours(entries):
    """The guard's entries the course library asked for itself (not torch or Jupyter): a module
    of the grader's or a Linux-only libc call. A read of /proc that falls back when it fails
    (checks/guard.py: no memory figures off Linux) is no entry here: the run passing without
    /proc shows the fallback works."""
    return [e for e in entries if e["by"] and e["what"] in ("import", "libc")]


@pytest.fixture(scope="module")
def checks_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("portable")
    mistake = first_mistake()
    spec = {"lessons": {lesson: lesson_spec(lesson, notebooks.solution(lesson)) for lesson in LESSONS},
            "mistake": {"lesson": mistake.lesson, "answer": mistake.code}}
    (tmp / "spec.json").write_text(json.dumps(spec))
    code, output, entries = guarded(CHECKS, [tmp / "spec.json", tmp / "out.json"], tmp, GRADER_PARTS, tmp)
    assert code == 0, output[-4000:]
    return json.loads((tmp / "out.json").read_text()), entries


def test_the_set_up_cells_import_the_learner_side_only():
    """The notebooks' set-up cells import from tinygpt_course only modules outside the grader's
    parts (read from every lesson's notebook, not listed by hand)."""
    imported = set()
    for lesson in LESSONS:
        for code in notebooks.lesson_source(lesson).setup:
            imported |= {line.split()[1] for line in code.splitlines()
                         if line.startswith("from tinygpt_course") or line.startswith("import tinygpt_course")}
    assert imported and "tinygpt_course.checks" not in GRADER_PARTS
    assert not [m for m in imported if m.startswith(GRADER_PARTS)], imported


def test_every_lessons_solution_passes_its_checks_without_linux_parts(checks_run):
    out, entries = checks_run
    assert sorted(out["lessons"]) == LESSONS
    for lesson, verdicts in out["lessons"].items():
        assert verdicts and all(v is None for v in verdicts.values()), (lesson, verdicts)
    assert not [m for m in out["modules"] if m.startswith(GRADER_PARTS)], out["modules"]
    assert ours(entries) == [], ours(entries)


def test_the_tutor_offers_and_gives_a_hint_without_linux_parts(checks_run):
    tutor = checks_run[0]["tutor"]
    assert tutor["failed"] and all(tutor["offered"].values()), tutor
    assert tutor["next_rung"].strip(), tutor


# a set-up cell that reached for each Linux-only part: (the line, what the run then says, the guard's entry)
PLANTED = {
    "grading sandbox": ("import tinygpt_course.grading.sandbox", "No module named 'tinygpt_course.grading'",
                        ("import", "tinygpt_course.grading")),
    "/proc": ("open('/proc/self/cgroup').read()", "FileNotFoundError", ("open", "/proc/self/cgroup")),
    "prctl": ("import ctypes; ctypes.CDLL(None).prctl(15, b'x', 0, 0, 0)", "prctl: not in this libc",
              ("libc", "prctl")),
}


@pytest.mark.parametrize("part", PLANTED)
def test_the_guard_bites(tmp_path, part):
    """The same run, its first set-up cell also reaching for one Linux-only part (as a learner
    module that needed it would): it fails, and the guard's log names the part."""
    line, says, entry = PLANTED[part]
    lesson = "head"
    spec = {"lessons": {lesson: lesson_spec(lesson, notebooks.solution(lesson))},
            "mistake": {"lesson": lesson, "answer": notebooks.solution(lesson)}}
    spec["lessons"][lesson]["setup"][0] = line + "\n" + spec["lessons"][lesson]["setup"][0]
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    code, output, entries = guarded(CHECKS, [tmp_path / "spec.json", tmp_path / "out.json"], tmp_path,
                                    GRADER_PARTS, tmp_path)
    assert code != 0 and says in output, output[-2000:]
    assert entry in [(e["what"], e["name"]) for e in entries], entries


def test_validate_passes_a_right_answer_and_fails_a_blank_one_without_linux_parts(tmp_path):
    """nbgrader's Validate as the button runs it in `course.sh lab` (the server's folder is the
    checkout: its nbgrader_config.py loaded), the kernel it starts without the grader's parts."""
    lesson = "head"
    nbformat.write(learner_notebook(REPO, lesson, notebooks.solution(lesson)), tmp_path / "right.ipynb")
    nbformat.write(learner_notebook(REPO, lesson, notebooks.blank(lesson)), tmp_path / "blank.ipynb")
    code, output, entries = guarded(VALIDATE, [tmp_path, tmp_path / "out.json", ",".join(GRADER_PARTS)],
                                    tmp_path, VALIDATE_AWAY, REPO)
    assert code == 0, output[-4000:]
    out = json.loads((tmp_path / "out.json").read_text())
    assert "Success! Your notebook passes all the tests." in out["right"], out["right"][-2000:]
    assert "Success!" not in out["blank"] and "NotImplementedError" in out["blank"], out["blank"][-2000:]
    assert "tinygpt_course.grading.independent" in out["modules"]       # the course's config was loaded
    assert ours(entries) == [], ours(entries)
