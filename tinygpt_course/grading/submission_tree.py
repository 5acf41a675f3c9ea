"""A submission is data: regular files and folders, read by handle, within bounds.

A submitted folder is made by the learner (their inbound submission in the exchange, which they
own and may change after ``nbgrader submit``) or unpacked from an LMS zip. What is in it is
never followed as a path: a symlink there points wherever the learner likes (the teacher's
``source/<lesson>/<lesson>.ipynb``, the gradebook, ``/dev/zero``), and a reader with the
teacher's rights that opens it by name reads *that*. So ``SubmissionTree`` walks a submission

- by handle: each folder is opened with ``O_NOFOLLOW | O_DIRECTORY`` relative to its parent's
  descriptor, each entry is ``lstat``-ed relative to it, and a file is opened with
  ``O_NOFOLLOW | O_NONBLOCK`` (a FIFO swapped in never blocks the open) and ``fstat``-ed: what
  is copied is what was checked (same inode), never a name looked up again;
- iteratively (a stack of open folders, at most ``max_depth`` deep), so an 1100-deep chain is a
  refusal, not a RecursionError that stops the class;
- within bounds: ``max_depth`` and ``max_entries`` here, and nbgrader's own
  ``CourseDirectory.max_file_size`` and ``max_dir_size`` (kB, the limits ``nbgrader submit``
  applied on the learner's side) for the bytes.

Anything else (a symlink, a FIFO, a device, a socket, a file of another user, too deep, too many
entries, too many bytes) is a ``Refusal`` of the *whole* submission: nothing of it is graded.
Why whole: ``nbgrader submit`` copies a learner's folder following their links, so none of these
can come from an honest submit; grading the rest would grade something the learner did not
submit (their notebook missing, say) as if it were their work, silently.
"""
import fnmatch
import os
import pwd
import stat
from dataclasses import dataclass

from traitlets import Integer
from traitlets.config import LoggingConfigurable

# Kinds of refusal (decided on, never the message): what is not a plain file or folder, by its
# type; what is out of bounds; what belongs to someone else; what changed while it was read.
KINDS = ("symlink", "fifo", "device", "socket", "other", "too_deep", "too_many", "too_large", "owner",
         "changed", "unreadable")
_TYPES = ((stat.S_ISLNK, "symlink"), (stat.S_ISFIFO, "fifo"), (stat.S_ISCHR, "device"), (stat.S_ISBLK, "device"),
          (stat.S_ISSOCK, "socket"))
_SAYS = {"symlink": "is a symlink", "fifo": "is a FIFO (named pipe)", "device": "is a device file",
         "socket": "is a socket", "other": "is not a regular file or folder"}
_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
_CHUNK = 1 << 20


@dataclass(frozen=True)
class Refusal:
    """Why a submission is not taken: `kind` (one of KINDS), the thing refused (`path`, relative
    to the submissions' folder, shown with control characters spelled out) and what is wrong."""
    kind: str
    path: str
    detail: str

    def __str__(self):
        return f"{self.path} {self.detail}"


def shown(name, cap=120):
    """A learner-chosen name as it may be printed: no control character, at most cap characters."""
    text = "".join(ch if ch.isprintable() else repr(ch)[1:-1] for ch in name)
    return text if len(text) <= cap else text[:cap] + "..."


def kind_of(mode):
    """'folder', 'file', or the kind of refusal a thing of this mode is."""
    if stat.S_ISDIR(mode):
        return "folder"
    if stat.S_ISREG(mode):
        return "file"
    return next((kind for test, kind in _TYPES if test(mode)), "other")


def user_name(uid):
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid {uid}"


def student_uid(student):
    try:
        return pwd.getpwnam(student).pw_uid
    except KeyError:
        return None


