"""Kueue's objects and a team's objects, as the builders make them, against Kueue's CRDs at the pin.

If this fails, the cluster stack would create queues that Kueue's API server rejects (a field
its v0.17.0 CRDs do not have: the API server would prune it silently, or refuse the object),
quotas that do not add up to the GPU pools (jobs admitted onto nodes that do not exist, or
nodes no queue can use), LocalQueues pointing at ClusterQueues that do not admit their
namespace, or a Role that does not let a team run its jobs. The vendored CRDs are checked
byte for byte against the Kueue module at ``KUEUE_VERSION`` when Go's module cache has it
(the control plane's build downloads it); the Configuration's keys and the chart values
against the same module's Go types and chart.
"""

from __future__ import annotations

import copy
import os
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from infra import versions
from infra.config import parse, pool_gpus, project_defaults, stack_file_values
from infra.config.nodegroups import node_labels
from workloads.specs import kueue, teams
from workloads.specs.pytorchjob import worker_requests
from workloads.specs.validate import ValidationError, validate

ARN = "arn:aws:iam::123456789012:role/{}"
TWO_TEAMS = [
    {"name": "nlp", "principalArns": [ARN.format("nlp")], "quota": {"p5-block": 48}},
    {"name": "vision", "principalArns": [ARN.format("vision")]},
]
STACKS = ("dev", "p4de-odcr", "p5-16")


def stack(name: str, **overrides: Any) -> Any:
    return parse({**project_defaults(), **stack_file_values(name), **overrides}, stack=name)


def _gpus(cq: dict[str, Any], resource: str = kueue.GPU) -> str:
    (group,) = cq["spec"]["resourceGroups"]
    (flavor,) = group["flavors"]
    return {r["name"]: r["nominalQuota"] for r in flavor["resources"]}[resource]


@pytest.mark.parametrize("name", STACKS)
def test_every_stacks_queues_match_the_crds_and_the_pools(name: str) -> None:
    cfg = stack(name)
    objs = kueue.cluster_objects(cfg)
    for obj in objs:
        kueue.validate(obj)
    by_kind: dict[str, list[dict[str, Any]]] = {}
    for obj in objs:
        by_kind.setdefault(obj["kind"], []).append(obj)
    for group in cfg.gpu_node_groups:
        (flavor,) = [f for f in by_kind["ResourceFlavor"] if f["metadata"]["name"] == group.name]
        assert flavor["spec"]["nodeLabels"] == node_labels(group)
        assert flavor["spec"]["tolerations"] == [group.taint.toleration()]
        assert ("topologyName" in flavor["spec"]) == group.efa
        (cq,) = [q for q in by_kind["ClusterQueue"] if q["metadata"]["name"] == group.name]
        assert int(_gpus(cq)) == pool_gpus(group)  # no teams: the pool's queue holds it all
        per_node = worker_requests(group.instance_type)
        assert _gpus(cq, "cpu") == str(int(per_node["cpu"]) * group.max_size)
        if group.efa:
            efa = group.instance.efa_interfaces * group.max_size
            assert _gpus(cq, kueue.EFA) == str(efa)
    assert {p["metadata"]["name"]: p["value"] for p in by_kind["WorkloadPriorityClass"]} == {
        "production": 1000,
        "experiment": 100,
    }
    efa = any(g.efa for g in cfg.gpu_node_groups)
    assert len(by_kind.get("Topology", [])) == efa
    if efa:
        levels = [lv["nodeLabel"] for lv in by_kind["Topology"][0]["spec"]["levels"]]
        assert levels[:3] == [f"topology.k8s.aws/network-node-layer-{i}" for i in (1, 2, 3)]


