"""The catalogue of answers, one loader for every lesson: ``tests/catalogue/<lesson>/NN_name.py``.

Each file is one answer: a header of ``# key: value`` lines, then the code typed into the answer
cell. The header says what grading and the checks must make of it::

    # expect: shapes=1 weight_count=0 ...      the points each check of the lesson gets (every check)
    # why: heads in a plain list: ...          what the answer is; its first word sorts it (see sort)
    # notebook: rename                         optional: what else is done to the submitted notebook
    # fails: weight_count structure: 1056 weights to learn, not 4128
                                               optional, one or more: a check that fails, the Kind
                                               of its verdict and words its message holds
    # says: nn.ModuleList([...])               optional: words Validate must say (default: the
                                               first `fails` line's words)
    # runner: kept no attention weights        optional: words the runner's failing step says
    # mistake: plain_list                      a mistake's id (Verdict.mistake): the verdict of
                                               each `fails` check names it

The file's name (its stem) is the student's id when a class of them is graded: :func:`submit`
hands one in, and the rest of this module is what the tests of a graded class check (by
`nbgrader autograde` in tests/test_catalogue.py, by tinygpt-grade-class in
tests/test_class_sandbox.py).
"""
import hashlib
import os
import re
import stat
import time
from dataclasses import dataclass
from pathlib import Path

from ..checks.protocol import Kind
from .course import REPO

FOLDER = REPO / "tests" / "catalogue"
KEYS = ("expect", "why", "notebook", "fails", "says", "runner", "mistake")
SORTS = ("crash", "tampering", "attack", "spoofed")   # a why starting "<sort>:" is not a plain answer
HEADER = re.compile(r"^# (\w+): (.*)$")


@dataclass(frozen=True)
class Fails:
    """A check the answer fails: the Kind of its verdict and words of its message."""
    check: str
    kind: Kind
    words: str


@dataclass(frozen=True)
class Answer:
    lesson: str
    name: str                 # the file's stem
    expect: dict              # check id -> points
    why: str
    code: str                 # what the answer cell holds
    notebook: str = None      # a transform of the submitted notebook, or None
    fails: tuple = ()         # Fails, in the file's order
    says: str = None
    runner: str = None
    mistake: str = None       # the mistake id its failing verdicts name

    @property
    def sort(self):
        """'crash', 'tampering', 'attack', 'spoofed' (the why's first word), else 'right' (full
        marks) or 'mistake'."""
        first = self.why.split(":")[0]
        if first in SORTS:
            return first
        return "right" if all(p > 0 for p in self.expect.values()) else "mistake"

    @property
    def plain(self):
        """A right answer or a mistake in a notebook left as it is: it runs as plain Python."""
        return self.notebook is None and self.sort in ("right", "mistake")

    @property
    def validate_says(self):
        """The words nbgrader validate must say about it (None for a right answer)."""
        return self.says or (self.fails[0].words if self.fails else None)


def parse(path, lesson=None):
    """The Answer in a catalogue file."""
    path = Path(path)
    lines = path.read_text().splitlines()
    head = {"fails": []}
    while lines and (m := HEADER.match(lines[0])) and m.group(1) in KEYS:
        key, value = m.groups()
        if key == "fails":
            check, kind, words = re.fullmatch(r"(\w+) (\w+): (.+)", value).groups()
            head["fails"].append(Fails(check, Kind(kind), words))
        elif key in head:
            raise ValueError(f"{path}: `# {key}:` twice")
        else:
            head[key] = value
        lines.pop(0)
    missing = {"expect", "why"} - set(head)
    if missing:
        raise ValueError(f"{path}: no `# {sorted(missing)[0]}:` line")
    expect = {k: float(v) for k, v in (kv.split("=") for kv in head.pop("expect").split())}
    return Answer(lesson or path.parent.name, path.stem, expect, head.pop("why"), "\n".join(lines).strip("\n"),
                  fails=tuple(head.pop("fails")), **head)


def answers(lesson, folder=FOLDER):
    """Every answer in the lesson's catalogue, in file order."""
    paths = sorted((Path(folder) / lesson).glob("*.py"))
    if not paths:
        raise LookupError(f"no catalogue for {lesson!r} in {folder}")
    return [parse(p, lesson) for p in paths]


def answer(lesson, name, folder=FOLDER):
    """One answer, by its file's stem."""
    return parse(Path(folder) / lesson / f"{name}.py", lesson)


