"""What the learner sees, for real: each catalogue answer typed into the released lesson, run
with JupyterLab's Run All semantics (stop at the first cell that raises) and through the real
`nbgrader validate` (what the Validate button runs).

For every mistake: Validate does not say "Success" and names the mistake; the runner cell shows
no traceback; Run All reaches the checks (unless the learner's own cell stops it: a syntax
error, a kernel that dies). For every right answer: "Success", and a runner without a single
failing step. Slow (two notebook runs per answer), so the answers run two at a time.
"""
from concurrent.futures import ThreadPoolExecutor

import pytest

from conftest import REPO
from learner_runs import SUCCESS, catalogue_mistakes, errors, learner_notebook, run_all, text, validate

RIGHT, WRONG = catalogue_mistakes(REPO)
CHECK_IDS = ("shapes", "weight_count", "out_is_proj", "attention_weights", "causal")

# what Validate must say for each mistake (in the judges' words, whitespace aside)
NAMES_THE_MISTAKE = {
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
    "21_os_exit": "Kernel died",   # nbgrader's own words: no cell after it runs
    "22_runaway_memory": "allocate",
}
# where the learner's own answer cell stops Run All (JupyterLab shows the error under it)
STOPS_IN_ANSWER = {"18_syntax_error", "21_os_exit"}


def squash(s):
    return " ".join(s.split())


@pytest.fixture(scope="module")
def runs(request, tmp_path_factory):
    """{answer: (validate's report, the notebook after Run All)} for the answers this session's
    selected tests ask for, two at a time."""
    work = tmp_path_factory.mktemp("learner")
    wanted = set()
    for item in request.session.items:
        params = getattr(getattr(item, "callspec", None), "params", {})
        if item.module is request.module and "name" in params:
            wanted.add(params["name"])
    answers = [(name, answer) for name, answer in RIGHT + WRONG if name in wanted]

    def one(item):
        name, answer = item
        nb = learner_notebook(REPO, "multihead", answer)
        return name, (validate(REPO, nb, work / "validate" / name), run_all(REPO, nb, work / "run" / name))
    with ThreadPoolExecutor(max_workers=2) as pool:
        return dict(pool.map(one, answers))


def test_every_mistake_has_its_words():
    assert {name for name, _ in WRONG} == set(NAMES_THE_MISTAKE)
    assert len(RIGHT) >= 5


@pytest.mark.parametrize("name", [n for n, _ in RIGHT])
def test_right_answer_gets_success_and_a_clean_printout(runs, name):
    validated, ran = runs[name]
    assert SUCCESS in validated, validated
    assert ran.metadata["stopped_at"] is None
    assert not errors(ran, "runner") and "\u2717" not in text(ran, "runner")
    assert "weights to learn: 4128" in text(ran, "runner")
    for gid in CHECK_IDS:
        assert text(ran, gid).startswith("\u2713"), (gid, text(ran, gid))


@pytest.mark.parametrize("name", [n for n, _ in WRONG])
def test_mistake_gets_no_success_no_traceback_and_its_name(runs, name):
    validated, ran = runs[name]
    assert SUCCESS not in validated, validated
    assert NAMES_THE_MISTAKE[name] in squash(validated), validated
    assert not errors(ran, "runner"), errors(ran, "runner")
    if name in STOPS_IN_ANSWER:
        assert ran.metadata["stopped_at"] == "multihead"
    else:   # Run All went through the runner, the note and the plot, and reached the checks
        assert ran.metadata["stopped_at"] in (None,) + CHECK_IDS, ran.metadata["stopped_at"]
        for gid in ("numbers_note", "plot"):
            assert not errors(ran, gid), (gid, errors(ran, gid))


@pytest.mark.parametrize("name", [n for n, _ in WRONG if n not in STOPS_IN_ANSWER])
def test_failing_check_reads_as_one_short_paragraph(runs, name):
    validated, _ = runs[name]
    failed = validated.split("The error was:")[1:]
    assert failed, validated
    for block in failed:
        error = block.split("=" * 20)[0].strip("\n")
        assert error.lstrip().startswith("Check failed: "), error
        assert not any(word in error for word in ("Traceback", "File ", ".py", "site-packages")), error
        # validate indents by 4 and cuts longer lines with '...': none is cut
        assert all(len(line) <= 4 + 78 and not line.endswith("...") for line in error.splitlines()), error


RUNNER_SAYS = {"07_wrong_dim": "joined along the wrong dimension", "08_summed": "added or averaged",
               "10_no_proj": "no self.proj", "13_head_run_twice": "kept no attention weights",
               "17_unanswered": "still unanswered", "19_exception": "not today",
               "20_endless_loop": "did not finish within", "22_runaway_memory": "allocate"}


@pytest.mark.parametrize("name", sorted(RUNNER_SAYS))
def test_runner_says_what_went_wrong(runs, name):
    """The runner's own words, for the mistakes that stop one of its steps."""
    printed = squash(text(runs[name][1], "runner"))
    assert "\u2717" in printed and RUNNER_SAYS[name] in printed, printed
