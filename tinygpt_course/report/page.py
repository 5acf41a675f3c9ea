"""The class report as one static HTML page: no script runs in it (a Content-Security-Policy
forbids any), its plots are PNGs inlined as data: URIs, and every text a learner could have
shaped (student id, name, a quoted error, a gradebook comment) goes through html.escape."""
import base64
import html
import io

from ..checks import hints
from .collect import across, mistakes, pass_rates

# no script of anyone's, no request anywhere: images only from data: URIs, styles only inline
CSP = "default-src 'none'; script-src 'none'; img-src data:; style-src 'unsafe-inline'; base-uri 'none'; form-action 'none'"
NO_LADDER = "no ladder yet"

STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em; max-width: 75em; color: #222; }
table { border-collapse: collapse; margin: .5em 0 1.5em; }
th, td { border: 1px solid #ccc; padding: .25em .5em; text-align: left; vertical-align: top; }
th { background: #f3f3f3; }
.persists { background: #ffd7a8; font-weight: bold; }
.once { background: #fff3cf; }
td.ladder { min-width: 22em; }
.ladder dt { font-weight: bold; } .ladder dd { margin: 0 0 .4em 1.5em; }
.none { color: #888; font-style: italic; }
code { background: #f6f6f6; padding: 0 .2em; }
img { max-width: 100%; }
"""


def e(text):
    """Any text into the page: escaped, quotes too (attribute values are quoted)."""
    return html.escape(str(text), quote=True)


def png(fig):
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100, bbox_inches="tight")
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode("ascii")


def score_plot(results):
    from matplotlib.figure import Figure   # not pyplot: no GUI backend, no global state
    scores = [s.score for s in results.graded]
    fig = Figure(figsize=(6, 3))
    ax = fig.subplots()
    top = max(results.max_score, max(scores, default=0), 1)
    ax.hist(scores, bins=[x - 0.5 for x in range(int(top) + 2)], color="#4c72b0", edgecolor="white")
    from matplotlib.ticker import MaxNLocator
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel(f"score (of {results.max_score:g})")
    ax.set_ylabel("learners")
    ax.set_title(f"{results.lesson}: scores of {len(scores)} graded learners")
    return png(fig)


def pass_plot(results, rates):
    from matplotlib.figure import Figure
    checks = list(rates)
    frac = [100 * p / n if n else 0 for p, n in rates.values()]
    fig = Figure(figsize=(6, 0.4 * len(checks) + 1))
    ax = fig.subplots()
    ax.barh(checks[::-1], frac[::-1], color="#55a868")
    ax.set_xlim(0, 100)
    ax.set_xlabel("% of graded learners who passed")
    ax.set_title(f"{results.lesson}: pass rate of each check")
    return png(fig)


def who(subs):
    return ", ".join(f"<code>{e(s.student)}</code>" + (f" ({e(s.name)})" if s.name else "") for s in subs)


def ladder_html(lesson, mistake, ladder=hints.ladder):
    rungs = ladder(lesson, mistake)
    if rungs is None:
        return f'<p class="none">{NO_LADDER}</p>'
    return '<dl class="ladder">' + "".join(
        f"<dt>{e(label)}</dt><dd>{hints.as_html(text)}</dd>" for label, text in zip(("1. the idea", "2. where", "3. nudge"), rungs)
    ) + "</dl>"


def mistakes_html(results, describe, ladder):
    found = mistakes(results)
    if not found:
        return "<p>No graded learner made a mistake a check names.</p>"
    parts = ["<table><tr><th>mistake</th><th>learners</th><th>who (failed checks)</th><th>hint ladder</th></tr>"]
    for m, subs in found.items():
        people = "<br>".join(
            f"<code>{e(s.student)}</code>" + (f" ({e(s.name)})" if s.name else "")
            + f": {e(', '.join(s.mistakes[m]))}<br><small>{e(s.verdicts[s.mistakes[m][0]].get('message', ''))}</small>"
            for s in subs)
        what = describe(m)
        parts.append(f'<tr id="mistake-{e(m)}"><td><code>{e(m)}</code>' + (f"<br><small>{e(what)}</small>" if what else "")
                     + f'</td><td class="count">{len(subs)}</td><td>{people}</td><td class="ladder">{ladder_html(results.lesson, m, ladder)}</td></tr>')
    parts.append("</table>")
    return "".join(parts)


def problems_html(results):
    rows = [s for s in results.submissions if s.status in ("flagged", "ungraded")]
    absent = [s for s in results.submissions if s.status == "absent"]
    out = []
    if rows:
        out.append("<table><tr><th>learner</th><th>status</th><th>score</th><th>reason</th></tr>")
        for s in rows:
            score = "not graded" if s.score is None else f"{s.score:g} / {s.max_score:g}"
            out.append(f'<tr class="{e(s.status)}"><td><code>{e(s.student)}</code>'
                       + (f" ({e(s.name)})" if s.name else "") + f"</td><td>{e(s.status)}</td><td>{e(score)}</td><td>"
                       + "<br>".join(e(r) for r in s.reasons) + "</td></tr>")
        out.append("</table>")
    else:
        out.append("<p>None: every submission was graded and none was flagged.</p>")
    if absent:
        out.append(f"<p>In the gradebook, no submission of {e(results.lesson)} ({len(absent)}): {who(absent)}</p>")
    return "".join(out)


# the across-lessons table's shades: a mistake made in two lessons or more, and in one
SHADES = {"persists": "in two lessons or more (a misconception that persists)", "once": "in one lesson"}


def shade(lessons):
    """The class of a cell for a mistake made in this many lessons (one or more)."""
    return "persists" if lessons > 1 else "once"


def across_html(all_results):
    table, persists = across(all_results)
    lessons = [r.lesson for r in all_results]
    names = {s.student: s.name for r in all_results for s in r.submissions if s.name}
    if not table:
        return "<p>No mistakes in the graded lessons.</p>"
    count = {}
    for row in table.values():
        for m in row:
            count[m] = count.get(m, 0) + 1
    cols = sorted(count, key=lambda m: (-len(persists.get(m, [])), -count[m], m))
    # the legend is drawn with the table's own classes: it cannot say one shade while the table shows another
    legend = " ".join(f'<span class="{cls}">{e(meaning)}</span>' for cls, meaning in SHADES.items())
    out = [f"<p>Lessons graded: {e(', '.join(lessons))}. Each cell lists the lessons in which the learner made "
           f"that mistake, shaded by how many: {legend}; blank: in none.</p>"]
    if persists:
        out.append("<p>Persisting: " + "; ".join(
            f"<code>{e(m)}</code> ({len(persists[m])}: {', '.join(e(s) for s in sorted(persists[m]))})"
            for m in cols if m in persists) + "</p>")
    out.append('<table class="across"><tr><th>learner</th>' + "".join(f"<th><code>{e(m)}</code></th>" for m in cols) + "</tr>")
    for student in sorted(table, key=lambda st: (-sum(len(v) > 1 for v in table[st].values()), st)):
        row = table[student]
        cells = []
        for m in cols:
            ls = row.get(m, [])
            cls = f' class="{shade(len(ls))}"' if ls else ""
            cells.append(f"<td{cls}>{e(', '.join(ls))}</td>")
        name = names.get(student)
        out.append(f"<tr><th><code>{e(student)}</code>{f' ({e(name)})' if name else ''}</th>{''.join(cells)}</tr>")
    out.append("</table>")
    return "".join(out)


def by_learner(results):
    """The graded learners, fewest points first (those who need help at the top), then by id."""
    return sorted(results.graded, key=lambda s: (s.score, s.student))


def hints_text(sub):
    """The hint rungs a learner opened, one check at a time: "causal: rungs 1, 2"."""
    return "; ".join(f"{check}: rung{'s' if len(r) > 1 else ''} {', '.join(map(str, r))}" for check, _, r in sub.hints)


def learners_html(results, formgrader):
    """Who scored what: one row per graded learner (id and name, total, each check's points, the
    hints they opened, the submission in the formgrader). Static: the same rows, sortable in any
    spreadsheet, are in the CSV beside the page."""
    checks = list(results.checks)
    out = ["<table class=\"learners\"><tr><th>learner</th><th>name</th><th>score</th>"
           + "".join(f"<th><code>{e(c)}</code></th>" for c in checks) + "<th>hints opened</th><th>submission</th></tr>"]
    for s in by_learner(results):
        cells = "".join(f"<td>{e(f'{s.check_scores[c][0] or 0:g}') if c in s.check_scores else ''}</td>" for c in checks)
        link = (f'<a href="{e(formgrader.rstrip("/"))}/submissions/{e(s.notebook_id)}/">open in the formgrader</a>'
                if s.notebook_id else "")
        out.append(f'<tr class="{e(s.status)}"><td><code>{e(s.student)}</code></td><td>{e(s.name)}</td>'
                   f"<td>{s.score:g} / {s.max_score:g}</td>{cells}<td>{e(hints_text(s)) or 'none'}</td><td>{link}</td></tr>")
    out.append("</table>")
    return "".join(out)


def learners_csv(results):
    """The per-learner table as CSV text (no link; the formgrader's submission id instead)."""
    import csv
    import io
    checks = list(results.checks)
    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow(["student", "name", "score", "max_score", *checks, "hints_opened", "status", "submission_id"])
    for s in by_learner(results):
        w.writerow([s.student, s.name, f"{s.score:g}", f"{s.max_score:g}",
                    *[f"{s.check_scores[c][0] or 0:g}" if c in s.check_scores else "" for c in checks],
                    hints_text(s), s.status, s.notebook_id or ""])
    return buf.getvalue()


def build_page(results, all_results, describe=lambda m: None, ladder=hints.ladder, formgrader="/formgrader",
               csv_name=None):
    """The report's HTML for `results` (LessonResults), with the cross-lesson table over
    `all_results` (the graded lessons' LessonResults, in the course's order)."""
    rates = pass_rates(results)
    graded = results.graded
    mean = sum(s.score for s in graded) / len(graded) if graded else 0
    full = sum(1 for s in graded if s.score >= results.max_score)
    counts = {st: sum(1 for s in results.submissions if s.status == st) for st in ("graded", "flagged", "ungraded", "absent")}
    rate_rows = "".join(f"<tr><td><code>{e(c)}</code></td><td>{results.checks[c]:g}</td><td>{p} / {n}</td>"
                        f"<td>{(100 * p / n if n else 0):.0f}%</td></tr>" for c, (p, n) in rates.items())
    plots = ""
    if graded:
        plots = (f'<img id="scores" alt="score distribution" src="{score_plot(results)}">'
                 f'<img id="passrates" alt="pass rate of each check" src="{pass_plot(results, rates)}">')
    title = f"Class report: {results.lesson}"
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="{CSP}">
<title>{e(title)}</title><style>{STYLE}</style></head>
<body>
<h1>{e(title)}</h1>
<p>{len(graded)} graded ({counts['flagged']} of them flagged), {counts['ungraded']} not graded, {counts['absent']} without a
submission. Mean score {mean:.2f} of {results.max_score:g}; full marks: {full}.</p>
<h2>Scores and checks</h2>
{plots}
<table><tr><th>check</th><th>points</th><th>passed</th><th>rate</th></tr>{rate_rows}</table>
<h2>Who scored what</h2>
<p>Every graded learner, fewest points first: the points of each check, the hint rungs they opened in
the notebook's tutor, and their submission in the formgrader.{
    f' The same rows as a spreadsheet: <a href="{e(csv_name)}">{e(csv_name)}</a>.' if csv_name else ''}</p>
{learners_html(results, formgrader)}
<h2>Mistakes</h2>
<p>Each mistake a failed check named (the independent re-run's verdict), how many learners made it, who, and the
hints a learner can get for it.</p>
{mistakes_html(results, describe, ladder)}
<h2>Flagged and ungraded submissions</h2>
<p>Integrity: a submission is flagged when grading had to put back a cell the learner deleted or a
read-only cell they edited, when a check passed in the learner's kernel but not in the independent
re-run, or when the notebook was not valid JSON; each row says which.</p>
{problems_html(results)}
<h2>Across the lessons</h2>
{across_html(all_results)}
</body></html>
"""
