"""The bytes a grading kernel sends back, budgeted where the grader reads them.

nbgrader caps output by lines (LimitOutput), after the whole notebook has run: one ``print`` of
250 MB is one line, so it was decoded, kept in memory several times over (1.5 GB of the grader's
own memory for it, 0.3 GB for a plain answer) and written whole to ``autograded/`` and
``feedback/``. Two steps here, both before the text accumulates anywhere:

- :class:`BudgetedChannel` (the kernel client's shell and iopub channels): a message part larger
  than ``message_limit`` bytes is never copied into Python nor JSON-decoded. Its signature is
  checked over the received buffer in place, and the part is replaced by a short note (with the
  first characters of the text, where they can be read from the start of the part). The one
  message is held once, by ZeroMQ, while it is looked at; nothing bigger is kept.
- :func:`OutputBudget.take` (RobustExecute.output, as nbclient appends each output): each output
  (a cell's stdout or stderr, an error, a display) keeps at most ``output_limit`` characters, the
  notebook's run at most ``kernel_output_limit`` in all; past that, what comes is dropped, and
  where output was cut a note says so. An error stays an error (cut, never turned into text), so
  a failing cell never looks like a passing one. Pictures (``image/png``, ``image/jpeg``: the
  plots, the attention explorer's figure, some 100-300 KB of base64 each) have budgets of their
  own, ``image_limit`` characters each and ``kernel_image_limit`` per notebook: a plot never
  spends the text's budget (nor is cut into invalid base64); a picture over its budget is dropped
  whole, with the note in the output's ``text/plain``, which stays.
"""
import json

from jupyter_client.channels import AsyncZMQSocketChannel
from nbformat import NotebookNode
from traitlets import Type

from .ready import ReadyClient

MESSAGE_LIMIT = 2_000_000       # bytes of one message part (RobustExecute.message_limit)
PREFIX = 1000                   # characters of a cut message's text kept before its note
TEXT_TYPES = ("execute_result", "display_data", "update_display_data")
IMAGE_TYPES = ("image/png", "image/jpeg")   # budgeted apart from text: kept whole or dropped


def _text_prefix(buf, key, limit=PREFIX):
    """The first characters of the JSON string at `key` near the start of the raw content
    `buf`, or "" (the key is not in its first bytes, or its text cannot be read there)."""
    head = bytes(buf[:4 * limit + 256])
    start = head.find(b'"%s": "' % key.encode())
    if start < 0 or start > 256:
        return ""
    text = head[start + len(key) + 5:]
    for cut in range(len(text), max(len(text) - 12, 0), -1):   # an escape or a character may be cut
        try:
            value = json.loads(b'"' + text[:cut] + b'"')
        except ValueError:
            continue
        return value[:limit]
    return ""


def cut_note(limit, what):
    """The note left where output was cut: what the grader keeps."""
    return f"\n[output cut here: the grader keeps at most {limit} {what}]\n"


def _replacement(msg_type, buf, size, limit):
    """(msg_type, content) that stands for a message whose content part was too large."""
    note = cut_note(limit, f"bytes of one message (this one had {size})")
    if msg_type == "stream":
        name = "stderr" if b'"name": "stderr"' in bytes(buf[:256]) else "stdout"
        return msg_type, {"name": name, "text": _text_prefix(buf, "text") + note}
    if msg_type == "error":
        text = _text_prefix(buf, "evalue") + note
        return msg_type, {"ename": "OutputTooLarge", "evalue": text, "traceback": [f"OutputTooLarge: {text}"]}
    if msg_type in TEXT_TYPES:
        content = {"data": {"text/plain": note}, "metadata": {}}
        return msg_type, ({**content, "execution_count": None} if msg_type == "execute_result" else content)
    if msg_type == "execute_reply":
        return msg_type, {"status": "error", "ename": "OutputTooLarge", "evalue": note.strip(),
                          "traceback": [], "execution_count": None}
    return "stream", {"name": "stderr", "text": note}     # anything else, too large, becomes a note


