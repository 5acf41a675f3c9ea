"""What the learner sees, for real: each answer typed into the released lesson and run through
nbgrader's Validator, as the Validate button runs it (every cell in order; the first cell that
raised is where JupyterLab's Run All stops: tests/test_browser.py runs Run All itself in
Chromium). Every lesson with a runner: multihead's catalogue (tests/catalogue/), head's and
block's wrong and right answers (tests/test_lessons_head_block.py).

For every mistake: Validate does not say "Success" and names the mistake; the runner cell shows
no traceback; Run All reaches the checks (unless the learner's own cell stops it: a syntax
error, a kernel that dies, a loop at its top level). For every right answer: "Success", and a
runner without a single failing step. Slow (a notebook run per answer): the answers run two at
a time, and only those of the selected tests.
"""
from concurrent.futures import ThreadPoolExecutor

import pytest

from conftest import REPO
from learner_runs import (SUCCESS, catalogue_mistakes, errors, head_block_diagnoses, head_block_mistakes,
                          learner_notebook, text, validate)
from tinygpt_course.checks.protocol import load_lesson

# what Validate must say for each multihead mistake (in the judges' words, whitespace aside)
MULTIHEAD_SAYS = {
    "06_plain_list": "nn.ModuleList([...])",
    "07_wrong_dim": "joined along the wrong dimension",
    "08_summed": "added or averaged",
    "09_head_size_32": "Use Head(16)",
    "10_no_proj": "no self.proj",
    "11_proj_no_bias": "no bias",
    "12_same_head_twice": "one Head object twice",
    "13_head_run_twice": "forward ran the heads [1, 1]",
    "14_wrong_order": "joined in the wrong order",
    "15_relu_after": "extra ReLU after the projection",
    "16_tanh_before": "extra tanh before the projection",
    "17_unanswered": "still unanswered",
    "18_syntax_error": "syntax error on its line 4",
    "19_exception": "ValueError: not today",
    "20_endless_loop": "did not finish within",
    "21_os_exit": "Kernel died",   # nbgrader's own words: no cell after the answer runs
    "22_runaway_memory": "allocate",
    "42_endless_loop_top_level": "MultiHead is not defined: the cell that defines it has not run to its end",
}
# where the learner's own answer cell stops Run All (JupyterLab shows the error under it)
STOPS_IN_ANSWER = {("multihead", "18_syntax_error"), ("multihead", "21_os_exit"),
                   ("multihead", "42_endless_loop_top_level")}
# what the runner itself says, for mistakes that stop one of its steps
RUNNER_SAYS = {
    ("multihead", "07_wrong_dim"): "joined along the wrong dimension",
    ("multihead", "08_summed"): "added or averaged",
    ("multihead", "10_no_proj"): "no self.proj",
    ("multihead", "13_head_run_twice"): "kept no attention weights",
    ("multihead", "17_unanswered"): "still unanswered",
    ("multihead", "19_exception"): "not today",
    ("multihead", "20_endless_loop"): "did not finish within",
    ("multihead", "22_runaway_memory"): "allocate",
    ("head", "weights not kept"): "kept no attention weights",
    ("head", "x averaged"): "averaged x itself",
    ("block", "no ln2"): "no self.ln2",
    ("block", "unanswered forward"): "still unanswered",
}


def answers():
    """(lesson, name, answer, words Validate must say or None for a right answer)."""
    right, wrong = catalogue_mistakes(REPO)
    rows = [("multihead", n, a, None) for n, a in right] + [
        ("multihead", n, a, MULTIHEAD_SAYS.get(n, f"(add {n} to MULTIHEAD_SAYS)")) for n, a in wrong]
    for lesson in ("head", "block"):
        right, wrong = head_block_mistakes(REPO, lesson)
        says = head_block_diagnoses(REPO, lesson)
        rows += [(lesson, n, a, None) for n, a in right] + [(lesson, n, a, says[n]) for n, a in wrong]
    return rows


ANSWERS = answers()
RIGHT = [(lesson, name) for lesson, name, _, says in ANSWERS if says is None]
WRONG = [(lesson, name) for lesson, name, _, says in ANSWERS if says is not None]
SAYS = {(lesson, name): says for lesson, name, _, says in ANSWERS}
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

    def one(row):
        lesson, name, answer, _ = row
        folder = f"{lesson}-{name}".replace(" ", "_").replace("'", "")
        return (lesson, name), validate(REPO, learner_notebook(REPO, lesson, answer), work / folder)
    with ThreadPoolExecutor(max_workers=2) as pool:
        return dict(pool.map(one, [row for row in ANSWERS if row[:2] in wanted]))


def test_every_multihead_mistake_has_its_words():
    assert {name for lesson, name in WRONG if lesson == "multihead"} == set(MULTIHEAD_SAYS)
    assert len(RIGHT) >= 5 + 3 and len(WRONG) >= 17 + 15 + 14


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
    assert SAYS[key] in squash(validated), validated
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


@pytest.mark.parametrize("key", sorted(RUNNER_SAYS), ids=["-".join(k) for k in sorted(RUNNER_SAYS)])
def test_runner_says_what_went_wrong(runs, key):
    printed = squash(text(runs[key][1], "runner"))
    assert "\u2717" in printed and RUNNER_SAYS[key] in printed, printed
