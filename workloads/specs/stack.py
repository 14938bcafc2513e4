"""A stack's workloads as Kubernetes objects: settings -> every object, grouped by component.

The cluster stack declares the platform only (``platform``: the training operator, etcd, the
debug tools, the checkpoint volume); a job's settings come from its job file
(``jobs.build.build``), and ``objects_by_component`` turns them into the job's objects with the
platform pieces it uses: the renderer, the scanner and the tests go through here; the Pulumi
program builds ``platform`` from the config it reads itself.
"""

from __future__ import annotations

from typing import Any

from infra import versions
from workloads.specs import debug, etcd, operator, pytorchjob, storage
from workloads.specs.common import PART_OF, K8sObject, labels
from workloads.specs.observability import ObservabilitySettings
from workloads.specs.settings import (
    DebugSettings,
    EtcdSettings,
    OperatorSettings,
    Workloads,
)
from workloads.specs.storage import CheckpointVolumeSettings

JOBS_NAMESPACE = "default"
"""The namespace the stack prepares for jobs (etcd, the checkpoint claim, the token Secret)."""


def platform(stack_cfg: Any, *, image: str) -> dict[str, Any]:
    """What the cluster stack prepares for jobs (no job): the training operator, the shared
    etcd (every job's keys under its own rendezvous id; its NetworkPolicy admits the pods of
    any job of the project), the debug DaemonSets and, on fsx stacks, the checkpoint claim
    every job mounts. Keys: ``operator``, ``etcd``, ``debug`` (None unless ``debugTools``),
    ``checkpoint_volume`` (None without FSx), ``namespace``, ``image``."""
    from infra.config import DEFAULT_CHECKPOINT_CLAIM

    taints = tuple(t for g in stack_cfg.gpu_node_groups if (t := getattr(g, "taint", None)))
    instance_types = tuple(sorted({g.instance_type for g in stack_cfg.gpu_node_groups}))
    storage_cfg = stack_cfg.shared_storage
    volume = None
    if storage_cfg.is_fsx:
        volume = CheckpointVolumeSettings(
            claim_name=DEFAULT_CHECKPOINT_CLAIM,
            namespace=JOBS_NAMESPACE,
            capacity_gib=storage_cfg.storage_capacity_gib,
        )
    return {
        "namespace": JOBS_NAMESPACE,
        "image": image,
        "operator": OperatorSettings(),
        "etcd": EtcdSettings(namespace=JOBS_NAMESPACE, image=versions.ETCD_IMAGE),
        "debug": DebugSettings(
            image=image,
            namespace=JOBS_NAMESPACE,
            instance_types=instance_types,
            extra_taints=taints,
        )
        if stack_cfg.debug_tools
        else None,
        "checkpoint_volume": volume,
    }


def etcd_clients_policy(s: EtcdSettings) -> K8sObject:
    """Ingress to the shared etcd's client port from the pods of any job of the project (the
    pod templates carry ``app.kubernetes.io/component: training`` and ``part-of: eks-fsdp``).
    NetworkPolicies add up: this widens ``etcd.network_policy``, which admits the jobs it
    names, to every job submitted apart from the stack. Selects the etcd pods as
    ``workloads.specs.etcd`` labels them."""
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {
            "name": f"{s.name}-jobs",
            "namespace": s.namespace,
            "labels": labels(s.name, etcd.COMPONENT),
        },
        "spec": {
            "podSelector": {
                "matchLabels": {
                    "app.kubernetes.io/name": s.name,
                    "app.kubernetes.io/component": etcd.COMPONENT,
                }
            },
            "policyTypes": ["Ingress"],
            "ingress": [
                {
                    "from": [
                        {
                            "podSelector": {
                                "matchLabels": {
                                    "app.kubernetes.io/component": pytorchjob.COMPONENT,
                                    "app.kubernetes.io/part-of": PART_OF,
                                }
                            }
                        }
                    ],
                    "ports": [{"protocol": "TCP", "port": s.client_port}],
                }
            ],
        },
    }


def objects_by_component(
    w: Workloads, file_system: storage.FileSystemRef | None = None
) -> dict[str, list[K8sObject]]:
    """Kubernetes objects grouped by the component (and file) they belong to.

    ``file_system`` fills the checkpoint volume of an fsx stack (placeholders when None).
    """
    out: dict[str, list[K8sObject]] = {}
    if w.checkpoint_volume is not None:
        fs = file_system or storage.placeholder_file_system(None)
        out["checkpoint-volume"] = storage.objects(w.checkpoint_volume, fs)
    if w.job.uses_etcd:
        out["etcd"] = etcd.objects(w.etcd)
    metrics_namespace = ObservabilitySettings().namespace if w.job.metrics_port else None
    out["jobs-service-account"] = [pytorchjob.service_account(w.job.namespace)]
    out["pytorchjob"] = [pytorchjob.pytorchjob(w.job, w.etcd.host)]
    out["workers-network-policy"] = [pytorchjob.network_policy(w.job, metrics_namespace)]
    if w.debug_tools:
        out["debug-tools"] = debug.objects(w.debug)
    return out


def operator_kustomization(w: Workloads) -> dict[str, Any]:
    """The training operator's kustomization (applied with ``kubectl apply -k``)."""
    return operator.kustomization(w.operator)
