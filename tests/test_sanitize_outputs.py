"""SanitizeOutputs and the feedback's Secrets, on notebooks made here (no nbgrader command): what
reaches the formgrader and the feedback is text, checked images and cleaned HTML; a message that
quotes the solution is not shown. The browser side is tests/test_learner_markup.py."""
import base64
from html.parser import HTMLParser

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output, new_raw_cell

from tinygpt_course.checks.protocol import QUOTE_LIMIT, quote
from tinygpt_course.grading.feedback import SCRUBBED, Secrets
from tinygpt_course.grading.sanitize_outputs import DATA_IMAGE, SanitizeOutputs, fenced, shown
from tinygpt_course.testing.notebooks import source_path

PNG = base64.b64encode(b"\x89PNG\r\n\x1a\n" + b"\0" * 16).decode()


def sanitized(cells):
    nb = new_notebook(cells=cells)
    nb.metadata["widgets"] = {"application/vnd.jupyter.widget-state+json": {"state": {}}}
    nb, _ = SanitizeOutputs().preprocess(nb, {})
    nbformat.validate(nb)
    return nb


def test_outputs_keep_text_images_and_cleaned_html_only():
    cell = new_code_cell("x", outputs=[
        new_output("stream", name="stdout", text="hello\n"),
        new_output("display_data", data={"text/html": "<b onclick='x()'>bold</b><script>alert(1)</script>",
                                         "text/plain": "<HTML>"}),
        new_output("display_data", data={"image/png": PNG, "text/plain": "<Figure>"},
                   metadata={"image/png": {"width": 400, "height": "1 onerror=alert(1)"}}),
        new_output("display_data", data={"image/png": "x\" onerror=\"alert(1)", "text/plain": "forged"}),
        new_output("display_data", data={"application/javascript": "alert(1)"}),
        new_output("display_data", data={"image/svg+xml": "<svg onload='alert(1)'/>", "text/markdown": "<img onerror=x>"}),
        new_output("error", ename="ValueError", evalue="no", traceback=["ValueError: no"]),
    ])
    nb = sanitized([cell])
    out = nb.cells[0].outputs
    assert out[0].text == "hello\n"
    assert out[1].data["text/html"] == "<b>bold</b>"
    assert out[2].data["image/png"] == PNG and out[2].metadata == {"image/png": {"width": 400}}
    assert "image/png" not in out[3].data and out[3].data["text/plain"] == "forged"
    for o in out[4:6]:
        assert list(o.data) == ["text/plain"] and "not shown" in o.data["text/plain"], o
    assert out[6].ename == "ValueError"
    assert "widgets" not in nb.metadata


def test_learner_markdown_and_raw_cells_are_shown_as_text():
    nasty = "<script>alert(1)</script>\n```\nclosing the fence\n````"
    raw = new_raw_cell("<script>alert(2)</script>")
    raw.metadata["raw_mimetype"] = "text/html"
    nb = sanitized([new_markdown_cell(nasty), raw])
    assert [c.cell_type for c in nb.cells] == ["markdown", "markdown"]
    assert nb.cells[0].source == fenced(nasty) and nb.cells[0].source.startswith("`````text\n")
    assert nb.cells[1].source == fenced("<script>alert(2)</script>") and "raw_mimetype" not in nb.cells[1].metadata


def test_the_teachers_markdown_stays_as_it_is(tmp_path):
    step = SanitizeOutputs()
    step.teacher_cells = lambda resources: {"# The lesson\n<b>bold</b>"}
    nb, _ = step.preprocess(new_notebook(cells=[new_markdown_cell("# The lesson\n<b>bold</b>")]), {})
    assert nb.cells[0].source == "# The lesson\n<b>bold</b>"


