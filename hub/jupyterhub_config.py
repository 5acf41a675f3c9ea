"""JupyterHub for one tinygpt class on one machine (local Unix users, the hub runs as root).

    jupyterhub -f hub/jupyterhub_config.py

Everything a class needs is set from environment variables (defaults in brackets); hub/README.md
walks through the set-up:

    TINYGPT_TEACHERS       teachers' user names, comma-separated [teacher]
    TINYGPT_STUDENTS       students' user names, comma-separated [none]
    TINYGPT_STUDENT_GROUP  a Unix group whose members are students too [tinygpt]; nobody else gets in
    TINYGPT_COURSE_ID      nbgrader course id [tinygpt]
    TINYGPT_COURSE_DIR     the teacher's course folder, relative to their home [tinygpt]
    TINYGPT_EXCHANGE       nbgrader exchange root [/srv/nbgrader/exchange]; at every start the hub makes
                           it 1777 and <root>/<course id> owned by the first teacher (exchange_setup.py)
    TINYGPT_VENV           the course venv every user's server runs from; it must be readable by
                           every user, so make it from /usr/bin/python3 [the hub's own sys.prefix]
    TINYGPT_HUB_STATE      hub database, cookie secret and the per-role Jupyter config [/srv/jupyterhub]
    TINYGPT_HUB_BIND_URL   where learners connect [http://:8000]
    TINYGPT_HUB_API_URL    the hub's internal API [http://127.0.0.1:8081]
    TINYGPT_PROXY_API_URL  configurable-http-proxy's API [http://127.0.0.1:8001]; the proxy runs on its
                           own (python3 hub/proxy.py, or hub/systemd/tinygpt-proxy.service), so a hub
                           restart keeps the learners' servers and their connections
    TINYGPT_HUB_AUTH       pam (Unix passwords) or dummy (one shared password, for trials only) [pam]
    TINYGPT_HUB_DUMMY_PASSWORD  the shared password for dummy
    TINYGPT_HUB_ADMINS     hub admins (may stop others' servers), comma-separated [none]; the teacher
                           needs not be one

    TINYGPT_COURSE_SOURCE  the course's nbgrader_config.py and source/, copied into a teacher's
                           ~/<course dir> at their server's first start; teachers, and nobody
                           else, must be able to read it (it holds every solution) [this repo]
    TINYGPT_LEARNER_MEMORY_MB  memory cap of a student's whole server, all its kernels, terminals and
                           their children together (the learner's cgroup), and of each process in it
                           (RLIMIT_DATA: one allocation past it fails with MemoryError), 0 = none [2048]
    TINYGPT_LEARNER_MAX_PROCESSES  processes and threads of one user's server, together [1024]
    TINYGPT_LEARNER_CGROUP on: each user's server in a cgroup of its own (hub/learner_cgroup.py; v1
                           or v2), killed whole at stop, /dev/shm cleaned, and the hub refuses to
                           start where it cannot make them (it says why); auto: the same where it
                           can, else a warning at start and no unit; off: none [auto]
    TINYGPT_CULL_TIMEOUT   seconds a server may sit idle (no browser tab, terminal or kernel active)
                           before jupyterhub-idle-culler stops it, as Stop My Server does: every
                           process of the user and their /dev/shm files go; 0 = never [3600]
    TINYGPT_CULL_EVERY     how often the culler looks, in seconds [a quarter of the timeout, 5 to 300]
    TINYGPT_SERVER_LOGS    a log file per user's server, <folder>/<user>.log, what the server, its
                           kernels and terminals print; root's, 0600, the last one kept as .log.1
                           (hub/server_log.py) [/var/log/tinygpt]
    TINYGPT_SERVER_LOG_MB  a server's log past this is moved to .log.1 at the hub's next poll [10]
    TINYGPT_GRADE_MEMORY_MB  memory a teacher's tinygpt-grade-class may plan for: its default --jobs
                           is what fits (tinygpt_course/classroom/cli.py), set in teachers' servers;
                           hub/README.md's sizing counts it [1536]
    TINYGPT_GRADING_SERVICE  on: grading on submit (hub/README.md "Grading on submit"): the hub runs,
                           as the first teacher, `tinygpt-grading-service run` on their course folder
                           (service grading-runner) and its page (service grading, at /services/grading/:
                           each learner's own results, which the course's lab extension shows after
                           Submit; the queue for the teachers); off: neither [off]
    TINYGPT_GRADING_PORT   the port the grading page listens on, on 127.0.0.1 [10102]

Roles (hub/roles.py): each user's server gets JUPYTER_CONFIG_PATH=<state>/jupyter/<role>:<state>/jupyter/common.
common: nbgrader's course id and exchange, JupyterLab's news pop-up off, terminals that keep the
course environment. student: the formgrader, course list and create-assignment extensions off.
teacher: the formgrader on, nbgrader's course root ~/<course dir> with the course's own
nbgrader_config.py loaded, framing relaxed to frame-ancestors 'self' for the formgrader.
Hiding the formgrader is convenience, not security: what keeps students out of the teacher's files
and each other's work is Unix permissions (homes 0700, the exchange, see hub/README.md).
"""
import asyncio
import importlib.util
import os
import pwd
import resource
import shutil
import sys

