"""When a cluster job's capacity ends: the capacity-block ConfigMap its workers read.

A job on a capacity-block node group gets ``EKS_FSDP_CAPACITY_ENDS_AT`` from the ConfigMap
``capacity-block-<group>`` (key ``scaleDownAt``; ``workloads.specs.pytorchjob.container_env``),
which the stack writes and updates for each block (``workloads.specs.capacity``). ``eks-fsdp
jobs status`` reads the same ConfigMap, named by the job's own container env, so what it shows
is what the workers see (``jobs.output.capacity_text``: "ends in 2d3h (...)").
"""

from __future__ import annotations

from typing import Any

from workloads.specs import pytorchjob as pj


def configmap_of(job: dict[str, Any]) -> tuple[str, str] | None:
    """(ConfigMap, key) the job's workers read the capacity end from; None for other jobs."""
    template = job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]
    for var in template["containers"][0].get("env") or []:
        if var.get("name") == pj.CAPACITY_ENDS_AT_ENV:
            ref = (var.get("valueFrom") or {}).get("configMapKeyRef") or {}
            if ref.get("name") and ref.get("key"):
                return str(ref["name"]), str(ref["key"])
    return None


def ends_at(core: Any, job: dict[str, Any], namespace: str) -> str:
    """The capacity end the job's workers read (ISO 8601 UTC); "" when there is none (no
    capacity block, no window in the stack yet, or no right to read ConfigMaps)."""
    found = configmap_of(job)
    if found is None:
        return ""
    name, key = found
    try:
        cm = core.read_namespaced_config_map(name, namespace)
    except Exception:  # optional, as for the workers: a status without it is still a status
        return ""
    return str((cm.data or {}).get(key) or "")
