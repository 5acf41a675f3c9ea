"""The grading service's queue: one SQLite file in the course folder (grading_service.sqlite).

What it guarantees to every process that opens the file (the service, the service after a
restart, `tinygpt-grading-service status`):

- durable: a submission is on disk when add() returns; a restart of the service or of the hub
  loses no waiting submission;
- in order: claim() hands out the oldest due entry first (the order they were added);
- each once: a duplicate event (the same inbound folder seen again: a rescan, a restart) returns
  the entry already there; two claimers, in two processes, never get the same entry; a GRADED
  entry is never handed out again;
- a crash is retried, then flagged: an entry whose grading failed (failed()) or whose grader died
  (recover()) is queued again until it was tried max_attempts times, then FLAGGED with the reason,
  for the teacher;
- the latest only: a newer submission of the same learner and assignment replaces one still
  waiting (SUPERSEDED: nbgrader's collect takes the newest files anyway), and waits while an
  older one is being graded (both would be collected into one folder);
- a rate limit per learner (per_minute, per_day): a submission over it is HELD until the time it
  may be graded (or REFUSED with that time: refuse_over_limit=True); other learners go on;
- names are data: student and assignment are nbgrader ids, the key one file name; anything else
  is refused before it is stored.

Every decision is made on the states (State); an entry's `reason` is for people.

The gradebook's lock (tinygpt_course.classroom.lock) is an flock on the gradebook's folder that
every nbgrader Gradebook holds while it is open: nbgrader writes gradebook.db through SQLAlchemy's
deferred transactions, and graders writing at once would meet "database is locked". The queue is
another file, which only this module writes, each change in one BEGIN IMMEDIATE transaction:
SQLite's own lock on that file already makes its writers take turns, so the queue does not take
the gradebook's lock (add() and `status` would wait behind a whole autograde). The queue never
opens the gradebook; the runner's nbgrader steps do, under the gradebook's lock, so the service
and a tinygpt-grade-class run take turns there.
"""
import contextlib
import dataclasses
import datetime
import enum
import json
import os
import re
import sqlite3
import threading
import time

MINUTE, DAY = 60.0, 86400.0
STOPPED = "the grading service stopped while grading it"      # recover()'s reason


class State(str, enum.Enum):
    QUEUED = "queued"            # waiting, due now
    HELD = "held"                # over the learner's rate limit: due at not_before
    GRADING = "grading"          # claimed by `owner`
    GRADED = "graded"            # done: `result` holds the scores
    FLAGGED = "flagged"          # failed max_attempts times: for the teacher (reason)
    SUPERSEDED = "superseded"    # a newer submission of the same learner and assignment replaced it
    REFUSED = "refused"          # over the rate limit (refuse_over_limit): may submit again at not_before


@dataclasses.dataclass(frozen=True)
class Entry:
    """One submission in the queue. Times are clock() seconds (time.time by default)."""
    id: int                      # the order of arrival (never reused)
    student: str
    assignment: str
    key: str                     # the inbound folder's name: what makes two events one submission
    submitted: str               # its timestamp, as nbgrader wrote it
    state: State
    attempts: int                # how many times it was claimed
    reason: str | None           # why it is held, refused, superseded, flagged; or an earlier attempt's failure
    not_before: float | None     # HELD, REFUSED: when it may be graded (submitted again)
    enqueued: float
    started: float | None        # the last claim
    finished: float | None
    owner: str | None            # GRADING: who grades it (recover() asks whether it is alive)
    result: dict | None          # GRADED: {"scores": {check: [score, max]}, "total": [s, m], "feedback": bool}
    first_started: float | None = None    # the first claim: what the rate limit counts


class QueueError(Exception):
    """A call the entry's state does not allow (done() on an entry no longer being graded)."""


class QueueFileError(QueueError):
    """The file is not a grading queue this code can use. It is left exactly as it was."""


class BadName(ValueError):
    """A student, assignment, key or timestamp unlike what nbgrader makes: refused, never stored."""


# -- names: what a learner can choose (an inbound folder's name) is checked before it is stored --

ID = re.compile(r"[A-Za-z0-9_-]{1,64}")       # an nbgrader id as the course makes them
CONTROL = re.compile(r"[\x00-\x1f\x7f]")        # a terminal's escapes among them


