"""The head and block lessons: documented printout, checks that name mistakes, real grading.

For each lesson: the source notebook runs and prints exactly the lines under "What you should
see"; every check passes the reference and fails each wrong answer listed below with the
diagnosis and the kind the wrong answer deserves (extract on the answer, judged against the same
extract of the solution, as grading does); the same verdict reaches the learner's kernel, where
the check is judged against the stored reference.pt; and nbgrader autograde gives the reference
full marks, the unanswered release zero and a wrong answer exactly the points of the checks it
should still pass.
"""
import contextlib
import importlib
import io
import re
import shutil

import nbformat
import pytest
import torch
from nbclient import NotebookClient

from conftest import REPO, grade_id, make_course, nbgrader, scores
from tinygpt_course.checks import CheckFailed
from tinygpt_course.checks.protocol import Kind, load_lesson
from tinygpt_course.config import SIZES
from tinygpt_course.grading.lesson import read_lesson

LESSONS = {  # lesson -> (answer cell id, points of each check)
    "head": ("head", {"shapes": 1, "weight_count": 1, "rows_and_mask": 1, "attention_weights": 2,
                      "out_is_weighted_values": 1, "causal": 1}),
    "block": ("block", {"shapes": 1, "weight_count": 1, "layer_norms": 2, "residuals": 2, "causal": 1}),
}
C, HS, H = SIZES.n_embd, SIZES.head_size, SIZES.ffwd_hidden

# (lesson, what the wrong answer does, replace this, with this, check that must fail, its kind, diagnosis)
V, S, U, N, CAUSAL, SHAPE, UNANSWERED = (Kind.WRONG_VALUE, Kind.STRUCTURE, Kind.UNREGISTERED, Kind.NO_RESULT,
                                         Kind.NOT_CAUSAL, Kind.WRONG_SHAPE, Kind.UNANSWERED)
