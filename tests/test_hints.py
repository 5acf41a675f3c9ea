"""The hint ladders (tinygpt_course/checks/hints.py, hints.toml) and the tutor that shows them
(tinygpt_course/checks/tutor.py), fast and in one process:

- every mistake id a lesson's judge can name (Lesson.all_mistakes, and every `# mistake:` header of
  the lesson's catalogue) has a ladder;
- no rung of any ladder holds a line of a solution or of a hidden test (source/<lesson>/, the
  rule in secret_lines), and the rule is shown to catch a planted solution line;
- the three rungs of a ladder differ;
- the raw errors' mistake ids are decided on the record's data, never on a message's words;
- the tutor gives rung 1 as text, then the next rungs in order (never rung 1 again); a kernel
  started again continues from the rungs the saved notebook carries (checked data); rungs render
  backticks as code and never markup; the rungs used are widget state (hint boxes and the ledger),
  which grading lifts out as checked data and drops (no score can depend on them);
- the rungs JupyterLab's extension keeps in metadata.tinygpt_hints_used (so that a save right after
  a kernel restart loses none) are read by the tutor and by grading as checked data, hostile values
  left out, and the extension's own checks (hub/labextension/hints.js, run under node) agree.
"""
import json
import os
import re
import shutil
import subprocess

import nbformat
import pytest
import torch

from tinygpt_course.checks import hints, tutor
from tinygpt_course.config import SIZES, CourseConfig
from tinygpt_course.checks.protocol import RAW_MISTAKES, SHARED_MISTAKES, load_lesson, raw_mistake
from tinygpt_course.testing import catalogue, notebooks
from tinygpt_course.testing.course import REPO as ROOT

LESSONS = ("head", "multihead", "block", "gpt")
MIN_SECRET = 12    # characters (spaces and comment dropped) below which a line is a word any hint uses


def squeeze(text):
    return re.sub(r"\s+", "", text)


def code_part(line):
    """A line without its trailing comment (a `#` after code, outside any quotes)."""
    quote = None
    for i, ch in enumerate(line):
        if quote:
            quote = None if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch == "#":
            return line[:i]
    return line


def secret_lines(lesson):
    """The lines a rung must never hold, whitespace dropped. The rule: a line between
    `### BEGIN SOLUTION` / `### END SOLUTION` or `### BEGIN HIDDEN TESTS` / `### END HIDDEN TESTS`
    in source/<lesson>/<lesson>.ipynb, as code (its comment dropped; a comment alone is not
    code), that is not trivial (at least MIN_SECRET characters without spaces: `)`, `return out`
    or `x = x` are words any hint may use) and that the learner does not see anyway (a line of
    the released notebook: the stub's `super().__init__()`, the narrative's examples)."""
    nb = nbformat.read(notebooks.source_path(lesson), as_version=4)
    released = nbformat.read(notebooks.release_path(lesson), as_version=4)
    public = {squeeze(code_part(ln)) for c in released.cells for ln in c.source.splitlines()}
    out = set()
    for line in notebooks.marked_lines(nb, "SOLUTION", "HIDDEN TESTS"):
        code = squeeze(code_part(line))
        if len(code) >= MIN_SECRET and code not in public:
            out.add(code)
    return out


def leaks(ladders, secrets):
    """[(mistake id, rung, the secret line it holds)] for every rung that holds a secret line."""
    return [(mistake, rung, secret) for mistake, ladder in ladders.items()
            for rung, text in zip(hints.RUNGS, ladder) for secret in secrets if secret in squeeze(text)]


def named_mistakes(lesson):
    """Every mistake id a verdict of the lesson can name: its judge's and its catalogue's."""
    return set(load_lesson(lesson).all_mistakes) | {a.mistake for a in catalogue.answers(lesson) if a.mistake}


def test_every_mistake_has_a_ladder():
    missing = {lesson: sorted(named_mistakes(lesson) - set(hints.ladders(lesson))) for lesson in LESSONS}
    missing = {lesson: ids for lesson, ids in missing.items() if ids}
    assert not missing, "mistakes without a hint ladder: " + "; ".join(
        f"{lesson} ({len(ids)}): {', '.join(ids)}" for lesson, ids in missing.items())


