"""Which EKS add-on versions fit which Kubernetes minor: the policy pack's copy of the table.

The pack runs in its own virtualenv from this folder alone (the engine starts ``policy/`` and
``pulumi policy publish`` uploads only it), so it cannot import ``infra``; the rows are
``infra/addon_versions.py``'s ``RULES`` (where each row's source is named: the EKS user
guide's per-add-on version tables and ``aws eks describe-addon-versions``), repeated here, and
``tests/policy/test_policy_pack.py`` keeps the two equal (``offline.py --facts``). Bump both.
"""

from __future__ import annotations

import re

SERIES: dict[str, dict[str, tuple[str, ...]]] = {
    "kube-proxy": {"1.33": ("v1.33",), "1.34": ("v1.34",), "1.35": ("v1.35",)},
    "coredns": {
        "1.33": ("v1.12", "v1.13"),
        "1.34": ("v1.12", "v1.13"),
        "1.35": ("v1.13", "v1.14"),
    },
    "vpc-cni": {
        "1.33": ("v1.20", "v1.21"),
        "1.34": ("v1.20", "v1.21"),
        "1.35": ("v1.20", "v1.21"),
    },
    "aws-ebs-csi-driver": {"1.35": ("v1.57",)},
    "eks-node-monitoring-agent": {"1.35": ("v1.6",)},
    "eks-pod-identity-agent": {"1.35": ("v1.3",)},
    "aws-fsx-csi-driver": {"1.35": ("v1.9",)},
    "amazon-cloudwatch-observability": {"1.35": ("v5",)},
}
"""Add-on name -> Kubernetes minor -> accepted ``vMAJOR.MINOR`` prefixes of its version."""

_VERSION = re.compile(r"^v\d+\.\d+\.\d+-eksbuild\.\d+$")


def addon_version_problem(addon: str, version: str, minor: str) -> str | None:
    """Why ``version`` of ``addon`` does not fit Kubernetes ``minor`` (None when it does); the
    same verdicts as ``infra.addon_versions.addon_version_problem``."""
    if not _VERSION.match(version):
        return f"{addon} {version} is not shaped vX.Y.Z-eksbuild.N"
    series = SERIES.get(addon)
    if series is None:
        return (
            f"{addon} has no row in the add-on version table: add a row to"
            " infra/addon_versions.py and policy/addon_versions.py"
        )
    accepted = series.get(minor)
    if accepted is None:
        known = ", ".join(sorted(series))
        return f"{addon} {version}: no known builds for Kubernetes {minor} (known: {known})"
    if not any(version == s or version.startswith(f"{s}.") for s in accepted):
        expected = " or ".join(f"{s}.x" for s in accepted)
        return f"{addon} {version} is not a build for Kubernetes {minor} (expected {expected})"
    return None
