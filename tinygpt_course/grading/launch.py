"""The first step of every sandbox: run by the grader as ``python -I -S launch.py SPEC``, it
prepares what bubblewrap cannot do for itself, then becomes bubblewrap (exec).

SPEC (JSON, made by :meth:`tinygpt_course.grading.sandbox.Sandbox.wrap`):

- ``cgroups``: ``cgroup.procs`` files this process joins first (a memory and a pids cgroup of
  the sandbox's own, where the grader may make them), so that everything inside counts there;
- ``limits``: rlimits ({"as": bytes, "cpu": s, "nproc": n, "fsize": bytes}), set here so they
  hold for bubblewrap and every process inside; for a teacher account, once in the user namespace
  made below (``limits_first``: before it, the defence off). Linux (5.14+) counts RLIMIT_NPROC
  per user namespace and up through each namespace's owner, against the limit the namespace was
  made with: set before this process's namespace, it would count every process of the teacher's
  uid, every sandbox's together; set inside it, it counts this sandbox's alone (its namespace's
  owner, the teacher, is then held only to the teacher's own limit);
- ``stage``: host folders bubblewrap is to show, for a root grader: bubblewrap runs as the
  sandbox's uid, which may not enter the folders above them (a clone in /root, a pytest folder);
  so in a mount namespace of this process's own, each is bound on ``STAGE/<i>`` (a fresh tmpfs),
  where bubblewrap takes it from. Nothing of it is seen outside this process and its children;
- ``files``: {path in the sandbox: text}, copied in by bubblewrap (``--file``) from a memfd;
- ``uid``: the uid (and gid) to become before bubblewrap starts, when the grader is root
  (c.Sandbox.uid + the grading worker's index): the sandbox's processes and files then belong to
  it outside, not to root; supplementary groups are dropped;
- ``subordinate``: [uid, gid, outer uid, outer gid, newuidmap, newgidmap] for a grader that is
  not root but has subordinate ids (/etc/subuid, /etc/subgid): this process makes a user namespace
  where uid maps to outer uid (the first subordinate id + the grading worker's index; with the newuidmap/newgidmap the grader found: the uidmap package's,
  set-uid, or with file capabilities as in the Kubernetes image), drops its groups and
  becomes uid there; bubblewrap, started by it, nests its own namespaces inside. Outside, the
  sandbox's processes and files then belong to the subordinate uid, never the grader's;
- ``seccomp``: the seccomp filter (hex; tinygpt_course.grading.seccomp), which bubblewrap
  installs for every process it starts (``--seccomp``) from a memfd, or null;
- ``argv``: bubblewrap's command line, where ``{fd:N}`` stands for the N-th file's memfd and
  ``{seccomp}`` for the filter's.

Standard library only, and nothing imported from the course: it runs before any site-packages.
It runs once per sandbox (twice a graded submission: the kernel's, the re-run's), so it imports
only what its spec asks for: Python's start is 4 ms of CPU, ``json`` (for its ``re`` patterns),
``ctypes`` and ``subprocess`` 8 ms more (measured), which the stage and the subordinate ids
alone need (:func:`parse`, :func:`libc`).
"""
import os
import resource
import sys

MS_BIND, MS_REC, MS_PRIVATE = 0x1000, 0x4000, 0x40000
CLONE_NEWNS, CLONE_NEWUSER = 0x00020000, 0x10000000


def libc():
    import ctypes
    return ctypes.CDLL(None, use_errno=True)


def check(ret, what):
    if ret != 0:
        import ctypes
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


class _Decoding:
    """What the C scanner of the standard library's json reads from its decoder: json.loads's
    defaults (strict strings, plain dicts, NaN and Infinity as floats)."""
    strict, object_hook, object_pairs_hook = True, None, None
    parse_float, parse_int, parse_constant = float, int, float     # float("-Infinity"), float("NaN")


def parse(text):
    """json.loads(text) without importing json: its C scanner (``_json``) reads the whole text as
    one value, or json.loads where that scanner is missing."""
    try:
        import _json
        scan = _json.make_scanner(_Decoding)
    except (ImportError, AttributeError):
        import json
        return json.loads(text)
    start = len(text) - len(text.lstrip(" \t\n\r"))
    try:
        value, end = scan(text, start)
    except StopIteration:
        raise ValueError(f"not JSON at character {start}") from None
    if text[end:].strip(" \t\n\r"):
        raise ValueError(f"extra data at character {end}")
    return value


