"""The class report's parts, fast: RecordVerdicts keeps the re-run's verdicts in the notebook
(and only its own), and the page built from a small gradebook counts each mistake, shows its
ladder or says there is none, gives every flagged or ungraded submission its reason, marks a
mistake that persists across lessons, and escapes every text a learner could have shaped.
tests/test_class_report.py builds it from a class graded by the real nbgrader and opens it in
Chromium."""
import json
import os
import re
import subprocess
import sys
from types import SimpleNamespace

import nbformat
import pytest
from traitlets.config import Config

from tinygpt_course.checks.protocol import Kind, Verdict
from tinygpt_course.grading.verdicts import KEY, RecordVerdicts, read_verdicts
from tinygpt_course.report import main, write_report
from tinygpt_course.report import page as page_module
from tinygpt_course.report.collect import course_paths, lesson_results

CHECKS = {"shapes": 1.0, "causal": 2.0, "values": 2.0}
HOSTILE = "<img src=x onerror=alert(1)>"            # a student id a learner chose
HOSTILE_ERROR = '</small><script>alert("pwned")</script> & co'   # a quoted error they shaped
SPOOFER_UID = 4242


def cells(lesson):
    answer = nbformat.v4.new_code_cell("class Head: ...", metadata={"nbgrader": {
        "grade": False, "solution": True, "locked": False, "grade_id": "answer", "schema_version": 3}})
    tests = [nbformat.v4.new_code_cell(f"# hidden check {c}", metadata={"nbgrader": {
        "grade": True, "solution": False, "locked": True, "grade_id": c, "points": p, "schema_version": 3}})
        for c, p in CHECKS.items()]
    for t in tests:
        t.outputs = [nbformat.v4.new_output("stream", name="stdout", text=f"{t.metadata.nbgrader.grade_id} ran\n")]
    return [answer] + tests


def graded_notebook(root, student, lesson, verdicts, flagged=(), planted=None):
    """An autograded notebook as RecordVerdicts leaves it; `planted`: metadata the learner's own
    notebook held under the step's key."""
    nb = nbformat.v4.new_notebook(cells=cells(lesson))
    if planted is not None:
        nb.metadata[KEY] = planted
        for cell in nb.cells:
            cell.metadata[KEY] = {"check": cell.metadata.nbgrader.grade_id, "passed": True, "kind": "passed"}
    config = Config()
    config.CourseDirectory.root = str(root)
    resources = {"nbgrader": {"student": student, "assignment": lesson, "notebook": lesson},
                 "tinygpt": {"source": SimpleNamespace(name=lesson), "verdicts": verdicts, "flagged": list(flagged)}}
    nb, _ = RecordVerdicts(config=config).preprocess(nb, resources)
    path = root / "autograded" / student / lesson / f"{lesson}.ipynb"
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, path)
    return nb


def verdicts(**failed):
    """Every check passed but those given as check=(kind, mistake, message)."""
    out = {c: Verdict.ok(f"{c} ok") for c in CHECKS}
    for c, (kind, mistake, message) in failed.items():
        out[c] = Verdict.fail(kind, message, mistake)
    return out


def add_lesson(gb, lesson):
    gb.add_assignment(lesson)
    gb.add_notebook(lesson, lesson)
    gb.add_solution_cell("answer", lesson, lesson)
    for c, p in CHECKS.items():
        gb.add_grade_cell(c, lesson, lesson, max_score=p, cell_type="code")


def grade(gb, lesson, student, vs):
    gb.add_submission(lesson, student)
    for c, v in vs.items():
        g = gb.find_grade(c, lesson, lesson, student)
        g.auto_score = CHECKS[c] if v.passed else 0.0
    gb.db.commit()


