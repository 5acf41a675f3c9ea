"""The pods the class runs on Kubernetes, built by the real KubeSpawner and checked offline.

No cluster: hub/z2jh/values.yaml (merged with chart 4.4.0's defaults, as Helm does) is turned into
KubeSpawner's configuration the way the chart's hub (its jupyterhub_config.py) maps singleuser.*
to KubeSpawner traits, then hub.extraConfig runs on it; jupyterhub-kubespawner 7.0.0 (the chart's
own) then makes each person's pod with its own manifest builder (KubeSpawner.get_pod_manifest),
for a teacher and a student, after the pre_spawn_hook, as the hub does. Each pod, and the grading
Job (hub/z2jh/grade-job.yaml), is validated against Kubernetes' own schemas (kubernetes-validate,
strict: no unknown field) for the oldest and newest versions the course supports, and:

- each person's pod runs with their uid from the roster, never as root, never privileged, init
  containers included; no container may escalate or keeps a capability;
- students' and the teacher's pods meet the "restricted" Pod Security level (Kubernetes' Pod
  Security Standards, the fields these pods use), the grading Job's pods need "privileged", for
  exactly the sandbox's three settings;
- no student pod mounts the course's source (the teacher-only Secret), and the image has none;
- the cloud metadata server: no privileged init container, and no NetworkPolicy egress rule of the
  chart's that reaches it;
- the grading Job: the teacher's uid and home volume, tinygpt-grade-class's sizing rule.
Each check is shown to fail when the defence it checks is switched off.
"""
import asyncio
import copy
import ipaddress
import re
import sys
import types

import kubernetes_validate
import pytest
import yaml

from test_z2jh_values import CHART, Z2JH, get_config, helm_merge, load
from tinygpt_course.testing.course import load_script

K8S_VERSIONS = ["1.33.0", "1.37.0"]     # hostUsers false (the grading Job) needs 1.33+
HOME = "/home/jovyan"


# --- the chart's hub: values -> KubeSpawner config (as chart 4.4.0's jupyterhub_config.py maps them)

def camel(name):
    return re.sub(r"_([a-z])", lambda m: m.group(1).upper(), name)


# the KubeSpawner traits the chart sets from singleuser.<key> when the value is not null
TRAITS = {name: key or camel(name) for name, key in [
    ("pod_name_template", None), ("start_timeout", None), ("image_pull_policy", "image.pullPolicy"),
    ("events_enabled", "events"), ("extra_labels", None), ("extra_annotations", None), ("uid", None),
    ("fs_gid", None), ("service_account", "serviceAccountName"), ("node_selector", None),
    ("lifecycle_hooks", None), ("init_containers", None), ("extra_containers", None),
    ("mem_limit", "memory.limit"), ("mem_guarantee", "memory.guarantee"), ("cpu_limit", "cpu.limit"),
    ("cpu_guarantee", "cpu.guarantee"), ("extra_resource_limits", "extraResource.limits"),
    ("extra_resource_guarantees", "extraResource.guarantees"), ("environment", "extraEnv"),
    ("profile_list", None), ("extra_pod_config", None)]}


