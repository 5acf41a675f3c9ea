"""The grading service on Kubernetes (hub/z2jh/grading-service.yaml) and its burst path
(tinygpt_course/service/burst.py), checked offline:

- every object of grading-service.yaml passes Kubernetes' own schemas (strict), as test_z2jh_pods.py
  checks the pods;
- the runner (it runs learner code) has exactly the grading Job's settings, read from grade-job.yaml
  (the user namespace, the sandbox's three settings, the teacher's uid, home volume and node, the
  subordinate ids), the page the restricted level's; only the runner holds an API token;
- the runner is sized by tinygpt-grade-class's rule (classroom/cli.py jobs_for_cores);
- the page is the hub's `grading` service of values.yaml (its URL, token, name, the users' role as
  on one machine), and the runner reads the exchange as every user pod does;
- the Role grants create, get and delete of jobs.batch, nothing more;
- the Job burst.py makes is grade-job.yaml's (derived from the file, validated), for the
  assignment, students and shard count of the burst; decide() and shards_for() on data.
Each check is shown to fail for the mistake it names.
"""
import copy
import re

import kubernetes_validate
import pytest
import yaml

from test_z2jh_pods import HOME, K8S_VERSIONS, pod_security, root_or_privileged, validate
from test_z2jh_values import REPO, Z2JH, load
from tinygpt_course.service import burst
from tinygpt_course.service.queue import State

SERVICE_YAML = Z2JH / "grading-service.yaml"
JOB_YAML = Z2JH / "grade-job.yaml"


@pytest.fixture(scope="module")
def docs():
    """{kind: object} of grading-service.yaml (one of each kind)."""
    found = [d for d in yaml.safe_load_all(SERVICE_YAML.read_text()) if d]
    kinds = {d["kind"]: d for d in found}
    assert len(kinds) == len(found), "one object of each kind"
    return kinds


@pytest.fixture(scope="module")
def job():
    return burst.load_template(JOB_YAML)


@pytest.fixture(scope="module")
def values():
    return load(Z2JH / "values.yaml")


def pod_of(docs):
    return docs["Deployment"]["spec"]["template"]


def container(spec, name):
    (ctr,) = [c for c in spec["containers"] if c["name"] == name]
    return ctr


def env_of(ctr):
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in ctr.get("env", [])}


# --- the schemas ---------------------------------------------------------------------------

def test_every_object_passes_the_kubernetes_schemas(docs):
    assert set(docs) == {"ServiceAccount", "Role", "RoleBinding", "Service", "Deployment"}
    for doc in docs.values():
        validate(doc)


def test_the_schema_check_catches_a_wrong_field(docs):
    bad = copy.deepcopy(docs["Deployment"])
    container(bad["spec"]["template"]["spec"], "runner")["securityContext"]["procMunt"] = "Unmasked"
    with pytest.raises(kubernetes_validate.ValidationError):
        validate(bad)
    bad = copy.deepcopy(docs["Role"])
    bad["rules"][0]["verb"] = bad["rules"][0].pop("verbs")
    with pytest.raises(kubernetes_validate.ValidationError):
        validate(bad)


# --- the runner: the grading Job's pod settings ---------------------------------------------