def test_the_shared_steps_and_raw_errors_have_ladders():
    """The part of the above this module's own hints.toml answers for, whatever the lessons' say."""
    shared = hints.ladders(hints.SHARED)
    assert set(SHARED_MISTAKES) <= set(shared), set(SHARED_MISTAKES) - set(shared)
    assert set(RAW_MISTAKES) <= set(SHARED_MISTAKES)


@pytest.mark.parametrize("lesson", LESSONS)
def test_no_rung_holds_a_line_of_the_solution_or_a_hidden_test(lesson):
    secrets = secret_lines(lesson)
    assert len(secrets) >= 5, secrets       # the rule leaves the lines that matter
    assert not leaks(hints.ladders(lesson), secrets)


def test_a_planted_solution_line_is_caught():
    secrets = secret_lines("multihead")
    nb = nbformat.read(notebooks.source_path("multihead"), as_version=4)
    planted = next(ln for ln in sorted(notebooks.marked_lines(nb, "SOLUTION")) if squeeze(code_part(ln)) in secrets)
    ladders = dict(hints.ladders("multihead"))
    mistake, (idea, where, nudge) = next(iter(ladders.items()))
    ladders[mistake] = (idea, where, nudge + " For example:  " + planted.replace(" ", "  "))
    assert leaks(ladders, secrets) == [(mistake, "nudge", squeeze(code_part(planted)))]
    # and a comment or a trivial line of the solution is not a secret
    assert not any(len(s) < MIN_SECRET for s in secrets)


@pytest.mark.parametrize("lesson", (hints.SHARED,) + LESSONS)
def test_the_rungs_of_a_ladder_differ(lesson):
    for mistake, ladder in hints.ladders(lesson).items():
        assert len({" ".join(r.lower().split()) for r in ladder}) == 3, mistake


# --- the raw errors: decided on the record's data ---------------------------------------------

def test_raw_errors_are_decided_on_data_not_words():
    said = "NameError: name 'n_embd' is not defined"    # the same words, other data
    assert raw_mistake({"error": said, "exception": "NameError", "error_name": "n_embd"}, "") == "undefined_size"
    assert raw_mistake({"error": said, "exception": "NameError", "error_name": "n_embed"}, "") == "undefined_size"
    assert raw_mistake({"error": said, "exception": "NameError", "error_name": "wei"}, "") == "undefined_name"
    assert raw_mistake({"error": said, "exception": "NameError", "error_name": "key",
                        "error_name_is_attribute": True}, "") == "self_forgotten"
    assert raw_mistake({"error": said, "exception": "ValueError", "error_name": None}, "") is None
    assert raw_mistake({"error": said}, "") is None
    shapes = "RuntimeError: mat1 and mat2 shapes cannot be multiplied"
    assert raw_mistake({"error": shapes, "exception": "RuntimeError", "error_line": "w = q @ k"}, "") == "matmul_shapes"
    assert raw_mistake({"error": shapes, "exception": "RuntimeError", "error_line": "w = q.view(B, T, C)"}, "") \
        == "wrong_view"
    assert raw_mistake({"error": shapes, "exception": "RuntimeError", "error_line": "w = self.proj(x)",
                        "error_module": "Linear"}, "") == "layer_input_shape"
    assert raw_mistake({"error": shapes, "exception": "RuntimeError", "error_line": "w = f(x)"}, "") is None
    assert raw_mistake({"error": shapes, "exception": "RuntimeError", "error_line": "w = (q @"}, "") is None
    assert raw_mistake({"init_error": "AttributeError: x", "init_exception": "AttributeError",
                        "init_module_state_missing": True}, "init_") == "missing_super_init"


def test_the_extract_records_what_the_judges_decide_on():
    from tinygpt_course.checks.common import compiled, forward_record

    ns = {"torch": torch, "nn": torch.nn}
    exec(compiled("class M(torch.nn.Module):\n    def __init__(self):\n        super().__init__()\n"
                  "        self.key = torch.nn.Linear(4, 2)\n    def forward(self, x):\n"
                  "        return x @ self.key(x)\n", "<your answer cell>"), ns)
    rec = {}
    forward_record(ns["M"](), torch.zeros(3, 4), rec, "")
    assert rec["exception"] == "RuntimeError" and rec["error_line"] == "return x @ self.key(x)", rec
    assert raw_mistake(rec, "") == "matmul_shapes"


