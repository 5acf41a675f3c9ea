"""A record is data (tinygpt_course/checks/record.py): what goes through, what is refused, and that
each lesson's table (tinygpt_course/checks/<lesson>/schema.py) takes every record its extract makes
of the catalogue's answers and of the solution, with the same verdicts as the record itself."""
import io
import json
import struct

import pytest
import torch

from tinygpt_course.checks import notebook, record
from tinygpt_course.checks.protocol import load_lesson
from tinygpt_course.testing import catalogue, notebooks

LESSONS = ("head", "multihead", "block", "gpt")
SCHEMA = load_lesson("multihead").schema


def ref():
    return notebook.reference("multihead")


def header_of(data):
    (n,) = struct.unpack("<Q", data[:8])
    return json.loads(data[8:8 + n]), data[8 + n:]


def rebuilt(header, body):
    text = json.dumps(header).encode()
    return struct.pack("<Q", len(text)) + text + body


def test_a_record_goes_through_as_plain_data():
    rec = {"out": torch.arange(6, dtype=torch.float64).reshape(2, 3), "head_calls": (0, 1),
           "head_outs": [torch.ones(2, dtype=torch.int32)], "error": None, "exception": "ValueError",
           "structure": {"params": [], "head_types": None, "proj_has_bias": True}}
    back = record.decode(record.encode(rec), SCHEMA)
    assert back["out"].dtype == torch.float32 and torch.equal(back["out"], rec["out"].float())
    assert back["head_calls"] == [0, 1] and back["head_outs"][0].dtype == torch.int64
    assert back["structure"] == {"params": [], "head_types": None, "proj_has_bias": True}
    assert back["error"] is None and back["exception"] == "ValueError"


@pytest.mark.parametrize("lesson", LESSONS)
def test_the_table_takes_the_solutions_record_and_nothing_more(lesson):
    rec, schema = notebook.reference(lesson), load_lesson(lesson).schema
    assert notebooks.same_record(record.as_data(rec, schema), rec)
    with pytest.raises(record.RecordRejected, match="surprise"):        # a name the table does not hold
        record.as_data({**rec, "surprise": 1}, schema)
    with pytest.raises(record.RecordRejected, match="init_error"):     # a value of a kind it does not hold
        record.as_data({**rec, "init_error": 3}, schema)
    other = next(s for s in LESSONS if s != lesson)
    with pytest.raises(record.RecordRejected):                          # another lesson's record
        record.as_data(notebook.reference(other), schema)


@pytest.mark.parametrize("lesson", LESSONS)
def test_every_catalogue_record_fits_and_is_judged_the_same(lesson):
    """The catalogue's plain answers, right and wrong: their records fit the table, and every
    check gives the same verdict on the record as the extract made it and as data."""
    import importlib
    lesson_obj = load_lesson(lesson)
    extract = importlib.import_module(lesson_obj.extract_module).extract
    seed = 5
    ref_raw = extract(notebooks.namespace(lesson, notebooks.solution(lesson)), seed)
    ref_data = record.as_data(ref_raw, lesson_obj.schema)
    answers = [a for a in catalogue.answers(lesson) if a.plain]
    assert len(answers) > 20
    for a in answers:
        raw = extract(notebooks.namespace(lesson, a.code), seed)
        data = record.as_data(raw, lesson_obj.schema)
        for gid in lesson_obj.checks:
            v1, v2 = lesson_obj.verdict(gid, raw, ref_raw), lesson_obj.verdict(gid, data, ref_data)
            assert (v1.passed, v1.kind, v1.mistake, v1.message) == (v2.passed, v2.kind, v2.mistake, v2.message), \
                (a.name, gid)


def test_the_encoder_walks_a_bounded_tree():
    g = ("Head",)
    for _ in range(64):
        g = (g, g)
    with pytest.raises(record.RecordRejected, match="nested deeper"):
        record.encode({"structure": {"head_types": g}})
    with pytest.raises(record.RecordRejected, match="longer than"):
        record.encode({"head_calls": list(range(record.MAX_INDEX + 1))})
    with pytest.raises(record.RecordRejected, match="short name"):
        record.encode({"a/b": 1})
    # a learner's own object, a tensor of no plain numbers or too many: no data, None
    big = torch.zeros(record.MAX_NUMEL + 1)
    back = record.decode(record.encode({"out": big, "error": object(), "head_outs": [torch.zeros(2, dtype=torch.complex64)]}),
                         SCHEMA)
    assert back == {"out": None, "error": None, "head_outs": [None]}


def test_pickled_bytes_and_other_formats_are_refused():
    buf = io.BytesIO()
    torch.save(ref(), buf)
    for data in (buf.getvalue(), b"", b"\x00" * 7, b"\xff" * 64, struct.pack("<Q", 10 ** 9) + b"{}",
                 "not bytes"):
        with pytest.raises(record.RecordRejected):
            record.decode(data, SCHEMA)


def test_the_header_is_checked_before_the_tensors_are_read():
    data = record.encode({"out": torch.zeros(2, 3), "head_calls": [0, 1]})
    header, body = header_of(data)
    record.decode(rebuilt(header, body), SCHEMA)                     # rebuilt as it was: fine

    def refused(change, match):
        h = json.loads(json.dumps(header))
        change(h)
        with pytest.raises(record.RecordRejected, match=match):
            record.decode(rebuilt(h, body), SCHEMA)

    refused(lambda h: h["out"].update(dtype="F64"), "float32")             # dtype off the table
    refused(lambda h: h["out"].update(shape=[1, 1, 1, 1, 1, 6]), "dimensions")
    refused(lambda h: h.update(proj=h.pop("out")), "proj")                  # a name off the table
    refused(lambda h: h["__metadata__"].update(format="pickle"), "not a")
    refused(lambda h: h["__metadata__"].update(values=json.dumps({"head_calls": [[0, 1]]})), "no list")
    refused(lambda h: h["__metadata__"].update(values=json.dumps({"exception": "x" * 201})), "characters")
    refused(lambda h: h["__metadata__"].update(values=json.dumps({"out": None})), "both")
    refused(lambda h: h["__metadata__"].update(values=json.dumps({"head_calls/1": 0})), "numbered")
    refused(lambda h: h["__metadata__"].update(values=json.dumps({"head_calls/01": 0})), "name")
    refused(lambda h: h["__metadata__"].update(values="[" * 100000), "JSON")


def test_two_names_never_share_bytes():
    """safetensors' own parser refuses offsets that overlap: no two tensors alias."""
    data = record.encode({"head_outs": [torch.zeros(4), torch.ones(4)]})
    header, body = header_of(data)
    header["head_outs/1"]["data_offsets"] = header["head_outs/0"]["data_offsets"]
    with pytest.raises(record.RecordRejected, match="do not parse"):
        record.decode(rebuilt(header, body), SCHEMA)


def test_a_path_is_a_value_or_a_container_never_both():
    data = record.encode({"structure": {"params": []}})
    header, body = header_of(data)
    header["__metadata__"]["values"] = json.dumps({"structure/params": [], "structure/params/0/0": "w"})
    with pytest.raises(record.RecordRejected, match="container|value"):
        record.decode(rebuilt(header, body), SCHEMA)
