"""Issue #3 "See the heads": the attention explorer plots the printout's numbers, and leaves a
PNG where no widget front end runs (headless execution, nbgrader feedback).

Everything runs the real lesson: the source notebook (solution included) executed by nbclient,
then a probe cell in the same kernel that reads back what tinygpt_course.plots drew.
"""
import base64
import json
import re

import nbformat
import pytest

from tinygpt_course.testing.course import make_course, nbgrader, submit
from tinygpt_course.testing.notebooks import cell, execute, printed, source_path

SOURCE = source_path("multihead")
PNG = "image/png"
WIDGET = "application/vnd.jupyter.widget-view+json"

# Runs in the lesson's kernel after every lesson cell: what the explorer draws, as JSON.
PROBE = r'''
import base64, json
import numpy as np
from tinygpt_course import plots

ex = plots.Explorer(mh, h, decode(xb[0]))
fig = plots.figure(ex.weights, ex.letters, 7)
heat = [ax for ax in fig.axes if ax.images and ax.get_title().startswith("head")]
bars = [ax for ax in fig.axes if ax.containers]
box = ex.widget(7)
slider, picture = box.children
widget_png7 = picture.value
slider.value = 3                        # what moving the slider does in a front end
b64 = lambda data: base64.b64encode(data).decode()
print(json.dumps(dict(
    heat=[np.ma.filled(ax.images[0].get_array().astype(float), np.nan).tolist() for ax in heat],
    scales=[[ax.images[0].norm.vmin, ax.images[0].norm.vmax] for ax in heat],
    cell_texts=[[t.get_text() for t in ax.texts] for ax in heat],
    highlighted_rows=[[p.get_y() + 0.5 for p in ax.patches] for ax in heat],
    xletters=[[t.get_text() for t in ax.get_xticklabels()] for ax in heat],
    yletters=[[t.get_text() for t in ax.get_yticklabels()] for ax in heat],
    bar_heights=[[float(r.get_height()) for r in ax.containers[0]] for ax in bars],
    bar_labels=[[t.get_text() for t in ax.texts] for ax in bars],
    png7=b64(ex.png(7)), png3=b64(ex.png(3)),
    widget_png7=b64(widget_png7), widget_png3=b64(picture.value),
)))
'''


def printout_weights(nb):
    """{head: ['0.052', ...]} from the runner's `head i at position 7 takes [...]` lines."""
    lines = re.findall(r"head (\d) at position 7 takes \[([^\]]*)\]", printed(cell(nb, "runner")))
    assert len(lines) == 2, printed(cell(nb, "runner"))
    return {int(i): ws.split(", ") for i, ws in lines}


def plot_pngs(c):
    return [base64.b64decode(o.data[PNG]) for o in c.outputs if PNG in o.get("data", {})]


@pytest.fixture(scope="module")
def executed(tmp_path_factory):
    """The source notebook run headless (as nbconvert/nbgrader do), plus the probe's JSON."""
    work = tmp_path_factory.mktemp("multihead")
    nb = nbformat.read(SOURCE, as_version=4)
    nb.cells.append(nbformat.v4.new_code_cell(PROBE))
    execute(nb, work)
    return nb, json.loads(printed(nb.cells[-1]))


def test_bars_at_position_7_are_the_printout_weights(executed):
    nb, drawn = executed
    printed = printout_weights(nb)
    assert drawn["bar_labels"] == [printed[1], printed[2]], "bar numbers differ from the printout"
    for heights, labels in zip(drawn["bar_heights"], drawn["bar_labels"]):
        assert [round(x, 3) for x in heights] == [float(x) for x in labels]


def test_heatmaps_hold_every_heads_weights_with_the_future_empty(executed):
    nb, drawn = executed
    printed = printout_weights(nb)
    assert len(drawn["heat"]) == 2, "one heatmap per head"
    for i, rows in enumerate(drawn["heat"], 1):
        assert len(rows) == 8 and all(len(r) == 8 for r in rows)
        assert [f"{x:.3f}" for x in rows[7]] == printed[i], "row 7 is not the printout's line"
        for t, row in enumerate(rows):       # row t: position t looks at 0..t, the rest is hidden
            assert all(x == x for x in row[: t + 1]) and abs(sum(row[: t + 1]) - 1) < 1e-5
            assert all(x != x for x in row[t + 1:]), f"head {i}: future of position {t} drawn"
    assert drawn["scales"][0] == drawn["scales"][1] == [0, 1], "heads not on one colour scale"
    for texts, rows in zip(drawn["cell_texts"], drawn["heat"]):
        assert len(texts) == 36, "one number in each visible cell, none in the future"
        assert f"{rows[7][4]:.2f}" in texts
    assert drawn["highlighted_rows"] == [[7.0], [7.0]], "position 7's row is not highlighted"