LIMITS = {"as": resource.RLIMIT_AS, "cpu": resource.RLIMIT_CPU, "nproc": resource.RLIMIT_NPROC,
          "fsize": resource.RLIMIT_FSIZE}


def stage(paths, where):
    """Bind each of `paths` on where/<i>, in a mount namespace of our own."""
    lib = libc()
    check(lib.unshare(CLONE_NEWNS), "unshare")
    check(lib.mount(b"none", b"/", None, MS_REC | MS_PRIVATE, None), "mount --make-rprivate /")
    check(lib.mount(b"tmpfs", where.encode(), b"tmpfs", 0, b"size=1m,mode=0755"), f"mount tmpfs {where}")
    for i, path in enumerate(paths):
        os.mkdir(os.path.join(where, str(i)))
        check(lib.mount(path.encode(), os.path.join(where, str(i)).encode(), None, MS_BIND | MS_REC, None),
              f"bind {path}")


def subordinate(uid, gid, outer_uid, outer_gid, newuidmap="newuidmap", newgidmap="newgidmap"):
    """Become uid in a new user namespace where it is outer_uid outside (see the module doc)."""
    import subprocess
    lib = libc()
    r, w = os.pipe()
    me = os.getpid()
    helper = os.fork()
    if helper == 0:         # newuidmap writes the map of a namespace it is not in: ours, once made
        os.close(w)
        ok = os.read(r, 1) == b"1" and all(
            subprocess.run([tool, str(me), str(inner), str(outer), "1"]).returncode == 0
            for tool, inner, outer in ((newuidmap, uid, outer_uid), (newgidmap, gid, outer_gid)))
        os._exit(0 if ok else 1)
    os.close(r)
    try:
        check(lib.unshare(CLONE_NEWUSER), "unshare(CLONE_NEWUSER)")
    finally:
        os.write(w, b"1")
        os.close(w)
        _, status = os.waitpid(helper, 0)
    if status != 0:
        raise OSError(f"newuidmap/newgidmap could not map uid {uid} to {outer_uid} (see /etc/subuid, /etc/subgid)")
    try:
        os.setgroups([])
    except PermissionError:
        pass                # setgroups denied in this namespace: the groups are unmapped here anyway
    os.setresgid(gid, gid, gid)
    os.setresuid(uid, uid, uid)


def set_limits(spec):
    for name, value in spec.get("limits", {}).items():
        resource.setrlimit(LIMITS[name], (value, value))


def main(spec):
    for procs in spec.get("cgroups", ()):
        with open(procs, "w") as f:
            f.write(str(os.getpid()))
    if spec.get("stage"):
        stage(spec["stage"], spec["stage_dir"])
    fds = []
    for text in spec.get("files", ()):
        fd = os.memfd_create("sandbox-file")
        os.write(fd, text.encode())
        os.lseek(fd, 0, os.SEEK_SET)
        fds.append(fd)
    program = None
    if spec.get("seccomp"):
        program = os.memfd_create("sandbox-seccomp")
        os.write(program, bytes.fromhex(spec["seccomp"]))
        os.lseek(program, 0, os.SEEK_SET)
        fds.append(program)
    for fd in fds:
        os.set_inheritable(fd, True)
    if spec.get("limits_first"):        # the defence off (c.Sandbox.separate_workers False)
        set_limits(spec)
    if spec.get("subordinate"):
        subordinate(*spec["subordinate"])
    if not spec.get("limits_first"):
        set_limits(spec)
    uid = spec.get("uid")
    if uid is not None:
        os.setgroups([])
        os.setresgid(uid, uid, uid)
        os.setresuid(uid, uid, uid)
    argv = [str(fds[int(a[4:-1])]) if a.startswith("{fd:") and a.endswith("}")
            else str(program) if a == "{seccomp}" else a for a in spec["argv"]]
    os.execvp(argv[0], argv)


if __name__ == "__main__":
    try:
        main(parse(sys.argv[1]))
    except OSError as exc:
        print(f"the grading sandbox could not be prepared: {exc}", file=sys.stderr)
        sys.exit(127)