from jupyterhub.spawner import LocalProcessSpawner

c = get_config()  # noqa: F821  (JupyterHub provides get_config)
HERE = os.path.dirname(os.path.abspath(__file__))


def _module(name):
    """hub/<name>.py, loaded by path (this folder is not a package)."""
    spec = importlib.util.spec_from_file_location(f"tinygpt_hub_{name}", os.path.join(HERE, f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


roles, exchange_setup, proxy = _module("roles"), _module("exchange_setup"), _module("proxy")
learner_cgroup, server_log = _module("learner_cgroup"), _module("server_log")


def _names(var, default=""):
    return [n.strip() for n in os.environ.get(var, default).split(",") if n.strip()]


COURSE_ID = os.environ.get("TINYGPT_COURSE_ID", "tinygpt")
COURSE_DIR = os.environ.get("TINYGPT_COURSE_DIR", "tinygpt")
COURSE_SOURCE = os.environ.get("TINYGPT_COURSE_SOURCE", os.path.dirname(HERE))
TEACHERS = _names("TINYGPT_TEACHERS", "teacher")
STUDENTS = _names("TINYGPT_STUDENTS")
STUDENT_GROUP = os.environ.get("TINYGPT_STUDENT_GROUP", "tinygpt")
EXCHANGE = os.environ.get("TINYGPT_EXCHANGE", "/srv/nbgrader/exchange")
VENV = os.environ.get("TINYGPT_VENV", sys.prefix)
STATE = os.environ.get("TINYGPT_HUB_STATE", "/srv/jupyterhub")
AUTH = os.environ.get("TINYGPT_HUB_AUTH", "pam")
LEARNER_MEMORY_MB = int(os.environ.get("TINYGPT_LEARNER_MEMORY_MB", "2048"))
LEARNER_PROCESSES = int(os.environ.get("TINYGPT_LEARNER_MAX_PROCESSES", "1024"))
UNITS = os.environ.get("TINYGPT_LEARNER_CGROUP", "auto")     # on | auto | off
EX_CONFIG = 78       # a setting the hub cannot work with: the unit does not restart on it


def _refuse(msg):
    print(f"tinygpt hub: {msg}", file=sys.stderr, flush=True)
    sys.exit(EX_CONFIG)


if UNITS not in ("on", "auto", "off"):
    _refuse(f"TINYGPT_LEARNER_CGROUP={UNITS!r}: use on, auto or off")
UNIT_PROBLEM = learner_cgroup.problem() if UNITS != "off" else None
if UNIT_PROBLEM:
    _lost = ("so a learner's setsid'd or nohup'd processes can outlive their server, their /dev/shm files "
             "stay, and the memory cap holds per process only (RLIMIT_DATA), not for the whole server")
    if UNITS == "on":
        _refuse(f"TINYGPT_LEARNER_CGROUP=on, but learners' servers cannot be made units here: "
                 f"{UNIT_PROBLEM}. Give the hub writable cgroups (memory, pids), or set "
                 f"TINYGPT_LEARNER_CGROUP=off ({_lost}).")
    print(f"tinygpt hub: WARNING: learners' servers are not units: {UNIT_PROBLEM}; {_lost}. "
          f"TINYGPT_LEARNER_CGROUP=on makes this an error.", file=sys.stderr, flush=True)
CULL_TIMEOUT = int(os.environ.get("TINYGPT_CULL_TIMEOUT", "3600"))
CULL_EVERY = int(os.environ.get("TINYGPT_CULL_EVERY", "0")) or min(300, max(5, CULL_TIMEOUT // 4))
SERVER_LOGS = os.environ.get("TINYGPT_SERVER_LOGS", "/var/log/tinygpt")
SERVER_LOG_BYTES = int(float(os.environ.get("TINYGPT_SERVER_LOG_MB", "10")) * 2 ** 20)
GRADE_MEMORY_MB = os.environ.get("TINYGPT_GRADE_MEMORY_MB", "1536")
ROLE_DIR = os.path.join(STATE, "jupyter")
DB = os.path.join(STATE, "jupyterhub.sqlite")
COOKIE_SECRET = os.path.join(STATE, "jupyterhub_cookie_secret")
SEED = os.path.join(ROLE_DIR, "seed_course.sh")   # a copy every user can read (this folder may be private)


def _private_file(path):
    """Create path empty with mode 0600 (the hub fills it), or make an existing one 0600."""
    os.close(os.open(path, os.O_CREAT | os.O_WRONLY, 0o600))
    os.chmod(path, 0o600)


def _prepare_state():
    """The state folder: others may only pass through it (0711) to the roles' config (0755); the
    database (every server's port and token hashes, the user list) and the cookie secret are 0600.
    SQLite gives its journal files the database's mode."""
    os.makedirs(STATE, mode=0o711, exist_ok=True)
    os.chmod(STATE, 0o711)
    _private_file(DB)
    if os.path.exists(COOKIE_SECRET):
        os.chmod(COOKIE_SECRET, 0o600)      # JupyterHub makes a new one 0600 itself
    roles.write(ROLE_DIR, roles.role_files(ROLE_DIR, os.path.join(VENV, "bin"), course_id=COURSE_ID,
                                           exchange=EXCHANGE, course_dir=COURSE_DIR))
    shutil.copyfile(os.path.join(HERE, "seed_course.sh"), SEED)
    os.chmod(SEED, 0o755)


def _prepare_exchange():
    """The exchange root 1777 and the course's folder owned by its (first) teacher."""
    teacher = pwd.getpwnam(TEACHERS[0])
    exchange_setup.prepare(EXCHANGE, {COURSE_ID: (teacher.pw_uid, teacher.pw_gid)},
                           log=lambda msg: print(f"[tinygpt hub] {msg}", file=sys.stderr))


if os.path.realpath(VENV).startswith("/tmp/"):
    print(f"[tinygpt hub] warning: the course venv {VENV} is under /tmp: the grading sandbox mounts its "
          "own /tmp and will not find its Python; put the venv elsewhere (/opt/tinygpt-venv)",
          file=sys.stderr)

if os.geteuid() == 0:  # the real hub; `jupyterhub --generate-config`-style dry reads skip this
    _prepare_state()
    _prepare_exchange()

# --- the hub -------------------------------------------------------------------------------------
c.JupyterHub.bind_url = os.environ.get("TINYGPT_HUB_BIND_URL", "http://:8000")
c.JupyterHub.hub_bind_url = os.environ.get("TINYGPT_HUB_API_URL", "http://127.0.0.1:8081")
c.ConfigurableHTTPProxy.api_url = os.environ.get("TINYGPT_PROXY_API_URL", "http://127.0.0.1:8001")
c.JupyterHub.db_url = "sqlite:///" + DB
c.JupyterHub.cookie_secret_file = COOKIE_SECRET
# Restarts keep the learners' servers: the proxy runs on its own (hub/proxy.py; systemd:
# hub/systemd/tinygpt-proxy.service) and keeps routing browsers to their servers while the hub is
# away, the hub leaves the servers running when it stops and finds them again when it starts
# (their pids and ports are in its database).
c.ConfigurableHTTPProxy.should_start = False
c.JupyterHub.cleanup_servers = False
if os.geteuid() == 0:
    c.ConfigurableHTTPProxy.auth_token = proxy.auth_token(STATE)   # shared with the proxy, 0600

# --- who may log in ------------------------------------------------------------------------------
if AUTH == "dummy":
    c.JupyterHub.authenticator_class = "dummy"
    c.DummyAuthenticator.password = os.environ["TINYGPT_HUB_DUMMY_PASSWORD"]
else:
    c.JupyterHub.authenticator_class = "pam"
    c.PAMAuthenticator.open_sessions = False
# Who gets in: the teachers, the students named, and every member of the students' Unix group
# (add a student with `useradd -G tinygpt ...`: no hub restart needed). Nobody else, root included.
c.Authenticator.allowed_users = set(STUDENTS) | set(TEACHERS)
c.LocalAuthenticator.allowed_groups = {STUDENT_GROUP}
c.Authenticator.admin_users = set(_names("TINYGPT_HUB_ADMINS"))

# --- each user's server --------------------------------------------------------------------------
class CappedSpawner(LocalProcessSpawner):
    """A local process per user, and a learner's server is one unit (hub/learner_cgroup.py): the
    server goes into the user's own cgroup before it drops to the user, so every kernel, terminal
    and child it starts (setsid'd and nohup'd ones too) is in it. A student's cgroup caps the memory
    of all of them together (past it the kernel's OOM killer ends the largest process in that
    cgroup, usually the kernel that allocated: JupyterLab says the kernel died); each process also
    gets RLIMIT_DATA at the same cap, so one allocation past it fails with MemoryError in the cell
    (torch: "DefaultCPUAllocator: can't allocate memory") and the kernel lives on. Stopping the
    server (Stop My Server, an admin's stop, the culler) kills everything in the cgroup and removes
    the user's /dev/shm files. Teachers get the unit without the memory cap (grading runs several
    processes; the grading sandbox caps each run)."""

    def cgroup(self):
        if UNITS == "off" or UNIT_PROBLEM:
            return None
        student = role_of(self.user.name) == "student"
        return learner_cgroup.LearnerCgroup(self.user.name, LEARNER_MEMORY_MB * 2 ** 20 if student else 0,
                                            LEARNER_PROCESSES if student else 0)

    async def start(self):
        self._cgroup = self.cgroup()
        if self._cgroup is not None:
            await asyncio.to_thread(self._cgroup.create)   # and kills what an earlier server left
        # the server's stdout and stderr: its own log file (hub/server_log.py), not the hub's, so
        # the admin's shell or journal is the hub's alone and the file outlives a hub restart
        log = server_log.open_log(SERVER_LOGS, self.user.name)
        self.popen_kwargs = dict(self.popen_kwargs, stdout=log, stderr=log)
        try:
            return await super().start()
        finally:
            os.close(log)                                  # the server holds its own copy

    async def poll(self):
        status = await super().poll()
        if status is None and await asyncio.to_thread(server_log.trim, SERVER_LOGS, self.user.name,
                                                      SERVER_LOG_BYTES):
            self.log.info("%s's server log passed %d bytes: moved to %s.log.1", self.user.name,
                          SERVER_LOG_BYTES, self.user.name)
        return status

    def make_preexec_fn(self, name):
        become_user = super().make_preexec_fn(name)
        limit = LEARNER_MEMORY_MB * 2 ** 20 if role_of(name) == "student" else 0
        cgroup = getattr(self, "_cgroup", None)

        def preexec():
            if cgroup is not None:
                cgroup.enter()
            if limit:
                resource.setrlimit(resource.RLIMIT_DATA, (limit, limit))
            become_user()
        return preexec

    async def stop(self, now=False):
        await super().stop(now=now)
        cgroup = self.cgroup()
        if cgroup is not None:
            killed = await asyncio.to_thread(cgroup.kill)
            if killed:
                self.log.info("%s's server stopped: %d more processes of theirs killed", self.user.name, len(killed))
        removed = await asyncio.to_thread(learner_cgroup.remove_shm, self.user.name)
        if removed:
            self.log.info("%s's server stopped: %d files of theirs removed from /dev/shm", self.user.name, len(removed))


c.JupyterHub.spawner_class = CappedSpawner
SINGLEUSER = os.path.join(VENV, "bin", "jupyterhub-singleuser")
c.Spawner.cmd = [SINGLEUSER]
c.Spawner.default_url = "/lab"
c.Spawner.notebook_dir = "~"
c.Spawner.start_timeout = 180
c.Spawner.http_timeout = 180
c.Spawner.poll_interval = 10          # a running server's log is bounded at each poll (CappedSpawner.poll)
c.Spawner.environment = {
    # nbgrader calls alembic (and the kernel python) by name: the course venv comes first
    "PATH": os.pathsep.join([os.path.join(VENV, "bin"), "/usr/local/bin", "/usr/bin", "/bin"]),
}


def role_of(name):
    return "teacher" if name in TEACHERS else "student"


def pre_spawn_hook(spawner):
    role = role_of(spawner.user.name)
    spawner.environment["JUPYTER_CONFIG_PATH"] = roles.config_path(ROLE_DIR, role)
    spawner.environment["TINYGPT_ROLE"] = role
    if role == "teacher":   # their course folder: copied at the first start, as the teacher
        spawner.environment["TINYGPT_GRADE_MEMORY_MB"] = GRADE_MEMORY_MB   # tinygpt-grade-class's --jobs
        spawner.cmd = ["/bin/sh", SEED, COURSE_SOURCE, COURSE_DIR, SINGLEUSER]
    else:
        spawner.cmd = [SINGLEUSER]


c.Spawner.pre_spawn_hook = pre_spawn_hook

# --- the idle culler -----------------------------------------------------------------------------
# jupyterhub-idle-culler (the `hub` extra), run by the hub as a service of its own with only the
# rights it needs: a server idle for CULL_TIMEOUT seconds (the hub's last activity of it: browser
# tabs, terminals and busy kernels count) is stopped through the hub's API, which calls the
# spawner's stop: CappedSpawner.stop then kills everything left in the user's cgroup and removes
# their /dev/shm files, as for Stop My Server. The saved notebooks stay; the learner starts again.
# Run through hub/idle_culler.py, which makes it stop at the hub's first signal: a hub started with
# SIGINT ignored (a script's `jupyterhub &`) would otherwise wait 30 s for it at every restart.
SERVICES, SERVICE_ROLES = [], []
if CULL_TIMEOUT > 0:
    SERVICES.append({
        "name": "idle-culler",
        "command": [sys.executable, os.path.join(HERE, "idle_culler.py"), f"--timeout={CULL_TIMEOUT}",
                    f"--cull-every={CULL_EVERY}"],
    })
    SERVICE_ROLES.append({
        "name": "idle-culler",
        "scopes": ["list:users", "read:users:activity", "read:servers", "delete:servers"],
        "services": ["idle-culler"],
    })

# --- grading on submit ---------------------------------------------------------------------------
# Two services the hub starts, keeps running (it starts one again when it exits) and stops with
# itself, both as the first teacher (the service's `user`: the hub drops to that uid, its groups and
# home before the command runs; never root, never a student), on that teacher's course folder,
# which holds the gradebook and the queue (grading_service.sqlite, the teacher's, 0600):
# - grading-runner: `tinygpt-grading-service run` grades each submission of the assignments the
#   course's nbgrader_config.py turns on (c.GradingService.assignments) and releases its feedback;
# - grading: its page (tinygpt_course/service/web.py), read-only on the queue, behind the hub's
#   OAuth at /services/grading/: api/mine gives each learner their own results (the course's lab
#   extension polls it after Submit), the page itself the queue, to the teachers only.
# A separate process each: the page never holds up a grading, and a crash of one leaves the other.
GRADING = os.environ.get("TINYGPT_GRADING_SERVICE", "off")      # on | off
GRADING_PORT = int(os.environ.get("TINYGPT_GRADING_PORT", "10102"))
if GRADING not in ("on", "off"):
    _refuse(f"TINYGPT_GRADING_SERVICE={GRADING!r}: use on or off")
if GRADING == "on":
    GRADER = TEACHERS[0]
    GRADING_COURSE = os.path.join(os.path.expanduser(f"~{GRADER}"), COURSE_DIR)
    # the teacher's role config, as their server has it: nbgrader's exchange root and course id
    # (common/) and the course folder with its nbgrader_config.py (teacher/); without it the runner
    # would watch nbgrader's default exchange, where no learner submits
    GRADING_ENV = {"PATH": c.Spawner.environment["PATH"], "TINYGPT_GRADE_MEMORY_MB": GRADE_MEMORY_MB,
                   "JUPYTER_CONFIG_PATH": roles.config_path(ROLE_DIR, "teacher")}
    SERVICES += [{
        "name": "grading-runner",
        "user": GRADER,
        "command": [os.path.join(VENV, "bin", "tinygpt-grading-service"), "run", "--course-dir", GRADING_COURSE],
        "environment": GRADING_ENV,
    }, {
        "name": "grading",
        "user": GRADER,
        "url": f"http://127.0.0.1:{GRADING_PORT}",
        "command": [os.path.join(VENV, "bin", "python"), "-m", "tinygpt_course.service.web",
                    "--course-dir", GRADING_COURSE, "--teachers", ",".join(TEACHERS)],
        "environment": GRADING_ENV,
        # part of the course, not a third party's app: no "authorize access" page in between, so
        # the lab extension's first request follows the OAuth redirects to its answer
        "oauth_no_confirm": True,
    }]
    # every user may reach that service (its page says who sees what), and no other service
    SERVICE_ROLES.append({"name": "user", "scopes": ["self", "access:services!service=grading"]})

if SERVICES:
    c.JupyterHub.services = SERVICES
    c.JupyterHub.load_roles = SERVICE_ROLES
