"""The environment the Kubeflow training operator injects into an elastic PyTorchJob's pods.

Read from the rendered PyTorchJob object itself, so the local run uses exactly what the cluster
would: PET_* variables for torchrun (it reads every option from ``PET_<OPTION>``) plus
PYTHONUNBUFFERED. Mirrors the operator's v1 elastic env builder: PET_RDZV_ID only when rdzvId is
set, PET_RDZV_CONF as ``k=v,k=v``, PET_NNODES as ``min:max``.
"""

from __future__ import annotations

from typing import Any


def operator_env(job: dict[str, Any]) -> dict[str, str]:
    """PET_* and PYTHONUNBUFFERED for the worker pods of ``job`` (a PyTorchJob dict)."""
    spec = job["spec"]
    elastic = spec.get("elasticPolicy") or {}
    replicas = spec["pytorchReplicaSpecs"]["Worker"]["replicas"]
    env = {"PYTHONUNBUFFERED": "1"}
    if "rdzvHost" in elastic:
        env["PET_RDZV_ENDPOINT"] = f"{elastic['rdzvHost']}:{elastic.get('rdzvPort', 29400)}"
    if "rdzvBackend" in elastic:
        env["PET_RDZV_BACKEND"] = elastic["rdzvBackend"]
    low = elastic.get("minReplicas", replicas)
    high = elastic.get("maxReplicas", replicas)
    env["PET_NNODES"] = f"{low}:{high}"
    if "maxRestarts" in elastic:
        env["PET_MAX_RESTARTS"] = str(elastic["maxRestarts"])
    if elastic.get("rdzvId"):
        env["PET_RDZV_ID"] = elastic["rdzvId"]
    if elastic.get("rdzvConf"):
        env["PET_RDZV_CONF"] = ",".join(f"{c['key']}={c['value']}" for c in elastic["rdzvConf"])
    if elastic.get("standalone"):
        env["PET_STANDALONE"] = ""
    if spec.get("nprocPerNode"):
        env["PET_NPROC_PER_NODE"] = str(spec["nprocPerNode"])
    return env


def container(job: dict[str, Any], name: str = "pytorch") -> dict[str, Any]:
    """The training container of the Worker template."""
    containers = job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"]
    for c in containers:
        if c["name"] == name:
            return dict(c)
    raise KeyError(f"no container named {name!r} in the Worker template")


def container_env(
    job: dict[str, Any], secrets: dict[tuple[str, str], str] | None = None
) -> dict[str, str]:
    """The container's own env; ``secretKeyRef`` values come from ``secrets`` or are left out."""
    out: dict[str, str] = {}
    for var in container(job).get("env") or []:
        if "value" in var:
            out[var["name"]] = str(var["value"])
            continue
        ref = (var.get("valueFrom") or {}).get("secretKeyRef")
        if ref and secrets and (ref["name"], ref["key"]) in secrets:
            out[var["name"]] = secrets[(ref["name"], ref["key"])]
    return out