def chart_config(values):
    """traitlets Config the chart's hub builds from these values (the parts that shape a user pod),
    then hub.extraConfig run on it, with z2jh.get_config reading the values."""
    from kubernetes_asyncio import client
    from traitlets.config import Config
    v = helm_merge(load(CHART / "values.default.yaml"), values)
    su = v["singleuser"]
    c = Config()
    c.KubeSpawner.common_labels = {"app": "jupyterhub", "app.kubernetes.io/name": "jupyterhub",
                                   "release": "tinygpt", "app.kubernetes.io/instance": "tinygpt",
                                   "app.kubernetes.io/managed-by": "kubespawner"}
    c.KubeSpawner.namespace = "tinygpt"
    for trait, key in TRAITS.items():
        value = get_config(su, key)
        if value is not None:
            setattr(c.KubeSpawner, trait, copy.deepcopy(value))
    c.KubeSpawner.image = f"{su['image']['name']}:{su['image']['tag']}"
    c.KubeSpawner.allow_privilege_escalation = su.get("allowPrivilegeEscalation")
    if get_config(v, "scheduling.userScheduler.enabled"):
        c.KubeSpawner.scheduler_name = "user-scheduler"
    storage = su["storage"]
    assert storage["type"] == "dynamic"
    name = storage["dynamic"]["volumeNameTemplate"]
    c.KubeSpawner.storage_pvc_ensure = True
    c.KubeSpawner.storage_capacity = storage["capacity"]
    c.KubeSpawner.storage_access_modes = storage["dynamic"]["storageAccessModes"]
    volumes = {name: {"name": name, "persistentVolumeClaim": {"claimName": "{pvc_name}"}}}
    mounts = {name: {"mountPath": storage["homeMountPath"], "name": name, "subPath": storage["dynamic"]["subPath"]}}
    files = su.get("extraFiles") or {}
    if files:
        volumes["files"] = {"name": "files", "secret": {"secretName": "singleuser", "items": [
            {"key": k, "path": k, **({"mode": f["mode"]} if "mode" in f else {})} for k, f in files.items()]}}
        for i, (k, f) in enumerate(files.items()):
            mounts[f"{i}-files"] = {"mountPath": f["mountPath"], "subPath": k, "name": "files"}
    for vol in storage.get("extraVolumes") or []:
        volumes[vol["name"]] = vol
    for i, m in enumerate(storage.get("extraVolumeMounts") or []):
        mounts[f"{i}-{m['name']}"] = m
    c.KubeSpawner.volumes, c.KubeSpawner.volume_mounts = volumes, mounts
    c.Spawner.cmd = su["cmd"]
    c.Spawner.default_url = su["defaultUrl"]
    if su["cloudMetadata"].get("blockWithIptables") is True:       # the chart's own init container
        c.KubeSpawner.init_containers.append(client.V1Container(
            name="block-cloud-metadata", image="quay.io/jupyterhub/k8s-network-tools:4.4.0",
            command=["iptables", "--append", "OUTPUT", "--protocol", "tcp", "--destination",
                     su["cloudMetadata"]["ip"], "--destination-port", "80", "--jump", "DROP"],
            security_context=client.V1SecurityContext(privileged=True, run_as_user=0,
                                                      capabilities=client.V1Capabilities(add=["NET_ADMIN"]))))
    for section, cfg in v["hub"].get("config", {}).items():
        c[section].update(cfg)
    sys.modules["z2jh"] = types.SimpleNamespace(get_config=lambda key, default=None: get_config(v, key, default))
    try:
        for key, code in sorted(v["hub"].get("extraConfig", {}).items()):
            exec(compile(code, key, "exec"), {"c": c})
    finally:
        del sys.modules["z2jh"]
    return c


def pod_manifest(config, name):
    """The pod KubeSpawner makes for user `name`, as a plain dict (what it sends to the API)."""
    from kubernetes_asyncio.client import ApiClient
    from jupyterhub.utils import maybe_future
    from kubespawner import KubeSpawner
    user = types.SimpleNamespace(name=name, id=1, url=f"/user/{name}/", escaped_name=name)

    async def build():           # as the hub does: the spawner made in its event loop, then the hook
        spawner = KubeSpawner(config=config, user=user, _mock=True)
        spawner.api_token = "not-a-real-token"
        await maybe_future(spawner.run_pre_spawn_hook())
        pod, pvc = await spawner.get_pod_manifest(), spawner.get_pvc_manifest()
        async with ApiClient() as api:
            return api.sanitize_for_serialization(pod), api.sanitize_for_serialization(pvc)
    return asyncio.run(build())


# --- what is checked

def validate(manifest):
    for version in K8S_VERSIONS:
        kubernetes_validate.validate(manifest, version, strict=True)


def containers(spec):
    return [*spec.get("initContainers", []), *spec["containers"]]


