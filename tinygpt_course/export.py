"""Grades for an LMS: a Canvas-style gradebook CSV, through nbgrader's exporter plugin interface.

In nbgrader_config.py::

    c.ExportApp.plugin_class = "tinygpt_course.export.CanvasCsvExport"

then ``nbgrader export`` writes ``canvas_grades.csv`` (``--to FILE`` for another name): one row
per student, one column per assignment, the shape Canvas's Grades > Import reads (Moodle's CSV grade import
can map it too):

    Student,ID,SIS User ID,SIS Login ID,Section,head,multihead,block,gpt
        Points Possible,,,,,7,7,7,9
    "Lovelace, Ada",,ada,ada,,7,5,7,9

Students are matched by their nbgrader id, written to the SIS User ID and SIS Login ID
columns (Canvas matches a row by ID, SIS User ID or SIS Login ID; ID, Canvas's own number, is
left empty). A column named like an assignment that Canvas does not have yet creates it on
import; ``c.CanvasCsvExport.columns`` maps an nbgrader assignment to an existing Canvas column
(``{"gpt": "Lesson 4 (1234)"}``). The score is nbgrader's final score (late penalty taken off);
an assignment a student never submitted is 0, as in nbgrader's own CSV, or empty with
``c.CanvasCsvExport.missing = ""`` (Canvas then leaves that grade alone).
"""
import csv

from nbgrader.api import MissingEntry
from nbgrader.plugins.export import ExportPlugin
from traitlets import Dict, Unicode

FIXED = ["Student", "ID", "SIS User ID", "SIS Login ID", "Section"]


class CanvasCsvExport(ExportPlugin):
    """nbgrader export plugin: a Canvas gradebook CSV, one row per student."""

    columns = Dict({}, help=(
        "Canvas column header for an nbgrader assignment, e.g. {'gpt': 'Lesson 4 (1234)'} to fill "
        "an existing Canvas assignment (its id in brackets); by default the assignment's name, "
        "which Canvas creates on import.")).tag(config=True)
    missing = Unicode("0", help=(
        "What an assignment a student never submitted gets: '0' (as nbgrader's own CSV) or '' "
        "(empty: Canvas leaves that grade unchanged).")).tag(config=True)
    section = Unicode("", help="The Section column's value for every student (Canvas ignores it on import).").tag(config=True)

    def export(self, gradebook):
        dest = self.to or "canvas_grades.csv"
        wanted_a = [str(a) for a in self.assignment]
        wanted_s = [str(s) for s in self.student]
        assignments = [a for a in gradebook.assignments if not wanted_a or a.name in wanted_a]
        students = [s for s in gradebook.students if not wanted_s or s.id in wanted_s]
        self.log.info("Exporting %d students x %d assignments to %s (Canvas CSV)", len(students), len(assignments), dest)
        with open(dest, "w", newline="", encoding="utf-8") as fh:
            out = csv.writer(fh)
            out.writerow(FIXED + [self.columns.get(a.name, a.name) for a in assignments])
            out.writerow(["    Points Possible", "", "", "", ""] + [fmt(a.max_score) for a in assignments])
            for student in students:
                out.writerow([display_name(student), "", student.id, student.id, self.section]
                             + [self.score(gradebook, a.name, student.id) for a in assignments])

    def score(self, gradebook, assignment, student):
        try:
            sub = gradebook.find_submission(assignment, student)
        except MissingEntry:
            return self.missing
        return fmt(max(0.0, sub.score - (sub.late_submission_penalty or 0.0)))


def display_name(student):
    """'Last, First' as Canvas shows it; the id when the gradebook has no name."""
    if student.last_name and student.first_name:
        return f"{student.last_name}, {student.first_name}"
    return student.last_name or student.first_name or student.id


def fmt(x):
    """A score as Canvas reads it: 7, 6.5, 6.25."""
    return f"{round(float(x or 0), 2):g}"
