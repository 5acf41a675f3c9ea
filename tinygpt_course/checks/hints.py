"""Hint ladders: for every mistake a judge can name, three rungs, from the idea down to a nudge.

The ladders are data, kept beside each lesson's checks in ``<lesson>/hints.toml`` (the lesson's own
mistakes, ``Lesson.mistakes``) and in ``hints.toml`` here (the mistakes the shared steps name,
``protocol.SHARED_MISTAKES``, and the raw Python and torch errors learners hit). Each table is one
mistake id with three strings:

    [softmax_axis]
    idea = "..."    # rung 1: the idea, a sentence or two with a tiny example
    where = "..."   # rung 2: where it goes wrong in the learner's code (line, attribute, shape)
    nudge = "..."   # rung 3: a concrete nudge that still leaves the line to write

A raw error's ladder depends on where it was raised (PLACES: while ``__init__`` built the object,
in ``forward``, in ``generate``, in the loss): a sub-table ``[<mistake>.<place>]`` replaces the rungs
it names for an error raised there. A rung may name the lesson's sizes as ``{input}``, ``{output}``
and the like (``sizes``): they are filled from the course's config for the lesson and the place,
never written out in the text. Rung text is markdown (backticks mark code); it is ours, never the
learner's.

No rung ever holds a line of the solution or of a hidden test (tests/test_hints.py checks that
against source/). Reading a ladder needs no torch: the class report reads them in the grader.
"""
import html
import re
import tomllib
from functools import cache
from importlib import resources

from ..config import SIZES

RUNGS = ("idea", "where", "nudge")
SHARED = ""          # the shared ladders' "lesson": tinygpt_course/checks/hints.toml
# where a raw error was raised: the learner's method the failing call ran (see place())
PLACES = ("init", "forward", "generate", "loss")
PLACE_WORDS = {"init": "__init__", "forward": "forward", "generate": "generate", "loss": "the loss"}
# the record's runs of the learner's code (the extracts' prefixes), by the method each one calls;
# the gpt extract's "train_" run is forward with targets, "gen1_"/"gen2_" run generate
RUNS = {"init_": "init", "train_": "forward", "gen1_": "generate", "gen2_": "generate"}


def place(rec, prefix):
    """Where the error the record holds under `prefix` was raised, one of PLACES, decided on the
    record's data: which run of the learner's code raised (building the object, forward, forward
    with targets, generate), and for forward with targets whether forward without them ran
    through: then only the part that computes the loss is left to raise."""
    where = RUNS.get(prefix, "forward")
    if prefix == "train_" and rec.get("train_error") and not rec.get("error") and "logits" in rec:
        return "loss"
    return where


def sizes(lesson, where="forward"):
    """The lesson's sizes as its rungs name them ({input}, {output}, ...), computed from the
    course's config (tinygpt_course.config.SIZES): what the learner's method gets and gives."""
    B, T, C, V, H = SIZES.batch_size, SIZES.block_size, SIZES.n_embd, SIZES.vocab_size, SIZES.head_size
    x = f"x, [B, T, C] = [{B}, {T}, {C}]"
    out = {"head": f"[B, T, head_size] = [{B}, {T}, {H}]",
           "multihead": f"[B, T, n_embd] = [{B}, {T}, {C}] (each head's [{B}, {T}, {H}], side by side)",
           "block": f"[B, T, n_embd] = [{B}, {T}, {C}]",
           "gpt": f"logits [B, T, vocab_size] = [{B}, {T}, {V}]"}.get(lesson, f"[{B}, {T}, {C}]")
    given = f"idx, [B, T] = [{B}, {T}] letter ids" if lesson == "gpt" else x
    if where == "generate":
        given = (f"idx, [B, t] letter ids, one letter longer at each step; the model gets at most "
                 f"block_size = {T} of them, and the last position's scores are [B, vocab_size] = [B, {V}]")
        out = "idx with the new letters appended, [B, t + max_new_tokens]"
    elif where == "loss":
        given = (f"logits [B, T, vocab_size] = [{B}, {T}, {V}] and targets [B, T] = [{B}, {T}]; "
                 f"F.cross_entropy wants them as [B * T, vocab_size] = [{B * T}, {V}] and [B * T] = [{B * T}]")
        out = "the loss, one number"
    return {"input": given, "output": out, "n_embd": C, "block_size": T, "vocab_size": V,
            "batch_size": B, "head_size": H, "method": PLACE_WORDS.get(where, where)}


_CODE = re.compile(r"`([^`\n]+)`")


def as_html(text):
    """A rung (or any text of ours holding one) as HTML: escaped first, so nothing in it can
    become markup, then its markdown code spans (`x`) as <code>, the one markdown rungs use."""
    return _CODE.sub(r"<code>\1</code>", html.escape(text, quote=True))


_FIELD = re.compile(r"\{([a-z_]+)\}")


def fill(text, values):
    """text with each {name} of `values` filled in (other braces are left as they are)."""
    return _FIELD.sub(lambda m: str(values[m.group(1)]) if m.group(1) in values else m.group(0), text)


