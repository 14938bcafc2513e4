"""A job's settings and Kubernetes objects, computed once from its ``JobSpec``.

``job_settings`` is the one typed function of (job, its node group, its stack) that the spec
builders' ``JobSettings`` comes from: every default is the job schema's (``jobs.schema``), every
node-group fact the stack config's (``infra.config``). ``build`` adds the etcd, the checkpoint
volume and the debug tools the job uses (``workloads.specs.settings.Workloads``) and checks the
training flags with ``training.config`` before anything is sent or started; both backends, the
renderer and the planner's ``--job`` take what it returns.
"""

from __future__ import annotations

from pathlib import Path

from jobs.schema import JobFileError, JobSpec
from workloads.specs.image import local_reference
from workloads.specs.preemption import storage_mb_per_s
from workloads.specs.prometheus_files import TRAINING_METRICS_PORT
from workloads.specs.settings import (
    DebugSettings,
    EtcdSettings,
    JobSettings,
    OperatorSettings,
    Workloads,
    node_selector_for,
)
from workloads.specs.storage import CheckpointVolumeSettings


def example_job(stack: str, root: Path | None = None) -> Path:
    """The job file of ``stack`` when a command is given a stack and no job (``plan``,
    ``render``, ``scan``, ``local``): ``jobs/<stack>.yaml`` (what ``eks-fsdp new-stack``
    writes) when it exists, else the shipped ``jobs/examples/<stack>.yaml``; ``root``: the
    checkout (default this one)."""
    from eks_fsdp_cli.paths import REPO_ROOT

    jobs = (root or REPO_ROOT) / "jobs"
    own = jobs / f"{stack}.yaml"
    return own if own.is_file() else jobs / "examples" / f"{stack}.yaml"


def train_flags(job: JobSpec) -> tuple[str, ...]:
    """``training.finetune`` flags of the job (the checkpoint flags are the manifest's)."""
    flags = [
        "--enable_fsdp",
        f"--model_name={job.model}",
        f"--dataset={job.dataset}",
        f"--num_epochs={job.num_epochs}",
        f"--batch_size_training={job.batch_size}",
        f"--context_length={job.context_length}",
        f"--sharding_strategy={job.sharding_strategy}",
    ]
    if job.max_train_step:
        flags.append(f"--max_train_step={job.max_train_step}")
    if job.checkpoint_every:
        flags.append(f"--checkpoint_every={job.checkpoint_every}")
    return (*flags, *job.extra_args)


def _preflight_expect(job: JobSpec) -> str | None:
    """Thresholds from the catalog for GPU jobs with ``preflight``; CPU jobs measure only."""
    if not job.preflight:
        return None
    if job.device != "cuda":
        return job.preflight_expect
    from planner.expect import expect_arg
    from training.preflight.verdict import merge_expect
    from workloads.specs.efa import efa_expect

    group = job.group
    it = group.instance
    return merge_expect(
        expect_arg(it, job.workers, efa=group.efa), efa_expect(it, group.efa), job.preflight_expect
    )


def job_settings(job: JobSpec, *, image: str, generation: int = 1) -> JobSettings:
    """The spec builders' settings of ``job`` running ``image`` (its ``generation``-th
    submission)."""
    group, stack = job.group, job.platform
    return JobSettings(
        name=job.name,
        namespace=job.namespace,
        image=image,
        instance_type=group.instance_type,
        workers=job.workers,
        min_workers=job.min_workers,
        max_restarts=job.max_restarts,
        rdzv_backend=job.rdzv_backend,
        generation=generation,
        train_args=train_flags(job),
        node_selector=node_selector_for(group),
        extra_taints=tuple(t for g in stack.gpu_node_groups if (t := g.taint)),
        hf_token_secret=job.hf_token_secret_name,
        checkpoint_claim=job.checkpoint_claim,
        checkpoint_mb_per_s=storage_mb_per_s(stack.shared_storage),
        metrics_port=TRAINING_METRICS_PORT if stack.observability.enabled else 0,
        preflight_expect=_preflight_expect(job),
        nccl_debug=job.nccl_debug,
        capacity_block_group=group.name if group.capacity_type == "capacity-block" else None,
        efa=group.efa,
        efa_dra=group.efa and group.efa_driver == "dra",
    )


