"""Step time: compute on the roofline of one GPU, FSDP collectives on NVLink and the network.

compute = GEMM FLOPs / (peak x gemm_efficiency) + attention FLOPs / (peak x attention_efficiency)
          + elementwise HBM bytes / (HBM bandwidth x hbm_efficiency) + optimizer bytes / HBM
comm    = ring collectives: bytes x (n-1)/n / bus bandwidth + (n-1) x hop latency
exposed = comm that does not fit under the compute of the unit it is prefetched for
          (per layer, forward and backward separately) + the unoverlappable first all-gather
          and last reduce-scatter + the SM share NCCL steals from overlapped compute.
"""

from __future__ import annotations

from dataclasses import dataclass

from infra.instances import InstanceType
from planner.assumptions import Assumptions, GpuGeneration
from planner.memory import Layout, Precision
from planner.shapes import ModelShape


def model_flops_per_token(shape: ModelShape, seq: int) -> float:
    """MFU FLOPs per token (PaLM convention): 6 N_matmul + 12 L h_q s.

    N_matmul = every weight multiplied per token (layer projections and lm_head; the embedding
    lookup is free); 12 L h_q s = QK^T and AV, forward + backward, without causal savings.
    """
    return 6.0 * shape.matmul_params + 12.0 * shape.num_layers * shape.q_size * seq


@dataclass(frozen=True, kw_only=True)
class FlopsExecuted:
    """FLOPs the hardware runs per token (recomputation and causal masking included)."""

    gemm: float
    attention: float


def executed_flops_per_token(shape: ModelShape, seq: int, ac: float) -> FlopsExecuted:
    """GEMM: 6 N_matmul + 2 N_layers x ac (checkpointed layers run their forward again).

    Attention: flash attention skips the masked half: 6 L h_q s + 2 L h_q s x ac.
    ``ac``: fraction of decoder layers checkpointed (1.0 = every layer, 0.0 = none).
    """
    layers_matmul = shape.layer_matmul_params * shape.num_layers
    gemm = 6.0 * shape.matmul_params + 2.0 * layers_matmul * ac
    attn_fwd = 2.0 * shape.num_layers * shape.q_size * seq  # 4 L h s forward, halved (causal)
    attention = 3.0 * attn_fwd + attn_fwd * ac
    return FlopsExecuted(gemm=gemm, attention=attention)


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

    @property
    def total_s(self) -> float:
        return self.gemm_s + self.attention_s + self.elementwise_s + self.optimizer_s


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
) -> ComputeTime:
    """Compute seconds of one step for ``tokens`` tokens on one GPU."""
    peak = it.peak_bf16_tflops * 1e12
    hbm = gen.hbm_gbytes_per_s * 1e9 * a.hbm_efficiency
    fl = executed_flops_per_token(shape, seq, ac)
    # AdamW (foreach): read param, grad, m, v; write param, m, v; plus the dtype cast of the
    # parameter shard before each all-gather (read param, write compute copy).
    optim_bytes = shard_elems * (2 * p.param + p.grad + 4 * p.optim + p.param + p.compute)
    return ComputeTime(
        gemm_s=tokens * fl.gemm / (peak * gen.gemm_efficiency),
        attention_s=tokens * fl.attention / (peak * gen.attention_efficiency),
        elementwise_s=tokens * elementwise_bytes_per_token(shape, p, ac, a) / hbm,
        optimizer_s=optim_bytes / hbm,
    )


@dataclass(frozen=True, kw_only=True)
class Link:
    """Bus bandwidth and per-hop latency of the ring a collective runs on."""

    name: str
    """``nvlink`` or ``network``."""
    bus_bytes_per_s: float
    hop_latency_s: float