class _Copy:
    """Where a walk writes what it reads: a folder made beforehand by the grader (dest_fd)."""

    def __init__(self, dest_fd, ignore, include):
        self.root, self.ignore, self.include = dest_fd, ignore, include

    def skipped(self, name, is_file):
        """nbgrader's own copy rule (CourseDirectory.ignore and include, as its do_copy has it)."""
        if any(fnmatch.fnmatch(name, g) for g in self.ignore):
            return True
        return is_file and bool(self.include) and not any(fnmatch.fnmatch(name, g) for g in self.include)

    def folder(self, parent_fd, name):
        os.mkdir(name, 0o755, dir_fd=parent_fd)
        return os.open(name, _DIR, dir_fd=parent_fd)

    def file(self, parent_fd, name, src_fd, st, limit):
        """Copy at most limit bytes; return how many, or None if the file holds more (it grew)."""
        out = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                      (stat.S_IMODE(st.st_mode) & 0o755) | 0o644, dir_fd=parent_fd)
        try:
            done = 0
            while True:
                chunk = os.read(src_fd, min(_CHUNK, limit + 1 - done))
                if not chunk:
                    break
                done += len(chunk)
                if done > limit:
                    return None
                os.write(out, chunk)
            os.utime(out, ns=(st.st_atime_ns, st.st_mtime_ns))      # as copytree's copy2 keeps them
            return done
        finally:
            os.close(out)


