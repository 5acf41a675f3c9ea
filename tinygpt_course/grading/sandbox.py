"""The OS sandbox every run of learner code at grading time goes through: bubblewrap.

Inside, as the learner's code sees it:

- the system (/usr, /etc) and the Python installation are there read-only; so is the course
  library's own folder (learners have it installed anyway);
- the course root, /root and /home are not there at all: no source/, no gradebook, no other
  learner's work. No host folder is writable (``writable`` exists for callers that want one;
  nothing of the course's passes it): learner code writes only the sandbox's own /tmp and
  /dev/shm, tmpfs of a fixed size (nosuid, nodev), gone with the sandbox; /dev is read-only;
- /tmp, /dev and /proc are its own; it has no network (not even loopback to the host);
- it runs as uid ``Sandbox.uid`` (65534, nobody) in new user, PID, IPC, UTS and cgroup
  namespaces, and outside as a uid of its grading worker's own (``Sandbox.worker``, k): with a
  root grader ``Sandbox.uid`` + k (launch.py drops to it before bubblewrap starts), with a
  teacher account its first subordinate uid + k: nothing it starts or writes belongs to root or
  the teacher, and RLIMIT_NPROC applies per worker. It
  sees no other process, cannot make user namespaces, and when the run's first process ends, or
  the grader that started it dies (``--die-with-parent``), every process inside is killed;
- the calls that reach kernel objects no namespace covers (kernel keyrings: ``add_key``,
  ``keyctl``, ``request_key``; ``bpf``, ``perf_event_open``, ``userfaultfd``, io_uring) are
  refused by a seccomp filter installed before learner code runs (``Sandbox.denied_syscalls``,
  tinygpt_course.grading.seccomp), so nothing a learner makes there outlives the sandbox;
- memory (address space), CPU time, file size and the number of processes are capped with
  rlimits set before bwrap starts, so they hold for every process inside; where the grader can
  make cgroups (root), each sandbox has a memory cgroup (files in its tmpfs and shared memory
  count) and a pids cgroup of its own.

A grader that is not root cannot give learner code another uid than its own: grading refuses
then (the message names the fix), unless ``c.Sandbox.allow_grader_uid`` accepts it.

Where bubblewrap cannot start (not installed, user namespaces switched off, a locked-down
container), grading refuses with a message naming the fix, unless the teacher opts out with
``c.Sandbox.enabled = False``; then every run warns that learner code runs unconfined.
"""
import atexit
import json
import os
import shutil
import subprocess
import sys
import time
import warnings

from traitlets import Bool, Integer, List, Unicode, default
from traitlets.config import LoggingConfigurable

from . import seccomp


class SandboxUnavailable(RuntimeError):
    """bubblewrap cannot run here; the message says how to fix it."""


STAGE = next((p for p in ("/mnt", "/srv", "/media", "/opt") if os.path.isdir(p)), "/mnt")   # launch.py
LAUNCH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "launch.py")
GRADER_UID = ("learner code would run as your own uid {uid} outside the sandbox. Give your account "
              "subordinate ids (as root: `usermod --add-subuids 100000-165535 --add-subgids 100000-165535 "
              "<you>`, and `apt-get install uidmap` for newuidmap): learner code then runs as the first of "
              "them; or grade as root (learner code then runs as c.Sandbox.uid = {sandbox_uid}); or accept "
              "your own uid with c.Sandbox.allow_grader_uid = True in nbgrader_config.py (README 'The "
              "grading sandbox').")
NEWUIDMAP = ("your account has subordinate ids, but newuidmap/newgidmap cannot use them here: {why}. So learner "
             "code would run as your own uid {uid} outside the sandbox. In a container the set-uid newuidmap needs "
             "privilege escalation allowed and CAP_SETUID, CAP_SETGID in the bounding set: in Kubernetes, on the "
             "grading container only, `allowPrivilegeEscalation: true` and `capabilities: {{drop: [ALL], add: "
             "[SETUID, SETGID]}}` (hub/z2jh/grade-job.yaml; hub/README.md 'Pod Security'); or grade as root; or "
             "accept your own uid with c.Sandbox.allow_grader_uid = True in nbgrader_config.py.")
