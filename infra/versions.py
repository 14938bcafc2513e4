"""Every pinned version and image of the project, in one module.

The Pulumi components, the spec builders, the renderer, the docs and the tests all read these
names; nothing else in the tree spells a version or an image tag. Never ``latest``.
This module imports nothing outside the standard library.
"""

from __future__ import annotations

import datetime as _dt

# --- Pulumi ----------------------------------------------------------------------------------
PULUMI_CLI_MIN = "3.272.0"
"""The oldest Pulumi CLI the project is run with: the version of the ``pulumi`` SDK that
requirements.txt pins. Pulumi's Automation API installs by default "the CLI version matching
the current SDK release" (pulumi 3.272.0, ``pulumi/automation/_cmd.py``
``PulumiCommand.install``); an older engine may lack what the SDK asks of it. ``doctor``
checks it (``doctor.local.check_pulumi_cli``); tests/doctor/test_cli.py keeps it equal to the
pin."""

# --- EKS -------------------------------------------------------------------------------------
KUBERNETES_VERSION = "1.35"
"""Default EKS control-plane version (stack key ``kubernetesVersion`` may pick another)."""

EKS_STANDARD_SUPPORT_END: dict[str, _dt.date] = {
    "1.33": _dt.date(2026, 7, 29),
    "1.34": _dt.date(2026, 12, 2),
    "1.35": _dt.date(2027, 3, 27),
}
"""End of EKS standard support per minor version (EKS user guide, "Kubernetes version
lifecycle": 14 months of standard support from the EKS release; extended support after it costs
about 6x per cluster-hour). 1.35 was released on EKS on 2026-01-28. Add a row when EKS
releases a version; a version without a row is refused."""


def unknown_version_problem(version: str) -> str | None:
    """Why ``version`` is not one the project knows (None when it has a calendar row).

    Deliberately undated: parsing a stack must give the same answer on any day (a dated check
    here would fail every render, local run and test once the default version ages out). The
    dated check, standard support on the day of the preview, is the policy pack's
    ``eks-standard-support`` rule."""
    if version in EKS_STANDARD_SUPPORT_END:
        return None
    known = ", ".join(EKS_STANDARD_SUPPORT_END)
    return f"{version} has no known EKS standard-support window (known: {known})"


def standard_support_problem(version: str, today: _dt.date) -> str | None:
    """Why ``version`` is not in EKS standard support on ``today`` (None when it is)."""
    unknown = unknown_version_problem(version)
    if unknown is not None:
        return unknown
    end = EKS_STANDARD_SUPPORT_END[version]
    if today > end:
        return (
            f"{version} left EKS standard support on {end.isoformat()} (extended support costs"
            f" ~6x per cluster-hour); use {KUBERNETES_VERSION}"
        )
    return None


# --- Cluster add-ons (Helm charts) ------------------------------------------------------------
NVIDIA_DEVICE_PLUGIN_CHART = "nvidia-device-plugin"
NVIDIA_DEVICE_PLUGIN_REPO = "https://nvidia.github.io/k8s-device-plugin"
NVIDIA_DEVICE_PLUGIN_VERSION = "0.17.1"

EFA_DEVICE_PLUGIN_CHART = "aws-efa-k8s-device-plugin"
EFA_DEVICE_PLUGIN_REPO = "https://aws.github.io/eks-charts"
EFA_DEVICE_PLUGIN_VERSION = "v0.5.30"
"""eks-charts stable/aws-efa-k8s-device-plugin (plugin image v0.5.20). The chart honours
``nodeSelector`` and ``tolerations``; its node affinity is fixed by the chart (EFA instance types)."""

