"""Write docs/teachers-guide.md from what the course already holds, so the guide cannot drift:

- the lessons, their order and what each teaches: notebooks/START.md's table;
- each lesson's checks and points: its source notebook's test cells;
- the typical mistakes and the exact feedback each gets: every wrong answer of the lesson's
  catalogue run through the lesson's own checks (extract with the notebook's seed, judged against
  the stored solution record, as the learner's kernel does), message by message;
- the time estimates: docs/measured.json (docs/measure.py) and the rates stated in the guide;
- learning objectives: OBJECTIVES below, the one hand-written part.

    python docs/make_guide.py            # rewrite docs/teachers-guide.md
    python docs/make_guide.py --check    # exit 1 if it is not current (tests/test_guide.py)

The catalogues: tests/catalogue/ (multihead) and tests/catalogue_gpt/ (gpt), one answer per file
with `# expect:` and `# why:`; for head and block, the WRONG list of tests/test_lessons_head_block.py.
"""
import argparse
import contextlib
import importlib
import io
import json
import math
import re
import sys
from pathlib import Path

import nbformat

REPO = Path(__file__).resolve().parents[1]
TESTS = REPO / "tests"
GUIDE = REPO / "docs" / "teachers-guide.md"
MEASURED = REPO / "docs" / "measured.json"

OBJECTIVES = {
    "head": [
        "explain self-attention as a weighted average of earlier positions' values, with weights from query-key scores",
        "scale the scores by 1/sqrt(head size) and say why: without it the softmax saturates",
        "mask the future with a lower-triangular matrix and check it by changing the last letter",
        "read an attention-weight row: positive, adding up to 1, zero on later positions",
    ],
    "multihead": [
        "run several heads side by side and join their outputs with torch.cat along the last dimension",
        "register layers with nn.ModuleList so that parameters() and the optimiser see them",
        "use a projection to mix what the heads found, and count the weights it adds",
    ],
    "block": [
        "build a pre-norm transformer block: x + sa(ln1(x)), then x + ffwd(ln2(x))",
        "explain residual connections and what a layer norm does to each position's numbers",
        "build the feed-forward layer with nn.Sequential and say why it needs the ReLU",
    ],
    "gpt": [
        "assemble a GPT: token and position embeddings, a stack of blocks, a final layer norm, an output layer",
        "compute the next-letter loss with F.cross_entropy on flattened logits and targets, and read ln 27 as the untrained loss",
        "write generate(): crop the context to the window, softmax the last position's scores, draw with torch.multinomial and a generator",
        "train the model, read a loss curve and a held-out loss, and tell new names from memorised ones",
    ],
}
READ_WPM, MIN_PER_LINE, CHECKING_MIN = 100, 3, 10   # the rates the estimates assume (stated in the guide)


def lessons_in_order():
    """(lesson, what it teaches) from START.md's table, in the course's order."""
    rows = re.findall(r"^\| (\d) \| (\w+) \| `[^`]+` \| `(\w+)` \| (.*) \|$", (REPO / "notebooks" / "START.md").read_text(), re.M)
    return [(lesson, cls, teaches) for _, lesson, cls, teaches in rows]


def source(lesson):
    return REPO / "source" / lesson / f"{lesson}.ipynb"


def points(lesson):
    """{check id: points} from the source notebook's test cells, in notebook order."""
    nb = nbformat.read(source(lesson), 4)
    return {c.metadata.nbgrader["grade_id"]: c.metadata.nbgrader["points"] for c in nb.cells
            if c.metadata.get("nbgrader", {}).get("grade") and not c.metadata.nbgrader.get("solution")}


def parse_catalogue(path):
    text = path.read_text()
    head = dict(re.findall(r"^# (expect|why|notebook): (.*)$", text, re.M))
    answer = "\n".join(ln for ln in text.splitlines() if not re.match(r"# (expect|why|notebook):", ln))
    return head["why"], head.get("notebook"), answer.strip("\n")


def wrong_answers(lesson):
    """(what the answer does, its code) for the lesson's catalogue of wrong answers that run as
    plain Python (crashes, tampering and notebook surgery are the grading pipeline's business)."""
    folder = {"multihead": TESTS / "catalogue", "gpt": TESTS / "catalogue_gpt"}.get(lesson)
    if folder is not None:
        out = []
        for path in sorted(folder.glob("*.py")):
            why, transform, answer = parse_catalogue(path)
            if transform or why.startswith(("right", "crash", "tampering", "attack", "spoof")):
                continue
            out.append((why, answer))
        return out
    sys.path.insert(0, str(TESTS))
    try:
        hb = importlib.import_module("test_lessons_head_block")
    finally:
        sys.path.remove(str(TESTS))
    answers = {}   # one entry per distinct answer (WRONG lists some twice, for two checks)
    for lsn, what, old, new, *_ in hb.WRONG:
        if lsn == lesson:
            answers.setdefault(hb.wrong_answer(lesson, old, new), what)
    return [(what, answer) for answer, what in answers.items()]