@pytest.fixture
def klass(tmp_path, empty_gradebook):
    """A class in tmp_path: head and multihead graded (verdicts as RecordVerdicts keeps them)."""
    from nbgrader.api import Gradebook
    root = tmp_path
    softmax = (Kind.WRONG_VALUE, "softmax_axis", HOSTILE_ERROR)
    with Gradebook(empty_gradebook, "tinygpt") as gb:
        for lesson in ("head", "multihead"):
            add_lesson(gb, lesson)
        for student, first in (("ada", "Ada"), (HOSTILE, "<b>Bold</b>"), ("bo", "Bo"), ("cy", "Cy"),
                               ("dee", "Dee"), ("eve", "Eve")):
            gb.add_student(student, first_name=first, last_name="L")
        plan = {"head": {"ada": verdicts(), HOSTILE: verdicts(values=softmax),
                         "bo": verdicts(values=(Kind.WRONG_VALUE, "no_scale", "scores not scaled"))},
                "multihead": {"ada": verdicts(), HOSTILE: verdicts(values=softmax, causal=softmax),
                              "bo": verdicts(causal=(Kind.NOT_CAUSAL, "sees_the_future", "earlier positions changed"))}}
        unanswered = verdicts(**{c: (Kind.UNANSWERED, None, "still unanswered") for c in CHECKS})
        for lesson, by in plan.items():
            for student, vs in by.items():
                grade(gb, lesson, student, vs)
                graded_notebook(root, student, lesson, vs)
        # bo's head: flagged by the re-run (RecordFlags' comment, RecordVerdicts' list)
        gb.find_comment("answer", "head", "head", "bo").auto_comment = "FLAGGED by the independent re-run: <i>values</i>"
        gb.db.commit()
        graded_notebook(root, "bo", "head", plan["head"]["bo"], flagged=["values"])
        # cy's head: bob made the files (CheckOwner refused it): in the gradebook, no autograded copy
        gb.add_submission("head", "cy")
        folder = root / "submitted" / "cy" / "head"
        folder.mkdir(parents=True)
        (folder / "head.ipynb").write_text("{}")
        os.chown(folder / "head.ipynb", SPOOFER_UID, SPOOFER_UID)
        # eve's head: not valid JSON, kept as .broken, the release graded in its place
        (root / "submitted" / "eve" / "head").mkdir(parents=True)
        (root / "submitted" / "eve" / "head" / "head.ipynb.broken").write_text("{")
        grade(gb, "head", "eve", unanswered)
        graded_notebook(root, "eve", "head", unanswered)
        # gus submitted head after the class was autograded
        (root / "submitted" / "gus" / "head").mkdir(parents=True)
    # ada opened two rungs of one check's hints and one of another's (KeepHintsUsed's data)
    path = root / "autograded" / "ada" / "head" / "head.ipynb"
    nb = nbformat.read(path, as_version=4)
    nb.metadata["tinygpt"] = {"hints_used": [{"lesson": "head", "check": "causal", "mistake": "sees_the_future", "rungs": [2, 1]},
                                             {"lesson": "head", "check": "values", "mistake": "no_scale", "rungs": [1]},
                                             {"lesson": "head", "check": "<b>", "mistake": "x", "rungs": [9]}]}
    nbformat.write(nb, path)
    return root


def build(root, lesson="head", ladder=lambda lesson, m: None):
    cd = course_paths(root)
    results = lesson_results(cd, lesson)
    all_results = [lesson_results(cd, name) for name in ("head", "multihead")]
    return page_module.build_page(results, all_results, ladder=ladder)


def count(page, mistake):
    m = re.search(rf'<tr id="mistake-{mistake}">.*?<td class="count">(\d+)</td>', page, re.S)
    return int(m.group(1)) if m else 0


def test_record_verdicts_keeps_the_reruns_and_drops_the_learners(tmp_path):
    before = nbformat.v4.new_notebook(cells=cells("head"))
    planted = {"version": 1, "lesson": "head", "judged": True, "flagged": [], "broken": False}
    nb = graded_notebook(tmp_path, "ada", "head", verdicts(values=(Kind.WRONG_VALUE, "no_scale", "not scaled")),
                         planted=planted)
    assert KEY not in nb.cells[0].metadata                    # the learner's note on the answer cell is gone
    kept = read_verdicts(nb)
    assert kept["checks"]["values"] == {"check": "values", "passed": False, "kind": "wrong_value",
                                        "mistake": "no_scale", "message": "not scaled"}
    assert kept["checks"]["shapes"]["passed"] is True and kept["judged"] and not kept["broken"]
    # scores, sources, outputs, nbgrader's metadata: as they were
    for a, b in zip(before.cells, nb.cells):
        assert (a.source, a.metadata.get("nbgrader"), a.get("outputs")) == (b.source, b.metadata.get("nbgrader"), b.get("outputs"))


def test_record_verdicts_without_a_rerun_says_so(tmp_path):
    nb = nbformat.v4.new_notebook(cells=cells("head"))
    nb.metadata[KEY] = {"judged": True}
    nb, _ = RecordVerdicts().preprocess(nb, {"nbgrader": {}, "tinygpt": {}})
    assert read_verdicts(nb) == {"version": 1, "lesson": None, "judged": False, "flagged": [], "broken": False,
                                 "checks": {}}


