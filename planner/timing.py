"""Step time: compute on the roofline of one GPU, FSDP collectives on NVLink and the network.

compute = GEMM FLOPs / (peak x gemm_efficiency) + attention FLOPs / (peak x attention_efficiency)
          + elementwise HBM bytes / (HBM bandwidth x hbm_efficiency) + optimizer bytes / HBM
comm    = ring collectives: bytes x (n-1)/n / bus bandwidth + (n-1) x hop latency, with each
          op's own figures (all-gather, reduce-scatter, all-reduce), over the FSDP2 units the
          training package builds (``fsdp_units``) plus the step's few scalar all-reduces
exposed = on a GPU: comm that does not fit under the compute of the unit it is prefetched for
          (per layer, forward and backward separately) + the edge units' forward gathers and
          reduce-scatters (the embedding's backward gather is prefetched under layer 0)
          + the SM share NCCL steals from overlapped compute; on a CPU (gloo) all of it, since
          every collective blocks the thread that computes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from infra.instances import InstanceType
from planner.assumptions import Assumptions, GpuGeneration
from planner.memory import Layout, Precision
from planner.shapes import ModelShape


def model_flops_per_token(shape: ModelShape, seq: int, lora_params: int | None = None) -> float:
    """MFU FLOPs per token (PaLM convention): 6 N_matmul + 12 L h_q s.

    N_matmul = every weight multiplied per token (layer projections and lm_head; the embedding
    lookup is free); 12 L h_q s = QK^T and AV, forward + backward, without causal savings.
    With LoRA (``lora_params``: the adapters' parameters) a frozen weight has no weight
    gradient: 4 N_matmul + 6 N_adapters + the same attention.
    """
    attention = 12.0 * shape.num_layers * shape.q_size * seq
    if lora_params is not None:
        return 4.0 * shape.matmul_params + 6.0 * lora_params + attention
    return 6.0 * shape.matmul_params + attention


ATTENTION_BACKWARD_RATIO = 2.5
"""FLOPs of flash attention's backward over its forward's (FlashAttention-2: 5 matmuls vs 2)."""


@dataclass(frozen=True, kw_only=True)
class FlopsExecuted:
    """FLOPs the hardware runs per token (recomputation and causal masking included)."""

    gemm: float
    attention: float


def executed_flops_per_token(
    shape: ModelShape,
    seq: int,
    ac: float,
    ac_mode: str = "full",
    lora_params: int | None = None,
    lora_skipped: int = 0,
) -> FlopsExecuted:
    """GEMM: 6 N_matmul + 2 (N_layer - h i) L x ac (checkpointed layers run their forward
    again, but for the MLP's down projection: ``full_ac_recomputed_params``).

    Attention: flash attention skips the masked half; its backward runs 2.5 times the forward's
    FLOPs (it recomputes the scores QK^T: five matmuls against the forward's two; FlashAttention-2,
    Dao 2023, Algorithm 2), so 7 L h_q s + 2 L h_q s x ac.
    ``ac``: fraction of decoder layers checkpointed (1.0 = every layer, 0.0 = none).
    ``ac_mode`` selective (op-level SAC) recomputes only the k, o and up matmuls
    (``ModelShape.selective_ac_recomputed_params``) and never attention, whose output it saves.
    ``lora_params`` (LoRA on a frozen base): autograd computes no weight gradient for a frozen
    weight, only the input gradient, so the base costs 4 N_matmul; the adapters 6 N_adapters
    and their share of the recomputation, less ``lora_skipped``: the input gradients the
    first layer does not need (``planner.lora.first_layer_skipped_flops``). Under full AC the
    adapters run again whole: training's default targets (q_proj, v_proj) come before the
    down projection. (With adapters on down_proj itself, the replay stops before lora_B's
    matmul instead and runs the base down projection: 2 L (h i - r h) more than counted.)
    """
    if ac_mode == "selective":
        recomputed = shape.selective_ac_recomputed_params
        adapter_share = recompute_share(shape, ac, ac_mode)
    else:
        recomputed = full_ac_recomputed_params(shape)
        adapter_share = ac
    recomputed_base = 2.0 * recomputed * shape.num_layers * ac
    if lora_params is not None:
        gemm = 4.0 * shape.matmul_params + 6.0 * lora_params - lora_skipped
        gemm += recomputed_base + 2.0 * lora_params * adapter_share
    else:
        gemm = 6.0 * shape.matmul_params + recomputed_base
    attn_fwd = 2.0 * shape.num_layers * shape.q_size * seq  # 4 L h s forward, halved (causal)
    # Forward 1 + backward 2.5: FlashAttention-2's backward recomputes S = QK^T and P from the
    # saved log-sum-exp, then runs dV, dP, dQ, dK (Dao 2023, "FlashAttention-2", Algorithm 2):
    # five matmuls against the forward's two. Its published throughput, from which
    # ``attention_efficiency`` is taken, counts fwd + bwd as 3.5x the forward's FLOPs
    # (Dao-AILab/flash-attention benchmarks/benchmark_flash_attention.py ``flops``), so the
    # time must count them the same way (the planner counted 3x, 14% short).
    attention = (1.0 + ATTENTION_BACKWARD_RATIO) * attn_fwd
    attention += 0.0 if ac_mode == "selective" else attn_fwd * ac
    return FlopsExecuted(gemm=gemm, attention=attention)


def full_ac_recomputed_params(shape: ModelShape) -> int:
    """Weights of one layer whose matmul full AC runs again in backward: all but the MLP's
    down projection (h x i), the layer's last matmul.

    The training package checkpoints with torch's non-reentrant checkpoint
    (``training.parallelize``: ``checkpoint(..., use_reentrant=False)``), whose ``early_stop``
    (default True; ``set_checkpoint_early_stop``) "stops recomputation as soon as it has
    computed all needed Tensors" (torch/utils/checkpoint.py at v2.13.0: the pack hook raises
    ``_StopRecomputationError`` once ``recomp_counter`` reaches the number of tensors the
    forward saved). An op's inputs are saved before it runs (torch's generated autograd
    kernels, tools/autograd/gen_variable_type.py: saved inputs are set up before the call,
    saved outputs after), and nothing after the down projection (the residual add) saves
    anything: the replay stops right before that matmul. Measured with torch's FlopCounterMode
    on tiny-llama-2l (tests/training/test_flops.py): exact.
    """
    return shape.layer_matmul_params - shape.hidden_size * shape.intermediate_size


def recompute_share(shape: ModelShape, ac: float, ac_mode: str = "full") -> float:
    """The part of a layer's forward matmul work that AC runs again in backward (0 to 1):
    ``ac`` times the recomputed matmuls' share of a layer (full AC: all but the down
    projection, ``full_ac_recomputed_params``; selective AC: k, o and up).
    A step is then (3 + this) forwards, which places the forward/backward split."""
    if ac_mode == "selective":
        return ac * shape.selective_ac_recomputed_params / shape.layer_matmul_params
    return ac * full_ac_recomputed_params(shape) / shape.layer_matmul_params


def elementwise_bytes_per_token(
    shape: ModelShape, p: Precision, ac: float, a: Assumptions
) -> float:
    """HBM traffic of the memory-bound ops per token (HF eager kernels, unfused).

    Forward per layer: 2 RMSNorms h(28 + 4c) each (fp32 upcast, square, mean, scale, downcast,
    weight); RoPE on q and k 10 (h_q + h_kv) c; attention-output transpose 2 h_q c; two residual
    adds 6 h c; SiLU and product 5 i c. Loss: about (40 + 2c) V (upcast, log-softmax, backward).
    Backward moves ``backward_traffic_factor`` times the forward; AC adds one more forward.
    """
    h, i, c = shape.hidden_size, shape.intermediate_size, p.compute
    fwd = 2 * h * (28 + 4 * c) + 10 * (shape.q_size + shape.kv_size) * c + 2 * shape.q_size * c
    fwd += 6 * h * c + 5 * i * c
    passes = 1.0 + a.backward_traffic_factor + ac
    return shape.num_layers * fwd * passes + (40 + 2 * c) * shape.vocab_size


@dataclass(frozen=True, kw_only=True)
class ComputeTime:
    """Seconds of one GPU's compute for one optimizer step, by kind."""

    gemm_s: float
    attention_s: float
    elementwise_s: float
    optimizer_s: float
    fsdp_copy_s: float = 0.0
    """FSDP2's copies on the compute stream: all-gather copy-out and reduce-scatter copy-in
    (``fsdp_copy_bytes``), per micro-batch."""

    @property
    def total_s(self) -> float:
        return (
            self.gemm_s
            + self.attention_s
            + self.elementwise_s
            + self.optimizer_s
            + self.fsdp_copy_s
        )


