"""hub/z2jh/values.yaml on paper: valid for the pinned chart, and the same class as on one machine.

- merged with chart 4.4.0's defaults the way Helm merges, it passes the chart's own values schema
  (hub/z2jh/chart-4.4.0/, copied from the chart with its LICENSE);
- the role files it mounts are what hub/roles.py makes (the one-machine hub writes the same);
- the roster (a CSV of id, first_name, last_name, email, uid) and the passwd every pod mounts agree
  (hub/z2jh/roster.py makes it), and a bad roster is refused with its line;
- its hub.extraConfig, run against the values: one uid per person from the roster, teachers get the
  formgrader role and their course folder seeded by their own init step; students get none of it;
  nobody is a hub admin (tests/test_z2jh_pods.py builds the real pods from it);
- nothing runs as root at spawn; the exchange's one-time Job (hub/z2jh/exchange.yaml) makes the
  course folder for the teacher's uid in the roster, on the same claim and path the pods mount;
- hub/README.md installs exactly this chart version.
"""
import copy
import re
import sys
import types

import jsonschema
import pytest
import yaml

from tinygpt_course.testing.course import load_script, REPO

Z2JH = REPO / "hub" / "z2jh"
CHART_VERSION = "4.4.0"
CHART = Z2JH / f"chart-{CHART_VERSION}"


def helm_merge(defaults, values):
    """Helm's coalescing: maps merge key by key, anything else replaces, null removes the key."""
    out = copy.deepcopy(defaults)
    for key, value in values.items():
        if value is None:
            out.pop(key, None)
        elif isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = helm_merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def get_config(values, key, default=None):
    """values["a"]["b"]["c"] for "a.b.c", as the chart's z2jh.get_config reads its values."""
    node = values
    for part in key.split("."):
        if not isinstance(node, dict) or part not in node:
            return default
        node = node[part]
    return node


def load(path):
    return yaml.safe_load(path.read_text())


@pytest.fixture(scope="module")
def values():
    return load(Z2JH / "values.yaml")


@pytest.fixture(scope="module")
def schema():
    return load(CHART / "values.schema.yaml")


def test_values_merged_with_the_chart_defaults_pass_the_chart_schema(values, schema):
    merged = helm_merge(load(CHART / "values.default.yaml"), values)
    jsonschema.validate(merged, schema)


def test_the_schema_check_catches_a_wrong_key(values, schema):
    """The check above can fail: a misspelt key, and a value of the wrong type, are refused."""
    defaults = load(CHART / "values.default.yaml")
    bad = copy.deepcopy(values)
    bad["singleuser"]["extraFile"] = bad["singleuser"].pop("extraFiles")
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(helm_merge(defaults, bad), schema)
    bad = copy.deepcopy(values)
    bad["singleuser"]["uid"] = "teacher"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(helm_merge(defaults, bad), schema)


def _roles():
    return load_script(REPO / "hub" / "roles.py", "tinygpt_hub_roles")


def exchange_mount(values):
    (mount,) = [m for m in values["singleuser"]["storage"]["extraVolumeMounts"] if m["name"] == "nbgrader-exchange"]
    return mount["mountPath"]


def test_role_files_are_what_hub_roles_makes(values):
    course = values["custom"]["tinygpt"]
    roots = "/etc/tinygpt/jupyter"
    expected = _roles().role_files(roots, "/srv/conda/envs/notebook/bin", course_id=course["courseId"],
                                   exchange=exchange_mount(values), course_dir=course["courseDir"])
    mounted = {f["mountPath"][len(roots) + 1:]: f["stringData"]
               for f in values["singleuser"]["extraFiles"].values() if f["mountPath"].startswith(roots + "/")}
    wrong = sorted(k for k in expected.keys() | mounted.keys() if expected.get(k) != mounted.get(k))
    assert not wrong, "values.yaml's role files differ from hub/roles.py in " + ", ".join(wrong) + \
        "; expected:\n" + "\n".join(f"--- {k}\n{expected.get(k)}" for k in wrong)


def _z2jh_roster():
    return load_script(Z2JH / "roster.py", "tinygpt_z2jh_roster")


def roster(values):
    """name -> (uid, gid) of the people: the teachers and the roster CSV's students."""
    course = values["custom"]["tinygpt"]
    people = {name: (int(uid), int(uid)) for name, uid in course["teachers"].items()}
    people.update({sid: (uid, uid) for sid, *_, uid in _z2jh_roster().students(course)})
    return people