def root_or_privileged(spec):
    """What runs as root, privileged, may escalate or keeps a capability (init containers too)."""
    problems = []
    psc = spec.get("securityContext") or {}
    for ctr in containers(spec):
        sc = {**{k: psc[k] for k in ("runAsUser", "runAsNonRoot") if k in psc}, **(ctr.get("securityContext") or {})}
        where = ctr["name"]
        if sc.get("runAsUser") in (None, 0):
            problems.append(f"{where}: runs as {'root' if sc.get('runAsUser') == 0 else 'the image user'}")
        if not sc.get("runAsNonRoot"):
            problems.append(f"{where}: runAsNonRoot not set")
        if sc.get("privileged"):
            problems.append(f"{where}: privileged")
        if sc.get("allowPrivilegeEscalation") is not False:
            problems.append(f"{where}: may escalate privileges")
        caps = sc.get("capabilities") or {}
        if caps.get("add") or "ALL" not in (caps.get("drop") or []):
            problems.append(f"{where}: keeps capabilities {caps}")
    return problems


RESTRICTED_VOLUMES = {"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim",
                      "projected", "secret"}


def pod_security(spec):
    """{"baseline": [...], "restricted": [...]}: what of this pod spec breaks each Pod Security
    Standards level (the controls of kubernetes.io/docs/concepts/security/pod-security-standards)."""
    base, restr = [], []
    psc = spec.get("securityContext") or {}
    for key in ("hostNetwork", "hostPID", "hostIPC"):
        if spec.get(key):
            base.append(key)
    for vol in spec.get("volumes", []):
        kind = next(k for k in vol if k != "name")
        if kind == "hostPath":
            base.append(f"hostPath volume {vol['name']}")
        if kind not in RESTRICTED_VOLUMES:
            restr.append(f"volume {vol['name']} of type {kind}")
    if psc.get("sysctls"):
        base.append("sysctls")
    for ctr in containers(spec):
        sc, n = ctr.get("securityContext") or {}, ctr["name"]
        seccomp = (sc.get("seccompProfile") or psc.get("seccompProfile") or {}).get("type")
        apparmor = (sc.get("appArmorProfile") or psc.get("appArmorProfile") or {}).get("type")
        if sc.get("privileged"):
            base.append(f"{n}: privileged")
        if any(p.get("hostPort") for p in ctr.get("ports", [])):
            base.append(f"{n}: hostPort")
        if set((sc.get("capabilities") or {}).get("add") or []) - {
                "AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD", "NET_BIND_SERVICE",
                "SETFCAP", "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT"}:
            base.append(f"{n}: capabilities beyond the default set")
        if seccomp == "Unconfined":
            base.append(f"{n}: seccomp Unconfined")
        if apparmor == "Unconfined":
            base.append(f"{n}: AppArmor Unconfined")
        if sc.get("procMount", "Default") != "Default":
            base.append(f"{n}: procMount {sc['procMount']}")
        if seccomp not in ("RuntimeDefault", "Localhost"):
            restr.append(f"{n}: seccomp {seccomp}")
        if sc.get("allowPrivilegeEscalation") is not False:
            restr.append(f"{n}: allowPrivilegeEscalation")
        if not sc.get("runAsNonRoot", psc.get("runAsNonRoot")):
            restr.append(f"{n}: runAsNonRoot")
        if sc.get("runAsUser", psc.get("runAsUser")) == 0:
            restr.append(f"{n}: runAsUser 0")
        caps = sc.get("capabilities") or {}
        if "ALL" not in (caps.get("drop") or []) or set(caps.get("add") or []) - {"NET_BIND_SERVICE"}:
            restr.append(f"{n}: capabilities not dropped")
    return {"baseline": base, "restricted": base + restr}


def mounts_of(spec):
    """{volume name: [mount paths]} over every container, init containers included."""
    out = {}
    for ctr in containers(spec):
        for m in ctr.get("volumeMounts", []):
            out.setdefault(m["name"], []).append(m["mountPath"])
    return out


def roster_uids(values):
    course = values["custom"]["tinygpt"]
    roster = _roster_module()
    return {sid: uid for sid, *_, uid in roster.students(course)}, dict(course["teachers"])


