"""The head and block lessons: documented printout, checks that name mistakes, real grading.

For each lesson: the source notebook runs and prints exactly the lines under "What you should
see"; every check passes the reference and fails each wrong answer listed below with the
diagnosis the wrong answer deserves (run through the grading protocol, extract_ns/judge_ns);
and nbgrader autograde gives the reference full marks, the unanswered release zero and a wrong
answer exactly the points of the checks it should still pass.
"""
import contextlib
import importlib
import io
import re
import shutil

import nbformat
import pytest
from nbclient import NotebookClient

from conftest import REPO, grade_id, make_course, nbgrader, scores
from tinygpt_course.grading.lesson import trusted_sources

LESSONS = {  # lesson -> (answer cell id, points of each check)
    "head": ("head", {"shapes": 1, "weight_count": 1, "rows_and_mask": 1, "attention_weights": 2,
                      "out_is_weighted_values": 1, "causal": 1}),
    "block": ("block", {"shapes": 1, "weight_count": 1, "layer_norms": 2, "residuals": 2, "causal": 1}),
}

# (lesson, what the wrong answer does, replace this, with this, check that must fail, diagnosis)
WRONG = [
    ("head", "no scale", " * k.shape[-1] ** -0.5", "", "attention_weights", "not scaled"),
    ("head", "scale by sqrt(32)", "k.shape[-1] ** -0.5", "C ** -0.5", "attention_weights", "1/sqrt(32)"),
    ("head", "divide by 16", "k.shape[-1] ** -0.5", "(1 / k.shape[-1])", "attention_weights", "divided by 16"),
    ("head", "q and k swapped", "(q @ k.transpose(-2, -1))", "(k @ q.transpose(-2, -1))",
     "attention_weights", "swapped"),
    ("head", "softmax over columns", "F.softmax(scores, dim=-1)", "F.softmax(scores, dim=-2)",
     "rows_and_mask", "wrong dimension"),
    ("head", "no mask", "scores = scores.masked_fill(", "_ = scores.masked_fill(", "rows_and_mask", "see the future"),
    ("head", "no mask (causal)", "scores = scores.masked_fill(", "_ = scores.masked_fill(", "causal", "see the future"),
    ("head", "mask filled with 0", "float('-inf'))  # hide", "0.0)  # hide", "rows_and_mask", "exp(0) = 1"),
    ("head", "triu mask", "torch.tril(torch.ones(block_size", "torch.triu(torch.ones(block_size",
     "rows_and_mask", "hides the past"),
    ("head", "mask after softmax", "self.weights = F.softmax(scores, dim=-1)",
     "self.weights = F.softmax(q @ k.transpose(-2, -1) * k.shape[-1] ** -0.5, dim=-1).masked_fill(scores < -1e9, 0)",
     "rows_and_mask", "after the softmax"),
    ("head", "key with a bias", "self.key = nn.Linear(n_embd, head_size, bias=False)",
     "self.key = nn.Linear(n_embd, head_size)", "weight_count", "has a bias"),
    ("head", "mask as a Parameter", "self.register_buffer('tril', torch.tril(torch.ones(block_size, block_size)))",
     "self.tril = nn.Parameter(torch.tril(torch.ones(block_size, block_size)))", "weight_count", "nn.Parameter"),
    ("head", "mask as a plain tensor", "self.register_buffer('tril', torch.tril(torch.ones(block_size, block_size)))",
     "self.tril = torch.tril(torch.ones(block_size, block_size))", "weight_count", "plain tensor attribute"),
    ("head", "weights not kept", "self.weights = F.softmax(scores, dim=-1)",
     "return F.softmax(scores, dim=-1) @ self.value(x)", "shapes", "kept no attention weights"),
    ("head", "values skipped", "return self.weights @ self.value(x)", "return self.value(x)",
     "out_is_weighted_values", "value(x) itself"),
    ("head", "x averaged", "return self.weights @ self.value(x)", "return self.weights @ x",
     "shapes", "averaged x itself"),
    ("head", "head size ignored", "self.query = nn.Linear(n_embd, head_size, bias=False)",
     "self.query = nn.Linear(n_embd, n_embd, bias=False)", "shapes", "self.query maps 32 numbers to 32"),
    ("block", "attention without ln1", "self.sa(self.ln1(x))", "self.sa(x)", "layer_norms", "gets x itself"),
    ("block", "post-norm", "x = x + self.sa(self.ln1(x))", "x = self.ln1(x + self.sa(x))", "layer_norms", "gets x itself"),
    ("block", "ln1 and ln2 swapped", "self.sa(self.ln1(x))", "self.sa(self.ln2(x))", "layer_norms", "swapped"),
    ("block", "feed-forward without ln2", "self.ffwd(self.ln2(x))", "self.ffwd(x)", "layer_norms",
     "without its layer norm"),
    ("block", "feed-forward on the block's input", "x = x + self.sa(self.ln1(x))",
     "x = x + self.sa(self.ln1(x)) + self.ffwd(self.ln2(x)); return x", "layer_norms", "of the block's input"),
    ("block", "no residual around attention", "x = x + self.sa(", "x = self.sa(", "residuals", "residual is missing"),
    ("block", "no residual around feed-forward", "x = x + self.ffwd(", "x = self.ffwd(", "residuals",
     "feed-forward's output alone"),
    ("block", "feed-forward output dropped", "x = x + self.ffwd(", "self.ffwd(", "residuals", "never added"),
    ("block", "layer norm on the sum", "return x  ", "return self.ln2(x)  ", "residuals", "after the additions"),
    ("block", "norm over the window", "self.sa(self.ln1(x))", "self.sa(F.layer_norm(x, x.shape[1:]))", "causal",
     "mixes positions"),
    ("block", "no ReLU", "nn.ReLU(), nn.Linear(4", "nn.Linear(4", "weight_count", "no ReLU"),
    ("block", "GELU", "nn.ReLU()", "nn.GELU()", "weight_count", "uses GELU"),
    ("block", "feed-forward not widened", "nn.Linear(n_embd, 4 * n_embd), nn.ReLU(), nn.Linear(4 * n_embd, n_embd))", "nn.Linear(n_embd, n_embd), nn.ReLU(), nn.Linear(n_embd, n_embd))",
     "weight_count", "4 x 32 = 128"),
    ("block", "no ln2", "self.ln2 = nn.LayerNorm(n_embd)", "pass", "weight_count", "no self.ln2"),
    ("block", "unanswered forward", "x = x + self.sa(self.ln1(x))", "raise NotImplementedError()", "shapes", "unanswered"),
]