def test_the_roster_gives_everyone_their_own_uid(values):
    people = roster(values)
    uids = [u for u, _ in people.values()]
    assert len(people) >= 2 and len(set(uids)) == len(uids), people
    passwd = values["singleuser"]["extraFiles"]["tinygpt-passwd"]
    assert passwd["mountPath"] == "/etc/passwd"
    assert passwd["stringData"] == values["custom"]["tinygpt"]["passwd"]   # one roster (a YAML alias)


def test_the_passwd_is_made_from_the_roster(values):
    course = values["custom"]["tinygpt"]
    expected = _z2jh_roster().passwd(course)
    assert course["passwd"] == expected, "custom.tinygpt.passwd is not what the roster gives " \
        "(python hub/z2jh/roster.py prints it):\n" + expected
    lines = {ln.split(":")[0]: ln.split(":") for ln in expected.splitlines()}
    assert lines["student-login-1"][4] == "Ada Lovelace"


def test_the_teachers_subordinate_ids_are_made_from_the_roster(values):
    """/etc/subuid and /etc/subgid of every pod (the grading Job's newuidmap reads them): one range
    per teacher, from roster.py, holding nobody's uid and within the 65536 ids of a pod's own
    user namespace."""
    course, roster_mod = values["custom"]["tinygpt"], _z2jh_roster()
    expected = roster_mod.subids(course)
    assert course["subids"] == expected, "custom.tinygpt.subids is not what the roster gives " \
        "(python hub/z2jh/roster.py --subids prints it):\n" + expected
    for key, path in (("tinygpt-subuid", "/etc/subuid"), ("tinygpt-subgid", "/etc/subgid")):
        entry = values["singleuser"]["extraFiles"][key]
        assert entry["mountPath"] == path and entry["stringData"] == expected
    ranges = {name: range(int(first), int(first) + int(count))
              for name, first, count in (ln.split(":") for ln in expected.splitlines())}
    assert set(ranges) == set(course["teachers"])
    uids = [u for u, _ in roster(values).values()]
    assert not any(u in r for r in ranges.values() for u in uids) and max(r.stop for r in ranges.values()) <= 65534
    bad = copy.deepcopy(course)
    bad["roster"] = "id,first_name,last_name,email,uid\nann,Ann,A,a@x,60000\n"
    with pytest.raises(ValueError, match="line 2"):
        roster_mod.passwd(bad)


def test_a_bad_roster_is_refused_with_its_line(values):
    course = copy.deepcopy(values["custom"]["tinygpt"])
    for bad, message in [("id,first_name,last_name,email\nann,Ann,A,a@x\n", "header"),
                         ("id,first_name,last_name,email,uid\nann,Ann,A,a@x,0\n", "line 2"),
                         ("id,first_name,last_name,email,uid\nann,Ann,A,a@x,2001\nbob,Bob,B,b@x,2001\n",
                          "own uid")]:
        course["roster"] = bad
        with pytest.raises(ValueError, match=message):
            _z2jh_roster().passwd(course)


class FakeSpawner:
    def __init__(self, name):
        self.user = types.SimpleNamespace(name=name)
        self.environment, self.cmd, self.image = {}, ["jupyterhub-singleuser"], "image:tag"
        self.extra_labels, self.init_containers, self.volumes = {}, [], {}
        self.volume_mounts = {"home": {"name": "volume-{user_server}", "mountPath": "/home/jovyan"}}
        self.mem_limit = self.mem_guarantee = self.cpu_limit = self.cpu_guarantee = None


@pytest.fixture(scope="module")
def hub_config(values):
    """Run hub.extraConfig as the chart's hub does: `c` is the hub's config, z2jh.get_config reads
    the values."""
    from traitlets.config import Config
    sys.modules["z2jh"] = types.SimpleNamespace(get_config=lambda key, default=None: get_config(values, key, default))
    c = Config()
    try:
        for name, code in values["hub"]["extraConfig"].items():
            exec(compile(code, name, "exec"), {"c": c})
    finally:
        del sys.modules["z2jh"]
    return c


