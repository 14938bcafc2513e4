"""The Pulumi program on a stack with two teams: Kueue, its queues, and each team's share.

Runs the real ``__main__.py`` for the p5-16 stack plus a ``teams`` key under Pulumi's mocks
(no engine, no AWS, no cluster here: the mocks echo inputs, ``tests/pulumi_mocks.py``). If
this fails, ``pulumi up`` would install Kueue unpinned or off the cluster's provider, create
queues that do not match the builders (quotas that are not the pool's GPUs), or give a team's
people access that does not reach their namespace's Role (an access entry whose Kubernetes
group no RoleBinding names, a view policy scoped to the whole cluster), or LocalQueues in a
namespace not yet created or pointing at a ClusterQueue that does not exist.
"""

from __future__ import annotations

from typing import Any

import pytest

from infra import versions
from infra.config import parse, pool_gpus, project_defaults, stack_file_values
from tests.pulumi_mocks import USER_SET, ProgramRun, RecordedResource, run_program
from workloads.kueue import OUTPUT_CLUSTER_QUEUES, OUTPUT_TEAM_NAMESPACES
from workloads.specs import kueue, teams

ARN = "arn:aws:iam::123456789012:role/{}"
TEAMS = [
    {"name": "nlp", "principalArns": [ARN.format("nlp")], "quota": {"p5-block": 48}},
    {
        "name": "vision",
        "principalArns": [ARN.format("vision"), "arn:aws:iam::123456789012:user/alice"],
        "defaultPriority": "production",
    },
]
SECRETS = {"hfToken": "hf_mock", "grafanaAdminPassword": "mock-password"}
KUEUE_TYPE = "eks-fsdp:workloads:Kueue"
TEAM_TYPE = "eks-fsdp:workloads:Team"


@pytest.fixture(scope="module")
def run() -> ProgramRun:
    return run_program("p5-16", overrides={"teams": TEAMS}, secrets=SECRETS)


@pytest.fixture(scope="module")
def cfg() -> Any:
    raw = {**project_defaults(), **USER_SET, **stack_file_values("p5-16"), "teams": TEAMS}
    return parse(raw, stack="p5-16")


def kueue_objects(run: ProgramRun, kind: str) -> list[RecordedResource]:
    return [r for r in run.resources if r.type == f"kubernetes:{kueue.API_VERSION}:{kind}"]


def test_kueue_is_the_pinned_chart_on_the_cluster_provider(run: ProgramRun) -> None:
    (comp,) = [r for r in run.resources if r.type == KUEUE_TYPE]
    provider = run.one("pulumi:providers:kubernetes", "cluster-k8s")
    (release,) = [r for r in run.children_of(comp) if r.type == "kubernetes:helm.sh/v3:Release"]
    assert release.inputs["chart"] == versions.KUEUE_CHART
    assert release.inputs["version"] == versions.KUEUE_CHART_VERSION
    assert release.inputs["namespace"] == kueue.NAMESPACE
    assert release.inputs["values"] == kueue.chart_values()
    assert release.provider.startswith(provider.urn + "::")
    for r in run.children_of(comp):
        assert r.name.startswith("kueue-") and r.provider.startswith(provider.urn + "::")
        if r is not release:
            assert release.urn in r.dependencies  # created once Kueue's CRDs exist


def test_queues_are_the_builders_and_add_up_to_the_pool(run: ProgramRun, cfg: Any) -> None:
    def key(obj: dict[str, Any]) -> tuple[str, str, str]:
        meta = obj["metadata"]
        return obj["kind"], meta.get("namespace", ""), meta["name"]

    registered = {key(r.inputs): r.inputs for kind in kueue.KINDS for r in kueue_objects(run, kind)}
    expected = kueue.cluster_objects(cfg) + [
        o for t in cfg.teams for o in teams.objects(t, cfg) if kueue.is_kueue(o)
    ]
    assert len(registered) == len(expected)
    for obj in expected:
        assert registered[key(obj)] == obj
    (group,) = cfg.gpu_node_groups
    gpus = 0
    for cq in kueue_objects(run, "ClusterQueue"):
        (flavor,) = cq.inputs["spec"]["resourceGroups"][0]["flavors"]
        assert flavor["name"] == group.name
        gpus += int({r["name"]: r["nominalQuota"] for r in flavor["resources"]}[kueue.GPU])
    assert gpus == pool_gpus(group) == 128
    assert sorted(run.outputs[OUTPUT_CLUSTER_QUEUES]) == [
        "nlp-p5-block",
        "p5-block",
        "vision-p5-block",
    ]