def _check_submission(student, assignment, key, submitted):
    """The submission's time in seconds, or BadName."""
    for what, name in (("student", student), ("assignment", assignment)):
        if not (isinstance(name, str) and ID.fullmatch(name)):
            raise BadName(f"{what} {name!r:.80} is not an nbgrader id (letters, digits, _ and -, 64 at most)")
    try:
        size = len(key.encode())                 # surrogates (undecodable file names) raise
    except (AttributeError, UnicodeEncodeError):
        size = 0
    if not 0 < size <= 255 or "/" in key or key in (".", "..") or CONTROL.search(key):
        raise BadName(f"key {key!r:.300} is not one file name (255 bytes at most, no '/', no control character)")
    try:
        text = submitted.removesuffix(" UTC").removesuffix("Z") if len(submitted) <= 64 else "?"
        when = datetime.datetime.fromisoformat(text)    # nbgrader's "2026-12-04 20:00:00.000000 UTC"
    except (TypeError, AttributeError, ValueError):
        raise BadName(f"submitted {submitted!r:.80} is not a timestamp") from None
    return (when if when.tzinfo else when.replace(tzinfo=datetime.timezone.utc)).timestamp()


def _bounded(text, limit):
    """Text for people: a control character but tab and newline shown as "?", `limit` characters at most."""
    text = CONTROL.sub(lambda m: m[0] if m[0] in "\t\n" else "?", str(text))
    return text if len(text) <= limit else text[:limit - 1] + "…"


def _result_json(result):
    def pair(v):
        return (isinstance(v, (list, tuple)) and len(v) == 2
                and all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in v))
    scores = result.get("scores") if isinstance(result, dict) else None
    if not (isinstance(scores, dict) and all(isinstance(k, str) and pair(v) for k, v in scores.items())
            and pair(result.get("total")) and isinstance(result.get("feedback"), bool)):
        raise ValueError('a result is {"scores": {check id: [score, max]}, "total": [score, max], "feedback": bool}')
    return json.dumps(result, sort_keys=True, allow_nan=False)


def _may_start_at(starts, now, limits):
    """When a learner whose gradings started at `starts` may start another: `now` when under every
    (limit, window) -- rolling windows; limit None: none -- else the first moment all allow it."""
    at = now
    for limit, window in limits:
        recent = sorted(s for s in starts if s > now - window)
        if limit is not None and len(recent) >= limit:
            at = max(at, recent[len(recent) - limit] + window)    # when enough of them have aged out
    return at


# -- the file --

APPLICATION_ID = 0x54475153      # "TGQS", in the file's header: this SQLite file is a grading queue
SCHEMA_VERSION = 1               # PRAGMA user_version: a file of another version is refused, not migrated
SCHEMA = [
    """CREATE TABLE entries (
        id INTEGER PRIMARY KEY AUTOINCREMENT, student TEXT NOT NULL, assignment TEXT NOT NULL,
        key TEXT NOT NULL UNIQUE, submitted TEXT NOT NULL, submitted_at REAL NOT NULL,
        state TEXT NOT NULL, attempts INTEGER NOT NULL DEFAULT 0, reason TEXT, not_before REAL,
        enqueued REAL NOT NULL, started REAL, finished REAL, owner TEXT, result TEXT, first_started REAL)""",
    "CREATE INDEX entries_state ON entries (state, id)",
    "CREATE INDEX entries_learner ON entries (student, assignment)",
]
DUE = f"(state = '{State.QUEUED.value}' OR (state = '{State.HELD.value}' AND not_before <= :now))"
WAITING = (State.QUEUED.value, State.HELD.value)
# no submission of the entry's learner and assignment is being graded
FREE = (f"NOT EXISTS (SELECT 1 FROM entries AS g WHERE g.student = entries.student "
        f"AND g.assignment = entries.assignment AND g.state = '{State.GRADING.value}')")


def _is_empty(db, path):
    """True for a new file, False for a queue of this version; QueueFileError for anything else
    (only read: another program's file is not touched)."""
    app, = db.execute("PRAGMA application_id").fetchone()
    version, = db.execute("PRAGMA user_version").fetchone()
    tables, = db.execute("SELECT COUNT(*) FROM sqlite_master").fetchone()
    if (app, version, tables) == (0, 0, 0):
        return True
    if app != APPLICATION_ID:
        raise QueueFileError(f"{path} is another program's SQLite file, not a grading queue; it was "
                             "left as it is: give the grading service a file of its own")
    if version != SCHEMA_VERSION:
        raise QueueFileError(f"{path} is a grading queue of schema {version}, this code reads "
                             f"{SCHEMA_VERSION}; it was left as it is")
    return False


