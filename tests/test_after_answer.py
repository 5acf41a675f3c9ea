"""Issue 32, items 1 and 2, without a browser: every cell after the answer cell (the gpt
lesson's training, plot and names, every lesson's attention plot) turns a learner model's
failure into one line naming the check to read, with no traceback and within a memory and size
budget (tinygpt_course.checks.guard); demo cells leave no names behind, so an answer that forgets
`self.` or its shape line fails with the NameError of its real cause.

Each catalogue answer is run here as Run All runs the notebook, cell after cell in one namespace
(the gpt training cell cut to 3 steps: a failure shows at the first); the real Run All in
JupyterLab and Chromium is in tests/test_browser_after_answer.py.
"""
import contextlib
import io
import re
import resource

import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
import nbformat
import pytest
import torch

from tinygpt_course.checks import guard
from tinygpt_course.checks.common import compiled
from tinygpt_course.checks.notebook import assigned_names
from tinygpt_course.testing import catalogue
from tinygpt_course.testing.notebooks import cell, grade_id, lesson_source, solution, source_path


LESSONS = ("head", "multihead", "block", "gpt")
GUARDED = {"gpt": ("training", "loss_plot", "names"), "head": ("plot",), "multihead": ("plot",),
           "block": ("plot",)}
STEPS = 3


def code_cells(lesson):
    """(grade id, source) of the notebook's code cells as Run All runs them, check cells aside;
    the training cut to STEPS steps."""
    nb = nbformat.read(source_path(lesson), as_version=4)
    cells = []
    for c in nb.cells:
        if c.cell_type != "code" or c.metadata.get("nbgrader", {}).get("grade"):
            continue
        source = c.source
        if grade_id(c) == "training":
            assert "STEPS = 6000 " in source
            source = source.replace("STEPS = 6000 ", f"STEPS = {STEPS} ")
        cells.append((grade_id(c), source))
    return cells


def run_all(lesson, answer, cells=None):
    """The cells run in order in one namespace with `answer` in the answer cell: ({grade id: what
    it printed}, {grade id: the exception that ended it})."""
    answer_id = lesson_source(lesson).answer_id
    ns, printed, raised = {"__name__": "__main__"}, {}, {}
    for gid, source in cells or code_cells(lesson):
        out = io.StringIO()
        try:
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
                exec(compiled(answer if gid == answer_id else source, f"<cell {gid}>"), ns)
        except Exception as exc:
            raised[gid] = exc
        printed[gid] = out.getvalue()
    plt.close("all")
    return printed, raised


def said(lesson, printed):
    """The lines the guarded cells printed for a failure: (grade id, line)."""
    return [(gid, line) for gid in GUARDED[lesson] for line in printed.get(gid, "").splitlines()
            if line.startswith("\u2717")]


def cases():
    return [pytest.param(a, id=f"{a.lesson}/{a.name}") for lesson in LESSONS
            for a in catalogue.answers(lesson) if a.plain]


@pytest.fixture(scope="module")
def outcomes():
    """Every plain catalogue answer of every lesson, run as Run All runs it (once)."""
    return {(a.lesson, a.name): run_all(a.lesson, a.code) for lesson in LESSONS
            for a in catalogue.answers(lesson) if a.plain}


ONE_LINE = re.compile(r"\u2717 (?P<what>[^:]+): (?P<cause>.+); (the check `(?P<check>\w+)` below says why"
                      r"|every check passes with the checks' fixed weights: look at what this cell does)\.")


@pytest.mark.parametrize("answer", cases())
def test_no_cell_after_the_answer_raises_and_a_failure_names_a_failing_check(outcomes, answer):
    """No cell ends in a traceback; a guarded cell that could not do its work says so in one
    line naming a check this answer fails (its catalogue header: 0 points there); a right
    answer's cells say nothing of the kind."""
    printed, raised = outcomes[answer.lesson, answer.name]
    assert not raised, {gid: repr(exc) for gid, exc in raised.items()}
    lines = said(answer.lesson, printed)
    if answer.sort == "right":
        assert not lines, lines
        if answer.lesson == "gpt":
            assert printed["names"].startswith("held-out loss after training:"), printed["names"]
        return
    for gid, line in lines:
        m = ONE_LINE.fullmatch(line)
        assert m, line
        assert m["check"] and answer.expect[m["check"]] == 0, (line, answer.expect)