WORKER_ENV = "TINYGPT_GRADING_WORKER"       # set by tinygpt-grade-class in each of its workers: 0, 1, ...
TOO_FEW_SUBIDS = ("grading worker {worker} would run learner code as subordinate uid {first} + {worker}, but your "
                  "account has {count} subordinate uids (/etc/subuid) and {gcount} gids (/etc/subgid) from {first}: "
                  "tinygpt-grade-class gives each of its --jobs workers a uid of its own (the first subordinate id + "
                  "the worker's index), so --jobs N needs N of each. Give the account a larger range (as root: "
                  "`usermod --add-subuids 100000-165535 --add-subgids 100000-165535 <you>`; on Kubernetes "
                  "hub/z2jh/roster.py --subids gives each teacher 1000), or grade with fewer --jobs.")
TAKEN_UID = ("grading worker {worker} would run learner code as c.Sandbox.uid + {worker} = {uid}, which is {who}: a "
             "root grader gives each of tinygpt-grade-class's --jobs workers a uid of its own (c.Sandbox.uid + the "
             "worker's index), and those after c.Sandbox.uid must be no account's (/etc/passwd) and in no "
             "account's subordinate range (/etc/subuid). Set c.Sandbox.uid in nbgrader_config.py to the first of "
             "--jobs unused uids, or grade with fewer --jobs.")
FIX = ("Install bubblewrap (Debian/Ubuntu: `apt-get install bubblewrap`) and allow unprivileged user "
       "namespaces (sysctl kernel.unprivileged_userns_clone=1 and user.max_user_namespaces > 0; in a "
       "container or Kubernetes pod: a seccomp/AppArmor profile that allows unshare and mount, see "
       "README 'Grading sandbox'). To grade without the sandbox anyway (learner code then runs with "
       "your powers), set c.Sandbox.enabled = False in nbgrader_config.py.")


