"""The class list, in one command: a CSV of students -> Unix users, their group, and the gradebook.

    tinygpt-roster roster.csv [--group tinygpt] [--teacher teacher] [--course-dir tinygpt]
                              [--passwords tinygpt-passwords.csv]

Run as root on the hub's machine (hub/README.md, "Adding people"). roster.csv is nbgrader's own
student CSV (`nbgrader db student import` reads the same file): a header line with the columns
``id,first_name,last_name,email``, one student a line; ``id`` is their log-in name. For each student

- a Unix user ``id`` (home mode 0700, bash, their name as the account's comment) is made if there
  is none, with a random password set by chpasswd (never typed; nothing is interactive), and every
  new user's ``id,password`` is written to the passwords file, mode 0600, root's: hand them out;
- the user is added to the students' group (the hub lets its members in) and their home is made
  0700 (only these users' homes: service accounts are left alone);
- their record in the teacher's gradebook (``~teacher/<course dir>/gradebook.db``) gets their first
  and last name and email (nbgrader's ``Gradebook.update_or_create_student``, run as the teacher,
  so the gradebook stays theirs), so the formgrader and ``nbgrader export`` carry the names.

Running it again with a longer list adds the new students and updates everyone's names; existing
users keep their passwords (``--reset-passwords`` gives them new ones). The whole CSV is checked
first: a bad line stops the command before anything is changed, naming the line; so does a
student who is the teacher, a system account, or an account whose uid the grading sandbox runs
learner code as (``nobody``, 65534: ``c.Sandbox.uid`` and the uids after it, one per grading
worker; the teacher's subordinate uids), since that student would own what learner code does.
"""
import argparse
import csv
import grp
import json
import os
import pwd
import re
import secrets
import subprocess
import sys

COLUMNS = ("id", "first_name", "last_name", "email")
NAME = re.compile(r"^[a-z_][a-z0-9_-]{0,31}$")      # a portable Unix user name (useradd's default rule)


class RosterError(ValueError):
    """The CSV cannot be used as it is (the message names the line)."""


def read_roster(path):
    """[{id, first_name, last_name, email}] from the CSV, every line checked; a RosterError names
    every bad line at once (a class list is fixed in one go, not one run per mistake)."""
    with open(path, newline="", encoding="utf-8-sig") as f:
        reader = csv.DictReader(f)
        header = [h.strip() for h in reader.fieldnames or []]
        if "id" not in header:
            raise RosterError(f"{path}: the first line must name the columns {','.join(COLUMNS)} (found {header})")
        students, seen, errors = [], set(), []
        for n, row in enumerate(reader, start=2):
            row = {(k or "").strip(): (v or "").strip() for k, v in row.items()}
            if not any(row.values()):
                continue
            problem = _line_problem(row, seen)
            if problem:
                errors.append(f"{path}, line {n}: {problem}")
                continue
            seen.add(row["id"])
            students.append({k: row.get(k, "") for k in COLUMNS})
    if errors:
        raise RosterError("\n".join(errors))
    return students


def _line_problem(row, seen):
    sid = row.get("id", "")
    if not NAME.match(sid):
        return (f"{sid!r} is not a Unix user name "
                "(lower-case letters, digits, _ and -, starting with a letter or _, 32 at most)")
    if sid in seen:
        return f"{sid} is listed twice"
    email = row.get("email", "")
    if email and "@" not in email:
        return f"{email!r} is not an email address"
    for field in ("first_name", "last_name"):
        if any(ch in row.get(field, "") for ch in ":,\n"):
            return f"the {field} of {sid} holds ':' or ','"
    return None


def uid_min():
    """The first uid of a person's account (/etc/login.defs UID_MIN; below it: system accounts)."""
    try:
        with open("/etc/login.defs") as f:
            for line in f:
                parts = line.split()
                if len(parts) >= 2 and parts[0] == "UID_MIN":
                    return int(parts[1])
    except (OSError, ValueError):
        pass
    return 1000


GRADING_JOBS = 64      # the most grading workers (tinygpt-grade-class --jobs) the roster keeps uids free for


