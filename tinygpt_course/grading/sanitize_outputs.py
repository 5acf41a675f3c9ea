"""Learner output is data, never script, wherever a person opens it.

nbgrader 0.9's formgrader renders the autograded notebook's outputs as they are, and
``generate_feedback`` turns the same notebook into the page ``release_feedback`` hands out,
both through nbconvert, which by default passes HTML, Javascript, SVG and markdown through as
live markup (its ``sanitize_html`` is off). Learner code decides every output of its kernel
(``display(HTML("<script>..."))``, an ``<img onerror=...>``, a Javascript output, a forged
``image/png`` whose "base64" closes the ``src`` attribute, an image ``width`` nbconvert writes
unquoted), and the learner decides every markdown or raw cell they add or edit.

SanitizeOutputs rebuilds every output from what is safe to show: text (stream, error,
``text/plain``), images (``image/png`` and ``image/jpeg`` checked to be base64, sizes checked to
be numbers: plots and the attention explorer's PNG still show) and ``text/html`` cleaned by nh3
(the Ammonia sanitizer: no script, no event handler, no ``javascript:`` link, no style, no
iframe) to markup that makes no request and holds no link (clean_html): opening a page is
enough for the browser to fetch every ``<img src>``, with the reader's cookies, so an
``<img src="/hub/logout">`` logs the teacher out and a picture from another address tells that
address who opened it, when; an ``<a href>`` is a link of the learner's choosing. A picture is
kept only as inline data (``data:image/png|jpeg;base64``), a link as its text. Everything
else (Javascript, SVG, markdown, LaTeX, widgets, JSON) is dropped, with a note in its place when
nothing else of it is left. A markdown or raw cell is the teacher's when
its text is that of a markdown or raw cell in ``source/`` or ``release/``; any other is shown as
text (a fenced code block, fence longer than any backtick run in it). Widget state in the
notebook's metadata goes too. Run it in the autograde pipeline (so that the autograded notebook
the formgrader shows is safe) and again in GenerateFeedback (for notebooks graded before it).
(The hint rungs the learner used are lifted out of it as data before the notebook runs:
hints_used.KeepHintsUsed.)
"""
import os
import re

import nbformat
import nh3
from nbformat.v4 import new_output
from traitlets import Bool, List, Unicode

from nbgrader.coursedir import CourseDirectory

from .feedback import FeedbackStep

BASE64 = re.compile(r"[A-Za-z0-9+/=\s]*")
SIZE = re.compile(r"\d{1,5}")
# the only picture source kept in learner HTML: inline PNG or JPEG data, base64 (no SVG: it can
# hold script and fetch)
DATA_IMAGE = re.compile(r"data:image/(?:png|jpeg);base64,[A-Za-z0-9+/]*={0,2}")
# Ammonia's allow-list, less what fetches or links: <a>, <area> and <map> go (their text stays),
# and every attribute that names an address except <img src>, which is checked to be data
NO_REQUEST_TAGS = frozenset(tag for tag in nh3.ALLOWED_TAGS if tag not in ("a", "area", "map"))
ADDRESS_ATTRIBUTES = frozenset({"href", "hreflang", "cite", "src", "srcset", "longdesc", "usemap", "action",
                                "formaction", "poster", "background", "data", "ping", "style"})
NO_REQUEST_ATTRIBUTES = {tag: {a for a in attrs if a not in ADDRESS_ATTRIBUTES} | ({"src"} if tag == "img" else set())
                         for tag, attrs in nh3.ALLOWED_ATTRIBUTES.items() if tag in NO_REQUEST_TAGS}


def data_image_only(tag, attribute, value):
    """nh3's attribute filter: an <img src> stays only as inline PNG/JPEG data."""
    if attribute == "src":
        return value if tag == "img" and DATA_IMAGE.fullmatch(value) else None
    return value


def clean_html(html):
    """Learner HTML as markup that runs nothing, fetches nothing and links nowhere."""
    return nh3.clean(html, tags=set(NO_REQUEST_TAGS), attributes=NO_REQUEST_ATTRIBUTES,
                     attribute_filter=data_image_only, url_schemes={"data"}, url_relative="deny",
                     strip_comments=True)


def fence(text, shortest):
    """A run of backticks longer than any in `text` (and at least `shortest`): markdown closes a
    code span or block only at a run as long as the one that opened it."""
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    return "`" * max(shortest, longest + 1)


def fenced(text):
    """`text` as a markdown code block no backtick run in it can close."""
    f = fence(text, 3)
    return f"{f}text\n{text}\n{f}"


UNSHOWN = re.compile(r"[\x00-\x1f\x7f]")