# Answers that are right although they differ from the reference: every check passes.
RIGHT = [
    ("head", "layers in another order", "self.key = nn.Linear(n_embd, head_size, bias=False)",
     "self.query = nn.Linear(n_embd, head_size, bias=False); self.key = nn.Linear(n_embd, head_size, bias=False)"),
    ("head", "divides by sqrt", "* k.shape[-1] ** -0.5", "/ k.shape[-1] ** 0.5"),
    ("block", "feed-forward drawn first", "self.sa = MultiHead()",
     "self.ffwd = nn.Sequential(nn.Linear(n_embd, 4 * n_embd), nn.ReLU()); self.sa = MultiHead()"),
    ("block", "sums in other words", "x = x + self.sa(self.ln1(x))", "a = self.sa(self.ln1(x)); x = a + x"),
]


def source_path(lesson):
    return REPO / "source" / lesson / f"{lesson}.ipynb"


def answer_source(lesson):
    nb = nbformat.read(source_path(lesson), 4)
    return next(c.source for c in nb.cells if grade_id(c) == LESSONS[lesson][0])


def checks_of(lesson):
    nb = nbformat.read(source_path(lesson), 4)
    return importlib.import_module(nb.metadata["tinygpt"]["checks"])


IN_KERNEL = {  # how the notebook's visible check cells call each lesson's checks
    "head": lambda checks, ns, name: checks.check(name, ns["Head"], ns["embed"], ns["xb"]),
    "block": lambda checks, ns, name: checks.check(name, ns["Block"], ns["MultiHead"], ns["embed"], ns["xb"]),
}


def namespace(lesson, answer):
    """The trusted set-up cells of source/, then the answer, run in this process."""
    ns = {"__name__": "__lesson__"}
    with contextlib.redirect_stdout(io.StringIO()):
        for code in trusted_sources(nbformat.read(source_path(lesson), 4)):
            exec(code, ns)
        exec(answer, ns)
    return ns


def verdicts(lesson, answer, seed=31337):
    """{check: (passed, message)} through the grading protocol, in this process."""
    ns = namespace(lesson, answer)
    module = checks_of(lesson)
    rec = module.extract_ns(ns, seed)
    return {name: module.judge_ns(ns, name, rec) for name in LESSONS[lesson][1]}


def documented(lesson):
    nb = nbformat.read(source_path(lesson), 4)
    cell = next(c for c in nb.cells if "What you should see" in c.source)
    return re.search(r"```\n(.*?)\n```", cell.source, re.S).group(1).splitlines()


@pytest.fixture(scope="module", params=list(LESSONS))
def executed(request):
    nb = nbformat.read(source_path(request.param), 4)
    NotebookClient(nb, timeout=180, kernel_name="python3",
                   resources={"metadata": {"path": str(source_path(request.param).parent)}}).execute()
    return request.param, nb


def test_source_prints_exactly_the_documented_lines(executed):
    lesson, nb = executed
    runner = next(c for c in nb.cells if grade_id(c) == "runner")
    lines = "".join(o.get("text", "") for o in runner.outputs if o.output_type == "stream").splitlines()
    assert lines == documented(lesson) and len(lines) >= 8
    note = next(c for c in nb.cells if grade_id(c) == "numbers_note")
    assert "are the documented ones" in "".join(o.get("text", "") for o in note.outputs)


