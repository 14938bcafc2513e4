"""Every pinned version and image of the project, in one module.

The Pulumi components, the spec builders, the renderer, the docs and the tests all read these
names; nothing else in the tree spells a version or an image tag. Never ``latest``.
This module imports nothing outside the standard library.
"""

from __future__ import annotations

# --- EKS -------------------------------------------------------------------------------------
KUBERNETES_VERSION = "1.33"
"""Default EKS control-plane version (stack key ``kubernetesVersion`` may pick another)."""

# --- Cluster add-ons (Helm charts) ------------------------------------------------------------
NVIDIA_DEVICE_PLUGIN_CHART = "nvidia-device-plugin"
NVIDIA_DEVICE_PLUGIN_REPO = "https://nvidia.github.io/k8s-device-plugin"
NVIDIA_DEVICE_PLUGIN_VERSION = "0.17.1"

EFA_DEVICE_PLUGIN_CHART = "aws-efa-k8s-device-plugin"
EFA_DEVICE_PLUGIN_REPO = "https://aws.github.io/eks-charts"
EFA_DEVICE_PLUGIN_VERSION = "v0.5.7"

# --- Workloads -------------------------------------------------------------------------------
ETCD_VERSION = "3.5.21"
"""etcd 3.5.x: 3.6 dropped the v2 API that torch's etcd rendezvous backends need."""
ETCD_IMAGE = f"quay.io/coreos/etcd:v{ETCD_VERSION}"
