"""The tutor under a failing check: the hint ladder of the mistake the check names, one rung at a
time, offline (checks/hints.py reads the ladders; nothing is sent anywhere).

- In JupyterLab, a failing check cell shows a "hint" button (ipywidgets) above its message; each
  press shows the next rung (1: the idea, 2: where it goes wrong, 3: a nudge), rendered as markdown
  (our text: a learner's words never reach a rung). ``checks.hint('<check id>')`` in a cell
  prints the next rung, the same ladder the button walks: the two share one place in it.
- Where no one is at a frontend to press a button (nbgrader's Validate runs the notebook headless,
  its kernel refuses input) or there is no kernel at all (a plain console), the check's message
  ends with rung 1, which counts as shown, and how to get the next.
- A raw error's ladder is the one for where it was raised (hints.PLACES: ``__init__``, forward,
  generate, the loss), with the lesson's sizes (hints.ladder).

The rungs a learner used are kept in widget state, which JupyterLab writes into the notebook's
metadata (``metadata.widgets``) on save, as jupyterlab-manager's ``saveState`` does with the
course's JupyterLab settings (hub/roles.py LAB_OVERRIDES, course.sh): each hint box's
``tinygpt_hints`` and the tutor's ledger's ``tinygpt_hints_used``, every entry used in this
kernel and those the saved notebook carried when the tutor was imported (the set-up cell). Widget
state alone would lose them: after Kernel > Restart it is empty, and a save before any cell runs
writes it so. So the course's JupyterLab extension (hub/labextension, plugin keep-hints) keeps
them in the notebook's metadata too: whenever a save writes ``metadata.widgets``, it merges the
tutor's entries of the old and the new widget state into ``metadata.tinygpt_hints_used``
(hints.KEPT), never dropping one. A restarted kernel starts with no widgets: it reads both back
from the notebook file the server started it for (``JPY_SESSION_NAME``), as untrusted data
(hints.metadata_entries: checked, merged), and the ledger keeps them in the next save; a check
failing again continues its ladder from there. Grading never reads them for a score: only the
teacher's report counts them (grading/hints_used.py).
"""
import json
import os

from . import hints, paragraph

_used = {}      # (lesson, check id) -> [mistake id, where, rungs shown so far]
_boxes = {}     # (lesson, check id) -> the HintBox shown under that check's latest failure
_shown = {}     # (lesson, check id, mistake id) -> the rungs shown: this kernel's and those carried in
_ledger = []    # the HintsLedger widget, once made (kernel only)
NAMES = ("idea", "where it goes wrong", "a nudge")
MAX_NOTEBOOK_BYTES = 64 << 20   # a saved notebook bigger than this is not read for hints


def _shell_kernel():
    """The ipykernel Kernel this code runs under, or None (a plain Python process)."""
    try:
        from IPython import get_ipython
    except ImportError:
        return None
    shell = get_ipython()
    return getattr(shell, "kernel", None) if shell is not None else None


def _in_kernel():
    """True in a Jupyter kernel (widgets may render), False in a plain Python process."""
    return _shell_kernel() is not None


def _someone_at_the_frontend():
    """The running cell was sent by a frontend that can answer input() (JupyterLab, a console:
    someone can press a button), not by a headless run (nbclient, under Validate and grading,
    sends allow_stdin false): a fact of the execute request, kept by ipykernel."""
    return getattr(_shell_kernel(), "_allow_stdin", False) is True


def rung_text(ladder, n):
    """Rung n (1-based) as the learner reads it: 'Hint 2 of 3 (where it goes wrong): ...'."""
    return f"Hint {n} of {len(ladder)} ({NAMES[n - 1]}): {ladder[n - 1]}"


def rung_html(ladder, n):
    """rung_text as HTML (hints.as_html: escaped, then code spans as <code>)."""
    return hints.as_html(rung_text(ladder, n))


def fallback(lesson, check_id, mistake, where=None):
    """The text under a failing check where no widget renders: rung 1 and how to get the next,
    or None when the mistake has no ladder."""
    ladder = hints.ladder(lesson.name, mistake, where)
    if ladder is None:
        return None
    return (rung_text(ladder, 1) + f" (Next hint: run checks.hint('{check_id}') in a new cell, "
            "or press this check's hint button in JupyterLab.)")


def pointer(check_id):
    """The text under a failing check where its hint button shows: how to get the rungs."""
    return (f"Hints, one at a time: press the hint button above, or run checks.hint('{check_id}') "
            "in a new cell.")


def offer(lesson, check_id, mistake, where=None):
    """A check failed naming `mistake` (a raw error raised at `where`, one of hints.PLACES):
    remember it for hint(), show a hint button in a kernel. Returns the text for the check's
    message: rung 1 where no one can press the button (it then counts as shown), else how to
    get the rungs; None when the mistake has no ladder."""
    _restore()
    key = (lesson.name, check_id)
    if _used.get(key, [None, None])[:2] != [mistake, where]:   # a new mistake: its ladder from
        _used[key] = [mistake, where, max(_shown.get(key + (mistake,), ()), default=0)]   # its last rung
    if hints.ladder(lesson.name, mistake, where) is None:
        return None
    box = None
    if _in_kernel():
        try:
            box = HintBox.make(lesson.name, check_id, mistake, where)
        except ImportError:     # no ipywidgets: the text fallback is all there is
            box = None
    if box is not None:
        from IPython.display import display
        _boxes[key] = box
        box.show(_used[key][2])
        display(box)
        if _someone_at_the_frontend():
            return pointer(check_id)
    if _used[key][2] == 0:
        _record(lesson.name, check_id, mistake, 1)    # rung 1 is in the message
    return fallback(lesson, check_id, mistake, where)