class BudgetedChannel(AsyncZMQSocketChannel):
    """A channel whose message parts above `message_limit` bytes are replaced by a note before
    any of it is copied or decoded."""

    message_limit = MESSAGE_LIMIT

    async def _recv(self, **kwargs):
        frames = await self.socket.recv_multipart(copy=False, **kwargs)
        _, parts = self.session.feed_identities(frames, copy=False)
        if all(len(p) <= self.message_limit for p in parts):
            return self.session.deserialize([p.bytes for p in parts])
        return self.session.deserialize(self._cut(parts))

    def _cut(self, parts):
        """The message with its too large content (and buffers) replaced, signed again."""
        if len(parts) < 5 or any(len(p) > self.message_limit for p in parts[:4]):
            raise ValueError("a message from the kernel has a header too large to read")
        signature = parts[0].bytes
        if self.session.auth is not None and signature != self.session.sign([p.buffer for p in parts[1:5]]):
            raise ValueError("Invalid Signature")       # as Session.deserialize would
        header = json.loads(parts[1].bytes)
        content = parts[4]
        msg_type, new = header.get("msg_type"), None
        if len(content) > self.message_limit:
            msg_type, new = _replacement(msg_type, content.buffer, len(content), self.message_limit)
            header["msg_type"] = msg_type
        head = [json.dumps(header).encode(), parts[2].bytes, parts[3].bytes,
                json.dumps(new).encode() if new is not None else content.bytes]
        buffers = [p.bytes for p in parts[5:] if len(p) <= self.message_limit]
        return [self.session.sign(head), *head, *buffers]


class BudgetedClient(ReadyClient):
    """The grading kernel's client: its shell and iopub messages are read through BudgetedChannel
    (and it is ready as soon as its kernel is: ReadyClient)."""
    shell_channel_class = Type(BudgetedChannel)
    iopub_channel_class = Type(BudgetedChannel)


def _chars(value):
    if isinstance(value, str):
        return len(value)
    if isinstance(value, (list, tuple)):
        return sum(_chars(v) for v in value)
    if isinstance(value, dict):
        return sum(len(str(k)) + _chars(v) for k, v in value.items())
    return len(str(value))


def output_chars(out, images=True):
    """Characters an output holds (text, an error's parts, every kind of displayed data; with
    images=False, all but its pictures)."""
    if out.get("output_type") == "stream":
        return _chars(out.get("text", ""))
    if out.get("output_type") == "error":
        return _chars([out.get("ename", ""), out.get("evalue", ""), out.get("traceback", [])])
    data = out.get("data", {})
    if not images:
        data = {k: v for k, v in data.items() if k not in IMAGE_TYPES}
    return _chars(data) + _chars(out.get("metadata", {}))


def cut_output(out, room, note):
    """`out` cut to about `room` characters, with `note` where it was cut; an error stays an error."""
    kind = out.get("output_type")
    if kind == "stream":
        text = out.get("text", "")
        return NotebookNode({**out, "text": (text if isinstance(text, str) else "".join(text))[:room] + note})
    if kind == "error":
        ename = str(out.get("ename", ""))[:100]
        evalue = str(out.get("evalue", ""))[:room] + note
        return NotebookNode({"output_type": "error", "ename": ename, "evalue": evalue,
                             "traceback": [f"{ename}: {evalue}"]})
    data = out.get("data", {})
    plain = data.get("text/plain", "")
    plain = plain if isinstance(plain, str) else "".join(plain)
    images = {k: v for k, v in data.items() if k in IMAGE_TYPES}    # already within their budget
    return NotebookNode({**out, "data": {**images, "text/plain": plain[:room] + note}, "metadata": {}})


