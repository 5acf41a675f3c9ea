"""The first step of every sandbox: run by the grader as ``python -I -S launch.py SPEC``, it
prepares what bubblewrap cannot do for itself, then becomes bubblewrap (exec).

SPEC (JSON, made by :meth:`tinygpt_course.grading.sandbox.Sandbox.wrap`):

- ``cgroups``: ``cgroup.procs`` files this process joins first (a memory and a pids cgroup of
  the sandbox's own, where the grader may make them), so that everything inside counts there;
- ``limits``: rlimits ({"as": bytes, "cpu": s, "nproc": n, "fsize": bytes}), set here so they
  hold for bubblewrap and every process inside;
- ``files``: {path in the sandbox: text}, copied in by bubblewrap (``--file``) from a memfd;
- ``uid``: the uid (and gid) to become before bubblewrap starts, when the grader is root: the
  sandbox's processes and files then belong to it outside, not to root; supplementary groups
  are dropped;
- ``argv``: bubblewrap's command line, where ``{fd:N}`` stands for the N-th file's memfd.

Standard library only, and nothing imported from the course: it runs before any site-packages.
"""
import json
import os
import resource
import sys

LIMITS = {"as": resource.RLIMIT_AS, "cpu": resource.RLIMIT_CPU, "nproc": resource.RLIMIT_NPROC,
          "fsize": resource.RLIMIT_FSIZE}


def main(spec):
    for procs in spec.get("cgroups", ()):
        with open(procs, "w") as f:
            f.write(str(os.getpid()))
    fds = []
    for text in spec.get("files", ()):
        fd = os.memfd_create("sandbox-file")
        os.write(fd, text.encode())
        os.lseek(fd, 0, os.SEEK_SET)
        fds.append(fd)
    for fd in fds:
        os.set_inheritable(fd, True)
    for name, value in spec.get("limits", {}).items():
        resource.setrlimit(LIMITS[name], (value, value))
    uid = spec.get("uid")
    if uid is not None:
        os.setgroups([])
        os.setresgid(uid, uid, uid)
        os.setresuid(uid, uid, uid)
    argv = [str(fds[int(a[4:-1])]) if a.startswith("{fd:") and a.endswith("}") else a for a in spec["argv"]]
    os.execvp(argv[0], argv)


if __name__ == "__main__":
    try:
        main(json.loads(sys.argv[1]))
    except OSError as exc:
        print(f"the grading sandbox could not be prepared: {exc}", file=sys.stderr)
        sys.exit(127)
