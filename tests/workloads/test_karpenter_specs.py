"""Karpenter's objects for a GPU pool: valid for the pinned CRDs, and the same nodes to a job.

If these fail, a pool switched to ``provisioner: karpenter`` would render a NodePool or an
EC2NodeClass the API server of the pinned release refuses (or silently prunes: the check is
strict, ``workloads.specs.validate.strict_schema``, against ``pkg/apis/crds`` of
aws/karpenter-provider-aws at ``versions.KARPENTER_VERSION``), or Karpenter's nodes would differ
from the managed group's for a job: other labels (its nodeSelector and Kueue's flavor would not
match), another taint (its toleration would not), fewer EFA devices than the job requests
(its pods would stay Pending), the EC2 guide's EFA layout lost to Karpenter's own (``efa``
interfaces on every card, ``pkg/providers/launchtemplate/launchtemplate.go``), or a disruption
setting that drains a node in the middle of a run.

Nothing is mocked: the objects are pure dicts, the job is the one ``eks-fsdp jobs submit``
builds.
"""

from __future__ import annotations

import copy
import dataclasses
from typing import Any

import pytest
import yaml

from infra import versions
from infra.config import parse
from infra.config.nodegroups import node_labels
from infra.gpu_nodegroup import efa_network_interfaces
from infra.instances import CATALOG
from jobs.build import build
from tests.pulumi_mocks import stack_config
from tests.workloads.conftest import STACKS, job_stack
from workloads.specs import karpenter as k
from workloads.specs import pytorchjob
from workloads.specs.validate import ValidationError


def karpenter_raw(stack: str) -> dict[str, Any]:
    """``stack``'s config with every GPU pool switched to Karpenter (minSize 0)."""
    raw = copy.deepcopy(stack_config(stack))
    raw["gpuNodeGroups"] = [
        {**g, "provisioner": "karpenter", "minSize": 0} for g in raw["gpuNodeGroups"]
    ]
    return raw


def karpenter_groups(stack: str) -> tuple[Any, ...]:
    return parse(karpenter_raw(stack), stack=stack).gpu_node_groups


@pytest.mark.parametrize("stack", STACKS)
def test_every_pool_renders_objects_the_pinned_crds_accept(stack: str) -> None:
    cfg = parse(karpenter_raw(stack), stack=stack)
    objs = k.stack_objects(cfg)  # validates each
    assert [o["kind"] for o in objs] == ["EC2NodeClass", "NodePool"] * len(cfg.gpu_node_groups)
    for group in cfg.gpu_node_groups:
        nodeclass, nodepool = k.pool_objects(group, cfg.cluster_name)
        assert nodeclass["spec"]["amiSelectorTerms"] == [
            {"alias": versions.KARPENTER_AL2023_AMI_ALIAS}
        ]
        assert not versions.KARPENTER_AL2023_AMI_ALIAS.endswith("@latest")
        assert (
            nodepool["spec"]["template"]["spec"]["nodeClassRef"]["name"]
            == (nodeclass["metadata"]["name"])
        )


def test_the_validation_is_strict_and_reads_the_crd() -> None:
    """An unknown field, a value outside an enum, a pattern mismatch: each names its field."""
    group = karpenter_groups("p4de-odcr")[0]
    nodeclass, nodepool = k.ec2nodeclass(group, "c"), k.nodepool(group)
    bad_field = copy.deepcopy(nodepool)
    bad_field["spec"]["disruption"]["consolidateWhen"] = "Never"
    with pytest.raises(ValidationError, match=r"NodePool/p4de-odcr: spec.disruption:.*"):
        k.validate(bad_field)
    bad_enum = copy.deepcopy(nodepool)
    bad_enum["spec"]["disruption"]["consolidationPolicy"] = "WhenIdle"
    with pytest.raises(ValidationError, match="consolidationPolicy"):
        k.validate(bad_enum)
    bad_pattern = copy.deepcopy(nodeclass)
    bad_pattern["spec"]["capacityReservationSelectorTerms"] = [{"id": "odcr-1"}]
    with pytest.raises(ValidationError, match=r"capacityReservationSelectorTerms\.0\.id"):
        k.validate(bad_pattern)
    scoped = copy.deepcopy(nodepool)
    scoped["metadata"]["namespace"] = "default"
    with pytest.raises(ValidationError, match=r"metadata\.namespace must be absent"):
        k.validate(scoped)