def _roster_module():
    return load_script(Z2JH / "roster.py", "tinygpt_z2jh_roster")


# --- fixtures

@pytest.fixture(scope="module")
def values():
    return load(Z2JH / "values.yaml")


@pytest.fixture(scope="module", autouse=True)
def no_cluster(tmp_path_factory):
    """KubeSpawner reads a kube config when it is made (it contacts no API to build a manifest):
    one naming a cluster that does not exist, so nothing here can reach a real one."""
    import os
    path = tmp_path_factory.mktemp("kube") / "config"
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "none",
        "clusters": [{"name": "none", "cluster": {"server": "https://127.0.0.1:9"}}],
        "contexts": [{"name": "none", "context": {"cluster": "none", "user": "none"}}],
        "users": [{"name": "none", "user": {"token": "none"}}]}))
    old = os.environ.get("KUBECONFIG")
    os.environ["KUBECONFIG"] = str(path)
    yield
    if old is None:
        os.environ.pop("KUBECONFIG")
    else:
        os.environ["KUBECONFIG"] = old


@pytest.fixture(scope="module")
def pods(values):
    """{user name: (pod, pvc)} for every person of the roster and the teacher."""
    config = chart_config(values)
    students, teachers = roster_uids(values)
    return {name: pod_manifest(config, name) for name in [*teachers, *students]}


@pytest.fixture(scope="module")
def job():
    (doc,) = yaml.safe_load_all((Z2JH / "grade-job.yaml").read_text())
    return doc


# --- the pods

def test_every_pod_passes_the_kubernetes_schemas(pods, job):
    for name, (pod, pvc) in pods.items():
        validate(pod)
        validate(pvc)
    validate(job)
    for doc in yaml.safe_load_all((Z2JH / "exchange.yaml").read_text()):     # the exchange's claim and Job
        validate(doc)


def test_the_schema_check_catches_a_wrong_field(pods):
    pod = copy.deepcopy(next(iter(pods.values()))[0])
    pod["spec"]["containers"][0]["securityContext"]["runAsUsr"] = 2001
    with pytest.raises(kubernetes_validate.ValidationError):
        validate(pod)
    pod = copy.deepcopy(next(iter(pods.values()))[0])
    pod["spec"]["containers"][0]["securityContext"]["runAsUser"] = "ada"
    with pytest.raises(kubernetes_validate.ValidationError):
        validate(pod)


def test_each_person_runs_with_their_uid_from_the_roster(values, pods):
    students, teachers = roster_uids(values)
    assert students and teachers
    for name, uid in {**students, **teachers}.items():
        pod, _ = pods[name]
        (ctr,) = pod["spec"]["containers"]
        sc, psc = ctr["securityContext"], pod["spec"]["securityContext"]
        assert (sc["runAsUser"], sc["runAsGroup"], psc["fsGroup"]) == (uid, uid, uid), name
        for init in pod["spec"].get("initContainers", []):
            assert init["securityContext"]["runAsUser"] == uid, (name, init["name"])
    # and the passwd every pod mounts names exactly these uids
    passwd = {line.split(":")[0]: int(line.split(":")[2]) for line in values["custom"]["tinygpt"]["passwd"].splitlines()}
    assert all(passwd[n] == u for n, u in {**students, **teachers}.items())


def test_nothing_runs_as_root_or_privileged(pods, job):
    for name, (pod, _) in pods.items():
        assert not root_or_privileged(pod["spec"]), (name, root_or_privileged(pod["spec"]))
        assert pod["spec"]["automountServiceAccountToken"] is False, f"{name} could talk to the cluster's API"
    # the grading Job: the teacher's uid, no root, no privileged mode; it may escalate for the
    # newuidmap/newgidmap of the grading sandbox alone, and only to CAP_SETUID, CAP_SETGID
    # (tests/test_grade_job.py runs it under exactly these constraints, and under the old ones)
    spec = job["spec"]["template"]["spec"]
    assert root_or_privileged(spec) == ["grade: may escalate privileges",
                                        "grade: keeps capabilities {'drop': ['ALL'], 'add': ['SETUID', 'SETGID']}"]
    (ctr,) = spec["containers"]
    mounts = {m["mountPath"]: m.get("subPath") for m in ctr["volumeMounts"]}
    assert mounts["/etc/subuid"] == "tinygpt-subuid" and mounts["/etc/subgid"] == "tinygpt-subgid"