EFA_DRA_DRIVER_CHART = "aws-dranet"
EFA_DRA_DRIVER_REPO = "https://aws.github.io/eks-charts"
EFA_DRA_DRIVER_VERSION = "1.0.0"
"""eks-charts stable/aws-dranet 1.0.0 (image dranet v1.2.0-eksbuild.2): the EFA DRA driver of
``efa: dra`` node groups (EKS user guide, device-management-efa). Its values take
``nodeSelector`` and ``tolerations`` (CriticalAddonsOnly is built in); the node affinity on EFA
instance types is fixed by ``templates/daemonset.yaml``."""

# --- Workloads -------------------------------------------------------------------------------
ETCD_VERSION = "3.5.21"
"""etcd 3.5.x: 3.6 dropped the v2 API that torch's etcd rendezvous backends need."""
ETCD_IMAGE = f"quay.io/coreos/etcd:v{ETCD_VERSION}"

# --- Workloads: training operator, training image, debug tools --------------------------------
TRAINING_OPERATOR_VERSION = "v1.9.4"
"""Kubeflow training operator release (kubeflow.org/v1 PyTorchJob), the latest v1 release
(2026-08, release-1.9 branch); the repository is now github.com/kubeflow/trainer, whose v1.9.x
tags still carry the v1 operator (Trainer v2's TrainJob replaced it upstream; v1 is kept for
elastic jobs, docs/jobs.md)."""
TRAINING_OPERATOR_KUSTOMIZE_URL = (
    "https://github.com/kubeflow/trainer.git/manifests/overlays/standalone"
    f"?ref={TRAINING_OPERATOR_VERSION}"
)
"""The upstream standalone overlay (namespace ``kubeflow``, CRDs, RBAC, Deployment), pinned by tag."""
TRAINING_OPERATOR_IMAGE_NAME = "ghcr.io/kubeflow/training-v1/training-operator"
"""The image name the v1.9.4 base Deployment uses (manifests/base/deployment.yaml); a kustomize
``images:`` override matches by this exact name (``kubeflow/training-operator`` matches nothing)."""
TRAINING_OPERATOR_IMAGE_TAG = "v1-93c5489"
"""The tag the v1.9.4 standalone overlay itself pins (manifests/overlays/standalone
``images: newTag``): the operator build of that release."""
TRAINING_OPERATOR_IMAGE = f"{TRAINING_OPERATOR_IMAGE_NAME}:{TRAINING_OPERATOR_IMAGE_TAG}"
"""Operator image the install ships (kustomize ``images:`` override)."""
TRAINING_OPERATOR_NAMESPACE = "kubeflow"

