"""A record as data: what an extract hands the judge, in a form that cannot alias, execute or nest.

An extract's record is a small tree (dicts of lists of tensors, names, counts, flags). It crosses
from the sandbox as bytes, and those bytes are written by a process the learner's code controls,
so the trusted side reads them as data of a fixed shape, never as Python objects:

- the tree is **flattened** into named leaves, one name per path (``structure/params/3/0``);
- the tensors are stored in the **safetensors** format (a JSON header of names, dtypes, shapes
  and byte offsets, then raw bytes: no pickle, so nothing runs; its parser refuses offsets that
  overlap, so no two names share storage);
- every other leaf (None, a bool, an int, a float, a short str, or an empty list or dict) is a
  value of one **flat JSON object** in the header's ``__metadata__``: no references, no sharing;
- ``decode`` checks the bytes against the lesson's ``Schema`` *before* anything is built: the
  size of the whole, every name against the table's patterns, every tensor's dtype, rank and
  element count, every value's type and length; only then are the leaves parsed and the tree
  rebuilt, as plain dicts, lists and tensors.

Anything else raises :class:`RecordRejected`, and grading fails that learner's checks with
"the record is not what the checks produce" (tinygpt_course.grading.rerun); the class goes on.
A lesson's table is ``tinygpt_course.checks.<lesson>.schema.SCHEMA``, built from the shared
pieces below. ``encode`` (the learner side) imports nothing but torch and safetensors.
"""
import json
import math
import re
import struct
from dataclasses import dataclass

FORMAT = "tinygpt-record/1"
SEP = "/"
KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_.]{0,79}$")   # a dict key in a record
HEADER_LIMIT = 1 << 20          # bytes of the safetensors header (names, shapes, the JSON values)
MAX_INDEX = 4096                # a list in a record holds at most this many items
MAX_LEAVES = 20000
MAX_NUMEL = 1 << 20             # elements of one tensor (4 MB of float32)
MAX_BYTES = 48 << 20            # bytes of a whole record
FLOATS = ("float16", "bfloat16", "float32", "float64")
INTS = ("uint8", "int8", "int16", "int32", "int64", "bool")
_ST_DTYPES = {"F32": "float32", "I64": "int64"}    # what encode writes
REJECTED_EXIT = 4               # the re-run's exit code when encode refused its record


class RecordRejected(ValueError):
    """The bytes are not a record the lesson's checks produce; the message says what is off."""


# --- the learner side: a record (dict) to bytes ---------------------------------------------------

MAX_DEPTH = 8                   # nesting of a record's tree


def _leaves(value, path, out, depth=0):
    """{path: leaf} of the tree `value`, refusing (RecordRejected) a tree deeper than MAX_DEPTH,
    with more than MAX_LEAVES leaves or a list longer than MAX_INDEX: the walk is bounded
    whatever the learner's code built (a graph that shares its levels is refused at its depth)."""
    import torch
    if len(out) > MAX_LEAVES:
        raise RecordRejected(f"more than {MAX_LEAVES} entries")
    if isinstance(value, (dict, list, tuple)) and (depth >= MAX_DEPTH or len(value) > MAX_INDEX):
        raise RecordRejected(f"{path}: nested deeper than {MAX_DEPTH} or longer than {MAX_INDEX}")
    if torch.is_tensor(value):
        t = value.detach()
        if t.layout is not torch.strided or t.is_complex() or t.is_quantized or t.numel() > MAX_NUMEL:
            out[path] = None          # not plain numbers, or too many: the judge sees no tensor here
            return
        out[path] = t.to("cpu", torch.float32 if t.is_floating_point() else torch.int64).contiguous().clone()
    elif isinstance(value, dict):
        if not value:
            out[path] = {}
        for k, v in value.items():
            if not (isinstance(k, str) and KEY.match(k)):
                raise RecordRejected(f"a record's key must be a short name, not {str(k)[:40]!r}")
            _leaves(v, f"{path}{SEP}{k}" if path else k, out, depth + 1)
    elif isinstance(value, (list, tuple)):
        if not value:
            out[path] = []
        for i, v in enumerate(value):
            _leaves(v, f"{path}{SEP}{i}", out, depth + 1)
    elif value is None or type(value) in (bool, int, float, str):
        out[path] = value
    else:                             # a learner's own object (a reduction=... passed on): no data
        out[path] = None


def encode(rec):
    """The record `rec` (a dict of dicts, lists, tensors and plain values) as bytes: tensors as
    float32 or int64 (a learner's float64 or int32 numbers compare the same), the rest as JSON;
    any other object (and a tensor that is not plain numbers) as None."""
    from safetensors.torch import save
    import torch
    if not isinstance(rec, dict):
        raise RecordRejected("a record is a dict")
    leaves = {}
    _leaves(rec, "", leaves)
    tensors = {k: v for k, v in leaves.items() if torch.is_tensor(v)}
    values = {k: v for k, v in leaves.items() if not torch.is_tensor(v)}
    return save(tensors, metadata={"format": FORMAT, "values": json.dumps(values, allow_nan=True)})


