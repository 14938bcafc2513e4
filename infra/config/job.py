"""The job's schema (``JobConfig``, ``parse_job``): what a job file (``jobs.file``) carries,
checked against the stack's GPU nodegroups. A stack file no longer has a ``job`` section
(``infra.config.stack`` refuses one); jobs are submitted apart from the cluster."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from infra.config.fields import (
    _DNS_LABEL,
    _bool,
    _choice,
    _fail,
    _int,
    _opt_int,
    _opt_str,
    _str,
    _str_list,
)
from infra.config.nodegroups import GpuNodeGroupConfig
from infra.config.preflight_key import preflight_key

MAX_JOB_NAME = 50
"""A job name's longest: its pods and their Services are ``<name>-worker-<index>``, DNS
labels of at most 63 characters."""
_JOB_NAME = re.compile(r"^[a-z]([-a-z0-9]{0,48}[a-z0-9])?$")
"""A DNS-1035 label (starts with a letter): the training operator's webhook refuses any other
PyTorchJob name (``apimachineryvalidation.NameIsDNS1035Label`` in
``pkg/webhooks/pytorch/pytorchjob_webhook.go``, kubeflow/trainer v1.9.4)."""
RDZV_BACKENDS = ("etcd", "c10d")
SHARDING_STRATEGIES = ("FULL_SHARD", "SHARD_GRAD_OP", "HYBRID_SHARD", "NO_SHARD")
DEVICES = ("cuda", "cpu")
NCCL_DEBUG_LEVELS = ("VERSION", "WARN", "INFO", "TRACE")
"""``NCCL_DEBUG`` values NCCL reads (NCCL docs, "Environment Variables", NCCL_DEBUG: VERSION,
WARN, INFO, TRACE; src/debug.cc ``ncclDebugInit``)."""

_REPO_ID = re.compile(r"(\b[\w\-.]{1,96}\b/)?\b[\w\-.]{1,96}\b", re.ASCII)
"""huggingface_hub's ``REPO_ID_REGEX`` (``utils/_validators.py``, v1.x/2.x): an optional
``namespace/``, then a name of ASCII letters, digits, ``-``, ``_``, ``.``; with
``validate_repo_id``'s other rules (``repo_problem``), what the Hub accepts before any request."""


def repo_problem(name: str) -> str | None:
    """Why ``name`` cannot be a Hugging Face repo id (huggingface_hub ``validate_repo_id``:
    1-96 characters a-z A-Z 0-9 ``-_.`` per part, at most one ``/``, no ``--`` or ``..``, no
    ``.git`` ending, no leading or trailing ``-``/``.``); None when it can, or when ``name`` is a
    local or remote folder (starts with ``/``, ``.``, ``~`` or holds ``://``)."""
    if "://" in name or name.startswith(("/", ".", "~")):
        return None
    if name.count("/") > 1:
        return "is not a Hugging Face repo id (namespace/name) nor an absolute path"
    if not _REPO_ID.fullmatch(name) or any(
        p[:1] in "-." or p[-1:] in "-." for p in name.split("/")
    ):
        return (
            "is not a Hugging Face repo id: letters, digits, '-', '_' and '.' only, at most 96 "
            "per part, not starting or ending with '-' or '.'"
        )
    if "--" in name or ".." in name or name.endswith(".git"):
        return "is not a Hugging Face repo id: no '--' or '..', no '.git' ending"
    return None


_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