# --- The local control plane (controlplane/: built from Go modules, docs/adr/0009) -------------
# Each pin below is also the version a go.mod under controlplane/go/ requires; a test checks
# that they agree. Bump both together (and run ``go mod tidy`` in that folder).
CONTROL_PLANE_KUBERNETES_VERSION = "v1.35.4"
"""``k8s.io/kubernetes`` tag whose kube-apiserver, kube-controller-manager and kube-scheduler
the suite runs (the minor is ``KUBERNETES_VERSION``'s; the staging modules at ``v0.35.4``)."""
CONTROL_PLANE_ETCD_VERSION = "v3.6.16"
"""``go.etcd.io/etcd/server/v3`` for the control plane's store (Kubernetes 1.35 ships etcd 3.6;
the jobs' rendezvous etcd stays on ``ETCD_VERSION``, 3.5, for its v2 API)."""
KWOK_VERSION = "v0.8.0"
"""``sigs.k8s.io/kwok``: fake nodes and pod lifecycles for the local control plane."""
KUEUE_VERSION = "v0.17.0"
"""``sigs.k8s.io/kueue`` release (job queueing, quotas, admission of suspended jobs)."""
KUEUE_CHART = "oci://registry.k8s.io/kueue/charts/kueue"
"""Kueue's Helm chart as upstream publishes it (``charts/kueue/README.md`` at the tag); the
cluster stack installs it (``workloads/kueue.py``)."""
KUEUE_CHART_VERSION = KUEUE_VERSION.removeprefix("v")
"""The chart's version is the release's (``charts/kueue/Chart.yaml`` at the tag: 0.17.0)."""
KUEUE_IMAGE_NAME = "registry.k8s.io/kueue/kueue"
"""The released controller image (tagged ``KUEUE_VERSION``); the chart's source values name a
staging image that release packaging replaces."""
KUEUE_NAMESPACE = "kueue-system"
TRAINER_V2_VERSION = "v2.3.0"
"""Kubeflow Trainer v2 release (github.com/kubeflow/trainer, tag of 2026-08-06): the
``TrainJob`` and ``ClusterTrainingRuntime`` CRDs (``manifests/base/crds`` at the tag, vendored
under ``workloads/manifests/trainer/crds``) that ``api: v2`` job files render against."""
TRAINER_V2_KUSTOMIZE_URL = (
    f"https://github.com/kubeflow/trainer.git/manifests/overlays/manager?ref={TRAINER_V2_VERSION}"
)
"""The upstream manager overlay at the tag: namespace ``kubeflow-system``, the CRDs, the
controller (image ``ghcr.io/kubeflow/trainer/trainer-controller-manager:v2.3.0``, pinned by the
overlay itself), RBAC, webhook, and JobSet ``JOBSET_VERSION`` (``manifests/third-party/jobset``:
the release manifest of kubernetes-sigs/jobset)."""
JOBSET_VERSION = "v0.12.0"
"""JobSet release the Trainer overlay at ``TRAINER_V2_VERSION`` installs (for reference)."""

# --- The training image (training/Dockerfile; built by workloads/training_image.py) ----------
# Only the pins below reach the image, as build arguments; the image's tag hashes them and the
# Dockerfile's context (workloads/specs/image.py), never this module, so bumping a chart or an
# add-on above leaves the image and the running job alone.
TORCH_CUDA_VERSION = "13.0"
"""CUDA of the ``torch==2.13.0`` wheel on PyPI (training/requirements.txt): its metadata pins
``cuda-toolkit==13.0.3``, ``nvidia-cudnn-cu13==9.20.0.48`` and ``nvidia-nccl-cu13==2.29.7``, so
torch brings its own CUDA 13.0 user space, cuDNN and NCCL; a build step asserts
``torch.version.cuda`` equals this. CUDA 13 needs an NVIDIA driver >= 580."""
CUDA_BASE_IMAGE = "nvidia/cuda:13.0.2-base-ubuntu24.04"
"""Base of every stage of the training image: CUDA 13.0 ``base`` (cudart and the
``NVIDIA_REQUIRE_CUDA=cuda>=13.0`` label the container toolkit checks against the node's driver;
no toolkit, no cuDNN: torch's wheels carry them), Ubuntu 24.04 with its Python 3.12."""
EFA_INSTALLER_VERSION = "1.51.0"
"""aws-efa-installer (2026-10-22): libfabric 2.7.0amzn2.0, rdma-core 65.0 and the Amazon OFI NCCL
plugin 1.22.0 with its tuner (EC2 user guide, "Elastic Fabric Adapter release notes"). The image
uses the installer's own plugin under ``/opt/amazon/ofi-nccl``; nothing is built from source."""
EFA_OFI_NCCL_VERSION = "1.22.0"
"""aws-ofi-nccl shipped by ``EFA_INSTALLER_VERSION`` (informational: it comes with the installer;
the 1.19+ series is tested with NCCL 2.29.7, the version torch 2.13.0 loads)."""

