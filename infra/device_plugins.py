"""``DevicePlugins``: the NVIDIA and AWS EFA Kubernetes device plugins as Helm releases.

They advertise ``nvidia.com/gpu`` and ``vpc.amazonaws.com/efa`` on the GPU nodes, which the
worker pods request (``InstanceType.pod_resources()``). Chart versions are pinned in
``infra.versions``. Both tolerate the GPU taints and select nodes by the labels the GPU
nodegroups set (``nvidia.com/gpu.present``, ``vpc.amazonaws.com/efa.present``), so they run
on GPU nodes only: the NVIDIA chart through ``affinity``, the EFA chart through
``nodeSelector`` (eks-charts stable/aws-efa-k8s-device-plugin templates/daemonset.yaml renders
``.Values.nodeSelector`` and a fixed node affinity on EFA instance types; it ignores an
``affinity`` value). The Kubernetes provider comes in through ``opts`` (the cluster's).
"""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_kubernetes as k8s

from infra import versions
from infra.config import Taint
from infra.config.nodegroups import EFA_PRESENT_LABEL, GPU_PRESENT_LABEL

TYPE_TOKEN = "eks-fsdp:infra:DevicePlugins"
NAMESPACE = "kube-system"


def _affinity(label: str) -> dict[str, object]:
    return {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": label, "operator": "In", "values": ["true"]}]}
                ]
            }
        }
    }


def plugin_tolerations(taints: tuple[Taint, ...]) -> list[dict[str, str]]:
    """Tolerations for every distinct GPU taint, plus the add-on ``CriticalAddonsOnly``."""
    seen: list[dict[str, str]] = []
    for taint in taints:
        toleration = taint.toleration()
        if toleration not in seen:
            seen.append(toleration)
    return [*seen, {"key": "CriticalAddonsOnly", "operator": "Exists"}]


def nvidia_values(taints: tuple[Taint, ...]) -> dict[str, object]:
    """Helm values of the NVIDIA device plugin chart."""
    return {
        "tolerations": plugin_tolerations(taints),
        "affinity": _affinity(GPU_PRESENT_LABEL),
        "priorityClassName": "system-node-critical",
    }


def efa_values(taints: tuple[Taint, ...]) -> dict[str, object]:
    """Helm values of the AWS EFA device plugin chart."""
    return {
        "tolerations": plugin_tolerations(taints),
        "nodeSelector": {EFA_PRESENT_LABEL: "true"},
    }


@dataclass(frozen=True, kw_only=True)
class DevicePluginsArgs:
    """Arguments of ``DevicePlugins``."""

    gpu_taints: tuple[Taint, ...]
    """Taints of the GPU nodegroups; the plugins tolerate each."""
    efa: bool
    """Install the EFA device plugin (some nodegroup has EFA)."""

    def __post_init__(self) -> None:
        if not self.gpu_taints:
            raise ValueError("DevicePluginsArgs.gpu_taints: no GPU nodegroup taint given")


class DevicePlugins(pulumi.ComponentResource):
    """Helm releases of the NVIDIA (always) and EFA (when used) device plugins."""

    nvidia: k8s.helm.v3.Release
    """The NVIDIA device plugin release."""
    efa: k8s.helm.v3.Release | None
    """The EFA device plugin release (None without EFA nodegroups)."""

    def __init__(
        self, name: str, args: DevicePluginsArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__(TYPE_TOKEN, name, {}, opts)
        child = pulumi.ResourceOptions(parent=self)
        self.nvidia = k8s.helm.v3.Release(
            f"{name}-nvidia",
            name="nvidia-device-plugin",
            chart=versions.NVIDIA_DEVICE_PLUGIN_CHART,
            version=versions.NVIDIA_DEVICE_PLUGIN_VERSION,
            repository_opts=k8s.helm.v3.RepositoryOptsArgs(repo=versions.NVIDIA_DEVICE_PLUGIN_REPO),
            namespace=NAMESPACE,
            values=nvidia_values(args.gpu_taints),
            opts=child,
        )
        self.efa = None
        if args.efa:
            self.efa = k8s.helm.v3.Release(
                f"{name}-efa",
                name="aws-efa-k8s-device-plugin",
                chart=versions.EFA_DEVICE_PLUGIN_CHART,
                version=versions.EFA_DEVICE_PLUGIN_VERSION,
                repository_opts=k8s.helm.v3.RepositoryOptsArgs(
                    repo=versions.EFA_DEVICE_PLUGIN_REPO
                ),
                namespace=NAMESPACE,
                values=efa_values(args.gpu_taints),
                opts=child,
            )
        self.register_outputs(
            {"nvidia": self.nvidia.status, "efa": self.efa.status if self.efa else None}
        )