def _system_binds():
    """bwrap arguments that show the system read-only, mirroring /bin, /lib... as they are."""
    args = []
    for path in ("/usr", "/etc", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"):
        if os.path.islink(path):
            args += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            args += ["--ro-bind", path, path]
    return args


def python_paths():
    """Folders the sandboxed Python needs: its prefixes, its library folders and the course
    library's own folder. Not sys.path: it can hold the folder the grader was started in."""
    import sysconfig

    import tinygpt_course
    paths = {sys.prefix, sys.base_prefix, os.path.dirname(os.path.realpath(sys.executable)),
             os.path.dirname(os.path.abspath(tinygpt_course.__file__))}
    paths |= {sysconfig.get_path(k) for k in ("stdlib", "platstdlib", "purelib", "platlib")}
    paths = {p for p in paths if p and os.path.isdir(p)}
    return sorted(p for p in paths if not p.startswith(("/usr/", "/etc/")) and p not in ("/usr", "/"))


class Sandbox(LoggingConfigurable):
    """How learner code is confined at grading time (c.Sandbox.* in nbgrader_config.py)."""

    enabled = Bool(True, help=(
        "Run learner code (nbgrader's kernel and the independent re-run) inside bubblewrap. "
        "False is an explicit opt-out: learner code then runs with the grader's powers, and every "
        "run logs a warning.")).tag(config=True)
    bwrap = Unicode("bwrap", help="The bubblewrap command (a name on PATH or a path).").tag(config=True)
    uid = Integer(65534, help=(
        "The uid (and gid) learner code runs as, inside the sandbox and, with a root grader, outside it "
        "too: a root grader becomes this uid + the grading worker's index (no supplementary groups) "
        "before bubblewrap starts, so nothing learner code starts or writes belongs to root. "
        "tinygpt-grade-class --jobs N: workers 0..N-1 run as uid..uid+N-1 outside (65534, 65535, "
        "65536 by default), and those after uid must be no account's uid nor in a subordinate range "
        "(grading refuses otherwise). Never the grader's or a teacher's uid.")).tag(config=True)
    worker = Integer(help=(
        "The index of the grading worker this process is (0 for a plain `nbgrader autograde`; "
        "tinygpt-grade-class sets $TINYGPT_GRADING_WORKER to 0..--jobs-1 in each of its workers). "
        "Learner code of worker k runs as uid + k (a root grader) or the first subordinate uid + k "
        "(a teacher account) outside, so that where there is no pids cgroup, RLIMIT_NPROC, which "
        "Linux counts over every process of a uid, is per worker: one learner's process flood "
        "starves only its own worker's sandbox. Read from the environment, not the config."))
    separate_workers = Bool(True, help=(
        "Keep concurrent grading workers' process caps apart where there is no pids cgroup: each "
        "worker's learner code runs as a uid of its own outside (see worker), and a teacher "
        "account's RLIMIT_NPROC is set inside the sandbox's own user namespace (Linux 5.14+ counts "
        "it per user namespace, up to the namespace's owner: set outside, it would count every "
        "process of the teacher's, every sandbox's together). False is the defence off (every "
        "worker on one uid, the cap counted in the grader's namespace): one learner's flood can "
        "then keep a concurrent learner's sandbox from starting.")).tag(config=True)
    memory_limit_mb = Integer(6144, help=(
        "Address-space cap of every process in the sandbox, in MB (0: none). Runaway memory ends "
        "in a MemoryError inside the sandbox, not in the machine's out-of-memory killer.")).tag(config=True)
    cpu_limit_s = Integer(900, help=(
        "CPU seconds each process in the sandbox may use (0: none); the wall-clock limits are "
        "RobustExecute.timeout per cell and IndependentChecks.timeout.")).tag(config=True)
    max_processes = Integer(512, help=(
        "Processes and threads of each sandbox on its own, where there is a pids cgroup (a root "
        "grader); where there is none, of the sandbox's uid (RLIMIT_NPROC, counted over every process "
        "of that uid on the machine, every sandbox's together) (0: none).")).tag(config=True)
    file_size_limit_mb = Integer(256, help=(
        "The largest file a process in the sandbox may write, in MB (RLIMIT_FSIZE; 0: none).")).tag(config=True)
    tmp_size_mb = Integer(512, help=(
        "Size of the sandbox's /tmp (its home, the kernel's folder and connection file), a tmpfs that "
        "goes with the sandbox, in MB. Counted by the sandbox's memory cgroup where there is one, "
        "on top of memory_limit_mb where not.")).tag(config=True)
    shm_size_mb = Integer(64, help="Size of the sandbox's /dev/shm (a tmpfs), in MB.").tag(config=True)
    use_cgroup = Bool(True, help=(
        "Give each sandbox a memory and a pids cgroup of its own (memory_limit_mb and max_processes "
        "for all its processes together, files and shared memory counted) where the grader can make "
        "one (a root grader on cgroup v1, or v2 with the controllers delegated). Where it cannot, "
        "the rlimits and the tmpfs sizes are the caps.")).tag(config=True)
    allow_grader_uid = Bool(False, help=(
        "A grader that is not root cannot drop learner code to another uid: its sandbox's processes "
        "and files then belong to the grader's own uid outside. Grading refuses that unless this is "
        "True (an explicit opt-out, warned at every run); README 'The grading sandbox' says what a "
        "teacher account needs.")).tag(config=True)
    read_only_paths = List(Unicode(), help=(
        "Extra folders learner code may read (the system, the Python installation and the course "
        "library are always there).")).tag(config=True)
    denied_syscalls = List(Unicode(), list(seccomp.DENIED), help=(
        "System calls every process in the sandbox is refused (EPERM), by a seccomp filter installed "
        "before learner code runs (bubblewrap's --seccomp; a kernel forked from the template installs "
        "it as it joins): those an unprivileged process may make that no namespace covers, kernel "
        "keyrings first (tinygpt_course/grading/seccomp.py says which and why); calls of another ABI "
        "(32-bit, x32) are refused whole. []: no filter (the defence off).")).tag(config=True)

    def seccomp_program(self):
        """The seccomp filter, hex-encoded (a job's and launch.py's spec are JSON), or None."""
        return seccomp.program(self.denied_syscalls).hex() if self.denied_syscalls else None

    @default("worker")
    def _worker_default(self):
        value = os.environ.get(WORKER_ENV, "").strip()
        return int(value) if value.isdigit() else 0

    def _index(self, worker=None):
        return (self.worker if worker is None else worker) if self.separate_workers else 0

    def outside_ids(self, worker=None):
        """(uid, gid) the sandbox's processes and files have outside it for grading worker
        `worker` (this process's by default): ``uid`` + worker for a root grader (it becomes it
        before bubblewrap starts), the grader's first subordinate uid and gid + worker (/etc/subuid,
        with newuidmap), else the grader's own, which only ``allow_grader_uid`` accepts
        (:meth:`require` refuses it otherwise). Raises SandboxUnavailable (naming the fix) where
        the worker's uid would be an account's, root's, or past the subordinate range."""
        k = self._index(worker)
        if os.geteuid() == 0:
            uid = self.uid + k
            who = "root" if uid == 0 else _uid_taken(uid) if k else None
            if who:
                raise SandboxUnavailable(f"the grading sandbox refuses to start: "
                                         f"{TAKEN_UID.format(worker=k, uid=uid, who=who)}")
            return uid, uid
        ranges = subordinate_ranges()
        if not ranges:
            return os.geteuid(), os.getegid()
        (first, count), (gfirst, gcount) = ranges
        if k >= min(count, gcount):
            raise SandboxUnavailable(f"the grading sandbox refuses to start: "
                                     f"{TOO_FEW_SUBIDS.format(worker=k, first=first, count=count, gcount=gcount)}")
        return first + k, gfirst + k

    def check_workers(self, jobs):
        """Raise SandboxUnavailable (naming the fix) unless each of `jobs` workers has a uid of its own."""
        if self.enabled:
            for k in range(jobs):
                self.outside_ids(k)

    def warn_if_off(self):
        if not self.enabled:
            msg = ("UNSANDBOXED: c.Sandbox.enabled is False, so learner code runs with the grader's "
                   "powers (files, gradebook, other learners' work).")
            self.log.warning(msg)
            warnings.warn(msg, stacklevel=3)

    def require(self):
        """Raise SandboxUnavailable (with the fix) unless the sandbox works or is switched off."""
        if self.enabled:
            if self.outside_uid() == os.geteuid():
                why = newuidmap_blocked() if _subordinate_entries() else None
                msg = (NEWUIDMAP.format(why=why, uid=os.geteuid()) if why else
                       GRADER_UID.format(uid=os.geteuid(), sandbox_uid=self.uid))
                if not self.allow_grader_uid:
                    raise SandboxUnavailable(f"the grading sandbox refuses to start: {msg}")
                self.log.warning("c.Sandbox.allow_grader_uid: %s", msg)
            problem = _probe(self)
            if problem:
                raise SandboxUnavailable(f"the grading sandbox cannot start: {problem}. {FIX}")
        else:
            self.warn_if_off()

    def rlimits(self):
        """The caps as {"as": bytes, "cpu": seconds, "nproc": count, "fsize": bytes}, those set.
        Where each sandbox has a pids cgroup of its own, that is the process cap and RLIMIT_NPROC
        is not set: it counts every process of the uid on the machine, every sandbox's together,
        so one learner's flood would stop the next sandbox from starting (tests/test_sandbox.py)."""
        nproc = 0 if self.cgroup is not None else self.max_processes
        caps = {"as": self.memory_limit_mb * 2 ** 20, "cpu": self.cpu_limit_s, "nproc": nproc,
                "fsize": self.file_size_limit_mb * 2 ** 20}
        return {k: v for k, v in caps.items() if v}

    def outside_uid(self):
        """The uid the sandbox's processes and files have outside it (:meth:`outside_ids`)."""
        return self.outside_ids()[0]

    def _drop_to(self):
        """The uid a root grader becomes before bubblewrap starts (None: not root, it cannot)."""
        return self.outside_uid() if os.geteuid() == 0 else None

    def _subordinate(self):
        """[uid, gid, outer uid, outer gid, newuidmap, newgidmap] for launch.py, for a grader with
        subordinate ids (this worker's: :meth:`outside_ids`): the tools are the ones found here,
        on the grader's PATH."""
        if os.geteuid() == 0 or not subordinate_ids():
            return None
        return [self.uid, self.uid, *self.outside_ids(), shutil.which("newuidmap"), shutil.which("newgidmap")]

    def wrap(self, argv, writable=(), hidden=(), chdir=None, bwrap_args=(), files=None):
        """The command that runs argv in the sandbox. `writable` folders are bound read-write at
        the same path (nothing of the course's uses it: learner code writes only the sandbox's
        own size-capped tmpfs); `hidden` files are replaced by empty read-only ones; `files`
        ({path: text}) are copied in before anything runs; `bwrap_args` are extra bubblewrap
        options (e.g. --info-fd). The command starts with :mod:`launch` (cgroups, rlimits, the
        uid drop, the folders opened for bubblewrap), which then becomes bubblewrap."""
        if not self.enabled:
            return list(argv)
        cmd = [shutil.which(self.bwrap) or self.bwrap,
               "--unshare-all", "--unshare-user", "--disable-userns", "--die-with-parent", "--new-session",
               "--uid", str(self.uid), "--gid", str(self.uid),
               "--cap-drop", "ALL", "--hostname", "sandbox", *bwrap_args]
        program = self.seccomp_program()
        if program:
            cmd += ["--seccomp", "{seccomp}"]       # launch.py puts the program in a memfd
        # every tmpfs has a size (nosuid,nodev, as bubblewrap mounts them); /dev is read-only
        # but for its own /dev/shm; what is bound after /tmp (a venv under /tmp) stays
        cmd += ["--size", str(self.tmp_size_mb * 2 ** 20), "--tmpfs", "/tmp", "--proc", "/proc", "--dev", "/dev",
                "--size", str(self.shm_size_mb * 2 ** 20), "--tmpfs", "/dev/shm", "--remount-ro", "/dev"]
        cmd += _system_binds()
        shown = python_paths() + list(self.read_only_paths)
        staged = self._drop_to() is not None        # a root grader: bubblewrap binds from launch.py's stage
        for i, path in enumerate(shown):
            cmd += ["--ro-bind", f"{STAGE}/{i}" if staged else path, path]
        for i, path in enumerate(writable, len(shown)):
            cmd += ["--bind", f"{STAGE}/{i}" if staged else path, path]
        for path in hidden:
            cmd += ["--ro-bind", "/dev/null", path]
        for i, path in enumerate(files or {}):
            # the folder open to others: a grader that is not root reaches a socket there (the kernel's)
            cmd += ["--perms", "0755", "--dir", os.path.dirname(path), "--perms", "0600", "--file", f"{{fd:{i}}}", path]
        if chdir and chdir.startswith("/tmp/"):
            cmd += ["--dir", chdir]
        cmd += ["--remount-ro", "/"]            # bubblewrap's root is a tmpfs too, of no size
        cmd += ["--chdir", chdir or (writable[0] if writable else "/tmp"), "--setenv", "JPY_PARENT_PID", "1"]
        spec = {"argv": cmd + ["--"] + list(argv), "files": list((files or {}).values()), "seccomp": program,
                "limits": self.rlimits(), "limits_first": not self.separate_workers, "cgroups": self.cgroup.procs() if self.cgroup else [],
                "uid": self._drop_to(), "subordinate": self._subordinate(), "stage": shown + list(writable) if staged else [], "stage_dir": STAGE}
        return [sys.executable, "-I", "-S", LAUNCH, json.dumps(spec)]

    @property
    def cgroup(self):
        """This process's :class:`Cgroups` maker, or None where none can be made (a grader that
        is not root, or use_cgroup False): then the tmpfs sizes bound what files hold."""
        if not self.use_cgroup or os.geteuid() != 0:
            return None
        return Cgroups.get(self.memory_limit_mb * 2 ** 20, self.max_processes)


def sandbox_env(extra=None):
    """The environment learner code gets: no secrets of the grader's, a writable home in /tmp."""
    keep = ("LANG", "LC_ALL", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE",
            "MPLBACKEND", "TZ")
    env = {k: os.environ[k] for k in keep if k in os.environ}
    env.update(PATH=os.pathsep.join([os.path.dirname(sys.executable), "/usr/local/bin", "/usr/bin", "/bin"]),
               HOME="/tmp", TMPDIR="/tmp", MPLCONFIGDIR="/tmp/matplotlib", IPYTHONDIR="/tmp/ipython",
               JUPYTER_RUNTIME_DIR="/tmp/jupyter", PYTHONDONTWRITEBYTECODE="1")
    env.setdefault("LANG", "C.UTF-8")
    env.update(extra or {})
    return env


def subordinate_ids():
    """(first subordinate uid, first subordinate gid) of the grader's account where it has both,
    newuidmap/newgidmap are installed and can work here (:func:`newuidmap_blocked`), else None."""
    ranges = subordinate_ranges()
    return (ranges[0][0], ranges[1][0]) if ranges else None


def subordinate_ranges():
    """((first uid, count), (first gid, count)) of the grader's account where it has both and
    newuidmap/newgidmap can work here, else None."""
    if not (shutil.which("newuidmap") and shutil.which("newgidmap")) or newuidmap_blocked():
        return None
    return _subordinate_ranges()


def _subordinate_entries():
    """(first subordinate uid, first subordinate gid) of the grader's account in /etc/subuid and
    /etc/subgid (by name or uid), else None."""
    ranges = _subordinate_ranges()
    return (ranges[0][0], ranges[1][0]) if ranges else None


def _subid_rows(table):
    """[(owner, first, count)] of /etc/subuid or /etc/subgid (None: unreadable)."""
    try:
        rows = [ln.strip().split(":") for ln in open(table) if ln.count(":") == 2]
    except OSError:
        return None
    return [(name, int(start), int(count)) for name, start, count in rows if start.isdigit() and count.isdigit()]


def _subordinate_ranges():
    """((first uid, count), (first gid, count)): the grader's account's first range in
    /etc/subuid and in /etc/subgid (by name or uid), else None."""
    import pwd
    try:
        names = {pwd.getpwuid(os.geteuid()).pw_name, str(os.geteuid())}
    except KeyError:
        names = {str(os.geteuid())}
    found = []
    for table in ("/etc/subuid", "/etc/subgid"):
        first = next(((start, count) for name, start, count in _subid_rows(table) or () if name in names and count > 0),
                     None)
        if first is None:
            return None
        found.append(first)
    return tuple(found)


def _uid_taken(uid):
    """Whose `uid` is ("the uid of account NAME", "in NAME's subordinate range"), or None if no one's."""
    import pwd
    try:
        return f"the uid of account {pwd.getpwuid(uid).pw_name!r}"
    except KeyError:
        pass
    for table in ("/etc/subuid", "/etc/subgid"):
        for name, start, count in _subid_rows(table) or ():
            if start <= uid < start + count:
                return f"in {name}'s subordinate range ({table})"
    return None


CAP_SETGID, CAP_SETUID = 6, 7


def newuidmap_blocked():
    """Why the set-uid newuidmap/newgidmap would get no privilege in this process, or None: they
    write a user namespace's uid_map/gid_map with CAP_SETUID/CAP_SETGID, which an exec gains only
    without no_new_privs (Kubernetes: allowPrivilegeEscalation false sets it) and only for the
    capabilities in the bounding set (Kubernetes: capabilities drop ALL empties it)."""
    try:
        status = dict(ln.split(":", 1) for ln in open("/proc/self/status") if ":" in ln)
    except OSError:
        return None
    if status.get("NoNewPrivs", "0").strip() == "1":
        return ("this process has no_new_privs set (Kubernetes: allowPrivilegeEscalation: false), so a set-uid "
                "program gets no privilege")
    bounding = int(status.get("CapBnd", "0").strip() or "0", 16)
    missing = [name for bit, name in ((CAP_SETUID, "CAP_SETUID"), (CAP_SETGID, "CAP_SETGID")) if not bounding >> bit & 1]
    if missing:
        return (f"the capability bounding set lacks {' and '.join(missing)} (Kubernetes: capabilities drop ALL "
                f"with no add), so newuidmap/newgidmap cannot gain them")
    return None


class Cgroups:
    """A memory and a pids cgroup per sandbox, below the grader's own (cgroup v1: the memory and
    pids hierarchies; v2: where the grader's cgroup delegates both controllers to its children).
    Memory counts every page the sandbox's processes hold, tmpfs files and shared memory
    included; the sandbox's processes are counted apart from other sandboxes'. A cgroup is
    removed once empty (its sandbox gone), at the next sandbox or at exit."""

    _made = {}
    _n = 0

    def __init__(self, memory, pids):
        self.memory, self.pids, self.mine = memory, pids, []
        self.roots = self._roots()

    @classmethod
    def get(cls, memory, pids):
        key = (os.getpid(), memory, pids)
        if key not in cls._made:
            cls._made[key] = cls(memory, pids)
            atexit.register(cls._made[key].sweep, wait=2)
        made = cls._made[key]
        return made if made.roots else None

    @classmethod
    def sweep_mine(cls, wait=2):
        """Remove this process's cgroups, waiting up to `wait` seconds for their sandboxes to
        end: what atexit does, for a process that leaves with os._exit (a class-grading worker)."""
        for (pid, *_), made in cls._made.items():
            if pid == os.getpid():
                made.sweep(wait)

    @staticmethod
    def _roots():
        """{controller: the grader's own cgroup folder} where children can be made, else {}."""
        try:
            lines = [ln.split(":", 2) for ln in open("/proc/self/cgroup").read().splitlines()]
        except OSError:
            return {}
        v1 = {c: path for _, cs, path in lines for c in cs.split(",") if c in ("memory", "pids")}
        if len(v1) == 2:
            roots = {c: f"/sys/fs/cgroup/{c}{v1[c]}" for c in v1}
        else:
            v2 = next((path for n, cs, path in lines if n == "0" and cs == ""), None)
            base = f"/sys/fs/cgroup{v2}" if v2 is not None else ""
            try:
                delegated = open(os.path.join(base, "cgroup.subtree_control")).read().split()
            except OSError:
                return {}
            if not {"memory", "pids"} <= set(delegated):
                return {}
            roots = {"unified": base}
        return roots if all(os.access(r, os.W_OK) for r in roots.values()) else {}

    def procs(self):
        """Make the next sandbox's cgroups; the cgroup.procs files its first process joins."""
        if not Cgroups._n:
            self.sweep_dead()
        self.sweep()
        Cgroups._n += 1
        name = f"tinygpt-sandbox-{os.getpid()}-{Cgroups._n}"
        made = []
        for controller, root in self.roots.items():
            path = os.path.join(root, name)
            os.mkdir(path)
            self.mine.append(path)
            settings = ([("memory.max", self.memory), ("memory.swap.max", 0), ("pids.max", self.pids or "max")]
                        if controller == "unified" else
                        [("memory.limit_in_bytes", self.memory), ("memory.memsw.limit_in_bytes", self.memory)]
                        if controller == "memory" else [("pids.max", self.pids or "max")])
            for knob, value in settings:
                if os.path.exists(os.path.join(path, knob)):
                    with open(os.path.join(path, knob), "w") as f:
                        f.write(str(value))
            made.append(os.path.join(path, "cgroup.procs"))
        return made

    def sweep(self, wait=0):
        """Remove this process's cgroups whose sandbox has ended (rmdir fails on a busy one);
        at exit, wait up to `wait` seconds for the last ones to empty."""
        deadline = time.monotonic() + wait
        while self.mine:
            self._sweep_once()
            if not self.mine or time.monotonic() > deadline:
                break
            time.sleep(0.05)

    def sweep_dead(self):
        """Remove the empty cgroups of graders that have ended without removing theirs (a killed
        grader, a class-grading worker leaving with os._exit, a re-run server outliving atexit)."""
        for root in self.roots.values():
            for name in os.listdir(root):
                parts = name.split("-")
                if name.startswith("tinygpt-sandbox-") and len(parts) == 4 and parts[2].isdigit() \
                        and not os.path.exists(f"/proc/{parts[2]}"):
                    try:
                        os.rmdir(os.path.join(root, name))
                    except OSError:
                        pass        # not empty: a sandbox of it still runs

    def _sweep_once(self):
        for path in list(self.mine):
            try:
                os.rmdir(path)
            except FileNotFoundError:
                pass
            except OSError:
                continue
            self.mine.remove(path)


_probed = {}


def _probe(sandbox):
    """None if the sandbox starts here and runs this Python, else what went wrong (cached per
    process and setting)."""
    bwrap = shutil.which(sandbox.bwrap) or sandbox.bwrap
    key = (os.getpid(), bwrap, sandbox.outside_ids(), tuple(sandbox.read_only_paths))
    if key in _probed:
        return _probed[key]
    if not (os.path.isfile(bwrap) and os.access(bwrap, os.X_OK)):
        return f"{bwrap!r} not found"
    try:
        proc = subprocess.run(sandbox.wrap([sys.executable, "-I", "-c", "import tinygpt_course"]),
                              capture_output=True, text=True, timeout=60, env=sandbox_env())
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"bubblewrap did not run ({exc})"
    problem = None
    if proc.returncode != 0:
        problem = (f"bubblewrap failed: {proc.stderr.strip()[-300:] or f'exit {proc.returncode}'} (every folder "
                   f"it shows, the Python installation, the course library and c.Sandbox.read_only_paths, "
                   f"must be readable by uid {sandbox.outside_uid()}: a venv from /usr/bin/python3 and a "
                   f"course outside a private folder such as /root)")
    _probed[key] = problem
    return problem
