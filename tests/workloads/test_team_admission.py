"""A team's admission policies: what they match, what they select, and that the program makes them.

The policies themselves (their CEL, evaluated by a real API server: a job without a queue
label refused, our own job pods accepted, a privileged pod or one mounting its token refused,
a member's change of a Workload's priority refused) run in
``tests/controlplane/test_team_namespace.py``; no CEL evaluator is available offline. Here:
the objects are valid ``admissionregistration.k8s.io/v1`` for the stack's Kubernetes version
(kubernetes-validate, strict), they match exactly the job kinds the team Role lets members
create and select exactly the team's Namespace by a label it carries, and the Pulumi program
(under mocks: no engine, no cluster, ``tests/pulumi_mocks.py``) creates them as typed
resources of each team. If this fails, a member could create a job Kueue never sees (outside
every quota), a member could raise their Workload's priority and preempt other teams (or the
workload policy would miss a priority field of Kueue v0.17.0's Workload, or catch Kueue's
own updates), a policy would cover another team's namespace or none, or ``pulumi up`` would
not create the policies at all.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from infra import versions
from infra.config import parse, project_defaults, stack_file_values
from jobs import queue
from tests.pulumi_mocks import USER_SET, ProgramRun, run_program
from workloads.specs import pytorchjob, team_admission, teams
from workloads.specs.validate import validate

ARN = "arn:aws:iam::123456789012:role/{}"
TEAMS = [
    {"name": "nlp", "principalArns": [ARN.format("nlp")]},
    {"name": "vision", "principalArns": [ARN.format("vision")]},
]
SECRETS = {"hfToken": "hf_mock", "grafanaAdminPassword": "mock-password"}
VAP = "kubernetes:admissionregistration.k8s.io/v1:ValidatingAdmissionPolicy"
VAPB = "kubernetes:admissionregistration.k8s.io/v1:ValidatingAdmissionPolicyBinding"


def stack(name: str) -> Any:
    raw = {**project_defaults(), **USER_SET, **stack_file_values(name), "teams": TEAMS}
    return parse(raw, stack=name)


def _policies(objs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {o["metadata"]["name"]: o for o in objs if o["kind"] == "ValidatingAdmissionPolicy"}


def test_the_policies_are_valid_for_the_stacks_kubernetes() -> None:
    cfg = stack("p5-16")
    for team in cfg.teams:
        objs = team_admission.objects(team.name)
        assert [o["kind"] for o in objs] == [
            "ValidatingAdmissionPolicy",
            "ValidatingAdmissionPolicyBinding",
        ] * 3
        for obj in objs:
            validate(obj, cfg.kubernetes_version)
        # part of the team's objects, right after its Namespace (nothing a member uses first)
        all_objs = teams.objects(team, cfg)
        assert all_objs[0]["kind"] == "Namespace" and all_objs[1 : 1 + len(objs)] == objs


def test_the_queue_policy_matches_every_job_kind_the_role_grants() -> None:
    team = stack("p5-16").teams[0]
    role = teams.role(team)
    creatable = {
        (group, resource)
        for rule in role["rules"]
        if "create" in rule["verbs"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        if group in ("kubeflow.org", "trainer.kubeflow.org")
    }
    policy = team_admission.queue_policy(team.name)
    rules = policy["spec"]["matchConstraints"]["resourceRules"]
    matched = {(g, r) for rule in rules for g in rule["apiGroups"] for r in rule["resources"]}
    assert matched == creatable == set(team_admission.JOB_RESOURCES)
    assert all(set(rule["operations"]) == {"CREATE", "UPDATE"} for rule in rules)
    assert team_admission.QUEUE_LABEL == queue.QUEUE_LABEL
    (check,) = policy["spec"]["validations"]
    # the label alone: Kueue's own writes (unsuspend, runtime patches) keep it and pass
    assert check["expression"] == (
        "has(object.metadata.labels) && 'kueue.x-k8s.io/queue-name' in object.metadata.labels"
        " && object.metadata.labels['kueue.x-k8s.io/queue-name'] != ''"
    )
    assert "spec" not in check["expression"] and "status" not in check["expression"]


def test_the_bindings_select_only_the_teams_namespace() -> None:
    cfg = stack("p5-16")
    for team in cfg.teams:
        ns_labels = teams.namespace(team)["metadata"]["labels"]
        objs = team_admission.objects(team.name)
        policies = _policies(objs)
        bindings = [o for o in objs if o["kind"] == "ValidatingAdmissionPolicyBinding"]
        assert {b["spec"]["policyName"] for b in bindings} == set(policies)
        for b in bindings:
            selector = b["spec"]["matchResources"]["namespaceSelector"]["matchLabels"]
            assert selector.items() <= ns_labels.items()
            assert b["spec"]["validationActions"] == ["Deny"]
        others = [t for t in cfg.teams if t != team]
        for other in others:
            other_labels = teams.namespace(other)["metadata"]["labels"]
            assert not selector.items() <= other_labels.items()
    names = [o["metadata"]["name"] for t in cfg.teams for o in team_admission.objects(t.name)]
    assert len(names) == len(set(names)) * 2  # a policy and its binding share a name


def test_the_pod_policy_allows_what_efa_pods_add_and_the_jobs_service_account() -> None:
    policy = team_admission.pod_policy("nlp")
    text = " ".join(v["expression"] for v in policy["spec"]["validations"])
    for cap in pytorchjob.EFA_CAPABILITIES:
        assert f"'{cap}'" in text
    assert f"'{pytorchjob.SERVICE_ACCOUNT}'" in text
    rules = policy["spec"]["matchConstraints"]["resourceRules"]
    assert rules == [
        {
            "apiGroups": [""],
            "apiVersions": ["*"],
            "operations": ["CREATE"],
            "resources": ["pods"],
            "scope": "Namespaced",
        }
    ]


def test_the_pod_policy_refuses_mounting_the_token_our_pods_do_not_mount() -> None:
    """``automountServiceAccountToken: true`` in a pod overrides its ServiceAccount's ``false``
    (Kubernetes docs, "Configure Service Accounts for Pods"); the rule refuses only ``true``,
    and the ServiceAccount and our worker pods (v1 and the Trainer v2 runtime) set ``false``."""
    from workloads.specs import trainjob as tj

    policy = team_admission.pod_policy("nlp")
    (rule,) = [
        v
        for v in policy["spec"]["validations"]
        if "automountServiceAccountToken" in v["expression"]
    ]
    assert rule["expression"] == (
        "!has(object.spec.automountServiceAccountToken) || "
        "!object.spec.automountServiceAccountToken"
    )
    team = stack("p5-16").teams[0]
    assert teams.service_account(team)["automountServiceAccountToken"] is False
    pods = [
        p
        for p in _pod_specs(tj.cluster_training_runtime())
        if "containers" in p  # pod specs, not other objects that carry "spec"
    ]
    assert pods
    for pod in pods:
        assert pod.get("automountServiceAccountToken") is False, pod


def _pod_specs(value: Any) -> list[dict[str, Any]]:
    """Every pod spec (a ``template.spec``) nested in ``value``."""
    found: list[dict[str, Any]] = []
    if isinstance(value, dict):
        template = value.get("template")
        if isinstance(template, dict) and isinstance(template.get("spec"), dict):
            found.append(template["spec"])
        for v in value.values():
            found += _pod_specs(v)
    elif isinstance(value, list):
        for v in value:
            found += _pod_specs(v)
    return found


def test_the_workload_policy_covers_members_updates_of_priority_and_queue() -> None:
    """The Role lets members patch Workloads; the policy matches exactly that (UPDATE of
    ``kueue.x-k8s.io`` workloads, the team's group only, so Kueue's controller is not matched)
    and compares each field with CEL's optional selection (unset on both sides: equal)."""
    team = stack("p5-16").teams[0]
    role = teams.role(team)
    patchable = {
        (group, resource)
        for rule in role["rules"]
        if "patch" in rule["verbs"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        if group == "kueue.x-k8s.io"
    }
    assert patchable == {team_admission.WORKLOAD_RESOURCE}
    policy = team_admission.workload_policy(team.name)
    rules = policy["spec"]["matchConstraints"]["resourceRules"]
    assert rules == [
        {
            "apiGroups": ["kueue.x-k8s.io"],
            "apiVersions": ["*"],
            "operations": ["UPDATE"],
            "resources": ["workloads"],
            "scope": "Namespaced",
        }
    ]
    (cond,) = policy["spec"]["matchConditions"]
    assert cond["expression"] == (
        f"request.userInfo.groups.exists(g, g == '{teams.group_name(team.name)}')"
    )
    # the group the RoleBinding grants the Role to is the one the condition names
    (subject,) = teams.role_binding(team)["subjects"]
    assert subject["kind"] == "Group" and f"'{subject['name']}'" in cond["expression"]
    checks = policy["spec"]["validations"]
    assert [c["expression"] for c in checks] == [
        f"object.spec.?{f} == oldObject.spec.?{f}" for f in team_admission.WORKLOAD_FIELDS
    ]
    assert all(c["reason"] == "Forbidden" for c in checks)
    assert len({c["message"] for c in checks}) == len(checks)
    assert "active" not in team_admission.WORKLOAD_FIELDS


def _kueue_module() -> Path | None:
    """The Kueue module at the pin in Go's module cache (None without Go or the module)."""
    try:
        out = subprocess.run(
            ["go", "env", "GOMODCACHE"], capture_output=True, text=True, timeout=30, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        out = None
    root = out.stdout.strip() if out and out.returncode == 0 else ""
    root = root or os.path.expanduser("~/go/pkg/mod")
    path = Path(root) / "sigs.k8s.io" / f"kueue@{versions.KUEUE_VERSION}"
    return path if path.is_dir() else None


def test_the_workload_policy_names_every_priority_and_queue_field_of_kueues_workload() -> None:
    """Against the Workload CRD of Kueue at the pin (``config/components/crd/bases/
    kueue.x-k8s.io_workloads.yaml``, read from Go's module cache; skipped without it): every
    ``spec`` field of a served version that sets the priority or the queue (v1beta2
    ``priority``, ``priorityClassRef``; v1beta1 ``priorityClassName``,
    ``priorityClassSource``; ``queueName``) is one the policy keeps, and each field it keeps
    exists in some served version."""
    module = _kueue_module()
    if module is None:
        pytest.skip(f"sigs.k8s.io/kueue@{versions.KUEUE_VERSION} is not in Go's module cache")
    crd_path = module / "config" / "components" / "crd" / "bases" / "kueue.x-k8s.io_workloads.yaml"
    crd = yaml.safe_load(crd_path.read_text())
    fields: set[str] = set()
    served = [v for v in crd["spec"]["versions"] if v.get("served")]
    assert {v["name"] for v in served} >= {"v1beta1", "v1beta2"}
    for version in served:
        spec = version["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
        fields |= set(spec)
    wanted = {f for f in fields if "priority" in f.lower() or f == "queueName"}
    assert wanted == set(team_admission.WORKLOAD_FIELDS)


@pytest.fixture(scope="module")
def run() -> ProgramRun:
    return run_program("p5-16", overrides={"teams": TEAMS}, secrets=SECRETS)


def test_the_program_creates_each_teams_policies(run: ProgramRun) -> None:
    for team in ("nlp", "vision"):
        (comp,) = [r for r in run.resources if r.name == f"team-{team}"]
        children = run.children_of(comp)
        made = {c.inputs["metadata"]["name"]: c for c in children if c.type == VAP}
        assert set(made) == set(_policies(team_admission.objects(team)))
        for name, res in made.items():
            expected = next(
                o for o in team_admission.objects(team) if o["metadata"]["name"] == name
            )
            assert res.inputs["spec"] == expected["spec"]
        bound = {c.inputs["spec"]["policyName"] for c in children if c.type == VAPB}
        assert bound == set(made)


def test_a_team_trainjobs_pod_carries_what_the_admitted_v1_pod_carries(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The pod JobSet makes for a team's TrainJob (Trainer v2 is not run on the local control
    plane) is the runtime's template with the job's patch: it names the ServiceAccount
    ``jobs``, and the container security context and volumes the patch gives it are those of
    the v1 worker pod that ``tests/controlplane/test_team_namespace.py`` has the API server
    admit under the pod policy; the runtime's template adds no host namespace, host path,
    privilege or capability."""
    import shutil
    from pathlib import Path

    import yaml

    from infra.config import sources
    from jobs.build import build
    from jobs.cluster import trainjob as tjobs
    from jobs.schema import load
    from workloads.specs import trainjob as tj

    repo = Path(__file__).resolve().parents[2]
    root = Path(tmp_path) / "root"
    root.mkdir()
    shutil.copy(repo / "Pulumi.yaml", root / "Pulumi.yaml")
    data = yaml.safe_load((repo / "Pulumi.p4de-odcr.yaml").read_text())
    data["config"]["eks-fsdp:teams"] = TEAMS
    (root / "Pulumi.p4de-odcr.yaml").write_text(yaml.safe_dump(data))
    monkeypatch.setattr(sources, "REPO_ROOT", root)
    path = str(repo / "jobs" / "examples" / "p4de-odcr.yaml")
    sets = ["team=nlp", "minWorkers=2", "workers=2"]
    v2, v1 = load(path, sets=[*sets, "api=v2"]), load(path, sets=sets)
    settings = build(v2, image="registry/training:1").job
    (patch,) = tjobs.templates(tjobs.body(v2, settings))
    v1_job = pytorchjob.pytorchjob(build(v1, image="registry/training:1").job, "etcd")
    v1_pod = v1_job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]
    assert patch["spec"]["serviceAccountName"] == pytorchjob.SERVICE_ACCOUNT
    assert v1_pod["automountServiceAccountToken"] is False  # the pod policy refuses true
    assert patch["spec"].get("automountServiceAccountToken") is not True
    (container,) = patch["spec"]["containers"]
    assert container["securityContext"] == v1_pod["containers"][0]["securityContext"]
    assert container["securityContext"]["capabilities"]["add"] == ["IPC_LOCK"]
    assert patch["spec"]["volumes"] == v1_pod["volumes"]
    assert not any("hostPath" in v for v in patch["spec"]["volumes"])
    runtime = tj.cluster_training_runtime()
    text = yaml.safe_dump(runtime)
    for word in ("hostNetwork", "hostPID", "hostIPC", "hostPath", "privileged", "capabilities"):
        assert word not in text, word