def test_hub_config_one_uid_per_person_and_the_roles(values, hub_config):
    c, people = hub_config, roster(values)
    course = values["custom"]["tinygpt"]
    (teacher,) = course["teachers"]
    student = next(n for n in people if n != teacher)
    assert c.Authenticator.allowed_users == set(people)
    assert not c.Authenticator.admin_users and "admin_users" not in values["hub"]["config"].get("Authenticator", {}), \
        "the teacher should not be a hub admin"
    for name, (uid, gid) in people.items():
        s = FakeSpawner(name)
        assert (c.KubeSpawner.uid(s), c.KubeSpawner.gid(s), c.KubeSpawner.fs_gid(s)) == (uid, gid, gid)

    t, s = FakeSpawner(teacher), FakeSpawner(student)
    c.KubeSpawner.pre_spawn_hook(t)
    c.KubeSpawner.pre_spawn_hook(s)
    assert t.environment["JUPYTER_CONFIG_PATH"].split(":")[0] == "/etc/tinygpt/jupyter/teacher"
    assert s.environment["JUPYTER_CONFIG_PATH"].split(":")[0] == "/etc/tinygpt/jupyter/student"
    assert t.cmd == s.cmd == ["jupyterhub-singleuser"]       # the course is seeded by the teacher's init step
    (init,) = t.init_containers
    assert f"{course['courseRepo']}/hub/seed_course.sh" in init["command"][2]
    assert (REPO / "hub" / "seed_course.sh").exists()
    assert (t.mem_limit, t.cpu_limit) == (course["teacherResources"]["memory"]["limit"],
                                          course["teacherResources"]["cpu"]["limit"])
    assert not s.init_containers and s.mem_limit is None and not s.extra_labels
    with pytest.raises(ValueError, match="roster"):
        c.KubeSpawner.pre_spawn_hook(FakeSpawner("not-in-the-class"))


def test_nothing_runs_as_root_at_spawn(values):
    su = values["singleuser"]
    assert not su.get("initContainers"), "an init container at every spawn (root chmod breaks under root-squash)"
    assert "runAsUser: 0" not in (Z2JH / "values.yaml").read_text()
    assert su.get("allowPrivilegeEscalation") in (None, False)


def test_the_exchange_job_prepares_what_the_pods_mount(values):
    pvc, job = yaml.safe_load_all((Z2JH / "exchange.yaml").read_text())
    (volume,) = [v for v in values["singleuser"]["storage"]["extraVolumes"] if v["name"] == "nbgrader-exchange"]
    assert pvc["metadata"]["name"] == volume["persistentVolumeClaim"]["claimName"]
    assert pvc["spec"]["accessModes"] == ["ReadWriteMany"]
    spec = job["spec"]["template"]["spec"]
    (container,) = spec["containers"]
    assert spec["volumes"][0]["persistentVolumeClaim"]["claimName"] == pvc["metadata"]["name"]
    assert container["volumeMounts"][0]["mountPath"] == exchange_mount(values)
    args = container["command"]
    course = values["custom"]["tinygpt"]
    ((teacher, uid),) = course["teachers"].items()
    gid = uid
    assert args[1] == f"{course['courseRepo']}/hub/exchange_setup.py"
    assert args[args.index("--root") + 1] == exchange_mount(values)
    assert args[args.index("--course") + 1] == f"{course['courseId']}={uid}:{gid}"


def test_readme_installs_the_pinned_chart():
    readme = (REPO / "hub" / "README.md").read_text()
    assert re.search(r"helm repo add jupyterhub \S+", readme)
    assert re.search(r"kubectl create namespace (\S+)", readme)
    installs = re.findall(r"helm upgrade --install .*", readme)
    assert installs and all(f"--version {CHART_VERSION}" in line for line in installs), installs
    assert f"--version {CHART_VERSION}" in (Z2JH / "values.yaml").read_text()
    assert (CHART / "LICENSE").exists()


def test_idle_servers_are_culled_as_on_one_machine(values):
    """The chart's culler (cull:) stops a server idle for the one-machine hub's default timeout,
    users kept; tests/test_hub.py shows the one-machine culler ending every process of the learner."""
    cull = values["cull"]
    assert cull["enabled"] is True and cull["users"] is False and cull["maxAge"] == 0, cull
    config = (Z2JH.parent / "jupyterhub_config.py").read_text()
    default = re.search(r'"TINYGPT_CULL_TIMEOUT", "(\d+)"', config)
    assert default and cull["timeout"] == int(default[1]) and cull["every"] <= cull["timeout"], cull