def unlike_the_job(service_template, job_template):
    """What of the service's runner differs from the grading Job's pod, where it must not: the
    pod's security and user namespace, its node (affinity and the label the Job's pods follow),
    the grading container's security, resources, environment and mounts (the Job's are all there),
    and the volumes those mounts name."""
    problems = []
    pod, jpod = service_template["spec"], job_template["spec"]
    for key in ("hostUsers", "securityContext", "affinity"):
        if pod.get(key) != jpod.get(key):
            problems.append(f"pod {key}: {pod.get(key)} != the Job's {jpod.get(key)}")
    for key, value in job_template["metadata"]["labels"].items():
        if key != "app.kubernetes.io/name" and service_template["metadata"]["labels"].get(key) != value:
            problems.append(f"label {key} is not the Job's {value}")
    runner, (grade,) = container(pod, "runner"), jpod["containers"]
    for key in ("image", "securityContext", "resources"):
        if runner.get(key) != grade.get(key):
            problems.append(f"runner {key}: {runner.get(key)} != the Job's {grade.get(key)}")
    env = env_of(runner)
    problems += [f"runner env {k}={env.get(k)!r}, the Job's {v!r}" for k, v in env_of(grade).items() if env.get(k) != v]
    mounts = runner["volumeMounts"]
    problems += [f"runner lacks the Job's mount {m}" for m in grade["volumeMounts"] if m not in mounts]
    volumes = {v["name"]: v for v in pod["volumes"]}
    for vol in jpod["volumes"]:
        mine = copy.deepcopy(volumes.get(vol["name"]))
        if mine and "secret" in vol:       # the service's secret may hold more items than the Job's
            mine["secret"]["items"] = [i for i in mine["secret"]["items"] if i in vol["secret"]["items"]]
        if mine != vol:
            problems.append(f"volume {vol['name']}: {volumes.get(vol['name'])} != the Job's {vol}")
    return problems


def test_the_runner_has_the_grading_jobs_settings(docs, job):
    assert unlike_the_job(pod_of(docs), job["spec"]["template"]) == []
    spec = pod_of(docs)["spec"]
    # as the Job's: no root, nothing privileged; it may escalate only for newuidmap/newgidmap
    assert root_or_privileged({**spec, "containers": [container(spec, "runner")]}) == [
        "runner: may escalate privileges", "runner: keeps capabilities {'drop': ['ALL'], 'add': ['SETUID', 'SETGID']}"]
    assert docs["Deployment"]["spec"]["replicas"] == 1 and docs["Deployment"]["spec"]["strategy"]["type"] == "Recreate"


@pytest.mark.parametrize("mistake", ["procMount", "uid", "affinity", "label", "subuid", "claim", "memory"])
def test_a_runner_unlike_the_job_is_caught(docs, job, mistake):
    template = copy.deepcopy(pod_of(docs))
    spec = template["spec"]
    runner = container(spec, "runner")
    if mistake == "procMount":
        del runner["securityContext"]["procMount"]
    elif mistake == "uid":
        spec["securityContext"]["runAsUser"] = 2001
    elif mistake == "affinity":
        del spec["affinity"]
    elif mistake == "label":
        del template["metadata"]["labels"]["tinygpt.example.org/course-volume"]
    elif mistake == "subuid":
        runner["volumeMounts"] = [m for m in runner["volumeMounts"] if m["mountPath"] != "/etc/subuid"]
    elif mistake == "claim":
        (home,) = [v for v in spec["volumes"] if v["name"] == "home"]
        home["persistentVolumeClaim"]["claimName"] = "claim-student-login-1"
    elif mistake == "memory":
        runner["env"] = [e for e in runner["env"] if e["name"] != "TINYGPT_GRADE_MEMORY_MB"]
    assert unlike_the_job(template, job["spec"]["template"])


def test_pod_security_runner_as_the_job_page_restricted(docs, job):
    """The pod: privileged for exactly the sandbox's three settings (the runner's, as the Job's);
    the page's container alone meets restricted; only the runner mounts the API token."""
    spec = pod_of(docs)["spec"]
    assert sorted(pod_security(spec)["baseline"]) == ["runner: AppArmor Unconfined", "runner: procMount Unmasked",
                                                      "runner: seccomp Unconfined"]
    page = {**spec, "containers": [container(spec, "page")]}
    assert pod_security(page)["restricted"] == [] and root_or_privileged(page) == []
    assert spec["automountServiceAccountToken"] is False
    (token,) = [v for v in spec["volumes"] if "projected" in v]
    assert any("serviceAccountToken" in s for s in token["projected"]["sources"])
    holders = [c["name"] for c in spec["containers"] if any(m["name"] == token["name"] for m in c["volumeMounts"])]
    assert holders == ["runner"]
    (mount,) = [m for m in container(spec, "runner")["volumeMounts"] if m["name"] == token["name"]]
    assert mount["mountPath"] == burst.ACCOUNT      # where burst.KubeJobs reads it
    # outside what the grading sandbox shows learner code (the system's folders, read-only)
    from tinygpt_course.grading.sandbox import _system_binds
    shown = [p for p in _system_binds() if p.startswith("/")]
    assert not any(mount["mountPath"].startswith(p + "/") for p in shown)
    # the check fails for a page that may escalate, and for a token the page holds
    bad = copy.deepcopy(page)
    bad["containers"][0]["securityContext"]["allowPrivilegeEscalation"] = True
    assert pod_security(bad)["restricted"]


