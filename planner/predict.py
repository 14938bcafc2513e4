"""One prediction for one node count: memory, step, epoch, cost.

The JSON rows of a plan (scaling against one node, the recommendation) are
``planner.plan``'s; this module imports neither it nor ``planner.recommend``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from infra.instances import InstanceType
from planner.assumptions import DEFAULT, Assumptions, GpuGeneration, generation
from planner.epoch import EpochTime, eval_steps, steps_per_epoch
from planner.lora import (
    LoraSpec,
    adapter_bytes,
    adapter_params,
    adapter_shapes,
    first_layer_skipped_flops,
    lora_memory,
)
from planner.memory import (
    Layout,
    MemoryBreakdown,
    Precision,
    layout,
    memory,
    shard_elements,
)
from planner.preference import PreferenceSpec, preference_predict
from planner.shapes import ModelShape
from planner.storage import NODE_DISK, Storage, checkpoint_bytes, checkpoint_seconds
from planner.timing import (
    CommTime,
    ComputeTime,
    comm_time,
    compute_time,
    fsdp_copy_bytes,
    fsdp_units,
    model_flops_per_token,
    recompute_share,
    ring_link,
    ring_time,
)

ON_DEMAND = "on-demand list price"
"""The catalog's price (``infra.instances``: us-east-1 on-demand, per node-hour)."""
BLOCK_PRICE_UNKNOWN = (
    "the capacity block's price is unknown: on-demand list price shown; set pricePerHour"
)
"""A capacity block is priced when it is bought (EC2 user guide, "Capacity Blocks for ML":
the price depends on supply and demand at purchase), not at the on-demand list price."""


def price_basis(group: Any) -> str:
    """How a GPU group (``infra.config.GpuNodeGroupConfig``) is priced, as a plan labels it:
    its ``pricePerHour``, the on-demand list price, or, for a capacity block without a price,
    that the price is unknown."""
    if getattr(group, "price_per_hour", None) is not None:
        return f"pricePerHour of {group.name}"
    if getattr(group, "capacity_type", None) == "capacity-block":
        return BLOCK_PRICE_UNKNOWN
    return ON_DEMAND


@dataclass(frozen=True, kw_only=True)
class PlanInput:
    """Everything a prediction depends on except the node count."""

    shape: ModelShape
    instance: InstanceType
    precision: Precision
    strategy: str = "FULL_SHARD"
    """FULL_SHARD | SHARD_GRAD_OP | HYBRID_SHARD | NO_SHARD."""
    hsdp_group: int | None = None
    """HYBRID_SHARD shard-group size (default: GPUs per node)."""
    ac: float = 1.0
    """Fraction of decoder layers checkpointed: 1.0 every layer (--ac), 0.0 none (--no-ac)."""
    ac_mode: str = "full"
    """How the checkpointed layers recompute: ``full`` or ``selective`` (op-level SAC), as the
    training package's ``--ac_mode``."""
    batch: int = 3
    """Micro-batch per GPU (samples)."""
    seq: int = 4096
    """Tokens per sample (packing)."""
    grad_accum: int = 1
    """Micro-batches per optimizer step."""
    dataset_tokens: int = 0
    """Training tokens per epoch before packing (0: no epoch model)."""
    epochs: int = 1
    """Epochs in the job."""
    sampler: str = "fill"
    """How an epoch is cut into batches: ``fill`` (this project) or ``pad`` (llama-recipes)."""
    usd_per_hour: float | None = None
    """Price override (reservations); None: the catalog's on-demand price."""
    price_basis: str = ON_DEMAND
    """Where ``usd_per_hour`` comes from, as the plan labels its cost (``price_basis``)."""
    assumptions: Assumptions = DEFAULT
    storage: Storage = NODE_DISK
    """Where checkpoints are written (the stack's ``sharedStorage``; default node-local gp3)."""
    gpu: GpuGeneration | None = None
    """Measured efficiencies of the GPU (``planner.calibrate``); None: ``generation()``'s row."""
    lora: LoraSpec | None = None
    """LoRA on a frozen base (training's ``--use_peft``); None: full fine-tuning."""
    preference: PreferenceSpec | None = None
    """A DPO job (training's ``--method dpo``, ``planner.preference``): ``batch`` counts pairs
    and ``dataset_tokens`` pairs x ``seq``; None: supervised fine-tuning."""

    def __post_init__(self) -> None:
        if self.lora is not None and self.ac > 0 and self.ac_mode != "full":
            raise ValueError(
                f"ac_mode {self.ac_mode}: not modelled for LoRA (planner.lora); use full AC"
            )