# --- the tutor ------------------------------------------------------------------------------

@pytest.fixture
def fresh_tutor(monkeypatch):
    """A fresh kernel's tutor: no check has failed, no rung used, nothing carried in."""
    for name, value in (("_used", {}), ("_boxes", {}), ("_shown", {}), ("_ledger", []), ("_restored", [True])):
        monkeypatch.setattr(tutor, name, value)
    return tutor


def test_the_tutor_gives_rung_one_as_text_then_the_next_in_order(capsys, fresh_tutor):
    lesson = load_lesson("head")
    ladder = hints.ladder("head", "matmul_shapes")
    text = tutor.offer(lesson, "shapes", "matmul_shapes")      # no kernel here: text only
    assert text.startswith(tutor.rung_text(ladder, 1)) and "checks.hint('shapes')" in text
    shown = []
    for _ in range(3):          # the message showed rung 1: hint() gives the next, not rung 1 again
        tutor.hint(lesson, "shapes")
        shown.append(" ".join(capsys.readouterr().out.split()))
    assert shown[:2] == [" ".join(tutor.rung_text(ladder, n).split()) for n in (2, 3)]
    assert shown[2].startswith("That was the last hint")
    assert tutor.used_entries() == [{"lesson": "head", "check": "shapes", "mistake": "matmul_shapes", "rungs": [1, 2, 3]}]
    tutor.offer(lesson, "shapes", "undefined_size")             # another mistake: its ladder from the top
    tutor.hint(lesson, "shapes")
    assert " ".join(capsys.readouterr().out.split()) == " ".join(
        tutor.rung_text(hints.ladder("head", "undefined_size"), 2).split())
    tutor.offer(lesson, "shapes", "matmul_shapes")              # back to the first: it stays at its last rung
    tutor.hint(lesson, "shapes")
    assert capsys.readouterr().out.startswith("That was the last hint")
    tutor.hint(lesson, "causal")
    assert "has not failed" in capsys.readouterr().out


def next_rung_after_restart(path, monkeypatch, capsys):
    """A kernel started again for the notebook file `path` (JPY_SESSION_NAME) reads the rungs it
    carries; head's check `shapes` fails again naming matmul_shapes: the rung checks.hint prints."""
    monkeypatch.setattr(tutor, "_restored", [])
    monkeypatch.setenv("JPY_SESSION_NAME", str(path))
    monkeypatch.setattr(tutor, "_in_kernel", lambda: True)     # the restore reads files in a kernel only
    monkeypatch.setattr(tutor, "_sync_ledger", lambda: None)    # (no widget frontend in this process)
    tutor._restore()
    monkeypatch.setattr(tutor, "_in_kernel", lambda: False)
    lesson = load_lesson("head")
    tutor.offer(lesson, "shapes", "matmul_shapes")
    tutor.hint(lesson, "shapes")
    printed = " ".join(capsys.readouterr().out.split())
    ladder = hints.ladder("head", "matmul_shapes")
    return next((n for n in (1, 2, 3) if printed == " ".join(tutor.rung_text(ladder, n).split())), printed)


