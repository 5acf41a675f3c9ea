"""See the heads: every head's attention weights for one window, with a position slider.

`attention_explorer(mh, h, window_text)` shows one figure: on top each head's weights as a
heatmap (row: the position that looks, column: the position it looks at; the future the mask
hides stays empty), below it the highlighted row as bars with their numbers. In JupyterLab a
slider picks the row. Where no widget front end runs (nbconvert, nbgrader autograde, feedback
HTML) the same figure stays behind as a plain PNG.
"""
import io

import ipywidgets as widgets
import torch
from IPython.display import Image, display, update_display
from matplotlib.figure import Figure  # not pyplot: the inline backend must not show it twice
from matplotlib.patches import Rectangle


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


def figure(weights, letters, position):
    """The whole picture as a matplotlib Figure: heatmaps on top, row `position` as bars below."""
    n, T = len(weights), len(letters)
    fig = Figure(figsize=(4.6 * n + 1, 7.6), dpi=100, layout="constrained")
    grid = fig.add_gridspec(2, n, height_ratios=[3, 1.25])
    future = ~torch.tril(torch.ones(T, T, dtype=torch.bool))
    heatmaps = []
    for i, w in enumerate(weights):
        ax = fig.add_subplot(grid[0, i])
        heatmaps.append(ax)
        image = ax.imshow(w.masked_fill(future, float("nan")), vmin=0, vmax=1, cmap="viridis")
        for r in range(T):
            for c in range(r + 1):
                ax.text(c, r, f"{w[r, c]:.2f}", ha="center", va="center", fontsize=8,
                        color="black" if w[r, c] > 0.6 else "white")
        ax.add_patch(Rectangle((-0.5, position - 0.5), T, 1, fill=False, edgecolor="crimson",
                               lw=2.5))                     # the row the slider picked
        ax.set_title(f"head {i + 1}")
        ax.set_xticks(range(T), [f"{c}\n{t}" for t, c in enumerate(letters)])
        ax.set_yticks(range(T), [f"{t} {c}" for t, c in enumerate(letters)])
        ax.set_xlabel("looks at")
        if i == 0:
            ax.set_ylabel("position that looks")

        bars = fig.add_subplot(grid[1, i])
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
                       fontsize=10)
    fig.colorbar(image, ax=heatmaps, shrink=0.8, label="attention weight (one scale)")
    return fig


def png(fig):
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png")
    return buffer.getvalue()


class Explorer:
    """The figure for one window, re-drawn for whichever position the slider picks."""

    def __init__(self, mh, h, window_text, window=0):
        self.weights = head_weights(mh, h, window)
        self.letters = [show_letter(ch) for ch in window_text]
        assert self.weights.shape[-1] == len(self.letters), "one letter per position"

    def png(self, position):
        return png(figure(self.weights, self.letters, position))

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

    Shows the static picture (position = last) and the live widget. As soon as a front end
    draws the widget, the static copy is blanked, so JupyterLab shows only the widget;
    headless runs (nbgrader, nbconvert) never draw it and keep the PNG.
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
