"""See the heads: every head's attention weights for one window, with a position slider.

`attention_explorer(mh, h, window_text)` shows one figure: on top each head's weights as a
heatmap (row: the position that looks, column: the position it looks at; the future the mask
hides stays empty), below it the highlighted row as bars with their numbers (a single head's
bars go beside its heatmap, which keeps its picture compact). In JupyterLab a
slider picks the row. Where no widget front end runs (nbconvert, nbgrader autograde, feedback
HTML) the same figure stays behind as a plain PNG.

Drawing is most of a lesson's run time after `import torch`, so each position's figure is drawn
once (the PNG twin and the widget share the first), on a fixed layout: measuring every label to
place the axes (constrained layout) would cost a second pass over all the figure's texts.
"""
import gc
import io
from contextlib import contextmanager

import ipywidgets as widgets
import numpy as np
import torch
from IPython.display import Image, display, update_display
from matplotlib.figure import Figure  # not pyplot: the inline backend must not show it twice
from matplotlib.patches import Rectangle

# The layout, in inches (text sizes are in points, so these hold at any dpi). Each head gets
# a column 4.6 in wide: its heatmap, a square of side `side`, and under it the bars, as wide.
HEAD_WIDTH, HEIGHT, DPI = 4.6, 7.6, 100
LEFT = 0.59             # the y label "position that looks" and the "7 e" row labels
GAP = 0.45              # between two heads: the next head's row labels
RIGHT = 0.59            # after the colour bar: its numbers and its label
TOP = 0.40              # above the heatmaps: "head 1"
MIDDLE = 0.97           # heatmap to bars: the letters, "looks at", the bars' title
BOTTOM = 0.28           # under the bars: their letters
CB_PAD, CB_LENGTH, CB_ASPECT = 0.05, 0.92, 20   # colour bar: gap (of the heads' width), length
                                                # (of the heatmap's side), length / thickness


def show_letter(ch):
    """'\\n' (where one name ends and the next starts) drawn as a visible ⏎."""
    return "\u23ce" if ch == "\n" else ch


def head_weights(mh, h, window=0):
    """[n_heads, T, T] attention weights of window `window` for mh's heads on h.

    Runs mh on h first: the heads keep the weights of their *last* run, whatever its input.
    """
    with torch.no_grad():
        mh(h)
        return torch.stack([head.weights[window] for head in mh.heads]).float()


ONE_SIDE = 3.4          # one head: its heatmap and its bars side by side, squares this wide
ONE_BOTTOM = 0.75       # under them: the letters, the position numbers and "looks at"
ONE_BETWEEN = 0.95      # colour bar to bars: the colour bar's numbers and label


def layout_one():
    """layout(1): the heatmap and its bars side by side, so one head's picture stays compact
    (about 450 px tall, where the stacked layout of several heads is 760)."""
    side, cb_length = ONE_SIDE, CB_LENGTH * ONE_SIDE
    cb_thick, cb_left = cb_length / CB_ASPECT, LEFT + side + CB_PAD * side
    bars_left = cb_left + cb_thick + ONE_BETWEEN
    width, height = bars_left + side + 0.2, TOP + side + ONE_BOTTOM
    rect = lambda x, y, w, h: [x / width, y / height, w / width, h / height]  # noqa: E731
    return ((width, height), [rect(LEFT, ONE_BOTTOM, side, side)], [rect(bars_left, ONE_BOTTOM, side, side)],
            rect(cb_left, ONE_BOTTOM + (side - cb_length) / 2, cb_thick, cb_length))


def layout(n):
    """Figure size and the [left, bottom, width, height] rectangles (figure fractions) of the
    n heatmaps, the n bar charts under them (beside it for one head) and the colour bar."""
    if n == 1:
        return layout_one()
    width = HEAD_WIDTH * n + 1
    # Across: LEFT, the n squares with a GAP between two (the heads' span), CB_PAD * span, the
    # colour bar (CB_LENGTH * side long, 1 / CB_ASPECT of that thick), RIGHT. Solved for side:
    side = ((width - LEFT - RIGHT - (1 + CB_PAD) * (n - 1) * GAP)
            / ((1 + CB_PAD) * n + CB_LENGTH / CB_ASPECT))
    span = n * side + (n - 1) * GAP
    # Down: TOP, the squares, MIDDLE, the bars (the height that is left), BOTTOM.
    bars_height = HEIGHT - TOP - side - MIDDLE - BOTTOM
    heat_bottom = BOTTOM + bars_height + MIDDLE
    lefts = [LEFT + i * (side + GAP) for i in range(n)]
    cb_length = CB_LENGTH * side
    rect = lambda x, y, w, h: [x / width, y / HEIGHT, w / width, h / HEIGHT]
    return ((width, HEIGHT),
            [rect(x, heat_bottom, side, side) for x in lefts],
            [rect(x, BOTTOM, side, bars_height) for x in lefts],
            rect(LEFT + (1 + CB_PAD) * span, heat_bottom + (side - cb_length) / 2,
                 cb_length / CB_ASPECT, cb_length))


