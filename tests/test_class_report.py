"""The class report from a class graded by the real `nbgrader autograde`: a few learners, each
answering head, multihead and block with catalogue answers (one mistake persists from lesson to
lesson), a hostile student id and a hostile error, a spoofed and a broken submission, a
tampering one the re-run flags. tinygpt-class-report (the installed command) counts each
mistake exactly as the lessons' judges name it, lists the flagged and ungraded with their
reason, marks the persisting mistake; the page opens in real Chromium with its plots, no
console error, and no script can run in it (shown to run without its Content-Security-Policy).
The full multihead and gpt catalogues' reports are checked in tests/test_catalogue.py and
tests/test_catalogue_gpt.py, from the classes those modules grade anyway."""
import importlib
import os
import re
import subprocess

import nbformat
import pytest

from tinygpt_course.checks import hints
from tinygpt_course.testing import catalogue
from tinygpt_course.testing.course import BIN, env, make_course, nbgrader, submit
from tinygpt_course.testing.notebooks import release_path, with_answer
from tinygpt_course.testing.report import expected_mistakes, listed, section

pytest_plugins = [f"{__package__}.conftest_browser" if __package__ else "conftest_browser"]
browser = importlib.import_module(pytest_plugins[0])

LESSONS = ("head", "multihead", "block")
TEST_CONFIG = "c.RobustExecute.timeout = 30\nc.IndependentChecks.timeout = 60\n"
HOSTILE = "<img src=x onerror=alert(1)>"
HOSTILE_ERROR = '<script>alert("pwned")</script><img src=y onerror=alert(2)>'
RAISES = f'''import torch.nn as nn

class Head(nn.Module):
    def __init__(self, head_size):
        super().__init__()
        raise ValueError({HOSTILE_ERROR!r})
'''
SPOOFER_UID = 4242
# learner -> lesson -> catalogue answer (or "raises", "spoof", "broken")
CLASS = {
    "ana": {"head": "01_right_reference", "multihead": "01_right_comprehension", "block": "01_right_reference"},
    "ben": {"head": "28_dropout_on", "multihead": "67_dropout_on", "block": "27_dropout_on"},
    "cai": {"head": "39_window_mean_added", "multihead": "80_window_mean_added", "block": "04_attention_without_ln1"},
    "dan": {"head": "34_an_extra_layer", "multihead": "06_plain_list", "block": "21_an_extra_layer"},
    "fay": {"head": "10_softmax_over_columns", "multihead": "23_tamper_allclose"},
    "eli": {"head": "spoof", "multihead": "broken"},
    HOSTILE: {"head": "raises", "multihead": "01_right_comprehension"},
}


def expected(student, lesson):
    """The mistakes the report must list for this learner: what the judge names for a catalogue
    answer run here as plain Python; else what the case is."""
    case = CLASS[student].get(lesson)
    if case in (None, "spoof"):
        return None                       # no submission; not graded
    if case == "raises":
        return {"build_error"}
    if case == "broken":
        return {"unanswered"}             # the release was graded in its place
    if case == "23_tamper_allclose":      # 14's wrong order with torch.allclose replaced: the re-run
        case = "14_wrong_order"           # judges the raw numbers in the grader, as for 14
    return expected_mistakes(catalogue.answer(lesson, case))


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    course = make_course(tmp_path_factory.mktemp("class_report"), assignments=LESSONS, extra_config=TEST_CONFIG)
    runs = {}
    for lesson in LESSONS:
        release = release_path(lesson)
        for student, cases in CLASS.items():
            case = cases.get(lesson)
            if case is None:
                continue
            code = RAISES if case == "raises" else catalogue.answer(lesson, "01_right_reference" if lesson != "multihead"
                                                                    else "01_right_comprehension").code \
                if case in ("spoof", "broken") else catalogue.answer(lesson, case).code
            path = submit(course, student, lesson, with_answer(release, code))
            if case == "broken":
                path.write_text(path.read_text()[:-200])
            if case == "spoof":
                for p in (path.parent, path):
                    os.chown(p, SPOOFER_UID, SPOOFER_UID)
        runs[lesson] = nbgrader(course, "autograde", lesson, "--create", check=False)
    reports = {lesson: subprocess.run([str(BIN / "tinygpt-class-report"), lesson], cwd=course, env=env(),
                                      capture_output=True, text=True, timeout=600) for lesson in LESSONS}
    return course, runs, reports


