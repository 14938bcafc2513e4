"""Karpenter's objects for a GPU pool with ``provisioner: karpenter``, as plain dicts.

Per pool an ``EC2NodeClass`` (how a node is launched) and a ``NodePool`` (which nodes, with
which labels and taints, and when they go away), plus the values of the controller's chart.
The objects are checked against the CRDs of the pinned release (``versions.KARPENTER_VERSION``;
``workloads/manifests/karpenter/crds`` is ``pkg/apis/crds`` of aws/karpenter-provider-aws at the
tag), strictly: a field the CRD lacks fails here rather than being pruned by the API server.

A Karpenter pool's nodes look to a job exactly like the managed group's: the same labels
(``infra.config.nodegroups.node_labels``), the same taint (the group's ``taint``), the same AMI
family (the EKS-optimized AL2023 NVIDIA variant) and, with EFA, the same interface layout
(``efa_interfaces``: the managed group's ``infra.gpu_nodegroup.efa_network_interfaces``), so
the job's ``vpc.amazonaws.com/efa`` request is the node's allocatable in both cases.

EFA: the pinned Karpenter attaches EFA interfaces by itself when a pod requests
``vpc.amazonaws.com/efa``, but as one ``efa`` (EFA+ENA) interface per network card
(``pkg/providers/launchtemplate/launchtemplate.go`` ``generateNetworkInterfaces``,
``EFACount`` branch), not the EC2 guide's layout (ENA primary, ``efa-only`` elsewhere). With
``spec.networkInterfaces`` set it launches exactly the listed interfaces (the branch before it),
so the pool lists them.

Nothing here imports Pulumi; ``infra.karpenter`` and ``infra.karpenter_pool`` apply these.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from infra import versions
from infra.config.nodegroups import (
    KARPENTER_NODE_ROLE_PREFIX,
    MAX_IAM_ROLE_NAME,
    PLACEMENT_NONE,
    GpuNodeGroupConfig,
    node_labels,
)
from infra.instances import InstanceType
from workloads.specs.common import K8sObject

NODEPOOL_API_VERSION = "karpenter.sh/v1"
NODECLASS_API_VERSION = "karpenter.k8s.aws/v1"
NODECLASS_GROUP = "karpenter.k8s.aws"
KINDS = ("NodePool", "EC2NodeClass")
CRD_DIR = Path(__file__).resolve().parents[1] / "manifests" / "karpenter" / "crds"
_CRD_FILES = {
    "NodePool": "karpenter.sh_nodepools.yaml",
    "EC2NodeClass": "karpenter.k8s.aws_ec2nodeclasses.yaml",
}
SERVICE_ACCOUNT = "karpenter"
"""The chart's ServiceAccount (its fullname, ``karpenter``, with the release named so)."""
CAPACITY_TYPE_LABEL = "karpenter.sh/capacity-type"
ZONE_LABEL = "topology.kubernetes.io/zone"
INSTANCE_TYPE_LABEL = "node.kubernetes.io/instance-type"
ROOT_DEVICE = "/dev/xvda"
"""Root device of the AL2023 EKS AMIs (as ``infra.gpu_nodegroup.ROOT_DEVICE``)."""
IMDS_HOP_LIMIT = 1
"""As the managed GPU groups (``infra.gpu_nodegroup.IMDS_HOP_LIMIT``): pods get no IMDS token."""
CONSOLIDATE_AFTER = "10m"
"""How long an empty node waits before Karpenter removes it: long enough for a restarted job's
pods (the operator recreates them within seconds) to land on it again, short enough that an idle
pool costs little between jobs."""
EXPIRE_AFTER = "Never"
"""No node lifetime: expiry is not held back by disruption budgets
(website/content/en/docs/concepts/disruption.md: "NodePool Disruption Budgets do not prevent
Karpenter from terminating expired nodes"; default ``720h``), so a finite value would one day
drain a node in the middle of a training run; reserved capacity is paid for either way."""
DISRUPTION_BUDGETS = (
    {"nodes": "0", "reasons": ["Drifted"]},
    {"nodes": "10%", "reasons": ["Empty"]},
)
"""Voluntary disruption: never replace a drifted node (a new AMI or NodePool change would
otherwise drain a node running a job; roll them between jobs), remove empty nodes 10% at a
time (upstream's default budget). ``WhenEmpty`` consolidation never picks a node with a job pod."""
MAX_ROLE_NAME = MAX_IAM_ROLE_NAME
"""IAM role names are at most 64 characters (IAM API ``CreateRole``, ``RoleName``)."""


def node_role_name(cluster_name: str) -> str:
    """The Karpenter nodes' IAM role, named as upstream's CloudFormation names it
    (``KarpenterNodeRole-${ClusterName}``) so the EC2NodeClass can name it before it exists."""
    return f"{KARPENTER_NODE_ROLE_PREFIX}{cluster_name}"


def interruption_queue_name(cluster_name: str) -> str:
    """The interruption queue (upstream names it ``${ClusterName}``; ours says whose it is)."""
    return f"{cluster_name}-karpenter"