def test_checks_pass_and_plot_shows_in_the_executed_source(executed):
    lesson, nb = executed
    for cell in nb.cells:
        if cell.metadata.get("nbgrader", {}).get("grade"):
            assert not [o for o in cell.outputs if o.output_type == "error"], cell.source
            assert cell.outputs and cell.outputs[0].text.startswith("\u2713"), cell.source
    plot = next(c for c in nb.cells if grade_id(c) == "plot")
    assert any("image/png" in o.get("data", {}) for o in plot.outputs)


@pytest.mark.parametrize("lesson", list(LESSONS))
def test_reference_passes_every_check_and_blank_is_unanswered(lesson):
    for name, (ok, message) in verdicts(lesson, answer_source(lesson)).items():
        assert ok, f"{name}: {message}"
    blank = re.sub(r"### BEGIN SOLUTION\n.*?### END SOLUTION", "raise NotImplementedError()",
                   answer_source(lesson), flags=re.S)
    for name, (ok, message) in verdicts(lesson, blank).items():
        assert not ok and "unanswered" in message, f"{name}: {message}"


@pytest.mark.parametrize("lesson, what, old, new, failing, diagnosis", WRONG, ids=[w[1] for w in WRONG])
def test_each_check_fails_for_the_mistake_it_names(lesson, what, old, new, failing, diagnosis):
    answer = answer_source(lesson)
    assert answer.count(old) == 1, f"the wrong answer {what!r} no longer applies"
    ok, message = verdicts(lesson, answer.replace(old, new))[failing]
    assert not ok, f"{failing} passed {what!r}"
    assert diagnosis in message, message
    # the same verdict in the learner's kernel, where the check cell raises CheckFailed
    checks = checks_of(lesson)
    with pytest.raises(checks.CheckFailed, match=re.escape(diagnosis)):
        with contextlib.redirect_stdout(io.StringIO()):
            IN_KERNEL[lesson](checks, namespace(lesson, answer.replace(old, new)), failing)


@pytest.mark.parametrize("lesson, what, old, new", RIGHT, ids=[r[1] for r in RIGHT])
def test_right_answers_in_other_words_pass(lesson, what, old, new):
    answer = answer_source(lesson)
    assert answer.count(old) == 1
    for name, (ok, message) in verdicts(lesson, answer.replace(old, new)).items():
        assert ok, f"{what}: {name}: {message}"


@pytest.mark.parametrize("lesson", list(LESSONS))
def test_autograde_reference_full_blank_zero_wrong_partial(lesson, tmp_path):
    course = make_course(tmp_path / "course", assignments=(lesson,))
    validated = nbgrader(course, "validate", str(course / "source" / lesson / f"{lesson}.ipynb"))
    assert "Success" in validated.stdout, validated.stdout
    committed = REPO / "release" / lesson / f"{lesson}.ipynb"
    assert committed.exists(), f"run nbgrader generate_assignment {lesson} --force"
    _, what, old, new, failing, diagnosis = next(w for w in WRONG if w[0] == lesson)
    wrong = nbformat.read(source_path(lesson), 4)
    for cell in wrong.cells:
        if grade_id(cell) == LESSONS[lesson][0]:
            cell.source = cell.source.replace(old, new)
    for student, nb in (("reference", nbformat.read(source_path(lesson), 4)),
                        ("blank", nbformat.read(committed, 4)), ("wrong", wrong)):
        dest = course / "submitted" / student / lesson
        dest.mkdir(parents=True)
        nbformat.write(nb, dest / f"{lesson}.ipynb")
    nbgrader(course, "autograde", lesson, "--create", "--force")
    points = LESSONS[lesson][1]
    assert scores(course, lesson, "reference") == {k: float(v) for k, v in points.items()}
    assert set(scores(course, lesson, "blank").values()) == {0.0}
    wrong_scores = scores(course, lesson, "wrong")
    lost = {k for k, v in wrong_scores.items() if v == 0}
    assert failing in lost and wrong_scores[failing] == 0, (what, wrong_scores)
    assert sum(wrong_scores.values()) > 0, (what, wrong_scores)
    nbgrader(course, "generate_feedback", lesson, "--force")
    pages = {s: (course / "feedback" / s / lesson / f"{lesson}.html").read_text() for s in ("blank", "wrong")}
    assert "still unanswered" in pages["blank"]
    assert diagnosis.replace("'", "&#39;") in pages["wrong"] or diagnosis in pages["wrong"], what
    assert "BEGIN HIDDEN" not in pages["wrong"] and "seed=" not in pages["wrong"]
    shutil.rmtree(course, ignore_errors=True)