def test_a_quote_is_one_line_of_a_few_hundred_characters():
    assert quote("ValueError: not today") == "ValueError: not today"
    long = quote("x" * 5000 + "\nsecond line")
    assert len(long) <= QUOTE_LIMIT + 6 and "\n" not in long and long.endswith("[...]")
    assert quote("\n\n  first   line \nsecond") == "first line [...]"


def test_secrets_are_the_solution_lines_the_learner_did_not_write():
    source = nbformat.read(source_path("multihead"), as_version=4)
    secrets = Secrets(source)
    solution_line = "joined = torch.cat([head(x) for head in self.heads], dim=-1)"
    assert secrets.quoted_in(f"MultiHead() failed: Exception: found it:   {solution_line}")
    assert secrets.scrub("forward raised " + solution_line.replace(" ", "\t")) == SCRUBBED
    assert secrets.scrub("forward raised ValueError: not today") == "forward raised ValueError: not today"
    own = Secrets(source, answer="joined = torch.cat([head(x) for head in self.heads], dim=-1)  # mine")
    assert not own.quoted_in(solution_line)           # the learner's own line is theirs to see
    hidden = "assert decode(xb[0]) == decode(get_batch()[0]), 'xb was changed: restart and run all cells'"
    assert secrets.quoted_in(hidden) and own.quoted_in(hidden)


def test_feedback_hides_what_quotes_the_solution_and_caps_the_rest(monkeypatch):
    import copy

    from tinygpt_course.grading import feedback
    line = "joined = torch.cat([head(x) for head in self.heads], dim=-1)"
    check = new_code_cell("checks.check('shapes', globals())", outputs=[new_output(
        "error", ename="RuntimeError", evalue=f"MultiHead() failed: {line}\n" + "A" * 5000, traceback=[])])
    check.metadata.nbgrader = {"grade": True, "solution": False, "grade_id": "shapes", "points": 1, "score": 0}
    printed = new_code_cell("print(found)", outputs=[new_output("stream", name="stdout", text=line + "\n")])

    def explained(source_nb):
        monkeypatch.setattr(feedback, "course_notebook", lambda config, info: source_nb)
        nb = new_notebook(cells=[copy.deepcopy(printed), copy.deepcopy(check)])
        return feedback.ExplainChecks().preprocess(nb, {"nbgrader": {}})[0]

    on = explained(nbformat.read(source_path("multihead"), as_version=4))
    assert on.cells[1].outputs[0].evalue == SCRUBBED
    assert on.cells[0].outputs[0].text == feedback.QUOTED
    off = explained(None)             # no solution known: the scrub is off, the cap still holds
    assert line in off.cells[1].outputs[0].evalue and len(off.cells[1].outputs[0].evalue) < QUOTE_LIMIT + 40
    assert off.cells[0].outputs[0].text == line + "\n"


class Elements(HTMLParser):
    """The (tag, {attribute: value}) of every element of an HTML text, and its text."""

    def __init__(self, html):
        super().__init__(convert_charrefs=True)
        self.found, self.text = [], []
        self.feed(html)
        self.close()

    def handle_starttag(self, tag, attrs):
        self.found.append((tag, dict(attrs)))

    def handle_data(self, data):
        self.text.append(data)


# learner HTML that would make the reader's browser fetch an address, or offer a link
FETCHING = [
    '<img src="/hub/logout">', '<img src="http://127.0.0.2:9/beacon.png" alt="beacon">',
    '<a href="http://127.0.0.2:9/">click me</a>', '<img srcset="/hub/logout 1x">',
    '<img src="data:image/svg+xml;base64,PHN2Zz48L3N2Zz4=">', '<img src="data:image/png,not-base64">',
    '<table background="/hub/logout"><tr><td style="background:url(/hub/logout)">cell</td></tr></table>',
    '<video poster="/hub/logout" src="/hub/logout"></video>', '<audio src="/hub/logout"></audio>',
    '<link rel="stylesheet" href="/hub/logout">', '<meta http-equiv="refresh" content="0;url=/hub/logout">',
    '<base href="http://127.0.0.2:9/">', '<form action="/hub/logout"><button>go</button></form>',
    '<iframe src="/hub/logout"></iframe>', '<object data="/hub/logout"></object>', '<embed src="/hub/logout">',
    '<svg><image href="/hub/logout"/></svg>', '<style>p{background:url(/hub/logout)}</style>text',
    '<input type="image" src="/hub/logout">', '<map><area href="/hub/logout"></map>',
    '<blockquote cite="/hub/logout">quoted</blockquote>', '<img src="/x.png" onerror="fetch(\'/hub/logout\')">',
]


