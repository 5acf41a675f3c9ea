"""What the class report shows, read from what grading kept: nbgrader's gradebook (scores, the
FLAGGED comments RecordFlags writes) and the verdicts RecordVerdicts keeps in each autograded
notebook (kind and mistake per check, from the independent re-run), and the cells grading put
back (grading.integrity). Trusted code: it parses
JSON and the gradebook, and imports nothing that runs learner code.
"""
import os
from dataclasses import dataclass, field

import json

from ..checks.hints import MAX_ENTRIES, checked
from ..grading.integrity import KINDS, integrity
from ..grading.owner import submission_problem
from ..grading.verdicts import read_verdicts

LESSONS = ("head", "multihead", "block", "gpt")   # the course's order: the cross-lesson table's columns
FLAGGED = "FLAGGED"


@dataclass
class Submission:
    """One learner's result in one lesson."""
    student: str
    name: str = ""                       # first and last name from the gradebook, if it has them
    score: float = None                  # total automatic score (None: not graded)
    max_score: float = 0.0
    check_scores: dict = field(default_factory=dict)   # check id -> (score, points)
    verdicts: dict = field(default_factory=dict)       # check id -> {passed, kind, mistake, message}
    status: str = "graded"               # graded | flagged | ungraded | absent
    reasons: list = field(default_factory=list)        # why flagged or ungraded, as plain text
    hints: list = field(default_factory=list)          # [(check, mistake, rungs)] the tutor's rungs used
    notebook_id: str = None              # nbgrader's id of the submitted notebook (the formgrader's link)

    @property
    def mistakes(self):
        """{mistake id: [check ids whose verdict names it]} of the failed checks."""
        out = {}
        for check, v in sorted(self.verdicts.items()):
            if not v.get("passed") and isinstance(v.get("mistake"), str):
                out.setdefault(v["mistake"], []).append(check)
        return out


@dataclass
class LessonResults:
    lesson: str
    checks: dict                         # check id -> points, in the notebook's order
    max_score: float
    submissions: list                    # Submission, sorted by student id

    @property
    def graded(self):
        return [s for s in self.submissions if s.score is not None]


def course_paths(root):
    """The gradebook URL and the folders nbgrader uses, as nbgrader's defaults for a course root."""
    from nbgrader.coursedir import CourseDirectory
    return CourseDirectory(root=os.path.abspath(root))


def _notebook(path):
    """The autograded notebook as plain JSON (nbformat's validation costs more than the report's
    reading: only metadata is read), or None when it cannot be read: the report says so."""
    try:
        with open(path, encoding="utf-8") as f:
            nb = json.load(f)
        return nb if isinstance(nb, dict) else None
    except (OSError, ValueError):
        return None


def _ungraded_reason(coursedir, lesson, student, notebook):
    folder = coursedir.format_path(coursedir.submitted_directory, student, lesson)
    if not os.path.isdir(folder):
        return "no submission folder (submitted/ has none for this learner)"
    problem = submission_problem(folder, student)
    if problem:
        return f"not graded: {problem}"
    if not os.path.isfile(os.path.join(folder, notebook + ".ipynb")):
        return f"no {notebook}.ipynb was submitted"
    return "nbgrader could not grade it: see the autograde log"


def course_id(db_url):
    """The course the gradebook holds. nbgrader's Gradebook() adds the course it is given when
    it is missing; the report only reads, so it opens the gradebook with the course it has."""
    from sqlalchemy import create_engine, inspect, text
    engine = create_engine(db_url)
    try:
        if "course" not in inspect(engine).get_table_names():
            raise LookupError(f"{db_url} is not an nbgrader gradebook: run nbgrader autograde first")
        with engine.connect() as db:
            ids = [row[0] for row in db.execute(text("SELECT id FROM course ORDER BY id"))]
    finally:
        engine.dispose()
    return ids[0] if ids else "default_course"


def gradebook_url(coursedir):
    """The gradebook's URL; for SQLite (nbgrader's default) the file must exist: opening a
    missing one would create an empty gradebook."""
    url = coursedir.db_url
    if url.startswith("sqlite:///") and not os.path.isfile(url[len("sqlite:///"):]):
        raise LookupError(f"no gradebook at {url[len('sqlite:///'):]}: run nbgrader autograde first "
                          "(from the course's root)")
    return url