def test_the_runner_is_sized_by_the_graders_rule(docs):
    from tinygpt_course.classroom.cli import jobs_for_cores

    def sizing_problems(runner):
        cmd, env, res = runner["command"], env_of(runner), runner["resources"]
        cores = int(res["limits"]["cpu"])
        got = (int(cmd[cmd.index("--jobs") + 1]), int(env["OMP_NUM_THREADS"]))
        problems = []
        if res["limits"] != res["requests"]:
            problems.append("limits != requests (not Guaranteed)")
        if got != jobs_for_cores(cores, int(env["TINYGPT_GRADE_MEMORY_MB"])):
            problems.append(f"--jobs, threads {got} != the rule's for {cores} cores")
        if int(env["TINYGPT_GRADE_MEMORY_MB"]) > int(res["limits"]["memory"].removesuffix("Gi")) * 1024:
            problems.append("the budget is above the memory limit")
        return problems

    runner = container(pod_of(docs)["spec"], "runner")
    assert runner["command"][:2] == ["tinygpt-grading-service", "run"]
    assert runner["command"][runner["command"].index("--course-dir") + 1].startswith(HOME + "/")
    assert sizing_problems(runner) == []
    for key, bad in [("command", lambda c: c[:c.index("--jobs") + 1] + ["9"] + c[c.index("--jobs") + 2:]),
                     ("memory", None), ("cpu", None)]:
        wrong = copy.deepcopy(runner)
        if key == "command":
            wrong["command"] = bad(wrong["command"])
        elif key == "memory":
            wrong["env"] = [{**e, "value": "8192"} if e["name"] == "TINYGPT_GRADE_MEMORY_MB" else e
                            for e in wrong["env"]]
        else:
            wrong["resources"]["limits"]["cpu"] = "4"
        assert sizing_problems(wrong), key


# --- the page: values.yaml's hub service ----------------------------------------------------

