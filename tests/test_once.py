"""classroom/once.py: what a grading worker builds once instead of for every cell or gradebook
open gives the same answers as nbgrader's own calls.

- the kept validator of nbgrader's cell-metadata schema accepts and refuses exactly what
  ``jsonschema.validate`` does, with the same error (its message and path), cell after cell;
- one SQLAlchemy engine per gradebook: a Gradebook opened inside another, and one opened after
  another process changed the file, see the rows as nbgrader's own engines would;
- the gradebook's tables read in one query at each open, not asked about one by one: a gradebook
  that has them all is left as it is, a new or emptied one gets them made.
"""
import json
import os
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest

from tinygpt_course.classroom import once

SCHEMA = json.loads((Path(__import__("nbgrader.nbgraderformat", fromlist=["x"]).__file__).parent / "v3.json")
                    .read_text())
GOOD = {"schema_version": 3, "grade": True, "solution": False, "locked": True, "points": 2, "grade_id": "shapes",
        "task": False}
BAD = [dict(GOOD, points="two"), dict(GOOD, grade_id=3), {k: v for k, v in GOOD.items() if k != "schema_version"},
       dict(GOOD, grade="yes"), dict(GOOD, schema_version="3"), [], "metadata", dict(GOOD, points=None)]


def _error(validate, instance):
    try:
        validate(instance, SCHEMA)
    except jsonschema.ValidationError as exc:
        return type(exc), exc.message, list(exc.absolute_path), list(exc.schema_path)
    return None


@pytest.mark.parametrize("instance", [GOOD, *BAD], ids=["good"] + [f"bad{i}" for i in range(len(BAD))])
def test_the_kept_validator_answers_as_jsonschema_validate(instance):
    stock = _error(jsonschema.validate, instance)
    assert _error(once.validate, instance) == stock
    assert _error(once.validate, instance) == stock          # again, with the validator kept
    assert (stock is None) == (instance is GOOD)


def test_a_wrong_schema_is_still_refused():
    with pytest.raises(jsonschema.SchemaError):
        once.validate({}, {"type": "no such type"})


@pytest.fixture
def kept(monkeypatch):
    """once.install() for this test only: what it changes in nbgrader.api is undone after."""
    from nbgrader import api
    from nbgrader.nbgraderformat import common
    for owner, name in ((common, "jsonschema"), (api, "create_engine"), (api, "inspect"),
                        (api.Base.metadata, "create_all")):
        monkeypatch.setattr(owner, name, getattr(owner, name))
    monkeypatch.setattr(once, "_tables", {})
    return once


def test_installed_nbgrader_refuses_a_bad_cell_as_before(kept):
    from nbformat.v4 import new_code_cell
    from nbgrader.nbgraderformat import v3
    cell = new_code_cell("x = 1", metadata={"nbgrader": dict(GOOD, points="two")})
    with pytest.raises(jsonschema.ValidationError) as stock:
        v3.MetadataValidatorV3().validate_cell(cell)
    kept.install()
    with pytest.raises(jsonschema.ValidationError) as ours:
        v3.MetadataValidatorV3().validate_cell(cell)
    assert ours.value.message == stock.value.message
    v3.MetadataValidatorV3().validate_cell(new_code_cell("x = 1", metadata={"nbgrader": GOOD}))


def test_one_engine_per_gradebook_sees_nested_opens_and_other_processes(tmp_path, monkeypatch):
    from nbgrader import api
    monkeypatch.setattr(api, "create_engine", once.create_engine)
    url = f"sqlite:///{tmp_path / 'gradebook.db'}"
    with api.Gradebook(url) as gb:
        gb.add_student("ann")
        with api.Gradebook(url) as inner:                       # nested: its own session on the one engine
            inner.add_student("bob")
        assert sorted(s.id for s in gb.students) == ["ann", "bob"]
    assert len({k for k in once._engines if k[1] == url}) == 1
    # another process (its own engine) adds a student: the kept engine reads it at the next open
    subprocess.run([sys.executable, "-c", "from nbgrader.api import Gradebook; import sys\n"
                    "with Gradebook(sys.argv[1]) as gb: gb.add_student('cat')", url], check=True,
                   env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    with api.Gradebook(url) as gb:
        assert sorted(s.id for s in gb.students) == ["ann", "bob", "cat"]


def _statements(url, opens=3):
    """The SQL statements nbgrader's Gradebook() sends at each of `opens` opens after the first."""
    from nbgrader import api
    from sqlalchemy import event
    from sqlalchemy.engine import Engine
    with api.Gradebook(url):
        pass
    sent = []
    listen = lambda conn, cursor, statement, *rest: sent.append(statement)
    event.listen(Engine, "before_cursor_execute", listen)     # every engine's
    try:
        for _ in range(opens):
            with api.Gradebook(url):
                pass
    finally:
        event.remove(Engine, "before_cursor_execute", listen)
    return sent


def test_the_tables_are_read_in_one_query(tmp_path, kept, monkeypatch):
    from nbgrader import api
    url = f"sqlite:///{tmp_path / 'gradebook.db'}"
    monkeypatch.setattr(api, "create_engine", once.create_engine)       # the stock tables' check first
    stock = _statements(url)
    tables = lambda sent: [s for s in sent if "sqlite_master" in s or "PRAGMA" in s]
    assert len(tables(stock)) >= 3 * 13, stock               # each table, at each open
    kept.install()
    ours = _statements(url)
    assert len(tables(ours)) == 3, ours                      # one query an open
    assert len(ours) == len(stock) - len(tables(stock)) + 3
    with api.Gradebook(url) as gb:              # and it still works: rows in, rows out
        gb.add_student("ann")
        assert [s.id for s in gb.students] == ["ann"]


def test_a_replaced_gradebook_gets_its_tables_again(tmp_path, kept):
    from nbgrader import api
    kept.install()
    path = tmp_path / "gradebook.db"
    url = f"sqlite:///{path}"
    with api.Gradebook(url) as gb:
        gb.add_student("ann")
    with api.Gradebook(url):                    # made sure of: kept
        pass
    path.unlink()
    path.write_bytes(b"")                       # another, empty file where it was
    with api.Gradebook(url) as gb:
        gb.add_student("bob")
        assert [s.id for s in gb.students] == ["bob"]