def test_the_tutor_continues_from_the_rungs_a_saved_notebook_carries(tmp_path, capsys, fresh_tutor, monkeypatch):
    """A restarted kernel reads the rungs used back from the notebook file the server started it
    for (JPY_SESSION_NAME), as checked data: a check failing again continues its ladder; a forged
    entry is left out; a file that is no notebook gives nothing."""
    saved = {"version_major": 2, "version_minor": 0, "state": {
        "a": {"state": {"tinygpt_hints": {"lesson": "head", "check": "shapes", "mistake": "matmul_shapes", "rungs": [1]}}},
        "b": {"state": {"tinygpt_hints_used": [
            {"lesson": "head", "check": "shapes", "mistake": "matmul_shapes", "rungs": [2]},
            {"lesson": "head", "check": "causal", "mistake": "<b>x</b>", "rungs": [1]},
            {"lesson": "head", "check": "causal", "mistake": "sees_the_future", "rungs": [1, 7]}]}}}}
    nb = nbformat.v4.new_notebook()
    nb.metadata["widgets"] = {hints.STATE: saved}
    path = tmp_path / "head.ipynb"
    nbformat.write(nb, path)
    assert tutor.saved_entries(path) == [{"lesson": "head", "check": "shapes", "mistake": "matmul_shapes", "rungs": [1, 2]}]
    assert tutor.saved_entries(tmp_path / "missing.ipynb") == []
    (tmp_path / "not.ipynb").write_text("[1, 2")
    assert tutor.saved_entries(tmp_path / "not.ipynb") == []

    assert next_rung_after_restart(path, monkeypatch, capsys) == 3


def test_rungs_render_code_spans_and_never_markup():
    ladder = ("Use `x.shape` and <b>this</b> & `<img src=x onerror=alert(1)>`", "b", "c")
    shown = tutor.rung_html(ladder, 1)
    assert "<code>x.shape</code>" in shown and "&lt;b&gt;this&lt;/b&gt; &amp;" in shown
    assert "<code>&lt;img src=x onerror=alert(1)&gt;</code>" in shown and "<img" not in shown and "<b>" not in shown
    # and every rung of every ladder renders its backticks as code
    for lesson in (hints.SHARED,) + LESSONS:
        for ladder in hints.ladders(lesson).values():
            for n in (1, 2, 3):
                assert "`" not in tutor.rung_html(ladder, n), ladder[n - 1]


def test_the_hint_box_keeps_the_rungs_used_and_grading_keeps_them_as_data_only(fresh_tutor):
    """The box's synced state holds the rungs shown (what JupyterLab saves into the notebook),
    and so does the ledger's (every rung used, also for a check whose box is gone); grading's
    KeepHintsUsed lifts them out as checked data, merged (a forged entry is left out) and
    SanitizeOutputs drops the widget state itself."""
    from tinygpt_course.grading.hints_used import KeepHintsUsed
    from tinygpt_course.grading.sanitize_outputs import SanitizeOutputs

    box = tutor.HintBox.make("head", "shapes", "matmul_shapes")
    box.show(2)
    assert box.tinygpt_hints == {"lesson": "head", "check": "shapes", "mistake": "matmul_shapes", "rungs": [1, 2]}
    assert box.get_state()["tinygpt_hints"]["rungs"] == [1, 2]        # synced: it is in the saved state
    assert 'data-rung="2"' in box.children[1].value and not box.children[0].disabled
    assert "<code>" in box.children[1].value                           # markdown code spans
    box.show(3)
    assert box.children[0].disabled
    ledger = tutor.HintsLedger.make()
    ledger.tinygpt_hints_used = [{"lesson": "head", "check": "shapes", "mistake": "matmul_shapes", "rungs": [1]},
                                 {"lesson": "head", "check": "causal", "mistake": "ignores_last_letter", "rungs": [1, 2]}]
    assert ledger.get_state()["tinygpt_hints_used"][1]["rungs"] == [1, 2]
    forged = {"state": {"tinygpt_hints": {"lesson": "head", "check": "<img src=x onerror=alert(1)>",
                                          "mistake": "matmul_shapes", "rungs": [1]}}}
    nb = nbformat.v4.new_notebook()
    nb.metadata["widgets"] = {"application/vnd.jupyter.widget-state+json": {
        "state": {box.model_id: {"state": box.get_state()}, "forged": forged,
                  ledger.model_id: {"state": ledger.get_state()}}}}
    nb.metadata["tinygpt"] = {"lesson": "head", "hints_used": [{"claimed": "by hand"}]}
    nb, _ = KeepHintsUsed().preprocess(nb, {})
    nb, _ = SanitizeOutputs().preprocess(nb, {})
    assert "widgets" not in nb.metadata
    assert nb.metadata["tinygpt"]["hints_used"] == [
        {"lesson": "head", "check": "shapes", "mistake": "matmul_shapes", "rungs": [1, 2, 3]},
        {"lesson": "head", "check": "causal", "mistake": "ignores_last_letter", "rungs": [1, 2]}]
    box.close()
    ledger.close()