def test_the_chart_privileged_init_container_would_be_caught(values):
    """The check above fails for the chart's default (blockWithIptables: a root, privileged iptables
    init container in every pod), and for a root uid."""
    on = copy.deepcopy(values)
    on["singleuser"]["cloudMetadata"]["blockWithIptables"] = True
    students, _ = roster_uids(values)
    pod, _ = pod_manifest(chart_config(on), next(iter(students)))
    problems = root_or_privileged(pod["spec"])
    assert any("block-cloud-metadata: privileged" in p for p in problems), problems
    assert any("block-cloud-metadata: runs as root" in p for p in problems), problems
    spec = copy.deepcopy(pod["spec"])
    spec["initContainers"] = []
    spec["containers"][0]["securityContext"]["runAsUser"] = 0
    assert root_or_privileged(spec)


def test_pod_security_levels(pods, job):
    """Students' and the teacher's pods: restricted. The grading Job: privileged, for exactly the
    sandbox's settings (what baseline refuses), and nothing else."""
    for name, (pod, _) in pods.items():
        assert pod_security(pod["spec"])["restricted"] == [], (name, pod_security(pod["spec"]))
    spec = job["spec"]["template"]["spec"]
    levels = pod_security(spec)
    assert sorted(levels["baseline"]) == ["grade: AppArmor Unconfined", "grade: procMount Unmasked",
                                          "grade: seccomp Unconfined"], levels
    assert spec["hostUsers"] is False, "procMount Unmasked needs the pod's own user namespace"
    for kind in ("nfs", "hostPath"):
        assert not any(kind in vol for vol in spec["volumes"]), "no NFS or host volume in a user-namespaced pod"
    assert "nbgrader-exchange" not in {v["name"] for v in spec["volumes"]}, \
        "the exchange (NFS-type) cannot be mounted with hostUsers false"
    # hub/README.md gives the namespace the level the Job needs
    readme = (Z2JH.parent / "README.md").read_text()
    assert re.search(r"kubectl label namespace tinygpt pod-security\.kubernetes\.io/enforce=privileged", readme)


def test_only_the_teacher_pod_mounts_the_course_source(values, pods):
    course = values["custom"]["tinygpt"]
    students, teachers = roster_uids(values)
    secret = course["courseSecret"]
    for name in students:
        spec = pods[name][0]["spec"]
        assert not any(vol.get("secret", {}).get("secretName") == secret for vol in spec["volumes"]), name
        assert not spec.get("initContainers"), name
        for paths in mounts_of(spec).values():
            assert not any("source" in p for p in paths), (name, paths)
    for name in teachers:
        spec = pods[name][0]["spec"]
        (vol,) = [v for v in spec["volumes"] if v.get("secret", {}).get("secretName") == secret]
        mounts = mounts_of(spec)
        (init,) = spec["initContainers"]
        # mounted by the init step only, which copies it into the course folder on the home volume
        (main_home,) = [m["name"] for m in spec["containers"][0]["volumeMounts"] if m["mountPath"] == HOME]
        assert [m["name"] for m in init["volumeMounts"]] == [main_home, vol["name"]]
        assert vol["name"] not in {m["name"] for m in spec["containers"][0]["volumeMounts"]}
        assert mounts[vol["name"]] == ["/srv/tinygpt-source"]
        assert f"{course['courseRepo']}/hub/seed_course.sh" in init["command"][2]
        assert init["command"][3] == course["courseDir"]
        home = [m for m in init["volumeMounts"] if m["mountPath"] == HOME]
        assert home and home[0]["name"].startswith("volume-")