def sandbox_use(uid, teacher, sandbox_uid, jobs=GRADING_JOBS):
    """Why the grading sandbox may run learner code as `uid` outside it, or None. A root grader's
    worker k runs it as c.Sandbox.uid + k; a teacher account's as its subordinate uid + k
    (/etc/subuid, the ranges newuidmap maps): a student of that uid would own every sandbox's
    processes and files (and a sandbox's learner code could signal or read theirs)."""
    if sandbox_uid <= uid < sandbox_uid + jobs:
        return (f"the grading sandbox's own uid outside for worker {uid - sandbox_uid} (c.Sandbox.uid "
                f"{sandbox_uid} + the worker, for up to {jobs} grading workers)")
    from tinygpt_course.grading.sandbox import _subid_rows
    names = {teacher, str(pwd.getpwnam(teacher).pw_uid)}
    for name, start, count in _subid_rows("/etc/subuid") or ():
        if name in names and start <= uid < start + count:
            return (f"in the teacher {teacher}'s subordinate uids {start}-{start + count - 1} (/etc/subuid), which "
                    "the grading sandbox maps learner code to")
    return None


def check_accounts(students, teacher, sandbox_uid=None, jobs=GRADING_JOBS, group=None, adopt=False):
    """Refuse a student who is the teacher, an existing system account (root, www-data...), an
    account whose uid the grading sandbox uses (nobody, 65534: c.Sandbox.uid, worker 0's), or,
    unless `adopt`, an existing account not in the students' `group` (someone's own account made a
    student by a typo). A RosterError names every refused account at once."""
    if sandbox_uid is None:
        from tinygpt_course.grading.sandbox import Sandbox
        sandbox_uid = Sandbox.uid.default_value
    members = set(grp.getgrnam(group).gr_mem) if group and _group_exists(group) else set()
    errors = []
    for s in students:
        if s["id"] == teacher:
            errors.append(f"{s['id']} is the teacher: not a student")
            continue
        try:
            entry = pwd.getpwnam(s["id"])
        except KeyError:
            continue
        uid = entry.pw_uid
        if uid < uid_min():
            errors.append(f"{s['id']} is a system account (uid {uid} < UID_MIN {uid_min()}): not a student")
            continue
        why = sandbox_use(uid, teacher, sandbox_uid, jobs)
        if why:
            errors.append(f"{s['id']} has uid {uid}, {why}: not a student (give the student an account "
                          "of their own, or grading another c.Sandbox.uid and pass it as --sandbox-uid)")
        elif group and not adopt and s["id"] not in members:
            errors.append(f"{s['id']} is an existing account, not in the students' group {group}: pass --adopt to "
                          "make it a student (it keeps its password and home), or fix the roster's id")
    if errors:
        raise RosterError("\n".join(errors))


def _group_exists(group):
    try:
        grp.getgrnam(group)
        return True
    except KeyError:
        return False


def _run(cmd, **kw):
    r = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {r.returncode}: {r.stderr.strip()}")
    return r


def make_users(students, group, comment=None, reset_passwords=False, log=print):
    """Users, group and private homes; returns {id: password} for the users given a new password."""
    try:
        grp.getgrnam(group)
    except KeyError:
        _run(["groupadd", group])
        log(f"group {group}: made")
    passwords = {}
    for s in students:
        sid = s["id"]
        gecos = comment if comment is not None else " ".join(filter(None, (s["first_name"], s["last_name"])))
        try:
            pwd.getpwnam(sid)
            _run(["usermod", "-aG", group, sid])
            new = False
        except KeyError:
            _run(["useradd", "-m", "-K", "HOME_MODE=0700", "-s", "/bin/bash", "-G", group, "-c", gecos, sid])
            new = True
        os.chmod(pwd.getpwnam(sid).pw_dir, 0o700)
        if new or reset_passwords:
            passwords[sid] = secrets.token_urlsafe(9)
        log(f"{sid}: {'made' if new else 'already there'}, in {group}, home 0700")
    if passwords:
        _run(["chpasswd"], input="".join(f"{sid}:{pw}\n" for sid, pw in passwords.items()))
    return passwords


def write_passwords(path, passwords):
    """id,password lines, in a file only its owner (root) can read."""
    fd = os.open(path, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o600)
    os.fchmod(fd, 0o600)
    with os.fdopen(fd, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["id", "password"])
        w.writerows(sorted(passwords.items()))


