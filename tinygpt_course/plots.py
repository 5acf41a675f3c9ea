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
The figure's axes, ticks and colour bar are made once per shape and kept (`Picture`): each
drawing only fills in the weights, letters and position. Where a whole drawing of the same
letters and position was kept (`Frame`: the grading kernels' template keeps the lessons'), a
drawing draws only the plots and pastes the rest, to the same bytes.
"""
import gc
import io
from contextlib import contextmanager

import ipywidgets as widgets
import matplotlib as mpl
import PIL.Image
import PIL.PngImagePlugin
import numpy as np
import torch
from IPython.display import Image, display, update_display
from matplotlib.backends.backend_agg import FigureCanvasAgg
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


class Picture:
    """The explorer's figure for `n` heads and `T` letters, made once and drawn again and again.

    Its axes, their ticks and the colour bar cost about as much CPU as drawing the whole figure,
    and they do not depend on the weights: they are made here, once. show() fills in the rest
    (the cells' colours and numbers, the letters, the highlighted row, the bars). Drawn on a kept
    Picture or on a new one, the PNG is the same, byte for byte (tests/test_plots.py checks).
    """

    def __init__(self, n, T):
        size, heat_rects, bar_rects, colour_bar = layout(n)
        self.fig = Figure(figsize=size, dpi=DPI)
        self.canvas = FigureCanvasAgg(self.fig)     # kept: its renderer remembers text sizes
        self.heat, self.bars, self.images, self.cells, self.rows = [], [], [], [], []
        self.frame = None       # a whole drawing's pixels around the plots (Frame), if kept
        self.framed = 0         # drawings made in it (what a grading kernel's test reads)
        for i in range(n):
            ax = self.fig.add_axes(heat_rects[i])
            image = ax.imshow(np.full((T, T), np.nan), vmin=0, vmax=1, cmap="viridis")
            # one number in each cell a position can see (row r: columns 0..r), set by show()
            cells = {(r, c): ax.text(c, r, "", ha="center", va="center", fontsize=8)
                     for r in range(T) for c in range(r + 1)}
            row = ax.add_patch(Rectangle((-0.5, -0.5), T, 1, fill=False, edgecolor="crimson",
                                         lw=2.5))                   # the row the slider picked
            ax.set_title(f"head {i + 1}", y=1)   # y given: no search for top tick labels to dodge
            ax.set_xlabel("looks at")
            if i == 0:
                ax.set_ylabel("position that looks")
            bars = self.fig.add_axes(bar_rects[i])
            bars.set_xlim(-0.5, T - 0.5)
            bars.set_ylim(0, 1.12)
            for kept, part in ((self.heat, ax), (self.images, image), (self.cells, cells),
                               (self.rows, row), (self.bars, bars)):
                kept.append(part)
        self.fig.colorbar(image, cax=self.fig.add_axes(colour_bar),
                          label="attention weight (one scale)")
        # At every drawing an axis measures its tick labels to put its label beyond them; an
        # axis without a label (the bars', head 2's y) is given a fixed place for it instead.
        for axis in (a for ax in self.fig.axes for a in (ax.xaxis, ax.yaxis)):
            if not axis.label.get_text():
                axis.set_label_coords(0.5, 0.5)

    def show(self, weights, letters, position):
        """Fill in one drawing: `weights` [n, T, T], one letter per position, the row shown."""
        weights = np.asarray(weights, dtype=np.float32)  # matplotlib reads numpy, fastest
        T = len(letters)
        future = ~np.tri(T, dtype=bool)
        for i, w in enumerate(weights):
            self.images[i].set_data(np.where(future, np.nan, w))
            for (r, c), text in self.cells[i].items():
                text.set_text(f"{w[r, c]:.2f}")
                text.set_color("black" if w[r, c] > 0.6 else "white")
            self.rows[i].set_y(position - 0.5)
            self.heat[i].set_xticks(range(T), [f"{c}\n{t}" for t, c in enumerate(letters)])
            self.heat[i].set_yticks(range(T), [f"{t} {c}" for t, c in enumerate(letters)])

            # The bars change in number with the position: the last drawing's go, new ones come.
            bars = self.bars[i]
            for container in bars.containers[:]:           # the bars, out of ax.containers too
                container.remove()
            for artist in [*bars.patches, *bars.texts]:    # the shaded future, the bars' numbers
                artist.remove()
            row = w[position, : position + 1]
            image = self.images[i]
            drawn = bars.bar(range(position + 1), row, color=image.cmap(image.norm(row)),
                             edgecolor="crimson")
            bars.bar_label(drawn, labels=[f"{v:.3f}" for v in row], fontsize=8)
            if position < T - 1:                             # the future this position cannot see
                bars.axvspan(position + 0.5, T - 0.5, color="0.93")
            bars.set_xticks(range(T), letters)
            bars.set_title(f"head {i + 1} at position {position} ({letters[position]}) takes",
                           fontsize=10, y=1)
        return self.fig

    def png(self, weights, letters, position, keep_frame=False):
        """The PNG of this drawing; `keep_frame`: keep what lies around its plots (Frame) for
        the next drawings of these letters and this position."""
        self.show(weights, letters, position)
        key = (tuple(letters), position)
        pixels = self.frame.fill(self, key) if self.frame else None
        if pixels is not None:
            self.framed += 1
        else:
            self.canvas.draw()
            pixels = self.canvas.buffer_rgba()
            if keep_frame:
                try:
                    self.frame = Frame(self, key)
                except FrameUnfit:
                    self.frame = None
        return encode(pixels, self.fig.dpi)


class Frame:
    """What lies around the plots of one whole drawing (tick labels, axis labels, the colour bar:
    two thirds of the figure's texts, none of which depend on the weights), kept to be pasted
    around later drawings of the same letters and position, which then draw only the plots.

    The PNG is the whole drawing's, byte for byte. Agg gives a pixel the colour of what was
    drawn on it, in order. Around the plots' boxes (each plot's axes and PAD pixels) a whole
    drawing draws what the kept one drew there, so long as none of the weights' artists reaches
    out of its box (the heatmap and the bars are clipped to their axes; the cells' and the bars'
    numbers are checked at each drawing: `fits`, `bars_inside`); inside a box, what is left out
    draws nothing, so long as none of it reaches in (`clear`, checked once, on the kept
    drawing). Any other letters, position or rcParams, or a number out of its room, and the
    drawing is made whole. tests/test_plots.py shows each check switched off gives other pixels.
    """
    PAD = 3     # pixels around an axes: its spines' and the ticks' first pixels are inside;
                # tick labels (10 px out) and axis labels are not

    def __init__(self, picture, key):
        """The frame of the whole drawing of `key` (letters, position) just made on `picture`;
        FrameUnfit where its texts are not where a frame needs them."""
        renderer = picture.canvas.get_renderer()
        self.height = picture.canvas.get_width_height()[1]
        self.key, self.rc = key, dict(mpl.rcParams)
        self.boxes = [self.rect(ax.get_window_extent(renderer).padded(self.PAD))
                      for ax in picture.heat + picture.bars]
        self.clear(picture, renderer)
        # a cell's number is one line of one font centred in its cell: only its width varies,
        # and the room it has is measured once, here
        self.room = []
        for box, cells in zip(self.boxes[:len(picture.heat)], picture.cells, strict=True):    # the heatmaps
            for text in cells.values():
                extent = text.get_window_extent(renderer)
                if not self.inside(self.rect(extent, 1), [box]):
                    raise FrameUnfit(f"{text} is out of its plot")
                centre = (extent.x0 + extent.x1) / 2
                self.room.append(2 * min(centre - box[0], box[1] - centre) - 2)
        self.widths = {}        # a number's width in pixels, measured once in this process:
        for v in range(101):    # those of rows adding up to 1 here, before any kernel is forked
            self.width(renderer, picture.cells[0][0, 0], f"{v / 100:.2f}")
        self.pixels = np.array(picture.canvas.buffer_rgba())

    def clear(self, picture, renderer):
        """FrameUnfit if a text left out reaches a plot's box."""
        for text in self.around(picture):
            if any(_overlap(self.rect(text.get_window_extent(renderer), 1), box) for box in self.boxes):
                raise FrameUnfit(f"{text} reaches a plot")

    def rect(self, bbox, margin=0):
        """A display box as the pixels it touches (columns x0:x1, rows y0:y1 from the top),
        `margin` pixels wider (a text's antialiasing)."""
        return (max(0, int(np.floor(bbox.x0)) - margin), int(np.ceil(bbox.x1)) + margin,
                max(0, int(np.floor(self.height - bbox.y1)) - margin),
                int(np.ceil(self.height - bbox.y0)) + margin)

    @staticmethod
    def inside(rect, boxes):
        return any(b[0] <= rect[0] and rect[1] <= b[1] and b[2] <= rect[2] and rect[3] <= b[3] for b in boxes)

    @staticmethod
    def around(picture):
        """The artists left out: the plots' tick labels and axis labels, the colour bar."""
        out = [picture.fig.axes[-1]]            # the colour bar's axes, added last
        for ax in picture.heat + picture.bars:
            out += [t for t in (ax.xaxis.label, ax.yaxis.label) if t.get_text()]
            out += [t for axis in (ax.xaxis, ax.yaxis) for tick in axis.get_major_ticks()
                    for t in (tick.label1, tick.label2) if t.get_visible() and t.get_text()]
        return out

    def width(self, renderer, like, text):
        if text not in self.widths:
            self.widths[text] = renderer.get_text_width_height_descent(
                text, like.get_fontproperties(), ismath=False)[0]
        return self.widths[text]

    def fits(self, picture, key):
        """This drawing is of the kept one's letters, position and rcParams, and each cell's
        number fits its room."""
        if key != self.key or mpl.rcParams != self.rc:
            return False
        renderer = picture.canvas.get_renderer()
        cells = [t for cells in picture.cells for t in cells.values()]
        return len(cells) == len(self.room) and all(
            self.width(renderer, t, t.get_text()) <= room for t, room in zip(cells, self.room))

    def bars_inside(self, picture):
        """The bars' numbers (placed by show(), where a drawing will draw them: each is offset
        in points from its bar's top, in axes whose limits are fixed) are inside the plots' boxes."""
        renderer = picture.canvas.get_renderer()
        return all(self.inside(self.rect(t.get_window_extent(renderer), 1), self.boxes)
                   for ax in picture.bars for t in ax.texts)

    def fill(self, picture, key):
        """This drawing's pixels: the plots drawn, the frame around them pasted; None (draw it
        whole) where it does not fit."""
        if not self.fits(picture, key) or not self.bars_inside(picture):
            return None
        around = self.around(picture)
        for artist in around:
            artist.set_visible(False)
        try:
            picture.canvas.draw()
        finally:
            for artist in around:
                artist.set_visible(True)
        drawn, pixels = np.asarray(picture.canvas.buffer_rgba()), self.pixels.copy()
        for x0, x1, y0, y1 in self.boxes:
            pixels[y0:y1, x0:x1] = drawn[y0:y1, x0:x1]
        return pixels


class FrameUnfit(Exception):
    """A drawing whose texts are not where a frame needs them: it keeps no frame."""


def _overlap(a, b):
    return a[0] < b[1] and b[0] < a[1] and a[2] < b[3] and b[2] < a[3]


def figure(weights, letters, position):
    """The whole picture as a matplotlib Figure: heatmaps on top, row `position` as bars below."""
    return Picture(len(weights), len(letters)).show(weights, letters, position)


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


def encode(pixels, dpi):
    """The PNG of a drawing's RGBA pixels [rows, columns, 4], as print_png writes it (its
    resolution, its Software line), but RGB where every pixel is opaque (the explorer's are) and
    zlib at level 3, not 6. Measured on the lesson's picture: 11.5 ms instead of 20.2, and 93 KB
    instead of 97: the alpha byte of every pixel was a quarter of what zlib had to compress."""
    pixels = np.asarray(pixels)
    image = PIL.Image.frombuffer("RGBA", (pixels.shape[1], pixels.shape[0]), pixels, "raw", "RGBA", 0, 1)
    if (pixels[..., 3] == 255).all():
        image = image.convert("RGB")
    info = PIL.PngImagePlugin.PngInfo()
    info.add_text("Software", f"Matplotlib version{mpl.__version__}, https://matplotlib.org/")
    buffer = io.BytesIO()
    image.save(buffer, format="png", pnginfo=info, dpi=(dpi, dpi), compress_level=3)
    return buffer.getvalue()


def png(fig):
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png")
    return buffer.getvalue()


# One kept Picture for each shape (heads, letters) drawn in this process. The grading kernels'
# template draws the lessons' shapes once (kernelfork/server.py), so each kernel forked from
# it starts with the axes made and only fills them in.
_pictures = {}


def picture_png(weights, letters, position, keep_frame=False):
    """The PNG of figure(weights, letters, position), drawn on the kept Picture of its shape
    (`keep_frame`: Picture.png's)."""
    shape = (len(weights), len(letters))
    if shape not in _pictures:
        _pictures[shape] = Picture(*shape)
    with _no_gc_pauses():
        return _pictures[shape].png(weights, letters, position, keep_frame)


class Explorer:
    """The figure for one window, drawn once for each position the slider picks."""

    def __init__(self, mh, h, window_text, window=0):
        self.weights = head_weights(mh, h, window)
        self.letters = [show_letter(ch) for ch in window_text]
        assert self.weights.shape[-1] == len(self.letters), "one letter per position"
        self._pngs = {}

    def png(self, position):
        if position not in self._pngs:
            self._pngs[position] = picture_png(self.weights, self.letters, position)
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