def test_two_teams_quotas_add_up_to_the_pool_and_queues_reference_each_other() -> None:
    cfg = stack("p5-16", teams=TWO_TEAMS)
    (group,) = cfg.gpu_node_groups
    queues = kueue.cluster_objects(cfg)
    team_objs = {t.name: teams.objects(t, cfg) for t in cfg.teams}
    cqs = {q["metadata"]["name"]: q for q in queues if q["kind"] == "ClusterQueue"}
    assert set(cqs) == {"p5-block", "nlp-p5-block", "vision-p5-block"}
    assert {n: int(_gpus(q)) for n, q in cqs.items()} == {
        "p5-block": 0,
        "nlp-p5-block": 48,
        "vision-p5-block": 80,
    }
    assert sum(int(_gpus(q)) for q in cqs.values()) == pool_gpus(group)
    assert sum(int(_gpus(q, kueue.EFA)) for q in cqs.values()) == (
        group.instance.efa_interfaces * group.max_size
    )
    assert {q["spec"]["cohortName"] for q in cqs.values()} == {kueue.COHORT}
    for q in cqs.values():
        assert q["spec"]["preemption"] == {
            "reclaimWithinCohort": "Any",
            "withinClusterQueue": "LowerPriority",
        }
    local_queues = [o for o in queues if o["kind"] == "LocalQueue"]
    for t in cfg.teams:
        local_queues += [o for o in team_objs[t.name] if o["kind"] == "LocalQueue"]
    for lq in local_queues:
        cq = cqs[lq["spec"]["clusterQueue"]]
        ns = lq["metadata"]["namespace"]
        assert cq["spec"]["namespaceSelector"] == {
            "matchLabels": {"kubernetes.io/metadata.name": ns}
        }
        assert lq["metadata"]["name"] == kueue.local_queue_name(group.name)
    assert sorted(lq["metadata"]["namespace"] for lq in local_queues) == [
        "default",
        "nlp",
        "vision",
    ]
    for objs in team_objs.values():
        for obj in objs:
            if kueue.is_kueue(obj):
                kueue.validate(obj)
            else:
                validate(obj, cfg.kubernetes_version)