def lesson_results(coursedir, lesson, progress=None):
    """The LessonResults of `lesson` from the gradebook and autograded/, or None when the
    gradebook has no such assignment."""
    from nbgrader.api import Gradebook, MissingEntry
    url = gradebook_url(coursedir)
    with Gradebook(url, course_id(url)) as gb:
        try:
            assignment = gb.find_assignment(lesson)
        except MissingEntry:
            return None
        checks = {}
        for nb in assignment.notebooks:
            for cell in nb.grade_cells:
                if cell.cell_type == "code" and cell.name not in {s.name for s in nb.solution_cells}:
                    checks[cell.name] = cell.max_score
        subs = {}
        for sub in assignment.submissions:
            s = Submission(sub.student.id, " ".join(n for n in (sub.student.first_name, sub.student.last_name) if n),
                           max_score=assignment.max_score)
            scores = {}
            for nb in sub.notebooks:
                s.notebook_id = s.notebook_id or nb.id
                for g in nb.grades:
                    scores[g.name] = (g.score, g.max_score)
                for c in nb.comments:
                    if (c.auto_comment or "").startswith(FLAGGED):
                        s.reasons.append(c.auto_comment)
            s.check_scores = {k: scores[k] for k in checks if k in scores}
            s.score = sub.score
            subs[s.student] = s
        notebooks = [nb.name for nb in assignment.notebooks]
        roster = [(st.id, " ".join(n for n in (st.first_name, st.last_name) if n)) for st in gb.students]
        max_score = assignment.max_score
    top = os.path.join(coursedir.root, coursedir.submitted_directory)    # submitted/<student>/<lesson>/
    for student in sorted(os.listdir(top)) if os.path.isdir(top) else ():
        folder = coursedir.format_path(coursedir.submitted_directory, student, lesson)
        if student not in subs and os.path.isdir(folder):     # submitted, never autograded
            subs[student] = Submission(student, max_score=max_score, status="ungraded",
                                       reasons=[f"submitted, not autograded yet: nbgrader autograde {lesson}"])
    for student, name in roster:       # in the class, no submission of this lesson
        if student not in subs:
            subs[student] = Submission(student, name, max_score=max_score, status="absent",
                                       reasons=["no submission"])
    items = sorted(subs.values(), key=lambda s: s.student)
    for s in progress(items, desc=f"reading {lesson}", unit="learner") if progress else items:
        if s.status == "graded":
            _read_autograded(coursedir, lesson, notebooks, s)
    return LessonResults(lesson, checks, max_score, items)


def _read_autograded(coursedir, lesson, notebooks, s):
    """Fill s.verdicts, status and reasons from the learner's autograded notebooks."""
    folder = coursedir.format_path(coursedir.autograded_directory, s.student, lesson)
    for name in notebooks:
        path = os.path.join(folder, name + ".ipynb")
        nb = _notebook(path) if os.path.isfile(path) else None
        if nb is None:
            s.status, s.score = "ungraded", None
            s.reasons.append(_ungraded_reason(coursedir, lesson, s.student, name))
            continue
        kept = read_verdicts(nb)
        if kept is None or not kept.get("judged"):
            s.reasons.append("no verdicts recorded (graded before RecordVerdicts was in the pipeline, "
                             "or not a checked lesson): regrade with --force")
            continue
        s.verdicts.update(kept["checks"])
        s.reasons += [f"{KINDS[kind]}: {cell}" for kind, cell in integrity(nb)]
        s.hints += _hints(nb)
        if kept.get("broken"):
            s.reasons.append(f"the submitted {name}.ipynb was not a valid notebook: kept as {name}.ipynb.broken, "
                             "the released notebook was graded in its place")
        if kept.get("flagged") and not any(r.startswith(FLAGGED) for r in s.reasons):
            s.reasons.append(f"{FLAGGED}: {', '.join(kept['flagged'])} passed in the learner's kernel "
                             "but not in the independent re-run")
    if s.status != "ungraded" and s.reasons:
        s.status = "flagged"


def _hints(nb):
    """[(check, mistake, rungs)] KeepHintsUsed kept (metadata.tinygpt.hints_used), checked again
    as it checked them."""
    used = ((nb.get("metadata") or {}).get("tinygpt") or {}).get("hints_used")
    entries = [checked(h) for h in (used if isinstance(used, list) else [])[:MAX_ENTRIES]]
    return [(e["check"], e["mistake"], e["rungs"]) for e in entries if e]


def pass_rates(results):
    """{check id: (passed, graded)}: a check passes with its full points in the gradebook."""
    out = {}
    for check, points in results.checks.items():
        graded = [s for s in results.graded if check in s.check_scores]
        passed = sum(1 for s in graded if (s.check_scores[check][0] or 0) >= points)
        out[check] = (passed, len(graded))
    return out


def mistakes(results):
    """{mistake id: [Submission that made it]}, the most frequent first."""
    out = {}
    for s in results.graded:
        for m in s.mistakes:
            out.setdefault(m, []).append(s)
    return dict(sorted(out.items(), key=lambda kv: (-len(kv[1]), kv[0])))


def across(all_results):
    """The learner x mistake table over the graded lessons: {student: {mistake: [lessons]}}
    (lessons in the course's order), and {mistake: learners who made it in two lessons or more}."""
    table = {}
    for res in all_results:
        for s in res.graded:
            for m in s.mistakes:
                table.setdefault(s.student, {}).setdefault(m, []).append(res.lesson)
    persists = {}
    for student, row in table.items():
        for m, lessons in row.items():
            if len(lessons) > 1:
                persists.setdefault(m, []).append(student)
    return table, persists