# --- the schema: one table per lesson --------------------------------------------------------------

@dataclass(frozen=True)
class Leaf:
    """What may stand at one path: some of 'tensor', 'str', 'int', 'float', 'bool', 'none';
    for a tensor its dtypes and at most `rank` dimensions; for a str at most `limit` characters."""
    kinds: frozenset
    dtypes: tuple = ("float32",)
    rank: int = 4
    limit: int = 200


def tensor(*dtypes, rank=4, none=True):
    """A tensor of one of `dtypes` (float32 by default), or None when the run gave none."""
    return Leaf(frozenset({"tensor", "none"} if none else {"tensor"}), dtypes or ("float32",), rank)


NONE = Leaf(frozenset({"none"}))     # beside a container's patterns: the list may be None
NUMBERS = ("float32", "int64")       # what a learner's code may hand back


def text(limit=200, none=True):
    return Leaf(frozenset({"str", "none"} if none else {"str"}), limit=limit)


FLAG = Leaf(frozenset({"bool", "none"}))
COUNT = Leaf(frozenset({"int", "none"}))
ANY_VALUE = Leaf(frozenset({"int", "float", "bool", "none", "str"}))   # a layer's settings: ("Linear", 32, 128)


def error_fields(prefix, limit=2200, line_limit=500):
    """What tinygpt_course.checks.common.record_error records of a failed step: an error's text is
    cut at 2000 characters (common.ERROR_LIMIT), and the re-run or the build may say before it
    where it came from ("your answer cell raised ...", "describing your Head failed: ...")."""
    return {prefix + "error": text(limit), prefix + "exception": text(), prefix + "error_name": text(),
            prefix + "error_line": text(line_limit), prefix + "error_module": text(),
            prefix + "error_on_self": FLAG, prefix + "error_name_is_attribute": FLAG,
            prefix + "module_state_missing": FLAG, prefix + "module_classes/#/#": text()}


def shared_fields():
    """What every lesson's record may hold: the re-run's own keys and the build's."""
    return {"missing_answer": FLAG, **error_fields("init_"),
            # what common.gradients records: the parameters a backward pass does not reach
            **{f"grad/{key}": NONE for key in ("cut", "cut_free")},
            **{f"grad/{key}/#": text(200) for key in ("cut", "cut_free")}, "grad/out_needs_grad": FLAG,
            "grad/by/#": text(20), "grad/error": text(2200)}


def params_fields(key):
    """[[name, shape], ...] of named parameters, buffers or tensors."""
    return {f"{key}/#/0": text(200), f"{key}/#/1/#": COUNT}


class Schema:
    """A lesson's table: {path pattern: Leaf}. A pattern's parts are dict keys, '#' (any list
    index), a list index ('0') or '*' (any dict key). A path that is a strict prefix of a
    pattern is a container, which may be empty."""

    def __init__(self, fields):
        self.fields = {tuple(p.split(SEP)): leaf for p, leaf in fields.items()}
        self._seen = {}         # name -> its match: every learner's record has the same names

    @staticmethod
    def _fits(part, want):
        if want == "#":
            return part.isdigit()
        if want == "*":
            return not part.isdigit()
        return part == want

    def _match(self, parts):
        """(the Leaf at `parts`, or None; whether `parts` is a container's path)."""
        leaf, container = None, False
        for pattern, spec in self.fields.items():
            if len(pattern) < len(parts) or not all(self._fits(a, b) for a, b in zip(parts, pattern)):
                continue
            if len(pattern) == len(parts):
                leaf = leaf or spec
            else:
                container = True
        return leaf, container

    def check_name(self, name):
        parts = name.split(SEP)
        if len(name) > 300 or not all(p.isdigit() and int(p) < MAX_INDEX and (p == "0" or p[0] != "0")
                                      or KEY.match(p) for p in parts):
            raise RecordRejected(f"{name[:60]!r} is not a record's name")
        if name not in self._seen:
            if len(self._seen) > 100_000:
                self._seen.clear()
            self._seen[name] = self._match(parts)
        return self._seen[name]


def _tensor_header(name, entry, leaf, container):
    if leaf is None or "tensor" not in leaf.kinds:
        raise RecordRejected(f"{name}: the checks record no tensor here")
    if not isinstance(entry, dict) or set(entry) != {"dtype", "shape", "data_offsets"}:
        raise RecordRejected(f"{name}: not a tensor's header")
    dtype, shape = _ST_DTYPES.get(entry["dtype"]), entry["shape"]
    if dtype not in leaf.dtypes:
        raise RecordRejected(f"{name}: a tensor of {entry['dtype']!r}, the checks record {'/'.join(leaf.dtypes)}")
    if not (isinstance(shape, list) and len(shape) <= leaf.rank
            and all(isinstance(n, int) and not isinstance(n, bool) and 0 <= n <= MAX_NUMEL for n in shape)):
        raise RecordRejected(f"{name}: a tensor's shape must have at most {leaf.rank} dimensions")
    if math.prod(shape) > MAX_NUMEL:
        raise RecordRejected(f"{name}: a tensor of {math.prod(shape)} numbers, more than {MAX_NUMEL}")


