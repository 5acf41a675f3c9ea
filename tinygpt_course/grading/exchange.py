"""nbgrader's exchange, taking data, not paths: collect and release_feedback.

**CheckedCollect** (``c.ExchangeFactory.collect``). Stock ``nbgrader collect`` copies each
student's newest inbound submission with ``shutil.copytree``, as the teacher. A student owns
their own inbound submission and may change it after submitting: a symlink there (their
notebook -> the teacher's ``source/<lesson>/<lesson>.ipynb``, ``notes.html`` -> the gradebook)
is followed with the teacher's rights, and the solution is graded, fed back and released to
them; an 1100-deep folder chain makes copytree raise RecursionError and nobody is collected; a
submission past ``max_dir_size`` or with a name that is not ``student+assignment+timestamp``
stops the collect for everyone after it. Here each submission is copied by handle
(``SubmissionTree``: regular files and folders only, never following a link, within bounds) into
a folder of the teacher's, and only a clean copy replaces ``submitted/<student>/<assignment>``.
A submission that is not data, or whose files belong to another user than the student it names
(``nbgrader submit --student=alice`` run by bob: stock collect only warns, and with ``--update``
replaces alice's real submission), stays in inbound, is not collected, and is logged as an error
naming the student and the thing refused; that student's newest acceptable submission is
collected instead (the rule of ``before_duedate`` kept), and the rest of the class is collected.

**CheckedReleaseFeedback** (``c.ExchangeFactory.release_feedback``). Stock release_feedback
publishes every ``feedback/<student>/<assignment>/*.html``, following links; feedback/ holds
copies of every file of the submission, so a learner's ``notes.html`` (the gradebook, say, with a
collect that followed links) was published to them. Here only ``<notebook>.html`` of the
assignment's own notebooks (by name, from the gradebook) is published, each a regular file
opened without following links, within ``max_file_size``.
"""
import glob
import os
import re
import shutil
import stat
import tempfile

from nbgrader.exchange.default.collect import ExchangeCollect
from nbgrader.exchange.default.release_feedback import ExchangeReleaseFeedback

from .submission_tree import Refusal, SubmissionTree, shown

_READ = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
SECRET_BYTES = 4096      # submission_secret.txt and timestamp.txt: nbgrader writes 128 and 32 characters


class CheckedCollect(ExchangeCollect):

    def init_src(self):
        # nbgrader's init_src parses every inbound name first and fails the whole collect on one
        # that is not student+assignment+time: its set-up, then each name on its own
        if self.coursedir.course_id == "":
            self.fail("No course id specified. Re-run with --course flag.")
        self.course_path = os.path.join(self.root, self.coursedir.course_id)
        self.inbound_path = os.path.join(self.course_path, "inbound")
        if not os.path.isdir(self.inbound_path):
            self.fail(f"Course not found: {self.inbound_path}")
        from nbgrader.api import Gradebook, MissingEntry
        with Gradebook(self.coursedir.db_url, self.coursedir.course_id) as gb:
            try:
                self.duedate = gb.find_assignment(self.coursedir.assignment_id).duedate
            except MissingEntry:
                self.duedate = None
        student = self.coursedir.student_id or "*"
        pattern = os.path.join(self.inbound_path, f"{student}+{self.coursedir.assignment_id}+*")
        by_student = {}
        self.refused = []           # (inbound name, Refusal): not collected
        for path in glob.glob(pattern):
            try:
                rec = self._path_to_record(path)
            except Exception as exc:       # not student+assignment+time (ExchangeError, ValueError...)
                self._refuse(os.path.basename(path), Refusal("other", shown(os.path.basename(path)),
                                                             f"is not a submission's name ({exc})"))
                continue
            by_student.setdefault(rec["username"], []).append(rec)
        # Copied here, by handle, newest acceptable first: the copy is the check (nothing is looked
        # up again by name after it was checked), and a refused newest falls back to the one before
        self.staging = tempfile.mkdtemp(prefix=".collect-", dir=self.coursedir.root)
        self.staged = {}
        self.src_records = []
        for name, records in by_student.items():
            for rec in self._preferred(records):
                path = os.path.join(self.inbound_path, rec["filename"])
                copy = os.path.join(self.staging, f"{len(self.staged)}")
                refusal = SubmissionTree(parent=self).copy(path, copy, rec["username"])
                if refusal is None:
                    self.staged[path] = copy
                    self.src_records.append(rec)
                    break
                self._refuse(rec["filename"], refusal)

    def _refuse(self, name, refusal):
        """Log a refused inbound submission (name: its folder's); it stays in inbound."""
        self.refused.append((name, refusal))
        self.log.error("not collected: %s", refusal)      # its path starts with the inbound name: the student's

    def _preferred(self, records):
        """A student's submissions in the order collect takes them: nbgrader's rule (the newest;
        with before_duedate, the newest not late first), then the others, newest first."""
        records = self._sort_by_timestamp(records)
        if self.duedate is not None and self.before_duedate:
            return [r for r in records if r["timestamp"] <= self.duedate] + \
                   [r for r in records if r["timestamp"] > self.duedate]
        return records

    def do_copy(self, src, dest, log=None):
        """The checked copy made in init_src, renamed into place (nbgrader removed any older one)."""
        os.rename(self.staged.pop(src), dest)

    def copy_files(self):
        try:
            super().copy_files()
        finally:
            shutil.rmtree(self.staging, ignore_errors=True)


