"""JupyterHub for one tinygpt class on one machine (local Unix users, the hub runs as root).

    jupyterhub -f hub/jupyterhub_config.py

Everything a class needs is set from environment variables (defaults in brackets); hub/README.md
walks through the set-up:

    TINYGPT_TEACHERS       teachers' user names, comma-separated [teacher]
    TINYGPT_STUDENTS       students' user names, comma-separated [none]
    TINYGPT_STUDENT_GROUP  a Unix group whose members are students too [tinygpt]; nobody else gets in
    TINYGPT_COURSE_ID      nbgrader course id [tinygpt]
    TINYGPT_COURSE_DIR     the teacher's course folder, relative to their home [tinygpt]
    TINYGPT_EXCHANGE       nbgrader exchange, made here with mode 1777 [/srv/nbgrader/exchange]
    TINYGPT_VENV           the course venv every user's server runs from; it must be readable by
                           every user, so make it from /usr/bin/python3 [the hub's own sys.prefix]
    TINYGPT_HUB_STATE      hub database, cookie secret and the per-role Jupyter config [/srv/jupyterhub]
    TINYGPT_HUB_BIND_URL   where learners connect [http://:8000]
    TINYGPT_HUB_API_URL    the hub's internal API [http://127.0.0.1:8081]
    TINYGPT_PROXY_API_URL  configurable-http-proxy's API [http://127.0.0.1:8001]
    TINYGPT_HUB_AUTH       pam (Unix passwords) or dummy (one shared password, for trials only) [pam]
    TINYGPT_HUB_DUMMY_PASSWORD  the shared password for dummy
    TINYGPT_HUB_ADMINS     hub admins (may stop others' servers), comma-separated [none]

Roles. Each user's server gets JUPYTER_CONFIG_PATH=<state>/jupyter/<role>:<state>/jupyter/common.
common: nbgrader's course id and exchange, JupyterLab's news pop-up off. student: the formgrader,
course list and create-assignment extensions off (server and lab side). teacher: the formgrader
on, nbgrader's course root ~/<course dir>, and the framing header relaxed to frame-ancestors 'self'
so the formgrader can show inside JupyterLab (JupyterHub's default is 'none'). Hiding the
formgrader is convenience, not security: what keeps students out of the teacher's files and each
other's work is Unix permissions (homes 0700, the exchange's inbound 0733), see hub/README.md.
"""
import json
import os
import sys

c = get_config()  # noqa: F821  (JupyterHub provides get_config)


def _names(var, default=""):
    return [n.strip() for n in os.environ.get(var, default).split(",") if n.strip()]


COURSE_ID = os.environ.get("TINYGPT_COURSE_ID", "tinygpt")
COURSE_DIR = os.environ.get("TINYGPT_COURSE_DIR", "tinygpt")
TEACHERS = _names("TINYGPT_TEACHERS", "teacher")
STUDENTS = _names("TINYGPT_STUDENTS")
STUDENT_GROUP = os.environ.get("TINYGPT_STUDENT_GROUP", "tinygpt")
EXCHANGE = os.environ.get("TINYGPT_EXCHANGE", "/srv/nbgrader/exchange")
VENV = os.environ.get("TINYGPT_VENV", sys.prefix)
STATE = os.environ.get("TINYGPT_HUB_STATE", "/srv/jupyterhub")
AUTH = os.environ.get("TINYGPT_HUB_AUTH", "pam")
ROLE_DIR = os.path.join(STATE, "jupyter")


def _write(path, text):
    os.makedirs(os.path.dirname(path), mode=0o755, exist_ok=True)
    with open(path, "w") as f:
        f.write(text)
    os.chmod(path, 0o644)


