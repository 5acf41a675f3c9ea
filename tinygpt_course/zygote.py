"""The one warm-process mechanism of the two servers that fork learner code: the kernel template
(tinygpt_course.kernelfork.server, a grading kernel per notebook) and the re-run zygote
(tinygpt_course.rerun.server, a re-run per job). Both :func:`serve`: having imported what
their jobs need once, they fork a fresh *worker* for every job *before* that job is read, so the
warm process itself never holds a job; the worker reads it, joins the sandbox bubblewrap made
for it (:func:`join_sandbox`: its cgroups, every namespace, its uid, no capability,
no_new_privs, its seccomp filter), forks the process that runs learner code there under one
table of rlimits (:data:`LIMITS`, :func:`set_limits`: the names Sandbox.rlimits() gives) and
replies. Neither server imports the other.

Standard library only (and the seccomp filter, itself standard library only).
"""
import ctypes
import fcntl
import gc
import os
import resource

from tinygpt_course.grading import seccomp as syscall_filter

CLONE = {"user": 0x10000000, "mnt": 0x00020000, "net": 0x40000000, "ipc": 0x08000000,
         "uts": 0x04000000, "cgroup": 0x02000000, "pid": 0x20000000}
PR_SET_PDEATHSIG, PR_SET_DUMPABLE, PR_CAPBSET_DROP, PR_SET_NO_NEW_PRIVS, PR_CAP_AMBIENT = 1, 4, 24, 38, 47
PR_CAP_AMBIENT_CLEAR_ALL = 4
NS_GET_PARENT = 0xB702                                        # _IO(0xb7, 0x2)
LIMITS = {"as": resource.RLIMIT_AS, "cpu": resource.RLIMIT_CPU, "nproc": resource.RLIMIT_NPROC,
          "fsize": resource.RLIMIT_FSIZE}
libc = ctypes.CDLL(None, use_errno=True)


def _check(ret, what):
    if ret != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def set_limits(limits):
    """Set the sandbox's rlimits ({name in LIMITS: value}) on this process, soft and hard."""
    for name, value in limits.items():
        resource.setrlimit(LIMITS[name], (value, value))