@dataclass(frozen=True, kw_only=True)
class Prediction:
    """The planner's figures for one node count."""

    nodes: int
    gpus: int
    layout: Layout
    memory: MemoryBreakdown
    fits: bool
    compute: ComputeTime
    comm: CommTime
    step_time_s: float
    tokens_per_s_per_gpu: float
    mfu: float
    flops_per_token: float
    epoch: EpochTime | None
    cost_per_epoch_usd: float | None

    @property
    def epoch_tokens_per_s(self) -> float:
        """Throughput over the train loop of an epoch (what an epoch timer measures)."""
        if self.epoch is None or self.epoch.steps == 0:
            return 0.0
        return self.epoch.tokens / self.epoch.loop_s

    @property
    def job_tokens_per_s(self) -> float:
        """Throughput over the epoch's wall clock (eval, checkpoint, start-up share included)."""
        if self.epoch is None or self.epoch.steps == 0:
            return 0.0
        return self.epoch.tokens / self.epoch.wall_s


def predict(inp: PlanInput, nodes: int) -> Prediction:
    """The prediction for ``nodes`` instances of ``inp.instance``."""
    if inp.preference is not None:  # two sequences a pair and a reference forward
        return preference_predict(inp, nodes, predict)
    it, a, p, shape = inp.instance, inp.assumptions, inp.precision, inp.shape
    gen = inp.gpu or generation(it.gpu_model)
    world = nodes * it.gpus
    lay = layout(inp.strategy, world, it.gpus, inp.hsdp_group)
    elems = shard_elements(shape.param_shapes(), lay.shard)
    tokens = inp.batch * inp.seq
    lora = inp.lora
    if lora is None:
        mem = memory(
            shape, lay, p, batch=inp.batch, seq=inp.seq, ac=inp.ac, ac_mode=inp.ac_mode, a=a
        )
        trained, frozen, adapters, per_layer, skipped = elems, 0, None, None, 0
    else:
        mem = lora_memory(shape, lay, p, lora, batch=inp.batch, seq=inp.seq, ac=inp.ac, a=a)
        trained = shard_elements(adapter_shapes(shape, lora), lay.shard)
        frozen, adapters = elems, adapter_params(shape, lora)
        per_layer = adapters // shape.num_layers
        skipped = first_layer_skipped_flops(shape, lora)
    units = fsdp_units(
        shape,
        lay.reshard_after_forward,
        replicated=lay.strategy == "NO_SHARD",
        lora_per_layer=per_layer,
    )
    copies = fsdp_copy_bytes(units, p, sharded=lay.strategy != "NO_SHARD")
    comp = compute_time(
        shape,
        it,
        gen,
        p,
        tokens=tokens,
        seq=inp.seq,
        ac=inp.ac,
        ac_mode=inp.ac_mode,
        shard_elems=trained,
        frozen_elems=frozen,
        lora_params=adapters,
        lora_skipped=skipped,
        copy_bytes=copies,
        a=a,
    )
    recompute = recompute_share(shape, inp.ac, inp.ac_mode)
    comm = comm_time(shape, lay, it, gen, p, comp, recompute, a, lora_per_layer=per_layer)
    micro_s = comp.total_s + comm.exposed_s + comm.interference_s
    # Gradient accumulation: the cross-replica all-reduce runs on the last micro-batch only.
    step_s = micro_s
    if inp.grad_accum > 1:
        quiet = comm_time(
            shape, lay, it, gen, p, comp, recompute, a, replica_sync=False, lora_per_layer=per_layer
        )
        quiet_s = comp.total_s + quiet.exposed_s + quiet.interference_s
        step_s += (inp.grad_accum - 1) * quiet_s
    tps = tokens * inp.grad_accum / step_s
    fpt = model_flops_per_token(shape, inp.seq, adapters)
    mfu = fpt * tps / (it.peak_bf16_tflops * 1e12)
    epoch = _epoch(inp, lay, nodes, step_s, comp, elems) if inp.dataset_tokens else None
    price = inp.usd_per_hour if inp.usd_per_hour is not None else it.usd_per_hour
    cost = nodes * price * epoch.wall_s / 3600.0 if epoch is not None else None
    return Prediction(
        nodes=nodes,
        gpus=world,
        layout=lay,
        memory=mem,
        fits=mem.total <= it.gpu_memory_bytes,
        compute=comp,
        comm=comm,
        step_time_s=step_s,
        tokens_per_s_per_gpu=tps,
        mfu=mfu,
        flops_per_token=fpt,
        epoch=epoch,
        cost_per_epoch_usd=cost,
    )