def ring_link(group: int, ranks_per_node: int, it: InstanceType, a: Assumptions) -> Link:
    """The link a ring of ``group`` ranks runs on, ``ranks_per_node`` of them in each node.

    Inside one node: NVLink per GPU x efficiency. Across nodes a ring enters each node once,
    so its bus bandwidth is the node's network bandwidth, shared by the
    ``gpus / ranks_per_node`` rings that run at the same time (one per shard position).
    """
    if group <= ranks_per_node:
        return Link(
            name="nvlink",
            bus_bytes_per_s=it.nvlink_gbytes_per_s * 1e9 * a.nvlink_efficiency,
            hop_latency_s=a.intra_hop_latency_s,
        )
    concurrent = max(1, it.gpus // ranks_per_node)
    bus = min(
        it.nvlink_gbytes_per_s * a.nvlink_efficiency,
        it.inter_node_gbytes_per_s * a.network_efficiency / concurrent,
    )
    return Link(name="network", bus_bytes_per_s=bus * 1e9, hop_latency_s=a.inter_hop_latency_s)


def ring_time(nbytes: float, ranks: int, link: Link, factor: float = 1.0) -> float:
    """Seconds of a ring collective moving ``nbytes`` (full tensor size).

    all-gather / reduce-scatter: factor 1, (n-1)/n of the bytes cross each link;
    all-reduce: factor 2 (reduce-scatter then all-gather).
    """
    if ranks <= 1:
        return 0.0
    return factor * (
        nbytes * (ranks - 1) / ranks / link.bus_bytes_per_s + (ranks - 1) * link.hop_latency_s
    )


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
    ac: float,
    a: Assumptions,
    *,
    replica_sync: bool = True,
) -> CommTime:
    """FSDP2 collectives of one micro-batch, per unit, and the part compute does not hide.

    ``replica_sync``: whether this micro-batch all-reduces across replicas (HSDP / NO_SHARD).
    The training package does so only on the last micro-batch of a step.
    """
    gpn = min(it.gpus, lay.world)
    shard_link = ring_link(lay.shard, min(lay.shard, gpn), it, a)
    # HSDP / NO_SHARD replicas: one rank per shard group in each node joins each all-reduce.
    replica_per_node = max(1, gpn // lay.shard) if lay.shard < gpn else 1
    replica_link = ring_link(lay.replicas, replica_per_node, it, a)

    units = [shape.layer_params] * shape.num_layers + [shape.root_params]
    per_layer_compute = comp.total_s - comp.optimizer_s
    fwd_share = 1.0 / (3.0 + ac)
    fwd_layer = per_layer_compute * fwd_share / shape.num_layers
    bwd_layer = per_layer_compute * (1.0 - fwd_share) / shape.num_layers

    totals = {"nvlink": 0.0, "network": 0.0}
    exposed = 0.0
    overlapped = 0.0
    for k, n in enumerate(units):
        ag = ring_time(n * p.compute, lay.shard, shard_link)
        is_root = k == len(units) - 1  # the root is never resharded after forward
        ag_bwd = ag if lay.reshard_after_forward and not is_root else 0.0
        rs = ring_time(n * p.reduce, lay.shard, shard_link)
        ar = (
            ring_time(n * p.reduce / lay.shard, lay.replicas, replica_link, factor=2.0)
            if replica_sync
            else 0.0
        )
        totals[shard_link.name] += ag + ag_bwd + rs
        totals[replica_link.name] += ar
        if is_root:  # gathered before the first layer, reduced after the last: exposed
            exposed += ag + rs + ar
            continue
        fwd_excess = max(0.0, ag - fwd_layer)
        bwd_excess = max(0.0, ag_bwd + rs + ar - bwd_layer)
        exposed += fwd_excess + bwd_excess
        overlapped += (ag - fwd_excess) + (ag_bwd + rs + ar - bwd_excess)
    interference = overlapped * gen.nccl_sm_fraction
    return CommTime(
        nvlink_s=totals["nvlink"],
        network_s=totals["network"],
        exposed_s=exposed,
        interference_s=interference,
    )
