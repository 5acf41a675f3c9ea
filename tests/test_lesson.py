"""The multihead lesson: validates, prints the documented nine lines, grades right and blank."""
import re

import nbformat
import pytest
from nbclient import NotebookClient

from conftest import REPO, SPEC, nbgrader, scores

SOURCE = REPO / "source" / "multihead" / "multihead.ipynb"
DATA_FREE = ("h:", "out:", "each head gives:", "out is proj", "change position 7:", "weights to learn:")


def documented():
    nb = nbformat.read(SOURCE, 4)
    cell = next(c for c in nb.cells if "What you should see" in c.source)
    return re.search(r"```\n(.*?)\n```", cell.source, re.S).group(1).splitlines()


@pytest.fixture(scope="module")
def executed():
    nb = nbformat.read(SOURCE, 4)
    NotebookClient(nb, timeout=180, kernel_name="python3", resources={"metadata": {"path": str(SOURCE.parent)}}).execute()
    return nb


def printout(nb):
    cell = next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == "runner")
    return "".join(o.get("text", "") for o in cell.outputs if o.output_type == "stream").splitlines()


def test_source_validates(course):
    out = nbgrader(course, "validate", str(course / "source" / "multihead" / "multihead.ipynb"))
    assert "Success" in out.stdout, out.stdout


def test_prints_exactly_the_documented_nine_lines(executed):
    lines = printout(executed)
    assert len(lines) == 9
    assert lines == documented()


def test_data_free_lines_equal_the_spec():
    if not SPEC.exists():
        pytest.fail(f"the lesson spec is expected at {SPEC}")
    spec = [ln.strip() for ln in SPEC.read_text().splitlines() if ln.startswith("    ")]
    spec_lines = [ln for ln in spec if ln.startswith(DATA_FREE)]
    ours = [ln for ln in documented() if ln.startswith(DATA_FREE)]
    assert len(spec_lines) == 6 and ours == spec_lines


def test_window_and_weight_lines_are_ours_and_consistent():
    lines = documented()
    assert lines[4].startswith("window 0: '") and "kelolo" not in lines[4]
    for line in lines[5:7]:
        weights = [float(w) for w in re.search(r"\[(.*)\]", line).group(1).split(", ")]
        assert len(weights) == 8 and abs(sum(weights) - 1) < 0.01


def test_checks_pass_in_the_executed_notebook(executed):
    for cell in executed.cells:
        if cell.metadata.get("nbgrader", {}).get("grade"):
            assert not [o for o in cell.outputs if o.output_type == "error"], cell.source


def test_reference_full_marks_blank_zero_feedback_html(course):
    import shutil
    for student, nb in (("reference", SOURCE), ("blank", course / "release" / "multihead" / "multihead.ipynb")):
        dest = course / "submitted" / student / "multihead"
        dest.mkdir(parents=True, exist_ok=True)
        shutil.copy(nb, dest / "multihead.ipynb")
    nbgrader(course, "autograde", "multihead", "--create", "--force")
    ref, blank = scores(course, "multihead", "reference"), scores(course, "multihead", "blank")
    assert sum(ref.values()) == 7 and all(v > 0 for v in ref.values()), ref
    assert all(v == 0 for v in blank.values()), blank
    nbgrader(course, "generate_feedback", "multihead", "--force")
    page = (course / "feedback" / "blank" / "multihead" / "multihead.html").read_text()
    assert "<html" in page and "still unanswered" in page
