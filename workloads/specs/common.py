"""Helpers shared by the spec builders: names, labels, tolerations, hashing, YAML."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Mapping
from typing import Any

import yaml

K8sObject = dict[str, Any]
"""A complete Kubernetes object as plain data (apiVersion, kind, metadata, ...)."""

PART_OF = "eks-fsdp"
GPU_TOLERATION: dict[str, str] = {
    "key": "nvidia.com/gpu",
    "operator": "Exists",
    "effect": "NoSchedule",
}
"""Tolerates the taint EKS GPU node groups carry (``nvidia.com/gpu:NoSchedule``)."""

_DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


def check_dns_label(value: str, field: str, max_len: int = 63) -> None:
    """Raise ``ValueError`` naming ``field`` unless ``value`` is a DNS-1123 label."""
    if not value or len(value) > max_len or not _DNS1123_LABEL.match(value):
        raise ValueError(
            f"{field}: {value!r} is not a DNS-1123 label (lower-case letters, digits and '-', "
            f"at most {max_len} characters, starting and ending alphanumeric)"
        )


def labels(name: str, component: str, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The recommended ``app.kubernetes.io/*`` labels for one object of the project."""
    out = {
        "app.kubernetes.io/name": name,
        "app.kubernetes.io/component": component,
        "app.kubernetes.io/part-of": PART_OF,
    }
    if extra:
        out.update(extra)
    return out


def taint_toleration(taint: Any) -> dict[str, str] | None:
    """A toleration (operator Exists) for a node-group taint.

    ``taint`` is ``key[=value]:Effect`` text, a mapping or an object with ``key``/``effect``
    attributes (``infra.config.Taint``); None or empty gives None.
    """
    if not taint:
        return None
    if isinstance(taint, str):
        key_value, _, effect = taint.partition(":")
        key = key_value.partition("=")[0]
    elif isinstance(taint, Mapping):
        key, effect = str(taint.get("key", "")), str(taint.get("effect", ""))
    else:
        key, effect = str(getattr(taint, "key", "")), str(getattr(taint, "effect", ""))
    if not key:
        return None
    return {"key": key, "operator": "Exists", "effect": _effect(effect)}


def _effect(effect: str) -> str:
    # Pulumi/EKS spell effects NO_SCHEDULE; Kubernetes spells them NoSchedule.
    table = {
        "NO_SCHEDULE": "NoSchedule",
        "NO_EXECUTE": "NoExecute",
        "PREFER_NO_SCHEDULE": "PreferNoSchedule",
    }
    return table.get(effect, effect or "NoSchedule")


def tolerations(extra: Iterable[Any] = ()) -> list[dict[str, str]]:
    """The GPU toleration plus one per extra taint, without duplicates."""
    out = [dict(GPU_TOLERATION)]
    for taint in extra:
        tol = taint_toleration(taint)
        if tol and tol not in out:
            out.append(tol)
    return out


def stable_hash(data: Any, length: int = 8) -> str:
    """A short hex digest of ``data`` serialised canonically (sorted keys)."""
    text = json.dumps(data, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:length]


def dump_all_yaml(objects: Iterable[Mapping[str, Any]]) -> str:
    """Objects as one multi-document YAML text, keys in insertion order."""
    return yaml.safe_dump_all(
        [dict(o) for o in objects], sort_keys=False, default_flow_style=False, width=100
    )