def test_the_gpt_failures_are_caught_by_the_guard_and_raise_without_it(outcomes, monkeypatch):
    """The defence switched off (guard.after lets every error through): the very answers whose
    cells said a line raise in those cells, a raw traceback at Run All. Among them the released
    stub and the wrong models that fail in training or in generate."""
    caught = {name for (lesson, name), (printed, _) in outcomes.items()
              if lesson == "gpt" and said(lesson, printed)}
    assert {"21_unanswered", "07_ce_not_flattened", "10_not_cropped", "48_generate_returns_nothing",
            "56_letters_appended_on_dim_0"} <= caught, caught

    @contextlib.contextmanager
    def off(printout, what, seconds=None, budget=None):
        yield
    monkeypatch.setattr(guard, "after", off)
    for name in sorted(caught):
        _, raised = run_all("gpt", catalogue.answer("gpt", name).code)
        assert set(raised) & set(GUARDED["gpt"]), name


def gpt_model(answer_code):
    """The answer's GPT, built in the lesson's set-up (the right parts, sizes and data)."""
    from tinygpt_course.testing.notebooks import namespace
    ns = namespace("gpt", answer_code)
    torch.manual_seed(42)
    return ns["GPT"](), ns


def test_a_generate_appending_on_dim_0_is_stopped_at_its_first_call_past_the_budget():
    """100 windows doubled at every letter (torch.cat's default dim 0) is stopped when the model
    is given 200 windows; without the guard the model is given 100 * 2 ** k windows (a few
    letters here: 20 would be 100 million windows, the memory of the machine)."""
    model, ns = gpt_model(catalogue.answer("gpt", "56_letters_appended_on_dim_0").code)
    given = []
    hook = model.token_emb.register_forward_pre_hook(lambda layer, args: given.append(args[0].shape[0]))
    start = torch.zeros((100, 1), dtype=torch.long)
    with pytest.raises(guard.BudgetExceeded, match="200 windows at once; it was given 100"):
        with guard.windows(model, ns["block_size"]):
            model.generate(start, 20, generator=torch.Generator().manual_seed(7))
    assert given == [100]                    # stopped before the model ran on 200
    assert "forward" not in vars(model) and "generate" not in vars(model)   # put back
    given.clear()
    model.generate(start, 6, generator=torch.Generator().manual_seed(7))   # the guard off
    hook.remove()
    assert given == [100 * 2 ** k for k in range(6)]


def test_a_right_generate_runs_within_the_budget_and_gives_the_same_letters():
    model, ns = gpt_model(solution("gpt"))
    start, gen = torch.zeros((100, 1), dtype=torch.long), lambda: torch.Generator().manual_seed(7)
    with guard.windows(model, ns["block_size"]):
        guarded = model.generate(start, 20, generator=gen())
    assert torch.equal(guarded, model.generate(start, 20, generator=gen()))


def test_windows_longer_than_generate_can_need_are_stopped():
    """A generate that doubles each window along dim 1 (letters, not windows; cropped, so the
    model never sees more than 8) is stopped when it returns more letters than it can write."""
    model, ns = gpt_model(solution("gpt").replace("idx = torch.cat([idx, nxt], dim=1)",
                                                  "idx = torch.cat([idx, idx], dim=1)"))
    with pytest.raises(guard.BudgetExceeded, match=r"generate returned \[3, 1048576\]: more letters than 3 windows of 1 \+ 20"):
        with guard.windows(model, ns["block_size"]):
            model.generate(torch.zeros((3, 1), dtype=torch.long), 20)


def test_memory_budget_turns_an_allocation_past_it_into_an_error_in_the_cell():
    """Under the budget, asking for more than it fails at once (torch: RuntimeError) and the
    process's limit is put back after; without it the same request is granted."""
    before = resource.getrlimit(resource.RLIMIT_DATA)
    with pytest.raises(RuntimeError):
        with guard.memory_budget(64 * 2 ** 20):
            torch.empty(2 ** 30, dtype=torch.uint8)
    assert resource.getrlimit(resource.RLIMIT_DATA) == before
    assert torch.empty(2 ** 30, dtype=torch.uint8).numel() == 2 ** 30   # not touched: no RAM used