@pytest.mark.parametrize("html", FETCHING)
def test_learner_html_makes_no_request_and_holds_no_link(html):
    cell = new_code_cell("x", outputs=[new_output("display_data", data={"text/html": html, "text/plain": "t"})])
    kept = sanitized([cell]).cells[0].outputs[0].data.get("text/html", "")
    elements = Elements(kept)
    for tag, attrs in elements.found:
        assert tag not in ("a", "area", "link", "meta", "base", "form", "iframe", "object", "embed", "svg",
                           "image", "video", "audio", "input", "style"), kept
        for name, value in attrs.items():
            if tag == "img" and name == "src":
                assert DATA_IMAGE.fullmatch(value), kept
            else:
                assert "/" not in (value or "") and not name.startswith("on"), kept
    # what the learner wrote as text stays readable: a link's words, a cell's, a quote's
    for words in ("click me", "cell", "quoted", "go", "text"):
        if f">{words}<" in html or html.endswith(words):
            assert words in "".join(elements.text), kept


def test_pictures_in_learner_html_stay_as_inline_data():
    html = f'<p>plot</p><img src="data:image/png;base64,{PNG}" width="40" alt="a plot">'
    cell = new_code_cell("x", outputs=[new_output("display_data", data={"text/html": html})])
    kept = Elements(sanitized([cell]).cells[0].outputs[0].data["text/html"]).found
    assert ("img", {"src": f"data:image/png;base64,{PNG}", "width": "40", "alt": "a plot"}) in kept


# learner text a gradebook comment quotes: HTML, markdown, links, math, fences, blank lines
MESSAGES = [
    "ValueError: <img src=x onerror=\"window.__probes=1\"> & <script>alert(1)</script>",
    "see [the answer](http://127.0.0.2:9/) or http://127.0.0.2:9/beacon or <http://127.0.0.2:9/>",
    "**bold** _em_ # heading\n\n# a heading after a blank line\n- a list",
    "`one` ``two`` ```three``` ` <b>ends with a backtick`", "`<b>starts with one`",
    "$\\href{http://127.0.0.2:9/}{math}$ and $$x$$", "![pic](/hub/logout) <!-- comment --> \\<i>escaped</i>",
    "tab\there, NUL\x00 and ESC\x1b[31m", "",
]


@pytest.mark.parametrize("message", MESSAGES)
def test_a_shown_message_renders_as_its_own_text(message):
    """Rendered as nbgrader's feedback renders a comment (nbconvert's markdown2html, raw HTML
    kept), the message is one <code> holding exactly its text: no element, link or markup of it."""
    from nbconvert.filters.markdown import markdown2html
    html = markdown2html(f"FLAGGED by the independent re-run: shapes failed ({shown(message)}).")
    elements = Elements(html)
    assert [tag for tag, _ in elements.found] == ["p", "code"], html
    literal = " ".join(message.split()).replace("\x00", "\ufffd").replace("\x1b", "\ufffd")
    text = "".join(elements.text)
    assert f"({literal}" in text or f"( {literal}" in text, (text, literal)
    alone = Elements(markdown2html(shown(message)))         # at the start of a line, too
    assert {tag for tag, _ in alone.found} <= {"p", "pre", "code"} and literal in "".join(alone.text), alone.found
