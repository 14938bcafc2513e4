"""Which EKS add-on versions are valid on which Kubernetes minor: a table with its sources.

EKS add-on builds are made per Kubernetes minor; a build for another minor is refused by
``CreateAddon`` ("Addon version specified is not supported"), or, for kube-proxy, runs a proxy
newer than the control plane. The pins in ``infra.versions`` are made for
``versions.KUBERNETES_VERSION``, but a stack may pick another minor (``kubernetesVersion``):
``Cluster`` refuses a minor its pins are not valid for, with one line, before anything is built.

The table records, per add-on and minor, the version series (``vMAJOR.MINOR``) the EKS docs
list as the add-on type's builds for that minor. Where the user guide has no per-minor table
(the EBS and FSx CSI drivers, CloudWatch Observability, the node monitoring agent), the row
holds the series ``aws eks describe-addon-versions --kubernetes-version <minor>`` returned as
recorded by the source named; bump a row with the pin. Pure data: imports nothing but
``infra.versions``. The policy pack repeats the rows (``policy/addon_versions.py``, rule
``addon-versions-fit-cluster``; a test keeps them equal): bump both.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from infra import versions


@dataclass(frozen=True, kw_only=True)
class AddonRule:
    """The valid version series of one add-on per Kubernetes minor."""

    addon: str
    """EKS add-on name (``aws eks describe-addon-versions --addon-name``)."""
    series: dict[str, tuple[str, ...]]
    """Kubernetes minor -> accepted ``vMAJOR.MINOR`` prefixes of the add-on's version."""
    source: str
    """Where the rows come from."""


RULES: dict[str, AddonRule] = {
    r.addon: r
    for r in (
        AddonRule(
            addon="kube-proxy",
            series={minor: (f"v{minor}",) for minor in ("1.33", "1.34", "1.35")},
            source=(
                "EKS user guide, 'Manage kube-proxy in Amazon EKS clusters', kube-proxy versions"
                " table: the add-on's minor is the cluster's (1.35: v1.35.3-eksbuild.2,"
                " 1.34: v1.34.6-eksbuild.2, 1.33: v1.33.10-eksbuild.2)"
            ),
        ),
        AddonRule(
            addon="coredns",
            series={
                "1.33": ("v1.12", "v1.13"),
                "1.34": ("v1.12", "v1.13"),
                "1.35": ("v1.13", "v1.14"),
            },
            source=(
                "EKS user guide, 'Manage CoreDNS for DNS in Amazon EKS clusters', CoreDNS"
                " versions table (1.35: v1.13.2-eksbuild.4, later v1.14.2-eksbuild.4; 1.34 and"
                " 1.33: v1.12.4-eksbuild.1, later v1.13.2-eksbuild.4)"
            ),
        ),
        AddonRule(
            addon="vpc-cni",
            series={minor: ("v1.20", "v1.21") for minor in ("1.33", "1.34", "1.35")},
            source=(
                "EKS user guide, 'Assign IPs to Pods with the Amazon VPC CNI', version table:"
                " one latest build for every supported minor (v1.20.1-eksbuild.3 for"
                " 1.27-1.33, the v1.21 series since)"
            ),
        ),
        AddonRule(
            addon="aws-ebs-csi-driver",
            series={"1.35": ("v1.57",)},
            source=(
                "describe-addon-versions as pinned by a running 1.35 cluster"
                " (ministryofjustice analytical-platform eks_cluster_addon_versions:"
                " v1.57.1-eksbuild.1); other minors unknown, not refused by the docs"
            ),
        ),
        AddonRule(
            addon="eks-node-monitoring-agent",
            series={"1.35": ("v1.6",)},
            source=(
                "describe-addon-versions as pinned by a running 1.35 cluster"
                " (ministryofjustice analytical-platform: v1.6.2-eksbuild.1); agent releases"
                " on github.com/aws/eks-node-monitoring-agent"
            ),
        ),
        AddonRule(
            addon="eks-pod-identity-agent",
            series={"1.35": ("v1.3",)},
            source=(
                "describe-addon-versions: v1.3.10-eksbuild.3 is a 1.36 cluster's default and the"
                " v1.3 series serves 1.32-1.34 (EKS user guide, 'Set up the EKS Pod Identity"
                " Agent'); no per-minor table for 1.35"
            ),
        ),
        AddonRule(
            addon="aws-fsx-csi-driver",
            series={"1.35": ("v1.9",)},
            source=(
                "describe-addon-versions for 1.35 as recorded with the pin in infra/versions.py"
                " (no per-minor table in the EKS user guide)"
            ),
        ),
        AddonRule(
            addon="amazon-cloudwatch-observability",
            series={"1.35": ("v5",)},
            source=(
                "describe-addon-versions for 1.35 as recorded with the pin in infra/versions.py"
                " (the add-on's v5 line; no per-minor table in the EKS user guide)"
            ),
        ),
    )
}

PINNED: dict[str, str] = {
    "kube-proxy": versions.KUBE_PROXY_ADDON_VERSION,
    "coredns": versions.COREDNS_ADDON_VERSION,
    "vpc-cni": versions.VPC_CNI_ADDON_VERSION,
    "aws-ebs-csi-driver": versions.EBS_CSI_ADDON_VERSION,
    "eks-node-monitoring-agent": versions.NODE_MONITORING_AGENT_ADDON_VERSION,
    "aws-fsx-csi-driver": versions.FSX_CSI_ADDON_VERSION,
    "eks-pod-identity-agent": versions.POD_IDENTITY_AGENT_ADDON_VERSION,
    "amazon-cloudwatch-observability": versions.CLOUDWATCH_OBSERVABILITY_ADDON_VERSION,
}
"""The add-on builds the cluster installs (``infra.versions``), by add-on name."""

_VERSION = re.compile(r"^v\d+\.\d+\.\d+-eksbuild\.\d+$")


def addon_version_problem(addon: str, version: str, minor: str) -> str | None:
    """Why ``version`` of ``addon`` is not valid on Kubernetes ``minor`` (None when it is)."""
    if not _VERSION.match(version):
        return f"{addon} {version} is not shaped vX.Y.Z-eksbuild.N"
    rule = RULES.get(addon)
    if rule is None:
        return f"{addon} has no row in RULES: add one to infra/addon_versions.py and policy/addon_versions.py"
    accepted = rule.series.get(minor)
    if accepted is None:
        known = ", ".join(sorted(rule.series))
        return f"{addon} {version}: no known builds for Kubernetes {minor} (known: {known})"
    if not any(version == s or version.startswith(f"{s}.") for s in accepted):
        expected = " or ".join(f"{s}.x" for s in accepted)
        return f"{addon} {version} is not a build for Kubernetes {minor} (expected {expected})"
    return None


def pinned_problems(minor: str, addons: tuple[str, ...] | None = None) -> list[str]:
    """Every pinned add-on (or those named) whose build is not valid on ``minor``."""
    names = addons if addons is not None else tuple(PINNED)
    problems = (addon_version_problem(a, PINNED[a], minor) for a in names)
    return [p for p in problems if p is not None]