def training_image(job: JobSpec) -> str:
    """The job's ``image``, else the content-tagged local build (registry-less: the local
    runner's name; the renderer and a cluster job ask for a registry)."""
    return job.image or local_reference()


def build(
    job: JobSpec, *, image: str | None = None, generation: int = 1, local_paths: bool = False
) -> Workloads:
    """Everything the job's objects are built from, its training flags checked with
    ``training.config`` (``JobFileError`` on the file's key). File flags name files on the pods
    (the shared file system) unless ``local_paths`` (a local run): they are never looked up on
    the submitting machine's disk for a cluster job."""
    try:
        settings = job_settings(job, image=image or training_image(job), generation=generation)
    except ValueError as err:
        raise JobFileError(str(err.args[0] if err.args else err), source=job.source) from None
    check_train_flags(job, settings, local_paths=local_paths)
    stack = job.platform
    volume = None
    if stack.shared_storage.is_fsx and settings.checkpoint_claim:
        volume = CheckpointVolumeSettings(
            claim_name=settings.checkpoint_claim,
            namespace=job.namespace,
            capacity_gib=stack.shared_storage.storage_capacity_gib,
        )
    debug = DebugSettings(
        image=settings.image,
        namespace=job.namespace,
        instance_types=tuple(sorted({g.instance_type for g in stack.gpu_node_groups})),
        extra_taints=settings.extra_taints,
    )
    return Workloads(
        stack=stack.stack,
        job=settings,
        etcd=EtcdSettings(namespace=job.namespace, client_job_names=(job.name,)),
        operator=OperatorSettings(),
        debug=debug,
        debug_tools=stack.debug_tools,
        device=job.device,
        checkpoint_volume=volume,
    )


def check_train_flags(job: JobSpec, settings: JobSettings, *, local_paths: bool = True) -> None:
    """Parse the job's ``training.finetune`` flags with the training CLI (pure Python, no
    torch); a bad one is a ``JobFileError`` on the key (or ``args.<flag>``) that set it."""
    from training.config import ConfigError, parse_args
    from workloads.specs import pytorchjob

    flags = pytorchjob.finetune_flags(pytorchjob.train_command(settings))
    try:
        parse_args(flags, local_paths=local_paths)
    except ConfigError as err:
        raise job.flag_error(err.flag, err.problem) from None


def load_example(
    stack: str | None,
    *,
    job: Path | str | None = None,
    image: str | None = None,
    generation: int = 1,
) -> tuple[JobSpec, Workloads]:
    """``job`` (default: the stack's job, ``example_job``) on ``Pulumi.<stack>.yaml`` (``stack``
    None: the job file's own ``stack``), built: what the scanner and ``eks-fsdp local`` run.
    ``ConfigError`` / ``JobFileError`` on bad input."""
    from infra.config import load_stack_file
    from infra.config.sources import REPO_ROOT  # read when called (tests move it)
    from jobs.schema import load

    if stack is None:
        if job is None:
            raise ValueError("no job file and no stack: pass FILE or --stack STACK")
        spec = load(job)
        return spec, build(spec, image=image, generation=generation)
    load_stack_file(stack)  # a missing or invalid stack file is named first
    path = Path(job) if job is not None else example_job(stack)
    if job is None and not path.is_file():
        raise ValueError(
            f"stack {stack!r}: no job file given, no jobs/{stack}.yaml and no "
            f"{path.relative_to(REPO_ROOT)}"
        )
    spec = load(path, stack=stack)
    return spec, build(spec, image=image, generation=generation)
