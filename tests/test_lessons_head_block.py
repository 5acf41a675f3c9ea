"""The head and block lessons run for real: documented printout, checks, real grading.

For each lesson: the source notebook runs and prints exactly the lines under "What you should
see" (the stored printout.txt), every check passes there and the plot shows; the head lesson's
two intuitions print what their narrative says; and nbgrader autograde gives the reference full
marks, the unanswered release zero and the lesson's first catalogue mistake exactly its
expected points, with feedback that names it. (The checks themselves, fast, in one process:
tests/test_checks_head_block.py and tests/test_catalogue_checks.py.)
"""
import re
import shutil

import pytest
import torch

from tinygpt_course.checks import notebook
from tinygpt_course.checks.protocol import load_lesson
from tinygpt_course.config import SIZES
from tinygpt_course.testing import catalogue, notebooks
from tinygpt_course.testing.course import REPO, make_course, nbgrader, scores, submit
from tinygpt_course.testing.notebooks import cell, execute, grade_id, points, source_path, with_answer

LESSONS = ("head", "block")


@pytest.fixture(scope="module", params=LESSONS)
def executed(request):
    return request.param, execute(source_path(request.param), source_path(request.param).parent)


def test_source_prints_exactly_the_documented_lines(executed):
    lesson, nb = executed
    lines = notebooks.printed(cell(nb, "runner")).splitlines()
    assert lines == notebook.documented_in(source_path(lesson)) == list(notebook.documented(lesson))
    assert "are the documented ones" in notebooks.printed(cell(nb, "numbers_note"))


def test_checks_pass_and_plot_shows_in_the_executed_source(executed):
    lesson, nb = executed
    graded = [c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade")]
    assert sorted(grade_id(c) for c in graded) == sorted(load_lesson(lesson).checks)
    for c in graded:
        assert not [o for o in c.outputs if o.output_type == "error"], c.source
        assert c.outputs and c.outputs[0].text.startswith("\u2713"), c.source
        assert "seed=" not in c.source   # the notebook uses the lesson's default seed
    assert any("image/png" in o.get("data", {}) for o in cell(nb, "plot").outputs)


def demo(nb, gid):
    """(the narrative above the demo cell `gid`, the lines it documents, the lines it printed)."""
    i = next(i for i, c in enumerate(nb.cells) if grade_id(c) == gid)
    narrative = nb.cells[i - 1].source
    block = re.search(r"\*\*It prints:\*\*\s*```\n(.*?)\n```", narrative, re.S)
    assert block, f"the cell above {gid} documents no printout"
    return " ".join(narrative.replace(block.group(0), "").split()), block.group(1).splitlines(), notebooks.printed(nb.cells[i]).splitlines()


def numbers(text):
    return re.findall(r"-?\d+\.\d+|\d+", text)


@pytest.mark.parametrize("executed", ["head"], indirect=True)
def test_head_intuitions_print_what_their_narrative_says(executed):
    """The head lesson's two intuitions (issue 13): the weighted average of the past built three
    ways and shown equal, and softmax saturating without the scale. Each cell prints exactly its
    documented lines, and every number the prose states is one of them or is checked here."""
    lesson, nb = executed
    source = {grade_id(c): c.source for c in nb.cells}

    prose, documented_lines, printed = demo(nb, "average_demo")
    assert printed == documented_lines
    x = eval(re.search(r"x = (torch\.tensor\(.*?\))", source["average_demo"]).group(1), {"torch": torch})
    assert list(x.shape) == [4, 2] and "4 positions with 2 numbers each" in prose
    means = torch.stack([x[:t + 1].mean(0) for t in range(len(x))]).tolist()   # position t: rows 0..t
    rows = {line.split(":")[0].strip(): line.split(":", 1)[1].strip() for line in printed}
    assert [rows["loop"], rows["matrix"], rows["softmax"]] == [str(means)] * 3
    assert means[1] == ((x[0] + x[1]) / 2).tolist() and "position 1 averages rows 0 and 1" in prose
    assert rows["all three equal"] == "True"

    prose, documented_lines, printed = demo(nb, "scale_demo")
    assert printed == documented_lines
    unscaled, scaled = map(float, re.search(r"scores: (\S+) \| times 16 \*\* -0.5: (\S+)", printed[0]).groups())
    assert round(unscaled / scaled) == 4 == SIZES.head_size ** 0.5 and "sqrt(16) = 4 times wider" in prose
    largest = [float(line.rsplit("largest ", 1)[1]) for line in printed[1:]]
    times = [int(n) for n in re.findall(r"softmax of\s+(\d+) x", "\n".join(printed))]
    assert times == [1, 4, 16] and largest == sorted(largest) and largest[-1] > 0.95   # nearly one-hot
    for number in numbers(prose):   # each decimal of the prose is a printed one
        if "." in number:
            assert number in numbers("\n".join(printed)), number


@pytest.mark.parametrize("lesson", LESSONS)
def test_autograde_reference_full_blank_zero_wrong_partial(lesson, tmp_path):
    course = make_course(tmp_path / "course", assignments=(lesson,))
    validated = nbgrader(course, "validate", str(course / "source" / lesson / f"{lesson}.ipynb"))
    assert "Success" in validated.stdout, validated.stdout
    committed = REPO / "release" / lesson / f"{lesson}.ipynb"
    assert committed.exists(), f"run nbgrader generate_assignment {lesson} --force"
    wrong = next(a for a in catalogue.answers(lesson) if a.sort == "mistake")
    for student, nb in (("reference", source_path(lesson)), ("blank", committed),
                        ("wrong", with_answer(committed, wrong.code))):
        submit(course, student, lesson, nb)
    nbgrader(course, "autograde", lesson, "--create", "--force")
    full = {k: float(v) for k, v in points(lesson).items()}
    assert scores(course, lesson, "reference") == full
    assert set(scores(course, lesson, "blank").values()) == {0.0}
    assert scores(course, lesson, "wrong") == wrong.expect, wrong.name
    nbgrader(course, "generate_feedback", lesson, "--force")
    pages = {s: (course / "feedback" / s / lesson / f"{lesson}.html").read_text() for s in ("blank", "wrong")}
    assert "still unanswered" in pages["blank"]
    diagnosis = wrong.fails[0].words
    assert diagnosis.replace("'", "&#39;") in pages["wrong"] or diagnosis in pages["wrong"], wrong.name
    assert "BEGIN HIDDEN" not in pages["wrong"] and "seed=" not in pages["wrong"]
    shutil.rmtree(course, ignore_errors=True)
