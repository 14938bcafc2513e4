"""The workloads part of the Pulumi program: one function the composition root calls.

    deploy(cfg, provider, depends_on=[device_plugins])

builds the settings from the stack config (``workloads.specs.settings.from_stack``) and creates
``TrainingImage`` (the stack's own ECR repository ``<project>-<stack>-training``; unless
``job.image`` pins one), ``TrainingOperator``, ``Etcd`` (etcd
backends), ``DebugTools`` (only with ``debugTools: true``), on ``sharedStorage.type: fsx`` stacks the ``CheckpointVolume`` (the
FSx PersistentVolume and the claim the job mounts; ``shared_storage`` is the
``infra.shared_storage.SharedStorage`` component) and, when ``job.enabled``, the ``PyTorchJob``
with the HF token from the secret config ``hfToken``, every Kubernetes resource on the
cluster's provider.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pulumi

from workloads.checkpoint_volume import CheckpointVolume, CheckpointVolumeArgs
from workloads.debug_tools import DebugTools, DebugToolsArgs
from workloads.etcd import Etcd, EtcdArgs
from workloads.pytorch_job import PyTorchJob, PyTorchJobArgs
from workloads.specs.image import repository_name
from workloads.specs.settings import from_stack
from workloads.training_image import TrainingImage, TrainingImageArgs
from workloads.training_operator import TrainingOperator, TrainingOperatorArgs

OUTPUT_TRAINING_IMAGE = "trainingImage"
"""The image the job and the debug DaemonSets run (``<registry>/<repo>:<tag>@<digest>``)."""
OUTPUT_TRAINING_REPOSITORY = "trainingImageRepository"
"""URL of the stack's ECR repository (stacks that build the image)."""
OUTPUT_JOB_NAME = "jobName"
OUTPUT_RDZV_ID = "rdzvId"
OUTPUT_TRAINING_OPERATOR = "trainingOperatorVersion"
PLACEHOLDER_IMAGE = "pending/training:built-by-the-stack"
"""Stands in for the built image while settings are validated (replaced by the Output)."""


@dataclass
class Deployed:
    """The workload components of a stack."""

    image: pulumi.Output[str]
    operator: TrainingOperator
    etcd: Etcd | None
    debug: DebugTools | None
    job: PyTorchJob | None
    training_image: TrainingImage | None
    checkpoint_volume: CheckpointVolume | None = None


def deploy(
    cfg: Any,
    provider: Any,
    depends_on: list[pulumi.Resource] | None = None,
    shared_storage: Any | None = None,
) -> Deployed | None:
    """Create the workloads of ``cfg`` (an ``infra.config.StackConfig``); None without a job.

    ``shared_storage`` (with ``file_system_id``, ``dns_name``, ``mount_name`` Outputs) is
    required when the stack's ``sharedStorage.type`` is fsx.
    """
    if cfg.job is None:
        return None
    w = from_stack(cfg, image=cfg.job.image or PLACEHOLDER_IMAGE, stack=cfg.stack)
    k8s_opts = pulumi.ResourceOptions(providers=[provider], depends_on=depends_on or [])
    checkpoint_volume = None
    if w.checkpoint_volume is not None:
        if shared_storage is None:
            raise ValueError("eks-fsdp:sharedStorage: type fsx, but no file system was created")
        checkpoint_volume = CheckpointVolume(
            "checkpoint-volume",
            CheckpointVolumeArgs(
                settings=w.checkpoint_volume,
                file_system_id=shared_storage.file_system_id,
                dns_name=shared_storage.dns_name,
                mount_name=shared_storage.mount_name,
            ),
            opts=k8s_opts,
        )
    training_image = None
    if cfg.job.image:
        image: pulumi.Output[str] = pulumi.Output.from_input(cfg.job.image)
    else:
        training_image = TrainingImage(
            "training-image",
            TrainingImageArgs(
                repository_name=repository_name(pulumi.get_project(), pulumi.get_stack())
            ),
        )
        image = training_image.image_ref
        pulumi.export(OUTPUT_TRAINING_REPOSITORY, training_image.repository_url)
    operator = TrainingOperator(
        "training-operator", TrainingOperatorArgs(settings=w.operator), opts=k8s_opts
    )
    etcd = Etcd("etcd", EtcdArgs(settings=w.etcd), opts=k8s_opts) if w.job.uses_etcd else None
    debug = (
        DebugTools("debug-tools", DebugToolsArgs(settings=w.debug, image=image), opts=k8s_opts)
        if w.debug_tools
        else None
    )
    job = None
    if w.job_enabled:
        job = PyTorchJob(
            "pytorch-job",
            PyTorchJobArgs(
                settings=w.job,
                image=image,
                etcd_host=w.etcd.host,
                hf_token=cfg.secrets.hf_token,
                depends_on=[
                    operator,
                    *([etcd] if etcd else []),
                    *([checkpoint_volume] if checkpoint_volume else []),
                ],
            ),
            opts=k8s_opts,
        )
    pulumi.export(OUTPUT_TRAINING_IMAGE, image)
    pulumi.export(OUTPUT_TRAINING_OPERATOR, operator.version)
    if job is not None:
        pulumi.export(OUTPUT_JOB_NAME, job.job_name)
        pulumi.export(OUTPUT_RDZV_ID, job.rdzv_id)
    return Deployed(
        image=image,
        operator=operator,
        etcd=etcd,
        debug=debug,
        job=job,
        training_image=training_image,
        checkpoint_volume=checkpoint_volume,
    )
