"""Fake nodes (kwok) shaped like the stacks' node groups, and the kwok stages that run pods.

A GPU node carries what the stack's managed node group gives a real one: the labels
``infra.config.nodegroups.node_labels`` gives the managed node groups, the group's
taint, and the capacity the device plugins advertise (``nvidia.com/gpu`` per the instance
catalog, ``vpc.amazonaws.com/efa`` = its EFA interfaces when the group enables EFA), besides
the instance's vCPUs and memory. kwok keeps a node's ``status.allocatable`` as given, so the
scheduler places pods by these figures. The system node group gets plain CPU nodes.

The nodes of an EFA group also carry the network-topology labels EKS puts on the instance
types that have them (EKS user guide, "Place distributed AI/ML workloads with network topology
labels": ``topology.k8s.aws/network-node-layer-1`` to ``-3``, values like
``nn-e50490a237cb0f01a``): all of a group's nodes under one network node per layer, as the
instances of one cluster placement group or capacity block usually are. Kueue's topology-aware
flavors (``workloads.specs.kueue``: EFA pools) count only nodes that carry every level.

kwok plays each fake node's kubelet through *stages* (``kwok.x-k8s.io/v1alpha1`` ``Stage``,
sigs.k8s.io/kwok ``kustomize/stage``): the upstream ``node-initialize``,
``node-heartbeat-with-lease``, ``pod-ready``, ``pod-complete`` and ``pod-delete`` (copied from
the module at the pin) and one of ours, ``POD_EXIT_STAGE``: upstream's ``pod-complete`` fires
only for pods owned by a ``batch/v1`` Job, so a PyTorchJob's pod would run forever; ours ends
a running pod that carries the ``EXIT_CODE_ANNOTATION`` with that exit code (``Succeeded`` for
0, ``Failed`` otherwise), after ``EXIT_DELAY_ANNOTATION`` (a duration, default 1 s).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from infra.config.nodegroups import NODEGROUP_LABEL, node_labels

KWOK_NODE_ANNOTATION = "kwok.x-k8s.io/node"
"""Nodes kwok manages (``--manage-nodes-with-annotation-selector``), as kwok's docs mark them."""
GPU_RESOURCE = "nvidia.com/gpu"
EFA_RESOURCE = "vpc.amazonaws.com/efa"
EXIT_CODE_ANNOTATION = "controlplane.eks-fsdp/exit-code"
"""On a pod (or a PyTorchJob's pod template): kwok ends the running pod with this exit code."""
EXIT_DELAY_ANNOTATION = "controlplane.eks-fsdp/exit-delay"
"""How long the pod runs before it exits (a Go duration, e.g. ``3s``)."""
NODE_IP = "127.0.0.1"
"""Every fake node's ``InternalIP`` (kwok's ``--node-ip`` too): where the API server dials a
node's kubelet (``cluster.KUBELET_ADDRESS_TYPES``)."""
NODE_HOSTNAME = "localhost"
"""Every fake node's ``Hostname`` address. The API server never uses it (it dials
``InternalIP`` only); were it to, ``localhost`` resolves from ``/etc/hosts``, not through DNS."""
POD_EXIT_STAGE = "eks-fsdp-pod-exit"
MAX_NODES_PER_GROUP = 16
"""Fake nodes per group: the group's ``maxSize``, at most this many."""
SYSTEM_SHAPES = {"c5.2xlarge": (8, 16), "c5.4xlarge": (16, 32), "m5.xlarge": (4, 16)}
"""vCPUs and GiB of the system node types the stacks use (the catalog lists GPU types only)."""


@dataclass(frozen=True, kw_only=True)
class NodeShape:
    """One node group as fake nodes: ``count`` nodes named ``<group>-<i>``."""

    group: str
    """Node group name (the ``eks-fsdp/nodegroup`` label)."""
    count: int
    labels: dict[str, str]
    taints: tuple[dict[str, str], ...] = ()
    capacity: dict[str, str] = field(default_factory=dict)

    def node_names(self) -> list[str]:
        return [f"{self.group}-{i}" for i in range(self.count)]


def _common_labels(group: str, zone: str | None) -> dict[str, str]:
    labels = {
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "eks.amazonaws.com/nodegroup": group,
    }
    if zone:
        labels["topology.kubernetes.io/zone"] = zone
    return labels


def network_labels(group: Any) -> dict[str, str]:
    """The EKS network-topology labels of ``group``'s nodes (EFA groups; none otherwise): one
    fake network node per layer for the whole group, ``nn-<group>-<layer>``."""
    from workloads.specs.kueue import TOPOLOGY_LEVELS, topology_aware

    if not topology_aware(group):
        return {}
    layers = [level for level in TOPOLOGY_LEVELS if level.startswith("topology.k8s.aws/")]
    return {level: f"nn-{group.name}-{i}" for i, level in enumerate(layers, 1)}


def gpu_shape(group: Any, *, count: int | None = None) -> NodeShape:
    """Fake nodes of one ``GpuNodeGroupConfig``."""
    inst = group.instance
    capacity = {
        "cpu": str(inst.vcpus),
        "memory": f"{inst.memory_gib}Gi",
        "ephemeral-storage": f"{group.root_volume_gib}Gi",
        "pods": "110",
        GPU_RESOURCE: str(inst.gpus),
    }
    if group.efa:
        capacity[EFA_RESOURCE] = str(inst.efa_interfaces)
    taint = group.taint
    return NodeShape(
        group=group.name,
        count=count if count is not None else min(group.max_size, MAX_NODES_PER_GROUP),
        labels={
            **_common_labels(group.name, group.availability_zone),
            **node_labels(group),
            **network_labels(group),
        },
        taints=({"key": taint.key, "value": taint.value, "effect": taint.effect},),
        capacity=capacity,
    )


