"""tinygpt-roster (tinygpt_course/roster.py): a CSV of students -> real Unix users with passwords set
by chpasswd, their group, private homes and the teacher's gradebook records. The CSV checks run
anywhere; making users needs root (useradd, runuser), as the live hub test does."""
import csv
import grp
import functools
import os
import pwd
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from tinygpt_course.roster import RosterError, read_roster
from tinygpt_course.testing import hub as hh

TEACHER, GROUP = "tgrosterteacher", "tgrostergroup"
STUDENTS = [("tgroster1", "Ada", "Lovelace", "ada@example.org"), ("tgroster2", "Alan", "Turing", "")]


def _csv(path, rows, header=("id", "first_name", "last_name", "email")):
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(header)
        w.writerows(rows)
    return path


def test_the_csv_is_nbgraders_student_format(tmp_path):
    students = read_roster(_csv(tmp_path / "r.csv", STUDENTS + [("", "", "", "")]))
    assert [s["id"] for s in students] == ["tgroster1", "tgroster2"]
    assert students[0] == {"id": "tgroster1", "first_name": "Ada", "last_name": "Lovelace", "email": "ada@example.org"}


@pytest.mark.parametrize("row, says", [
    (("Ada", "Ada", "L", ""), "line 3: 'Ada' is not a Unix user name"),
    (("tgroster1", "A", "B", ""), "line 3: tgroster1 is listed twice"),
    (("x1", "A", "B", "not-an-address"), "line 3: 'not-an-address' is not an email"),
    (("x1", "A:b", "B", ""), "the first_name of x1 holds"),
])
def test_a_bad_line_is_named(tmp_path, row, says):
    with pytest.raises(RosterError, match=says):
        read_roster(_csv(tmp_path / "r.csv", [STUDENTS[0], row]))


def test_every_bad_line_is_named_in_one_run(tmp_path):
    with pytest.raises(RosterError) as caught:
        read_roster(_csv(tmp_path / "r.csv", [STUDENTS[0], ("Ada", "A", "L", ""), ("x1", "A", "B", "nope"),
                                               ("tgroster1", "A", "B", "")]))
    lines = str(caught.value).splitlines()
    assert [ln.split(": ", 1)[0].rsplit(", ", 1)[-1] for ln in lines] == ["line 3", "line 4", "line 5"], lines


@pytest.mark.skipif(os.geteuid() != 0, reason="makes a Unix user: needs root")
def test_an_existing_account_outside_the_group_is_adopted_only_when_asked():
    """Someone's own account (uid >= UID_MIN, not in the students' group) named by the roster is
    refused, naming it, unless --adopt; every refused account is named at once."""
    from tinygpt_course.roster import check_accounts
    own = "tgrosterown"
    try:
        hh.remove_user(own)
        subprocess.run(["useradd", "-M", "-c", hh.USER_TAG, own], check=True)
        row = {"id": own, "first_name": "", "last_name": "", "email": ""}
        with pytest.raises(RosterError) as caught:
            check_accounts([row, {**row, "id": "daemon"}], "root", group=GROUP)
        lines = str(caught.value).splitlines()
        assert len(lines) == 2 and any(f"{own} is an existing account, not in the students' group {GROUP}: pass --adopt"
                                       in ln for ln in lines) and any("daemon is a system account" in ln for ln in lines)
        check_accounts([row], "root", group=GROUP, adopt=True)          # asked: adopted
        check_accounts([row], "root")                                   # no group given: as before
    finally:
        hh.remove_user(own)


def test_a_file_without_the_header_is_refused(tmp_path):
    with pytest.raises(RosterError, match="must name the columns"):
        read_roster(_csv(tmp_path / "r.csv", [STUDENTS[0]], header=("tgroster0", "A", "B", "")))


def _password_ok(user, password):
    shadow = {line.split(":")[0]: line.split(":")[1] for line in Path("/etc/shadow").read_text().splitlines()}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        import crypt
    return crypt.crypt(password, shadow[user]) == shadow[user]


def _roster(tmp_path, csv_path, *extra, venv=Path(sys.prefix)):
    cmd = [str(venv / "bin" / "tinygpt-roster"), str(csv_path), "--group", GROUP,
           "--teacher", TEACHER, "--passwords", str(tmp_path / "pw.csv"), "--comment", hh.USER_TAG, *extra]
    env = {**os.environ, "PATH": f"{venv / 'bin'}:/usr/sbin:/usr/bin:/sbin:/bin"}
    return subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=tmp_path)