def figure(weights, letters, position):
    """The whole picture as a matplotlib Figure: heatmaps on top, row `position` as bars below."""
    weights = np.asarray(weights, dtype=np.float32)   # matplotlib reads numpy, not tensors, fastest
    n, T = len(weights), len(letters)
    size, heat_rects, bar_rects, colour_bar = layout(n)
    fig = Figure(figsize=size, dpi=DPI)
    future = ~np.tri(T, dtype=bool)
    for i, w in enumerate(weights):
        ax = fig.add_axes(heat_rects[i])
        image = ax.imshow(np.where(future, np.nan, w), vmin=0, vmax=1, cmap="viridis")
        for r in range(T):
            for c in range(r + 1):
                ax.text(c, r, f"{w[r, c]:.2f}", ha="center", va="center", fontsize=8,
                        color="black" if w[r, c] > 0.6 else "white")
        ax.add_patch(Rectangle((-0.5, position - 0.5), T, 1, fill=False, edgecolor="crimson",
                               lw=2.5))                     # the row the slider picked
        ax.set_title(f"head {i + 1}", y=1)   # y given: no search for top tick labels to dodge
        ax.set_xticks(range(T), [f"{c}\n{t}" for t, c in enumerate(letters)])
        ax.set_yticks(range(T), [f"{t} {c}" for t, c in enumerate(letters)])
        ax.set_xlabel("looks at")
        if i == 0:
            ax.set_ylabel("position that looks")

        bars = fig.add_axes(bar_rects[i])
        row = w[position, : position + 1]
        drawn = bars.bar(range(position + 1), row, color=image.cmap(image.norm(row)),
                         edgecolor="crimson")
        bars.bar_label(drawn, labels=[f"{v:.3f}" for v in row], fontsize=8)
        if position < T - 1:                                 # the future this position cannot see
            bars.axvspan(position + 0.5, T - 0.5, color="0.93")
        bars.set_xlim(-0.5, T - 0.5)
        bars.set_ylim(0, 1.12)
        bars.set_xticks(range(T), letters)
        bars.set_title(f"head {i + 1} at position {position} ({letters[position]}) takes",
                       fontsize=10, y=1)
    fig.colorbar(image, cax=fig.add_axes(colour_bar), label="attention weight (one scale)")
    return fig


@contextmanager
def _no_gc_pauses():
    """A figure is tens of thousands of small objects. Made next to torch's, they would set the
    cyclic garbage collector off again and again, each time scanning the whole heap."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def png(fig):
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png")
    return buffer.getvalue()


class Explorer:
    """The figure for one window, drawn once for each position the slider picks."""

    def __init__(self, mh, h, window_text, window=0):
        self.weights = head_weights(mh, h, window)
        self.letters = [show_letter(ch) for ch in window_text]
        assert self.weights.shape[-1] == len(self.letters), "one letter per position"
        self._pngs = {}

    def png(self, position):
        if position not in self._pngs:
            with _no_gc_pauses():
                self._pngs[position] = png(figure(self.weights, self.letters, position))
        return self._pngs[position]

    def widget(self, position):
        """Slider + picture; `_view_count` counts the views a front end has drawn."""
        last = len(self.letters) - 1
        slider = widgets.IntSlider(value=position, min=0, max=last, description="position",
                                   continuous_update=False)
        picture = widgets.Image(value=self.png(position), format="png",
                                layout=widgets.Layout(max_width="100%"))
        picture.add_class(f"position-{position}")       # names the position the picture shows

        def redraw(change):
            picture.value = self.png(change["new"])
            picture.remove_class(f"position-{change['old']}").add_class(f"position-{change['new']}")

        slider.observe(redraw, names="value")
        return _ExplorerBox([slider, picture], _view_count=0)


class _ExplorerBox(widgets.VBox):
    def __repr__(self):  # the text a widget leaves where no front end draws it
        return "(attention explorer: the position slider needs a live notebook)"


def attention_explorer(mh, h, window_text, window=0):
    """Every head's weights for one window on one colour scale, with a position slider.

    Shows the static picture (position = last) and the live widget, one drawing for both. As
    soon as a front end draws the widget, the static copy is blanked, so JupyterLab shows only
    the widget; headless runs (nbgrader, nbconvert) never draw it and keep the PNG.
    """
    explorer = Explorer(mh, h, window_text, window)
    last = len(explorer.letters) - 1
    static = display(Image(explorer.png(last)), display_id=True)
    box = explorer.widget(last)

    def blank_static(change):
        if change["new"]:
            update_display({}, raw=True, display_id=static.display_id)

    box.observe(blank_static, names="_view_count")
    display(box)