def test_counts_who_and_no_ladder_yet(klass):
    page = build(klass)
    assert count(page, "softmax_axis") == 1 and count(page, "no_scale") == 1 and count(page, "unanswered") == 1
    assert count(page, "sees_the_future") == 0              # a multihead mistake: not on head's page
    row = re.search(r'<tr id="mistake-no_scale">.*?</tr>', page, re.S).group(0)
    assert "<code>bo</code> (Bo L): values" in row and page_module.NO_LADDER in row
    assert "<code>ada</code>" not in re.search(r"<h2>Mistakes</h2>.*?<h2>", page, re.S).group(0)


def test_a_ladder_shows_its_three_rungs_in_order(klass):
    rungs = {"no_scale": ("IDEA <1>", "WHERE <2> in `self.<b>key</b>`", "NUDGE <3>")}
    page = build(klass, ladder=lambda lesson, m: rungs.get(m))
    row = re.search(r'<tr id="mistake-no_scale">.*?</tr>', page, re.S).group(0)
    assert re.search(r"IDEA &lt;1&gt;.*WHERE &lt;2&gt;.*NUDGE &lt;3&gt;", row, re.S), row
    # backticks mark code, and what they hold is still text
    assert "in <code>self.&lt;b&gt;key&lt;/b&gt;</code>" in row and "`" not in row, row
    assert page_module.NO_LADDER not in row
    other = re.search(r'<tr id="mistake-softmax_axis">.*?</tr>', page, re.S).group(0)
    assert page_module.NO_LADDER in other


def test_flagged_and_ungraded_have_their_reason(klass):
    page = build(klass)
    problems = re.search(r"<h2>Flagged and ungraded submissions</h2>(.*?)<h2>", page, re.S).group(1)
    rows = {m.group(1): m.group(0) for m in re.finditer(r'<tr class="\w+"><td><code>([^<]*)</code>.*?</tr>', problems, re.S)}
    assert set(rows) == {"bo", "cy", "eve", "gus"}, rows.keys()
    assert "ungraded" in rows["gus"] and "submitted, not autograded yet: nbgrader autograde head" in rows["gus"]
    assert "flagged" in rows["bo"] and "FLAGGED by the independent re-run: &lt;i&gt;values&lt;/i&gt;" in rows["bo"]
    assert "ungraded" in rows["cy"] and f"belongs to uid {SPOOFER_UID}, not to cy" in rows["cy"] and "not graded" in rows["cy"]
    assert "head.ipynb.broken" in rows["eve"] and "flagged" in rows["eve"]
    assert "no submission of head (1): <code>dee</code> (Dee L)" in problems


def test_a_persisting_mistake_stands_out(klass):
    page = build(klass)
    table = re.search(r'<table class="across">.*?</table>', page, re.S).group(0)
    hostile = re.search(rf"<tr><th><code>{re.escape(page_module.e(HOSTILE))}</code>[^<]*(?:<[^/][^>]*>[^<]*</[^>]+>[^<]*)*</th>(.*?)</tr>",
                        table, re.S).group(1)
    assert '<td class="persists">head, multihead</td>' in hostile
    bo = re.search(r"<tr><th><code>bo</code> \(Bo L\)</th>(.*?)</tr>", table, re.S).group(1)
    assert bo.count('class="once"') == 2 and "persists" not in bo
    assert "Persisting: <code>softmax_axis</code> (1:" in page
    # the legend explains every shade the table shows, drawn with that shade's class
    legend = page.split('<table class="across">', 1)[0].rsplit("<p>Lessons graded", 1)[1]
    shades = set(re.findall(r'<td class="(\w+)"', table))
    assert shades == {"persists", "once"}
    for cls in shades:
        assert re.search(rf'<span class="{cls}">[^<]+</span>', legend), (cls, legend)


def test_learner_text_is_escaped_and_no_script_can_run(klass):
    page = build(klass)
    assert '<meta http-equiv="Content-Security-Policy"' in page and "script-src 'none'" in page
    assert HOSTILE not in page and "<b>Bold" not in page and "<script" not in page.lower()
    assert page_module.e(HOSTILE) in page and "&lt;b&gt;Bold&lt;/b&gt;" in page
    assert "&lt;script&gt;alert(&quot;pwned&quot;)&lt;/script&gt; &amp; co" in page


