"""When a capacity block ends, as a ConfigMap a job's pods can read (pure data, no pulumi).

One ConfigMap per capacity-block node group, in every namespace jobs run in (the jobs
namespace, each team's: ``configmaps``), named
``capacity-block-<group>``, with the keys ``start``, ``end`` and ``scaleDownAt`` (ISO 8601 UTC)
and ``nodeGroup``. A pod reads them with ``env[].valueFrom.configMapKeyRef`` (``optional: true``
for groups without a block); the stack scales the group to zero at ``scaleDownAt``
(``infra.capacity_schedule``), so that is the time a job must have checkpointed and exited by.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from workloads.specs.common import check_dns_label

LABEL = "eks-fsdp/capacity-block"
"""Label on every capacity-block ConfigMap (value: the node group)."""
KEYS = ("start", "end", "scaleDownAt")


def configmap_name(node_group: str) -> str:
    """The ConfigMap of ``node_group``'s capacity block."""
    return f"capacity-block-{node_group}"


def window(group: Any) -> dict[str, str]:
    """``start``, ``end``, ``scaleDownAt`` (ISO 8601 UTC) of a capacity-block group
    (``infra.config.GpuNodeGroupConfig`` with a ``capacity_block``): the values
    ``infra.capacity_schedule.output_value`` exports (a test checks)."""
    from infra.config.nodegroups import iso_utc

    block = group.capacity_block
    if block is None:
        raise ValueError(f"group: {group.name} has no capacityBlock window")
    return {
        "start": iso_utc(block.start),
        "end": iso_utc(block.end),
        "scaleDownAt": iso_utc(block.scale_down_at),
    }


def configmaps(groups: Any, namespace: str) -> list[dict[str, Any]]:
    """The ConfigMap of every capacity-block group of ``groups`` in ``namespace`` (none for
    groups without a block)."""
    return [
        capacity_block_configmap(g.name, window(g), namespace)
        for g in groups
        if g.capacity_block is not None
    ]


def capacity_block_configmap(
    node_group: str, window: Mapping[str, str], namespace: str
) -> dict[str, Any]:
    """The ConfigMap for ``node_group`` whose block runs as ``window`` (start, end, scaleDownAt)."""
    check_dns_label(node_group, "node_group")
    check_dns_label(namespace, "namespace")
    missing = [k for k in KEYS if not window.get(k)]
    if missing:
        raise ValueError(f"window: missing {', '.join(missing)}")
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": configmap_name(node_group),
            "namespace": namespace,
            "labels": {LABEL: node_group},
        },
        "data": {"nodeGroup": node_group, **{k: window[k] for k in KEYS}},
    }
