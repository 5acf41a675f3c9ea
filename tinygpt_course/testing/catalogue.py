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

The file's name (its stem) is the student's id when a class of them is graded.
"""
import re
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


def mistakes_named(answer, seed=2024):
    """{check id: mistake id} of the checks a plain answer fails, as the lesson's judge names
    them when the answer runs here as plain Python (the in-process twin of grading's re-run,
    as tests/test_catalogue_checks.py runs it). A mistake may fail other checks than its
    ``fails`` lines, where the judge may name what that check sees (out_not_weighted_values
    beside softmax_axis): the class report counts every mistake named."""
    import importlib

    from ..checks.protocol import load_lesson
    from . import notebooks
    if not answer.plain:
        raise ValueError(f"{answer.name} does not run as plain Python")
    lesson = load_lesson(answer.lesson)
    extract = importlib.import_module(lesson.extract_module).extract
    ref = _solution_record(answer.lesson, seed)
    rec = extract(notebooks.namespace(answer.lesson, answer.code), seed)
    verdicts = {c: lesson.verdict(c, rec, ref) for c in lesson.checks}
    return {c: v.mistake for c, v in verdicts.items() if not v.passed}


_SOLUTION_RECORDS = {}


def _solution_record(lesson, seed):
    import importlib

    from ..checks.protocol import load_lesson
    from . import notebooks
    if (lesson, seed) not in _SOLUTION_RECORDS:
        extract = importlib.import_module(load_lesson(lesson).extract_module).extract
        _SOLUTION_RECORDS[lesson, seed] = extract(notebooks.namespace(lesson, notebooks.solution(lesson)), seed)
    return _SOLUTION_RECORDS[lesson, seed]
