"""Make nbgrader's filesystem exchange safe before anyone uses it: run once, as root.

    python3 hub/exchange_setup.py --root /srv/nbgrader/exchange --course tinygpt=<teacher uid>:<gid>

- the exchange root: owned by root, mode 1777 (everyone may create entries, nobody may remove
  another's, like /tmp; nbgrader's fetch and submit insist that it be writable);
- each course's folder <root>/<course id>: created here, owned by the course's teacher, mode 0755,
  with what nbgrader's release would make in it, the teacher's too: outbound/ (0755), feedback/
  (0711: files fetched by a name only their student can compute) and inbound/ (3733: students add,
  nobody but the teacher lists; sticky, which nbgrader leaves out, so a student who learnt the
  name of another's submission still cannot rename it into their own name or delete it).

A course folder already there that is not a real folder owned by the teacher (a student who made
`exchange/<course id>` first, to block the release with nbgrader's "You don't own the directory",
or a symlink) is moved aside to <root>/.squatted-<course id>-uid<owner>-<random>, and a fresh one is
made. The teacher's own folder is left as it is (their released assignments stay).

hub/jupyterhub_config.py calls `prepare` at every hub start (one machine). On Kubernetes the
one-time Job hub/z2jh/exchange.yaml runs this file on the shared volume (hub/README.md):
nothing runs as root at spawn.
"""
import argparse
import os
import secrets
import stat


def prepare(root, courses, log=print):
    """courses: {course id: (teacher uid, teacher gid)}. Returns {course id: path moved aside}."""
    os.makedirs(root, exist_ok=True)
    st = os.lstat(root)
    if not stat.S_ISDIR(st.st_mode):
        raise RuntimeError(f"the exchange root {root} is not a folder")
    os.chown(root, 0, 0)
    os.chmod(root, 0o1777)
    moved = {}
    for course, (uid, gid) in courses.items():
        if not course or "/" in course or course.startswith("."):
            raise ValueError(f"not a course id: {course!r}")
        path = os.path.join(root, course)
        for _ in range(5):       # a student may race us between the move and the mkdir: try again
            try:
                st = os.lstat(path)
            except FileNotFoundError:
                try:
                    os.mkdir(path, 0o755)
                except FileExistsError:
                    continue
                os.chown(path, uid, gid, follow_symlinks=False)
                os.chmod(path, 0o755)
                continue          # check again what is there now
            if stat.S_ISDIR(st.st_mode) and st.st_uid == uid:
                if st.st_mode & 0o022:       # writable by others: a student could add entries
                    os.chmod(path, 0o755)
                _course_folders(path, uid, gid)
                break
            aside = os.path.join(root, f".squatted-{course}-uid{st.st_uid}-{secrets.token_hex(4)}")
            os.rename(path, aside)
            os.chown(aside, 0, 0, follow_symlinks=False)   # its maker can no longer touch it
            if not stat.S_ISLNK(st.st_mode):
                os.chmod(aside, 0o700)
            moved[course] = aside
            log(f"exchange: {path} was not the teacher's (owner uid {st.st_uid}): moved aside to {aside}")
        else:
            raise RuntimeError(f"could not make {path} owned by uid {uid}")
    return moved


SUBFOLDERS = {"outbound": 0o755, "feedback": 0o711, "inbound": 0o3733}


def _course_folders(path, uid, gid):
    """outbound/, feedback/, inbound/ in the teacher's course folder (only the teacher, or root, can
    have made them: the folder is theirs, 0755); inbound/ gets its sticky bit."""
    for name, mode in SUBFOLDERS.items():
        sub = os.path.join(path, name)
        if not os.path.lexists(sub):
            os.mkdir(sub, 0o700)
            os.chown(sub, uid, gid)
            os.chmod(sub, mode)
        elif name == "inbound":
            st = os.lstat(sub)
            if stat.S_ISDIR(st.st_mode) and st.st_uid == uid:
                os.chmod(sub, stat.S_IMODE(st.st_mode) | stat.S_ISVTX)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--root", required=True, help="the exchange root, e.g. /srv/nbgrader/exchange")
    ap.add_argument("--course", action="append", required=True, metavar="ID=UID:GID",
                    help="a course and its teacher's numeric uid and gid (repeat for more)")
    args = ap.parse_args()
    courses = {}
    for spec in args.course:
        course, _, ids = spec.partition("=")
        uid, _, gid = ids.partition(":")
        courses[course] = (int(uid), int(gid or uid))
    prepare(args.root, courses)
    for course in courses:
        st = os.stat(os.path.join(args.root, course))
        print(f"{os.path.join(args.root, course)}: uid {st.st_uid} gid {st.st_gid} mode {oct(st.st_mode & 0o7777)}")


if __name__ == "__main__":
    main()