def _open(path, timeout):
    """A connection to the queue's file, made (0600, with the schema) when new."""
    try:        # made here: sqlite3.connect would make it 0644 under the usual umask, and it holds grades
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
    except FileExistsError:
        pass    # SQLite makes the -wal and -shm files with the database file's mode
    # isolation_level=None: sqlite3 opens no transaction of its own; each method opens exactly one
    db = sqlite3.connect(path, timeout=timeout, isolation_level=None, check_same_thread=False)
    db.row_factory = sqlite3.Row
    try:
        _is_empty(db, path)
        # WAL: readers (status, position()) neither wait for a writer nor block one, and a commit
        # is one append to the -wal file. The mode is kept in the file, for every process that
        # opens it. It needs every process on one machine (the -shm file is shared memory).
        if db.execute("PRAGMA journal_mode=WAL").fetchone()[0] != "wal":
            raise QueueFileError(f"{path}: SQLite cannot keep it in WAL mode (a network filesystem?)")
        # FULL: a commit is on disk when it returns (NORMAL may lose the last ones to a power cut:
        # a grade recorded, lost, and graded again)
        db.execute("PRAGMA synchronous=FULL")
        db.execute("BEGIN IMMEDIATE")
        if _is_empty(db, path):              # again, under the lock: two services may start at once
            for statement in SCHEMA:
                db.execute(statement)
            db.execute(f"PRAGMA application_id={APPLICATION_ID}")
            db.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
        db.execute("COMMIT")
    except sqlite3.DatabaseError as e:
        db.close()
        if e.sqlite_errorname not in ("SQLITE_NOTADB", "SQLITE_CORRUPT"):
            raise                       # locked, unreadable, a full disk: said as SQLite says it
        raise QueueFileError(f"{path} is not an SQLite file the grading queue can read ({e}); it was "
                             "left as it is: move it aside to start an empty queue") from e
    except BaseException:
        db.close()
        raise
    return db


def _entry(row):
    fields = {f.name: row[f.name] for f in dataclasses.fields(Entry)}
    result = fields["result"]
    return Entry(**{**fields, "state": State(fields["state"]),
                    "result": None if result is None else json.loads(result)})


class QueueFile:
    """The queue's file and what it shows (the entries, a place in the queue, the summary);
    Queue adds the changes. Open one per process (an SQLite connection must not be used across a
    fork); its methods may be called from several threads."""

    # Every change is one BEGIN IMMEDIATE transaction: it takes the file's write lock before its
    # first read, so what a claim reads (the oldest due entry, the learner's recent gradings)
    # cannot change before it writes; two claimers take turns, and the second sees the first's
    # claim. A deferred BEGIN would read a snapshot and then fail to write ("database is locked",
    # at once: waiting cannot mend a stale snapshot) when another claimer wrote in between; with no
    # transaction both would claim the same entry. `timeout`: how long to wait for the lock.
    BEGIN = "BEGIN IMMEDIATE"

    def __init__(self, path, *, clock=time.time, timeout=60.0):
        self.path, self.clock = os.fspath(path), clock
        self._lock = threading.RLock()        # one connection, one transaction at a time
        self._db = _open(self.path, timeout)

    @contextlib.contextmanager
    def _transaction(self, begin):
        with self._lock:
            self._db.execute(begin)
            try:
                yield self._db
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

    def _select(self, sql, params=()):
        with self._lock:            # one statement: one snapshot
            return [_entry(row) for row in self._db.execute(sql, params)]

    def close(self):
        with self._lock:
            self._db.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def get(self, entry_id):
        found = self._select("SELECT * FROM entries WHERE id = ?", (entry_id,))
        if not found:
            raise QueueError(f"no entry {entry_id}")
        return found[0]

    def entries(self, student=None, assignment=None, states=None):
        """The entries, oldest first, of that student, assignment and states (None: any)."""
        clauses, params = [], []
        for clause, value in (("student = ?", student), ("assignment = ?", assignment)):
            if value is not None:
                clauses.append(clause)
                params.append(value)
        if states is not None:
            states = [State(s).value for s in states]
            clauses.append(f"state IN ({', '.join('?' * len(states))})")
            params += states
        where = " WHERE " + " AND ".join(clauses) if clauses else ""
        return self._select(f"SELECT * FROM entries{where} ORDER BY id", params)

    def position(self, entry_id):
        """Its 1-based place among the due entries, in the order claim() takes them (None: not due,
        or waiting for the grading of an older submission of its learner and assignment)."""
        ids = [e.id for e in self._select(f"SELECT * FROM entries WHERE {DUE} AND {FREE} ORDER BY id",
                                          {"now": self.clock()})]
        return ids.index(entry_id) + 1 if entry_id in ids else None

    def latest(self, student, assignment):
        """The entry of that learner's newest submission of the assignment, whatever its state."""
        found = self._select("SELECT * FROM entries WHERE student = ? AND assignment = ? "
                             "ORDER BY submitted_at DESC, id DESC LIMIT 1", (student, assignment))
        return found[0] if found else None

    def next_due(self):
        """When claim() may next hand out an entry: now when one is due, else the earliest HELD
        entry's time; None when nothing waits but behind a grading (the service may sleep until
        then, or until a new submission or the end of a grading)."""
        waiting = self._select(f"SELECT * FROM entries WHERE state IN {WAITING} AND {FREE}")
        return min((max(e.not_before or 0, self.clock()) for e in waiting), default=None)

    def summary(self, last=10):
        """{"counts": {State: n}, "oldest_queued": the oldest waiting (QUEUED or HELD) Entry or None,
        "last_graded": the `last` GRADED entries, newest first, "flagged": the FLAGGED entries}."""
        with self._transaction("BEGIN"):       # several reads, one snapshot
            counts = dict(self._db.execute("SELECT state, COUNT(*) FROM entries GROUP BY state").fetchall())
            oldest = self._select(f"SELECT * FROM entries WHERE state IN {WAITING} ORDER BY id LIMIT 1")
            graded = self._select("SELECT * FROM entries WHERE state = ? ORDER BY finished DESC, id DESC "
                                  "LIMIT ?", (State.GRADED.value, last))
            flagged = self.entries(states=[State.FLAGGED])
        return {"counts": {s: counts.get(s.value, 0) for s in State}, "oldest_queued": (oldest or [None])[0],
                "last_graded": graded, "flagged": flagged}


