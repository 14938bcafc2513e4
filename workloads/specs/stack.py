"""A stack's workloads, end to end: stack file -> settings -> every Kubernetes object.

The renderer, the local runner and the tests go through here; the Pulumi program builds the
same settings with ``settings.from_stack`` from the config it reads itself.
"""

from __future__ import annotations

from typing import Any

from workloads.specs import debug, etcd, operator, pytorchjob, storage
from workloads.specs.common import K8sObject
from workloads.specs.image import local_reference
from workloads.specs.observability import ObservabilitySettings
from workloads.specs.settings import Workloads, from_stack


def training_image(stack_cfg: Any) -> str:
    """The stack's training image: its ``job.image``, else the content-tagged local build
    (registry-less: the local runner's name; ``workloads.render`` asks for a registry)."""
    image = getattr(stack_cfg.job, "image", None) if stack_cfg.job else None
    return image or local_reference()


def load(stack: str, *, image: str | None = None, generation: int | None = None) -> Workloads:
    """Settings of every workload of ``Pulumi.<stack>.yaml`` (``ConfigError``/``ValueError``)."""
    from infra.config import load_stack_file

    stack_cfg = load_stack_file(stack)
    if stack_cfg.job is None:
        raise ValueError(f"eks-fsdp:job: stack {stack!r} declares no job")
    w = from_stack(
        stack_cfg, image=image or training_image(stack_cfg), stack=stack, generation=generation
    )
    check_train_flags(w)
    return w


def check_train_flags(w: Workloads, where: str = "eks-fsdp:job") -> None:
    """Parse the job's ``training.finetune`` flags with the training CLI (pure Python, no torch).

    Raises ``ValueError`` with one line naming the flag (after ``where``: the stack key or the
    job file), before any object is built.
    """
    from training.config import ConfigError, parse_args

    flags = pytorchjob.finetune_flags(pytorchjob.train_command(w.job))
    try:
        parse_args(flags)
    except ConfigError as err:
        raise ValueError(f"{where}: {err}") from None


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
        out["pytorchjob"] = [pytorchjob.pytorchjob(w.job, w.etcd.host)]
        out["workers-network-policy"] = [pytorchjob.network_policy(w.job, metrics_namespace)]
    if w.debug_tools:
        out["debug-tools"] = debug.objects(w.debug)
    return out


def operator_kustomization(w: Workloads) -> dict[str, Any]:
    """The training operator's kustomization (applied with ``kubectl apply -k``)."""
    return operator.kustomization(w.operator)
