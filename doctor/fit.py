""" "Fits in GPU memory", by the planner: a job whose peak memory per GPU exceeds the GPU's is
refused before anything is submitted (``jobs.file`` calls ``fit_problem`` on every job file).

The peak is ``planner.predict``'s (parameters, gradients and optimizer state sharded as the
job's strategy shards them, activations of one micro-batch with the job's activation
checkpointing, the loss chunk, the allocator's reserve: ``planner.memory``), compared with
``infra.instances``' ``gpu_memory_bytes``, the memory CUDA can use. Pure Python: no torch.
"""

from __future__ import annotations

from infra.config import GpuNodeGroupConfig, JobConfig

_PRECISION_FLAGS = ("mixed_precision", "pure_bf16")


def _precision(extra_args: tuple[str, ...]) -> str | None:
    """``mixed`` | ``pure_bf16`` | ``fp32`` from the job's training flags, read with
    ``training.config``'s own parser and defaults (pure Python); None on a bad flag."""
    from training.config import ConfigError, parse_args

    ours = [a for a in extra_args if a[2:].partition("=")[0].replace("-", "_") in _PRECISION_FLAGS]
    try:
        cfg = parse_args(ours)
    except ConfigError:
        return None
    if cfg.pure_bf16:
        return "pure_bf16"
    return "mixed" if cfg.mixed_precision else "fp32"


def fit_problem(job: JobConfig, group: GpuNodeGroupConfig) -> str | None:
    """One line when the job cannot fit on ``group``'s GPUs; None when it fits or when the
    planner does not know the model (a local folder, an architecture it does not model) or the
    job runs on CPUs."""
    if job.device != "cuda":
        return None
    from planner.args import UsageError, _stack_ac, _stack_lora, builtin_for_hub_id
    from planner.memory import PRECISIONS
    from planner.predict import PlanInput, predict
    from planner.shapes import ShapeError, resolve

    try:
        shape = resolve(builtin_for_hub_id(job.model))
    except (ShapeError, KeyError, ValueError, OSError):
        return None
    if job.context_length > shape.max_position_embeddings:
        return (
            f"contextLength {job.context_length} is longer than {job.model}'s "
            f"max_position_embeddings {shape.max_position_embeddings}"
        )
    try:
        ac = _stack_ac("<job>", job.extra_args)
        lora = _stack_lora("<job>", job.extra_args).get("lora")
    except UsageError:
        return None  # training.config names the bad flag itself, later in the same check
    precision = _precision(job.extra_args)
    if precision is None:
        return None  # training.config names the bad flag itself
    from planner.lora import LINEAR, LoraSpec

    spec = None
    if lora is not None:
        targets = (
            LINEAR
            if lora["targets"].strip() == "all-linear"
            else tuple(t.strip() for t in lora["targets"].split(",") if t.strip())
        )
        try:
            spec = LoraSpec(r=lora["r"], targets=targets, dropout=lora["dropout"] > 0)
        except ValueError:
            return None  # the LoRA target check (training.lora) names it at start-up
    inp = PlanInput(
        shape=shape,
        instance=group.instance,
        precision=PRECISIONS[precision],
        strategy=job.sharding_strategy,
        ac=1.0 if ac["ac"] else 0.0,
        ac_mode=ac["ac_mode"] or "full",
        batch=job.batch_size,
        seq=job.context_length,
        lora=spec,
    )
    pr = predict(inp, job.workers)
    if pr.fits:
        return None
    gib = 1024**3
    return (
        f"batchSize {job.batch_size} x contextLength {job.context_length} does not fit: the "
        f"planner puts {pr.memory.total / gib:.1f} GiB on each GPU, a {group.instance.gpu_model} "
        f"has {group.instance.gpu_memory_bytes / gib:.1f} GiB (python -m planner --job FILE "
        "shows the layouts that fit)"
    )
