""" "Fits in GPU memory", by the planner: a job whose peak memory per GPU exceeds the GPU's is
refused before anything is submitted (``jobs.schema`` calls ``fit_problem`` on every job file).

The peak is ``planner.predict``'s (parameters, gradients and optimizer state sharded as the
job's strategy shards them, activations of one micro-batch with the job's activation
checkpointing, the loss chunk, the allocator's reserve: ``planner.memory``), compared with
``infra.instances``' ``gpu_memory_bytes``, the memory CUDA can use. The job's precision, AC
and LoRA flags are read with ``training.config``'s own parser and defaults (pure Python, no
torch). The job comes as a ``FitInput`` (the job schema, ``jobs.schema``, sits above the
planner and calls this module while it checks a job file).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from infra.config import GpuNodeGroupConfig

if TYPE_CHECKING:
    from planner.predict import PlanInput

HUB_IDS = (
    (r"llama-2-7b", "llama2-7b"),
    (r"llama-2-13b", "llama2-13b"),
    (r"llama-2-70b", "llama2-70b"),
    (r"llama-3(\.\d)?-8b", "llama3-8b"),
    (r"llama-3(\.\d)?-70b", "llama3-70b"),
)
"""Hugging Face ids -> the planner's built-in shapes: the same table as
``planner.args._HF_IDS`` (a test keeps them equal), which this module cannot import."""
_FLAGS = (
    "mixed_precision",
    "pure_bf16",
    "fsdp_activation_checkpointing",
    "nofsdp_activation_checkpointing",
    "ac_mode",
    "use_peft",
    "peft_method",
    "lora_r",
    "lora_dropout",
    "lora_target_modules",
    "hsdp",
    "sharding_group_size",
)
"""The training flags that change the memory a step needs."""


@dataclass(frozen=True, kw_only=True)
class FitInput:
    """What of a job decides its memory per GPU (the job schema's fields of the same names)."""

    model: str
    dataset: str
    device: str
    workers: int
    batch_size: int
    context_length: int
    sharding_strategy: str
    extra_args: tuple[str, ...]


def planner_model(name: str) -> str:
    """``meta-llama/Llama-2-7b-hf`` -> ``llama2-7b`` (the planner's name); others unchanged."""
    lowered = name.lower()
    for pattern, key in HUB_IDS:
        if re.search(pattern, lowered):
            return key
    return name


def _train_flags(extra_args: tuple[str, ...]) -> object | None:
    """``training.config.TrainConfig`` of the job's memory-relevant flags; None on a bad flag
    (``training.config`` names it when the job starts, and ``jobs.schema`` checks it before)."""
    from training.config import ConfigError, parse_args

    ours = [a for a in extra_args if a[2:].partition("=")[0].replace("-", "_") in _FLAGS]
    try:
        return parse_args(ours)
    except ConfigError:
        return None


def _precision(extra_args: tuple[str, ...]) -> str | None:
    """``mixed`` | ``pure_bf16`` | ``fp32`` as training decides from its flags."""
    cfg = _train_flags(extra_args)
    if cfg is None:
        return None
    if cfg.pure_bf16:
        return "pure_bf16"
    return "mixed" if cfg.mixed_precision else "fp32"


def fit_problem(job: FitInput, group: GpuNodeGroupConfig) -> str | None:
    """One line when the job cannot fit on ``group``'s GPUs; None when it fits or when the
    planner does not know the model (a local folder, an architecture it does not model) or the
    job runs on CPUs."""
    if job.device != "cuda":
        return None
    from planner.lora import LINEAR, LoraSpec
    from planner.memory import PRECISIONS
    from planner.predict import PlanInput, predict
    from planner.preference import job_preference
    from planner.shapes import ShapeError, resolve

    try:
        shape = resolve(planner_model(job.model))
    except (ShapeError, KeyError, ValueError, OSError):
        return None
    if job.context_length > shape.max_position_embeddings:
        return (
            f"contextLength {job.context_length} is longer than {job.model}'s "
            f"max_position_embeddings {shape.max_position_embeddings}"
        )
    cfg = _train_flags(job.extra_args)
    precision = _precision(job.extra_args)
    if cfg is None or precision is None:
        return None
    ac = cfg.fsdp_activation_checkpointing and cfg.ac_mode != "none"
    spec = None
    if cfg.use_peft:
        text = cfg.lora_target_modules.strip()
        targets = (
            LINEAR
            if text == "all-linear"
            else tuple(dict.fromkeys(t.strip() for t in text.split(",") if t.strip()))
        )
        try:
            spec = LoraSpec(r=cfg.lora_r, targets=targets, dropout=cfg.lora_dropout > 0)
        except ValueError:
            return None  # the LoRA target check (training.lora) names it at start-up
    try:
        inp = PlanInput(
            shape=shape,
            instance=group.instance,
            precision=PRECISIONS[precision],
            strategy=job.sharding_strategy,
            hsdp_group=cfg.sharding_group_size
            if cfg.hsdp and cfg.sharding_group_size > 0 and job.sharding_strategy == "HYBRID_SHARD"
            else None,
            ac=1.0 if ac else 0.0,
            ac_mode=cfg.ac_mode if ac else "full",
            batch=job.batch_size,
            seq=job.context_length,
            lora=spec,
            # DPO: two sequences a pair and the reference (planner.preference)
            preference=job_preference(job.extra_args, job.dataset, 0).get("preference"),
        )
    except ValueError:
        return None  # a combination the planner does not model (selective AC with LoRA)
    pr = predict(inp, job.workers)
    if pr.fits:
        return None
    gib = 1024**3
    return (
        f"batchSize {job.batch_size} x contextLength {job.context_length} does not fit: the "
        f"planner puts {pr.memory.total / gib:.1f} GiB on each GPU, a {group.instance.gpu_model} "
        f"has {group.instance.gpu_memory_bytes / gib:.1f} GiB; {what_fits(inp, job.workers)}"
    )


MAX_NODES = 64
"""The largest node count ``what_fits`` tries before it gives up."""


def _fits(inp: PlanInput, nodes: int) -> bool:
    from planner.predict import predict

    return predict(inp, nodes).fits


def fitting_change(inp: PlanInput, nodes: int) -> tuple[PlanInput, int] | None:
    """The nearest plan that fits, changing as little as possible: the largest micro-batch
    below ``inp.batch`` (memory grows with it, so a bisection finds it); else, with activation
    checkpointing off, every layer checkpointed (full AC) and the largest micro-batch then;
    else micro-batch 1 with full AC on the fewest nodes up to ``MAX_NODES``. None when even
    that does not fit."""
    from dataclasses import replace

    def largest_batch(trial: PlanInput) -> int:
        lo, hi = 0, trial.batch  # lo fits (0: nothing yet), hi + 1 does not
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if _fits(replace(trial, batch=mid), nodes):
                lo = mid
            else:
                hi = mid - 1
        return lo

    batch = largest_batch(replace(inp, batch=inp.batch - 1)) if inp.batch > 1 else 0
    if batch:
        return replace(inp, batch=batch), nodes
    if inp.ac < 1.0:
        full = replace(inp, ac=1.0, ac_mode=inp.ac_mode if inp.ac > 0 else "full")
        batch = largest_batch(full)
        if batch:
            return replace(full, batch=batch), nodes
    one = replace(inp, batch=1, ac=1.0, ac_mode=inp.ac_mode if inp.ac > 0 else "full")
    for more in range(nodes + 1, MAX_NODES + 1):
        if _fits(one, more):
            return one, more
    return None


def plan_command(inp: PlanInput, nodes: int) -> str:
    """``inp`` on ``nodes`` nodes as one ``eks-fsdp plan`` command line (ADR 0018)."""
    parts = [
        "eks-fsdp plan",
        f"--model {inp.shape.name}",
        f"--instance {inp.instance.name}",
        f"--nodes {nodes}",
        f"--sharding {inp.strategy}",
    ]
    if inp.strategy == "HYBRID_SHARD" and inp.hsdp_group:
        parts.append(f"--hsdp-group {inp.hsdp_group}")
    if inp.ac <= 0:
        parts.append("--no-ac")
    elif inp.ac_mode != "full":
        parts.append(f"--ac-mode {inp.ac_mode}")
    parts += [f"--batch {inp.batch}", f"--seq {inp.seq}"]
    if inp.precision.name != "mixed":
        parts.append(f"--precision {inp.precision.name}")
    if inp.lora is not None:
        parts += [f"--lora-r {inp.lora.r}", f"--lora-targets {','.join(inp.lora.targets)}"]
        if not inp.lora.dropout:
            parts.append("--lora-dropout 0")
    return " ".join(parts)


def what_fits(inp: PlanInput, nodes: int) -> str:
    """What would fit, in words and as the command that shows its figures."""
    found = fitting_change(inp, nodes)
    if found is None:
        return (
            f"nothing fits up to {MAX_NODES} nodes at micro-batch 1 with activation "
            "checkpointing: use a GPU with more memory"
        )
    fit, at = found
    said = [f"micro-batch {fit.batch}"]
    if fit.ac != inp.ac:
        said.append("activation checkpointing on")
    if at != nodes:
        said.append(f"{at} nodes")
    return f"fits with {', '.join(said)}: {plan_command(fit, at)}"