def test_window_letters_on_both_axes_with_newline_visible(executed):
    nb, drawn = executed
    window = "ee\njaele"
    assert f"window 0: {window!r}" in printed(cell(nb, "runner"))
    shown = [("\u23ce" if ch == "\n" else ch) for ch in window]
    for xs, ys in zip(drawn["xletters"], drawn["yletters"]):
        assert [x.split("\n")[0] for x in xs] == shown
        assert [y.split(" ", 1)[1] for y in ys] == shown


def test_headless_run_leaves_the_figure_as_png_next_to_the_widget(executed):
    nb, drawn = executed
    outputs = cell(nb, "plot").outputs
    assert [o.output_type for o in outputs] == ["display_data", "display_data"], outputs
    assert plot_pngs(cell(nb, "plot")) == [base64.b64decode(drawn["png7"])], \
        "the plot cell's PNG is not the explorer's figure at position 7"
    assert WIDGET in outputs[1].data and "slider" in outputs[1].data["text/plain"]


def test_slider_redraws_the_picture_for_the_chosen_position(executed):
    _, drawn = executed
    assert drawn["widget_png7"] == drawn["png7"]
    assert drawn["widget_png3"] == drawn["png3"] != drawn["png7"]


def test_feedback_html_shows_the_plot(executed, tmp_path):
    nb, drawn = executed
    make_course(tmp_path)
    submit(tmp_path, "alice", "multihead", SOURCE)
    nbgrader(tmp_path, "autograde", "multihead")
    nbgrader(tmp_path, "generate_feedback", "multihead")

    graded = nbformat.read(tmp_path / "autograded/alice/multihead/multihead.ipynb", as_version=4)
    assert plot_pngs(cell(graded, "plot")) == [base64.b64decode(drawn["png7"])]
    html = (tmp_path / "feedback/alice/multihead/multihead.html").read_text()
    images = [base64.b64decode(re.sub(r"\s", "", m))
              for m in re.findall(r'src="data:image/png;base64,([^"]+)"', html)]
    assert base64.b64decode(drawn["png7"]) in images, "the feedback HTML lacks the plot"


def synthetic_weights(n_heads, T=8):
    """Causal attention weights, rows adding up to 1 (for layout checks without a lesson run)."""
    import torch
    scores = torch.randn(n_heads, T, T, generator=torch.Generator().manual_seed(n_heads))
    future = ~torch.tril(torch.ones(T, T, dtype=torch.bool))
    return torch.softmax(scores.masked_fill(future, float("-inf")), dim=-1)