def test_the_metadata_server_is_out_of_reach(values):
    """No privileged iptables container: the chart's NetworkPolicy for user pods instead, whose
    egress rules (rendered here as the chart's template does) never open 169.254.169.254 but for DNS."""
    v = helm_merge(load(CHART / "values.default.yaml"), values)
    su = v["singleuser"]
    assert su["cloudMetadata"]["blockWithIptables"] is False
    rules = egress_rules(su)
    metadata = ipaddress.ip_address(su["cloudMetadata"]["ip"])
    assert not reaches(rules, metadata, port=80) and not reaches(rules, metadata, port=443)
    assert reaches(rules, ipaddress.ip_address("1.1.1.1"), port=443), "the internet (pip install) stays open"
    # the check fails when the rule that keeps it out is switched on
    open_ = copy.deepcopy(su)
    open_["networkPolicy"]["egressAllowRules"]["cloudMetadataServer"] = True
    assert reaches(egress_rules(open_), metadata, port=80)
    open_ = copy.deepcopy(su)
    open_["networkPolicy"]["enabled"] = False
    assert egress_rules(open_) is None


def egress_rules(su):
    """The user pods' NetworkPolicy egress rules from the values, as chart 4.4.0's
    singleuser/netpol.yaml renders them (its in-cluster rules to the hub and proxy pods aside);
    None when the chart makes no NetworkPolicy (all egress allowed)."""
    np = su["networkPolicy"]
    if not np["enabled"]:
        return None
    allow, ip = np["egressAllowRules"], su["cloudMetadata"]["ip"]
    private = ["10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16"]
    rules = []
    dns = [{"ipBlock": {"cidr": f"{ip}/32"}}] * bool(allow["dnsPortsCloudMetadataServer"]) + \
          [{"ipBlock": {"cidr": c}} for c in private] * bool(allow["dnsPortsPrivateIPs"])
    if dns:
        rules.append({"ports": [{"port": 53, "protocol": "UDP"}, {"port": 53, "protocol": "TCP"}], "to": dns})
    if allow["nonPrivateIPs"]:
        rules.append({"to": [{"ipBlock": {"cidr": "0.0.0.0/0", "except": private + [f"{ip}/32"]}}]})
    if allow["privateIPs"]:
        rules.append({"to": [{"ipBlock": {"cidr": c}} for c in private]})
    if allow["cloudMetadataServer"]:
        rules.append({"to": [{"ipBlock": {"cidr": f"{ip}/32"}}]})
    return rules + list(np.get("egress") or [])


def reaches(rules, address, port):
    if rules is None:
        return True
    for rule in rules:
        if rule.get("ports") and not any(p.get("port") == port for p in rule["ports"]):
            continue
        for peer in rule.get("to") or [{"ipBlock": {"cidr": "0.0.0.0/0"}}]:
            block = peer.get("ipBlock")
            if block and address in ipaddress.ip_network(block["cidr"]) and \
                    not any(address in ipaddress.ip_network(e) for e in block.get("except", [])):
                return True
    return False


# --- the grading Job

