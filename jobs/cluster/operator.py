"""What the training operator writes on a PyTorchJob and its pods, as the job CLI reads it:
the pods' labels and the job's conditions (``JobNameLabel``, ``ReplicaTypeLabel``,
``ReplicaIndexLabel`` and the ``JobConditionType`` values in
``pkg/apis/kubeflow.org/v1/common_types.go`` at v1.9.4), the conditions folded into one phase."""

from __future__ import annotations

from typing import Any

from jobs.types import JobsError

JOB_LABEL = "training.kubeflow.org/job-name"
TYPE_LABEL = "training.kubeflow.org/replica-type"
INDEX_LABEL = "training.kubeflow.org/replica-index"
"""The replica index: pod ``<job>-worker-<index>`` (what ``logs --rank`` selects)."""
OPERATOR_PHASES = ("Created", "Running", "Restarting", "Succeeded", "Failed", "Suspended")
"""The operator's condition types; the last true one is the job's phase."""


def phase_of(job: dict[str, Any]) -> str:
    """The last true operator condition (``Pending`` before the operator saw the job)."""
    phase = "Pending"
    for cond in (job.get("status") or {}).get("conditions") or []:
        if cond.get("status") == "True" and cond.get("type") in OPERATOR_PHASES:
            phase = cond["type"]
    return "Pending" if phase == "Created" else phase


def worker_spec(job: dict[str, Any]) -> dict[str, Any]:
    """The job's ``Worker`` replica spec; ``JobsError`` (one line) for a PyTorchJob without one
    (a Master-only job made by other means: this CLI makes elastic, Worker-only jobs)."""
    meta = job.get("metadata") or {}
    specs = (job.get("spec") or {}).get("pytorchReplicaSpecs") or {}
    worker = specs.get("Worker")
    if not isinstance(worker, dict):
        raise JobsError(
            f"pytorchjob {meta.get('namespace', '')}/{meta.get('name', '')} has no Worker replica "
            f"({', '.join(specs) or 'no replicas'}): not a job of this CLI; "
            f"kubectl describe pytorchjob {meta.get('name', '')}"
        )
    return worker


def worker_container(job: dict[str, Any]) -> dict[str, Any]:
    """The Worker pod template's first container (``{}`` when the template has none)."""
    containers = ((worker_spec(job).get("template") or {}).get("spec") or {}).get("containers")
    return containers[0] if containers and isinstance(containers[0], dict) else {}