_KIND = {bool: "bool", int: "int", float: "float", str: "str", type(None): "none"}


def _value(name, value, leaf, container):
    if container and value in ([], {}) and type(value) in (list, dict):
        return
    kind = _KIND.get(type(value))
    if leaf is None or kind is None or kind not in leaf.kinds:
        raise RecordRejected(f"{name}: the checks record no {type(value).__name__} here")
    if kind == "str" and len(value) > leaf.limit:
        raise RecordRejected(f"{name}: {len(value)} characters, more than {leaf.limit}")
    if kind == "int" and not -2 ** 63 <= value < 2 ** 63:
        raise RecordRejected(f"{name}: an integer out of range")


def _header(data):
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise RecordRejected("a record is bytes")
    if len(data) > MAX_BYTES:
        raise RecordRejected(f"{len(data)} bytes, more than {MAX_BYTES}")
    if len(data) < 8:
        raise RecordRejected("too short to hold a header")
    (n,) = struct.unpack("<Q", bytes(data[:8]))
    if n > HEADER_LIMIT or 8 + n > len(data):
        raise RecordRejected("its header's length does not fit")
    try:
        header = json.loads(bytes(data[8:8 + n]))
    except (ValueError, UnicodeDecodeError, RecursionError):
        raise RecordRejected("its header is not JSON") from None
    if not isinstance(header, dict):
        raise RecordRejected("its header is not a JSON object")
    meta = header.pop("__metadata__", None)
    if not (isinstance(meta, dict) and set(meta) == {"format", "values"} and meta["format"] == FORMAT
            and isinstance(meta["values"], str)):
        raise RecordRejected(f"it is not a {FORMAT} record")
    try:
        values = json.loads(meta["values"])
    except (ValueError, RecursionError):
        raise RecordRejected("its values are not JSON") from None
    if not isinstance(values, dict):
        raise RecordRejected("its values are not a JSON object")
    return header, values


def decode(data, schema):
    """The record in `data`, checked against `schema` before anything in it is built; raises
    RecordRejected. The result is a plain tree: dicts, lists, tensors and JSON values."""
    header, values = _header(data)
    if len(header) + len(values) > MAX_LEAVES:
        raise RecordRejected(f"more than {MAX_LEAVES} entries")
    if set(header) & set(values):
        raise RecordRejected("a name is both a tensor and a value")
    for name, entry in header.items():
        _tensor_header(name, entry, *schema.check_name(name))
    for name, value in values.items():
        _value(name, value, *schema.check_name(name))
    from safetensors import SafetensorError
    from safetensors.torch import load
    try:
        tensors = load(bytes(data))     # checks every offset: in the buffer, contiguous, no overlap
    except (SafetensorError, ValueError, RuntimeError) as exc:
        raise RecordRejected(f"its tensors do not parse ({str(exc)[:80]})") from None
    if set(tensors) != set(header):
        raise RecordRejected("its tensors are not those its header names")
    return _tree({**values, **tensors})


def as_data(rec, schema):
    """`rec` as a judge at grading time sees it: encoded and decoded against `schema` (tuples
    are lists, tensors float32 or int64). Raises RecordRejected as decode does."""
    return decode(encode(rec), schema)


def _tree(leaves):
    """The nested record from {path: leaf}: a node whose children are list indices 0..n-1 is a
    list, one whose children are names a dict; a path both a leaf and a container is refused."""
    root = {}
    for name, value in leaves.items():
        node, parts = root, name.split(SEP)
        for part in parts[:-1]:
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                raise RecordRejected(f"{name}: under a path that is a value")
            node = child
        if parts[-1] in node:
            raise RecordRejected(f"{name}: a path that is a container")
        node[parts[-1]] = _Empty(value) if type(value) in (list, dict) else value
    return _build(root, "")


class _Empty:
    """An empty list or dict standing as a leaf (a plain dict in the tree is a container)."""
    def __init__(self, value):
        self.value = value


def _build(node, path):
    if isinstance(node, _Empty):
        return type(node.value)()
    if not isinstance(node, dict):
        return node
    keys = list(node)
    if keys and all(k.isdigit() for k in keys):
        if sorted(int(k) for k in keys) != list(range(len(keys))):
            raise RecordRejected(f"{path}: a list's items are not numbered 0 to {len(keys) - 1}")
        return [_build(node[str(i)], f"{path}/{i}") for i in range(len(keys))]
    if any(k.isdigit() for k in keys):
        raise RecordRejected(f"{path}: a list's items beside names")
    return {k: _build(v, f"{path}/{k}".lstrip("/")) for k, v in node.items()}
