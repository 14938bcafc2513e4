"""Turn spec dicts into typed pulumi-kubernetes resources (one resource per object)."""

from __future__ import annotations

import re
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from workloads.specs.common import K8sObject

_TYPED: dict[tuple[str, str], Any] = {
    ("apps/v1", "Deployment"): k8s.apps.v1.Deployment,
    ("apps/v1", "DaemonSet"): k8s.apps.v1.DaemonSet,
    ("v1", "Service"): k8s.core.v1.Service,
    ("v1", "PersistentVolume"): k8s.core.v1.PersistentVolume,
    ("v1", "PersistentVolumeClaim"): k8s.core.v1.PersistentVolumeClaim,
    ("networking.k8s.io/v1", "NetworkPolicy"): k8s.networking.v1.NetworkPolicy,
    ("policy/v1", "PodDisruptionBudget"): k8s.policy.v1.PodDisruptionBudget,
    ("scheduling.k8s.io/v1", "PriorityClass"): k8s.scheduling.v1.PriorityClass,
}


def _snake(key: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", key).lower()


def resource_name(prefix: str, obj: K8sObject) -> str:
    """Stable logical name: ``<prefix>-<kind>-<object name>`` in lower case."""
    return f"{prefix}-{obj['kind'].lower()}-{obj['metadata']['name']}"


def apply_object(prefix: str, obj: K8sObject, opts: pulumi.ResourceOptions) -> pulumi.Resource:
    """One Kubernetes object as the matching typed resource (``ValueError`` for other kinds)."""
    cls = _TYPED.get((obj["apiVersion"], obj["kind"]))
    if cls is None:
        raise ValueError(f"kind: no typed resource for {obj['apiVersion']} {obj['kind']}")
    # top-level fields are keyword arguments (snake_case: PriorityClass.globalDefault ->
    # global_default); nested dicts keep the API's camelCase
    body = {_snake(k): v for k, v in obj.items() if k not in ("apiVersion", "kind")}
    return cls(resource_name(prefix, obj), opts=opts, **body)
