"""The multihead lesson: validates, prints the documented nine lines, grades right and blank."""
import re

import nbformat
import pytest

from tinygpt_course.checks.notebook import documented_in
from tinygpt_course.testing import notebooks
from tinygpt_course.testing.course import REPO, nbgrader, scores, submit

SOURCE = notebooks.source_path("multihead")
SPEC = REPO / "tests" / "data" / "multihead-spec-printout.md"   # the spec's printout, copied in
DATA_FREE = ("h:", "out:", "each head gives:", "out is proj", "change position 7:", "weights to learn:")


def documented():
    return documented_in(SOURCE)


@pytest.fixture(scope="module")
def executed():
    return notebooks.execute(SOURCE, SOURCE.parent)


def printout(nb):
    return notebooks.printed(notebooks.cell(nb, "runner")).splitlines()


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
            assert cell.outputs and cell.outputs[0].text.startswith("\u2713"), cell.source


def test_numbers_note_says_the_lines_are_the_documented_ones(executed):
    note = notebooks.printed(notebooks.cell(executed, "numbers_note"))
    assert note.strip() == "\u2713 your 9 lines are the documented ones."


def cell_text(grade_id):
    return " ".join(notebooks.cell(SOURCE, grade_id).source.split())


def test_rounding_claim_is_what_the_printed_weights_add_up_to():
    """'the eight printed numbers, rounded to three decimals, add up to 0.999 and 1.000'"""
    claim = re.search(r"rounded to three decimals, add up to (\d\.\d+) and (\d\.\d+)", cell_text("printout_md"))
    sums = [sum(float(w) for w in re.search(r"\[(.*)\]", line).group(1).split(", "))
            for line in documented() if "takes [" in line]
    assert claim and [f"{s:.3f}" for s in sums] == list(claim.groups())


def test_weight_counts_in_the_narrative_are_the_layers_counts():
    """16 x 32 = 512 (one key layer), 3072 for the heads, 1056 for the projection, 4128 in all."""
    import torch.nn as nn
    key = nn.Linear(32, 16, bias=False)
    heads = 2 * 3 * sum(p.numel() for p in key.parameters())
    proj = sum(p.numel() for p in nn.Linear(32, 32).parameters())
    assert f"16 x 32 = {key.weight.numel()} weights in one key layer" in cell_text("modulelist_md")
    text = cell_text("printout_md")
    assert f"32 x 16 = {heads} for the heads" in text and f"32 x 32 + 32 = {proj} for the projection" in text
    assert f"{heads + proj} in all" in text and f"weights to learn: {heads + proj}" in documented()


def test_reference_full_marks_blank_zero_feedback_html(course):
    for student, nb in (("reference", SOURCE), ("blank", course / "release" / "multihead" / "multihead.ipynb")):
        submit(course, student, "multihead", nb)
    nbgrader(course, "autograde", "multihead", "--create", "--force")
    ref, blank = scores(course, "multihead", "reference"), scores(course, "multihead", "blank")
    assert sum(ref.values()) == 7 and all(v > 0 for v in ref.values()), ref
    assert all(v == 0 for v in blank.values()), blank
    nbgrader(course, "generate_feedback", "multihead", "--force")
    page = (course / "feedback" / "blank" / "multihead" / "multihead.html").read_text()
    assert "<html" in page and "still unanswered" in page


def test_claims_across_lessons_hold():
    """head: 'They are also head 1's numbers in the next lesson: the same seed gives the same
    first head.' block: 'weights to learn: 4128 in the attention (last lesson's count)'."""
    from tinygpt_course.checks import notebook
    head, multihead, block = (notebook.documented(lesson) for lesson in ("head", "multihead", "block"))
    takes = lambda lines, start: next(ln.split(" takes ")[1] for ln in lines if ln.startswith(start))  # noqa: E731
    assert takes(head, "position 7 takes") == takes(multihead, "head 1 at position 7 takes")
    head_md = nbformat.read(notebooks.source_path("head"), 4)
    assert any("head 1's numbers in the next lesson" in " ".join(c.source.split()) for c in head_md.cells)
    count = next(ln for ln in multihead if ln.startswith("weights to learn:")).split(": ")[1]
    assert f"| attention {count} |" in next(ln for ln in block if ln.startswith("weights to learn:"))