@pytest.mark.parametrize("n_heads", [1, 2, 3])
@pytest.mark.parametrize("position", [0, 7])
def test_fixed_layout_keeps_every_label_inside_the_figure_and_apart(n_heads, position):
    """The figure is laid out by fixed margins, not by measuring its labels (that would cost
    a second pass over every text): no title, tick label, axis label or bar number may be cut
    off at the figure's edge or run into another plot's."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    from tinygpt_course import plots

    fig = plots.figure(synthetic_weights(n_heads), list("ee\u23cejaele"), position)
    renderer = FigureCanvasAgg(fig).get_renderer()         # the renderer savefig(png) uses
    fig.draw(renderer)
    boxes = {(ax.get_title() or "colour bar"): ax.get_tightbbox(renderer) for ax in fig.axes}
    assert len(boxes) == 2 * n_heads + 1
    for name, box in boxes.items():
        assert fig.bbox.contains(box.x0, box.y0) and fig.bbox.contains(box.x1, box.y1), \
            f"{name!r} sticks out of the figure: {box} not in {fig.bbox}"
    names = list(boxes)
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            assert not boxes[a].overlaps(boxes[b]), f"{a!r} runs into {b!r}"


def test_one_head_explorer_is_compact():
    """The head lesson's explorer (one head): heatmap and bars side by side, under 500 px tall,
    nothing overlapping; two heads keep the stacked layout."""
    from tinygpt_course import plots
    (width, height), heat, bars, colour_bar = plots.layout(1)
    assert height * plots.DPI <= 500 and width * plots.DPI <= 1000, (width, height)

    def apart(a, b):   # [left, bottom, width, height] rectangles that do not overlap
        return a[0] + a[2] <= b[0] or b[0] + b[2] <= a[0] or a[1] + a[3] <= b[1] or b[1] + b[3] <= a[1]
    assert apart(heat[0], bars[0]) and apart(heat[0], colour_bar) and apart(colour_bar, bars[0])
    assert all(0 <= v and v + d <= 1 for r in (heat[0], bars[0], colour_bar) for v, d in ((r[0], r[2]), (r[1], r[3])))
    assert plots.layout(2)[0][1] * plots.DPI > 500


def figure_the_obvious_way(weights, letters, position):
    """The explorer's figure made afresh with plain matplotlib calls, one artist after another:
    the reference the kept Picture (axes made once, refilled per drawing) must draw exactly."""
    import numpy as np
    from matplotlib.figure import Figure
    from matplotlib.patches import Rectangle

    from tinygpt_course import plots

    weights = np.asarray(weights, dtype=np.float32)
    n, T = len(weights), len(letters)
    size, heat_rects, bar_rects, colour_bar = plots.layout(n)
    fig = Figure(figsize=size, dpi=plots.DPI)
    for i, w in enumerate(weights):
        ax = fig.add_axes(heat_rects[i])
        image = ax.imshow(np.where(~np.tri(T, dtype=bool), np.nan, w), vmin=0, vmax=1, cmap="viridis")
        for r in range(T):
            for c in range(r + 1):
                ax.text(c, r, f"{w[r, c]:.2f}", ha="center", va="center", fontsize=8,
                        color="black" if w[r, c] > 0.6 else "white")
        ax.add_patch(Rectangle((-0.5, position - 0.5), T, 1, fill=False, edgecolor="crimson", lw=2.5))
        ax.set_title(f"head {i + 1}", y=1)
        ax.set_xticks(range(T), [f"{c}\n{t}" for t, c in enumerate(letters)])
        ax.set_yticks(range(T), [f"{t} {c}" for t, c in enumerate(letters)])
        ax.set_xlabel("looks at")
        if i == 0:
            ax.set_ylabel("position that looks")
        bars = fig.add_axes(bar_rects[i])
        row = w[position, : position + 1]
        drawn = bars.bar(range(position + 1), row, color=image.cmap(image.norm(row)), edgecolor="crimson")
        bars.bar_label(drawn, labels=[f"{v:.3f}" for v in row], fontsize=8)
        if position < T - 1:
            bars.axvspan(position + 0.5, T - 0.5, color="0.93")
        bars.set_xlim(-0.5, T - 0.5)
        bars.set_ylim(0, 1.12)
        bars.set_xticks(range(T), letters)
        bars.set_title(f"head {i + 1} at position {position} ({letters[position]}) takes", fontsize=10, y=1)
    fig.colorbar(image, cax=fig.add_axes(colour_bar), label="attention weight (one scale)")
    return fig


def pixels(data):
    """A PNG's pixels as RGBA, whatever its colour type."""
    import io

    import numpy as np
    from PIL import Image
    return np.asarray(Image.open(io.BytesIO(data)).convert("RGBA"))


def test_kept_picture_draws_each_drawing_as_a_fresh_figure_would():
    """picture_png refills one kept figure per shape (its axes and ticks are made once): every
    drawing, whatever came before it (more bars, other letters, other weights), must have the
    pixels of the same figure made afresh, and of the obvious way's."""
    from tinygpt_course import plots

    plain, with_newline = list("abcdefgh"), [plots.show_letter(ch) for ch in "ee\njaele"]
    # position 7 (8 bars, no shaded future) before 0 (1 bar, shaded), letters and weights changing
    for n_heads, letters, position in [(2, plain, 7), (2, with_newline, 0), (1, with_newline, 7),
                                       (2, with_newline, 3), (1, plain, 0), (4, with_newline, 5)]:
        weights = synthetic_weights(n_heads) if letters is plain else synthetic_weights(n_heads).flip(0)
        kept = pixels(plots.picture_png(weights, letters, position))
        fresh = pixels(plots.png(plots.figure(weights, letters, position)))
        reference = pixels(plots.png(figure_the_obvious_way(weights, letters, position)))
        assert kept.shape == reference.shape and (kept == reference).all(), \
            f"kept picture of {n_heads} heads at {position} differs from the obvious way's"
        assert (fresh == reference).all(), f"figure() of {n_heads} heads at {position} differs"
    assert set(plots._pictures) == {(1, 8), (2, 8), (4, 8)}, "one kept picture per shape"


# --- a drawing in the frame the grading template keeps (plots.Frame) ------------------------------

WINDOW = [("\u23ce" if ch == "\n" else ch) for ch in "ee\njaele"]    # every lesson's plot cell's letters