class OutputBudget:
    """What one notebook's run has kept: characters of text per output (a cell's stream by name, or
    one output) and in all; characters of pictures per picture and in all. Made afresh for each
    notebook RobustExecute runs."""

    def __init__(self, output_limit, kernel_limit, image_limit=2 ** 62, kernel_image_limit=2 ** 62):
        self.output_limit, self.kernel_limit = output_limit, kernel_limit
        self.image_limit, self.kernel_image_limit = image_limit, kernel_image_limit
        self.used, self.total, self.cut, self.errors = {}, 0, set(), set()
        self.image_total = 0

    def take_images(self, out, copies=1):
        """Keep each picture of `out` whole if it fits its budgets (`copies` times: an update goes
        to every output of its display id), else drop it from `out` (in place). Returns the notes
        that say what was dropped ("" when nothing was), for the output's text/plain."""
        data = out.get("data")
        if not isinstance(data, dict):
            return ""
        notes = []
        for mime in [k for k in data if k in IMAGE_TYPES]:
            size = _chars(data[mime])
            if size > self.image_limit:
                notes.append(cut_note(self.image_limit, f"characters of one picture ({mime} had {size})"))
            elif self.image_total + size * copies > self.kernel_image_limit:
                notes.append(cut_note(self.kernel_image_limit, f"characters of pictures per notebook ({mime} dropped)"))
            else:
                self.image_total += size * copies
                continue
            del data[mime]
        return "".join(notes)

    @staticmethod
    def noted(out, notes):
        """`out` with `notes` after its text/plain (a new one when it had none)."""
        if notes and out is not None:
            plain = out["data"].get("text/plain", "")
            out["data"]["text/plain"] = (plain if isinstance(plain, str) else "".join(plain)) + notes
        return out

    def take(self, outs, out, cell_index):
        """Called with `out` just appended to `outs` (a cell's outputs): keep it, cut it, or
        drop it. Returns what stays (None when dropped)."""
        notes = self.take_images(out)
        return self.noted(self.take_text(outs, out, cell_index), notes)

    def take_text(self, outs, out, cell_index):
        key = (cell_index, out["name"]) if out.get("output_type") == "stream" else (cell_index, len(outs))
        size = output_chars(out, images=False)
        room = max(0, min(self.output_limit - self.used.get(key, 0), self.kernel_limit - self.total))
        if size <= room:
            self.used[key] = self.used.get(key, 0) + size
            self.total += size
            return out
        full = self.total >= self.kernel_limit
        if key in self.cut or (full and cell_index in self.cut):    # said once: the rest goes
            if out.get("output_type") != "error" or cell_index in self.errors:
                outs.pop()
                return None
            # but a cell's error always stays (cut to its name): without it a failing test cell
            # would score as passed
            self.errors.add(cell_index)
            outs[-1] = kept = cut_output(out, 0, cut_note(self.kernel_limit, "characters of output per notebook"))
            return kept
        if self.kernel_limit - self.total <= self.output_limit - self.used.get(key, 0):
            note = cut_note(self.kernel_limit, "characters of output per notebook")
        else:
            note = cut_note(self.output_limit, "characters per output")
        outs[-1] = kept = cut_output(out, room, note)
        self.used[key] = self.used.get(key, 0) + room
        self.total += room
        self.cut.update({key, cell_index} if self.total >= self.kernel_limit else {key})
        return kept

    def take_update(self, out, copies):
        """The new content of an update_display_data (`out`), which nbclient writes over the data
        of `copies` earlier outputs, in this cell or any before it: budgeted as that many new
        outputs. Returns what to write (cut to fit), or None when the notebook's budget is spent."""
        notes = self.take_images(out, copies)
        size = output_chars(out, images=False)
        room = max(0, min(self.output_limit, (self.kernel_limit - self.total) // max(1, copies)))
        if size > room and room == 0:
            return None
        if size > room:
            out = cut_output(out, room, cut_note(self.output_limit, "characters per output"))
            size = room
        self.total += size * copies
        return self.noted(out, notes)

    def final(self, outputs):
        """A cell's outputs as they are saved (nbclient merges its streams, nbgrader adds the
        reply's error): none above output_limit characters of text (pictures were budgeted as
        they came)."""
        return [o if output_chars(o, images=False) <= self.output_limit + PREFIX
                else cut_output(o, self.output_limit, cut_note(self.output_limit, "characters per output"))
                for o in outputs]
