"""The job a local run starts: a job file's ``JobSettings`` with the runner's overrides, made local.

``local_job_settings`` takes the settings ``jobs.build`` made from the job file and applies the
options that choose the job (workers, backend, ``--set`` training flags); ``localize`` swaps only
what cannot exist on one machine (the shared volume becomes a folder, one process per pod on
``device: cpu``) and fixes the rendezvous id first, so it stays the cluster job's.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from localrun.options import Fault, LocalOptions, LocalRunError
from workloads.specs import pytorchjob as pj
from workloads.specs.settings import RDZV_BACKENDS, JobSettings


def _override_flags(args: tuple[str, ...], overrides: Sequence[str]) -> tuple[str, ...]:
    def name(flag: str) -> str:
        return flag.split("=", 1)[0].lstrip("-").replace("-", "_")

    for o in overrides:
        if not o.startswith("--"):
            raise LocalRunError(f"--set: {o!r} must look like --flag=value")
    replaced = {name(o) for o in overrides}
    return tuple(a for a in args if name(a) not in replaced) + tuple(overrides)


def _cpu_log_every(device: str, opts: LocalOptions) -> tuple[str, ...]:
    """The runner's --set flags, with ``--log_every=1`` first on CPU unless one sets it: the
    cluster job logs every ``pj.CLUSTER_LOG_EVERY`` steps (a GPU step then makes no host sync),
    but on CPU that costs nothing, and the progress lines, fault triggers and recovery times
    read each row of metrics.jsonl as it is written."""
    overrides = tuple(opts.train_overrides)
    if device != "cpu" or any(o.split("=", 1)[0] == "--log_every" for o in overrides):
        return overrides
    return ("--log_every=1", *overrides)


def localize(job: JobSettings, device: str, shared: Path) -> JobSettings:
    """``job`` as it runs on this machine: the rendezvous id fixed (the cluster job's, hashed
    before the swaps), resume on (the folder is shared by every pod, like a claim), the shared
    volume at ``shared``, one process per pod on CPU. Idempotent."""
    return job.replace(
        rdzv_id=pj.rdzv_id(job),
        resume=True,
        checkpoint_mount=str(shared),
        nproc_per_node=1 if device == "cpu" else None,
    )


def fault_min_workers(fault: Fault, workers: int, min_workers: int) -> int:
    """The elastic minimum a run with ``fault`` needs: ``kill-node`` kills a pod that is never
    replaced, so the job must be able to re-form without it (``workers - 1``); it needs two
    workers (``LocalRunError`` otherwise). Other faults keep ``min_workers``."""
    if fault.kind != "kill-node" or min_workers < workers:
        return min_workers
    if workers < 2:
        raise LocalRunError("--fault kill-node needs --workers >= 2")
    return workers - 1


def local_job_settings(
    opts: LocalOptions, shared: Path, job: JobSettings, device: str
) -> JobSettings:
    """``job`` (a job file's settings on ``device``, ``jobs.build``) with the runner's
    overrides, made local; its training flags checked again with ``training.config``."""
    from training.config import ConfigError, parse_args

    if opts.backend is not None and opts.backend not in RDZV_BACKENDS:
        raise LocalRunError(f"--backend: {opts.backend!r} is not one of {', '.join(RDZV_BACKENDS)}")
    workers = opts.workers or job.workers
    min_workers = fault_min_workers(
        opts.fault, workers, opts.min_workers or min(job.min_workers, workers)
    )
    try:
        job = job.replace(
            workers=workers,
            min_workers=min_workers,
            rdzv_backend=opts.backend or job.rdzv_backend,
            train_args=_override_flags(job.train_args, _cpu_log_every(device, opts)),
        )
        job = localize(job, device, shared)
    except ValueError as err:
        raise LocalRunError(str(err)) from None
    try:
        parse_args(pj.finetune_flags(pj.train_command(job)), local_paths=True)
    except ConfigError as err:
        raise LocalRunError(f"--set: {err}") from None
    return job