# --- EKS managed add-ons ----------------------------------------------------------------------
# Pinned builds for KUBERNETES_VERSION 1.35 (``aws eks describe-addon-versions
# --kubernetes-version 1.35 --addon-name <name>`` lists them). Without a version EKS installs
# "the default at creation time" and never updates it, so two stacks created a month apart
# differ. Bump these together with KUBERNETES_VERSION (kube-proxy and CoreDNS follow the
# control-plane minor version).
VPC_CNI_ADDON_VERSION = "v1.21.1-eksbuild.3"
"""vpc-cni (network policy agent included; enabled with ``enableNetworkPolicy``)."""
COREDNS_ADDON_VERSION = "v1.13.2-eksbuild.1"
KUBE_PROXY_ADDON_VERSION = "v1.35.0-eksbuild.2"
EBS_CSI_ADDON_VERSION = "v1.57.1-eksbuild.1"
FSX_CSI_ADDON_VERSION = "v1.9.0-eksbuild.1"
"""aws-fsx-csi-driver add-on (only on stacks with ``sharedStorage.type: fsx``)."""
POD_IDENTITY_AGENT_ADDON_VERSION = "v1.3.10-eksbuild.3"
"""eks-pod-identity-agent add-on (stacks with ``dataBucket.enabled``): the build EKS resolved as
the default on a 1.36 cluster; the v1.3.10 line serves 1.32-1.34 as ``-eksbuild.2``
(awslabs/cdk-eks-blueprints ``lib/addons/eks-pod-identity-agent/index.ts``) and its builds are not
tied to a minor. Check with ``aws eks describe-addon-versions --kubernetes-version 1.35
--addon-name eks-pod-identity-agent`` when bumping KUBERNETES_VERSION."""
CLOUDWATCH_OBSERVABILITY_ADDON_VERSION = "v5.3.0-eksbuild.1"
NODE_MONITORING_AGENT_ADDON_VERSION = "v1.6.2-eksbuild.1"
"""eks-node-monitoring-agent (agent v1.6.2, 2026-03-23, github.com/aws/eks-node-monitoring-agent;
an EKS 1.35 cluster pins this build, ministryofjustice analytical-platform
``eks_cluster_addon_versions``). Node conditions for GPU/XID, networking, kernel and storage
faults; node auto repair acts on them."""