def _read(lesson):
    folder = resources.files("tinygpt_course.checks")
    path = folder.joinpath(lesson, "hints.toml") if lesson else folder.joinpath("hints.toml")
    if not path.is_file():
        return {}
    return tomllib.loads(path.read_text(encoding="utf-8"))


def _rungs(table, source, name):
    missing = [r for r in RUNGS if not isinstance(table.get(r), str) or not table[r].strip()]
    if missing:
        raise ValueError(f"hints.toml of {source or 'the shared steps'}: {name} lacks {missing}")
    return tuple(table[r].strip() for r in RUNGS)


@cache
def raw_ladders(lesson):
    """mistake id -> {place or None: (idea, where, nudge)}, as written (sizes not filled in). The
    lesson's own ladder wins over a shared one of the same id."""
    out = {}
    for source in (SHARED, lesson):
        for mistake, table in _read(source).items():
            by_place = {None: _rungs(table, source, mistake)}
            for key, sub in table.items():
                if isinstance(sub, dict):
                    if key not in PLACES:
                        raise ValueError(f"hints.toml of {source or 'the shared steps'}: {mistake}.{key} "
                                         f"is not one of {PLACES}")
                    by_place[key] = _rungs({**table, **sub}, source, f"{mistake}.{key}")
            out[mistake] = by_place
    return out


def ladder(lesson, mistake, where=None):
    """The three rungs for `mistake` in `lesson` (idea, where, nudge) for an error raised at
    `where` (one of PLACES; None: the mistake's own ladder, as for forward), sizes filled in;
    None if it has none."""
    by_place = raw_ladders(lesson).get(mistake)
    if by_place is None:
        return None
    rungs = by_place.get(where) or by_place[None]
    values = sizes(lesson, where or "forward")
    return tuple(fill(r, values) for r in rungs)


@cache
def ladders(lesson):
    """Every ladder a learner of `lesson` may be shown, as for an error in forward (the mistake's
    own ladder): mistake id -> (idea, where, nudge)."""
    return {mistake: ladder(lesson, mistake) for mistake in raw_ladders(lesson)}


# --- the rungs a learner used, as data (the notebook carries them: untrusted) ----------------

NAME = re.compile(r"[a-z][a-z0-9_]{0,59}")
MAX_ENTRIES = 100
STATE = "application/vnd.jupyter.widget-state+json"   # the key of metadata.widgets JupyterLab saves
KEPT = "tinygpt_hints_used"   # the notebook metadata key the course's JupyterLab extension keeps them in


def checked(h):
    """One entry {lesson, check, mistake, rungs} as plain checked values (snake_case names, rungs
    among 1-3, sorted), or None: what the tutor keeps, grading lifts out of a notebook
    (grading/hints_used.py) and the class report reads back."""
    if not isinstance(h, dict) or not all(isinstance(h.get(k), str) and NAME.fullmatch(h[k])
                                          for k in ("lesson", "check", "mistake")):
        return None
    rungs = h.get("rungs")
    if isinstance(rungs, list) and rungs and all(type(r) is int and 1 <= r <= 3 for r in rungs):
        return {"lesson": h["lesson"], "check": h["check"], "mistake": h["mistake"], "rungs": sorted(set(rungs))}
    return None


def merged(entries):
    """Checked entries, one per (lesson, check, mistake) with the rungs of all of them, in the
    order first seen, at most MAX_ENTRIES; anything that does not check is left out."""
    out = {}
    for entry in entries:
        entry = checked(entry)
        if entry is None:
            continue
        key = (entry["lesson"], entry["check"], entry["mistake"])
        if key in out:
            out[key]["rungs"] = sorted(set(out[key]["rungs"]) | set(entry["rungs"]))
        elif len(out) < MAX_ENTRIES:
            out[key] = entry
    return list(out.values())


def widget_entries(widgets):
    """The tutor's entries in a notebook's widget state (metadata.widgets), as found (unchecked):
    each hint box's `tinygpt_hints` and each of the tutor's ledger's `tinygpt_hints_used`."""
    try:
        models = list(widgets[STATE]["state"].values())[:10 * MAX_ENTRIES]
    except (KeyError, TypeError, AttributeError):
        return []
    found = []
    for model in models:
        state = model.get("state") if isinstance(model, dict) else None
        if not isinstance(state, dict):
            continue
        if "tinygpt_hints" in state:
            found.append(state["tinygpt_hints"])
        ledger = state.get("tinygpt_hints_used")
        if isinstance(ledger, list):
            found += ledger[:MAX_ENTRIES]
    return found


def metadata_entries(metadata):
    """The tutor's entries a notebook's metadata carries, checked and merged: those the course's
    JupyterLab extension keeps on save (``metadata.tinygpt_hints_used``, hub/labextension/hints.js,
    which checks them the same way) and those of the widget state (widget_entries). What the tutor
    reads back in a restarted kernel and grading lifts out (grading/hints_used.py)."""
    if not isinstance(metadata, dict):
        return []
    kept = metadata.get(KEPT)
    return merged((kept[:MAX_ENTRIES] if isinstance(kept, list) else []) + widget_entries(metadata.get("widgets")))
