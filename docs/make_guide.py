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

The catalogues: tests/catalogue/<lesson>/, one answer per file with its `# expect:` and `# why:`
(read by tinygpt_course.testing.catalogue).
"""
import argparse
import contextlib
import io
import json
import math
import re
import sys

from tinygpt_course.testing import catalogue, notebooks
from tinygpt_course.testing.course import REPO

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
    rows = re.findall(r"^\| (\d) \| (\w+) \| \[`[^`]+`\]\([^)]+\) \| `(\w+)` \| (.*) \|$", (REPO / "notebooks" / "START.md").read_text(), re.M)
    return [(lesson, cls, teaches) for _, lesson, cls, teaches in rows]


def gives_away(lessons):
    """[(lesson, [the earlier lessons whose class its set-up gives away])], in the course's order
    (tinygpt-release's own reading of the set-up cells)."""
    from tinygpt_course.classroom.release import given_away, setup_code
    return [(lesson, [earlier for earlier, _ in given_away(setup_code(REPO, lesson), lesson)])
            for lesson, _, _ in lessons]


def wrong_answers(lesson):
    """(what the answer does, its code, its mistake id) for the lesson's catalogue mistakes that run as plain
    Python (crashes, tampering and notebook surgery are the grading pipeline's business)."""
    return [(a.why, a.code, a.mistake) for a in catalogue.answers(lesson) if a.plain and a.sort == "mistake"]


def feedback(lesson, answer):
    """{check id: (passed, the message the learner reads)}, as the learner's kernel judges it."""
    from tinygpt_course.checks import notebook
    from tinygpt_course.checks.protocol import load_lesson
    les = load_lesson(lesson)
    ns = notebooks.namespace(lesson, answer)
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
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
        pts = notebooks.points(lesson)
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
        pts = notebooks.points(lesson)
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
                "(`✗ check '...': 0 of N points`, then the message). The mistake id names the cause, the same "
                "in every lesson (`softmax_axis`, `dropout_on`, ...); every verdict names one (Verdict.mistake).", ""]
        for what, answer, mistake in wrong_answers(lesson):
            fb = feedback(lesson, answer)
            got = sum(p for c, p in pts.items() if fb[c][0])
            out.append(f"* **{what}** (mistake `{mistake}`, {got} of {sum(pts.values())} points)")
            for c, (passed, message) in fb.items():
                if not passed:
                    out.append(f"  * `{c}` ({pts[c]} point{'s' if pts[c] > 1 else ''}): {message}")
        out.append("")
    from tinygpt_course.grading.verdicts import KEY
    from tinygpt_course.report.collect import LESSONS
    from tinygpt_course.report.page import NO_LADDER
    from tinygpt_course.grading.integrity import KINDS
    ops = OPERATIONS
    for name, value in service_figures(measured["service"]).items():
        ops = ops.replace("{" + name + "}", value)
    ops = ops.replace("{METADATA_KEY}", KEY).replace("{NO_LADDER}", NO_LADDER).replace(
        "{INTEGRITY_CHANGED}", KINDS["cell_changed"]).replace(
        "{LESSONS}", ", ".join(LESSONS)).replace("{GIVES_AWAY}", "; ".join(
            f"{lesson}'s holds the answer of {' and '.join(earlier)}" for lesson, earlier in gives_away(lessons) if earlier))
    out += [line.rstrip() for line in ops.strip("\n").splitlines()]
    return "\n".join(out) + "\n"


def service_figures(m):
    """The placeholders of OPERATIONS's grading-service part: the service's defaults (its traitlets,
    the one place they are set) and its measured cost (docs/measured.json "service")."""
    from tinygpt_course.service.runner import GradingService
    traits = GradingService.class_traits()
    fmt = {"PER_MINUTE": "per_minute", "PER_DAY": "per_day", "MAX_ATTEMPTS": "max_attempts"}
    out = {k: str(traits[t].default_value) for k, t in fmt.items()}
    out["POLLS"] = f"{1 / traits['poll_interval'].default_value:g}"
    out["TIMEOUT"] = f"{traits['submission_timeout'].default_value:g}"
    one, burst, idle = m["one"], m["burst"], m["idle"]
    out.update({
        "SVC_DATE": m["date"], "SVC_CORES": str(m["cores"]), "SVC_JOBS": str(m["jobs"]),
        "SVC_LOAD": f"{m['load'][0]:.1f} to {m['load'][1]:.1f}",
        "SVC_IDLE_MEM": f"{idle['memory_gb']:.2f}", "SVC_IDLE_CPU": f"{idle['cpu_s_per_hour']:.0f}",
        "SVC_ONE_N": str(one["learners"]), "SVC_ONE_S": f"{one['submit_to_feedback_s']:.1f}",
        "SVC_ONE_STOCK_S": f"{one['stock_s']:.1f}", "SVC_ONE_CPU": f"{one['cpu_s']:.2f}",
        "SVC_ONE_STOCK_CPU": f"{one['stock_cpu_s']:.2f}", "SVC_BURST_N": str(burst["learners"]),
        "SVC_BURST_SPREAD": f"{burst['spread_s']:g}",
        "SVC_BURST_S": f"{burst['last_feedback_after_last_submit_s']:.1f}",
        "SVC_BURST_STOCK_S": f"{burst['stock_s']:.0f}", "SVC_BURST_MEM": f"{burst['peak_memory_gb']:.2f}",
        "SVC_BURST_STOCK_MEM": f"{burst['stock_peak_memory_gb']:.2f}",
    })
    return out