# --- Karpenter (GPU pools with ``provisioner: karpenter``; infra/karpenter.py) -------------------
KARPENTER_VERSION = "1.14.1"
"""aws/karpenter-provider-aws release (tag v1.14.1, 2026-08-20; ``charts/karpenter/Chart.yaml``
version and appVersion 1.14.1 after the release commit). Its CRDs are vendored under
``workloads/manifests/karpenter/crds`` (``pkg/apis/crds`` at the tag); the controller IAM follows
``website/content/en/docs/getting-started/getting-started-with-karpenter/cloudformation.yaml``."""
KARPENTER_CHART = "oci://public.ecr.aws/karpenter/karpenter"
"""The chart as upstream's getting-started installs it (``step08-apply-helm-chart.sh`` at v1.14.1)."""
KARPENTER_CRD_CHART = "oci://public.ecr.aws/karpenter/karpenter-crd"
"""Karpenter's CRDs as their own chart, at ``KARPENTER_VERSION`` too: Helm installs a chart's
``crds/`` on first install only and never upgrades them, so upstream recommends this chart to
manage the CRDs (``website/content/en/docs/upgrading/upgrade-guide.md`` at v1.14.1, "CRD
Upgrades"; ``charts/karpenter-crd``)."""
KARPENTER_NAMESPACE = "kube-system"
"""Upstream's default ``KARPENTER_NAMESPACE`` (getting-started, v1.14.1)."""
KARPENTER_FEATURES_SINCE: dict[str, str] = {
    "capacity-type on-demand": "1.0.0",
    "capacity-type spot": "1.0.0",
    "capacity-type reserved": "1.3.0",
    "capacity blocks": "1.6.0",
    "networkInterfaces": "1.11.0",
    "placementGroupSelector": "1.11.0",
}
"""The first Karpenter release with each feature a GPU pool may use: ODCRs as capacity type
``reserved`` from v1.3 and Capacity Blocks from v1.6 (``website/content/en/docs/tasks/odcrs.md``:
"native support for ... ODCRs in v1.3 ... In v1.6, this support was expanded to include EC2
Capacity Blocks for ML"); ``spec.networkInterfaces`` (EFA-only interfaces) and
``spec.placementGroupSelector`` of the EC2NodeClass first appear in the CRD at v1.11.0
(``pkg/apis/crds/karpenter.k8s.aws_ec2nodeclasses.yaml``: absent at v1.10.0). A stack pinning an older release than a pool needs is refused."""
KARPENTER_AL2023_AMI_ALIAS = "al2023@v20260714"
"""EC2NodeClass ``amiSelectorTerms`` alias, pinned (never ``@latest``, which drifts every node
on each AMI release): awslabs/amazon-eks-ami release v20260714 (CHANGELOG.md: AL2023_x86_64_NVIDIA
for Kubernetes 1.30-1.36, ``KARPENTER_AL2023_AMI_KUBERNETES``). The alias resolves the NVIDIA
variant for GPU instance types (karpenter-provider-aws ``pkg/providers/amifamily/al2023.go``:
variants standard, nvidia, neuron read from
``/aws/service/eks/optimized-ami/<k8s>/amazon-linux-2023/x86_64/nvidia/...``): the same
accelerated AMI family as the managed groups' ``GPU_AMI_TYPE``."""
KARPENTER_AL2023_AMI_KUBERNETES = ("1.30", "1.31", "1.32", "1.33", "1.34", "1.35", "1.36")
"""The Kubernetes minors the pinned alias's release publishes AMIs for (awslabs/amazon-eks-ami
CHANGELOG.md, "AMI Release v20260714": AMI details for K8s 1.36, 1.33-1.35 and 1.30-1.32).
Karpenter resolves the alias through the SSM parameter of the cluster's minor; for a minor
outside this table it finds no AMI and launches nothing, so a stack with a Karpenter pool is
refused at parse time. Update it with the alias."""


def version_tuple(version: str) -> tuple[int, ...]:
    """``"1.14.1"`` -> ``(1, 14, 1)`` (a leading ``v`` is ignored)."""
    return tuple(int(part) for part in version.removeprefix("v").split("."))


# --- Shared storage ---------------------------------------------------------------------------
FSX_LUSTRE_VERSION = "2.15"
"""Lustre version of the FSx file system (2.15 serves SCRATCH_2 and PERSISTENT_2)."""

# --- Node images ------------------------------------------------------------------------------
GPU_AMI_TYPE = "AL2023_x86_64_NVIDIA"
"""EKS-optimized accelerated AMI (NVIDIA driver, CUDA, EFA installer) for GPU nodegroups."""
SYSTEM_AMI_TYPE = "AL2023_x86_64_STANDARD"
"""EKS-optimized AMI for the CPU system nodegroup."""

# --- Observability (Helm charts; owned by workloads/observability.py) ------------------------
DCGM_EXPORTER_CHART = "dcgm-exporter"
DCGM_EXPORTER_REPO = "https://nvidia.github.io/dcgm-exporter/helm-charts"
DCGM_EXPORTER_VERSION = "4.1.3"
"""dcgm-exporter chart (its version is the exporter's own: release 4.2.3-4.1.3)."""
DCGM_EXPORTER_IMAGE_TAG = "4.2.3-4.1.3-ubuntu22.04"
"""nvcr.io/nvidia/k8s/dcgm-exporter tag: DCGM 4.2.3, exporter 4.1.3."""
KUBE_PROMETHEUS_STACK_CHART = "kube-prometheus-stack"
KUBE_PROMETHEUS_STACK_REPO = "https://prometheus-community.github.io/helm-charts"
KUBE_PROMETHEUS_STACK_VERSION = "75.15.1"
"""Prometheus operator + Prometheus + Alertmanager + Grafana (sidecar dashboards)."""