@dataclass(frozen=True, kw_only=True)
class JobConfig:
    """The fine-tuning job of a job file; the workloads build the PyTorchJob from it."""

    enabled: bool = True
    """Whether the job is rendered (always, for a job file)."""
    name: str = "llama-finetune"
    """PyTorchJob name (DNS label)."""
    node_group: str
    """Name of the GPU nodegroup the workers run on."""
    workers: int
    """Worker pods (one per node) the job asks for (elastic max)."""
    min_workers: int
    """Fewest workers the job keeps running with (elastic min)."""
    max_restarts: int = 3
    """torchrun ``--max_restarts``."""
    rdzv_backend: str = "etcd"
    """Rendezvous backend: ``etcd`` (legacy, recovers from lost workers) | ``c10d``."""
    model: str = "meta-llama/Llama-2-7b-hf"
    """Hugging Face model name or a preset name of ``training``."""
    dataset: str = "samsum_dataset"
    """Dataset name understood by ``training``."""
    num_epochs: int = 1
    """Training epochs."""
    batch_size: int = 1
    """Per-GPU batch size."""
    context_length: int = 4096
    """Tokens per sample."""
    sharding_strategy: str = "FULL_SHARD"
    """FULL_SHARD | SHARD_GRAD_OP | HYBRID_SHARD | NO_SHARD."""
    max_train_step: int | None = None
    """Stop after this many optimizer steps (None: run all epochs)."""
    checkpoint_every: int | None = None
    """Checkpoint every N steps (None: the training package's default)."""
    extra_args: tuple[str, ...] = ()
    """Additional ``--flag=value`` arguments for ``python -m training.finetune``."""
    image: str | None = None
    """Training image; None = built by the stack and pushed to ECR."""
    hf_token_secret_name: str = "hf-token"
    """Kubernetes Secret holding the Hugging Face token."""
    device: str = "cuda"
    """``cuda`` on the cluster; ``cpu`` for the local run of the dev stack."""
    generation: int = 1
    """Submission counter (part of the rendezvous id); ``python -m jobs resume`` bumps it."""
    checkpoint_claim: str | None = None
    """PVC every worker mounts at the checkpoint folder (then the command carries ``--resume``).
    With ``sharedStorage.type: fsx`` the stack creates this claim (default
    ``DEFAULT_CHECKPOINT_CLAIM``); otherwise it must already exist. None = an emptyDir per pod."""
    namespace: str = "default"
    """Namespace of the job, its etcd, its Secret and its checkpoint claim (must exist)."""
    preflight: bool = False
    """Run ``training.preflight`` before step 1 of every (re)start (parsed default: on when the
    job's nodegroup attaches EFA)."""
    preflight_expect: str = ""
    """More ``training.preflight`` thresholds (``efa=32,gpus=8``) over the catalog's: the job
    file's ``preflight: {expect: ...}`` (``infra.config.preflight_key``)."""
    nccl_debug: str = "WARN"
    """``NCCL_DEBUG`` of the workers: WARN logs NCCL's errors only; INFO (init, topology, the
    network chosen) on request, for a job whose network is in question."""