OPERATIONS = """
## Releasing, grading and exporting

Where you run the steps below depends on where the course lives:

* **on the classroom hub** (hub/README.md): in a terminal of your JupyterLab on the hub, in your
  course folder, `cd ~/tinygpt`. The course's environment is already on your `PATH` (nothing to
  activate), and the configuration is your own copy, `~/tinygpt/nbgrader_config.py`, made at your
  first log-in: a line this guide adds to `nbgrader_config.py` (the Canvas export, say) goes there;
* **from the repository** (your own machine): at the repository's root with the course's
  environment active (`source .venv/bin/activate`; nbgrader calls `alembic` by name, so
  `.venv/bin` must be on `PATH`); `nbgrader_config.py` there configures every step.

**Release.** `release/` holds the student notebooks, generated from `source/` and committed. After
changing a lesson, regenerate it and commit both:

```bash
nbgrader generate_assignment gpt --force      # source/gpt/ -> release/gpt/ (solutions and hidden checks cut)
```

Hand out `release/<lesson>/<lesson>.ipynb` (on the classroom hub: the formgrader's *Release* button
or `nbgrader release_assignment <lesson>`; see hub/README.md).

**Release in order, after the previous deadline.** A lesson's set-up cells give learners, working,
the classes of the lessons before it, so releasing a lesson hands out their answers:
{GIVES_AWAY}. Release each lesson only once the lessons it gives away are past their deadline
(and collected): give each lesson a deadline in the gradebook (`nbgrader db assignment add head
--duedate="2027-01-15 18:00:00"`, or the formgrader's *Manage Assignments*) and release with
`tinygpt-release <lesson>`, which runs `nbgrader release_assignment <lesson>` and refuses (exit 3)
while a lesson it gives away has no deadline or one not passed (`--force` releases anyway).

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

**Grading on submit (the grading service).** On the classroom hub the course can grade each
submission as it arrives and hand its learner the score and the feedback within seconds, with no
command of yours: a grading service beside the hub, run as you (hub/README.md, *Grading on
submit*). Turn it on for each assignment in your `~/tinygpt/nbgrader_config.py`:

```python
c.GradingService.assignments = ["head", "multihead"]   # graded on submit, feedback released to the learner
c.GradingService.received_only = ["gpt"]               # an exam: graded, the learner sees "received" only
```

then, as root, set `TINYGPT_GRADING_SERVICE=on` in `/etc/tinygpt-hub.env` and `systemctl restart
tinygpt-hub`. A learner who presses *Submit* in the Assignment List sees, in the **Grading** panel
on the right of JupyterLab, their submission queued (and its place), then being graded, then the
score of each check; the feedback is released to them alone (`Fetch Feedback`). For an exam they
see "received", and the scores wait for your `nbgrader release_feedback`. The grades are the same,
cell by cell, as `tinygpt-grade-class` gives for the same submissions, and they land in the same
gradebook: the formgrader, `nbgrader export` and `tinygpt-class-report` see them at any time, and
your batch commands still work beside the service (a newer submission of the same learner replaces
the graded one, as `nbgrader collect` does).

Fair under load: each learner gets at most {PER_MINUTE} grading a minute and {PER_DAY} a day
(`c.GradingService.per_minute`, `per_day`); a submission over that waits (the panel says until
when; or, with `c.GradingService.refuse_over_limit = True`, is refused, and the panel says when to
submit again) while the others go on. A submission that crashes its grading or runs past
`c.GradingService.submission_timeout` ({TIMEOUT} s) is tried again, then, after {MAX_ATTEMPTS}
tries, flagged for you with the reason; it costs only its own learner's slot. The queue is a file
in your course folder (`grading_service.sqlite`): a restart of the service or of the hub loses no
submission and grades none twice. See it at `https://<hub>/services/grading/` or with

```bash
tinygpt-grading-service status --course-dir ~/tinygpt   # what waits, the last grades, the flagged ones and why
```

What it costs the hub (`python docs/measure.py --only service`, bench/grading_service.py, on
{SVC_DATE} on a {SVC_CORES}-core machine, {SVC_JOBS} gradings at once, load average {SVC_LOAD}):

| | the service | stock nbgrader, by hand |
|---|---|---|
| memory, left alone (warm: workers, kernel template) | {SVC_IDLE_MEM} GB | none |
| CPU, left alone (it looks at the exchange's inbound folder {POLLS} times a second) | {SVC_IDLE_CPU} s an hour | none |
| one submission: `nbgrader submit` returned to feedback fetchable (median of {SVC_ONE_N}) | {SVC_ONE_S} s | {SVC_ONE_STOCK_S} s (collect, autograde, generate_feedback, release_feedback for that learner, at once) |
| CPU per submission | {SVC_ONE_CPU} s | {SVC_ONE_STOCK_CPU} s |
| {SVC_BURST_N} submissions within {SVC_BURST_SPREAD} s: last feedback after the last submit | {SVC_BURST_S} s | {SVC_BURST_STOCK_S} s (the four commands for the class) |
| peak memory while grading that burst | {SVC_BURST_MEM} GB | {SVC_BURST_STOCK_MEM} GB (autograde) |

Count that memory out of what the learners' servers get (hub/README.md, *How many learners fit*); fewer
gradings at once (`c.GradingService.jobs`) take less of it and make a burst wait longer.

**Tampering you can see.** A learner who deleted a test cell or edited a read-only one gets it
back from `source/` before grading (nbgrader only logs that); the course keeps it as data in the
autograded notebook, and `tinygpt-grade-class` ends with one line per such learner
(`dee: cell deleted: causal; cell changed: shapes`), with the checks the independent re-run did not
confirm and the notebooks that were not valid JSON. The class report's *Flagged and ungraded
submissions* table says the same, and so does the formgrader: the gradebook comment of the cell
put back (an answer cell), or of the answer cell for a test or read-only cell, which nbgrader
keeps no comment for, reads `INTEGRITY: {INTEGRITY_CHANGED}: shapes`.

A submission is taken as data: collect copies only regular files and folders (never following a
link, at most `c.SubmissionTree.max_depth` folders deep and `max_entries` entries, within
nbgrader's `max_file_size` and `max_dir_size`), every file the student's. A submission with
anything else (a symlink to your `source/` or gradebook, a FIFO, a deep chain of folders) stays in
the exchange's inbound, collect names the student and the thing refused and collects their
newest acceptable submission and the rest of the class. The same check runs on `submitted/`
before grading (an LMS zip unpacked there): `tinygpt-grade-class` flags that student and grades
the others; `nbgrader autograde` moves the folder aside to `submitted/<student>/.refused-gpt-<time>`.
`release_feedback` hands out only the feedback of the lesson's own notebooks.

**See what the class got wrong.** After autograde (the formgrader's button, `nbgrader autograde`
or `tinygpt-grade-class`), from the same root:

```bash
tinygpt-class-report gpt                      # -> reports/gpt.html (one file: its plots are inlined)
tinygpt-class-report gpt -o /tmp/gpt.html     # elsewhere; --course-dir DIR for another course root
```

Open the page in any browser; it runs no script (its Content-Security-Policy forbids them) and
fetches nothing. It reads nbgrader's gradebook (scores; the FLAGGED comments) and the verdict
grading kept for each check in the autograded notebook's metadata (`{METADATA_KEY}`, written by the
`RecordVerdicts` step from the independent re-run, never from what the learner's kernel printed).
Only the shared steps' mistakes, such as `dropout_on`, come with a one-line description: a mistake
the lesson's checks name is explained by its hint ladder. The page shows, top to bottom:

* the score distribution and each check's pass rate (full points in the gradebook), plotted and
  as a table;
* who scored what: one row per graded learner, fewest points first, with their name, each check's
  points, the hint rungs they opened in the notebook's tutor, and a link to their submission in the
  formgrader (`--formgrader URL` when it is not this server's); the same rows, sortable in any
  spreadsheet, in `reports/<lesson>-learners.csv` beside the page;
* each mistake a failed check named, with how many learners made it, who (with the failed checks
  and the message of the first), and its hint ladder: the idea, where it goes wrong, the nudge
  (or "{NO_LADDER}" for a mistake without one). A learner counts once per mistake; one wrong
  answer may fail several checks, and each check's verdict names what it sees, so a learner can
  be listed under two mistakes;
* flagged submissions (a check passed in the learner's kernel but not in the re-run; a notebook
  that was not valid JSON, graded as the release), ungraded ones (files owned by another user,
  no notebook, nbgrader failed: see its log) with the reason, and the learners of the gradebook
  who submitted nothing;
* across the lessons graded so far ({LESSONS}), a learner x mistake table: a cell names the lessons
  in which that learner made that mistake, orange and bold when there are two or more (a
  misconception that persists: the softmax axis from head to gpt, say), pale yellow for one, as
  the legend above the table shows; the persisting ones are listed above it.

A notebook graded before `RecordVerdicts` was in the pipeline has no verdicts: the report says so
(flagged, "no verdicts recorded"); `nbgrader autograde <lesson> --force` regrades it.

**Export the grades for the LMS.** Add one line to `nbgrader_config.py` (on the hub: your own,
`~/tinygpt/nbgrader_config.py`):

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