def compute_time(
    shape: ModelShape,
    it: InstanceType,
    gen: GpuGeneration,
    p: Precision,
    *,
    tokens: int,
    seq: int,
    ac: float,
    shard_elems: int,
    a: Assumptions,
    ac_mode: str = "full",
    frozen_elems: int = 0,
    lora_params: int | None = None,
    lora_skipped: int = 0,
    copy_bytes: float = 0.0,
) -> ComputeTime:
    """Compute seconds of one step for ``tokens`` tokens on one GPU.

    ``copy_bytes``: HBM bytes FSDP2 copies on the compute stream per micro-batch
    (``fsdp_copy_bytes``), at the memory-bound ops' bandwidth.

    ``shard_elems``: the trainable shard (AdamW runs over it); ``frozen_elems``: a frozen
    shard (LoRA's base: cast for its all-gathers, never stepped); ``lora_params``: see
    ``executed_flops_per_token`` (and ``lora_skipped``)."""
    peak = it.peak_bf16_tflops * 1e12
    hbm = gen.hbm_gbytes_per_s * 1e9 * a.hbm_efficiency
    fl = executed_flops_per_token(shape, seq, ac, ac_mode, lora_params, lora_skipped)
    # AdamW (fused: one pass): read param, grad, m, v; write param, m, v; plus the dtype cast
    # of the parameter shard before each all-gather (read param, write compute copy). Both AC
    # modes recompute every elementwise op of a checkpointed layer (``ac`` more passes).
    optim_bytes = shard_elems * (2 * p.param + p.grad + 4 * p.optim + p.param + p.compute)
    optim_bytes += frozen_elems * (p.param + p.compute)
    return ComputeTime(
        gemm_s=tokens * fl.gemm / (peak * gen.gemm_efficiency),
        attention_s=tokens * fl.attention / (peak * gen.attention_efficiency),
        elementwise_s=tokens * elementwise_bytes_per_token(shape, p, ac, a) / hbm,
        optimizer_s=optim_bytes / hbm,
        fsdp_copy_s=copy_bytes / hbm,
    )