@pytest.mark.parametrize("stack", STACKS)
def test_labels_and_taint_are_the_managed_groups(stack: str) -> None:
    for group in karpenter_groups(stack):
        template = k.nodepool(group)["spec"]["template"]
        assert template["metadata"]["labels"] == node_labels(group)
        assert template["spec"]["taints"] == [
            {"key": group.taint.key, "value": group.taint.value, "effect": group.taint.effect}
        ]
        reqs = {r["key"]: r["values"] for r in template["spec"]["requirements"]}
        assert reqs[k.INSTANCE_TYPE_LABEL] == [group.instance_type]
        assert reqs[k.CAPACITY_TYPE_LABEL] == list(group.karpenter_capacity_types)
        if group.availability_zone is not None:
            assert reqs[k.ZONE_LABEL] == [group.availability_zone]
        # at most maxSize nodes: the limit counts GPUs
        gpus = int(k.nodepool(group)["spec"]["limits"]["nvidia.com/gpu"])
        assert gpus == group.max_size * group.instance.gpus


@pytest.mark.parametrize("name", sorted(n for n, t in CATALOG.items() if t.efa_supported))
def test_efa_interfaces_are_the_managed_groups_layout(name: str) -> None:
    instance = CATALOG[name]
    managed = [
        (n["network_card_index"], n["device_index"], n["interface_type"])
        for n in efa_network_interfaces(instance, ["sg-1"])
    ]
    ours = [
        (n["networkCardIndex"], n["deviceIndex"], n["interfaceType"])
        for n in k.efa_interfaces(instance)
    ]
    assert ours == managed
    # the EFA devices a node offers: one per efa-only interface (the ENA primary is not one)
    assert sum(t == "efa-only" for *_, t in ours) == instance.efa_interfaces


def test_reservations_and_placement() -> None:
    (p4de,) = karpenter_groups("p4de-odcr")
    nodeclass = k.ec2nodeclass(p4de, "eks-fsdp-p4de")
    assert nodeclass["spec"]["capacityReservationSelectorTerms"] == [
        {"id": p4de.capacity_reservation_id}
    ]
    assert p4de.karpenter_capacity_types == ("reserved",)
    assert "placementGroupSelector" not in nodeclass["spec"]  # placementGroup: none
    assert nodeclass["spec"]["subnetSelectorTerms"] == [
        {"tags": {"Name": f"eks-fsdp-p4de-private-{p4de.availability_zone}"}}
    ]
    assert {"tags": {"Name": "eks-fsdp-p4de-efa"}} in nodeclass["spec"][
        "securityGroupSelectorTerms"
    ]
    # an on-demand EFA pool gets the cluster placement group the stack creates for it
    raw = karpenter_raw("p4de-odcr")
    group = {**raw["gpuNodeGroups"][0], "placementGroup": "create"}
    del group["capacityReservationId"]
    raw["gpuNodeGroups"] = [group]
    (od,) = parse(raw, stack="p4de-odcr").gpu_node_groups
    spec = k.ec2nodeclass(od, "eks-fsdp-p4de")["spec"]
    assert spec["placementGroupSelector"] == {"name": f"eks-fsdp-p4de-{od.name}"}
    assert "capacityReservationSelectorTerms" not in spec
    assert od.karpenter_capacity_types == ("on-demand",)


def test_disruption_never_drains_a_busy_node() -> None:
    for stack in STACKS:
        for group in karpenter_groups(stack):
            spec = k.nodepool(group)["spec"]
            assert spec["disruption"]["consolidationPolicy"] == "WhenEmpty"
            assert spec["template"]["spec"]["expireAfter"] == "Never"
            drift = [b for b in spec["disruption"]["budgets"] if "Drifted" in b["reasons"]]
            assert drift == [{"nodes": "0", "reasons": ["Drifted"]}]