def _record(lesson_name, check_id, mistake, n):
    """Rung n of the mistake's ladder was shown: count it, in the ledger too."""
    key = (lesson_name, check_id)
    if _used.get(key, [None])[0] == mistake:
        _used[key][2] = max(_used[key][2], n)
    _shown.setdefault(key + (mistake,), set()).update(range(1, n + 1))
    _sync_ledger()


def next_rung(lesson_name, check_id):
    """The next rung for the mistake check_id named last, as text (and counted as used), or a
    sentence saying there is none."""
    key = (lesson_name, check_id)
    if key not in _used:
        return f"The check `{check_id}` has not failed in this kernel: run its cell first."
    mistake, where, shown = _used[key]
    ladder = hints.ladder(lesson_name, mistake, where)
    if ladder is None:
        return f"There is no hint for this mistake ({mistake}) yet: the check's message is all there is."
    if shown >= len(ladder):
        return "That was the last hint: " + rung_text(ladder, len(ladder))
    _record(lesson_name, check_id, mistake, shown + 1)
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


# --- the rungs used, kept across a kernel restart --------------------------------------------

def used_entries():
    """Every rung used, in this kernel and carried in from the saved notebook, as checked entries."""
    return hints.merged({"lesson": lesson, "check": check, "mistake": mistake, "rungs": sorted(rungs)}
                        for (lesson, check, mistake), rungs in _shown.items())


def saved_entries(path):
    """The tutor's entries a saved notebook file carries in its metadata (those JupyterLab's
    extension keeps and those of the widget state), checked (it is learner-made data: names that
    are not snake_case ids, rungs out of 1-3 are left out); [] for a file that is missing, too big
    or not a notebook."""
    try:
        if not str(path).endswith(".ipynb") or os.path.getsize(path) > MAX_NOTEBOOK_BYTES:
            return []
        with open(path, encoding="utf-8") as f:
            metadata = json.load(f).get("metadata")
    except (OSError, ValueError, AttributeError, RecursionError):
        return []
    return hints.metadata_entries(metadata)


_restored = []


def _restore():
    """Once per kernel: the rungs the notebook file carried when this kernel started (jupyter
    server names the notebook in JPY_SESSION_NAME), counted as shown, and the ledger that keeps
    them in the next save."""
    if _restored:
        return
    _restored.append(True)
    path = os.environ.get("JPY_SESSION_NAME")
    if not path or not _in_kernel():
        return
    for entry in saved_entries(path):
        _shown.setdefault((entry["lesson"], entry["check"], entry["mistake"]), set()).update(entry["rungs"])
    if _shown:
        _sync_ledger()


def _sync_ledger():
    """The ledger widget holds used_entries() (made on first use, in a kernel with ipywidgets)."""
    if not _in_kernel():
        return
    if not _ledger:
        try:
            _ledger.append(HintsLedger.make())
        except ImportError:
            return
    _ledger[0].tinygpt_hints_used = used_entries()


def _widget_classes():
    import ipywidgets as widgets
    from traitlets import Dict, List

    class HintBox(widgets.VBox):
        """A button and the rungs shown so far. `tinygpt_hints` is synced with JupyterLab, so
        its value lands in the saved notebook's widget state: what the teacher reads."""
        tinygpt_hints = Dict().tag(sync=True)

        @classmethod
        def make(cls, lesson_name, check_id, mistake, where=None):
            button = widgets.Button(description="hint", icon="lightbulb-o",
                                    tooltip="show the next hint for this check (nothing is sent anywhere)")
            shown = widgets.HTML(value="")
            box = cls(children=[button, shown])
            box.lesson_name, box.check_id, box.where = lesson_name, check_id, where
            box.tinygpt_hints = {"lesson": lesson_name, "check": check_id, "mistake": mistake, "rungs": []}
            button.on_click(lambda _: next_rung(lesson_name, check_id))
            return box

        def show(self, n):
            """Show rungs 1..n of the ladder (as markdown: rung_html) and record that they were used."""
            state = dict(self.tinygpt_hints)
            ladder = hints.ladder(state["lesson"], state["mistake"], getattr(self, "where", None))
            self.children[1].value = "".join(
                f'<p class="tinygpt-hint" data-rung="{i}">{rung_html(ladder, i)}</p>' for i in range(1, n + 1))
            if n:
                state["rungs"] = list(range(1, n + 1))
                self.tinygpt_hints = state
            self.children[0].disabled = n >= len(ladder)

        def __repr__(self):   # the text/plain a non-widget frontend shows instead
            return f"[hint button: run checks.hint('{self.tinygpt_hints.get('check', '')}') for the next hint]"

    class HintsLedger(widgets.Widget):
        """Never shown: every rung used in this notebook ({lesson, check, mistake, rungs}), synced,
        so each save writes it into the notebook's widget state, also for checks whose hint box
        is gone (the check passes now, or the kernel restarted)."""
        tinygpt_hints_used = List().tag(sync=True)

        @classmethod
        def make(cls):
            return cls()

    return {"HintBox": HintBox, "HintsLedger": HintsLedger}


class _Lazy:
    """A widget class, made on first use: ipywidgets is imported only where a check fails in a
    kernel, or a restarted kernel has rungs to keep."""
    _classes = None

    def __init__(self, name):
        self.name = name

    def __getattr__(self, attr):
        if _Lazy._classes is None:
            _Lazy._classes = _widget_classes()
        return getattr(_Lazy._classes[self.name], attr)


HintBox = _Lazy("HintBox")
HintsLedger = _Lazy("HintsLedger")
_restore()