def lessons(folder=FOLDER):
    """The lessons that have a catalogue."""
    return sorted(p.name for p in Path(folder).iterdir() if p.is_dir() and any(p.glob("*.py")))


# A class of catalogue answers, graded: what the tests of it share

SPOOFER_UID = 4242   # not the grader, not a user named like any student


def submit(course, student, answer, transform):
    """Hand in the released multihead notebook with `answer` (an answer cell's code) as
    `student`, changed as `transform` (an Answer's notebook: "spoof", "invalid-json", ...) says."""
    import json

    import nbformat

    from .notebooks import grade_id, with_answer
    course = Path(course)
    folder = course / "submitted" / student / "multihead"
    folder.mkdir(parents=True)
    if transform == "spoof":      # the right files, made by somebody else
        nbformat.write(with_answer(course / "release" / "multihead" / "multihead.ipynb", answer),
                       folder / "multihead.ipynb")
        for path in (folder, folder / "multihead.ipynb"):
            os.chown(path, SPOOFER_UID, SPOOFER_UID)
        return
    nb = with_answer(course / "release" / "multihead" / "multihead.ipynb", answer)
    tests = [c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade") and grade_id(c) != "multihead"]
    name = "multihead.ipynb"
    if transform == "invalid-json":
        (folder / name).write_text(nbformat.writes(nb)[:-200])
        return
    if transform == "rename":
        name = "multihead-mine.ipynb"
    elif transform == "delete-tests":
        nb.cells = [c for c in nb.cells if c not in tests]
    elif transform == "duplicate-tests":
        nb.cells = nb.cells + [nbformat.from_dict(json.loads(json.dumps(c))) for c in tests]
    elif transform == "markdown-answer":
        cell = next(c for c in nb.cells if grade_id(c) == "multihead")
        cell.cell_type = "markdown"
        cell.pop("outputs"), cell.pop("execution_count")
    else:
        assert transform is None, f"unknown notebook transform {transform}"
    nbformat.write(nb, folder / name)


def trusted_state(course):
    """Every trusted file's inode, times and content: a rewrite with the same bytes shows too."""
    paths = sorted((course / "source").rglob("*")) + [course / "nbgrader_config.py"]
    return {str(p): (p.stat().st_ino, p.stat().st_mtime_ns, p.stat().st_ctime_ns,
                     hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else None) for p in paths}


def leftover_processes(course, markers=("sleep 2718281",)):
    """Processes still running whose working folder is in the course, or whose command line
    holds one of `markers` (the attacks' sleepers)."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cwd = os.readlink(f"/proc/{pid}/cwd")
            cmd = open(f"/proc/{pid}/cmdline", "rb").read().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if cwd.startswith(str(course)) or any(m in cmd for m in markers):
            found.append((pid, cwd, cmd))
    return found


def settled(find, seconds=10):
    """What find() still finds once it has had `seconds` to empty: a process being torn down
    when grading returns is not a leftover; one that lives on (the attack's sleeper) is."""
    deadline = time.monotonic() + seconds
    while (found := find()) and time.monotonic() < deadline:
        time.sleep(0.2)
    return found


def dangerous_files(*folders, max_depth=40):
    """Symlinks, FIFOs, sockets, devices, set-uid or set-gid files and too deep folders below
    `folders`, as (path, what), found without following a link."""
    found = []
    for top in folders:
        for here, dirs, files in os.walk(top):
            if len(os.path.relpath(here, top).split(os.sep)) > max_depth:
                found.append((here, "deep folder"))
                dirs[:] = []
                continue
            for name in dirs + files:
                path = os.path.join(here, name)
                mode = os.lstat(path).st_mode
                what = ("symlink" if stat.S_ISLNK(mode) else "fifo" if stat.S_ISFIFO(mode)
                        else "socket" if stat.S_ISSOCK(mode) else "device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode)
                        else "set-uid" if mode & (stat.S_ISUID | stat.S_ISGID) else None)
                if what:
                    found.append((path, what))
    return found


def scored(course, answer):
    """The learner's points for each check its `# expect:` line names (0 for one not graded)."""
    from .course import scores
    got = scores(course, "multihead", answer.name)
    return {k: got.get(k, 0.0) or 0.0 for k in answer.expect}


def ungraded(course, answers, feedback=True):
    """The answers' students without an autograded notebook (or, with feedback, a feedback page)."""
    course = Path(course)
    return [a.name for a in answers
            if not (course / "autograded" / a.name / "multihead" / "multihead.ipynb").exists()
            or feedback and not (course / "feedback" / a.name / "multihead" / "multihead.html").exists()]


ATTACK_NAMES = {"source.html", "config.html", "gradebook.html", "classmate.html", "python-suid", "big.bin", "d"}


def reached_the_host(*folders):
    """What of the attacks' writing is below `folders` (autograded/, feedback/, the grader's temp
    folder): dangerous files (:func:`dangerous_files`), files larger than nbgrader's own (the
    1 GiB file) and the attacks' own names, as (path, what)."""
    found = dangerous_files(*folders)
    for top in folders:
        for p in Path(top).rglob("*"):
            if p.is_file() and not p.is_symlink() and p.stat().st_size > 50 << 20:
                found.append((str(p), "big file"))
            if p.name in ATTACK_NAMES or p.name.startswith("fill-"):
                found.append((str(p), "an attack's file"))
    return found


def feedback_text(course, student):
    """The learner's feedback page as the text a reader sees (tags stripped, entities decoded)."""
    import html
    page = (Path(course) / "feedback" / student / "multihead" / "multihead.html").read_text()
    return html.unescape(re.sub(r"<[^>]+>", "", page))


def leaked_lines(course, answers):
    """{student: the hidden tests' lines, and the solution's not in the learner's own code, that
    its feedback shows}, for those whose feedback shows any (or the hidden-tests marker)."""
    import nbformat

    from .notebooks import marked_lines, source_path
    source = nbformat.read(source_path("multihead"), as_version=4)
    hidden, solution = marked_lines(source, "HIDDEN TESTS"), marked_lines(source, "SOLUTION")
    assert hidden and solution, "no hidden tests or solution found in the source notebook"
    found = {}
    for a in answers:   # the learner's own code may hold lines like the solution's
        page = feedback_text(course, a.name)
        leaked = [ln for ln in hidden | {ln for ln in solution if ln not in a.code} if ln in page]
        if leaked or "BEGIN HIDDEN TESTS" in page:
            found[a.name] = leaked or ["BEGIN HIDDEN TESTS"]
    return found


def mistakes_named(answer, seed=2024):
    """{check id: mistake id} of the checks a plain answer fails, as the lesson's judge names
    them when the answer runs here as plain Python (the in-process twin of grading's re-run,
    as tests/test_catalogue_checks.py runs it). A mistake may fail other checks than its
    ``fails`` lines, where the judge may name what that check sees (out_not_weighted_values
    beside softmax_axis): the class report counts every mistake named."""
    from ..checks.protocol import load_lesson
    from . import notebooks
    if not answer.plain:
        raise ValueError(f"{answer.name} does not run as plain Python")
    lesson = load_lesson(answer.lesson)
    ref = notebooks.solution_record(answer.lesson, seed)
    rec = notebooks.record(answer.lesson, answer.code, seed)
    verdicts = {c: lesson.verdict(c, rec, ref) for c in lesson.checks}
    return {c: v.mistake for c, v in verdicts.items() if not v.passed}


def touch_in_sandbox(pid, path):
    """Make the empty file `path` in the sandbox of process `pid`, from outside (root), through
    /proc/<pid>/root; False if it cannot. Made with this thread's fsuid and fsgid (per thread)
    set to the owner of the sandbox's /tmp: root is no uid of the sandbox's user namespace, and
    a file cannot be made there by a uid that namespace does not map."""
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    try:
        st = os.stat(f"/proc/{pid}/root/tmp")
    except OSError:
        return False
    libc.setfsgid(st.st_gid)
    libc.setfsuid(st.st_uid)
    try:
        os.close(os.open(f"/proc/{pid}/root{path}", os.O_WRONLY | os.O_CREAT, 0o644))
        return True
    except OSError:
        return False
    finally:
        libc.setfsuid(os.getuid())
        libc.setfsgid(os.getgid())


def expected_points(answer, lesson):
    """The points `answer` earns per check: a catalogue Answer's `# expect:`; a solution (code
    as text) every check's full points."""
    from .notebooks import points
    return answer.expect if isinstance(answer, Answer) else points(lesson)