def wiring_problems(docs, values):
    """Where the pod and values.yaml disagree: the hub's `grading` service (its URL is the Service's,
    which selects this pod, whose page listens on that port under that name, with the token the
    chart makes for it), the users' role (as hub/jupyterhub_config.py gives it on one machine), the
    teacher (uid, home volume, who sees the queue, the course folder) and the exchange (the user
    pods' claim, path and nbgrader_config.py)."""
    problems = []

    def check(ok, what):
        if not ok:
            problems.append(what)

    services = values["hub"].get("services") or {}
    svc = services.get("grading", {})
    service, template = docs["Service"], pod_of(docs)
    spec = template["spec"]
    page, runner = container(spec, "page"), container(spec, "runner")
    url = re.fullmatch(r"http://([a-z0-9-]+):(\d+)", svc.get("url", ""))
    (port,) = service["spec"]["ports"]
    check(url and url[1] == service["metadata"]["name"] and int(url[2]) == port["port"],
          f"hub.services.grading.url {svc.get('url')} is not the Service's")
    check(all(template["metadata"]["labels"].get(k) == v for k, v in service["spec"]["selector"].items()),
          "the Service does not select the pod")
    check(port["targetPort"] in [p["name"] for p in page.get("ports", [])], "the page has not the Service's port")
    env = env_of(page)
    check(env.get("JUPYTERHUB_SERVICE_NAME") == "grading" and env.get("JUPYTERHUB_CLIENT_ID") == "service-grading"
          and env.get("JUPYTERHUB_SERVICE_PREFIX") == "/services/grading/", "the page is not the service `grading`")
    check(int(env.get("JUPYTERHUB_SERVICE_URL", ":0").rsplit(":", 1)[1]) == page["ports"][0]["containerPort"],
          "the page listens on another port")
    # the token the chart makes for the service (its `hub` Secret, key hub.services.<key>.apiToken)
    check(env.get("JUPYTERHUB_API_TOKEN") == {"secretKeyRef": {"name": "hub", "key": "hub.services.grading.apiToken"}},
          "the page's token is not the chart's for hub.services.grading")
    check(template["metadata"]["labels"].get("hub.jupyter.org/network-access-hub") == "true",
          "the chart's NetworkPolicy keeps the page from the hub")
    one_machine = re.search(r'\{"name": "user", "scopes": (\[.*?\])\}',
                            (REPO / "hub" / "jupyterhub_config.py").read_text())
    check(one_machine and values["hub"].get("loadRoles", {}).get("user", {}).get("scopes")
          == yaml.safe_load(one_machine[1]), "the users' role is not the one-machine hub's")
    check(svc.get("oauth_no_confirm") is True, "an authorize page in the lab extension's frame")
    course = values["custom"]["tinygpt"]
    ((teacher, uid),) = course["teachers"].items()
    cmd = page["command"]
    check(cmd[cmd.index("--teachers") + 1].split(",") == list(course["teachers"]), "--teachers is not the roster's")
    check(spec["securityContext"]["runAsUser"] == uid, "not the teacher's uid")
    (home,) = [v for v in spec["volumes"] if v["name"] == "home"]
    check(home["persistentVolumeClaim"]["claimName"] == f"claim-{teacher}", "not the teacher's home volume")
    for ctr in (page, runner):
        check(ctr["command"][ctr["command"].index("--course-dir") + 1] == f"{HOME}/{course['courseDir']}",
              f"{ctr['name']}: not the teacher's course folder")
    su = values["singleuser"]
    (user_mount,) = [m for m in su["storage"]["extraVolumeMounts"] if m["name"] == "nbgrader-exchange"]
    (user_vol,) = [v for v in su["storage"]["extraVolumes"] if v["name"] == "nbgrader-exchange"]
    check({m["mountPath"] for m in runner["volumeMounts"] if m["name"] == user_vol["name"]} == {user_mount["mountPath"]}
          and {v["name"]: v for v in spec["volumes"]}.get(user_vol["name"]) == user_vol,
          "the runner does not mount the exchange as user pods do")
    config = [m for m in runner["volumeMounts"] if m.get("subPath") == "tinygpt-common-nbgrader-config-py"]
    check(config and config[0]["mountPath"] == su["extraFiles"]["tinygpt-common-nbgrader-config-py"]["mountPath"]
          and env_of(runner).get("JUPYTER_CONFIG_PATH") == config[0]["mountPath"].rsplit("/", 1)[0],
          "the runner lacks the exchange's nbgrader_config.py (root, course id)")
    return problems


def test_the_page_is_the_hubs_grading_service_and_the_runner_the_teachers(docs, values):
    assert wiring_problems(docs, values) == []


def _env_set(ctr, name, value):
    ctr["env"] = [{"name": name, "value": value} if e["name"] == name else e for e in ctr["env"]]


@pytest.mark.parametrize("mistake", ["url", "service-name", "token", "role", "confirm", "label", "teachers",
                                     "exchange", "config"])