# --- the rungs kept in the notebook's metadata (hub/labextension: plugin keep-hints) ------------

LABEXT = ROOT / "hub" / "labextension"
GOOD = {"lesson": "head", "check": "shapes", "mistake": "matmul_shapes", "rungs": [2, 1, 2]}
# learner-made values: none of them is an entry (wrong types, names that are no snake_case id,
# rungs out of 1-3 or no int: 0, 4, "1", True, 1.5)
FORGED = ([{**GOOD, "rungs": r} for r in ([0], [4], ["1"], [True], [1.5], [], [1, 4], "1", 1, None)]
          + [{**GOOD, "check": c} for c in ("Shapes", "a-b", "<b>x</b>", "x" * 61, "", "1st", "shapes\n", 5, None)]
          + [{k: v for k, v in GOOD.items() if k != "mistake"}, "head shapes matmul_shapes", [GOOD], 3, None, True])


def with_kept(kept, widgets=None):
    """A notebook's metadata as JupyterLab saves it: the extension's list and the widget state."""
    return {hints.KEPT: kept, "widgets": {hints.STATE: {"version_major": 2, "version_minor": 0, "state": widgets or {}}}}


def test_the_rungs_kept_in_metadata_are_read_as_checked_data():
    """metadata.tinygpt_hints_used is read besides the widget state, merged with it; every value
    that is not an entry is left out, extra keys are not carried, and a huge list is read only
    up to MAX_ENTRIES (entries and list items)."""
    box = {"state": {"tinygpt_hints": {**GOOD, "rungs": [3]}}}
    other = {"lesson": "head", "check": "causal", "mistake": "sees_the_future", "rungs": [1], "onclick": "<script>"}
    got = hints.metadata_entries(with_kept(FORGED + [GOOD] + FORGED + [other], {"m": box}))
    assert got == [{**GOOD, "rungs": [1, 2, 3]}, {k: v for k, v in other.items() if k != "onclick"}]
    for held in ("x", GOOD, None, 7, True, {"0": GOOD}):     # no list: the widget state alone
        assert hints.metadata_entries(with_kept(held, {"m": box})) == [{**GOOD, "rungs": [3]}]
    for metadata in (None, [], "x", {}, {"widgets": "x"}):
        assert hints.metadata_entries(metadata) == []
    many = [{**GOOD, "check": f"c{i}"} for i in range(50 * hints.MAX_ENTRIES)]
    assert hints.metadata_entries(with_kept(many)) == hints.merged(many[:hints.MAX_ENTRIES])
    assert hints.metadata_entries(with_kept(["junk"] * hints.MAX_ENTRIES + [GOOD])) == []   # read no further


def test_a_restarted_kernel_continues_from_the_rungs_kept_in_metadata(tmp_path, capsys, fresh_tutor, monkeypatch):
    """The file a save right after a kernel restart writes: the widget state holds no entry, the
    extension's list holds them (and forged values, left out); the check failing again continues."""
    nb = nbformat.v4.new_notebook()
    nb.metadata.update(with_kept(FORGED + [GOOD]))
    path = tmp_path / "head.ipynb"
    nbformat.write(nb, path)
    assert tutor.saved_entries(path) == [{**GOOD, "rungs": [1, 2]}]
    assert next_rung_after_restart(path, monkeypatch, capsys) == 3
    assert tutor.used_entries() == [{**GOOD, "rungs": [1, 2, 3]}]


