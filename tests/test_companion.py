"""The companion notebook trains the model, measures its heads and says what it measured.

The notebook runs headless with TINYGPT_STEPS=300 (about 10-20 s). After it, one extra cell
recomputes the heads' attention from their key and query weights with plain loops (not the
notebook's `where_heads_look`) and the checks below compare the notebook's table and the
numbers in its narrative with that recomputation.
"""
import json
import math
import os
import re
import time

import nbformat
import pytest

from tinygpt_course.testing.course import REPO
from tinygpt_course.testing.notebooks import execute

NOTEBOOK = REPO / "notebooks" / "trained_heads.ipynb"
STEPS = 300
KEYS = ["letter before", "start of name", "itself", "\\n before name", "even spread"]

RECOMPUTE = r'''
import json as _json, math as _math
with torch.no_grad():
    _h = model.ln1(model.embed(probe_x))
    _rows = []
    for _head in model.attn.heads:
        _q, _k = _h @ _head.query.weight.T, _h @ _head.key.weight.T
        _scores = _q @ _k.transpose(1, 2) / _math.sqrt(_k.shape[-1])
        _T = _scores.shape[-1]
        _W = (_scores + torch.full((_T, _T), float("-inf")).triu(1)).softmax(-1).tolist()
        _sum = {k: 0.0 for k in %(keys)r}
        _n = _n_nl = 0
        for _b, _win in enumerate(probe_x.tolist()):
            for _t in range(_T):
                _nl = [s for s in range(_t) if _win[s] == VOCAB.index("\n")]
                _start = _nl[-1] + 1 if _nl else 0
                if _start > _t - 2:
                    continue
                _w = _W[_b][_t]
                _n += 1
                _sum["letter before"] += _w[_t - 1]
                _sum["start of name"] += _w[_start]
                _sum["itself"] += _w[_t]
                _sum["even spread"] += 1 / (_t + 1)
                if _nl:
                    _n_nl += 1
                    _sum["\\n before name"] += _w[_start - 1]
        _rows.append({k: v / (_n_nl if k == "\\n before name" else _n) for k, v in _sum.items()})
print("@@RESULT@@" + _json.dumps({
    "steps": STEPS, "train_losses": train_losses, "val_losses": val_losses,
    "before": before, "after": after, "recomputed": _rows, "narrative": narrative,
    "samples": samples, "train_names": sorted(set(train_names) & set(samples)),
    "val_names": sorted(set(val_names) & set(samples))}))
''' % {"keys": KEYS}


@pytest.fixture(scope="module")
def run():
    nb = nbformat.read(NOTEBOOK, as_version=4)
    nb.cells.append(nbformat.v4.new_code_cell(RECOMPUTE))
    env = dict(os.environ, TINYGPT_STEPS=str(STEPS), OMP_NUM_THREADS="1")
    started = time.monotonic()
    execute(nb, NOTEBOOK.parent, env=env)
    seconds = time.monotonic() - started
    last = "".join(o.get("text", "") for o in nb.cells[-1].outputs if o.output_type == "stream")
    rec = json.loads(last.split("@@RESULT@@", 1)[1])
    return nb, rec, seconds


def outputs_of(nb, needle):
    """The outputs of the one code cell whose source contains `needle`."""
    cells = [c for c in nb.cells if c.cell_type == "code" and needle in c.source]
    assert len(cells) == 1, f"expected one code cell containing {needle!r}, found {len(cells)}"
    return cells[0].outputs


def looks_at(row):
    """The narrative's documented rule, applied to the recomputed numbers."""
    prev, start, even, nl = (row[k] for k in ("letter before", "start of name", "even spread",
                                              "\\n before name"))
    if prev >= 2 * even and prev >= 2 * start:
        return "the letter just before"
    if start >= 2 * even and start >= 2 * prev:
        return "the start of the name"
    if nl >= 2 * even and nl >= 2 * prev:
        return "the `\\n` that marks where the name starts"
    return None


def test_runs_the_configured_steps(run):
    nb, rec, seconds = run
    assert rec["steps"] == STEPS and len(rec["train_losses"]) == STEPS, "TINYGPT_STEPS was not honoured"
    print(f"a {STEPS}-step run took {seconds:.0f} s")      # a figure for the log: tests check no timing