def fsdp_copy_bytes(units: list[Unit], p: Precision, *, sharded: bool) -> float:
    """HBM bytes FSDP2 moves on the compute stream per micro-batch, outside any collective.

    All-gather copy-out: each all-gather lands in one flat buffer, which
    ``FSDPParamGroup.wait_for_unshard`` copies into the unsharded parameters
    (``foreach_all_gather_copy_out``: ``split_with_sizes_copy``, on the current stream; world
    size 1 copies the shard instead): read + write the unit in the compute dtype, per gather.
    Reduce-scatter copy-in: ``foreach_reduce`` copies the unsharded gradients (compute dtype)
    into the reduce-scatter input in the reduce dtype (``foreach_reduce_scatter_copy_in``,
    ``torch._chunk_cat``) before it makes the reduce-scatter stream wait on the current one
    (torch 2.13, torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py and
    _fsdp_param_group.py). These do not shrink with the micro-batch: at 2 x 2048 tokens of a
    70B model they are ~7% of the step. ``sharded`` False (NO_SHARD's ``replicate``): none.
    """
    if not sharded:
        return 0.0
    gathered = sum(u.gathers * u.params for u in units)
    reduced = sum(u.grad_params for u in units)
    return gathered * 2 * p.compute + reduced * (p.compute + p.reduce)


OPS = ("all_gather", "reduce_scatter", "all_reduce")


