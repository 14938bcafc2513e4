"""A job's estimate before anyone pays: step time, ETA, $ per epoch, memory per GPU, and one
line per warning (layout off the recommendation, a checkpoint that never fires).

``workloads.render`` and ``eks-fsdp jobs submit`` print ``lines(job_file)`` (on stderr, so
their output stays what it was); ``eks-fsdp plan --job FILE`` prints it under its table.
A job that does not fit never gets here: ``jobs.schema`` refuses it (``planner.fit``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from planner.args import UsageError, job_values, parser, resolve_args
from planner.capacity import job_capacity_lines
from planner.memory import PRECISIONS
from planner.predict import PlanInput, predict
from planner.recommend import recommend

LAYOUT_MARGIN = 0.10
"""Warn when the job's tokens/s/GPU is more than 10% below the recommended layout's. The
planner's absolute error against published runs is 10-20% (docs/planner.md, "Checked
against"); two layouts on the same model share most of it, but a smaller gap than 10% is
within what a measured run moves by and is not worth a warning."""


@dataclass(frozen=True)
class JobEstimate:
    """What the planner expects of one job as written."""

    inp: PlanInput
    nodes: int
    step_s: float
    tokens_per_s_per_gpu: float
    mem_per_gpu_bytes: int
    gpu_memory_bytes: int
    steps: int | None
    """Optimizer steps over the whole job (epochs x steps per epoch, capped by maxTrainStep);
    None when the planner does not know the dataset's size."""
    checkpoint_every: int | None
    checkpoints: int | None
    """Interval checkpoints the job writes (steps // checkpointEvery)."""
    eta_s: float | None
    cost_usd: float | None
    cost_per_epoch_usd: float | None
    usd_per_hour: float
    recommendation: dict[str, Any] | None
    """The planner's best layout on these nodes; None for a CPU job (it searches GPU layouts)."""
    epoch_steps: int | None = None
    """Optimizer steps one epoch makes (before maxTrainStep); None as ``steps``."""
    device: str = "cuda"
    """The job's ``device``. ``cpu``: the step time, memory, ETA and cost above are the GPU
    model's figures for the stack's instance, which the job does not use; ``describe`` shows
    only the step and checkpoint counts (CPU throughput is measured: docs/performance.md)."""

    @property
    def layout_gap(self) -> float:
        """How far the job's tokens/s/GPU is below the recommendation's (0: at or above)."""
        if not self.recommendation:
            return 0.0
        best = self.recommendation["tokens_per_s_per_gpu"]
        return max(0.0, 1.0 - self.tokens_per_s_per_gpu / best) if best > 0 else 0.0


def plan_input(job_file: Any) -> tuple[PlanInput, int]:
    """The job's PlanInput and node count (``UsageError`` when the planner cannot model it)."""
    args = parser().parse_args([])
    resolved = resolve_args(args, preset=job_values(job_file, f"--job {job_file.source}"))
    return resolved.inp, resolved.nodes[0]


def estimate_input(
    inp: PlanInput,
    nodes: int,
    *,
    max_steps: int | None,
    checkpoint_every: int | None,
    device: str = "cuda",
    min_nodes: int | None = None,
) -> JobEstimate:
    """The estimate of ``inp`` on ``nodes`` nodes (``device`` ``cpu``: the step and checkpoint
    counts alone mean something; no ETA, cost or recommendation)."""
    pr = predict(inp, nodes)
    epoch = pr.epoch
    steps = eta = cost = None
    if epoch is not None and epoch.steps > 0:
        # training.finetune's _planned_steps: min(steps per epoch x epochs, max_train_step),
        # where a max_train_step of 0 means no limit
        steps = epoch.steps * inp.epochs
        if max_steps:
            steps = min(steps, max_steps)
    fires = steps // checkpoint_every if steps is not None and checkpoint_every else None
    usd_per_hour = inp.usd_per_hour if inp.usd_per_hour is not None else inp.instance.usd_per_hour
    gpu = device == "cuda"
    if gpu and epoch is not None and steps:
        # Start-up once; the loop and evaluation pro rata of the steps run; one checkpoint per
        # epoch (the planner's epoch model) plus each interval checkpoint beyond those.
        epochs_run = steps / epoch.steps
        per_step = (epoch.loop_s + epoch.eval_s) / epoch.steps
        saves = max(fires or 0, round(epochs_run))
        eta = epoch.startup_s + steps * per_step + saves * epoch.checkpoint_s
        cost = eta / 3600 * usd_per_hour * nodes
    return JobEstimate(
        inp=inp,
        nodes=nodes,
        step_s=pr.step_time_s,
        tokens_per_s_per_gpu=pr.tokens_per_s_per_gpu,
        mem_per_gpu_bytes=pr.memory.total,
        gpu_memory_bytes=inp.instance.gpu_memory_bytes,
        steps=steps,
        checkpoint_every=checkpoint_every,
        checkpoints=fires,
        eta_s=eta,
        cost_usd=cost,
        cost_per_epoch_usd=pr.cost_per_epoch_usd if gpu else None,
        usd_per_hour=usd_per_hour * nodes,
        recommendation=recommend(inp, nodes, min_nodes=min_nodes) if gpu else None,
        epoch_steps=epoch.steps if steps is not None and epoch is not None else None,
        device=device,
    )