def test_an_allocation_past_the_budget_in_a_guarded_cell_is_one_line(capsys):
    """A generate that never calls the model but multiplies the windows (no window budget sees it)
    runs out of the memory budget: one line naming the check, the kernel lives on. A thousandfold
    a step: the third step asks for more than any budget at once, so the budget, not a time limit,
    is what stops it, however busy the machine (at 4x a step, the copies and the sampling of
    millions of windows took seconds, and a busy machine ran out of the cells' time first)."""
    code = solution("gpt").replace("idx = torch.cat([idx, nxt], dim=1)", "idx = torch.cat([idx] * 1000)")
    code = code.replace("logits, _ = self(idx[:, -block_size:])", "logits = torch.zeros(idx.shape[0], 1, 27)")
    assert code.count("torch.cat([idx] * 1000)") == code.count("torch.zeros(idx.shape[0], 1, 27)") == 1
    printed, raised = run_all("gpt", code)
    assert not raised, raised
    m = ONE_LINE.fullmatch(printed["names"].strip())
    assert m and m["check"] == "generate" and "RuntimeError" in m["cause"], printed["names"]


# --- item 2: demo cells keep their names to themselves -----------------------------------------

def demo_names(lesson):
    """{demo cell: the names it assigns} (its top-level assignments, classes and functions)."""
    import ast
    nb = nbformat.read(source_path(lesson), as_version=4)
    found = {}
    for c in nb.cells:
        if c.cell_type == "code" and grade_id(c).endswith("_demo"):
            tree = ast.parse(c.source)
            defined = {n.name for n in tree.body if isinstance(n, (ast.ClassDef, ast.FunctionDef))}
            found[grade_id(c)] = (assigned_names(c.source) | defined, c.source)
    return found


def before_the_answer(lesson, keep_demo_names=False):
    """The namespace of every code cell before the answer cell (what grading calls the set-up),
    each demo cell's last line (its `del`) left out when keep_demo_names."""
    demos, ns = demo_names(lesson), {"__name__": "__main__"}
    with contextlib.redirect_stdout(io.StringIO()):
        for source in lesson_source(lesson).setup:
            if keep_demo_names and any(source == s for _, s in demos.values()):
                assert source.splitlines()[-1].startswith("del ")
                source = "\n".join(source.splitlines()[:-1])
            exec(compiled(source, "<set-up>"), ns)
    return ns


@pytest.mark.parametrize("lesson", LESSONS)
def test_demo_cells_leave_no_names_behind(lesson):
    demos = demo_names(lesson)
    assert demos
    others = set().union(*(assigned_names(s) for s in lesson_source(lesson).setup
                           if s not in {src for _, src in demos.values()}))
    ns = before_the_answer(lesson)
    left = {gid: sorted((names - others) & set(ns)) for gid, (names, _) in demos.items()}
    assert not any(left.values()), left
    kept = before_the_answer(lesson, keep_demo_names=True)     # the defence off: they stay
    assert all((names - others) & set(kept) for names, _ in demos.values())


HEAD_SLIPS = [   # (the slip, the name its NameError must name)
    ("        B, T, C = x.shape\n", "", "T"),                          # the shape line forgotten
    ("return self.weights @ self.value(x)", "return weights @ self.value(x)", "weights"),   # self.
]


@pytest.mark.parametrize("old,new,name", HEAD_SLIPS, ids=["shape_line_forgotten", "self_forgotten"])
def test_head_answer_with_a_slip_fails_with_its_own_name_error(old, new, name):
    """The head lesson's demos once left T = 4 and a [4, 4] weights: an answer that forgot its
    shape line or a `self.` then failed as a 4-vs-8 size error. Now its own NameError is what the
    runner and the shapes check say; with the demos' names kept, the size error comes back."""
    from tinygpt_course.checks import CheckFailed
    answer = solution("head").replace(old, new)
    assert answer != solution("head")
    nb = nbformat.read(source_path("head"), as_version=4)

    def shapes_check(ns):
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            exec(compiled(answer, "<your answer cell>"), ns)
            exec(cell(nb, "runner").source, ns)
        with pytest.raises(CheckFailed) as failed, contextlib.redirect_stdout(io.StringIO()):
            exec(cell(nb, "shapes").source, ns)
        return out.getvalue(), str(failed.value)

    runner, check = shapes_check(before_the_answer("head"))
    for text in (" ".join(runner.split()), check):
        assert f"NameError: name '{name}' is not defined" in text, text
    runner, check = shapes_check(before_the_answer("head", keep_demo_names=True))
    assert "NameError" not in check and re.search(r"\b4\b", check), check