def system_shape(system: Any, *, zone: str | None = None, count: int = 2) -> NodeShape:
    """Fake CPU nodes of the stack's system node group (labels as ``infra.cluster`` sets)."""
    vcpus, gib = SYSTEM_SHAPES.get(system.instance_type, (8, 32))
    return NodeShape(
        group="system",
        count=count,
        labels={
            **_common_labels("system", zone),
            NODEGROUP_LABEL: "system",
            "node.kubernetes.io/instance-type": system.instance_type,
        },
        capacity={
            "cpu": str(vcpus),
            "memory": f"{gib}Gi",
            "ephemeral-storage": "50Gi",
            "pods": "110",
        },
    )


def stack_shapes(stacks: Iterable[str]) -> list[NodeShape]:
    """Node shapes of every named stack (``Pulumi.<stack>.yaml``), one per distinct group."""
    from infra.config import load_stack_file

    shapes: dict[str, NodeShape] = {}
    for stack in stacks:
        cfg = load_stack_file(stack)
        zone = cfg.availability_zones[0] if cfg.availability_zones else None
        shapes.setdefault("system", system_shape(cfg.system_node_group, zone=zone))
        for group in cfg.gpu_node_groups:
            shapes.setdefault(group.name, gpu_shape(group))
    return list(shapes.values())


def node_objects(shape: NodeShape) -> list[dict[str, Any]]:
    """The Node objects of ``shape``: status with capacity = allocatable and the addresses
    (``InternalIP`` ``NODE_IP``, ``Hostname`` ``NODE_HOSTNAME``); kwok keeps them.

    The addresses are set here, not left to kwok: its ``node-initialize`` stage (kwok v0.8.0
    ``kustomize/stage/node/fast/node-initialize.yaml``), which runs again whenever a node is
    not Ready (as the node-lifecycle controller marks a node whose Lease lapsed), writes an
    empty ``addresses`` list over a node that has an ``InternalIP`` but no ``Hostname``
    address (kwok's ``--node-name`` is unset), leaving the node with no address until its next
    heartbeat (seen: nodes without addresses for a minute at a time)."""
    nodes = []
    for name in shape.node_names():
        nodes.append(
            {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {
                    "name": name,
                    "annotations": {KWOK_NODE_ANNOTATION: "fake"},
                    "labels": {**shape.labels, "kubernetes.io/hostname": name},
                },
                "spec": {"taints": [dict(t) for t in shape.taints]},
                "status": {
                    "capacity": dict(shape.capacity),
                    "allocatable": dict(shape.capacity),
                    "addresses": [
                        {"type": "InternalIP", "address": NODE_IP},
                        {"type": "Hostname", "address": NODE_HOSTNAME},
                    ],
                },
            }
        )
    return nodes


def pod_exit_stage() -> dict[str, Any]:
    """Our Stage: a running, ready pod with ``EXIT_CODE_ANNOTATION`` exits with that code."""
    code = f'index .metadata.annotations "{EXIT_CODE_ANNOTATION}"'
    template = (
        "{{ $now := Now }}\n"
        f"{{{{ $code := {code} }}}}\n"
        "containerStatuses:\n"
        "{{ range .spec.containers }}\n"
        "- image: {{ .image | Quote }}\n"
        "  name: {{ .name | Quote }}\n"
        "  ready: false\n"
        "  restartCount: 0\n"
        "  started: false\n"
        "  state:\n"
        "    terminated:\n"
        "      exitCode: {{ $code }}\n"
        "      finishedAt: {{ $now | Quote }}\n"
        '      reason: {{ if eq $code "0" }}Completed{{ else }}Error{{ end }}\n'
        "      startedAt: {{ $now | Quote }}\n"
        "{{ end }}\n"
        '{{ if eq $code "0" }}\nphase: Succeeded\n{{ else }}\nphase: Failed\n{{ end }}\n'
    )
    return {
        "apiVersion": "kwok.x-k8s.io/v1alpha1",
        "kind": "Stage",
        "metadata": {"name": POD_EXIT_STAGE},
        "spec": {
            "resourceRef": {"apiGroup": "v1", "kind": "Pod"},
            "selector": {
                "matchExpressions": [
                    {"key": ".metadata.deletionTimestamp", "operator": "DoesNotExist"},
                    {"key": ".status.phase", "operator": "In", "values": ["Running"]},
                    {
                        "key": f'.metadata.annotations["{EXIT_CODE_ANNOTATION}"]',
                        "operator": "Exists",
                    },
                ]
            },
            "delay": {
                "durationMilliseconds": 1000,
                "durationFrom": {
                    "expressionFrom": f'.metadata.annotations["{EXIT_DELAY_ANNOTATION}"]'
                },
            },
            "next": {"statusTemplate": template},
        },
    }


def kwok_config(stage_files: Iterable[Path]) -> str:
    """kwok's ``--config`` file: every stage (upstream's, then ours). Its options stay kwok's
    defaults (a ``KwokConfiguration`` document here would replace them, zeros included) and
    the node IP comes by flag."""
    docs: list[dict[str, Any]] = []
    for path in stage_files:
        docs.extend(d for d in yaml.safe_load_all(path.read_text()) if d)
    docs.append(pod_exit_stage())
    return yaml.safe_dump_all(docs, sort_keys=False)