class SubmissionTree(LoggingConfigurable):
    """Checks (and copies) a submitted folder as data. Configure with ``c.SubmissionTree.*``."""

    max_depth = Integer(10, help="Folders below a submission's own folder may nest this deep at most "
                                 "(a notebook in the submission's folder is depth 0); deeper is refused.").tag(config=True)
    max_entries = Integer(1000, help="Files and folders one submission may hold at most; more is refused "
                                     "(counted while listing, so a folder of millions is not read).").tag(config=True)

    def _byte_limits(self):
        """(per file, per submission) in bytes: nbgrader's CourseDirectory.max_file_size and
        max_dir_size (kB), which ``nbgrader submit`` applied on the learner's side."""
        from nbgrader.coursedir import CourseDirectory
        cd = CourseDirectory(config=self.config)
        return 1000 * cd.max_file_size, 1000 * cd.max_dir_size

    def check(self, folder, student=None, grader_uid=None):
        """None if `folder` is a submission of data only (and, with `student`, every file of it
        the student's or the grader's); else the Refusal."""
        return self._open_and_walk(folder, student, grader_uid, None)

    def copy(self, src, dest, student=None, grader_uid=None):
        """Copy `src` to `dest` (a new folder) by handle; None when done, else the Refusal (and
        `dest` is removed: nothing of a refused submission is kept)."""
        from nbgrader.coursedir import CourseDirectory
        cd = CourseDirectory(config=self.config)
        os.mkdir(dest, 0o755)
        dest_fd = os.open(dest, _DIR)
        try:
            refusal = self._open_and_walk(src, student, grader_uid, _Copy(dest_fd, cd.ignore, cd.include))
        finally:
            os.close(dest_fd)
        if refusal:
            self.remove(dest)
        return refusal

    @staticmethod
    def remove(folder):
        import shutil
        shutil.rmtree(folder, ignore_errors=True)   # our own copy: rmtree does not follow links

    def _open_and_walk(self, folder, student, grader_uid, copy):
        folder = os.path.abspath(folder)
        top = shown(os.path.basename(folder))
        allowed = None
        if student is not None:
            allowed = {os.geteuid() if grader_uid is None else grader_uid, student_uid(student)}
        try:
            fd = os.open(folder, _DIR)
        except OSError:
            try:
                st = os.lstat(folder)
            except OSError as exc:
                return Refusal("unreadable", top, f"cannot be read ({exc.strerror})")
            kind = kind_of(st.st_mode)
            return Refusal(kind, top, _SAYS.get(kind, "cannot be opened"))
        try:
            st = os.fstat(fd)
            if allowed is not None and st.st_uid not in allowed:
                return self._not_theirs(top, st.st_uid, student)
            return self._walk(fd, top, allowed, student, copy)
        finally:
            os.close(fd)

    @staticmethod
    def _not_theirs(path, uid, student):
        return Refusal("owner", path, f"belongs to {user_name(uid)}, not to {student}: not graded as {student} "
                                      "(a submission made for someone else?)")

    def _names(self, fd, budget):
        """The names in the folder fd, at most budget + 1 of them (one more says: too many)."""
        names = []
        with os.scandir(fd) as it:          # scandir(fd) reads a duplicate of fd
            for entry in it:
                names.append(entry.name)
                if len(names) > budget:
                    break
        return iter(sorted(names))

    def _walk(self, root_fd, top, allowed, student, copy):
        max_file, max_total = self._byte_limits()
        entries = total = 0
        # one frame per open folder: (its fd, its remaining names, its shown path, its depth, the
        # copy's fd of it or None). Only frames' fds are open: at most max_depth + 1 of each.
        stack = [(root_fd, self._names(root_fd, self.max_entries), top, 0, copy and copy.root)]
        try:
            while stack:
                fd, names, path, depth, out = stack[-1]
                name = next(names, None)
                if name is None:
                    stack.pop()
                    if depth:
                        os.close(fd)
                        if out is not None:
                            os.close(out)
                    continue
                entries += 1
                where = f"{path}/{shown(name)}"
                if entries > self.max_entries:
                    return Refusal("too_many", where, f"is one entry more than c.SubmissionTree.max_entries "
                                                      f"({self.max_entries}) in one submission")
                try:
                    st = os.stat(name, dir_fd=fd, follow_symlinks=False)
                except OSError as exc:
                    return Refusal("unreadable", where, f"cannot be read ({exc.strerror})")
                kind = kind_of(st.st_mode)
                if kind not in ("file", "folder"):
                    return Refusal(kind, where, _SAYS[kind] + ": only regular files and folders are taken")
                if allowed is not None and st.st_uid not in allowed:
                    return self._not_theirs(where, st.st_uid, student)
                if kind == "folder":
                    if depth + 1 > self.max_depth:
                        return Refusal("too_deep", where, f"is {depth + 1} folders deep, more than "
                                                          f"c.SubmissionTree.max_depth ({self.max_depth})")
                    refusal, child = self._open(fd, name, st, where, _DIR)
                    if refusal:
                        return refusal
                    sub_out = None
                    if out is not None and not copy.skipped(name, False):
                        sub_out = copy.folder(out, name)
                    stack.append((child, self._names(child, self.max_entries - entries), where, depth + 1, sub_out))
                    continue
                if st.st_size > max_file:
                    return Refusal("too_large", where, f"holds {st.st_size} bytes, more than "
                                                       f"c.CourseDirectory.max_file_size ({max_file // 1000} kB)")
                total += st.st_size
                if total > max_total:
                    return Refusal("too_large", where, f"brings the submission past c.CourseDirectory.max_dir_size "
                                                       f"({max_total // 1000} kB)")
                if out is None or copy.skipped(name, True):
                    continue
                refusal, src = self._open(fd, name, st, where, _FILE)
                if refusal:
                    return refusal
                try:
                    done = copy.file(out, name, src, st, min(max_file, max_total - total + st.st_size))
                finally:
                    os.close(src)
                if done is None:
                    return Refusal("changed", where, "grew while it was copied, past the byte limits")
                total += done - st.st_size
        finally:
            for fd, _, _, depth, out in stack:
                if depth:
                    os.close(fd)
                    if out is not None:
                        os.close(out)
        return None

    @staticmethod
    def _open(parent_fd, name, st, where, flags):
        """Open name (never following a link) and make sure it is what was lstat-ed."""
        try:
            fd = os.open(name, flags, dir_fd=parent_fd)
        except OSError as exc:
            return Refusal("changed", where, f"changed while it was read ({exc.strerror})"), None
        now = os.fstat(fd)
        if (now.st_dev, now.st_ino) != (st.st_dev, st.st_ino) or kind_of(now.st_mode) != kind_of(st.st_mode):
            os.close(fd)
            return Refusal("changed", where, "was replaced while it was read"), None
        return None, fd
