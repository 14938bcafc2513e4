"""The workloads part of the Pulumi program: the platform jobs run on, never a job.

    deploy(cfg, provider, depends_on=[device_plugins])

creates, on a stack with GPU nodegroups, every Kubernetes resource on the cluster's provider:
``TrainingImage`` (the stack's own ECR repository ``<project>-<stack>-training``),
``TrainingOperator``, the shared ``Etcd`` (every job's rendezvous keys live under its own id)
with a NetworkPolicy admitting the pods of any job, the Hugging Face token Secret (from the
secret config ``hfToken``), ``DebugTools`` (only with ``debugTools: true``) and, on
``sharedStorage.type: fsx`` stacks, the ``CheckpointVolume`` (the FSx PersistentVolume and the
claim jobs mount; ``shared_storage`` is the ``infra.shared_storage.SharedStorage``
component) and, with ``trainerV2: true``, ``TrainerV2`` (Kubeflow Trainer v2 and the torch
runtime ``api: v2`` job files name). Jobs are submitted apart from the stack (``eks-fsdp jobs``, docs/jobs.md), so a
``pulumi up`` never replaces, deletes or re-creates one; the stack exports what a job needs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from workloads.checkpoint_volume import CheckpointVolume, CheckpointVolumeArgs
from workloads.debug_tools import DebugTools, DebugToolsArgs
from workloads.etcd import Etcd, EtcdArgs
from workloads.k8s_objects import apply_object
from workloads.specs import teams
from workloads.specs.image import repository_name
from workloads.specs.settings import HF_TOKEN_KEY
from workloads.specs.stack import etcd_clients_policy, platform
from workloads.trainer import TrainerV2
from workloads.training_image import TrainingImage, TrainingImageArgs
from workloads.training_operator import TrainingOperator, TrainingOperatorArgs

OUTPUT_TRAINING_IMAGE = "trainingImage"
"""The image jobs run by default (``<registry>/<repo>:<tag>@<digest>``)."""
OUTPUT_TRAINING_REPOSITORY = "trainingImageRepository"
"""URL of the stack's ECR repository."""
OUTPUT_TRAINING_OPERATOR = "trainingOperatorVersion"
OUTPUT_JOBS_NAMESPACE = "jobsNamespace"
"""The namespace prepared for jobs (etcd, the checkpoint claim, the token Secret)."""
OUTPUT_CHECKPOINT_CLAIMS = "checkpointClaims"
"""Claims a job file may name as ``checkpointClaim`` (empty without shared storage)."""
OUTPUT_ETCD_ENDPOINT = "etcdEndpoint"
"""``host:port`` of the shared etcd (a job's ``rdzvBackend: etcd``)."""
OUTPUT_HF_TOKEN_SECRET = "hfTokenSecret"
"""Name of the Secret holding the Hugging Face token (stacks with ``hfToken``)."""
HF_TOKEN_SECRET = teams.HF_TOKEN_SECRET
"""The Secret's name: a job file's default ``hfTokenSecretName``; every team's namespace gets
one of that name with the same token (``workloads.team``)."""
OLD_JOB_COMPONENT = ("eks-fsdp:workloads:PyTorchJob", "pytorch-job")
"""(type, name) of the component that owned the Secret while the stack declared the job
(``workloads/pytorch_job.py``, removed when jobs left the stack)."""
OLD_HF_TOKEN_NAME = "pytorch-job-hf-token"
"""The Secret's logical name as that component's child (``f"{name}-hf-token"``)."""
PLACEHOLDER_IMAGE = "pending/training:built-by-the-stack"
"""Stands in for the built image while settings are validated (replaced by the Output)."""


@dataclass
class Deployed:
    """The workload components of a stack."""

    image: pulumi.Output[str]
    operator: TrainingOperator
    etcd: Etcd
    debug: DebugTools | None
    training_image: TrainingImage
    checkpoint_volume: CheckpointVolume | None = None
    hf_token: k8s.core.v1.Secret | None = None
    trainer_v2: TrainerV2 | None = None


