"""The passwd file every pod mounts, made from values.yaml's roster (custom.tinygpt), and the
teachers' subordinate ids.

    python hub/z2jh/roster.py [hub/z2jh/values.yaml]             # custom.tinygpt.passwd
    python hub/z2jh/roster.py --subids [hub/z2jh/values.yaml]    # custom.tinygpt.subids

prints the lines to paste as custom.tinygpt.passwd: the image's system accounts, then the teachers
(custom.tinygpt.teachers, name: uid) and the students (custom.tinygpt.roster, a CSV of id,
first_name, last_name, email, uid), each with gid = uid and their name in the GECOS field, so that
nbgrader and `ls -l` show who owns a file. With --subids: the lines of /etc/subuid and /etc/subgid
(the same), one range per teacher from SUBIDS up, which the grading Job's pods (grade-job.yaml) give
newuidmap: the grading sandbox runs learner code as the first uid of the teacher's range, never as
the teacher. Every uid of the roster is below SUBIDS, so no range holds a person's uid (a pod with
its own user namespace maps the uids 0-65535: the ranges and the uids all fit there). tests/test_z2jh_values.py checks values.yaml holds
exactly this, and that the hub's own reading of the roster (hub.extraConfig) gives the same uids.
"""
import csv
import io
import sys
from pathlib import Path

import yaml

SYSTEM = ("root:x:0:0:root:/root:/bin/bash",
          "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin",
          "jovyan:x:1000:100::/home/jovyan:/bin/bash")   # the image's own user (repo2docker)
COLUMNS = ["id", "first_name", "last_name", "email", "uid"]
SUBIDS, SUBIDS_PER_TEACHER = 60000, 1000     # 60000-60999 the first teacher's, ...; below nobody (65534)


def students(course):
    """[(id, first name, last name, email, uid)] from the roster CSV; a clear error for a bad one."""
    reader = csv.DictReader(io.StringIO(course["roster"]))
    if reader.fieldnames != COLUMNS:
        raise ValueError(f"custom.tinygpt.roster: the header must be {','.join(COLUMNS)}, not {reader.fieldnames}")
    rows = []
    for n, row in enumerate(reader, start=2):
        if not row["uid"].isdigit() or not 2001 <= int(row["uid"]) < SUBIDS:
            raise ValueError(f"custom.tinygpt.roster line {n}: uid {row['uid']!r} is not a number from 2001 "
                             f"to {SUBIDS - 1}")
        if any(c in ":\n" for v in row.values() for c in (v or "")):
            raise ValueError(f"custom.tinygpt.roster line {n}: no ':' in a field")
        rows.append((row["id"], row["first_name"], row["last_name"], row["email"], int(row["uid"])))
    return rows


def passwd(course):
    people = [(name, "", int(uid)) for name, uid in course["teachers"].items()]
    people += [(sid, f"{first} {last}".strip(), uid) for sid, first, last, _, uid in students(course)]
    uids = [uid for _, _, uid in people]
    names = [name for name, _, _ in people]
    if len(set(uids)) != len(uids) or len(set(names)) != len(names):
        raise ValueError("custom.tinygpt: every person once, each with their own uid")
    return "\n".join([*SYSTEM, *(f"{name}:x:{uid}:{uid}:{gecos}:/home/jovyan:/bin/bash"
                                 for name, gecos, uid in people)]) + "\n"


def subids(course):
    """/etc/subuid (and /etc/subgid, the same): `name:first:count`, a range per teacher."""
    teachers = list(course["teachers"].items())
    if any(not 2000 <= int(uid) < SUBIDS for _, uid in teachers):
        raise ValueError(f"custom.tinygpt.teachers: a teacher's uid must be from 2000 to {SUBIDS - 1}")
    if SUBIDS + len(teachers) * SUBIDS_PER_TEACHER > 65534:
        raise ValueError("custom.tinygpt.teachers: at most 5 teachers get subordinate ids below 65534")
    return "".join(f"{name}:{SUBIDS + i * SUBIDS_PER_TEACHER}:{SUBIDS_PER_TEACHER}\n"
                   for i, (name, _) in enumerate(teachers))


if __name__ == "__main__":
    args = sys.argv[1:]
    make = subids if args[:1] == ["--subids"] else passwd
    args = args[1:] if make is subids else args
    values = Path(args[0] if args else Path(__file__).with_name("values.yaml"))
    sys.stdout.write(make(yaml.safe_load(values.read_text())["custom"]["tinygpt"]))