def test_loss_decreased(run):
    _, rec, _ = run
    val = [loss for _, loss in rec["val_losses"]]
    assert abs(val[0] - math.log(27)) < 0.4, f"untrained loss {val[0]:.3f} is far from ln 27"
    assert val[-1] < val[0] - 0.5, f"held-out loss only went from {val[0]:.3f} to {val[-1]:.3f}"
    first, last = rec["train_losses"][:10], rec["train_losses"][-50:]
    assert sum(last) / len(last) < sum(first) / len(first) - 0.5, "training loss did not fall"


def test_table_matches_an_independent_recomputation(run):
    _, rec, _ = run
    assert len(rec["after"]) == len(rec["recomputed"]) == 2
    for i, (got, want) in enumerate(zip(rec["after"], rec["recomputed"]), 1):
        for key in KEYS:
            assert got[key] == pytest.approx(want[key], abs=1e-5), f"head {i}, {key}"


def test_narrative_numbers_are_the_measured_ones(run):
    _, rec, _ = run
    text = rec["narrative"]
    val = rec["val_losses"]
    m = re.search(r"fell from (\d+\.\d\d) to (\d+\.\d\d) .* ln 27 = (\d\.\d\d)", text)
    assert m, text
    assert m.groups() == (f"{val[0][1]:.2f}", f"{val[-1][1]:.2f}", f"{math.log(27):.2f}")
    heads = re.findall(r"\*\*Head (\d)\*\* puts (\d\.\d\d) of its weight on the letter just before "
                       r"and (\d\.\d\d) on the start of the name, where an even spread would give "
                       r"(\d\.\d\d) to each: ([^\n]*)", text)
    assert [h[0] for h in heads] == ["1", "2"], text
    for (_, prev, start, even, rest), row in zip(heads, rec["recomputed"]):
        assert (prev, start, even) == (f"{row['letter before']:.2f}", f"{row['start of name']:.2f}",
                                       f"{row['even spread']:.2f}")
        kind = looks_at(row)
        if kind:
            assert rest == f"it has learned to look at {kind}.", rest
        else:
            assert rest.startswith("it looks for neither in particular"), rest
            top = max(("letter before", "start of name", "itself", "\\n before name"),
                      key=lambda k: row[k])
            assert f"the most weight, {row[top]:.2f}," in rest, rest
    before = " and ".join(f"{row['letter before']:.2f}" for row in rec["before"])
    assert f"Before training the heads put {before} on the letter just before" in text


def test_verdict_follows_the_measurements(run):
    _, rec, _ = run
    kinds = [looks_at(row) for row in rec["recomputed"]]
    found = [k for k in kinds if k]
    if not found:
        expected = "no head has specialised"
    elif len(set(found)) < len(found):
        expected = "heads look for the same thing"
    elif len(found) == len(kinds):
        expected = "the heads do look for different things"
    else:
        expected = "not every head has one clear target"
    assert expected in rec["narrative"], (kinds, rec["narrative"])


def test_plots_progress_bar_and_samples(run):
    nb, rec, _ = run
    loss_plot = outputs_of(nb, "ax.plot(train_losses")
    assert any("image/png" in o.get("data", {}) for o in loss_plot), "no loss plot"
    attention = outputs_of(nb, "attention_explorer(model.attn")
    assert any({"image/png", "application/vnd.jupyter.widget-view+json"} & set(o.get("data", {}))
               for o in attention), "no attention plot"
    bar = outputs_of(nb, "tqdm(range(STEPS)")
    assert any("training" in str(o.get("data", {}).get("text/plain", "")) + o.get("text", "")
               for o in bar), "no progress bar"
    printed = "".join(o.get("text", "") for o in outputs_of(nb, "sample_name(model, gen)"))
    lines = printed.splitlines()
    assert len(lines) == len(rec["samples"]) == 12
    for line, name in zip(lines, rec["samples"]):
        assert re.fullmatch(r"[a-z]+", name), f"sampled {name!r}"
        tag = ("in training" if name in rec["train_names"] else
               "held out" if name in rec["val_names"] else "new")
        assert line.split() == [name, *tag.split()], line


# --- START.md: the order of the course and its claims, each compared with what the code says ---

START = NOTEBOOK.parent / "START.md"
REPO = NOTEBOOK.parents[1]