def test_each_team_has_its_namespace_queue_role_and_access(run: ProgramRun, cfg: Any) -> None:
    comps = {r.name: r for r in run.resources if r.type == TEAM_TYPE}
    assert set(comps) == {"team-nlp", "team-vision"}
    (kueue_comp,) = [r for r in run.resources if r.type == KUEUE_TYPE]
    cluster_queues = {
        r.inputs["metadata"]["name"]: r.inputs for r in kueue_objects(run, "ClusterQueue")
    }
    eks = run.one("eks:index:Cluster")
    assert run.outputs[OUTPUT_TEAM_NAMESPACES] == {"nlp": "nlp", "vision": "vision"}
    for team in cfg.teams:
        comp = comps[f"team-{team.name}"]
        # depending on the component means on its children: the chart's Release among them
        kueue_children = {c.urn for c in run.children_of(kueue_comp)}
        assert kueue_children and kueue_children <= set(comp.dependencies)
        children = run.children_of(comp)
        assert all(c.name.startswith(f"{comp.name}-") for c in children)
        (ns,) = [c for c in children if c.type == "kubernetes:core/v1:Namespace"]
        assert ns.inputs["metadata"]["name"] == team.namespace
        (lq,) = [c for c in children if c.type == f"kubernetes:{kueue.API_VERSION}:LocalQueue"]
        assert lq.inputs["metadata"]["namespace"] == team.namespace
        assert ns.urn in lq.dependencies
        cq = cluster_queues[lq.inputs["spec"]["clusterQueue"]]
        selector = cq["spec"]["namespaceSelector"]["matchLabels"]
        assert selector == {"kubernetes.io/metadata.name": team.namespace}
        bindings = [
            c for c in children if c.type == "kubernetes:rbac.authorization.k8s.io/v1:RoleBinding"
        ]
        (binding,) = [b for b in bindings if b.inputs["metadata"]["namespace"] == team.namespace]
        roles = [c for c in children if c.type == "kubernetes:rbac.authorization.k8s.io/v1:Role"]
        # with observability, read access to the cluster's Prometheus for `jobs status`, made
        # once the observability component (its namespace) exists
        metrics = [r for r in roles if r.inputs["metadata"]["namespace"] != team.namespace]
        if cfg.observability.enabled:
            (metrics_role,) = metrics
            assert metrics_role.inputs["rules"] == teams.metrics_role(team)["rules"]
            (obs,) = run.of_type("eks-fsdp:workloads:Observability")
            obs_children = {c.urn for c in run.children_of(obs)}
            assert obs_children and obs_children <= set(metrics_role.dependencies)
        else:
            assert not metrics
        (role,) = [r for r in roles if r.inputs["metadata"]["namespace"] == team.namespace]
        assert binding.inputs["roleRef"]["name"] == role.inputs["metadata"]["name"]
        assert role.inputs["metadata"]["namespace"] == team.namespace
        (subject,) = binding.inputs["subjects"]
        entries = [c for c in children if c.type == "aws:eks/accessEntry:AccessEntry"]
        assert sorted(e.inputs["principalArn"] for e in entries) == sorted(team.principal_arns)
        for entry in entries:
            assert entry.inputs["kubernetesGroups"] == [subject["name"]]
            assert entry.inputs["type"] == "STANDARD"
            assert entry.inputs["clusterName"] == cfg.cluster_name
            # created once the control plane exists (its name is derived from it)
            assert eks.urn in entry.property_dependencies["clusterName"]
        associations = [
            c
            for c in children
            if c.type == "aws:eks/accessPolicyAssociation:AccessPolicyAssociation"
        ]
        assert len(associations) == len(entries)
        for assoc in associations:
            assert assoc.inputs["policyArn"] == teams.VIEW_POLICY_ARN
            assert assoc.inputs["accessScope"] == {
                "type": "namespace",
                "namespaces": [team.namespace],
            }
            assert assoc.inputs["principalArn"] in team.principal_arns


def test_a_stack_without_teams_queues_into_the_jobs_namespace() -> None:
    run = run_program("dev", secrets=SECRETS)
    assert not [r for r in run.resources if r.type == TEAM_TYPE]
    (lq,) = kueue_objects(run, "LocalQueue")
    assert lq.inputs["metadata"]["namespace"] == "default"
    assert run.outputs[OUTPUT_TEAM_NAMESPACES] == {}