def test_wiring_mistakes_are_caught(docs, values, mistake):
    docs, values = copy.deepcopy(docs), copy.deepcopy(values)
    spec = pod_of(docs)["spec"]
    page, runner = container(spec, "page"), container(spec, "runner")
    if mistake == "url":
        values["hub"]["services"]["grading"]["url"] = "http://tinygpt-grading-service:8080"
    elif mistake == "service-name":
        _env_set(page, "JUPYTERHUB_SERVICE_NAME", "grader")
    elif mistake == "token":
        (token,) = [e for e in page["env"] if e["name"] == "JUPYTERHUB_API_TOKEN"]
        token["valueFrom"]["secretKeyRef"]["key"] = "hub.services.jupyterhub-idle-culler.apiToken"
    elif mistake == "role":
        values["hub"]["loadRoles"]["user"]["scopes"] = ["self", "access:services"]
    elif mistake == "confirm":
        del values["hub"]["services"]["grading"]["oauth_no_confirm"]
    elif mistake == "label":
        del pod_of(docs)["metadata"]["labels"]["hub.jupyter.org/network-access-hub"]
    elif mistake == "teachers":
        page["command"][page["command"].index("--teachers") + 1] = "student-login-1"
    elif mistake == "exchange":
        runner["volumeMounts"] = [m for m in runner["volumeMounts"] if m["name"] != "nbgrader-exchange"]
    elif mistake == "config":
        _env_set(runner, "JUPYTER_CONFIG_PATH", "/etc/jupyter")
    assert wiring_problems(docs, values), mistake


# --- RBAC: jobs, nothing more -----------------------------------------------------------------

def grants(role):
    """{(api group, resource, verb)} a Role's rules grant ('*' kept as it is: it grants all)."""
    return {(g, r, v) for rule in role["rules"] for g in rule.get("apiGroups", [])
            for r in rule.get("resources", []) for v in rule.get("verbs", [])}


ALLOWED = {("batch", "jobs", verb) for verb in ("create", "get", "delete")}


def test_the_role_grants_jobs_only(docs):
    role, binding = docs["Role"], docs["RoleBinding"]
    assert grants(role) == ALLOWED
    assert not any(rule.get("nonResourceURLs") or rule.get("resourceNames") for rule in role["rules"])
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                                  "name": role["metadata"]["name"]}
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": pod_of(docs)["spec"]["serviceAccountName"]}]
    assert docs["ServiceAccount"]["metadata"]["name"] == pod_of(docs)["spec"]["serviceAccountName"]
    for extra in ({"apiGroups": [""], "resources": ["pods"], "verbs": ["create"]},
                  {"apiGroups": ["batch"], "resources": ["jobs"], "verbs": ["*"]},
                  {"apiGroups": ["batch"], "resources": ["jobs"], "verbs": ["list"]},
                  {"apiGroups": ["*"], "resources": ["*"], "verbs": ["get"]}):
        bad = copy.deepcopy(role)
        bad["rules"].append(extra)
        assert grants(bad) != ALLOWED, extra


# --- the burst's Job: grade-job.yaml, filled in ------------------------------------------------

def made(job, **kw):
    args = {"name": "tinygpt-burst-multihead-7", "assignment": "multihead",
            "students": ["zoe", "ada", "bob"], "shards": 2, "course": "tinygpt"}
    return burst.job_manifest(job, **{**args, **kw})


def unlike_the_template(made_job, template):
    """What of a burst's Job differs from grade-job.yaml's beyond the name, labels, annotation,
    the shard count and the command's assignment and --shards."""
    a, b = copy.deepcopy(made_job), copy.deepcopy(template)
    for doc in (a, b):
        doc["metadata"] = {}
        doc["spec"]["completions"] = doc["spec"]["parallelism"] = 0
        cmd = doc["spec"]["template"]["spec"]["containers"][0]["command"]
        cmd[1] = cmd[cmd.index("--shards") + 1] = None
    return [] if a == b else [f"differs: {a['spec']} vs {b['spec']}"]


def test_the_burst_job_is_grade_job_yaml_filled_in(job):
    out = made(job)
    validate(out)
    assert unlike_the_template(out, job) == []
    spec = out["spec"]
    assert spec["completionMode"] == "Indexed" and spec["completions"] == spec["parallelism"] == 2
    (ctr,) = spec["template"]["spec"]["containers"]
    cmd = ctr["command"]
    assert cmd[:2] == ["tinygpt-grade-class", "multihead"] and cmd[cmd.index("--shards") + 1] == "2"
    assert out["metadata"]["name"] == "tinygpt-burst-multihead-7"
    assert out["metadata"]["annotations"][burst.STUDENTS_ANNOTATION] == "ada,bob,zoe"
    assert out["metadata"]["labels"][burst.BURST_LABEL] == "tinygpt"
    assert ctr["securityContext"] == job["spec"]["template"]["spec"]["containers"][0]["securityContext"]
    assert job["spec"]["completions"] == 4 and job["metadata"]["name"] == "tinygpt-grade", \
        "the template is left as it was"


