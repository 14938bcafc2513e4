"""``EfaDraDriver``: the EFA DRA driver (DRANET, eks-charts ``aws-dranet``) as a Helm release,
on the nodes of ``efa: dra`` node groups only.

Those nodes carry ``eks-fsdp/efa-dra=true`` and not ``vpc.amazonaws.com/efa.present``
(``infra.config.nodegroups.node_labels``), so this DaemonSet (``nodeSelector``) and the EFA
device plugin's (``infra.device_plugins``, its own ``nodeSelector``) never meet on a node: the
EKS user guide (device-management-efa, "Install the EFA DRA driver") warns that the two
"cannot coexist on the same node" (silent oversubscription). The chart installs the DeviceClass
``efa.networking.k8s.aws`` that the jobs' ResourceClaimTemplates name (``workloads.specs.efa``).
Chart values read at the pin: ``nodeSelector``, ``tolerations`` (eks-charts
``stable/aws-dranet/values.yaml`` and ``templates/daemonset.yaml`` at 1.0.0).
"""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_kubernetes as k8s

from infra import versions
from infra.config import Taint
from infra.config.nodegroups import EFA_DRA_LABEL
from infra.device_plugins import plugin_tolerations

TYPE_TOKEN = "eks-fsdp:infra:EfaDraDriver"
NAMESPACE = "kube-system"
RELEASE = "aws-dranet"
"""The chart's documented release name (its DaemonSet is ``aws-dranet``)."""


def dra_values(taints: tuple[Taint, ...]) -> dict[str, object]:
    """Helm values of the aws-dranet chart: our DRA nodes only, through their taints."""
    return {
        "tolerations": [
            t for t in plugin_tolerations(taints) if t.get("key") != "CriticalAddonsOnly"
        ],  # the chart's template tolerates CriticalAddonsOnly itself
        "nodeSelector": {EFA_DRA_LABEL: "true"},
    }


@dataclass(frozen=True, kw_only=True)
class EfaDraDriverArgs:
    """Arguments of ``EfaDraDriver``."""

    gpu_taints: tuple[Taint, ...]
    """Taints of the ``efa: dra`` node groups; the driver tolerates each."""

    def __post_init__(self) -> None:
        if not self.gpu_taints:
            raise ValueError("EfaDraDriverArgs.gpu_taints: no efa: dra node group taint given")


class EfaDraDriver(pulumi.ComponentResource):
    """The aws-dranet Helm release (DaemonSet + DeviceClass ``efa.networking.k8s.aws``)."""

    release: k8s.helm.v3.Release
    """The chart's release."""

    def __init__(
        self, name: str, args: EfaDraDriverArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__(TYPE_TOKEN, name, {}, opts)
        self.release = k8s.helm.v3.Release(
            f"{name}-release",
            name=RELEASE,
            chart=versions.EFA_DRA_DRIVER_CHART,
            version=versions.EFA_DRA_DRIVER_VERSION,
            repository_opts=k8s.helm.v3.RepositoryOptsArgs(repo=versions.EFA_DRA_DRIVER_REPO),
            namespace=NAMESPACE,
            values=dra_values(args.gpu_taints),
            opts=pulumi.ResourceOptions(parent=self),
        )
        self.register_outputs({"release": self.release.status})
