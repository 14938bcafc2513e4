"""A stack's workloads, end to end: stack file + job file -> settings -> every Kubernetes object.

The cluster stack declares the platform only (``platform``: the training operator, etcd, the
debug tools, the checkpoint volume); a job comes from a job file (``jobs.file``) bound to its
stack (``job_workloads``). ``load(stack)`` renders a stack with its example job
(``jobs/examples/<stack>.yaml``) or any job file: the renderer, the scanner, the local runner,
the planner and the tests go through here; the Pulumi program builds ``platform`` from the
config it reads itself.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from infra import versions
from workloads.specs import debug, etcd, operator, pytorchjob, storage
from workloads.specs.common import PART_OF, K8sObject, labels
from workloads.specs.image import local_reference
from workloads.specs.observability import ObservabilitySettings
from workloads.specs.settings import (
    DebugSettings,
    EtcdSettings,
    OperatorSettings,
    Workloads,
    from_stack,
)
from workloads.specs.storage import CheckpointVolumeSettings

REPO_ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = REPO_ROOT / "jobs" / "examples"
"""One example job file per stack (``jobs/examples/<stack>.yaml``)."""
JOBS_NAMESPACE = "default"
"""The namespace the stack prepares for jobs (etcd, the checkpoint claim, the token Secret)."""


def example_job(stack: str) -> Path:
    """The example job file of ``stack``."""
    return EXAMPLES / f"{stack}.yaml"


def training_image(stack_cfg: Any) -> str:
    """The job's training image: its ``image``, else the content-tagged local build
    (registry-less: the local runner's name; ``workloads.render`` asks for a registry)."""
    image = getattr(stack_cfg.job, "image", None) if stack_cfg.job else None
    return image or local_reference()


def job_workloads(
    job: Any, *, image: str | None = None, generation: int = 1, local_paths: bool = False
) -> Workloads:
    """The settings of a job file (``jobs.file.JobFile``) on its stack, its training flags
    checked with ``training.config``; ``jobs.file.JobFileError`` names the file's key. File
    flags name files on the pods (the shared file system) unless ``local_paths`` (a local
    run): they are never looked up on the submitting machine's disk for a cluster job."""
    from jobs.file import JobFileError

    try:
        w = from_stack(
            job.platform,
            image=image or training_image(job.platform),
            stack=job.stack,
            generation=generation,
        )
        check_train_flags(w, where=job.source, local_paths=local_paths)
    except ValueError as err:
        raise JobFileError(job.locate(str(err.args[0] if err.args else err))) from None
    return w


def load(
    stack: str,
    *,
    job: Path | str | None = None,
    image: str | None = None,
    generation: int | None = None,
) -> Workloads:
    """Settings of every workload of ``Pulumi.<stack>.yaml`` running ``job`` (default: the
    stack's example job); ``ConfigError``/``ValueError`` (``JobFileError``) on bad input."""
    from infra.config import load_stack_file
    from jobs.file import load as load_job

    load_stack_file(stack)  # a missing or invalid stack file is named first
    path = Path(job) if job is not None else example_job(stack)
    if job is None and not path.is_file():
        raise ValueError(f"stack {stack!r}: no job file given and no {path.relative_to(REPO_ROOT)}")
    job_file = load_job(path, stack=stack)
    return job_workloads(job_file, image=image, generation=generation or 1)


def check_train_flags(
    w: Workloads, where: str = "eks-fsdp:job", *, local_paths: bool = True
) -> None:
    """Parse the job's ``training.finetune`` flags with the training CLI (pure Python, no torch).

    Raises ``ValueError`` with one line naming the flag (after ``where``: the job file), before
    any object is built.
    """
    from training.config import ConfigError, parse_args

    flags = pytorchjob.finetune_flags(pytorchjob.train_command(w.job))
    try:
        parse_args(flags, local_paths=local_paths)
    except ConfigError as err:
        raise ValueError(f"{where}: {err}") from None


def platform(stack_cfg: Any, *, image: str) -> dict[str, Any]:
    """What the cluster stack prepares for jobs (no job): the training operator, the shared
    etcd (every job's keys under its own rendezvous id; its NetworkPolicy admits the pods of
    any job of the project), the debug DaemonSets and, on fsx stacks, the checkpoint claim
    every job mounts. Keys: ``operator``, ``etcd``, ``debug`` (None unless ``debugTools``),
    ``checkpoint_volume`` (None without FSx), ``namespace``, ``image``."""
    from infra.config import DEFAULT_CHECKPOINT_CLAIM

    taints = tuple(t for g in stack_cfg.gpu_node_groups if (t := getattr(g, "taint", None)))
    instance_types = tuple(sorted({g.instance_type for g in stack_cfg.gpu_node_groups}))
    storage_cfg = stack_cfg.shared_storage
    volume = None
    if storage_cfg.is_fsx:
        volume = CheckpointVolumeSettings(
            claim_name=DEFAULT_CHECKPOINT_CLAIM,
            namespace=JOBS_NAMESPACE,
            capacity_gib=storage_cfg.storage_capacity_gib,
        )
    return {
        "namespace": JOBS_NAMESPACE,
        "image": image,
        "operator": OperatorSettings(),
        "etcd": EtcdSettings(namespace=JOBS_NAMESPACE, image=versions.ETCD_IMAGE),
        "debug": DebugSettings(
            image=image,
            namespace=JOBS_NAMESPACE,
            instance_types=instance_types,
            extra_taints=taints,
        )
        if stack_cfg.debug_tools
        else None,
        "checkpoint_volume": volume,
    }


def etcd_clients_policy(s: EtcdSettings) -> K8sObject:
    """Ingress to the shared etcd's client port from the pods of any job of the project (the
    pod templates carry ``app.kubernetes.io/component: training`` and ``part-of: eks-fsdp``).
    NetworkPolicies add up: this widens ``etcd.network_policy``, which admits the jobs it
    names, to every job submitted apart from the stack. Selects the etcd pods as
    ``workloads.specs.etcd`` labels them."""
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {
            "name": f"{s.name}-jobs",
            "namespace": s.namespace,
            "labels": labels(s.name, etcd.COMPONENT),
        },
        "spec": {
            "podSelector": {
                "matchLabels": {
                    "app.kubernetes.io/name": s.name,
                    "app.kubernetes.io/component": etcd.COMPONENT,
                }
            },
            "policyTypes": ["Ingress"],
            "ingress": [
                {
                    "from": [
                        {
                            "podSelector": {
                                "matchLabels": {
                                    "app.kubernetes.io/component": pytorchjob.COMPONENT,
                                    "app.kubernetes.io/part-of": PART_OF,
                                }
                            }
                        }
                    ],
                    "ports": [{"protocol": "TCP", "port": s.client_port}],
                }
            ],
        },
    }