def test_a_burst_job_unlike_the_template_is_caught(job):
    out = made(job)
    out["spec"]["template"]["spec"]["containers"][0]["securityContext"]["procMount"] = "Default"
    assert unlike_the_template(out, job)
    out = made(job)
    out["spec"]["template"]["spec"]["securityContext"]["runAsUser"] = 0
    assert unlike_the_template(out, job)
    bad = copy.deepcopy(job)
    bad["spec"]["template"]["spec"]["containers"][0]["command"].remove("--shards")
    with pytest.raises(ValueError, match="--shards"):
        made(bad)
    bad = copy.deepcopy(job)
    bad["spec"]["template"]["spec"]["containers"][0]["command"][0] = "sh"
    with pytest.raises(ValueError, match="tinygpt-grade-class"):
        made(bad)


def test_a_template_that_is_not_an_indexed_job_is_refused(tmp_path):
    text = JOB_YAML.read_text().replace("completionMode: Indexed", "completionMode: NonIndexed")
    (tmp_path / "job.yaml").write_text(text)
    with pytest.raises(ValueError, match="Indexed"):
        burst.load_template(tmp_path / "job.yaml")


# --- deciding, on data ---------------------------------------------------------------------------

def summary(queued, held=0):
    return {"counts": {**{s: 0 for s in State}, State.QUEUED: queued, State.HELD: held}}


@pytest.mark.parametrize("queued, held, capacity, over, expected", [
    (50, 0, 3, 0, 0),        # over 0: never
    (5, 0, 3, 5, 0),         # not more than `over` due
    (6, 0, 3, 5, 3),         # more: those beyond the pod's next three
    (40, 0, 3, 5, 37),
    (2, 30, 3, 1, 0),        # held by the rate limit are not due: not the pod's load now
    (4, 0, 6, 1, 0),         # the pod's workers take them all next
])
def test_decide(queued, held, capacity, over, expected):
    assert burst.decide(summary(queued, held), capacity, over) == expected


@pytest.mark.parametrize("students, per_pod, max_pods, expected", [
    (1, 6, 4, 1), (6, 6, 4, 1), (7, 6, 4, 2), (13, 6, 4, 3), (100, 6, 4, 4)])
def test_shards_for(students, per_pod, max_pods, expected):
    assert burst.shards_for(students, per_pod, max_pods) == expected


def test_job_state_on_data():
    assert burst.job_state({}) == "running"
    assert burst.job_state({"status": {"active": 2}}) == "running"
    assert burst.job_state({"status": {"conditions": [{"type": "Complete", "status": "True"}]}}) == "complete"
    assert burst.job_state({"status": {"conditions": [{"type": "Failed", "status": "True"}]}}) == "failed"
    assert burst.job_state({"status": {"conditions": [{"type": "Complete", "status": "False"}]}}) == "running"


def test_burst_is_off_by_default():
    assert burst.GradingBurst.over.default_value == 0
    assert K8S_VERSIONS      # the schemas checked above are those of the versions the course supports


def test_without_a_service_account_the_service_grades_alone(tmp_path):
    """c.GradingBurst.over set where there is no Kubernetes service account (one machine): no
    burst, said in the log, instead of a service that cannot start."""
    import os
    import types
    from traitlets.config import Config
    if os.path.exists(burst.ACCOUNT):
        pytest.skip("this machine is a Kubernetes pod with a service account")
    config = Config()
    config.GradingBurst.over = 3
    b = burst.GradingBurst(types.SimpleNamespace(course=str(tmp_path)), config=config)
    assert b.over == 0 and not b.busy()
    b.step()            # nothing to do, nothing asked of a queue
    # with an API given (the check above would not fail otherwise) the setting stays
    b = burst.GradingBurst(types.SimpleNamespace(course=str(tmp_path)), api=object(), config=config)
    assert b.over == 3
