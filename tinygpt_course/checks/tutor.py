"""The tutor under a failing check: the hint ladder of the mistake the check names, one rung at a
time, offline (checks/hints.py reads the ladders; nothing is sent anywhere).

- In JupyterLab, a failing check cell shows a "hint" button (ipywidgets) above its message; each
  press shows the next rung (1: the idea, 2: where it goes wrong, 3: a nudge).
- Where widgets do not render (nbgrader's Validate runs the notebook headless, a plain console),
  the check's message ends with rung 1 and how to get the next: ``checks.hint('<check id>')`` in
  a cell prints the next rung, the same ladder the button walks.

The rungs a learner used are kept in the widget's state (``HintBox.tinygpt_hints``: lesson, check,
mistake, rungs shown); JupyterLab writes every widget's state into the notebook's metadata
(``metadata.widgets``) on save when jupyterlab-manager's ``saveState`` is on, which the course's
JupyterLab settings switch on (hub/roles.py LAB_OVERRIDES, course.sh). So the submitted notebook
holds them for the teacher. Grading never reads them: no score depends on a hint.
"""
import html

from . import hints, paragraph

_used = {}      # (lesson, check id) -> [mistake id, rungs shown so far]
_boxes = {}     # (lesson, check id) -> the HintBox shown under that check's latest failure
NAMES = ("idea", "where it goes wrong", "a nudge")


def _in_kernel():
    """True in a Jupyter kernel (widgets may render), False in a plain Python process."""
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    shell = get_ipython()
    return shell is not None and getattr(shell, "kernel", None) is not None


def rung_text(ladder, n):
    """Rung n (1-based) as the learner reads it: 'Hint 2 of 3 (where it goes wrong): ...'."""
    return f"Hint {n} of {len(ladder)} ({NAMES[n - 1]}): {ladder[n - 1]}"


def fallback(lesson, check_id, mistake):
    """The text under a failing check where no widget renders: rung 1 and how to get the next,
    or None when the mistake has no ladder."""
    ladder = hints.ladder(lesson.name, mistake)
    if ladder is None:
        return None
    return (rung_text(ladder, 1) + f" (Next hint: press this check's hint button, or run "
            f"checks.hint('{check_id}') in a new cell.)")


def offer(lesson, check_id, mistake):
    """A check failed naming `mistake`: remember it for hint(), show a hint button in a kernel.
    Returns the text fallback (fallback())."""
    key = (lesson.name, check_id)
    if _used.get(key, [None])[0] != mistake:   # a new mistake starts its ladder again
        _used[key] = [mistake, 0]
    text = fallback(lesson, check_id, mistake)
    if text is not None and _in_kernel():
        try:
            box = HintBox.make(lesson.name, check_id, mistake)
        except ImportError:     # no ipywidgets: the text fallback is all there is
            box = None
        if box is not None:
            from IPython.display import display
            _boxes[key] = box
            display(box)
    return text


def next_rung(lesson_name, check_id):
    """The next rung for the mistake check_id named last, as text (and counted as used), or a
    sentence saying there is none."""
    key = (lesson_name, check_id)
    if key not in _used:
        return f"The check `{check_id}` has not failed in this kernel: run its cell first."
    mistake, shown = _used[key]
    ladder = hints.ladder(lesson_name, mistake)
    if ladder is None:
        return f"There is no hint for this mistake ({mistake}) yet: the check's message is all there is."
    if shown >= len(ladder):
        return "That was the last hint: " + rung_text(ladder, len(ladder))
    _used[key][1] = shown + 1
    box = _boxes.get(key)
    if box is not None and box.tinygpt_hints.get("mistake") == mistake:
        box.show(shown + 1)
    return rung_text(ladder, shown + 1)


def hint(lesson, check_id):
    """Print the next rung for check_id's mistake (what a learner types where no button shows)."""
    if check_id not in lesson.checks:
        print(f"{lesson.name} has no check {check_id!r}; its checks are {', '.join(lesson.checks)}.")
        return
    print(paragraph(next_rung(lesson.name, check_id)))


def _widget_class():
    import ipywidgets as widgets
    from traitlets import Dict

    class HintBox(widgets.VBox):
        """A button and the rungs shown so far. `tinygpt_hints` is synced with JupyterLab, so
        its value lands in the saved notebook's widget state: what the teacher reads."""
        tinygpt_hints = Dict().tag(sync=True)

        @classmethod
        def make(cls, lesson_name, check_id, mistake):
            button = widgets.Button(description="hint", icon="lightbulb-o",
                                    tooltip="show the next hint for this check (nothing is sent anywhere)")
            shown = widgets.HTML(value="")
            box = cls(children=[button, shown])
            box.lesson_name, box.check_id = lesson_name, check_id
            box.tinygpt_hints = {"lesson": lesson_name, "check": check_id, "mistake": mistake, "rungs": []}
            button.on_click(lambda _: next_rung(lesson_name, check_id))
            return box

        def show(self, n):
            """Show rungs 1..n of the ladder and record that rung n was used."""
            state = dict(self.tinygpt_hints)
            ladder = hints.ladder(state["lesson"], state["mistake"])
            self.children[1].value = "".join(
                f'<p class="tinygpt-hint" data-rung="{i}">{html.escape(rung_text(ladder, i))}</p>'
                for i in range(1, n + 1))
            state["rungs"] = list(range(1, n + 1))
            self.tinygpt_hints = state
            if n >= len(ladder):
                self.children[0].disabled = True

        def __repr__(self):   # the text/plain a non-widget frontend shows instead
            return f"[hint button: run checks.hint('{self.tinygpt_hints.get('check', '')}') for the next hint]"
    return HintBox


class _Lazy:
    """HintBox, made on first use: ipywidgets is imported only where a check fails in a kernel."""
    _cls = None

    def __getattr__(self, name):
        if _Lazy._cls is None:
            _Lazy._cls = _widget_class()
        return getattr(_Lazy._cls, name)


HintBox = _Lazy()
