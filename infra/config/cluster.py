"""The cluster section: ``clusterName``, ``kubernetesVersion``, ``apiPublicAccessCidrs``,
``accessEntries``."""

from __future__ import annotations

import ipaddress
import re
from typing import Any

from infra import versions
from infra.config.fields import _fail, _str, _str_list

_IAM_ARN = re.compile(r"^arn:aws[a-z-]*:iam::\d{12}:(role|user)/[\w+=,.@/-]+$")
_K8S_VERSION = re.compile(r"^1\.\d{2}$")


def _parse_cluster_name(value: Any) -> str:
    """``clusterName``: a valid EKS cluster name."""
    cluster_name = _str(value, "clusterName")
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_-]{0,99}", cluster_name):
        raise _fail("clusterName", f"{cluster_name!r} is not a valid EKS cluster name")
    return cluster_name


def _parse_kubernetes_version(value: Any) -> str:
    """``kubernetesVersion``: ``1.NN``, a version ``infra.versions`` knows."""
    k8s = _str(str(value), "kubernetesVersion")
    if not _K8S_VERSION.match(k8s):
        raise _fail("kubernetesVersion", f"{k8s!r} is not shaped 1.NN (quote it in YAML: '1.30')")
    # Undated on purpose: the policy pack checks standard support at preview.
    unknown = versions.unknown_version_problem(k8s)
    if unknown is not None:
        raise _fail("kubernetesVersion", unknown)
    return k8s


def _parse_api_cidrs(value: Any) -> tuple[str, ...] | None:
    """``apiPublicAccessCidrs``: IPv4 networks, never the whole internet; None when absent."""
    path = "apiPublicAccessCidrs"
    if value is None:
        return None
    cidrs = () if value == [] else _str_list(value, path)
    for i, cidr in enumerate(cidrs):
        try:
            net = ipaddress.IPv4Network(cidr, strict=True)
        except ValueError as exc:
            raise _fail(f"{path}[{i}]", f"{cidr!r} is not an IPv4 network CIDR ({exc})") from None
        if net.prefixlen == 0:
            raise _fail(
                f"{path}[{i}]",
                "0.0.0.0/0 opens the API endpoint to the internet; name your egress CIDRs"
                " (or [] for a private endpoint)",
            )
    return cidrs


def _parse_access_entries(value: Any) -> tuple[str, ...]:
    """``accessEntries``: IAM role or user ARNs."""
    access = _str_list(value, "accessEntries")
    for i, arn in enumerate(access):
        if not _IAM_ARN.match(arn):
            raise _fail(f"accessEntries[{i}]", f"{arn!r} is not an IAM role or user ARN")
    return access
