"""SanitizeOutputs and the feedback's Secrets, on notebooks made here (no nbgrader command): what
reaches the formgrader and the feedback is text, checked images and cleaned HTML; a message that
quotes the solution is not shown. The browser side is tests/test_learner_markup.py."""
import base64

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output, new_raw_cell

from tinygpt_course.checks.protocol import QUOTE_LIMIT, quote
from tinygpt_course.grading.feedback import SCRUBBED, Secrets
from tinygpt_course.grading.sanitize_outputs import SanitizeOutputs, fenced
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