def placement_group_name(cluster_name: str, group: GpuNodeGroupConfig) -> str | None:
    """The placement group a pool's nodes launch into: an existing one by name, the one the
    stack creates for it (``<cluster>-<pool>``), or None."""
    if group.placement_group == PLACEMENT_NONE:
        return None
    if group.existing_placement_group is not None:
        return group.existing_placement_group
    return f"{cluster_name}-{group.name}"


def efa_interfaces(instance: InstanceType) -> list[dict[str, Any]]:
    """``spec.networkInterfaces``: the managed group's layout (EC2 user guide, "Maximize network
    bandwidth on Amazon EC2 instances with multiple network cards"): ENA primary at card 0 /
    device 0, ``efa-only`` at card 0 / device 1 and at device 0 of every other card."""
    if not instance.efa_supported:
        raise ValueError(f"instance: {instance.name} has no EFA interfaces")

    def nic(card: int, device: int, kind: str) -> dict[str, Any]:
        return {"networkCardIndex": card, "deviceIndex": device, "interfaceType": kind}

    nics = [nic(0, 0, "interface"), nic(0, 1, "efa-only")]
    return nics + [nic(card, 0, "efa-only") for card in range(1, instance.efa_interfaces)]


def subnet_selector_terms(cluster_name: str, group: GpuNodeGroupConfig) -> list[dict[str, Any]]:
    """The private subnet of the pool's zone, or every private subnet of the cluster, by the
    tags ``infra.network.Network`` sets (``Name`` ``<cluster>-private-<az>``;
    ``kubernetes.io/role/internal-elb`` on private subnets only)."""
    if group.availability_zone is not None:
        return [{"tags": {"Name": f"{cluster_name}-private-{group.availability_zone}"}}]
    return [
        {
            "tags": {
                f"kubernetes.io/cluster/{cluster_name}": "shared",
                "kubernetes.io/role/internal-elb": "1",
            }
        }
    ]


def security_group_selector_terms(
    cluster_name: str, group: GpuNodeGroupConfig
) -> list[dict[str, Any]]:
    """The EKS cluster security group (EKS tags it ``aws:eks:cluster-name``: EKS user guide,
    "View Amazon EKS security group requirements for clusters"), plus the EFA group
    (``Name`` ``<cluster>-efa``, ``infra.network``) with EFA: as the managed group's interfaces."""
    terms: list[dict[str, Any]] = [{"tags": {"aws:eks:cluster-name": cluster_name}}]
    if group.efa:
        terms.append({"tags": {"Name": f"{cluster_name}-efa"}})
    return terms


def ec2nodeclass(group: GpuNodeGroupConfig, cluster_name: str) -> K8sObject:
    """The pool's EC2NodeClass (cluster-scoped, named as the pool)."""
    spec: dict[str, Any] = {
        "amiSelectorTerms": [{"alias": versions.KARPENTER_AL2023_AMI_ALIAS}],
        "role": node_role_name(cluster_name),
        "subnetSelectorTerms": subnet_selector_terms(cluster_name, group),
        "securityGroupSelectorTerms": security_group_selector_terms(cluster_name, group),
        "blockDeviceMappings": [
            {
                "deviceName": ROOT_DEVICE,
                "rootVolume": True,
                "ebs": {
                    "volumeSize": f"{group.root_volume_gib}Gi",
                    "volumeType": "gp3",
                    "encrypted": True,
                    "deleteOnTermination": True,
                },
            }
        ],
        "metadataOptions": {
            "httpEndpoint": "enabled",
            "httpProtocolIPv6": "disabled",
            "httpPutResponseHopLimit": IMDS_HOP_LIMIT,
            "httpTokens": "required",
        },
        "tags": {"eks-fsdp/nodegroup": group.name},
    }
    if group.capacity_reservation_id is not None:
        # ODCRs and Capacity Blocks alike (tasks/odcrs.md: "Capacity blocks are modeled as
        # on-demand capacity reservations in EC2 ... specify them in the same way").
        spec["capacityReservationSelectorTerms"] = [{"id": group.capacity_reservation_id}]
    if group.efa:
        spec["networkInterfaces"] = efa_interfaces(group.instance)
    pg = placement_group_name(cluster_name, group)
    if pg is not None:
        spec["placementGroupSelector"] = {"name": pg}
    return {
        "apiVersion": NODECLASS_API_VERSION,
        "kind": "EC2NodeClass",
        "metadata": {"name": group.name},
        "spec": spec,
    }


def requirements(group: GpuNodeGroupConfig) -> list[dict[str, Any]]:
    """Instance type, capacity types (in preference order) and zone of the pool's nodes."""
    reqs = [
        {"key": INSTANCE_TYPE_LABEL, "operator": "In", "values": [group.instance_type]},
        {
            "key": CAPACITY_TYPE_LABEL,
            "operator": "In",
            "values": list(group.karpenter_capacity_types),
        },
    ]
    if group.availability_zone is not None:
        reqs.append({"key": ZONE_LABEL, "operator": "In", "values": [group.availability_zone]})
    return reqs