def test_a_team_may_run_jobs_and_read_pods_in_its_namespace_only() -> None:
    cfg = stack("p5-16", teams=TWO_TEAMS)
    nlp = cfg.teams[0]
    objs = {(o["kind"], o["metadata"]["name"]): o for o in teams.objects(nlp, cfg)}
    role = objs[("Role", teams.ROLE)]
    binding = objs[("RoleBinding", teams.ROLE)]
    assert role["metadata"]["namespace"] == binding["metadata"]["namespace"] == "nlp"
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    assert binding["subjects"] == [
        {"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "eks-fsdp-team-nlp"}
    ]

    def allowed(group: str, resource: str) -> set[str]:
        return {
            v
            for rule in role["rules"]
            if group in rule["apiGroups"] and resource in rule["resources"]
            for v in rule["verbs"]
        }

    for group, resource in (("kubeflow.org", "pytorchjobs"), ("trainer.kubeflow.org", "trainjobs")):
        assert {"create", "watch", "delete"} <= allowed(group, resource)
    for resource in ("pods", "pods/log"):
        assert allowed("", resource) == {"get", "list", "watch"}
    assert not allowed("", "secrets") and not allowed("", "pods") & {"create", "delete"}
    policy = objs[("NetworkPolicy", teams.NETWORK_POLICY)]
    assert policy["spec"]["policyTypes"] == ["Ingress", "Egress"]
    internet = policy["spec"]["egress"][-1]["to"][0]["ipBlock"]
    assert internet["except"] == [cfg.vpc_cidr, cfg.kubernetes_service_cidr]
    sa = objs[("ServiceAccount", teams.SERVICE_ACCOUNT)]
    assert sa["automountServiceAccountToken"] is False


def test_the_validator_is_strict() -> None:
    cfg = stack("p5-16", teams=TWO_TEAMS)
    objs = kueue.cluster_objects(cfg)
    flavor = next(o for o in objs if o["kind"] == "ResourceFlavor")
    cq = next(o for o in objs if o["kind"] == "ClusterQueue")
    typo = copy.deepcopy(flavor)
    typo["spec"]["nodeLabel"] = typo["spec"].pop("nodeLabels")
    with pytest.raises(ValidationError, match=r"'nodeLabel' was unexpected"):
        kueue.validate(typo)
    old_api = copy.deepcopy(cq)
    old_api["spec"]["cohort"] = old_api["spec"].pop("cohortName")  # the v1beta1 field
    with pytest.raises(ValidationError, match=r"'cohort' was unexpected"):
        kueue.validate(old_api)
    bad_quota = copy.deepcopy(cq)
    bad_quota["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]["nominalQuota"] = "8 GPUs"
    with pytest.raises(ValidationError, match=r"nominalQuota"):
        kueue.validate(bad_quota)
    lq = teams.objects(cfg.teams[0], cfg)[-1]
    del lq["metadata"]["namespace"]
    with pytest.raises(ValidationError, match=r"metadata.namespace must be set"):
        kueue.validate(lq)


def test_render_writes_the_queues_on_request(tmp_path: Path) -> None:
    from workloads import render

    image = "123456789012.dkr.ecr.us-east-2.amazonaws.com/eks-fsdp:kueue-test"
    plain = render.render("p5-16", tmp_path / "plain", image=image)
    assert not any("kueue" in p.parts for p in plain)
    assert (
        render.main(["--stack", "p5-16", "--out", str(tmp_path / "q"), "--image", image, "--kueue"])
        == 0
    )
    out = tmp_path / "q" / render.KUEUE_DIR
    assert sorted(p.name for p in out.iterdir()) == ["queues.yaml", "values.yaml"]
    cfg = stack("p5-16")
    assert list(yaml.safe_load_all((out / "queues.yaml").read_text())) == kueue.cluster_objects(cfg)
    assert yaml.safe_load((out / "values.yaml").read_text()) == kueue.chart_values()


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


@pytest.fixture(scope="module")
def module() -> Path:
    path = _kueue_module()
    if path is None:
        pytest.skip(f"sigs.k8s.io/kueue@{versions.KUEUE_VERSION} is not in Go's module cache")
    return path


def test_vendored_crds_are_upstreams_at_the_pin(module: Path) -> None:
    bases = module / "config" / "components" / "crd" / "bases"
    vendored = sorted(kueue.CRD_DIR.glob("*.yaml"))
    assert len(vendored) == len(kueue.KINDS)
    for path in vendored:
        assert path.read_bytes() == (bases / path.name).read_bytes(), path.name


def _json_tags(go_file: Path) -> set[str]:
    return set(re.findall(r'json:"([A-Za-z]+)', go_file.read_text()))


def _keys(value: Any) -> set[str]:
    if isinstance(value, dict):
        return set(value) | {k for v in value.values() for k in _keys(v)}
    return set()


def test_configuration_and_chart_values_are_keys_upstream_reads(module: Path) -> None:
    config = kueue.configuration()
    tags = _json_tags(module / "apis" / "config" / "v1beta2" / "configuration_types.go")
    # groupKindConcurrency's keys are kinds (a map); leaderElection is component-base's type;
    # both are the chart's own, compared below.
    own = {k: v for k, v in config.items() if k not in ("controller", "leaderElection")}
    fields = _keys(own) - {"apiVersion", "kind"}
    assert fields <= tags, fields - tags
    chart = yaml.safe_load((module / "charts" / "kueue" / "values.yaml").read_text())
    values = kueue.chart_values()
    image = chart["controllerManager"]["manager"]["image"]
    assert set(values["controllerManager"]["manager"]["image"]) == set(image)
    assert "nodeSelector" in chart["controllerManager"]
    shipped = yaml.safe_load(chart["managerConfig"]["controllerManagerConfigYaml"])
    ours = yaml.safe_load(values["managerConfig"]["controllerManagerConfigYaml"])
    for key in ("health", "metrics", "webhook", "leaderElection", "controller"):
        assert ours[key] == shipped[key], key  # the chart's defaults kept
    assert set(kueue.FRAMEWORKS) <= set(shipped["integrations"]["frameworks"])
    chart_meta = yaml.safe_load((module / "charts" / "kueue" / "Chart.yaml").read_text())
    assert chart_meta["version"] == versions.KUEUE_CHART_VERSION


def test_a_job_that_stays_not_ready_is_requeued_and_frees_admission(module: Path) -> None:
    """``recoveryTimeout`` is finite: with ``blockAdmission`` a running job that stays not
    ready holds back every ClusterQueue's admission, and a TrainJob that lost a pod stays not
    ready until all its JobSet's replicas are (``trainjob_controller.go`` ``PodsReady`` at the
    pin), so ``"0s"`` (off) would freeze every team behind one stuck job. An elastic v1 job is
    not evicted for training on fewer nodes: Kueue reads a kubeflow.org job as ready from its
    ``Running`` condition (``kubeflowjob_controller.go``), which training-operator v1.9.4 sets
    again once a worker runs. Kueue keeps only a positive value (``pkg/controller/core/
    core.go``) and defaults a missing one to ``timeout`` (``defaults.go``)."""
    cfg = kueue.configuration()["waitForPodsReady"]
    recovery = kueue.KueueSettings().recovery_timeout_s
    assert cfg["recoveryTimeout"] == f"{recovery}s" and recovery > 0
    # longer than admission's timeout: a node group replaces a lost node in that time
    assert recovery > kueue.KueueSettings().pods_ready_timeout_s
    assert cfg["blockAdmission"] is True
    config = module / "apis" / "config" / "v1beta2"
    defaults = (config / "defaults.go").read_text()
    assert re.search(r"RecoveryTimeout = cmp\.Or\(\S*RecoveryTimeout, &\S*\.Timeout\)", defaults)
    core = (module / "pkg" / "controller" / "core" / "core.go").read_text()
    assert "cfg.RecoveryTimeout != nil && cfg.RecoveryTimeout.Duration > 0" in core
    jobs = module / "pkg" / "controller" / "jobs"
    trainjob = (jobs / "trainjob" / "trainjob_controller.go").read_text()
    ready = trainjob[trainjob.index("func (t *TrainJob) PodsReady(") :]
    assert "return replicas == readyReplicas" in ready[: ready.index("\n}\n")]
    v1 = (jobs / "kubeflow" / "kubeflowjob" / "kubeflowjob_controller.go").read_text()
    ready = v1[v1.index("func (j *KubeflowJob) PodsReady(") :]
    assert "c.Type == kftraining.JobRunning" in ready[: ready.index("\n}\n")]
    with pytest.raises(ValueError, match="recovery_timeout_s: must be >= 0"):
        kueue.KueueSettings(recovery_timeout_s=-1)
    later = kueue.configuration(kueue.KueueSettings(recovery_timeout_s=900))
    assert later["waitForPodsReady"]["recoveryTimeout"] == "900s"


TOPOLOGY_TYPES = {
    "p3dn.24xlarge", "p4d.24xlarge", "p4de.24xlarge", "p5.48xlarge", "p5e.48xlarge",
    "p5en.48xlarge", "p6e-gb200.36xlarge", "p6-b200.48xlarge", "p6-b300.48xlarge",
    "g6e.48xlarge", "g7e.48xlarge",
}  # fmt: skip
"""GPU types of the EC2 user guide's "Prerequisites for Amazon EC2 topology" (supported instance
types; g6e and g7e in every size): EKS labels their nodes with the network layers."""


def test_an_efa_pool_gets_the_topology_only_where_eks_labels_its_nodes(module: Path) -> None:
    """A g5.48xlarge pool has EFA, but EC2 describes no topology for the type, so its nodes
    carry no ``network-node-layer-*`` label, and Kueue counts a node for a Topology only when
    it carries every level's label (``NodeMatchesFlavor`` at the pin): with the Topology, its
    jobs would never be admitted."""
    from infra.instances import CATALOG

    assert {n for n, it in CATALOG.items() if it.network_topology} == TOPOLOGY_TYPES & set(CATALOG)
    raw = stack_file_values("p4de-odcr")["gpuNodeGroups"]
    (p4de,) = raw
    g5 = {
        **{k: v for k, v in p4de.items() if k != "capacityReservationId"},
        "name": "g5-efa",
        "instanceType": "g5.48xlarge",
    }
    cfg = stack("p4de-odcr", gpuNodeGroups=[p4de, g5])
    by_name = {g.name: g for g in cfg.gpu_node_groups}
    assert by_name["g5-efa"].efa and by_name["p4de-odcr"].efa
    objs = kueue.cluster_objects(cfg)
    for obj in objs:
        kueue.validate(obj)
    flavors = {o["metadata"]["name"]: o for o in objs if o["kind"] == "ResourceFlavor"}
    assert "topologyName" not in flavors["g5-efa"]["spec"]
    assert flavors["p4de-odcr"]["spec"]["topologyName"] == kueue.TOPOLOGY
    assert kueue.pod_annotations(by_name["g5-efa"]) == {}
    assert kueue.pod_annotations(by_name["p4de-odcr"])
    # the g5 pool's queue still holds its EFA devices, as every EFA pool's does
    (cq,) = [o for o in objs if o["kind"] == "ClusterQueue" and o["metadata"]["name"] == "g5-efa"]
    assert _gpus(cq, kueue.EFA) == str(by_name["g5-efa"].max_size)
    # a stack of g5 EFA pools only has no Topology at all
    only = stack("p4de-odcr", gpuNodeGroups=[g5])
    assert not [o for o in kueue.cluster_objects(only) if o["kind"] == "Topology"]
    node = (module / "pkg" / "util" / "tas" / "node.go").read_text()
    matches = node[node.index("func NodeMatchesFlavor(") :]
    assert "for _, level := range requiredLevels" in matches
    assert "if _, ok := nodeLabels[level]; !ok" in matches