def test_the_metadata_options_and_root_volume_are_the_managed_groups() -> None:
    from infra import gpu_nodegroup

    (group,) = karpenter_groups("p4de-odcr")
    spec = k.ec2nodeclass(group, "c")["spec"]
    assert spec["metadataOptions"]["httpPutResponseHopLimit"] == gpu_nodegroup.IMDS_HOP_LIMIT
    assert spec["metadataOptions"]["httpTokens"] == "required"
    (root,) = spec["blockDeviceMappings"]
    assert root["deviceName"] == gpu_nodegroup.ROOT_DEVICE
    assert root["ebs"] == {
        "volumeSize": f"{group.root_volume_gib}Gi",
        "volumeType": "gp3",
        "encrypted": True,
        "deleteOnTermination": True,
    }


def _worker(spec: Any) -> dict[str, Any]:
    w = build(spec)  # the job's own image (or the local build's), as ``submit`` names it
    job = pytorchjob.pytorchjob(w.job, w.etcd.host)
    return job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]  # type: ignore[no-any-return]


def _tolerates(tolerations: list[dict[str, Any]], taint: dict[str, str]) -> bool:
    for t in tolerations:
        if t.get("effect") not in (None, "", taint["effect"]):
            continue
        if t.get("operator") == "Exists" and t.get("key") in (None, taint["key"]):
            return True
        if t.get("key") == taint["key"] and t.get("value") == taint["value"]:
            return True
    return False


@pytest.mark.parametrize("stack", ("p4de-odcr", "p5-16"))
def test_the_same_job_runs_on_either_provisioner(stack: str) -> None:
    managed_spec = job_stack(stack)
    karpenter_cfg = dataclasses.replace(
        managed_spec.platform, gpu_node_groups=karpenter_groups(stack)
    )
    karpenter_spec = dataclasses.replace(managed_spec, platform=karpenter_cfg)
    assert all(g.uses_karpenter for g in karpenter_cfg.gpu_node_groups)
    managed, ours = _worker(managed_spec), _worker(karpenter_spec)
    assert ours == managed  # one job file, one pod spec

    assert karpenter_spec.platform is karpenter_cfg  # the example job runs on the pools
    group = karpenter_spec.group
    assert group.uses_karpenter
    nodeclass, nodepool = k.ec2nodeclass(group, karpenter_cfg.cluster_name), k.nodepool(group)
    labels = nodepool["spec"]["template"]["metadata"]["labels"]
    assert ours["nodeSelector"].items() <= labels.items()
    for taint in nodepool["spec"]["template"]["spec"]["taints"]:
        assert _tolerates(ours["tolerations"], taint), taint
    (container,) = [c for c in ours["containers"] if c["name"] == "pytorch"]
    requests = container["resources"]["requests"]
    assert int(requests["nvidia.com/gpu"]) == group.instance.gpus
    if group.efa:
        efa_only = [
            n for n in nodeclass["spec"]["networkInterfaces"] if n["interfaceType"] == "efa-only"
        ]
        assert int(requests["vpc.amazonaws.com/efa"]) == len(efa_only)
    else:
        assert "vpc.amazonaws.com/efa" not in requests


def test_render_writes_the_pools_objects(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """``eks-fsdp render`` on a stack with a Karpenter pool writes ``karpenter.yaml``
    (the stack file is the shipped p4de-odcr one with its pool switched, as a user's would be);
    a stack without one writes none."""
    from workloads import render

    image = "123456789012.dkr.ecr.us-east-1.amazonaws.com/eks-fsdp:karpenter-test"
    plain = render.render("p4de-odcr", tmp_path / "plain", image=image)
    assert "karpenter.yaml" not in {p.name for p in plain}

    spec = render.load_job("p4de-odcr")
    cfg = dataclasses.replace(spec.platform, gpu_node_groups=karpenter_groups("p4de-odcr"))
    spec = dataclasses.replace(spec, platform=cfg)
    monkeypatch.setattr(render, "load_job", lambda stack, job=None: spec)
    written = render.render("p4de-odcr", tmp_path / "k", image=image)
    (path,) = [p for p in written if p.name == "karpenter.yaml"]
    objs = list(yaml.safe_load_all(path.read_text()))
    assert objs == k.stack_objects(cfg)
    assert [o["kind"] for o in objs] == ["EC2NodeClass", "NodePool"]
    # the other files are the managed stack's, byte for byte
    for p in plain:
        assert (tmp_path / "k" / p.relative_to(tmp_path / "plain")).read_bytes() == p.read_bytes()