def nodepool(group: GpuNodeGroupConfig) -> K8sObject:
    """The pool's NodePool: the managed group's labels and taint, at most ``maxSize`` nodes
    (as GPUs: ``limits`` count resources), removed only when empty."""
    if not group.uses_karpenter:
        raise ValueError(f"group: {group.name} is provisioned by {group.provisioner}")
    return {
        "apiVersion": NODEPOOL_API_VERSION,
        "kind": "NodePool",
        "metadata": {"name": group.name},
        "spec": {
            "template": {
                "metadata": {"labels": node_labels(group)},
                "spec": {
                    "nodeClassRef": {
                        "group": NODECLASS_GROUP,
                        "kind": "EC2NodeClass",
                        "name": group.name,
                    },
                    "requirements": requirements(group),
                    "taints": [
                        {
                            "key": group.taint.key,
                            "value": group.taint.value,
                            "effect": group.taint.effect,
                        }
                    ],
                    "expireAfter": EXPIRE_AFTER,
                },
            },
            "limits": {"nvidia.com/gpu": str(group.max_size * group.instance.gpus)},
            "disruption": {
                "consolidationPolicy": "WhenEmpty",
                "consolidateAfter": CONSOLIDATE_AFTER,
                "budgets": [dict(b) for b in DISRUPTION_BUDGETS],
            },
        },
    }


def pool_objects(group: GpuNodeGroupConfig, cluster_name: str) -> list[K8sObject]:
    """The EC2NodeClass and the NodePool of one Karpenter pool, validated."""
    objs = [ec2nodeclass(group, cluster_name), nodepool(group)]
    for obj in objs:
        validate(obj)
    return objs


def stack_objects(stack_cfg: Any) -> list[K8sObject]:
    """Every Karpenter pool's objects of a stack (empty without one)."""
    return [
        obj
        for group in stack_cfg.gpu_node_groups
        if group.uses_karpenter
        for obj in pool_objects(group, stack_cfg.cluster_name)
    ]


def controller_values(
    *,
    cluster_name: str,
    region: str,
    interruption_queue: str,
    role_arn: str,
    node_selector: dict[str, str],
    replicas: int,
    node_repair: bool,
) -> dict[str, Any]:
    """Values of the pinned chart (``charts/karpenter/values.yaml`` at the tag): the settings
    upstream's getting-started sets (``settings.clusterName``, ``settings.interruptionQueue``,
    1 CPU / 1 GiB for the controller), the IRSA role on the ServiceAccount, the controller on
    the system node group (the chart's own affinity already keeps it off Karpenter's nodes:
    ``karpenter.sh/nodepool DoesNotExist``), the NodeRepair gate (alpha, off upstream), and
    ``AWS_REGION``: without it the controller asks IMDS for the region
    (``pkg/operator/operator.go`` at the tag, "retrieving region from IMDS") and exits when it
    cannot, which a pod on the system nodes cannot (IMDS hop limit 1, ``infra.cluster``)."""
    if replicas < 1:
        raise ValueError(f"replicas: {replicas} (at least one controller)")
    resources = {"cpu": "1", "memory": "1Gi"}
    return {
        "settings": {
            "clusterName": cluster_name,
            "interruptionQueue": interruption_queue,
            "featureGates": {"nodeRepair": node_repair, "reservedCapacity": True},
        },
        "serviceAccount": {
            "name": SERVICE_ACCOUNT,
            "annotations": {"eks.amazonaws.com/role-arn": role_arn},
        },
        "replicas": replicas,
        "nodeSelector": {"kubernetes.io/os": "linux", **node_selector},
        "controller": {
            "env": [{"name": "AWS_REGION", "value": region}],
            "resources": {"requests": resources, "limits": resources},
        },
    }


def karpenter_pools(groups: Sequence[GpuNodeGroupConfig]) -> list[GpuNodeGroupConfig]:
    """The pools Karpenter provisions."""
    return [g for g in groups if g.uses_karpenter]


@functools.cache
def crd(kind: str) -> dict[str, Any]:
    """The vendored CRD of ``kind`` (``NodePool`` or ``EC2NodeClass``)."""
    return yaml.safe_load((CRD_DIR / _CRD_FILES[kind]).read_text())  # type: ignore[no-any-return]


@functools.cache
def _validator(kind: str) -> Any:
    from workloads.specs.validate import crd_validator

    return crd_validator(crd(kind), "v1")


def validate(obj: K8sObject) -> None:
    """Check a NodePool or EC2NodeClass against its CRD at the pin (``ValidationError`` naming
    the object and the field)."""
    from workloads.specs.validate import validate_custom

    api = NODEPOOL_API_VERSION if obj.get("kind") == "NodePool" else NODECLASS_API_VERSION
    validate_custom(obj, api_version=api, kinds=KINDS, crd=crd, validator=_validator)