class Queue(QueueFile):
    """The queue's changes: add, claim, done, failed (the service's), recover (at its start),
    retry (the teacher's). Each is one transaction, and returns the entries it changed as they are after it."""

    def __init__(self, path, *, per_minute=1, per_day=20, max_attempts=2, clock=time.time,
                 refuse_over_limit=False, timeout=60.0):
        for name, n in (("per_minute", per_minute), ("per_day", per_day), ("max_attempts", max_attempts)):
            if not (n is None and name != "max_attempts" or isinstance(n, int) and n >= 1):
                raise ValueError(f"{name} is a whole number, 1 or more (a limit may be None: no limit)")
        self.limits = ((per_minute, MINUTE), (per_day, DAY))
        self.over_limit = "over the rate limit of " + " and ".join(
            f"{n} a {unit}" for n, unit in ((per_minute, "minute"), (per_day, "day")) if n is not None)
        self.max_attempts, self.refuse_over_limit = max_attempts, refuse_over_limit
        super().__init__(path, clock=clock, timeout=timeout)

    def add(self, student, assignment, key, submitted):
        """Queue a submission (the event of its inbound folder)."""
        at = _check_submission(student, assignment, key, submitted)
        now = self.clock()
        with self._transaction(self.BEGIN) as db:
            row = db.execute("SELECT * FROM entries WHERE key = ?", (key,)).fetchone()
            if row is not None:                  # a duplicate event: still one entry
                if (row["student"], row["assignment"]) != (student, assignment):
                    raise BadName(f"key {key!r} is queued already for {row['student']}, {row['assignment']}")
                return _entry(row)
            newer = db.execute(
                "SELECT key FROM entries WHERE student = ? AND assignment = ? AND state != ? "
                "AND submitted_at > ? ORDER BY submitted_at DESC LIMIT 1",
                (student, assignment, State.REFUSED.value, at)).fetchone()
            state, reason = ((State.SUPERSEDED, f"replaced by the newer submission {newer['key']}")
                             if newer else (State.QUEUED, None))
            new = db.execute(
                "INSERT INTO entries (student, assignment, key, submitted, submitted_at, state, reason, "
                "enqueued) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (student, assignment, key, submitted, at, state.value, reason, now)).lastrowid
            if not newer:                        # this one replaces the older ones still waiting
                db.execute(
                    "UPDATE entries SET state = ?, reason = ?, finished = ? WHERE student = ? "
                    f"AND assignment = ? AND id != ? AND state IN {WAITING}",
                    (State.SUPERSEDED.value, f"replaced by the newer submission {key}", now,
                     student, assignment, new))
            return self.get(new)

    def claim(self, owner):
        """The oldest due entry, now GRADING by `owner`; None when none is due."""
        if not (isinstance(owner, str) and 0 < len(owner) <= 200 and not CONTROL.search(owner)):
            raise ValueError(f"owner {owner!r:.80} is a name (200 characters at most)")
        now = self.clock()
        with self._transaction(self.BEGIN) as db:
            row = self._choose(db, now)
            if row is None:
                return None
            db.execute("UPDATE entries SET state = ?, owner = ?, attempts = attempts + 1, started = ?, "
                       "first_started = COALESCE(first_started, ?), not_before = NULL WHERE id = ?",
                       (State.GRADING.value, owner, now, now, row["id"]))
            return self.get(row["id"])

    def _choose(self, db, now):
        """The oldest due entry that may start. Not while an older submission of the same learner
        and assignment is being graded (FREE: both would collect into one folder); not over the
        rate limit: such an entry is HELD (REFUSED) until the time the limit names, and the next
        is tried. A retry was counted when it was first claimed."""
        for row in db.execute(f"SELECT * FROM entries WHERE {DUE} AND {FREE} ORDER BY id", {"now": now}).fetchall():
            if row["first_started"] is not None:
                return row
            starts = [s for s, in db.execute(
                "SELECT first_started FROM entries WHERE student = ? AND first_started > ?",
                (row["student"], now - DAY))]
            at = _may_start_at(starts, now, self.limits)
            if at <= now:
                return row
            state = State.REFUSED if self.refuse_over_limit else State.HELD
            db.execute("UPDATE entries SET state = ?, not_before = ?, reason = ?, finished = ? WHERE id = ?",
                       (state.value, at, self.over_limit, now if state is State.REFUSED else None, row["id"]))
        return None

    def done(self, entry_id, result, *, owner=None):
        """Record the grade of an entry being graded (by `owner`, when given): GRADED."""
        text = _result_json(result)
        with self._transaction(self.BEGIN) as db:
            self._grading(entry_id, owner)
            db.execute("UPDATE entries SET state = ?, result = ?, finished = ?, owner = NULL WHERE id = ?",
                       (State.GRADED.value, text, self.clock(), entry_id))
            return self.get(entry_id)

    def failed(self, entry_id, reason, *, owner=None):
        """Grading it failed: QUEUED again while attempts < max_attempts, else FLAGGED; the reason is kept."""
        reason = _bounded(reason, 2000)
        with self._transaction(self.BEGIN) as db:
            again = self._grading(entry_id, owner).attempts < self.max_attempts
            db.execute("UPDATE entries SET state = ?, reason = ?, finished = ?, owner = NULL WHERE id = ?",
                       (State.QUEUED.value if again else State.FLAGGED.value, reason,
                        None if again else self.clock(), entry_id))
            return self.get(entry_id)

    def _grading(self, entry_id, owner):
        entry = self.get(entry_id)
        if entry.state is not State.GRADING or owner is not None and entry.owner != owner:
            raise QueueError(f"entry {entry_id} is not being graded{f' by {owner}' if owner else ''} "
                             f"(it is {entry.state.value}, by {entry.owner})")
        return entry

    def recover(self, alive):
        """At start: each entry GRADING by an owner not alive(owner) fails with STOPPED."""
        grading = self.entries(states=[State.GRADING])
        dead = {owner for owner in {e.owner for e in grading} if not alive(owner)}
        recovered = []
        for e in grading:
            if e.owner in dead:
                with contextlib.suppress(QueueError):     # finished meanwhile
                    recovered.append(self.failed(e.id, STOPPED, owner=e.owner))
        return recovered

    def retry(self, entry_id):
        """The teacher's: a FLAGGED entry QUEUED again, its attempts from 0 (not counted again)."""
        with self._transaction(self.BEGIN) as db:
            entry = self.get(entry_id)
            if entry.state is not State.FLAGGED:
                raise QueueError(f"entry {entry_id} is {entry.state.value}, not flagged")
            db.execute("UPDATE entries SET state = ?, attempts = 0, finished = NULL WHERE id = ?",
                       (State.QUEUED.value, entry_id))
            return self.get(entry_id)
