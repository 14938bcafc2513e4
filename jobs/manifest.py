"""What a submission creates, from the pure builders (``workloads.specs``): the PyTorchJob, its
workers' NetworkPolicy and, on a cluster, the job's record (a ConfigMap kept after ``cancel``
so that ``resume`` can rebuild the job); the fresh rendezvous id of each submission."""

from __future__ import annotations

import secrets
import time
from typing import Any

from workloads.specs import pytorchjob as pj
from workloads.specs.common import K8sObject, labels
from workloads.specs.settings import JobSettings

RECORD_SUFFIX = "-job"
"""The record ConfigMap of job ``<name>`` is ``<name>-job``."""
RECORD_LABEL = "eks-fsdp/job-record"
"""Label of a record ConfigMap; its value is the job's name."""
JOB_FILE_KEY = "job.yaml"
GENERATION_KEY = "generation"
RDZV_ID_KEY = "rdzvId"
IMAGE_KEY = "image"
SUBMITTED_KEY = "submitted"
CANCELLED_KEY = "cancelled"
"""Present (a time) once ``cancel`` deleted the job."""
PART_OF_SELECTOR = "app.kubernetes.io/part-of=eks-fsdp"


def fresh_rdzv_id(job: JobSettings) -> str:
    """``<name>-g<generation>-<hash of the settings>-<6 random hex>``: a new id for every
    submission, so a job submitted again under a name that was used before never meets the
    closed rendezvous of its predecessor (a closed id stays closed; docs/adr/0005), also when
    its settings are the same."""
    return f"{pj.rdzv_id(job.replace(rdzv_id=''))}-{secrets.token_hex(3)}"


def record_name(name: str) -> str:
    return f"{name}{RECORD_SUFFIX}"


def pytorchjob(job: JobSettings, etcd_host: str) -> K8sObject:
    """The PyTorchJob a submission creates (the builders' object, unchanged)."""
    return pj.pytorchjob(job, etcd_host)


def network_policy(job: JobSettings, metrics_namespace: str | None) -> K8sObject:
    """Ingress to the job's workers only from its own pods (and the metrics scraper)."""
    return pj.network_policy(job, metrics_namespace)


def owned_by(obj: K8sObject, owner: dict[str, Any]) -> K8sObject:
    """``obj`` with an ownerReference to the created PyTorchJob ``owner``: the garbage
    collector deletes it with the job (``cancel``, the operator's TTL)."""
    meta = owner["metadata"]
    obj = {**obj, "metadata": {**obj["metadata"]}}
    obj["metadata"]["ownerReferences"] = [
        {
            "apiVersion": owner["apiVersion"],
            "kind": owner["kind"],
            "name": meta["name"],
            "uid": meta["uid"],
            "blockOwnerDeletion": False,
        }
    ]
    return obj


def record(
    job: JobSettings, job_file: str, *, generation: int, rdzv_id: str, image: str
) -> K8sObject:
    """The job's record: its resolved job file and submission, kept when the job is deleted."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": record_name(job.name),
            "namespace": job.namespace,
            "labels": labels(job.name, pj.COMPONENT, {RECORD_LABEL: job.name}),
        },
        "data": {
            JOB_FILE_KEY: job_file,
            GENERATION_KEY: str(generation),
            RDZV_ID_KEY: rdzv_id,
            IMAGE_KEY: job.image if image is None else image,
            SUBMITTED_KEY: time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        },
    }
