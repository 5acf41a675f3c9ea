"""What nbgrader does again for every cell or every gradebook access, done once per grading worker.

A worker grades submission after submission in one process (worker.py), so what nbgrader
rebuilds each time from the same constants can be built once and kept:

- **the metadata schema's validator.** nbgrader's CheckCellMetadata (in the sanitizing and the
  autograding pipelines, so twice per notebook) validates every cell's nbgrader metadata with
  ``jsonschema.validate(metadata, schema)``, which first checks the *schema* against its
  meta-schema, every call: a fifth of a worker's own CPU. The schema is nbgrader's own file;
  here it is checked once (the first call, as before) and its validator kept, as jsonschema's
  documentation advises for many instances of one schema. Every cell's metadata is still
  validated, against the same schema, raising the same error (``best_match``).
- **the gradebook's SQLAlchemy engine.** nbgrader opens the gradebook a dozen times per
  submission, each Gradebook with an engine of its own, which compiles every query anew. One
  engine per database URL (per process: a forked worker makes its own) keeps the compiled
  queries; each Gradebook still opens its own session and connection under the gradebook lock
  (lock.py), and its close() still returns them (``dispose`` closes the pool's connections).
- **the gradebook's tables.** Each Gradebook() asks the database for its table names and then,
  table by table, whether each of nbgrader's 13 exists, to create what is missing: two thirds of
  the SQL statements of a submission. Here the names are read in one query, and when every table
  is among them (always, but for a new gradebook) none is asked about again; a missing one is
  created as nbgrader does. A gradebook that is not a SQLite file is asked as nbgrader asks.
"""
import json
import os

_validators = {}
_engines = {}
_tables = {}        # engine: the table names inspect() read for the Gradebook being opened


def validate(instance, schema, cls=None, *args, **kwargs):
    """jsonschema.validate, with the schema checked and its validator built once per schema."""
    import jsonschema
    if cls is not None or args or kwargs:
        return jsonschema.validate(instance, schema, cls, *args, **kwargs)
    key = json.dumps(schema, sort_keys=True)
    validator = _validators.get(key)
    if validator is None:
        kind = jsonschema.validators.validator_for(schema)
        kind.check_schema(schema)               # raises SchemaError, as jsonschema.validate does
        validator = _validators[key] = kind(schema)
    error = jsonschema.exceptions.best_match(validator.iter_errors(instance))
    if error is not None:
        raise error


class _SchemaValidation:
    """Stands for the jsonschema module in nbgrader.nbgraderformat.common (validate only)."""
    validate = staticmethod(validate)


def create_engine(url, *args, **kwargs):
    """sqlalchemy.create_engine, one engine per URL and arguments in this process."""
    from sqlalchemy import create_engine as create
    key = (os.getpid(), str(url), args, tuple(sorted(kwargs.items())))
    engine = _engines.get(key)
    if engine is None:
        engine = _engines[key] = create(url, *args, **kwargs)
    return engine


class _Tables:
    """What sqlalchemy.inspect(engine) gives Gradebook.__init__: the table names, read in one query."""

    def __init__(self, names):
        self.names = names

    def get_table_names(self):
        return sorted(self.names)


def inspect(subject):
    """sqlalchemy.inspect, for Gradebook.__init__: a SQLite gradebook's table names in one query,
    kept for the create_all that follows (it then asks nothing if every table is there)."""
    import sqlalchemy
    if not isinstance(subject, sqlalchemy.engine.Engine) or subject.url.get_backend_name() != "sqlite":
        return sqlalchemy.inspect(subject)
    with subject.connect() as conn:
        names = {row[0] for row in conn.exec_driver_sql("SELECT name FROM sqlite_master WHERE type = 'table'")}
    _tables[subject] = names
    return _Tables(names)


def _create_all(create_all):
    def when_missing(bind=None, tables=None, checkfirst=True):
        """MetaData.create_all for nbgrader's tables, skipped when the names inspect() just read
        hold every one (the same answer as asking for each)."""
        seen = _tables.pop(bind, None) if bind is not None else None
        if (seen is not None and tables is None and checkfirst
                and {t.name for t in create_all.__self__.sorted_tables} <= seen):
            return
        create_all(bind=bind, tables=tables, checkfirst=checkfirst)
    when_missing.stock = create_all
    return when_missing


def install():
    """Make nbgrader, in this process, validate cell metadata and open gradebooks as above."""
    from nbgrader import api
    from nbgrader.nbgraderformat import common
    common.jsonschema = _SchemaValidation
    api.create_engine = create_engine
    api.inspect = inspect
    if not hasattr(api.Base.metadata.create_all, "stock"):
        api.Base.metadata.create_all = _create_all(api.Base.metadata.create_all)
