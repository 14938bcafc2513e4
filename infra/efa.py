"""EFA's two device managers as data (no pulumi): which one a node group uses, and when the EFA
DRA driver may be chosen.

Source: the EKS user guide, "Manage EFA devices on Amazon EKS" (awsdocs/amazon-eks-user-guide
``latest/ug/ml/device-management-efa.adoc``): the EFA DRA driver (DRANET) needs Kubernetes
1.34 or later, runs on managed node groups, self-managed nodes and Karpenter's static capacity,
and "cannot coexist" with the EFA device plugin on a node; its driver name is ``dra.net`` and
the DeviceClass it installs ``efa.networking.k8s.aws``. The page recommends DRA for new
deployments on 1.34+; this project keeps the device plugin as the default so existing stacks
and Karpenter pools keep one path (docs/node-health.md).
"""

from __future__ import annotations

DRA_DRIVER = "dra.net"
"""The EFA DRA driver's name in its ResourceSlices."""
DEVICE_CLASS = "efa.networking.k8s.aws"
"""The DeviceClass the aws-dranet chart installs (``templates/deviceclass.yaml``)."""
DRA_MIN_KUBERNETES = (1, 34)
"""DRA GA (``resource.k8s.io/v1``) and the driver's minimum version."""


def dra_version_problem(kubernetes_version: str) -> str | None:
    """Why a cluster of this version cannot use the EFA DRA driver; None when it can."""
    try:
        major, minor = (int(x) for x in kubernetes_version.split(".")[:2])
    except ValueError:
        return f"Kubernetes {kubernetes_version!r} is not a version"
    if (major, minor) < DRA_MIN_KUBERNETES:
        need = ".".join(map(str, DRA_MIN_KUBERNETES))
        return (
            f"needs Kubernetes >= {need} (resource.k8s.io/v1); the cluster is {kubernetes_version}"
        )
    return None