@dataclass(frozen=True, kw_only=True)
class Link:
    """Bus bandwidth and per-hop latency of the ring a collective runs on (its all-gather
    figures; ``for_op`` gives another op's)."""

    name: str
    """``nvlink`` or ``network``."""
    bus_bytes_per_s: float
    hop_latency_s: float
    ratios: tuple[float, float, float, float] = (1.0, 1.0, 1.0, 1.0)
    """(reduce-scatter bus, reduce-scatter latency, all-reduce bus, all-reduce latency) relative
    to the all-gather's (``Assumptions.reduce_scatter_bus_ratio`` ...)."""

    def for_op(self, op: str) -> Link:
        """The link with ``op``'s bus bandwidth (nccl-tests' busbw) and per-hop latency."""
        if op == "all_gather":
            return self
        if op not in OPS:
            raise ValueError(f"op {op!r}: one of {', '.join(OPS)}")
        bus, lat = self.ratios[:2] if op == "reduce_scatter" else self.ratios[2:]
        return Link(
            name=self.name,
            bus_bytes_per_s=self.bus_bytes_per_s * bus,
            hop_latency_s=self.hop_latency_s * lat,
        )


def ring_link(group: int, ranks_per_node: int, it: InstanceType, a: Assumptions) -> Link:
    """The link a ring of ``group`` ranks runs on, ``ranks_per_node`` of them in each node.

    Inside one node: NVLink per GPU x efficiency. Across nodes a ring enters each node once,
    so its bus bandwidth is the node's network bandwidth, shared by the
    ``gpus / ranks_per_node`` rings that run at the same time (one per shard position).
    """
    ratios = (
        a.reduce_scatter_bus_ratio,
        a.reduce_scatter_latency_ratio,
        a.all_reduce_bus_ratio,
        a.all_reduce_latency_ratio,
    )
    if group <= ranks_per_node:
        return Link(
            name="nvlink",
            bus_bytes_per_s=it.nvlink_gbytes_per_s * 1e9 * a.nvlink_efficiency,
            hop_latency_s=a.intra_hop_latency_s,
            ratios=ratios,
        )
    concurrent = max(1, it.gpus // ranks_per_node)
    bus = min(
        it.nvlink_gbytes_per_s * a.nvlink_efficiency,
        it.inter_node_gbytes_per_s * a.network_efficiency / concurrent,
    )
    return Link(
        name="network",
        bus_bytes_per_s=bus * 1e9,
        hop_latency_s=a.inter_hop_latency_s,
        ratios=ratios,
    )


def ring_time(nbytes: float, ranks: int, link: Link, factor: float = 1.0) -> float:
    """Seconds of a ring collective moving ``nbytes`` (full tensor size) on ``link`` as given.

    all-gather / reduce-scatter: factor 1, (n-1)/n of the bytes cross each link;
    all-reduce: factor 2 (reduce-scatter then all-gather). ``collective_time`` picks the op's
    own figures.
    """
    if ranks <= 1:
        return 0.0
    return factor * (
        nbytes * (ranks - 1) / ranks / link.bus_bytes_per_s + (ranks - 1) * link.hop_latency_s
    )


def collective_time(op: str, nbytes: float, ranks: int, link: Link) -> float:
    """Seconds of one ``op`` (``OPS``) of ``nbytes`` (full tensor) with the op's own figures.

    The bus bandwidth is nccl-tests' busbw of that op, so an all-reduce moves twice the bytes
    and hops of an all-gather (factor 2), as ``training.preflight`` reports it.
    """
    return ring_time(nbytes, ranks, link.for_op(op), 2.0 if op == "all_reduce" else 1.0)


def scalar_all_reduce_time(ranks: int, link: Link) -> float:
    """Seconds of an all-reduce of a few bytes: latency only, down and up a tree.

    Across nodes NCCL's tuner picks its tree algorithm for small all-reduces (about 2 log2 n
    hops rather than a ring's 2(n-1)); at 2 ranks both are 2 hops, which is what gloo's ring
    does there.
    """
    if ranks <= 1:
        return 0.0
    return 2.0 * math.ceil(math.log2(ranks)) * link.for_op("all_reduce").hop_latency_s


@dataclass(frozen=True, kw_only=True)
class Unit:
    """One FSDP2 unit of the training package and how often a step gathers it."""

    name: str
    params: int
    gathers: int
    """All-gathers per micro-batch: 2 when resharded after forward (backward gathers it
    again), 1 when kept."""
    edge: bool
    """Embedding / head: its forward gather and reduce-scatter have nothing to hide behind
    (exposed on a GPU too); the embedding's backward gather is prefetched under layer 0."""
    trainable: int = -1
    """Parameters with a gradient (reduce-scattered); -1: all of them (full fine-tuning)."""

    @property
    def grad_params(self) -> int:
        return self.params if self.trainable < 0 else self.trainable


def fsdp_units(
    shape: ModelShape,
    reshard_after_forward: bool,
    *,
    replicated: bool = False,
    lora_per_layer: int | None = None,
) -> list[Unit]:
    """The units ``training.parallelize.parallelize`` builds, in forward order.

    ``fully_shard`` on the token embedding and on every decoder layer (resharded after forward
    under FULL_SHARD / HYBRID_SHARD, so backward all-gathers them again), then on
    ``[norm, lm_head]`` and the root, both kept after forward (backward needs them first).
    The root holds no parameters of its own then (no collectives). With tied embeddings the
    embedding and head are one parameter and stay in the root, with the final norm.
    ``replicated`` (NO_SHARD): ``replicate`` goes on each layer and the root only, so the root
    keeps embedding, norm and lm_head.
    ``lora_per_layer``: LoRA's adapter parameters in each layer; they join the layer's unit
    (``training.lora`` injects them before sharding) and are its only trainable parameters,
    so only they are reduce-scattered; the edge units are frozen.
    """
    units = _units(shape, reshard_after_forward, replicated)
    if lora_per_layer is None:
        return units
    return [
        Unit(name=u.name, params=u.params, gathers=u.gathers, edge=True, trainable=0)
        if u.edge
        else Unit(
            name=u.name,
            params=u.params + lora_per_layer,
            gathers=u.gathers,
            edge=False,
            trainable=lora_per_layer,
        )
        for u in units
    ]


def _units(shape: ModelShape, reshard_after_forward: bool, replicated: bool) -> list[Unit]:
    again = 2 if reshard_after_forward else 1
    h, v = shape.hidden_size, shape.vocab_size
    layers = [
        Unit(name=f"layer {i}", params=shape.layer_params, gathers=again, edge=False)
        for i in range(shape.num_layers)
    ]
    if replicated:
        root = Unit(
            name="root (embedding, norm, lm_head)", params=shape.root_params, gathers=1, edge=True
        )
        return [*layers, root]
    if shape.tie_word_embeddings:
        root = Unit(name="root (embedding, norm)", params=shape.root_params, gathers=1, edge=True)
        return [*layers, root]
    embed = Unit(name="embedding", params=v * h, gathers=again, edge=True)
    head = Unit(name="norm, lm_head", params=shape.root_params - v * h, gathers=1, edge=True)
    return [embed, *layers, head]


@dataclass(frozen=True, kw_only=True)
class CommTime:
    """Seconds of collectives per step, and how much of it the step waits for."""

    nvlink_s: float
    network_s: float
    exposed_s: float
    interference_s: float
    """Compute slowdown from the SMs NCCL occupies while it overlaps compute."""

    @property
    def total_s(self) -> float:
        return self.nvlink_s + self.network_s


def comm_time(
    shape: ModelShape,
    lay: Layout,
    it: InstanceType,
    gen: GpuGeneration,
    p: Precision,
    comp: ComputeTime,
    recompute: float,
    a: Assumptions,
    *,
    replica_sync: bool = True,
    lora_per_layer: int | None = None,
) -> CommTime:
    """FSDP2 collectives of one micro-batch, per unit, and the part compute does not hide.

    ``recompute``: the forward work AC repeats in backward (``recompute_share``), which splits
    each layer's compute between the forward and the backward it overlaps with.
    ``replica_sync``: whether this micro-batch all-reduces across replicas (HSDP / NO_SHARD).
    The training package does so only on the last micro-batch of a step.
    ``lora_per_layer``: LoRA's adapters per layer (``fsdp_units``): gathered with the frozen
    base, and the only gradients reduced.
    """
    gpn = min(it.gpus, lay.world)
    shard_link = ring_link(lay.shard, min(lay.shard, gpn), it, a)
    # HSDP / NO_SHARD replicas: one rank per shard group in each node joins each all-reduce.
    replica_per_node = max(1, gpn // lay.shard) if lay.shard < gpn else 1
    replica_link = ring_link(lay.replicas, replica_per_node, it, a)
    world_link = ring_link(lay.world, min(lay.world, gpn), it, a)

    units = fsdp_units(
        shape,
        lay.reshard_after_forward,
        replicated=lay.strategy == "NO_SHARD",
        lora_per_layer=lora_per_layer,
    )
    layers = sum(1 for u in units if not u.edge)
    per_layer_compute = comp.total_s - comp.optimizer_s
    fwd_share = 1.0 / (3.0 + recompute)
    fwd_layer = per_layer_compute * fwd_share / max(1, layers)
    bwd_layer = per_layer_compute * (1.0 - fwd_share) / max(1, layers)

    totals = {"nvlink": 0.0, "network": 0.0}
    exposed = 0.0
    overlapped = 0.0
    for u in units:
        ag = collective_time("all_gather", u.params * p.compute, lay.shard, shard_link)
        ag_bwd = ag if u.gathers == 2 else 0.0
        # A unit without gradients (LoRA's frozen edges) reduces nothing: FSDP2's post-backward
        # reduce-scatters only the parameters that have a gradient (FSDPParamGroup.post_backward
        # in torch/distributed/fsdp/_fully_shard/_fsdp_param_group.py, torch 2.13).
        grads = u.grad_params
        rs = collective_time("reduce_scatter", grads * p.reduce, lay.shard, shard_link)
        ar = (
            collective_time("all_reduce", grads * p.reduce / lay.shard, lay.replicas, replica_link)
            if replica_sync
            else 0.0
        )
        if not grads:
            rs = ar = 0.0
        totals[shard_link.name] += ag + ag_bwd + rs
        totals[replica_link.name] += ar
        if not gen.overlaps_comm:  # a blocking backend: every collective waits
            exposed += ag + ag_bwd + rs + ar
            continue
        if u.edge:
            # The first all-gather of forward and the last reduce-scatter of backward have
            # nothing beside them (kept exposed for [norm, lm_head] too, as for the old root
            # unit). The embedding's backward all-gather, though, is prefetched by layer 0's
            # backward (training.parallelize._set_prefetch; FSDPParamGroup.pre_backward
            # unshards on the all-gather stream), so it hides under one layer's backward.
            hidden = min(ag_bwd, bwd_layer)
            exposed += ag + rs + ar + ag_bwd - hidden
            overlapped += hidden
            continue
        fwd_excess = max(0.0, ag - fwd_layer)
        bwd_excess = max(0.0, ag_bwd + rs + ar - bwd_layer)
        exposed += fwd_excess + bwd_excess
        overlapped += (ag - fwd_excess) + (ag_bwd + rs + ar - bwd_excess)
    # The step's scalar all-reduces over the world (training.finetune.Trainer.train_step): the
    # global gradient norm, the loss sum and the stop/checkpoint vote; latency only. On a GPU
    # the vote is a CPU collective the device does not wait for (host_step_all_reduces).
    # Once per step: counted with the synced (last) micro-batch.
    if replica_sync:
        device_scalars = a.step_all_reduces - (a.host_step_all_reduces if gen.overlaps_comm else 0)
        scalars = device_scalars * scalar_all_reduce_time(lay.world, world_link)
        totals[world_link.name] += scalars
        exposed += scalars
    interference = overlapped * gen.nccl_sm_fraction
    return CommTime(
        nvlink_s=totals["nvlink"],
        network_s=totals["network"],
        exposed_s=exposed,
        interference_s=interference,
    )
