"""The teacher's guide is generated (docs/make_guide.py) and current: regenerated here from the
lessons, their catalogues and docs/measured.json, it equals the committed docs/teachers-guide.md.
And what it says about each lesson is what the checks say."""
import json
import re

import pytest

from tinygpt_course.testing import catalogue, notebooks
from tinygpt_course.testing.course import load_script, REPO

GUIDE = REPO / "docs" / "teachers-guide.md"


@pytest.fixture(scope="module")
def make_guide():
    return load_script(REPO / "docs" / "make_guide.py", "make_guide")


@pytest.fixture(scope="module")
def rendered(make_guide):
    return make_guide.render()


def test_guide_is_current(rendered):
    assert GUIDE.read_text() == rendered, "docs/teachers-guide.md is stale: python docs/make_guide.py"


def test_every_lesson_has_objectives_checks_and_mistakes(rendered, make_guide):
    lessons = [lesson for lesson, _, _ in make_guide.lessons_in_order()]
    assert lessons == ["head", "multihead", "block", "gpt"]
    for i, lesson in enumerate(lessons, 1):
        section = rendered.split(f"## Lesson {i}: {lesson}\n", 1)[1].split("\n## ", 1)[0]
        assert "**Learning objectives.**" in section and make_guide.OBJECTIVES[lesson][0] in section
        for check in notebooks.points(lesson):
            assert f"| `{check}` |" in section
        mistakes = re.findall(r"^\* \*\*(.+?)\*\* \(mistake `(\w+)`, (\d+) of (\d+) points\)$", section, re.M)
        plain = [a for a in catalogue.answers(lesson) if a.plain and a.sort == "mistake"]
        expected = {a.why: (a.mistake, int(sum(a.expect.values()))) for a in plain}
        assert {why: (mistake, int(got)) for why, mistake, got, _ in mistakes} == expected, lesson   # the catalogue's
        assert all(int(got) < int(total) for _, _, got, total in mistakes), "a listed mistake lost no point"


def test_gpt_mistakes_carry_the_judges_messages(rendered):
    section = rendered.split("## Lesson 4: gpt\n", 1)[1]
    for why, message in [
            ("the final layer norm is created but never applied", "self.ln_f is never applied"),
            ("logits [B, T, 27] and targets [B, T] passed to cross_entropy without flattening", "Flatten both"),
            ("generate takes the most likely letter (argmax) instead of drawing", "(argmax)"),
            ("generate gives the model the whole context, never cropped to the window", "Crop the context"),
            ("positions fixed at arange(block_size)", "torch.arange(T) with T = idx.shape[1]")]:
        item = section.split(f"* **{why}", 1)[1].split("\n* **", 1)[0]
        assert message in item, why


def test_times_and_costs_come_from_the_measurements(rendered, make_guide):
    measured = json.loads((REPO / "docs" / "measured.json").read_text())
    for lesson, m in measured["lessons"].items():
        assert f"| {lesson} | {m['markdown_words']} | {m['answer_lines']} | {m['run_s']:.0f} s |" in rendered
        assert f"| {make_guide.estimate(m)} min |" in rendered
    ratio = measured["grading"]["ratio_to_multihead"]
    assert f"| gpt | {measured['grading']['per_submission']['gpt']['wall_s']:.1f} | {ratio['gpt']['wall_s']:.2f} |" in rendered


def test_what_it_says_about_grading_the_gpt_lesson_is_in_the_notebook(rendered):
    import nbformat
    nb = nbformat.read(REPO / "source" / "gpt" / "gpt.ipynb", 4)
    training = next(c.source for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == "training")
    assert "STEPS = 6000" in training and "STEPS = 0 " in training and "if STEPS else None" in training
    assert "trains nothing (0 steps instead of 6000, no optimiser)" in rendered


def test_export_instructions_are_the_tested_ones(rendered):
    from test_export import PLUGIN
    assert PLUGIN.strip() in rendered


def test_the_grading_services_cost_is_the_measured_one(rendered, make_guide):
    """The guide's and hub/README's figures of what the grading service costs are measured.json's
    (docs/measure.py --only service), formatted as the guide formats them; the defaults it states
    are the service's traitlets'."""
    measured = json.loads((REPO / "docs" / "measured.json").read_text())["service"]
    assert measured["ok"], "the measured run's scores or notebooks differed from stock nbgrader's"
    figures = make_guide.service_figures(measured)
    section = rendered.split("**Grading on submit (the grading service).**", 1)[1].split("\n**", 1)[0]
    for row in (f"| {figures['SVC_IDLE_MEM']} GB | none |", f"| {figures['SVC_IDLE_CPU']} s an hour | none |",
                f"| {figures['SVC_ONE_CPU']} s | {figures['SVC_ONE_STOCK_CPU']} s |",
                f"| {figures['SVC_BURST_MEM']} GB | {figures['SVC_BURST_STOCK_MEM']} GB (autograde) |"):
        assert row in rendered, row
    assert "{" not in section.replace("{'", "")          # every placeholder filled
    from tinygpt_course.service.runner import GradingService
    assert f"at most {GradingService.class_traits()['per_minute'].default_value} grading a minute" in rendered
    readme = (REPO / "hub" / "README.md").read_text().split("### Grading on submit", 1)[1].split("\n### ", 1)[0]
    for stated in (f"{measured['jobs']} workers", f"{figures['SVC_IDLE_MEM']} GB (PSS, left alone)",
                   f"{figures['SVC_BURST_MEM']} GB at the peak of a burst of {figures['SVC_BURST_N']}",
                   f"uses\n{figures['SVC_IDLE_CPU']} s of CPU an hour", f"{figures['POLLS']} times a second",
                   f"each\nsubmission {figures['SVC_ONE_CPU']} s of CPU", f"learner: {figures['SVC_ONE_STOCK_CPU']} s"):
        assert stated in readme, f"hub/README.md's cost of the grading service is not the measured one: {stated!r}"