def test_without_escaping_the_hostile_texts_would_be_markup(klass, monkeypatch):
    """The escaping is what keeps them text: with it switched off they are tags."""
    monkeypatch.setattr(page_module, "e", str)
    page = build(klass)
    assert HOSTILE in page and '<script>alert("pwned")</script>' in page


def test_the_command_writes_the_page_and_reads_only(klass, capsys):
    assert main(["head", "--course-dir", str(klass), "--quiet"]) == 0
    out = klass / "reports" / "head.html"
    assert capsys.readouterr().out.strip() == str(out)
    page = out.read_text()
    assert count(page, "softmax_axis") == 1 and page.count('src="data:image/png;base64,') == 2
    assert sorted(p.name for p in (klass / "reports").iterdir()) == ["head-learners.csv", "head.html"]
    assert main(["block", "--course-dir", str(klass), "--quiet"]) == 2          # never graded
    assert "no assignment 'block'" in capsys.readouterr().err


def test_no_gradebook_is_an_error_not_a_new_gradebook(tmp_path, capsys):
    assert main(["head", "--course-dir", str(tmp_path), "--quiet"]) == 2
    assert "run nbgrader autograde first" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_the_report_imports_nothing_that_runs_learner_code(klass):
    """Trusted code: no extract, no re-run server, no kernel template, none of grading's steps
    that start learner code (the sandbox, the re-run's client, the kernel) once the page is written."""
    runs = ("tinygpt_course.rerun", "tinygpt_course.kernelfork", "tinygpt_course.grading.rerun",
            "tinygpt_course.grading.sandbox", "tinygpt_course.grading.kernel", "tinygpt_course.grading.template",
            "tinygpt_course.grading.execute", "tinygpt_course.grading.independent", "tinygpt_course.grading.launch")
    code = ("import sys, tinygpt_course.report as r\n"
            f"r.write_report({str(klass)!r}, 'head', progress=False)\n"
            f"print(sorted(m for m in sys.modules if m.endswith('.extract') or m.startswith({runs!r})))")
    out = subprocess.run([sys.executable, "-c", code], cwd=klass, capture_output=True, text=True, check=True).stdout
    assert json.loads(out.strip().replace("'", '"')) == []
    assert (klass / "reports" / "head.html").exists()


def test_who_scored_what_with_names_hints_and_the_formgrader(klass):
    """One row per graded learner, fewest points first: id, name, total, each check's points, the
    hints opened (only well-formed entries), a link to the submission in the formgrader; the CSV
    beside the page holds the same rows."""
    import csv
    from nbgrader.api import Gradebook
    assert main(["head", "--course-dir", str(klass), "--quiet", "--formgrader", "/user/teacher/formgrader"]) == 0
    page = (klass / "reports" / "head.html").read_text()
    table = re.search(r'<table class="learners">.*?</table>', page, re.S).group(0)
    rows = {re.search(r"<code>(.*?)</code>", r).group(1): r for r in table.split("<tr")[2:]}
    with Gradebook(f"sqlite:///{klass}/gradebook.db", "tinygpt") as gb:
        ids = {st: gb.find_submission_notebook("head", "head", st).id for st in ("ada", "bo", "eve")}
        totals = {st: gb.find_submission("head", st).score for st in ("ada", "bo", "eve")}
    scores = [float(re.search(r"<td>([0-9.]+) / 5</td>", r).group(1)) for r in rows.values()]
    assert len(rows) == 4 and scores == sorted(scores), scores          # fewest points first
    assert "<td>Ada L</td>" in rows["ada"] and f"<td>{totals['ada']:g} / 5</td>" in rows["ada"]
    assert "causal: rungs 1, 2; values: rung 1" in rows["ada"] and "&lt;b&gt;" not in rows["ada"]
    assert f'href="/user/teacher/formgrader/submissions/{ids["ada"]}/"' in rows["ada"]
    assert "<td>none</td>" in rows["bo"]
    with open(klass / "reports" / "head-learners.csv", newline="") as f:
        lines = list(csv.DictReader(f))
    assert {r["student"]: (r["name"], float(r["score"]), r["submission_id"]) for r in lines if r["student"] in ids} == \
        {st: (f"{st.capitalize()} L" if st != "eve" else "Eve L", totals[st], ids[st]) for st in ids}
    assert "values" in lines[0] and lines[0]["hints_opened"] is not None