def update_gradebook(db_url, students):
    """Each student's record (names, email) in the gradebook; runs as the gradebook's owner."""
    from nbgrader.api import Gradebook
    with Gradebook(db_url) as gb:
        for s in students:
            gb.update_or_create_student(s["id"], first_name=s["first_name"] or None,
                                        last_name=s["last_name"] or None, email=s["email"] or None)


def gradebook_as_teacher(teacher, course_dir, students):
    """update_gradebook run as the teacher (runuser), in their course folder, which must exist."""
    pw = pwd.getpwnam(teacher)
    course = os.path.join(pw.pw_dir, course_dir)
    if not os.path.isdir(course):
        raise RosterError(f"the teacher's course folder {course} does not exist yet (the hub makes it at their "
                          "first log-in): log in as the teacher once, then run this again (the users made are kept)")
    bin_dir = os.path.dirname(sys.executable)        # nbgrader calls alembic by name
    env = ["HOME=" + pw.pw_dir, "USER=" + teacher, "LOGNAME=" + teacher, "LANG=C.UTF-8",
           f"PATH={bin_dir}:/usr/local/bin:/usr/bin:/bin"]
    cmd = ["runuser", "-u", teacher, "--", "env", "-i", *env, sys.executable, "-m", "tinygpt_course.roster",
           "--gradebook-stdin", f"sqlite:///{course}/gradebook.db"]
    _run(cmd, input=json.dumps(students), cwd=course)
    return course


def main(argv=None):
    ap = argparse.ArgumentParser(prog="tinygpt-roster", description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("roster", nargs="?", help="CSV with the columns id,first_name,last_name,email")
    ap.add_argument("--group", default=os.environ.get("TINYGPT_STUDENT_GROUP", "tinygpt"),
                    help="the students' Unix group (the hub's TINYGPT_STUDENT_GROUP) [%(default)s]")
    ap.add_argument("--teacher", default=(os.environ.get("TINYGPT_TEACHERS") or "teacher").split(",")[0].strip(),
                    help="the teacher whose gradebook gets the students [%(default)s]")
    ap.add_argument("--course-dir", default=os.environ.get("TINYGPT_COURSE_DIR", "tinygpt"),
                    help="the teacher's course folder, relative to their home [%(default)s]")
    ap.add_argument("--passwords", default="tinygpt-passwords.csv",
                    help="where the new users' passwords go (mode 0600) [%(default)s]")
    ap.add_argument("--reset-passwords", action="store_true", help="new passwords for existing users too")
    ap.add_argument("--adopt", action="store_true",
                    help="make existing accounts that are not in the students' group students too")
    ap.add_argument("--comment", help="the accounts' comment (GECOS) instead of the student's name")
    ap.add_argument("--sandbox-uid", type=int, default=None,
                    help="the course's c.Sandbox.uid, if not the default (65534): accounts of that uid and the "
                         f"{GRADING_JOBS} after it are refused, as are the teacher's subordinate uids")
    ap.add_argument("--gradebook-stdin", metavar="DB_URL", help=argparse.SUPPRESS)  # the teacher's half
    args = ap.parse_args(argv)
    if args.gradebook_stdin:
        update_gradebook(args.gradebook_stdin, json.load(sys.stdin))
        return 0
    if not args.roster:
        ap.error("the roster CSV is needed")
    if os.geteuid() != 0:
        ap.error("run as root (it makes Unix users)")
    try:
        students = read_roster(args.roster)
        pwd.getpwnam(args.teacher)
        check_accounts(students, args.teacher, args.sandbox_uid, group=args.group, adopt=args.adopt)
    except RosterError as e:
        sys.exit("\n".join(f"tinygpt-roster: {line}" for line in str(e).splitlines()))
    except KeyError:
        sys.exit(f"tinygpt-roster: the teacher {args.teacher} is not a user here (--teacher)")
    passwords = make_users(students, args.group, args.comment, args.reset_passwords)
    if passwords:
        write_passwords(args.passwords, passwords)
        print(f"{len(passwords)} new password(s) in {os.path.abspath(args.passwords)} (mode 0600): hand them out")
    try:
        course = gradebook_as_teacher(args.teacher, args.course_dir, students)
    except RosterError as e:
        sys.exit(f"tinygpt-roster: {e}")
    print(f"{len(students)} student(s) in {args.group} and in the gradebook of {course}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
