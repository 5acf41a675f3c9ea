"""The passwd file every pod mounts, made from values.yaml's roster (custom.tinygpt).

    python hub/z2jh/roster.py [hub/z2jh/values.yaml]

prints the lines to paste as custom.tinygpt.passwd: the image's system accounts, then the teachers
(custom.tinygpt.teachers, name: uid) and the students (custom.tinygpt.roster, a CSV of id,
first_name, last_name, email, uid), each with gid = uid and their name in the GECOS field, so that
nbgrader and `ls -l` show who owns a file. tests/test_z2jh_values.py checks values.yaml holds
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


def students(course):
    """[(id, first name, last name, email, uid)] from the roster CSV; a clear error for a bad one."""
    reader = csv.DictReader(io.StringIO(course["roster"]))
    if reader.fieldnames != COLUMNS:
        raise ValueError(f"custom.tinygpt.roster: the header must be {','.join(COLUMNS)}, not {reader.fieldnames}")
    rows = []
    for n, row in enumerate(reader, start=2):
        if not row["uid"].isdigit() or int(row["uid"]) < 2001:
            raise ValueError(f"custom.tinygpt.roster line {n}: uid {row['uid']!r} is not a number >= 2001")
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


if __name__ == "__main__":
    values = Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).with_name("values.yaml"))
    sys.stdout.write(passwd(yaml.safe_load(values.read_text())["custom"]["tinygpt"]))