WRONG = [
    ("head", "no scale", " * k.shape[-1] ** -0.5", "", "attention_weights", V, "not scaled"),
    ("head", "scale by sqrt(n_embd)", "k.shape[-1] ** -0.5", "C ** -0.5", "attention_weights", V,
     f"1/sqrt({C})"),
    ("head", "divide by head_size", "k.shape[-1] ** -0.5", "(1 / k.shape[-1])", "attention_weights", V,
     f"divided by {HS}"),
    ("head", "multiply by sqrt(head_size)", "k.shape[-1] ** -0.5", "k.shape[-1] ** 0.5", "attention_weights", V,
     f"multiplied by sqrt({HS})"),
    ("head", "q and k swapped", "(q @ k.transpose(-2, -1))", "(k @ q.transpose(-2, -1))",
     "attention_weights", V, "swapped"),
    ("head", "value as key", "(q @ k.transpose(-2, -1))", "(q @ self.value(x).transpose(-2, -1))",
     "attention_weights", V, "value instead of key"),
    ("head", "softmax over columns", "F.softmax(scores, dim=-1)", "F.softmax(scores, dim=-2)",
     "rows_and_mask", V, "wrong dimension"),
    ("head", "no mask", "scores = scores.masked_fill(", "_ = scores.masked_fill(", "rows_and_mask", CAUSAL,
     "see the future"),
    ("head", "no mask (causal)", "scores = scores.masked_fill(", "_ = scores.masked_fill(", "causal", CAUSAL,
     "see the future"),
    ("head", "mask filled with 0", "float('-inf'))  # hide", "0.0)  # hide", "rows_and_mask", CAUSAL, "exp(0) = 1"),
    ("head", "triu mask", "torch.tril(torch.ones(block_size", "torch.triu(torch.ones(block_size",
     "rows_and_mask", V, "hides the past"),
    ("head", "mask after softmax", "self.weights = F.softmax(scores, dim=-1)",
     "self.weights = F.softmax(q @ k.transpose(-2, -1) * k.shape[-1] ** -0.5, dim=-1).masked_fill(scores < -1e9, 0)",
     "rows_and_mask", V, "after the softmax"),
    ("head", "key with a bias", "self.key = nn.Linear(n_embd, head_size, bias=False)",
     "self.key = nn.Linear(n_embd, head_size)", "weight_count", S, "has a bias"),
    ("head", "mask as a Parameter", "self.register_buffer('tril', torch.tril(torch.ones(block_size, block_size)))",
     "self.tril = nn.Parameter(torch.tril(torch.ones(block_size, block_size)))", "weight_count", S, "nn.Parameter"),
    ("head", "mask as a plain tensor", "self.register_buffer('tril', torch.tril(torch.ones(block_size, block_size)))",
     "self.tril = torch.tril(torch.ones(block_size, block_size))", "weight_count", U, "plain tensor attribute"),
    ("head", "weights not kept", "self.weights = F.softmax(scores, dim=-1)",
     "return F.softmax(scores, dim=-1) @ self.value(x)", "shapes", V, "kept no attention weights"),
    ("head", "values skipped", "return self.weights @ self.value(x)", "return self.value(x)",
     "out_is_weighted_values", V, "value(x) itself"),
    ("head", "x averaged", "return self.weights @ self.value(x)", "return self.weights @ x",
     "shapes", SHAPE, "averaged x itself"),
    ("head", "head size ignored", "self.query = nn.Linear(n_embd, head_size, bias=False)",
     "self.query = nn.Linear(n_embd, n_embd, bias=False)", "shapes", S, f"self.query maps {C} numbers to {C}"),
    ("head", "forward raises", "k, q = self.key(x), self.query(x)", "k, q = self.key(x), self.query(x.sum())",
     "shapes", Kind.FORWARD_ERROR, "forward raised"),
    ("head", "unanswered forward", "k, q = self.key(x), self.query(x)", "raise NotImplementedError()",
     "causal", UNANSWERED, "unanswered"),
    ("block", "attention without ln1", "self.sa(self.ln1(x))", "self.sa(x)", "layer_norms", V, "gets x itself"),
    ("block", "post-norm", "x = x + self.sa(self.ln1(x))", "x = self.ln1(x + self.sa(x))", "layer_norms", V,
     "gets x itself"),
    ("block", "ln1 and ln2 swapped", "self.sa(self.ln1(x))", "self.sa(self.ln2(x))", "layer_norms", V, "swapped"),
    ("block", "feed-forward without ln2", "self.ffwd(self.ln2(x))", "self.ffwd(x)", "layer_norms", V,
     "without its layer norm"),
    ("block", "feed-forward through ln1", "self.ffwd(self.ln2(x))", "self.ffwd(self.ln1(x))", "layer_norms", V,
     "went through self.ln1"),
    ("block", "feed-forward on the block's input", "x = x + self.sa(self.ln1(x))",
     "x = x + self.sa(self.ln1(x)) + self.ffwd(self.ln2(x)); return x", "layer_norms", V, "of the block's input"),
    ("block", "feed-forward on the attention alone", "x = x + self.sa(self.ln1(x))",
     "a = self.sa(self.ln1(x)); x = x + a + self.ffwd(self.ln2(a)); return x",
     "layer_norms", V, "only the attention's output"),
    ("block", "no residual around attention", "x = x + self.sa(", "x = self.sa(", "residuals", V, "residual is missing"),
    ("block", "no residual around feed-forward", "x = x + self.ffwd(", "x = self.ffwd(", "residuals", V,
     "feed-forward's output alone"),
    ("block", "feed-forward output dropped", "x = x + self.ffwd(", "self.ffwd(", "residuals", V, "never added"),
    ("block", "attention output dropped", "x = x + self.sa(", "self.sa(", "residuals", V,
     "attention's output is never added"),
    ("block", "layer norm on the sum", "return x  ", "return self.ln2(x)  ", "residuals", V, "after the additions"),
    ("block", "norm over the window", "self.sa(self.ln1(x))", "self.sa(F.layer_norm(x, x.shape[1:]))", "causal",
     CAUSAL, "mixes positions"),
    ("block", "no ReLU", "nn.ReLU(), nn.Linear(4", "nn.Linear(4", "weight_count", S, "no ReLU"),
    ("block", "GELU", "nn.ReLU()", "nn.GELU()", "weight_count", S, "uses GELU"),
    ("block", "feed-forward not widened",
     "nn.Linear(n_embd, 4 * n_embd), nn.ReLU(), nn.Linear(4 * n_embd, n_embd))",
     "nn.Linear(n_embd, n_embd), nn.ReLU(), nn.Linear(n_embd, n_embd))",
     "weight_count", S, f"{SIZES.ffwd_mult} x {C} = {H}"),
    ("block", "no ln2", "self.ln2 = nn.LayerNorm(n_embd)", "pass", "weight_count", S, "no self.ln2"),
    ("block", "an extra layer", "self.ln2 = nn.LayerNorm(n_embd)",
     "self.ln2 = nn.LayerNorm(n_embd); self.out = nn.Linear(n_embd, n_embd)", "weight_count", S, "layers besides"),
    ("block", "attention with other sizes", "self.sa = MultiHead()", "self.sa = MultiHead(4, 8)",
     "weight_count", S, "built with its defaults"),
    ("block", "unanswered forward", "x = x + self.sa(self.ln1(x))", "raise NotImplementedError()", "shapes",
     UNANSWERED, "unanswered"),
    ("block", "forward raises", "x = x + self.sa(self.ln1(x))", "x = x + self.sa(self.ln1(x.sum()))", "shapes",
     Kind.FORWARD_ERROR, "forward raised"),
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
    return read_lesson(source_path(lesson)).solution


def wrong_answer(lesson, old, new):
    answer = answer_source(lesson)
    assert answer.count(old) == 1, f"the wrong answer {old!r} -> {new!r} no longer applies"
    return answer.replace(old, new)


def blank_answer(lesson):
    return re.sub(r"### BEGIN SOLUTION\n.*?### END SOLUTION", "raise NotImplementedError()",
                  answer_source(lesson), flags=re.S)


def namespace(lesson, answer):
    """The trusted set-up cells of source/, then the answer, run in this process."""
    ns = {"__name__": "__lesson__"}
    with contextlib.redirect_stdout(io.StringIO()):
        for code in read_lesson(source_path(lesson)).setup:
            exec(code, ns)
        exec(answer, ns)
    return ns


def record(lesson, answer, seed):
    extract = importlib.import_module(load_lesson(lesson).extract_module).extract
    return extract(namespace(lesson, answer), seed)


def verdicts(lesson, answer, seed=31337):
    """{check: Verdict} as grading makes them: the answer's record judged against the solution's."""
    rec, ref = record(lesson, answer, seed), record(lesson, answer_source(lesson), seed)
    return {name: load_lesson(lesson).verdict(name, rec, ref) for name in LESSONS[lesson][1]}


def in_kernel(lesson, ns, name):
    """The notebook's visible check cell: checks.check(name, ...) as the source notebook calls it."""
    checks = importlib.import_module(f"tinygpt_course.checks.{lesson}")
    args = {"head": ("Head", "embed", "xb"), "block": ("Block", "MultiHead", "embed", "xb")}[lesson]
    with contextlib.redirect_stdout(io.StringIO()) as out:
        checks.check(name, *(ns[a] for a in args))
    return out.getvalue()


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
    graded = [c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade")]
    assert sorted(grade_id(c) for c in graded) == sorted(load_lesson(lesson).checks)
    for cell in graded:
        assert not [o for o in cell.outputs if o.output_type == "error"], cell.source
        assert cell.outputs and cell.outputs[0].text.startswith("\u2713"), cell.source
        assert "seed=" not in cell.source   # the notebook uses the lesson's default seed
    plot = next(c for c in nb.cells if grade_id(c) == "plot")
    assert any("image/png" in o.get("data", {}) for o in plot.outputs)


def cell_text(cell):
    return "".join(o.get("text", "") for o in cell.outputs if o.output_type == "stream")


def demo(nb, gid):
    """(the narrative above the demo cell `gid`, the lines it documents, the lines it printed)."""
    i = next(i for i, c in enumerate(nb.cells) if grade_id(c) == gid)
    narrative = nb.cells[i - 1].source
    block = re.search(r"\*\*It prints:\*\*\s*```\n(.*?)\n```", narrative, re.S)
    assert block, f"the cell above {gid} documents no printout"
    return " ".join(narrative.replace(block.group(0), "").split()), block.group(1).splitlines(), cell_text(nb.cells[i]).splitlines()


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


def same_record(a, b):
    if torch.is_tensor(a):
        return torch.is_tensor(b) and a.shape == b.shape and torch.equal(a, b)
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(same_record(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return isinstance(b, (list, tuple)) and len(a) == len(b) and all(map(same_record, a, b))
    return a == b


@pytest.mark.parametrize("lesson", list(LESSONS))
def test_stored_reference_is_the_solutions_record(lesson):
    from tinygpt_course.checks.notebook import reference
    fresh = record(lesson, answer_source(lesson), load_lesson(lesson).default_seed)
    assert same_record(fresh, reference(lesson)), (
        f"run `python -m tinygpt_course.grading.reference {lesson}` and commit its reference.pt")


@pytest.mark.parametrize("lesson", list(LESSONS))
def test_reference_passes_every_check_and_blank_is_unanswered(lesson):
    for name, v in verdicts(lesson, answer_source(lesson)).items():
        assert v.passed and v.kind is Kind.PASSED, f"{name}: {v.message}"
    for name, v in verdicts(lesson, blank_answer(lesson)).items():
        assert not v.passed and v.kind is Kind.UNANSWERED and "unanswered" in v.message, f"{name}: {v}"


@pytest.mark.parametrize("lesson, what, old, new, failing, kind, diagnosis", WRONG, ids=[w[1] for w in WRONG])
def test_each_check_fails_for_the_mistake_it_names(lesson, what, old, new, failing, kind, diagnosis):
    answer = wrong_answer(lesson, old, new)
    v = verdicts(lesson, answer)[failing]
    assert not v.passed, f"{failing} passed {what!r}"
    assert v.kind is kind and diagnosis in v.message, v
    # the same diagnosis in the learner's kernel, where the check cell raises CheckFailed
    with pytest.raises(CheckFailed, match=re.escape(diagnosis)):
        in_kernel(lesson, namespace(lesson, answer), failing)


@pytest.mark.parametrize("lesson, what, old, new", RIGHT, ids=[r[1] for r in RIGHT])
def test_right_answers_in_other_words_pass(lesson, what, old, new):
    ns = namespace(lesson, wrong_answer(lesson, old, new))
    for name, v in verdicts(lesson, wrong_answer(lesson, old, new)).items():
        assert v.passed, f"{what}: {name}: {v.message}"
        assert in_kernel(lesson, ns, name).startswith("\u2713")


@pytest.mark.parametrize("lesson, what, old, new, failing, kind, diagnosis",
                         [w for w in WRONG if w[5] in (Kind.STRUCTURE, Kind.UNREGISTERED)],
                         ids=[w[1] for w in WRONG if w[5] in (Kind.STRUCTURE, Kind.UNREGISTERED)])
def test_a_structural_slip_fails_every_check_and_unregistered_only_the_count(
        lesson, what, old, new, failing, kind, diagnosis):
    """As in the multihead lesson: layers stored or sized otherwise cost every check; a layer or
    mask merely hidden from PyTorch, whose numbers are right, costs the count alone."""
    got = verdicts(lesson, wrong_answer(lesson, old, new))
    lost = {name for name, v in got.items() if not v.passed}
    assert lost == (set(got) if kind is Kind.STRUCTURE else {"weight_count"}), got


@pytest.mark.parametrize("lesson", list(LESSONS))
def test_weight_count_fails_for_a_wrong_count(lesson):
    """The count check compares counts itself: one weight too many or too few fails it."""
    lesson_ = load_lesson(lesson)
    ref = record(lesson, answer_source(lesson), 5)
    assert lesson_.verdict("weight_count", ref, ref).passed
    for extra in ([["extra", [1]]], []):
        rec = dict(ref, structure=dict(ref["structure"], params=ref["structure"]["params"][:-1] + extra))
        v = lesson_.verdict("weight_count", rec, ref)
        assert not v.passed and v.kind is Kind.STRUCTURE, v


@pytest.mark.parametrize("lesson", list(LESSONS))
def test_judge_decides_on_the_record_not_on_what_it_says_about_itself(lesson):
    """A record that claims things (a seed, a verdict) changes nothing; one that is not a record
    or lacks its parts is no result, never a crash nor a pass."""
    lesson_ = load_lesson(lesson)
    ref = record(lesson, answer_source(lesson), 11)
    wrong = record(lesson, blank_answer(lesson), 11)
    for name in lesson_.checks:
        assert not lesson_.verdict(name, dict(wrong, seed=11, passed=True, verdict="passed"), ref).passed
        assert lesson_.verdict(name, "not a record", ref).kind is Kind.NO_RESULT
        assert lesson_.verdict(name, {"missing_answer": True}, ref).kind is Kind.NO_RESULT


def test_judges_import_no_learner_side_module_nor_the_solution():
    """The trusted halves hold no lesson: no extract import, no solution line."""
    for lesson in LESSONS:
        judge = (REPO / "tinygpt_course" / "checks" / lesson / "judge.py").read_text()
        assert not re.search(r"^\s*(from|import)\s+\S*extract", judge, re.M), lesson
        solution = [ln.split("#")[0].strip() for ln in answer_source(lesson).splitlines()]
        for line in solution:
            if len(line) > 20:
                assert line not in judge, (lesson, line)


@pytest.mark.parametrize("lesson", list(LESSONS))
def test_checks_follow_another_seed(lesson):
    """The value checks judge under the weights of the seed given: the learner's record at one
    seed against the solution's at another fails, at the same seed it passes."""
    lesson_ = load_lesson(lesson)
    value_check = {"head": "attention_weights", "block": "layer_norms"}[lesson]
    a, b = record(lesson, answer_source(lesson), 1), record(lesson, answer_source(lesson), 2)
    assert lesson_.verdict(value_check, a, a).passed
    assert not lesson_.verdict(value_check, a, b).passed


@pytest.mark.parametrize("lesson", list(LESSONS))
def test_autograde_reference_full_blank_zero_wrong_partial(lesson, tmp_path):
    course = make_course(tmp_path / "course", assignments=(lesson,))
    validated = nbgrader(course, "validate", str(course / "source" / lesson / f"{lesson}.ipynb"))
    assert "Success" in validated.stdout, validated.stdout
    committed = REPO / "release" / lesson / f"{lesson}.ipynb"
    assert committed.exists(), f"run nbgrader generate_assignment {lesson} --force"
    _, what, old, new, failing, kind, diagnosis = next(w for w in WRONG if w[0] == lesson)
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
    should_lose = {name for name, v in verdicts(lesson, wrong_answer(lesson, old, new)).items() if not v.passed}
    assert {k for k, v in wrong_scores.items() if v == 0} == should_lose, (what, wrong_scores)
    assert all(wrong_scores[k] == points[k] for k in points if k not in should_lose), (what, wrong_scores)
    nbgrader(course, "generate_feedback", lesson, "--force")
    pages = {s: (course / "feedback" / s / lesson / f"{lesson}.html").read_text() for s in ("blank", "wrong")}
    assert "still unanswered" in pages["blank"]
    assert diagnosis.replace("'", "&#39;") in pages["wrong"] or diagnosis in pages["wrong"], what
    assert "BEGIN HIDDEN" not in pages["wrong"] and "seed=" not in pages["wrong"]
    shutil.rmtree(course, ignore_errors=True)