def test_grading_lifts_the_kept_rungs_and_drops_the_learner_s_copy():
    """KeepHintsUsed reads metadata.tinygpt_hints_used with the widget state (checked, merged) into
    metadata.tinygpt.hints_used and drops the learner's list; SanitizeOutputs leaves the rest."""
    from tinygpt_course.grading.hints_used import KeepHintsUsed
    from tinygpt_course.grading.sanitize_outputs import SanitizeOutputs

    nb = nbformat.v4.new_notebook()
    nb.metadata.update(with_kept(FORGED + [GOOD], {"m": {"state": {"tinygpt_hints_used": [{**GOOD, "rungs": [3]}]}}}))
    nb.metadata["tinygpt"] = {"lesson": "head"}
    nb, _ = KeepHintsUsed().preprocess(nb, {})
    nb, _ = SanitizeOutputs().preprocess(nb, {})
    assert hints.KEPT not in nb.metadata and "widgets" not in nb.metadata
    assert nb.metadata["tinygpt"] == {"lesson": "head", "hints_used": [{**GOOD, "rungs": [1, 2, 3]}]}
    nb = nbformat.v4.new_notebook()      # a list of forged values alone: nothing is lifted
    nb.metadata.update({hints.KEPT: FORGED, "tinygpt": {"lesson": "head"}})
    nb, _ = KeepHintsUsed().preprocess(nb, {})
    assert nb.metadata == {"tinygpt": {"lesson": "head"}}


def run_node(script, data):
    """Run `script` under node with hub/labextension/hints.js as `hints` and `data` (JSON) as
    `data`; what it prints, parsed as JSON."""
    node = shutil.which("node")
    if node is None:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail("node is missing (course.sh setup installs it)")
        pytest.skip("node is missing")
    prelude = (f"const hints = require({json.dumps(str(LABEXT / 'hints.js'))});"
               "const data = JSON.parse(require('fs').readFileSync(0, 'utf8'));")
    done = subprocess.run([node, "-e", prelude + script], input=json.dumps(data), capture_output=True,
                          text=True, timeout=60, check=True)
    return json.loads(done.stdout)


def test_the_lab_extension_checks_entries_as_the_python_side_does():
    """hub/labextension/hints.js (what the keep-hints plugin writes) and hints.py (what the tutor
    and grading read) hold the same constants and give the same entries, for every forged value,
    a huge list and widget states; and the committed build holds the plugin and those checks."""
    consts = run_node("console.log(JSON.stringify([hints.KEPT, hints.STATE, hints.NAME.source, hints.MAX_ENTRIES]))", None)
    assert consts == [hints.KEPT, hints.STATE, f"^{hints.NAME.pattern}$", hints.MAX_ENTRIES]
    entries = FORGED + [GOOD, {**GOOD, "rungs": [3, 3]}, {**GOOD, "extra": "<b>"}]
    many = [{**GOOD, "check": f"c{i}", "rungs": [i % 3 + 1]} for i in range(3 * hints.MAX_ENTRIES)] * 2
    widgets = [None, "x", {hints.STATE: []}, with_kept(None)["widgets"],
               with_kept(None, {str(i): {"state": {"tinygpt_hints": e}} for i, e in enumerate(entries)})["widgets"],
               with_kept(None, {"l": {"state": {"tinygpt_hints_used": many}}, "x": "y", "z": {"state": 3}})["widgets"]]
    helds = [entries, many, None, "x", GOOD]
    got = run_node("""console.log(JSON.stringify({
        checked: data.entries.map(hints.checked), merged: hints.merged(data.entries),
        mergedMany: hints.merged(data.many), widgets: data.widgets.map(hints.widgetEntries),
        kept: data.helds.flatMap(h => data.widgets.map(w => hints.kept(h, undefined, w))),
        keptBoth: hints.kept(data.entries, data.widgets[4], data.widgets[5])}))""",
                   {"entries": entries, "many": many, "widgets": widgets, "helds": helds})
    assert got["checked"] == [hints.checked(e) for e in entries]
    assert got["merged"] == hints.merged(entries) == [{**GOOD, "rungs": [1, 2, 3]}]
    assert got["mergedMany"] == hints.merged(many) and len(got["mergedMany"]) == hints.MAX_ENTRIES
    assert got["widgets"] == [hints.widget_entries(w) for w in widgets]
    assert got["kept"] == [hints.metadata_entries({hints.KEPT: h, "widgets": w}) for h in helds for w in widgets]
    assert got["keptBoth"] == hints.merged(hints.metadata_entries({hints.KEPT: entries, "widgets": widgets[4]})
                                           + hints.widget_entries(widgets[5]))
    built = "".join(p.read_text() for p in (LABEXT / "tinygpt-feedback" / "static").glob("*.js"))
    for word in ("tinygpt-feedback:keep-hints", hints.KEPT, hints.NAME.pattern):
        assert word in built, f"{word!r} is not in the built extension: run bash hub/labextension/build.sh"