def feedback(lesson, answer):
    """{check id: (passed, the message the learner reads)}, as the learner's kernel judges it."""
    from tinygpt_course.checks import notebook
    from tinygpt_course.checks.protocol import load_lesson
    from tinygpt_course.grading.lesson import read_lesson
    les = load_lesson(lesson)
    ns = {"__name__": "__lesson__"}
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        for code in read_lesson(source(lesson)).setup:
            exec(code, ns)
        try:
            exec(answer, ns)
        except Exception:
            pass
        verdicts = {c: notebook.verdict(les, c, ns) for c in les.checks}
    return {c: (v.passed, f"[{les.checks[c]}] {v.message}") for c, v in verdicts.items()}


def cell(text):
    """text in a markdown table cell: its | escaped."""
    return text.replace("|", "\\|")


def estimate(m):
    """Minutes: reading + writing + running (twice) + checking, rounded up to 5."""
    minutes = m["markdown_words"] / READ_WPM + MIN_PER_LINE * m["answer_lines"] + 2 * m["run_s"] / 60 + CHECKING_MIN
    return int(5 * math.ceil(minutes / 5))


def render():
    measured = json.loads(MEASURED.read_text())
    lessons = lessons_in_order()
    out = ["<!-- generated by docs/make_guide.py from START.md, the lessons, their catalogues and "
           "docs/measured.json: do not edit by hand -->", "# Teacher's guide", "",
           "Four autograded lessons build a character-level GPT on first names, one class per lesson. "
           "This guide gives, for each lesson, what learners should be able to do afterwards, how long it "
           "takes, the mistakes learners typically make with the exact feedback each one gets, and then "
           "how to release, grade and export the grades.", "",
           "| # | lesson | learners write | checks (points) | estimated time |", "|---|---|---|---|---|"]
    for i, (lesson, cls, _) in enumerate(lessons, 1):
        pts = points(lesson)
        out.append(f"| {i} | {lesson} | `{cls}` | {len(pts)} ({sum(pts.values())}) | "
                   f"{estimate(measured['lessons'][lesson])} min |")
    out += ["", "## Where the time estimates come from", "",
            "No learner was timed. Each estimate adds up four parts, from figures measured by "
            "`python docs/measure.py` (figures in `docs/measured.json`, made on "
            f"{measured['machine']['date']} on a {measured['machine']['cores']}-core machine):", "",
            f"* reading: the words of the lesson's text (code blocks left out), at {READ_WPM} words a minute "
            "(technical text read closely);",
            f"* writing: the lines of the answer cell's solution (comments left out), at {MIN_PER_LINE} minutes a line;",
            "* running: the lesson's notebook run headless from top to bottom (training included), counted twice;",
            f"* checking: {CHECKING_MIN} minutes for the printout, the visible checks and one fix.", "",
            "| lesson | words | answer lines | one run of the notebook | of which training | estimate |",
            "|---|---|---|---|---|---|"]
    for lesson, _, _ in lessons:
        m = measured["lessons"][lesson]
        train = f"{m['training_wall_s']:.0f} s ({m['training_cpu_s']:.0f} CPU s)" if "training_wall_s" in m else "none"
        out.append(f"| {lesson} | {m['markdown_words']} | {m['answer_lines']} | {m['run_s']:.0f} s | {train} | "
                   f"{estimate(m)} min |")
    g = measured["grading"]
    out += ["", "Grading cost, measured the same way (`nbgrader autograde` with this course's configuration, "
            f"{g['submissions_per_run']} solution submissions per lesson and run, the lessons in turn over "
            f"{g['rounds']} rounds, the order reversed every other round; median wall time per submission, "
            "and its ratio to multihead's; the machine was shared with other work, so take the ratios, "
            "not the seconds):", "",
            "| lesson | seconds per submission | ratio to multihead |", "|---|---|---|"]
    for lesson, _, _ in lessons:
        out.append(f"| {lesson} | {g['per_submission'][lesson]['wall_s']:.1f} | "
                   f"{g['ratio_to_multihead'][lesson]['wall_s']:.2f} |")
    out += ["", "The gpt lesson's training cell trains nothing (0 steps instead of 6000, no optimiser) "
            "when nbgrader runs the notebook (`NBGRADER_EXECUTION` is set), and its checks use fixed "
            "weights, never a trained model: grading does not train.", ""]
    for i, (lesson, cls, teaches) in enumerate(lessons, 1):
        pts = points(lesson)
        from tinygpt_course.checks.protocol import load_lesson
        les = load_lesson(lesson)
        out += [f"## Lesson {i}: {lesson}", "", f"Learners complete `{cls}` in `release/{lesson}/{lesson}.ipynb`. "
                + teaches, "", "**Learning objectives.** After the lesson a learner can:", ""]
        out += [f"* {o};" if k < len(OBJECTIVES[lesson]) - 1 else f"* {o}." for k, o in enumerate(OBJECTIVES[lesson])]
        out += ["", "**Checks.**", "", "| check | printout lines | points |", "|---|---|---|"]
        out += [f"| `{c}` | {cell(les.checks[c])} | {p} |" for c, p in pts.items()]
        out += ["", "**Typical mistakes and the feedback they get.** Each one is a wrong answer from the "
                "lesson's catalogue, run through the lesson's checks. The learner reads each message in the "
                "notebook (`Check failed: ...`) and in the feedback nbgrader sends back "
                "(`✗ check '...': 0 of N points`, then the message).", ""]
        for what, answer in wrong_answers(lesson):
            fb = feedback(lesson, answer)
            if all(passed for passed, _ in fb.values()):
                continue          # a right answer (the catalogue's reference, say): no mistake to show
            got = sum(p for c, p in pts.items() if fb[c][0])
            out.append(f"* **{what}** ({got} of {sum(pts.values())} points)")
            for c, (passed, message) in fb.items():
                if not passed:
                    out.append(f"  * `{c}` ({pts[c]} point{'s' if pts[c] > 1 else ''}): {message}")
        out.append("")
    out += [line.rstrip() for line in OPERATIONS.strip("\n").splitlines()]
    return "\n".join(out) + "\n"