def start_rows():
    """(number, lesson, notebook, what it teaches) of START.md's table, in order."""
    rows = re.findall(r"^\| (\d|\+) \| (\w+) \| \[`([^`]+)`\]\(([^)]+)\) \| [^|]* \| (.*) \|$", START.read_text(), re.M)
    assert rows, "START.md has no lesson table (its notebooks as links)"
    for _, _, path, link, _ in rows:    # each notebook's link opens it, from START.md's folder
        assert (START.parent / link).resolve() == (REPO / path).resolve(), (path, link)
    return [(n, lesson, path, teaches) for n, lesson, path, _, teaches in rows]


def test_start_gives_the_order_and_every_lesson_exists():
    rows = start_rows()
    assert [r[1] for r in rows] == ["head", "multihead", "block", "gpt", "companion"]
    assert [r[0] for r in rows] == ["1", "2", "3", "4", "+"]
    lessons = sorted(p.name for p in (REPO / "source").iterdir() if p.is_dir())
    assert sorted(r[1] for r in rows[:-1]) == lessons, "every lesson under source/ is in START.md"
    for _, lesson, path, _ in rows:
        assert (REPO / path).exists(), path
    assert "Open it after lesson 4" in rows[-1][3]
    assert "comes after lesson 4" in nbformat.read(NOTEBOOK, 4).cells[0].source


def test_first_cell_says_what_the_multihead_lesson_says():
    """The companion quotes the multihead lesson's claim about heads as the lesson makes it."""
    intro = nbformat.read(REPO / "source" / "multihead" / "multihead.ipynb", 4).cells[0].source
    first = " ".join(nbformat.read(NOTEBOOK, 4).cells[0].source.split())
    claim = "Nothing forces two heads to learn different things, but nothing stops them either"
    assert claim in " ".join(intro.split())
    assert "nothing forces two heads to learn different things, but nothing stops them either" in first
    assert "claims" not in first and "something to measure, not to assume" in first


def test_start_weight_counts_are_the_printed_ones(run):
    from tinygpt_course.checks import notebook
    lesson = next(ln for ln in notebook.documented("gpt") if ln.startswith("weights to learn:"))
    gpt_count = int(re.search(r"weights to learn: (\d+)", lesson).group(1))
    text = START.read_text()
    assert f"cut down to\n{gpt_count} weights" in text
    nb, _, _ = run
    printed = "".join(o.get("text", "") for o in outputs_of(nb, "model = TinyGPT()"))
    companion = int(re.search(r"(\d+) weights to learn", printed).group(1))
    assert f"({companion} weights)" in start_rows()[-1][3]


def test_start_sizes_are_the_course_sizes():
    from tinygpt_course.config import SIZES
    text = " ".join(START.read_text().split())
    assert f"scaled by 1/sqrt({SIZES.head_size})" in text
    assert f"a stack of {SIZES.n_layer} blocks" in text
    assert f"each of the {SIZES.vocab_size} symbols" in text
    assert f"{SIZES.batch_size} windows of {SIZES.block_size} letters" in text


def test_start_describes_the_block_as_it_is_built():
    """Pre-norm, as the block lesson's solution: the norm inside, on the layer's input."""
    block = nbformat.read(REPO / "source" / "block" / "block.ipynb", 4)
    solution = next(c.source for c in block.cells if c.metadata.get("nbgrader", {}).get("solution"))
    assert "x = x + self.sa(self.ln1(x))" in solution and "x = x + self.ffwd(self.ln2(x))" in solution
    row = start_rows()[2][3]
    assert "`x = x + sa(ln1(x))`, then `x = x + ffwd(ln2(x))` (pre-norm" in row
    assert "after a layer norm" not in row


def test_companion_names_its_model_truly():
    """The companion's model is the lecture's gpt.py cut down, not nanoGPT's model.py."""
    nb = nbformat.read(NOTEBOOK, 4)
    text = " ".join(c.source for c in nb.cells if c.cell_type == "markdown")
    assert "nanoGPT" not in text and "Let's build GPT" in text
    code = "\n".join(c.source for c in nb.cells if c.cell_type == "code")
    assert "x = x + self.attn(self.ln1(x))" in code and "self.ln_f" in code   # pre-norm, final norm
    assert "n_embd, block_size, head_size, n_heads = 32, 8, 16, 2" in code