# --- raw errors: the ladder of where they were raised, with the lesson's sizes ------------------

B, T, C, V = SIZES.batch_size, SIZES.block_size, SIZES.n_embd, SIZES.vocab_size

# (lesson, answer, line changed, into, the run that raises (the record's prefix the judge reads),
#  where it was raised, the mistake the judge names, the check whose verdict names it)
RAISING = [
    ("head", "01_right_reference", "self.key = nn.Linear(n_embd,", "self.key = nn.Linear(n_embed,",
     "init_", "init", "undefined_size", "shapes"),
    ("head", "01_right_reference", "k.shape[-1] ** -0.5", "1 / math.sqrt(k.shape[-1])",
     "", "forward", "module_not_imported", "shapes"),
    ("multihead", "01_right_comprehension", "self.proj = nn.Linear(n_embd, n_embd)",
     "self.proj = nn.Linear(n_embd, n_embd)\n        self.proj.weight.T_ = self.scale",
     "init_", "init", "attribute_not_set", "shapes"),
    ("multihead", "01_right_comprehension", "return self.proj(", "return proj(", "", "forward", "self_forgotten", "shapes"),
    ("block", "01_right_reference", "x = x + self.sa(self.ln1(x))", "x = x + self.sa(self.ln1(x)) @ x",
     "", "forward", "matmul_shapes", "shapes"),
    ("gpt", "01_right_reference", "self.ln_f = nn.LayerNorm(n_embd)", "self.ln_f = nn.LayerNorm(n_embed)",
     "init_", "init", "undefined_size", "shapes"),
    ("gpt", "01_right_reference", "B, T = idx.shape", "B, T = idx.shape\n        T = T + undefined_offset",
     "", "forward", "undefined_name", "shapes"),
    ("gpt", "01_right_reference", "targets.view(B * T)", "targets.view(B * T + 1)",
     "train_", "loss", "wrong_view", "loss"),
    ("gpt", "01_right_reference", "probs = F.softmax(logits[:, -1, :], dim=-1)",
     "probs = F.softmax(last_logits, dim=-1)", "gen1_", "generate", "undefined_name", "generate"),
]


@pytest.mark.parametrize("case", RAISING, ids=[f"{c[0]}-{c[5]}-{c[6]}" for c in RAISING])
def test_a_raw_error_gets_the_ladder_of_where_it_was_raised(case):
    """A wrong answer run through the lesson's real extract: the run that raised decides where
    (hints.place, on the record's data), the judge names the mistake, and the ladder for that
    place is the one shown."""
    lesson, name, old, new, prefix, where, mistake, check = case
    code = catalogue.answer(lesson, name).code
    assert code.count(old) == 1, old
    rec = notebooks.record(lesson, code.replace(old, new), 2024)
    assert rec.get(prefix + "error"), {k: v for k, v in rec.items() if k.endswith("error")}
    assert hints.place(rec, prefix) == where
    assert raw_mistake(rec, prefix) == mistake
    assert load_lesson(lesson).verdict(check, rec, notebooks.solution_record(lesson, 2024)).mistake == mistake
    ladder = hints.ladder(lesson, mistake, where)
    others = {hints.ladder(lesson, mistake, p) for p in hints.PLACES if p != where}
    if "{method}" in "".join(hints.raw_ladders(hints.SHARED)[mistake][None]):   # a ladder naming the method
        assert hints.PLACE_WORDS[where] in ladder[1], ladder
        assert ladder not in others