def test_the_grading_job_is_the_teacher_on_their_home_volume(values, pods, job):
    from tinygpt_course.classroom.cli import jobs_for_cores
    _, teachers = roster_uids(values)
    ((teacher, uid),) = teachers.items()
    course = values["custom"]["tinygpt"]
    spec = job["spec"]
    assert spec["completionMode"] == "Indexed" and spec["completions"] >= 1
    assert spec.get("backoffLimitPerIndex", 0) >= 1, "a failed shard must be retried alone"
    pod = spec["template"]["spec"]
    assert (pod["securityContext"]["runAsUser"], pod["securityContext"]["fsGroup"]) == (uid, uid)
    teacher_pod, teacher_pvc = pods[teacher]
    (home,) = [v for v in pod["volumes"] if "persistentVolumeClaim" in v]
    assert home["persistentVolumeClaim"]["claimName"] == teacher_pvc["metadata"]["name"], \
        "the Job must mount the teacher's own home volume (KubeSpawner's claim name)"
    # RWO: the Job's pods follow the teacher's pod to its node
    (term,) = pod["affinity"]["podAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert term["topologyKey"] == "kubernetes.io/hostname"
    for key, value in term["labelSelector"]["matchLabels"].items():
        assert teacher_pod["metadata"]["labels"].get(key) == value
        assert spec["template"]["metadata"]["labels"].get(key) == value
    (ctr,) = pod["containers"]
    cmd = ctr["command"]
    assert cmd[:2] == ["tinygpt-grade-class", "multihead"]
    assert int(cmd[cmd.index("--shards") + 1]) == spec["completions"]
    assert cmd[cmd.index("--course-dir") + 1] == f"{HOME}/{course['courseDir']}"
    assert {m["mountPath"] for m in ctr["volumeMounts"]} >= {HOME, "/tmp", "/etc/passwd"}
    # sized as tinygpt-grade-class sizes itself for the pod's cores (limit = request: Guaranteed)
    res = ctr["resources"]
    assert res["limits"] == res["requests"]
    cores = int(res["limits"]["cpu"])
    jobs = int(cmd[cmd.index("--jobs") + 1])
    env = {e["name"]: e["value"] for e in ctr["env"]}
    assert (jobs, int(env["OMP_NUM_THREADS"])) == jobs_for_cores(cores, int(env["TINYGPT_GRADE_MEMORY_MB"]))
    assert int(env["TINYGPT_GRADE_MEMORY_MB"]) <= _gib(res["limits"]["memory"]) * 1024, "a budget within the pod's limit"
    # the passwd the owner check reads is the roster's
    (passwd,) = [v for v in pod["volumes"] if v["name"] == "passwd"]
    assert passwd["secret"]["items"][0]["key"] == "tinygpt-passwd"
    assert values["singleuser"]["extraFiles"]["tinygpt-passwd"]["stringData"] == course["passwd"]


def _gib(quantity):
    m = re.fullmatch(r"(\d+(?:\.\d+)?)(Gi|Mi|G|M)", quantity)
    return float(m[1]) * {"Gi": 1, "Mi": 1 / 1024, "G": 1e9 / 2 ** 30, "M": 1e6 / 2 ** 30}[m[2]]


# --- the image students run

def solution_lines():
    """Every line of every solution and hidden test in source/ (the longer ones: a line of 20+
    characters is specific enough to name its lesson's answer)."""
    import json
    lines = set()
    for path in (Z2JH.parents[1] / "source").glob("*/*.ipynb"):
        for cell in json.loads(path.read_text())["cells"]:
            text = "".join(cell["source"])
            for begin, end in [("### BEGIN SOLUTION", "### END SOLUTION"),
                               ("### BEGIN HIDDEN TESTS", "### END HIDDEN TESTS")]:
                for block in re.findall(re.escape(begin) + r"(.*?)" + re.escape(end), text, re.S):
                    lines |= {ln.strip() for ln in block.splitlines() if len(ln.strip()) >= 20}
    return lines


def test_the_image_holds_no_solution(tmp_path):
    import subprocess
    ctx = tmp_path / "context"
    subprocess.run(["bash", str(Z2JH / "build-image.sh"), "--context", str(ctx)], check=True, timeout=120)
    assert (ctx / "environment.yml").is_file() and (ctx / "tinygpt_course").is_dir()
    assert (ctx / "hub" / "seed_course.sh").is_file() and (ctx / "hub" / "exchange_setup.py").is_file()
    for gone in ("source", "tests", "docs"):
        assert not (ctx / gone).exists(), gone
    secrets = solution_lines()
    assert len(secrets) > 20, "found too few solution lines in source/ to check anything"
    found = []
    for path in ctx.rglob("*"):
        if path.is_file():
            text = path.read_text(errors="ignore")
            found += [(str(path.relative_to(ctx)), ln) for ln in secrets if ln in text]
    assert not found, f"solution or hidden-test lines in the image: {found[:10]}"
    # the check can fail: the repo itself (source/ included) has them all
    assert any(ln in (Z2JH.parents[1] / "source" / "multihead" / "multihead.ipynb").read_text()
               for ln in secrets)
