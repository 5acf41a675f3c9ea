"""A learner's server is one unit: a cgroup per user, made by the hub's spawner (one machine).

Every process of a user's server (the server, each kernel, each terminal and whatever they start,
`setsid` and `nohup` included: a cgroup cannot be left by forking or a new session) is in the
cgroup `tinygpt-learners/<user>` made under the hub's own cgroup (so learners stay inside whatever
limits the machine puts on the hub):

- memory: the whole server, all kernels and children together, is capped (memory.limit_in_bytes /
  memory.max, swap included; /dev/shm files count, as tmpfs pages are charged to whoever writes them);
  past it the kernel's OOM killer ends the largest process in that learner's cgroup (usually the
  kernel that allocated: JupyterLab says the kernel died and restarts it; the saved notebook and the
  other learners are untouched);
- pids: at most `max_processes` processes and threads (a fork bomb stays in the learner's cgroup);
- on stop ("Stop My Server", a hub admin's stop, the idle culler: JupyterHub calls the spawner's
  stop for each), every process in the cgroup is killed (frozen first, so none can fork away:
  v1 freezer, v2 cgroup.freeze), the user's files in /dev/shm are removed, the cgroup is removed.
  A server that died on its own leaves its cgroup: the next start of that user kills what is left.

cgroup v1 (memory, pids and freezer hierarchies at /sys/fs/cgroup/<controller>, as on this
machine and CI) or v2 (one hierarchy; memory and pids enabled for the subtree), whichever the
machine has. Where systemd runs the machine, jupyterhub-systemdspawner does the same with a
transient unit per user (MemoryMax=, TasksMax=); see hub/README.md.
"""
import os
import pwd
import signal
import stat
import time

ROOT = "/sys/fs/cgroup"
GROUP = "tinygpt-learners"


def _write(path, value):
    with open(path, "w") as f:
        f.write(str(value))


def _own_cgroup(controller):
    """This process's cgroup path in a v1 controller's hierarchy ('' for v2's unified one)."""
    with open("/proc/self/cgroup") as f:
        for line in f:
            _, names, path = line.rstrip("\n").split(":", 2)
            if controller in names.split(",") if controller else names == "":
                return path
    return "/"


def version(root=ROOT):
    """2, 1, or None when neither is usable (no memory controller)."""
    if os.path.exists(os.path.join(root, "cgroup.controllers")):
        return 2
    if os.path.isdir(os.path.join(root, "memory")) and os.path.isdir(os.path.join(root, "pids")):
        return 1
    return None


def problem(root=ROOT):
    """Why a learner's server cannot be made a unit on this machine (None: it can): no memory and
    pids controllers, or a cgroup file system the hub may not write (a container whose runtime
    mounts /sys/fs/cgroup read-only: Docker without --cgroupns=private and write access,
    systemd-nspawn's v1 controllers, LXC)."""
    v = version(root)
    if v is None:
        return f"{root} has no memory and pids cgroup controllers (neither v1 nor v2)"
    cg = LearnerCgroup("-", root=root)
    parents = {os.path.dirname(os.path.dirname(d)) for d in cg.dirs.values()}
    for d in sorted(parents):
        if not os.access(d, os.W_OK):
            return f"{d} cannot be written by the hub (a read-only cgroup file system: is this a container?)"
    if v == 2:
        with open(os.path.join(os.path.dirname(cg.base), "cgroup.controllers")) as f:
            missing = {"memory", "pids"} - set(f.read().split())
        if missing:
            return (f"cgroup v2: the {' and '.join(sorted(missing))} controller(s) are not available in "
                    f"{os.path.dirname(cg.base)} (not delegated to the hub's parent cgroup)")
    return None