def deploy(
    cfg: Any,
    provider: Any,
    depends_on: list[pulumi.Resource] | None = None,
    shared_storage: Any | None = None,
) -> Deployed | None:
    """Create the platform of ``cfg`` (an ``infra.config.StackConfig``); None without a GPU
    nodegroup (nothing to run jobs on).

    ``shared_storage`` (with ``file_system_id``, ``dns_name``, ``mount_name`` Outputs) is
    required when the stack's ``sharedStorage.type`` is fsx.
    """
    if not cfg.gpu_node_groups:
        return None
    p = platform(cfg, image=PLACEHOLDER_IMAGE)
    k8s_opts = pulumi.ResourceOptions(providers=[provider], depends_on=depends_on or [])
    checkpoint_volume = None
    if p["checkpoint_volume"] is not None:
        if shared_storage is None:
            raise ValueError("eks-fsdp:sharedStorage: type fsx, but no file system was created")
        checkpoint_volume = CheckpointVolume(
            "checkpoint-volume",
            CheckpointVolumeArgs(
                settings=p["checkpoint_volume"],
                file_system_id=shared_storage.file_system_id,
                dns_name=shared_storage.dns_name,
                mount_name=shared_storage.mount_name,
            ),
            opts=k8s_opts,
        )
    training_image = TrainingImage(
        "training-image",
        TrainingImageArgs(
            repository_name=repository_name(pulumi.get_project(), pulumi.get_stack())
        ),
    )
    image = training_image.image_ref
    operator = TrainingOperator(
        "training-operator", TrainingOperatorArgs(settings=p["operator"]), opts=k8s_opts
    )
    etcd = Etcd("etcd", EtcdArgs(settings=p["etcd"]), opts=k8s_opts)
    trainer_v2 = TrainerV2("trainer-v2", opts=k8s_opts) if cfg.trainer_v2 else None
    # NetworkPolicies add up: this one admits the pods of any job of the project to etcd.
    apply_object("etcd", etcd_clients_policy(p["etcd"]), pulumi.ResourceOptions(parent=etcd))
    hf_token = None
    if cfg.secrets.hf_token is not None:
        # The same Secret the job's component created before: a stack updated from then moves
        # it in its state (the alias) instead of creating a second "hf-token", which the API
        # server would refuse (AlreadyExists), and deleting the old one.
        old_parent = pulumi.create_urn(OLD_JOB_COMPONENT[1], OLD_JOB_COMPONENT[0])
        hf_token = k8s.core.v1.Secret(
            "hf-token",
            metadata={"name": HF_TOKEN_SECRET, "namespace": p["namespace"]},
            type="Opaque",
            string_data={HF_TOKEN_KEY: pulumi.Output.secret(cfg.secrets.hf_token)},
            opts=pulumi.ResourceOptions.merge(
                k8s_opts,
                pulumi.ResourceOptions(
                    aliases=[pulumi.Alias(name=OLD_HF_TOKEN_NAME, parent=old_parent)]
                ),
            ),
        )
        pulumi.export(OUTPUT_HF_TOKEN_SECRET, HF_TOKEN_SECRET)
    debug = (
        DebugTools("debug-tools", DebugToolsArgs(settings=p["debug"], image=image), opts=k8s_opts)
        if p["debug"] is not None
        else None
    )
    pulumi.export(OUTPUT_TRAINING_IMAGE, image)
    pulumi.export(OUTPUT_TRAINING_REPOSITORY, training_image.repository_url)
    pulumi.export(OUTPUT_TRAINING_OPERATOR, operator.version)
    pulumi.export(OUTPUT_JOBS_NAMESPACE, p["namespace"])
    pulumi.export(
        OUTPUT_CHECKPOINT_CLAIMS,
        [p["checkpoint_volume"].claim_name] if p["checkpoint_volume"] is not None else [],
    )
    pulumi.export(OUTPUT_ETCD_ENDPOINT, etcd.host.apply(lambda h: f"{h}:{p['etcd'].client_port}"))
    return Deployed(
        image=image,
        operator=operator,
        etcd=etcd,
        debug=debug,
        training_image=training_image,
        checkpoint_volume=checkpoint_volume,
        hf_token=hf_token,
        trainer_v2=trainer_v2,
    )