@pytest.mark.skipif(os.geteuid() != 0, reason="makes Unix users: needs root")
def test_roster_makes_users_group_passwords_and_gradebook(tmp_path, request):
    # the teacher runs the venv's python (the gradebook is theirs): this one where all can read it,
    # else the hub users' (a clone, CI's among them, may be private)
    venv = Path(sys.prefix) if hh.readable_by_all(Path(sys.prefix)) else request.getfixturevalue("users_venv")
    roster = functools.partial(_roster, venv=venv)
    users = [TEACHER] + [s[0] for s in STUDENTS]
    try:
        for u in users:
            hh.remove_user(u)
        hh.remove_group(GROUP)                                 # a leftover; the roster makes it
        hh.add_user(TEACHER)
        course = hh.home(TEACHER) / "tinygpt"
        r = roster(tmp_path, _csv(tmp_path / "r.csv", STUDENTS))
        assert r.returncode != 0 and "does not exist yet" in r.stderr, r.stderr  # before the teacher's first log-in
        hh.run_as(TEACHER, ["mkdir", "-m", "700", str(course)], {"PATH": "/usr/bin:/bin"})
        hh.remove_user(STUDENTS[0][0]), hh.remove_user(STUDENTS[1][0])
        (tmp_path / "pw.csv").unlink()

        # a system account in the list: refused, nothing made
        r = roster(tmp_path, _csv(tmp_path / "bad.csv", STUDENTS + [("daemon", "D", "D", "")]))
        assert r.returncode != 0 and "daemon is a system account" in r.stderr, r.stderr
        assert not (tmp_path / "pw.csv").exists()
        with pytest.raises(KeyError):
            pwd.getpwnam(STUDENTS[0][0])

        r = roster(tmp_path, tmp_path / "r.csv")
        assert r.returncode == 0, r.stdout + r.stderr
        pw_file = tmp_path / "pw.csv"
        assert pw_file.stat().st_mode & 0o777 == 0o600 and pw_file.stat().st_uid == 0
        passwords = {row["id"]: row["password"] for row in csv.DictReader(open(pw_file))}
        assert set(passwords) == {s[0] for s in STUDENTS}
        for sid, *_ in STUDENTS:
            assert _password_ok(sid, passwords[sid]), f"{sid}'s password is not the one written"
            assert sid in grp.getgrnam(GROUP).gr_mem
            assert hh.home(sid).stat().st_mode & 0o777 == 0o700
        db = course / "gradebook.db"
        assert db.stat().st_uid == hh.uid(TEACHER), "the gradebook is not the teacher's"
        from nbgrader.api import Gradebook
        with Gradebook(f"sqlite:///{db}") as gb:
            got = {s.id: (s.first_name, s.last_name, s.email) for s in gb.students}
        assert got == {"tgroster1": ("Ada", "Lovelace", "ada@example.org"), "tgroster2": ("Alan", "Turing", None)}

        # again, with a name corrected: passwords kept, the record updated
        pw_file.unlink()
        r = roster(tmp_path, _csv(tmp_path / "r2.csv", [STUDENTS[0], ("tgroster2", "Alan M.", "Turing", "at@x.org")]))
        assert r.returncode == 0, r.stderr
        assert not pw_file.exists() and _password_ok("tgroster1", passwords["tgroster1"])
        with Gradebook(f"sqlite:///{db}") as gb:
            assert (gb.find_student("tgroster2").first_name, gb.find_student("tgroster2").email) == ("Alan M.", "at@x.org")
    finally:
        for u in users:
            hh.remove_user(u)
        hh.remove_group(GROUP)


def test_the_account_of_the_sandboxs_uid_is_refused():
    """nobody (65534) is c.Sandbox.uid: learner code of grading worker 0 runs as it outside."""
    if pwd.getpwnam("nobody").pw_uid != 65534:
        pytest.skip("nobody is not uid 65534 here")
    from tinygpt_course.roster import check_accounts
    with pytest.raises(RosterError, match="nobody has uid 65534, the grading sandbox's own uid outside for worker 0"):
        check_accounts([{"id": "nobody", "first_name": "", "last_name": "", "email": ""}], "root")


@pytest.mark.skipif(os.geteuid() != 0, reason="makes Unix users: needs root")
def test_accounts_on_a_workers_uid_or_the_teachers_subordinate_uids_are_refused(tmp_path):
    """tinygpt-roster itself: a worker's uid (c.Sandbox.uid + 2) and a uid in the teacher's
    subordinate range (a teacher account's sandbox maps learner code there) are refused, naming
    the student, before anything is made."""
    worker, sub = "tgrosterworker", "tgrostersubid"
    users = [TEACHER, worker, sub]
    try:
        for u in users:
            hh.remove_user(u)
        hh.add_user(TEACHER)
        subprocess.run(["usermod", "--add-subuids", "300000-300999", "--add-subgids", "300000-300999", TEACHER],
                       check=True)
        for name, uid in ((worker, 65536), (sub, 300007)):
            subprocess.run(["useradd", "-M", "-u", str(uid), "-c", hh.USER_TAG, name], check=True)
        for name, says in ((worker, "has uid 65536, the grading sandbox's own uid outside for worker 2"),
                           (sub, f"has uid 300007, in the teacher {TEACHER}'s subordinate uids 300000-300999")):
            r = _roster(tmp_path, _csv(tmp_path / f"{name}.csv", [STUDENTS[0], (name, "A", "B", "")]))
            assert r.returncode != 0 and f"{name} {says}" in r.stderr, r.stderr
            assert not (tmp_path / "pw.csv").exists()
            with pytest.raises(KeyError):
                pwd.getpwnam(STUDENTS[0][0])
    finally:
        for u in users:
            hh.remove_user(u)
        hh.remove_group(GROUP)