def test_where_a_forward_with_targets_raised_is_decided_on_which_runs_raised():
    """The gpt extract's run with targets ("train_") raises in the loss when the run without
    targets went through, and in forward itself when that one raised too."""
    code = catalogue.answer("gpt", "01_right_reference").code
    in_forward = notebooks.record("gpt", code.replace("B, T = idx.shape", "B, T = idx.shape\n        T = T + oops"), 2024)
    in_loss = notebooks.record("gpt", code.replace("targets.view(B * T)", "oops"), 2024)
    assert in_forward.get("train_error") and in_loss.get("train_error") and not in_loss.get("error")
    assert (hints.place(in_forward, "train_"), hints.place(in_loss, "train_")) == ("forward", "loss")
    assert (hints.place(in_loss, "init_"), hints.place(in_loss, "gen1_"), hints.place(in_loss, "short_")) == \
        ("init", "generate", "forward")


def test_the_error_ladders_name_each_lesson_s_sizes_for_each_place():
    """forward_error's rung 2 says what the failing method gets: the GPT's forward letter ids
    [B, T], generate growing windows cropped to block_size, the loss the logits and targets
    flattened; the other lessons' forward [B, T, C]. The numbers come from the course's config."""
    shape = f"[B, T, C] = [{B}, {T}, {C}]"
    for lesson in ("head", "multihead", "block"):
        assert shape in hints.ladder(lesson, "forward_error")[1]
    gpt = {p: hints.ladder("gpt", "forward_error", p)[1] for p in (None, "generate", "loss")}
    assert f"idx, [B, T] = [{B}, {T}] letter ids" in gpt[None] and shape not in gpt[None]
    assert f"block_size = {T}" in gpt["generate"] and shape not in gpt["generate"]
    assert f"[B * T, vocab_size] = [{B * T}, {V}]" in gpt["loss"]
    assert len({hints.ladder("gpt", "forward_error", p) for p in (None, "generate", "loss")}) == 3


def test_the_sizes_come_from_the_config_not_the_text(monkeypatch):
    monkeypatch.setattr(hints, "SIZES", CourseConfig(batch_size=5, block_size=3, n_embd=12, head_size=6, n_heads=2))
    assert "[B, T, C] = [5, 3, 12]" in hints.ladder("head", "forward_error")[1]
    assert "[B, T] = [5, 3]" in hints.ladder("gpt", "forward_error")[1]


@pytest.mark.parametrize("lesson", LESSONS)
def test_every_size_a_rung_names_is_filled_in(lesson):
    for mistake in hints.raw_ladders(lesson):
        for where in (None,) + hints.PLACES:
            for rung in hints.ladder(lesson, mistake, where):
                assert not re.search(r"\{[a-z_]+\}", rung), (mistake, where, rung)


def test_a_module_name_error_says_to_import_it():
    """NameError on math (or torch, F, nn) is module_not_imported, whose ladder says to import it,
    not undefined_name's "give the variable its value earlier"."""
    for name in ("math", "torch", "F", "nn"):
        rec = {"error": f"NameError: name '{name}' is not defined", "exception": "NameError", "error_name": name}
        assert raw_mistake(rec, "") == "module_not_imported"
    idea, where, nudge = hints.ladder("head", "module_not_imported")
    assert "`import math`" in nudge and "import" in idea
    assert "earlier" not in nudge and "earlier" in hints.ladder("head", "undefined_name")[2]


def test_a_failing_check_s_hint_is_the_ladder_of_where_the_error_was_raised(fresh_tutor):
    """The live route: the gpt judge's verdict carries where its raw error was raised, and the
    check's hint (rung 1 in the message, the next from checks.hint) is that place's ladder."""
    code = catalogue.answer("gpt", "01_right_reference").code
    old = "probs = F.softmax(logits[:, -1, :], dim=-1)"
    assert code.count(old) == 1
    _, raised = notebooks.run_checks("gpt", code.replace(old, "probs = F.softmax(logits[:, -1, :, 0], dim=-1)"))
    failed = raised["generate"]
    ladder = hints.ladder("gpt", "forward_error", "generate")
    assert ladder != hints.ladder("gpt", "forward_error")
    assert failed.hint.startswith(tutor.rung_text(ladder, 1)), failed.hint
    assert tutor.next_rung("gpt", "generate") == tutor.rung_text(ladder, 2)