def reap():
    """Collect every child that has ended, without waiting for the others."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


MADV_COLLAPSE = 25          # Linux 6.1
HUGE_PAGE = 1 << 21


def huge_pages():
    """Put this process's anonymous memory (its heap and anonymous mappings, 2 MB-aligned
    stretches of them) in 2 MB pages where the kernel can (MADV_COLLAPSE; elsewhere nothing
    changes); the MiB it could. A warm process forks a process per job, and a fork copies one
    page-table entry per page it inherits, an exit drops as many: one per 2 MB instead of 512.
    Written pages are still copied 4 KB at a time. Measured with torch imported (180 MB): a
    fork, a small job and its exit 19 -> 10 ms of CPU, the same memory; 60 ms once here.
    Only for a process whose memory is its own: in a fork, collapsing the pages it shares with
    its parent would copy them (the spawner's zygotes: 0.3 GB more for a class run's three)."""
    done = 0
    with open("/proc/self/maps") as maps:
        lines = maps.read().splitlines()
    for line in lines:
        fields = line.split()
        if not fields[1].startswith("rw") or (len(fields) > 5 and fields[5] != "[heap]"):
            continue                    # a file's or the stack's: not anonymous
        lo, hi = (int(v, 16) for v in fields[0].split("-"))
        lo, hi = -(-lo // HUGE_PAGE) * HUGE_PAGE, hi // HUGE_PAGE * HUGE_PAGE
        if hi > lo and libc.madvise(ctypes.c_void_p(lo), ctypes.c_size_t(hi - lo), MADV_COLLAPSE) == 0:
            done += hi - lo
    return done >> 20


EOF_EXIT = 3                # a worker's exit code when the grader has closed the pipe
REPLIED = b"r"              # a worker's word to serve() that it has replied: the next may read


def serve(inp, out, handle, reuse=False):
    """Serve jobs until the grader closes `inp` (raw, unbuffered: a worker reads exactly its own
    job). For each job, a fresh fork of this process, the *worker*, reads it (framed as
    tinygpt_course.wire says) and calls ``handle(job)``, which gives ``(header, payload, then)``:
    the reply (payload bytes or None), written to `out`, and what the worker does after it
    (None, or a function: the kernel's keeper waits for its kernel). The next worker is forked
    as soon as this one has replied, or ended, so a keeper waits in parallel with the next;
    ended workers are reaped. ``reuse`` (tests only, the defence off): one worker reads and
    handles every job."""
    # what the warm process holds (torch's, matplotlib's objects: hundreds of thousands) out of
    # the cyclic garbage collector's sight: a fork's collections then scan only the objects it
    # made, instead of walking, and so copying page by page, the whole inherited heap
    gc.freeze()
    while True:
        reap()
        done_r, done_w = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(done_r)
            _worker(inp, out, handle, done_w, reuse)
        os.close(done_w)
        word = os.read(done_r, 1)
        os.close(done_r)
        if word != REPLIED:        # ended without replying: at the end of the jobs, or failed
            _, status = os.waitpid(pid, 0)
            if os.WIFEXITED(status) and os.WEXITSTATUS(status) == EOF_EXIT:
                return


def _worker(inp, out, handle, done, reuse):
    """Read one job (every job if `reuse`), handle it, reply, tell serve(); never returns."""
    import signal

    from tinygpt_course import wire
    code = 1
    try:
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        while True:
            job = wire.read(inp)
            if job is None:
                code = EOF_EXIT
                break
            header, payload, then = handle(job)
            wire.write(out, header, payload)
            if not reuse:
                os.write(done, REPLIED)
                os.close(done)
                if then is not None:
                    then()
                code = 0
                break
    finally:
        os._exit(code)


def drop_capabilities():
    """No capability left, in any set, for this process and what it starts."""
    for cap in range(64):
        if libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0:
            break               # EINVAL: past the last capability
    libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)

    class Header(ctypes.Structure):
        _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]

    class Data(ctypes.Structure):
        _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32),
                    ("inheritable", ctypes.c_uint32)]

    header, data = Header(0x20080522, 0), (Data * 2)()          # _LINUX_CAPABILITY_VERSION_3
    _check(libc.capset(ctypes.byref(header), data), "capset")
    _check(libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "no_new_privs")


def user_namespaces(fd, ours):
    """The user namespace `fd` and its ancestors up to (not including) ours, outermost first.
    bubblewrap run by an unprivileged user nests two: the outer one owns the sandbox's mount,
    network... namespaces; the inner one gives the sandbox its uid. `ours`: our own's inode."""
    chain = [fd]
    while True:
        try:
            parent = fcntl.ioctl(chain[0], NS_GET_PARENT)
        except OSError:             # EPERM: the parent is outside our scope
            break
        if os.fstat(parent).st_ino == ours:
            os.close(parent)
            break
        chain.insert(0, parent)
    return chain


def become(uid):
    """Take the sandbox's uid and gid, inside its user namespace and so outside too: joining a
    namespace changes no credential, and a root grader's fork would still be uid 0 outside
    (it only looks like the sandbox's uid inside, as an unmapped uid does)."""
    os.setresgid(uid, uid, uid)
    os.setresuid(uid, uid, uid)


def cgroups_of(pid):
    """{controllers: cgroup path} of a process, as /proc/<pid>/cgroup lists them ("" is v2's)."""
    with open(f"/proc/{pid}/cgroup") as f:
        return {cs: path for _, cs, path in (ln.split(":", 2) for ln in f.read().splitlines())}


def join_cgroups(ns_pid):
    """Move this process into the memory and pids cgroups of the sandbox whose PID 1 is
    `ns_pid` (a root grader gives each sandbox its own: launch.py put its first process there).
    Joining its cgroup *namespace* moves nothing: without this a fork that joins the sandbox
    would count against no cap of its sandbox. Done from outside, before the mount namespace
    hides /sys/fs/cgroup. A sandbox in the grader's own cgroups (no cgroup made) is left alone."""
    mine, theirs = cgroups_of("self"), cgroups_of(ns_pid)
    for controllers, path in theirs.items():
        names = controllers.split(",")
        base = ("/sys/fs/cgroup" if controllers == "" else "/sys/fs/cgroup/memory" if "memory" in names
                else "/sys/fs/cgroup/pids" if "pids" in names else None)
        if base is None or mine.get(controllers) == path:
            continue
        with open(f"{base}{path}/cgroup.procs", "w") as f:
            f.write(str(os.getpid()))


def join_sandbox(ns_pid, uid=65534, cgroups=True, seccomp=None):
    """Enter the cgroups (`cgroups`: False only for the test that shows what it stops) and
    every namespace of the sandbox whose PID 1 is `ns_pid` (PID: for our children), then take
    its uid `uid` (c.Sandbox.uid; the default is its default), drop every capability and install
    the sandbox's seccomp filter (`seccomp`, hex: Sandbox.seccomp_program(); bubblewrap installs
    it for what it starts, never for us).
    Each namespace is joined as soon as we may: a root grader may join them all from outside; an
    unprivileged one first enters the user namespace that owns them, then the sandbox's own."""
    if cgroups:
        join_cgroups(ns_pid)
    fds = {name: os.open(f"/proc/{ns_pid}/ns/{name}", os.O_RDONLY) for name in CLONE}
    ours = os.stat("/proc/self/ns/user").st_ino          # before /proc is the sandbox's
    left = [name for name in CLONE if name != "user"]

    def join_what_we_may():
        left[:] = [name for name in left if libc.setns(fds[name], CLONE[name]) != 0]

    join_what_we_may()
    for fd in user_namespaces(fds["user"], ours):
        _check(libc.setns(fd, CLONE["user"]), "setns user")
        join_what_we_may()
    if left:
        raise OSError(f"could not join the sandbox's {', '.join(left)} namespaces")
    for fd in fds.values():
        os.close(fd)
    become(uid)
    drop_capabilities()
    if seccomp:
        syscall_filter.install(bytes.fromhex(seccomp))