def parse_job(
    obj: Mapping[str, Any], groups: tuple[GpuNodeGroupConfig, ...], *, path: str = "job"
) -> JobConfig:
    """A job file's keys (``jobs.file``) checked against the platform's GPU nodegroups;
    unknown keys are the caller's to refuse. ``ConfigError`` names ``eks-fsdp:<path>.<key>``."""
    if not groups:
        raise _fail(f"{path}.nodeGroup", "there is no GPU nodegroup to run the job on")
    enabled = _bool(obj.get("enabled", True), f"{path}.enabled")
    group_name = _str(obj.get("nodeGroup", groups[0].name), f"{path}.nodeGroup")
    by_name = {g.name: g for g in groups}
    if group_name not in by_name:
        raise _fail(
            f"{path}.nodeGroup", f"{group_name!r} is not a GPU nodegroup ({', '.join(by_name)})"
        )
    group = by_name[group_name]
    workers = _int(obj.get("workers", group.desired_size), f"{path}.workers", minimum=1)
    if workers > group.max_size:
        raise _fail(
            f"{path}.workers",
            f"{workers} is greater than maxSize {group.max_size} of nodegroup {group_name}",
        )
    min_workers = _int(obj.get("minWorkers", workers), f"{path}.minWorkers", minimum=1)
    if min_workers > workers:
        raise _fail(f"{path}.minWorkers", f"{min_workers} is greater than workers {workers}")
    name = _str(obj.get("name", "llama-finetune"), f"{path}.name")
    if len(name) > MAX_JOB_NAME:
        raise _fail(
            f"{path}.name",
            f"{name!r} is {len(name)} characters: at most {MAX_JOB_NAME} (pods are "
            "<name>-worker-<i>, 63 at most)",
        )
    if not _JOB_NAME.match(name):
        raise _fail(
            f"{path}.name",
            f"{name!r} is not a DNS-1035 label (a-z, 0-9, '-'; starts with a letter, ends with a "
            "letter or digit)",
        )
    extra = _str_list(obj.get("extraArgs", []), f"{path}.extraArgs")
    for i, arg in enumerate(extra):
        if not arg.startswith("--"):
            raise _fail(f"{path}.extraArgs[{i}]", f"{arg!r} is not a --flag or --flag=value")
    namespace = _str(obj.get("namespace", "default"), f"{path}.namespace")
    if not _DNS_LABEL.match(namespace):
        raise _fail(f"{path}.namespace", f"{namespace!r} is not a DNS label (a-z, 0-9, '-')")
    claim = _opt_str(obj.get("checkpointClaim"), f"{path}.checkpointClaim")
    if claim is not None and (len(claim) > 253 or not _DNS_SUBDOMAIN.match(claim)):
        raise _fail(
            f"{path}.checkpointClaim",
            f"{claim!r} is not a DNS-1123 name (a-z, 0-9, '-', '.'; at most 253 characters)",
        )
    default = JobConfig(node_group=group_name, workers=workers, min_workers=min_workers)
    model = _str(obj.get("model", default.model), f"{path}.model")
    if (problem := repo_problem(model)) is not None:
        raise _fail(f"{path}.model", f"{model!r} {problem}")
    return JobConfig(
        enabled=enabled,
        name=name,
        node_group=group_name,
        workers=workers,
        min_workers=min_workers,
        max_restarts=_int(
            obj.get("maxRestarts", default.max_restarts), f"{path}.maxRestarts", minimum=0
        ),
        rdzv_backend=_choice(
            obj.get("rdzvBackend", default.rdzv_backend), RDZV_BACKENDS, f"{path}.rdzvBackend"
        ),
        model=model,
        dataset=_str(obj.get("dataset", default.dataset), f"{path}.dataset"),
        num_epochs=_int(obj.get("numEpochs", default.num_epochs), f"{path}.numEpochs", minimum=1),
        batch_size=_int(obj.get("batchSize", default.batch_size), f"{path}.batchSize", minimum=1),
        context_length=_int(
            obj.get("contextLength", default.context_length), f"{path}.contextLength", minimum=8
        ),
        sharding_strategy=_choice(
            obj.get("shardingStrategy", default.sharding_strategy),
            SHARDING_STRATEGIES,
            f"{path}.shardingStrategy",
        ),
        max_train_step=_opt_int(obj.get("maxTrainStep"), f"{path}.maxTrainStep", minimum=1),
        checkpoint_every=_opt_int(obj.get("checkpointEvery"), f"{path}.checkpointEvery", minimum=1),
        extra_args=extra,
        image=_opt_str(obj.get("image"), f"{path}.image"),
        hf_token_secret_name=_str(
            obj.get("hfTokenSecretName", default.hf_token_secret_name),
            f"{path}.hfTokenSecretName",
        ),
        device=_choice(obj.get("device", default.device), DEVICES, f"{path}.device"),
        generation=_int(obj.get("generation", default.generation), f"{path}.generation", minimum=1),
        checkpoint_claim=claim,
        namespace=namespace,
        **preflight_key(obj.get("preflight", group.efa), f"{path}.preflight"),
        nccl_debug=_choice(
            obj.get("ncclDebug", default.nccl_debug), NCCL_DEBUG_LEVELS, f"{path}.ncclDebug"
        ),
    )