def frame_weights(kind, n_heads=2):
    """Weights as a learner's MultiHead may give them: rows adding up to 1 (softmax), all on the
    first letter (one-hot: a bar's number 1.000 at the top), rows never normalised but the
    last (wide: numbers wider than their cells), a last row of 1.1 (bars out: inside the bars'
    plot, their numbers above it), or NaN."""
    import torch
    w = synthetic_weights(n_heads)
    if kind == "one-hot":
        w = torch.zeros_like(w)
        w[..., 0] = 1
    elif kind == "wide":
        w = w.clone()
        w[:, :7] *= 1e9          # the last row (the bars) as it was: only the cells too wide
    elif kind == "bars out":
        w = w.clone()
        w[:, 7] = 1.1            # inside the bars' plot (up to 1.12), their numbers above it
    elif kind == "nan":
        w = torch.full_like(w, float("nan"))
    return w


def kept(n_heads=2, position=7):
    """A Picture keeping its frame, as the grading template's (kernelfork/server.py warm())."""
    import numpy as np

    from tinygpt_course import plots
    picture = plots.Picture(n_heads, 8)
    picture.png(np.full((n_heads, 8, 8), 0.125), WINDOW, position, keep_frame=True)
    return picture


def same_as_whole(picture, weights, letters, position):
    """The picture's PNG of this drawing has the pixels of the figure made the obvious way."""
    from tinygpt_course import plots
    drawn = pixels(picture.png(weights, letters, position))
    reference = pixels(plots.png(figure_the_obvious_way(weights, letters, position)))
    return drawn.shape == reference.shape and (drawn == reference).all()


@pytest.mark.parametrize("n_heads", [1, 2])
def test_a_drawing_in_the_kept_frame_has_the_whole_drawings_pixels(n_heads):
    """Drawn in the frame (only the plots drawn, what lies around them pasted) where it fits,
    whole where it does not: the pixels of the whole figure either way."""
    picture = kept(n_heads)
    for kind, framed in [("softmax", True), ("one-hot", True), ("nan", True), ("wide", False), ("bars out", False)]:
        before = picture.framed
        assert same_as_whole(picture, frame_weights(kind, n_heads), WINDOW, 7), kind
        assert picture.framed - before == framed, f"{kind}: drawn {'whole' if framed else 'in the frame'}"
    before = picture.framed        # another position, other letters: drawn whole
    assert same_as_whole(picture, frame_weights("softmax", n_heads), WINDOW, 3)
    assert same_as_whole(picture, frame_weights("softmax", n_heads), list("abcdefgh"), 7)
    assert picture.framed == before


def test_each_check_of_the_frame_switched_off_gives_other_pixels(monkeypatch):
    """What each check stops, shown by switching it off: a number wider than its cell, a drawing
    of another position, other rcParams (`fits`), a bar's number above its plot (`bars_inside`),
    a frame whose boxes reach the tick labels (`clear`)."""
    import matplotlib as mpl
    import numpy as np

    from tinygpt_course import plots
    softmax = frame_weights("softmax")
    with monkeypatch.context() as m:
        m.setattr(plots.Frame, "fits", lambda self, picture, key: True)
        assert not same_as_whole(kept(), frame_weights("wide"), WINDOW, 7)
        assert not same_as_whole(kept(), softmax, WINDOW, 3)
    # rcParams changed after the frame was kept: compared with a kept Picture that drew the same
    # before but keeps no frame (a kept renderer's text sizes stay those it measured first)
    framed, whole = kept(), plots.Picture(2, 8)
    whole.png(np.full((2, 8, 8), 0.125), WINDOW, 7)
    with mpl.rc_context({"text.hinting": "no_hinting"}):
        with monkeypatch.context() as m:
            m.setattr(plots.Frame, "fits", lambda self, picture, key: True)
            assert framed.png(softmax, WINDOW, 7) != whole.png(softmax, WINDOW, 7)
        assert framed.png(softmax, WINDOW, 7) == whole.png(softmax, WINDOW, 7)    # switched on: whole
    assert framed.framed == 1
    with monkeypatch.context() as m:
        m.setattr(plots.Frame, "bars_inside", lambda self, picture: True)
        assert not same_as_whole(kept(), frame_weights("bars out"), WINDOW, 7)
    monkeypatch.setattr(plots.Frame, "PAD", 12)                # boxes reaching the tick labels
    assert kept().frame is None
    monkeypatch.setattr(plots.Frame, "clear", lambda self, picture, renderer: None)
    picture = kept()
    assert picture.frame is not None and not same_as_whole(picture, softmax, WINDOW, 7)
