"""Grades leave for the LMS as a Canvas gradebook CSV, written by the real `nbgrader export`
with the course's exporter plugin (tinygpt_course/export.py) from a gradebook filled by the
real `nbgrader autograde`."""
import csv
import shutil

import pytest

from tinygpt_course.testing.course import REPO, make_course, nbgrader, scores

PLUGIN = 'c.ExportApp.plugin_class = "tinygpt_course.export.CanvasCsvExport"\n'


@pytest.fixture(scope="module")
def course(tmp_path_factory):
    course = make_course(tmp_path_factory.mktemp("export"), assignments=("multihead", "gpt"),
                         extra_config=PLUGIN + "c.RobustExecute.timeout = 30\n")
    nbgrader(course, "db", "student", "add", "ada", "--last-name=Lovelace", "--first-name=Ada")
    nbgrader(course, "db", "student", "add", "bob")                       # no name in the gradebook
    nbgrader(course, "db", "student", "add", "cy", "--last-name=O'Neil, Jr.", "--first-name=Cy")  # never submits
    for student, nb in (("ada", REPO / "source" / "multihead" / "multihead.ipynb"),
                        ("bob", course / "release" / "multihead" / "multihead.ipynb")):
        (course / "submitted" / student / "multihead").mkdir(parents=True)
        shutil.copy(nb, course / "submitted" / student / "multihead" / "multihead.ipynb")
    nbgrader(course, "autograde", "multihead")
    return course


def read(path):
    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.reader(f))


def test_canvas_csv_from_the_real_export(course):
    nbgrader(course, "export")
    rows = read(course / "canvas_grades.csv")
    header, points = rows[0], rows[1]
    assert header[:5] == ["Student", "ID", "SIS User ID", "SIS Login ID", "Section"]
    assert sorted(header[5:]) == ["gpt", "multihead"]         # the gradebook's order
    col = {name: i for i, name in enumerate(header)}
    assert points[:5] == ["    Points Possible", "", "", "", ""]
    assert (points[col["multihead"]], points[col["gpt"]]) == ("7", "9")
    by_id = {r[2]: r for r in rows[2:]}
    assert set(by_id) == {"ada", "bob", "cy"}
    ada = sum(scores(course, "multihead", "ada").values())
    bob = sum(scores(course, "multihead", "bob").values())
    assert (ada, bob) == (7, 0)
    assert by_id["ada"][:5] == ["Lovelace, Ada", "", "ada", "ada", ""]
    assert (by_id["ada"][col["multihead"]], by_id["ada"][col["gpt"]]) == (f"{ada:g}", "0")  # gpt: not submitted
    assert by_id["bob"][0] == "bob" and by_id["bob"][5:] == ["0", "0"]
    assert by_id["cy"][0] == "O'Neil, Jr., Cy" and by_id["cy"][3] == "cy"        # a comma survives quoting


def test_options_destination_missing_and_columns(course):
    extra = ('c.CanvasCsvExport.missing = ""\n'
             'c.CanvasCsvExport.columns = {"gpt": "Lesson 4 (1234)"}\n')
    with open(course / "nbgrader_config.py", "a") as f:
        f.write(extra)
    try:
        nbgrader(course, "export", "--to", "lms.csv", "--assignment", "gpt")
    finally:
        text = (course / "nbgrader_config.py").read_text()
        (course / "nbgrader_config.py").write_text(text.replace(extra, ""))
    rows = read(course / "lms.csv")
    assert rows[0][5:] == ["Lesson 4 (1234)"] and rows[1][5:] == ["9"]
    assert all(r[5] == "" for r in rows[2:])                 # nobody submitted gpt: left empty