class CheckedReleaseFeedback(ExchangeReleaseFeedback):

    def copy_files(self):
        from nbgrader.api import Gradebook, MissingEntry
        from nbgrader.utils import notebook_hash
        with Gradebook(self.coursedir.db_url, self.coursedir.course_id) as gb:
            try:
                names = sorted(nb.name for nb in gb.find_assignment(self.coursedir.assignment_id).notebooks)
            except MissingEntry:
                names = []
        exclude = set(filter(None, (self.coursedir.student_id_exclude or "").split(",")))
        limit = 1000 * self.coursedir.max_file_size
        pattern = self.coursedir.format_path(self.coursedir.feedback_directory, "*", self.coursedir.assignment_id)
        regexp = re.compile(self.coursedir.format_path(self.coursedir.feedback_directory, "(?P<student>[^/]+)",
                                                       re.escape(self.coursedir.assignment_id), escape=True) + "$")
        wanted = self.coursedir.student_id or "*"
        for folder in sorted(glob.glob(pattern)):
            m = regexp.match(folder)
            if not m or m["student"] in exclude or (wanted != "*" and m["student"] != wanted):
                continue
            student = m["student"]
            try:
                secret = _read(folder, "submission_secret.txt", SECRET_BYTES).decode()
                timestamp = _read(folder, "timestamp.txt", SECRET_BYTES).decode()
            except (OSError, ValueError) as exc:
                self.log.error("feedback not released: %s/%s: %s", student, self.coursedir.assignment_id, exc)
                continue
            for name in names:
                try:
                    data = _read(folder, f"{name}.html", limit)
                except FileNotFoundError:
                    continue
                except (OSError, ValueError) as exc:
                    self.log.error("feedback not released: %s/%s/%s.html: %s", student,
                                   self.coursedir.assignment_id, name, exc)
                    continue
                checksum = notebook_hash(secret=secret, notebook_id=name)
                tmp = os.path.join(self.dest_path, f"{checksum}-tmp.html")
                self.log.info("Releasing feedback for student '%s' on assignment '%s/%s/%s' (%s)", student,
                              self.coursedir.course_id, self.coursedir.assignment_id, name, shown(timestamp))
                fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
                with os.fdopen(fd, "wb") as f:
                    f.write(data)
                os.chmod(tmp, 0o644)
                final = os.path.join(self.dest_path, f"{checksum}.html")
                os.rename(tmp, final)          # atomically, as nbgrader's shutil.move does
                self.log.info("Feedback released to: %s", final)


def _read(folder, name, limit):
    """The bytes of folder/name, a regular file opened without following a link, at most limit."""
    fd = os.open(os.path.join(folder, name), _READ)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ValueError(f"{name} is not a regular file")
        with os.fdopen(os.dup(fd), "rb") as f:      # at most limit + 1 bytes: one more says too many
            data = f.read(limit + 1)
        if len(data) > limit:
            raise ValueError(f"{name} holds more than {limit} bytes")
        return data
    finally:
        os.close(fd)
