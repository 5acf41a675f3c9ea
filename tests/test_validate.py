"""What the learner sees, for real: each answer typed into the released lesson and run through
nbgrader's Validator, as the Validate button runs it (every cell in order; the first cell that
raised is where JupyterLab's Run All stops: tests/test_browser.py runs Run All itself in
Chromium). The catalogue's answers (tests/catalogue/<lesson>/, `# says:` and `# runner:` the
words) of multihead, head and block: right ones, mistakes and crashes a learner could type.

For every mistake: Validate does not say "Success" and names the mistake; the runner cell shows
no traceback; Run All reaches the checks (unless the learner's own cell stops it: a syntax
error, a kernel that dies, a loop at its top level). For every right answer: "Success", and a
runner without a single failing step. Slow (a notebook run per answer): the answers run two at
a time, and only those of the selected tests.
"""
from concurrent.futures import ThreadPoolExecutor

import pytest

from tinygpt_course.checks import hints, tutor
from tinygpt_course.checks.protocol import load_lesson
from tinygpt_course.testing.course import REPO
from tinygpt_course.testing import learner
from tinygpt_course.testing.learner import LESSONS, SUCCESS, errors, learner_notebook, text, validate

# where the learner's own answer cell stops Run All (JupyterLab shows the error under it)
STOPS_IN_ANSWER = {("multihead", "18_syntax_error"), ("multihead", "21_os_exit"),
                   ("multihead", "42_endless_loop_top_level")}

ANSWERS = {(a.lesson, a.name): a for lesson in LESSONS for a in learner.runs(lesson)}
RIGHT = [key for key, a in ANSWERS.items() if a.sort == "right"]
WRONG = [key for key, a in ANSWERS.items() if a.sort != "right"]
RUNNER_SAYS = sorted(key for key in WRONG if ANSWERS[key].runner)
ids = ["-".join(key) for key in RIGHT], ["-".join(key) for key in WRONG]


def squash(s):
    return " ".join(s.split())


@pytest.fixture(scope="module")
def runs(request, tmp_path_factory):
    """{(lesson, name): (validate's report, the notebook it executed)} for the answers the
    selected tests ask for, two at a time."""
    work = tmp_path_factory.mktemp("learner")
    wanted = set()
    for item in request.session.items:
        params = getattr(getattr(item, "callspec", None), "params", {})
        if item.module is request.module and "key" in params:
            wanted.add(params["key"])

    def one(key):
        lesson, name = key
        return key, validate(REPO, learner_notebook(REPO, lesson, ANSWERS[key].code), work / f"{lesson}-{name}")
    with ThreadPoolExecutor(max_workers=2) as pool:
        return dict(pool.map(one, [key for key in ANSWERS if key in wanted]))


def test_every_lesson_has_right_answers_and_every_mistake_its_words():
    for lesson in LESSONS:
        assert any(key[0] == lesson for key in RIGHT) and any(key[0] == lesson for key in WRONG), lesson
    assert not [key for key in WRONG if not ANSWERS[key].validate_says], "a mistake without `# says:` words"
    assert STOPS_IN_ANSWER <= set(WRONG)


@pytest.mark.parametrize("key", RIGHT, ids=ids[0])
def test_right_answer_gets_success_and_a_clean_printout(runs, key):
    validated, ran = runs[key]
    assert SUCCESS in validated, validated
    assert ran.metadata["stopped_at"] is None
    assert not errors(ran, "runner") and "\u2717" not in text(ran, "runner")
    assert "weights to learn: " in text(ran, "runner")
    for gid in load_lesson(key[0]).checks:
        assert text(ran, gid).startswith("\u2713"), (gid, text(ran, gid))


@pytest.mark.parametrize("key", WRONG, ids=ids[1])
def test_mistake_gets_no_success_no_traceback_and_its_name(runs, key):
    validated, ran = runs[key]
    assert SUCCESS not in validated, validated
    assert ANSWERS[key].validate_says in squash(validated), validated
    assert not errors(ran, "runner"), errors(ran, "runner")
    if key in STOPS_IN_ANSWER:
        allowed = {key[0]}
        if key[1] == "21_os_exit":
            # a kernel killed by os._exit may die before it reports that the answer cell started:
            # then the last cell known to have run is the code cell just before the answer
            code = [c.metadata.get("nbgrader", {}).get("grade_id") for c in ran.cells if c.cell_type == "code"]
            allowed.add(code[code.index(key[0]) - 1])
        assert ran.metadata["stopped_at"] in allowed, (ran.metadata["stopped_at"], allowed)
    else:   # Run All went through the runner, the note and the plot, and reached the checks
        assert ran.metadata["stopped_at"] in (None,) + tuple(load_lesson(key[0]).checks), ran.metadata["stopped_at"]
        for gid in ("numbers_note", "plot"):
            assert not errors(ran, gid), (gid, errors(ran, gid))


@pytest.mark.parametrize("key", [k for k in WRONG if k not in STOPS_IN_ANSWER],
                         ids=[i for k, i in zip(WRONG, ids[1]) if k not in STOPS_IN_ANSWER])
def test_failing_check_reads_as_one_short_paragraph(runs, key):
    validated, _ = runs[key]
    failed = validated.split("The error was:")[1:]
    assert failed, validated
    for block in failed:
        error = block.split("=" * 20)[0].strip("\n")
        assert error.lstrip().startswith("Check failed: "), error
        assert not any(word in error for word in ("Traceback", "File ", ".py", "site-packages")), error
        # validate indents by 4 and cuts longer lines with '...': none is cut
        assert all(len(line) <= 4 + 78 and not line.endswith("...") for line in error.splitlines()), error


@pytest.mark.parametrize("key", RUNNER_SAYS, ids=["-".join(k) for k in RUNNER_SAYS])
def test_runner_says_what_went_wrong(runs, key):
    printed = squash(text(runs[key][1], "runner"))
    assert "\u2717" in printed and ANSWERS[key].runner in printed, printed


HINTED = [key for key in WRONG if key not in STOPS_IN_ANSWER and ANSWERS[key].mistake
          and hints.ladder(key[0], ANSWERS[key].mistake)]


@pytest.mark.parametrize("key", HINTED, ids=["-".join(k) for k in HINTED])
def test_failing_check_offers_the_first_hint_and_how_to_get_the_next(runs, key):
    """Validate runs headless (no widget renders): the check that names the mistake ends with
    rung 1 of its hint ladder and the call that prints the next (checks/tutor.py)."""
    validated, _ = runs[key]
    # a raw error's ladder depends on where it was raised (hints.PLACES): rung 1 of one of them
    rungs = {squash(tutor.rung_text(hints.ladder(key[0], ANSWERS[key].mistake, where), 1))
             for where in (None, *hints.PLACES)}
    assert any(rung in squash(validated) for rung in rungs), validated
    assert "checks.hint('" in squash(validated), validated