def shown(text):
    """Learner text as markdown that shows it literally, inline: a code span (nothing in it is
    markdown, HTML, a link or math: markdown escapes it, MathJax skips <code>) on one line (a
    blank line would end the span and the paragraph), whitespace collapsed, control characters
    replaced. The one way learner text goes into a field nbgrader renders as markdown (gradebook
    comments, notes in a notebook)."""
    text = UNSHOWN.sub("\ufffd", " ".join(str(text).split()))
    f = fence(text, 1)
    return f"{f} {text} {f}"


def joined(value):
    return "".join(value) if isinstance(value, list) else value if isinstance(value, str) else ""


class SanitizeOutputs(FeedbackStep):
    """Every output text, a checked image or cleaned HTML; learner markdown and raw cells as text."""

    images = List(Unicode(), ["image/png", "image/jpeg"], help=(
        "Image types kept (base64 checked; each becomes an <img> with a data: URL). SVG is not "
        "among them: nbconvert inlines it into the page, where it can hold script.")).tag(config=True)
    keep_html = Bool(True, help=(
        "Keep text/html outputs, cleaned by nh3 (no script, event handler, style or frame; no link, "
        "no picture but inline data). False: show them as their text/plain twin only.")).tag(config=True)
    trusted_folders = List(Unicode(), ["source", "release"], help=(
        "CourseDirectory folders (attribute stems: source -> source_directory) whose notebook's "
        "markdown and raw cells are the teacher's and stay as they are; any other markdown or raw "
        "cell is shown as text.")).tag(config=True)

    def preprocess(self, nb, resources):
        self._trusted = self.teacher_cells(resources)
        widgets = nb.metadata.pop("widgets", None)
        if widgets is not None:
            self.log.info("dropped the notebook's widget state (learner-made markup)")
        return super().preprocess(nb, resources)

    def teacher_cells(self, resources):
        """The texts of the markdown and raw cells of the teacher's copies of this notebook."""
        info = resources.get("nbgrader", {})
        if not info.get("assignment") or not info.get("notebook"):
            return set()
        coursedir = CourseDirectory(config=self.config)
        texts = set()
        for folder in self.trusted_folders:
            base = getattr(coursedir, f"{folder}_directory")
            path = os.path.join(coursedir.format_path(base, ".", info["assignment"]), info["notebook"] + ".ipynb")
            try:
                nb = nbformat.read(path, as_version=4)
            except (OSError, ValueError):
                continue
            texts |= {c.source for c in nb.cells if c.cell_type in ("markdown", "raw")}
        return texts

    def preprocess_cell(self, cell, resources, index):
        if cell.cell_type in ("markdown", "raw"):
            if cell.source not in self._trusted:       # the learner's: shown as text
                cell.cell_type, cell.source = "markdown", fenced(cell.source)
                cell.pop("attachments", None)
                cell.metadata.pop("raw_mimetype", None)
                cell.metadata.pop("format", None)
        elif cell.cell_type == "code":
            cell.outputs = [o for o in map(self.output, cell.get("outputs", [])) if o is not None]
        return cell, resources

    def output(self, out):
        kind = out.get("output_type")
        if kind == "stream":
            return new_output("stream", name="stderr" if out.get("name") == "stderr" else "stdout",
                              text=joined(out.get("text")))
        if kind == "error":
            return new_output("error", ename=str(out.get("ename", "")), evalue=str(out.get("evalue", "")),
                              traceback=[str(t) for t in out.get("traceback", []) if isinstance(t, str)])
        if kind not in ("display_data", "execute_result"):
            return None
        data, metadata, dropped = {}, {}, []
        for mime, value in out.get("data", {}).items():
            value = joined(value)
            if mime == "text/plain":
                data[mime] = value
            elif mime in self.images and BASE64.fullmatch(value):
                data[mime] = value
                sizes = {k: v for k, v in out.get("metadata", {}).get(mime, {}).items()
                         if k in ("width", "height") and SIZE.fullmatch(str(v))}
                if sizes:
                    metadata[mime] = {k: int(v) for k, v in sizes.items()}
            elif mime == "text/html" and self.keep_html:
                data[mime] = clean_html(value)
            else:
                dropped.append(mime)
        if dropped and not (set(data) - {"text/plain"}) and "text/plain" not in data:
            data["text/plain"] = f"(output of type {', '.join(dropped)} not shown: only text, images and cleaned HTML are)"
        if not data:
            return None
        extra = {"execution_count": out.get("execution_count") if isinstance(out.get("execution_count"), int)
                 else None} if kind == "execute_result" else {}
        return new_output(kind, data=data, metadata=metadata, **extra)