def estimate(job_file: Any) -> JobEstimate:
    """The estimate of a loaded ``jobs.schema.JobSpec`` as written."""
    inp, nodes = plan_input(job_file)
    job = job_file
    return estimate_input(
        inp,
        nodes,
        max_steps=job.max_train_step,
        checkpoint_every=job.checkpoint_every,
        device=job.device,
        min_nodes=job.min_workers,
    )


def _duration(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def _layout(inp: PlanInput) -> str:
    ac = "AC on" if inp.ac > 0 else "AC off"
    group = f" (group {inp.hsdp_group})" if inp.hsdp_group else ""
    return f"{inp.strategy}{group}, {ac}, micro-batch {inp.batch}"


CPU_LINE = (
    "plan: device cpu: the planner models GPUs, so no step time, memory, ETA, cost or layout "
    "recommendation (CPU throughput: docs/performance.md)"
)
"""What ``describe`` says of a ``device: cpu`` job instead of the GPU figures."""


def _steps(est: JobEstimate) -> str:
    """``288 optimizer steps over 1 epoch(s)``, or, cut by maxTrainStep, ``100 optimizer steps
    (maxTrainStep; 1 epoch(s) would be 164)``."""
    epochs = est.inp.epochs
    full = (est.epoch_steps or 0) * epochs
    if est.steps is not None and est.steps < full:
        return f"{est.steps} optimizer steps (maxTrainStep; {epochs} epoch(s) would be {full})"
    return f"{est.steps} optimizer steps over {epochs} epoch(s)"


def describe(est: JobEstimate, source: str = "FILE") -> list[str]:
    """A few lines of figures, then one ``warning:`` line per problem."""
    gib = 1024**3
    inp = est.inp
    every = (
        f", a checkpoint every {est.checkpoint_every} steps ({est.checkpoints} in all)"
        if est.checkpoint_every
        else ""
    )
    if est.device != "cuda":
        out = [
            f"plan: {inp.shape.name}, {est.nodes} worker(s) on CPU: "
            f"{_layout(inp)}, {inp.seq} tokens",
            f"plan: {_steps(est)}{every}"
            if est.steps is not None
            else "plan: dataset size unknown to the planner: no step count",
            CPU_LINE,
        ]
        return out + _checkpoint_warning(est)
    out = [
        f"plan: {inp.shape.name} on {est.nodes} x {inp.instance.name} "
        f"({est.nodes * inp.instance.gpus} GPUs): {_layout(inp)}, {inp.seq} tokens",
        f"plan: step {est.step_s:.2f} s, {est.tokens_per_s_per_gpu:,.0f} tok/s/GPU, "
        f"{est.mem_per_gpu_bytes / gib:.1f} of {est.gpu_memory_bytes / gib:.1f} GiB per GPU",
    ]
    if est.steps is not None and est.eta_s is not None:
        per_epoch = (
            f", ${est.cost_per_epoch_usd:,.0f} per epoch"
            if est.cost_per_epoch_usd is not None
            else ""
        )
        out.append(
            f"plan: {_steps(est)}{every}; ETA "
            f"{_duration(est.eta_s)}, ${est.cost_usd:,.0f} at ${est.usd_per_hour:,.2f}/h{per_epoch}"
            f" ({inp.price_basis})"
        )
    else:
        out.append(
            "plan: dataset size unknown to the planner: no step count, ETA or cost "
            "(eks-fsdp plan --job FILE --dataset-tokens N)"
        )
    rec = est.recommendation
    if rec is not None and est.layout_gap > LAYOUT_MARGIN:
        group = f" (group {rec['hsdp_group']})" if rec["hsdp_group"] else ""
        out.append(
            f"warning: layout {est.tokens_per_s_per_gpu:,.0f} tok/s/GPU is "
            f"{est.layout_gap:.0%} below the planner's {rec['sharding']}{group}, AC "
            f"{'on' if rec['activation_checkpointing'] else 'off'}, micro-batch "
            f"{rec['micro_batch']} ({rec['tokens_per_s_per_gpu']:,.0f}): "
            f"eks-fsdp plan --job {source}"
        )
    return out + _checkpoint_warning(est)


def _checkpoint_warning(est: JobEstimate) -> list[str]:
    if est.steps is not None and est.checkpoint_every and est.steps < est.checkpoint_every:
        return [
            f"warning: checkpointEvery {est.checkpoint_every} never fires: the job runs "
            f"{est.steps} steps (set checkpointEvery <= {max(1, est.steps // 3)})"
        ]
    return []


def lines(job_file: Any) -> list[str]:
    """``describe(estimate(job_file))`` and the capacity-block warning (``planner.capacity``);
    empty for a job the planner does not model (a CPU job, a model it has no shape for): the
    figures would be guesses."""
    if job_file.device != "cuda":
        return []
    try:
        est = estimate(job_file)
    except UsageError:
        return []
    return [*describe(est, job_file.source), *job_capacity_lines(job_file, est.eta_s)]


def with_layout(inp: PlanInput, rec: dict[str, Any]) -> PlanInput:
    """``inp`` with the recommendation's layout (sharding, HSDP group, AC, micro-batch)."""
    return replace(
        inp,
        strategy=rec["sharding"],
        hsdp_group=rec["hsdp_group"],
        ac=1.0 if rec["activation_checkpointing"] else 0.0,
        batch=rec["micro_batch"],
        precision=PRECISIONS[rec["precision"]],
    )


__all__ = [
    "CPU_LINE",
    "LAYOUT_MARGIN",
    "JobEstimate",
    "describe",
    "estimate",
    "estimate_input",
    "lines",
    "plan_input",
    "with_layout",
]