def objects_by_component(
    w: Workloads, file_system: storage.FileSystemRef | None = None
) -> dict[str, list[K8sObject]]:
    """Kubernetes objects grouped by the component (and file) they belong to.

    ``file_system`` fills the checkpoint volume of an fsx stack (placeholders when None).
    """
    out: dict[str, list[K8sObject]] = {}
    if w.checkpoint_volume is not None:
        fs = file_system or storage.placeholder_file_system(None)
        out["checkpoint-volume"] = storage.objects(w.checkpoint_volume, fs)
    if w.job.uses_etcd:
        out["etcd"] = etcd.objects(w.etcd)
    if w.job_enabled:
        metrics_namespace = ObservabilitySettings().namespace if w.job.metrics_port else None
        out["jobs-service-account"] = [pytorchjob.service_account(w.job.namespace)]
        out["pytorchjob"] = [pytorchjob.pytorchjob(w.job, w.etcd.host)]
        out["workers-network-policy"] = [pytorchjob.network_policy(w.job, metrics_namespace)]
    if w.debug_tools:
        out["debug-tools"] = debug.objects(w.debug)
    return out


def operator_kustomization(w: Workloads) -> dict[str, Any]:
    """The training operator's kustomization (applied with ``kubectl apply -k``)."""
    return operator.kustomization(w.operator)