def _epoch(
    inp: PlanInput, lay: Layout, nodes: int, step_s: float, comp: ComputeTime, elems: int
) -> EpochTime:
    a, p, shape, it = inp.assumptions, inp.precision, inp.shape, inp.instance
    samples = inp.dataset_tokens // inp.seq
    steps, processed = steps_per_epoch(samples, lay.world, inp.batch, inp.grad_accum, inp.sampler)
    loop_s = a.loop_start_s + a.first_step_extra_s + steps * step_s if steps else 0.0

    # Evaluation: forward only, one sample per rank per step (val_batch_size 1).
    val = int(samples * a.eval_fraction)
    n_eval = eval_steps(val, lay.world)
    fwd_share = 1.0 / (3.0 + recompute_share(shape, inp.ac, inp.ac_mode))
    eval_compute = (comp.total_s - comp.optimizer_s) * fwd_share / inp.batch
    link = ring_link(lay.shard, min(lay.shard, it.gpus), it, a)
    eval_ag = ring_time(shape.n_params * p.compute, lay.shard, link)
    eval_s = n_eval * max(eval_compute, eval_ag)

    # DCP checkpoint of the sharded model and its AdamW state (planner.storage).
    checkpoint_s = checkpoint_time(inp, nodes)
    storage = a.storage_gbytes_per_s * 1e9

    # Start-up: processes, rendezvous, rank 0 reads the bf16 checkpoint, broadcast to all.
    bcast_link = ring_link(lay.world, min(lay.world, it.gpus), it, a)
    load_s = shape.n_params * 2 / storage + ring_time(
        shape.n_params * p.param, lay.world, bcast_link
    )
    startup_s = a.process_start_s + a.rendezvous_base_s + a.rendezvous_s_per_node * nodes + load_s
    return EpochTime(
        samples=samples,
        steps=steps,
        tokens=processed * inp.seq,
        loop_s=loop_s,
        eval_s=eval_s,
        checkpoint_s=checkpoint_s,
        startup_s=startup_s,
        epochs=inp.epochs,
    )


def checkpoint_size(inp: PlanInput) -> int:
    """Bytes of one checkpoint: the model and its AdamW state; with LoRA the adapters and
    theirs only (``training.checkpoint``'s ``trainable_only``), in the adapters' dtype."""
    p = inp.precision
    if inp.lora is None:
        return checkpoint_bytes(inp.shape.n_params, p.param, p.optim)
    ca = adapter_bytes(p)
    n = adapter_params(inp.shape, inp.lora)
    return checkpoint_bytes(n, max(p.param, ca), max(p.optim, ca))


def checkpoint_time(inp: PlanInput, nodes: int) -> float:
    """Seconds of one checkpoint: model + optimizer bytes over the storage's write bandwidth."""
    return checkpoint_seconds(checkpoint_size(inp), inp.storage, nodes)