def test_the_report_is_written_for_each_lesson(graded):
    course, runs, reports = graded
    for lesson in LESSONS:
        assert reports[lesson].returncode == 0, reports[lesson].stderr[-2000:]
        assert reports[lesson].stdout.strip() == str(course / "reports" / f"{lesson}.html")
    assert sorted(p.name for p in (course / "reports").iterdir()) == sorted(
        f"{lesson}{end}" for lesson in LESSONS for end in (".html", "-learners.csv"))
    # nbgrader refused the spoofed head only; RecordVerdicts added no file to autograded/: it
    # holds the notebooks and what nbgrader copies from submitted/ (the kept .broken)
    assert re.findall(r"error processing assignment '\w+' for student '(\w+)'", runs["head"].stderr) == ["eli"]
    assert runs["block"].returncode == 0 and runs["multihead"].returncode == 0, runs["multihead"].stderr[-2000:]
    copied = {p.relative_to(course / "submitted") for p in (course / "submitted").rglob("*") if p.is_file()}
    graded = {p.relative_to(course / "autograded") for p in (course / "autograded").rglob("*") if p.is_file()}
    assert graded - copied == set() and {p.name for p in graded} == {f"{lesson}.ipynb" for lesson in LESSONS} | {
        "multihead.ipynb.broken"}


@pytest.mark.parametrize("lesson", LESSONS)
def test_each_mistake_is_counted_exactly(graded, lesson):
    page = (graded[0] / "reports" / f"{lesson}.html").read_text()
    who, counts = listed(page)
    want = {}
    for student in CLASS:
        for m in expected(student, lesson) or ():
            want.setdefault(m, set()).add(student)
    assert who == want
    assert counts == {m: len(s) for m, s in want.items()}
    for m in want:                                   # its ladder, or the note that it has none yet
        row = re.search(rf'<tr id="mistake-{m}">.*?</tr>', page, re.S).group(0)
        rungs = hints.ladder(lesson, m)
        if rungs is None:
            assert "no ladder yet" in row, m
        else:
            assert all(hints.as_html(r) in row for r in rungs) and "no ladder yet" not in row, m


def test_flagged_and_ungraded_with_their_reason(graded):
    head = section((graded[0] / "reports" / "head.html").read_text(), "Flagged and ungraded submissions")
    assert re.search(r"<code>eli</code>.*?ungraded.*?not graded.*?belongs to uid 4242, not to eli", head, re.S), head
    multihead = section((graded[0] / "reports" / "multihead.html").read_text(), "Flagged and ungraded submissions")
    assert re.search(r"<code>fay</code>.*?flagged.*?FLAGGED by the independent re-run: \w+ passed in the learner", multihead, re.S)
    assert re.search(r"<code>eli</code>.*?flagged.*?kept as multihead.ipynb.broken", multihead, re.S), multihead
    block = section((graded[0] / "reports" / "block.html").read_text(), "Flagged and ungraded submissions")
    assert "no submission of block (3)" in block and all(f"<code>{s}</code>" in block for s in ("fay", "eli"))


def test_a_persisting_mistake_stands_out(graded):
    page = (graded[0] / "reports" / "block.html").read_text()
    table = re.search(r'<table class="across">.*?</table>', page, re.S).group(0)
    ben = re.search(r"<tr><th><code>ben</code></th>(.*?)</tr>", table, re.S).group(1)
    assert '<td class="persists">head, multihead, block</td>' in ben
    assert re.search(r"Persisting: .*?<code>dropout_on</code> \(1: ben\)", page)
    assert "<code>ana</code>" not in table                     # right every time: no row


def test_learner_text_is_escaped(graded):
    import html
    page = (graded[0] / "reports" / "head.html").read_text()
    assert HOSTILE not in page and "<script" not in page.lower() and "onerror=alert(2)>" not in page
    assert html.escape(HOSTILE) in page and html.escape(HOSTILE_ERROR) in page


def test_the_page_opens_in_chromium_with_its_plots(graded, page, screenshots, tmp_path):
    course = graded[0]
    errors = []
    page.on("console", lambda msg: errors.append(msg.text) if msg.type == "error" else None)
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    report = course / "reports" / "block.html"
    page.goto(report.as_uri())
    sizes = page.evaluate("Array.from(document.images).map(i => [i.id, i.complete, i.naturalWidth])")
    assert len(sizes) == 2 and all(done and width > 0 for _, done, width in sizes), sizes
    assert page.locator("td.persists").count() >= 1
    page.screenshot(path=str(screenshots / "class-report.png"), full_page=True)
    assert errors == []
    # The Content-Security-Policy is what stops a script that got into the page: the same page
    # with one injected runs it only once the policy is removed.
    injected = report.read_text().replace("</body>", "<script>document.title = 'script ran'</script></body>")
    for name, text in (("with-csp.html", injected), ("without-csp.html", re.sub(r'<meta http-equiv="Content-Security-Policy"[^>]*>', "", injected))):
        (tmp_path / name).write_text(text)
        page.goto((tmp_path / name).as_uri())
        assert (page.title() == "script ran") == (name == "without-csp.html"), name
