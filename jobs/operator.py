"""What the training operator writes on a PyTorchJob and its pods, as the job CLI reads it:
the pods' labels and the job's conditions (``JobNameLabel``, ``ReplicaTypeLabel``,
``ReplicaIndexLabel`` and the ``JobConditionType`` values in
``pkg/apis/kubeflow.org/v1/common_types.go`` at v1.9.4), the conditions folded into one phase."""

from __future__ import annotations

from typing import Any

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
