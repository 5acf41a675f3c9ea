"""The Jupyter configuration of the two roles, learner (student) and teacher: one definition, three users.

- hub/jupyterhub_config.py writes it under <hub state>/jupyter/ on one machine;
- hub/z2jh/values.yaml mounts the same files into every pod (singleuser.extraFiles; a test checks
  they are what `role_files` makes for the Kubernetes paths);
- course.sh writes the learner and teacher folders into the course venv (`python hub/roles.py local`)
  for `bash course.sh lab` (learner) and `bash course.sh teach` (teacher).

A server of a role gets JUPYTER_CONFIG_PATH=<roles>/<role>:<roles>/common. What each holds:

common   nbgrader's course id and exchange root; JupyterLab's news pop-up off and Markdown opened
         rendered; Jupyter terminals run `bash --rcfile <roles>/common/bashrc -i`: an interactive,
         non-login shell, because a login shell reads Debian's /etc/profile, which resets PATH and
         loses the course environment (`nbgrader: command not found`).
student  nbgrader's teacher extensions off, server side (formgrader, course list) and lab side
         (formgrader, course list, create assignment). Assignment List, fetch, Validate and submit stay.
teacher  the formgrader on, nbgrader's course root ~/<course dir> with that folder's
         nbgrader_config.py loaded (so the formgrader's buttons grade with the course's pipeline and
         its sandbox, like the command line there), and the framing header relaxed to
         frame-ancestors 'self' so the formgrader can show inside JupyterLab (JupyterHub's is 'none').

Hiding the teacher's extensions is convenience, not security: Unix permissions (one uid per person)
keep students out of the teacher's files and each other's work (hub/README.md).
"""
import json
import os
import sys

LAB_OVERRIDES = {
    "@jupyterlab/apputils-extension:notification": {"fetchNews": "false", "checkForUpdates": False},
    "@jupyterlab/docmanager-extension:plugin": {"defaultViewers": {"markdown": "Markdown Preview"}},
    # the widgets' state is saved into the notebook: the hint rungs a learner used
    # (tinygpt_course/checks/tutor.py) are in the submitted .ipynb for the teacher
    "@jupyter-widgets/jupyterlab-manager:plugin": {"saveState": True},
}
TEACHER_SERVER_EXTENSIONS = ("nbgrader.server_extensions.formgrader", "nbgrader.server_extensions.course_list")
TEACHER_LAB_EXTENSIONS = ("@jupyter/nbgrader:formgrader", "@jupyter/nbgrader:course-list",
                          "@jupyter/nbgrader:create-assignment")


def _json(obj):
    return json.dumps(obj, indent=1) + "\n"


def bashrc(venv_bin):
    return (
        "# Jupyter terminals (tinygpt course): an interactive bash reads this instead of ~/.bashrc.\n"
        "# Not a login shell: Debian's /etc/profile would reset PATH and lose the course environment.\n"
        "[ -r /etc/bash.bashrc ] && . /etc/bash.bashrc\n"
        "[ -r ~/.bashrc ] && . ~/.bashrc\n"
        f'case ":$PATH:" in *":{venv_bin}:"*) ;; *) PATH="{venv_bin}:$PATH" ;; esac\n'
        "export PATH\n"
    )


def role_files(roles_root, venv_bin, course_id=None, exchange=None, course_dir=None):
    """{path relative to roles_root: text} for the common, student and teacher folders.

    course_id/exchange: nbgrader's exchange (a hub); course_dir: the teacher's course folder,
    relative to their home (a hub). Without them (course.sh on one's own machine) nbgrader reads the
    repo's nbgrader_config.py from the folder JupyterLab runs in."""
    common = f"{roles_root}/common"
    files = {
        "common/lab-settings/overrides.json": _json(LAB_OVERRIDES),
        "common/bashrc": bashrc(venv_bin),
        "common/jupyter_server_config.json": _json({
            "LabApp": {"app_settings_dir": f"{common}/lab-settings"},
            "ServerApp": {"terminado_settings": {
                "shell_command": ["/bin/bash", "--rcfile", f"{common}/bashrc", "-i"]}},
        }),
        "student/jupyter_server_config.d/tinygpt-student.json": _json(
            {"ServerApp": {"jpserver_extensions": {e: False for e in TEACHER_SERVER_EXTENSIONS}}}),
        "student/labconfig/page_config.json": _json(
            {"disabledExtensions": {e: True for e in TEACHER_LAB_EXTENSIONS}}),
        "teacher/jupyter_server_config.d/tinygpt-teacher.json": _json(
            {"ServerApp": {"jpserver_extensions": {e: True for e in TEACHER_SERVER_EXTENSIONS}}}),
        "teacher/labconfig/page_config.json": _json(
            {"disabledExtensions": {e: False for e in TEACHER_LAB_EXTENSIONS}}),
    }
    if course_id is not None:
        files["common/nbgrader_config.py"] = (
            "c = get_config()  # noqa: F821\n"
            f"c.CourseDirectory.course_id = {course_id!r}\n"
            f"c.Exchange.root = {exchange!r}\n")
    if course_dir is not None:
        files["teacher/nbgrader_config.py"] = (
            "# The formgrader runs in the server, whose folder is the home: the course's own\n"
            "# nbgrader_config.py (the grading pipeline and its sandbox) is read through this file.\n"
            "import os\n"
            "c = get_config()  # noqa: F821\n"
            f"root = os.path.join(os.path.expanduser('~'), {course_dir!r})\n"
            "c.CourseDirectory.root = root\n"
            "if os.path.isfile(os.path.join(root, 'nbgrader_config.py')):\n"
            "    load_subconfig(os.path.join(root, 'nbgrader_config.py'))  # noqa: F821\n")
        files["teacher/jupyter_server_config.json"] = _json({
            "ServerApp": {"tornado_settings": {"headers": {"Content-Security-Policy": "frame-ancestors 'self'"}}}})
    return files


def write(roles_root, files):
    """Write the files world-readable (every user's server reads them), folders 0755."""
    for rel, text in files.items():
        path = os.path.join(roles_root, rel)
        os.makedirs(os.path.dirname(path), mode=0o755, exist_ok=True)
        with open(path, "w") as f:
            f.write(text)
        os.chmod(path, 0o644)


def config_path(roles_root, role):
    """JUPYTER_CONFIG_PATH for a server of that role."""
    return os.pathsep.join([os.path.join(roles_root, role), os.path.join(roles_root, "common")])


if __name__ == "__main__":
    # python hub/roles.py local <folder>: the learner and teacher config for course.sh
    if len(sys.argv) != 3 or sys.argv[1] != "local":
        sys.exit("usage: python hub/roles.py local <folder>")
    root = os.path.abspath(sys.argv[2])
    write(root, role_files(root, os.path.dirname(sys.executable)))