OPERATIONS = """
## Releasing, grading and exporting

Run everything from the repository's root with the course's environment active
(`source .venv/bin/activate`; nbgrader calls `alembic` by name, so `.venv/bin` must be on `PATH`).
`nbgrader_config.py` there configures every step below.

**Release.** `release/` holds the student notebooks, generated from `source/` and committed. After
changing a lesson, regenerate it and commit both:

```bash
nbgrader generate_assignment gpt --force      # source/gpt/ -> release/gpt/ (solutions and hidden checks cut)
```

Hand out `release/<lesson>/<lesson>.ipynb` (on the classroom hub: the formgrader's *Release* button
or `nbgrader release_assignment <lesson>`; see hub/README.md).

**Collect and grade.**

```bash
nbgrader collect gpt                          # from the exchange, on the hub
nbgrader autograde gpt                        # or: tinygpt-grade-class gpt (all cores, resumable)
nbgrader generate_feedback gpt                # feedback/<student>/gpt/gpt.html, the messages above
nbgrader release_feedback gpt                 # on the hub: learners fetch it
```

Grading re-runs each answer in a sandbox with weights and a seed of its own and judges it
against the lesson's solution; a check the learner's kernel passed but the re-run did not confirm
loses its points and is flagged in the formgrader. The formgrader shows the same scores.

**Export the grades for the LMS.** Add one line to `nbgrader_config.py`:

```python
c.ExportApp.plugin_class = "tinygpt_course.export.CanvasCsvExport"
```

then

```bash
nbgrader export                               # canvas_grades.csv: one row per student, one column per lesson
nbgrader export --to grades.csv --assignment gpt   # one lesson, another file name
```

The file has Canvas's gradebook columns (`Student`, `ID`, `SIS User ID`, `SIS Login ID`,
`Section`, then one column per assignment) and a `Points Possible` row. Students are matched by
their nbgrader id, written as `SIS User ID` and `SIS Login ID`: use the learners' LMS logins as
nbgrader ids. In Canvas: *Grades > Import*, choose the file, check the preview. Without a
matching Canvas assignment a column creates one; to fill an existing one, map it:
`c.CanvasCsvExport.columns = {"gpt": "Lesson 4 (1234)"}` (the Canvas column header, with its id).
A lesson a student never submitted counts 0, as in nbgrader's own CSV; with
`c.CanvasCsvExport.missing = ""` it is left empty and Canvas keeps whatever grade it had.
Moodle's *Import > CSV file* reads it too: map `SIS Login ID` to the username and each lesson's
column to its grade item.
"""


def main(argv=None):
    p = argparse.ArgumentParser(description="Write docs/teachers-guide.md (generated).")
    p.add_argument("--check", action="store_true", help="exit 1 if the committed guide is not current")
    args = p.parse_args(argv)
    text = render()
    if args.check:
        if GUIDE.read_text() != text:
            print(f"{GUIDE} is not current: run python docs/make_guide.py")
            return 1
        return 0
    GUIDE.write_text(text)
    print(GUIDE)
    return 0


if __name__ == "__main__":
    sys.exit(main())