def _write_role_config():
    """Write the Jupyter config each role's servers read (world-readable, owned by root)."""
    os.makedirs(STATE, mode=0o755, exist_ok=True)
    os.chmod(STATE, 0o755)
    common, student, teacher = (os.path.join(ROLE_DIR, r) for r in ("common", "student", "teacher"))
    _write(os.path.join(common, "nbgrader_config.py"), (
        "c = get_config()  # noqa: F821\n"
        f"c.CourseDirectory.course_id = {COURSE_ID!r}\n"
        f"c.Exchange.root = {EXCHANGE!r}\n"
    ))
    lab_settings = os.path.join(common, "lab-settings")
    _write(os.path.join(lab_settings, "overrides.json"), json.dumps({
        "@jupyterlab/apputils-extension:notification": {"fetchNews": "false", "checkForUpdates": False},
    }, indent=1))
    _write(os.path.join(common, "jupyter_server_config.json"), json.dumps({
        "LabApp": {"app_settings_dir": lab_settings},
    }, indent=1))
    # students: no formgrader, no course list (a teacher's view), no create-assignment toolbar
    _write(os.path.join(student, "jupyter_server_config.d", "tinygpt-student.json"), json.dumps({
        "ServerApp": {"jpserver_extensions": {
            "nbgrader.server_extensions.formgrader": False,
            "nbgrader.server_extensions.course_list": False,
        }},
    }, indent=1))
    _write(os.path.join(student, "labconfig", "page_config.json"), json.dumps({
        "disabledExtensions": {
            "@jupyter/nbgrader:formgrader": True,
            "@jupyter/nbgrader:course-list": True,
            "@jupyter/nbgrader:create-assignment": True,
        },
    }, indent=1))
    # teachers: the formgrader works on ~/<course dir>, and may be framed by JupyterLab itself
    # The formgrader runs in the server, whose folder is the home: it reads the course's own
    # nbgrader_config.py (the grading pipeline) only through this subconfig.
    _write(os.path.join(teacher, "nbgrader_config.py"), (
        "import os\n"
        "c = get_config()  # noqa: F821\n"
        f"root = os.path.join(os.path.expanduser('~'), {COURSE_DIR!r})\n"
        "c.CourseDirectory.root = root\n"
        "if os.path.isfile(os.path.join(root, 'nbgrader_config.py')):\n"
        "    load_subconfig(os.path.join(root, 'nbgrader_config.py'))  # noqa: F821\n"
    ))
    _write(os.path.join(teacher, "jupyter_server_config.d", "tinygpt-teacher.json"), json.dumps({
        "ServerApp": {"jpserver_extensions": {
            "nbgrader.server_extensions.formgrader": True,
            "nbgrader.server_extensions.course_list": True,
        }},
    }, indent=1))
    _write(os.path.join(teacher, "jupyter_server_config.json"), json.dumps({
        "ServerApp": {"tornado_settings": {"headers": {
            "Content-Security-Policy": "frame-ancestors 'self'",
        }}},
    }, indent=1))


def _make_exchange():
    """nbgrader's exchange: everyone may create entries (students submit into it), 1777 like /tmp."""
    os.makedirs(EXCHANGE, exist_ok=True)
    os.chmod(EXCHANGE, 0o1777)


if os.geteuid() == 0:  # the real hub; `jupyterhub --generate-config`-style dry reads skip this
    _write_role_config()
    _make_exchange()

# --- the hub -------------------------------------------------------------------------------------
c.JupyterHub.bind_url = os.environ.get("TINYGPT_HUB_BIND_URL", "http://:8000")
c.JupyterHub.hub_bind_url = os.environ.get("TINYGPT_HUB_API_URL", "http://127.0.0.1:8081")
c.ConfigurableHTTPProxy.api_url = os.environ.get("TINYGPT_PROXY_API_URL", "http://127.0.0.1:8001")
c.ConfigurableHTTPProxy.command = [os.environ.get("TINYGPT_CHP", "configurable-http-proxy")]
c.ConfigurableHTTPProxy.pid_file = os.path.join(STATE, "jupyterhub-proxy.pid")
c.JupyterHub.db_url = "sqlite:///" + os.path.join(STATE, "jupyterhub.sqlite")
c.JupyterHub.cookie_secret_file = os.path.join(STATE, "jupyterhub_cookie_secret")
c.JupyterHub.cleanup_servers = True

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
c.JupyterHub.spawner_class = "localprocess"
c.Spawner.cmd = [os.path.join(VENV, "bin", "jupyterhub-singleuser")]
c.Spawner.default_url = "/lab"
c.Spawner.notebook_dir = "~"
c.Spawner.start_timeout = 180
c.Spawner.http_timeout = 180
c.Spawner.environment = {
    # nbgrader calls alembic (and the kernel python) by name: the course venv comes first
    "PATH": os.pathsep.join([os.path.join(VENV, "bin"), "/usr/local/bin", "/usr/bin", "/bin"]),
}


def role_of(name):
    return "teacher" if name in TEACHERS else "student"


def pre_spawn_hook(spawner):
    role = role_of(spawner.user.name)
    spawner.environment["JUPYTER_CONFIG_PATH"] = os.pathsep.join(
        [os.path.join(ROLE_DIR, role), os.path.join(ROLE_DIR, "common")])
    spawner.environment["TINYGPT_ROLE"] = role


c.Spawner.pre_spawn_hook = pre_spawn_hook
