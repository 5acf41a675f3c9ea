"""The OS sandbox every run of learner code at grading time goes through: bubblewrap.

Inside, as the learner's code sees it:

- the system (/usr, /etc) and the Python installation are there read-only; so is the course
  library's own folder (learners have it installed anyway);
- the course root, /root and /home are not there at all: no source/, no gradebook, no other
  learner's work. Only the folders a run is given (``writable``) can be written;
- /tmp, /dev and /proc are its own; it has no network (not even loopback to the host);
- it runs as uid ``Sandbox.uid`` (65534, nobody) in new user, PID, IPC, UTS and cgroup
  namespaces: it sees no other process, and when the run's first process ends, or the grader
  that started it dies (``--die-with-parent``), every process inside is killed;
- memory (address space), CPU time and the number of processes are capped with rlimits set
  before bwrap starts, so they hold for every process inside.

Where bubblewrap cannot start (not installed, user namespaces switched off, a locked-down
container), grading refuses with a message naming the fix, unless the teacher opts out with
``c.Sandbox.enabled = False``; then every run warns that learner code runs unconfined.
"""
import functools
import os
import shutil
import subprocess
import sys
import warnings

from traitlets import Bool, Integer, List, Unicode
from traitlets.config import LoggingConfigurable


class SandboxUnavailable(RuntimeError):
    """bubblewrap cannot run here; the message says how to fix it."""


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
    uid = Integer(65534, help="The uid (and gid) learner code runs as inside the sandbox.").tag(config=True)
    memory_limit_mb = Integer(6144, help=(
        "Address-space cap of every process in the sandbox, in MB (0: none). Runaway memory ends "
        "in a MemoryError inside the sandbox, not in the machine's out-of-memory killer.")).tag(config=True)
    cpu_limit_s = Integer(900, help=(
        "CPU seconds each process in the sandbox may use (0: none); the wall-clock limits are "
        "RobustExecute.timeout per cell and IndependentChecks.timeout.")).tag(config=True)
    max_processes = Integer(512, help=(
        "Processes and threads the grading user may have while sandboxed code runs (RLIMIT_NPROC; "
        "the kernel does not apply it to root, so a root grader is not capped; 0: none).")).tag(config=True)
    read_only_paths = List(Unicode(), help=(
        "Extra folders learner code may read (the system, the Python installation and the course "
        "library are always there).")).tag(config=True)

    def warn_if_off(self):
        if not self.enabled:
            msg = ("UNSANDBOXED: c.Sandbox.enabled is False, so learner code runs with the grader's "
                   "powers (files, gradebook, other learners' work).")
            self.log.warning(msg)
            warnings.warn(msg, stacklevel=3)

    def require(self):
        """Raise SandboxUnavailable (with the fix) unless the sandbox works or is switched off."""
        if self.enabled:
            problem = _probe(shutil.which(self.bwrap) or self.bwrap)
            if problem:
                raise SandboxUnavailable(f"the grading sandbox cannot start: {problem}. {FIX}")
        else:
            self.warn_if_off()

    def rlimits(self):
        """The caps as {"as": bytes, "cpu": seconds, "nproc": count}, those that are set."""
        caps = {"as": self.memory_limit_mb * 2 ** 20, "cpu": self.cpu_limit_s, "nproc": self.max_processes}
        return {k: v for k, v in caps.items() if v}

    def limits(self):
        """prlimit arguments for the caps."""
        args = [f"--{name}={value}" for name, value in self.rlimits().items()]
        return ["prlimit", *args, "--"] if args else []

    def wrap(self, argv, writable=(), hidden=(), chdir=None, bwrap_args=()):
        """The command that runs argv in the sandbox. `writable` folders are bound read-write at
        the same path; `hidden` files are replaced by empty read-only ones; `bwrap_args` are
        extra bubblewrap options (e.g. --info-fd)."""
        if not self.enabled:
            return list(argv)
        cmd = self.limits() + [shutil.which(self.bwrap) or self.bwrap,
                               "--unshare-all", "--die-with-parent", "--new-session",
                               "--uid", str(self.uid), "--gid", str(self.uid),
                               "--cap-drop", "ALL", "--hostname", "sandbox", *bwrap_args]
        # the private /tmp first: what is bound after it (a venv or a course under /tmp) stays
        cmd += ["--tmpfs", "/tmp", "--proc", "/proc", "--dev", "/dev"]
        cmd += _system_binds()
        for path in python_paths() + list(self.read_only_paths):
            cmd += ["--ro-bind", path, path]
        for path in writable:
            cmd += ["--bind", path, path]
        for path in hidden:
            cmd += ["--ro-bind", "/dev/null", path]
        cmd += ["--chdir", chdir or (writable[0] if writable else "/tmp"), "--unsetenv", "JPY_PARENT_PID"]
        return cmd + ["--"] + list(argv)


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


@functools.lru_cache(maxsize=None)
def _probe(bwrap):
    """None if bwrap can start a sandbox here, else what went wrong (cached per process)."""
    if not (os.path.isfile(bwrap) and os.access(bwrap, os.X_OK)):
        return f"{bwrap!r} not found"
    try:
        proc = subprocess.run([bwrap, "--unshare-all", "--die-with-parent", "--uid", "65534",
                               *_system_binds(), "--proc", "/proc", "--", "/bin/true"],
                              capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"bubblewrap did not run ({exc})"
    if proc.returncode != 0:
        return f"bubblewrap failed: {proc.stderr.strip()[:300] or f'exit {proc.returncode}'}"
    return None