class LearnerCgroup:
    """The cgroup(s) of one user's server."""

    def __init__(self, user, memory_bytes=0, max_processes=0, root=ROOT):
        """root: where the cgroup file system is mounted (/sys/fs/cgroup; a machine in hybrid mode
        also has a v2 hierarchy at /sys/fs/cgroup/unified, without the memory and pids controllers)."""
        self.user, self.memory_bytes, self.max_processes = user, memory_bytes, max_processes
        self.version = version(root)
        if self.version == 1:
            self.dirs = {c: os.path.join(root, c, _own_cgroup(c).lstrip("/"), GROUP, user)
                         for c in ("memory", "pids", "freezer") if os.path.isdir(os.path.join(root, c))}
        elif self.version == 2:
            # v2 allows no processes in a cgroup whose children have controllers: a sibling of the hub's
            parent = os.path.dirname(_own_cgroup("").rstrip("/")) or "/"
            self.base = os.path.join(root, parent.lstrip("/"), GROUP)
            self.dirs = {"unified": os.path.join(self.base, user)}
        else:
            self.dirs = {}

    # --- before the server starts (in the hub, as root) -----------------------------------------
    def create(self):
        """Make the cgroup with its limits; anything left in it from an earlier server is killed."""
        if not self.dirs:
            return
        self.kill()
        if self.version == 2:
            os.makedirs(self.base, exist_ok=True)
            parent_ctl = os.path.join(os.path.dirname(self.base), "cgroup.subtree_control")
            for ctl in (parent_ctl, os.path.join(self.base, "cgroup.subtree_control")):
                try:
                    _write(ctl, "+memory +pids")
                except OSError:
                    pass
        for d in self.dirs.values():
            os.makedirs(d, exist_ok=True)
        if self.version == 1:
            if "memory" in self.dirs:
                limit = self.memory_bytes or -1
                _write(os.path.join(self.dirs["memory"], "memory.limit_in_bytes"), limit)
                try:      # swap too (memsw >= limit, so after it); absent where swap accounting is off
                    _write(os.path.join(self.dirs["memory"], "memory.memsw.limit_in_bytes"), limit)
                except OSError:
                    pass
            if "pids" in self.dirs:
                _write(os.path.join(self.dirs["pids"], "pids.max"), self.max_processes or "max")
        else:
            d = self.dirs["unified"]
            # a limit asked for where its controller is not enabled (not delegated to the hub's
            # parent, or bound to a v1 hierarchy on a hybrid machine) is an error, not a silent no-op
            for knob, value, controller in (("memory.max", self.memory_bytes, "memory"),
                                            ("pids.max", self.max_processes, "pids")):
                if os.path.exists(os.path.join(d, knob)):
                    _write(os.path.join(d, knob), value or "max")
                elif value:
                    raise RuntimeError(f"cgroup v2: the {controller} controller is not enabled in {self.base} "
                                       f"(cgroup.subtree_control of its parent), so {self.user}'s {knob} cannot "
                                       f"be set: delegate it, or set TINYGPT_LEARNER_CGROUP=off")
            try:        # absent where swap accounting is off
                _write(os.path.join(d, "memory.swap.max"), 0 if self.memory_bytes else "max")
            except OSError:
                pass

    def enter(self):
        """Move the calling process in (the spawner's preexec_fn, in the child, before it drops
        to the user and execs the server): everything it starts is in the cgroup too."""
        pid = os.getpid()
        for d in self.dirs.values():
            _write(os.path.join(d, "cgroup.procs"), pid)

    # --- after the server stopped -----------------------------------------------------------------
    def pids(self):
        found = set()
        for d in self.dirs.values():
            try:
                with open(os.path.join(d, "cgroup.procs")) as f:
                    found.update(int(p) for p in f.read().split())
            except FileNotFoundError:
                pass
        return sorted(found)

    def _freeze(self, frozen):
        if self.version == 1 and "freezer" in self.dirs and os.path.isdir(self.dirs["freezer"]):
            _write(os.path.join(self.dirs["freezer"], "freezer.state"), "FROZEN" if frozen else "THAWED")
        elif self.version == 2 and os.path.isdir(self.dirs["unified"]):
            _write(os.path.join(self.dirs["unified"], "cgroup.freeze"), 1 if frozen else 0)

    def kill(self, timeout=30):
        """SIGKILL every process in the cgroup (frozen meanwhile, so nothing forks away), wait until
        it is empty, remove it. Returns the pids killed."""
        killed = []
        deadline = time.monotonic() + timeout
        while True:
            pids = self.pids()
            if not pids:
                break
            self._freeze(True)
            for pid in self.pids():
                try:
                    os.kill(pid, signal.SIGKILL)
                    killed.append(pid)
                except ProcessLookupError:
                    pass
            self._freeze(False)        # a frozen process cannot die; thawed, the SIGKILL lands
            if time.monotonic() > deadline:
                raise RuntimeError(f"{self.user}'s cgroup still holds {self.pids()} after {timeout}s")
            time.sleep(0.1)
        for d in self.dirs.values():
            try:
                os.rmdir(d)
            except FileNotFoundError:
                pass
            except OSError:       # busy a moment after its last process exits: once more
                time.sleep(0.2)
                try:
                    os.rmdir(d)
                except OSError:
                    pass
        return killed


def remove_empty_parents(users=(), root=ROOT):
    """The users' cgroups (killed) and then tinygpt-learners/ itself where nobody is left in it
    (for clean-up after tests; the hub keeps the parent)."""
    for user in users:
        LearnerCgroup(user, root=root).kill()
    for d in LearnerCgroup("-", root=root).dirs.values():
        try:
            os.rmdir(os.path.dirname(d))
        except OSError:
            pass


def remove_shm(user, shm="/dev/shm"):
    """Remove every file and folder in shm that belongs to user (not following symlinks); returns
    what was removed."""
    uid = pwd.getpwnam(user).pw_uid
    removed = []
    for top, dirs, files in os.walk(shm, topdown=False):
        for name in files + dirs:
            path = os.path.join(top, name)
            try:
                st = os.lstat(path)
                if st.st_uid != uid:
                    continue
                if stat.S_ISDIR(st.st_mode):
                    os.rmdir(path)
                else:
                    os.unlink(path)
                removed.append(path)
            except OSError:
                pass
    return removed
