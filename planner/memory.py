"""Memory per GPU under FSDP2: sharded state, gathered units, activations, overheads.

Parametric in dtypes (``Precision``): the same formulas predict an fp32 CPU run and a
bf16-compute / fp32-master GPU run. Sharding follows FSDP2 exactly: every parameter is split
on dim 0 into ``shard`` chunks of ceil(d0 / shard) rows, so the largest shard (rank 0) holds
sum(ceil(d0 / shard) x rest) elements.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from planner.assumptions import Assumptions
from planner.shapes import ModelShape

STRATEGIES = ("FULL_SHARD", "SHARD_GRAD_OP", "HYBRID_SHARD", "NO_SHARD")
AC_MODES = ("full", "selective")
"""How checkpointed layers recompute (training's ``--ac_mode``; its ``none`` is ``ac=0`` here)."""


@dataclass(frozen=True, kw_only=True)
class Precision:
    """Bytes per element of each kind of tensor."""

    name: str
    """``mixed`` (bf16 compute, fp32 master/grads/optimizer, fp32 reduce), ``pure_bf16``, ``fp32``."""
    param: int
    """Sharded parameters as stored (the master copy)."""
    compute: int
    """Unsharded (all-gathered) parameters and activations."""
    grad: int
    """Sharded gradients."""
    reduce: int
    """Gradient reduce-scatter / all-reduce dtype."""
    optim: int
    """Each AdamW state tensor (exp_avg, exp_avg_sq): the parameter's dtype."""


PRECISIONS: dict[str, Precision] = {
    "mixed": Precision(name="mixed", param=4, compute=2, grad=4, reduce=4, optim=4),
    "pure_bf16": Precision(name="pure_bf16", param=2, compute=2, grad=2, reduce=2, optim=2),
    "fp32": Precision(name="fp32", param=4, compute=4, grad=4, reduce=4, optim=4),
}


@dataclass(frozen=True, kw_only=True)
class Layout:
    """How the world is split: FSDP shard groups x replicas."""

    strategy: str
    """FULL_SHARD | SHARD_GRAD_OP | HYBRID_SHARD | NO_SHARD."""
    world: int
    """GPUs in the job."""
    shard: int
    """Ranks a parameter is sharded over."""

    @property
    def replicas(self) -> int:
        """Copies of each shard (data-parallel replicas of the shard group)."""
        return self.world // self.shard

    @property
    def reshard_after_forward(self) -> bool:
        """FULL_SHARD and HYBRID_SHARD free the gathered parameters after each unit's forward."""
        return self.strategy != "SHARD_GRAD_OP"


def layout(strategy: str, world: int, gpus_per_node: int, hsdp_group: int | None = None) -> Layout:
    """The Layout of a strategy; HYBRID_SHARD shards over ``hsdp_group`` (default: one node)."""
    if strategy not in STRATEGIES:
        raise ValueError(f"--sharding {strategy}: one of {', '.join(STRATEGIES)}")
    if strategy == "NO_SHARD":
        return Layout(strategy=strategy, world=world, shard=1)
    if strategy == "HYBRID_SHARD":
        group = hsdp_group or min(gpus_per_node, world)
        if group < 1 or world % group:
            raise ValueError(f"--hsdp-group {group} does not divide the world size {world}")
        return Layout(strategy=strategy, world=world, shard=group)
    return Layout(strategy=strategy, world=world, shard=world)


def shard_elements(shapes: list[tuple[int, ...]], shard: int) -> int:
    """Elements of the largest FSDP2 shard (rank 0): sum of ceil(d0 / shard) x rest."""
    total = 0
    for shape in shapes:
        rest = math.prod(shape[1:])
        total += math.ceil(shape[0] / shard) * rest
    return total


def rank_shard_elements(shapes: list[tuple[int, ...]], shard: int, rank: int) -> int:
    """Elements rank ``rank`` holds (torch.chunk split: the last ranks may hold fewer rows)."""
    total = 0
    for shape in shapes:
        rows = math.ceil(shape[0] / shard)
        mine = max(0, min(rows, shape[0] - rank * rows))
        total += mine * math.prod(shape[1:])
    return total


@dataclass(frozen=True, kw_only=True)
class ActivationModel:
    """Bytes of saved activations per token (see docs/planner.md, 'Activations')."""

    per_layer: float
    """Everything one decoder layer saves for backward, per token."""
    layer_input: float
    """What a checkpointed layer keeps: its input hidden state, per token."""
    selective: float
    """What a layer under op-level selective AC keeps (``--ac_mode selective``), per token: its
    input, the outputs of every other matmul (q, v, gate, down of the seven) and attention's
    output and log-sum-exp."""
    head: float
    """Final norm, lm_head input, the logits (compute dtype) and the loss's per-token state."""


def activation_model(shape: ModelShape, p: Precision) -> ActivationModel:
    """Per-token saved bytes of HF LlamaDecoderLayer with SDPA (flash) attention.

    attention half: RMSNorm saves its fp32 input, the 1/rms scale and the cast normalized input,
      h(4 + c) + 4; q/k/v projections save their input h c; SDPA saves q, k, v (GQA-native:
      k and v at kv width) and the fp32 logsumexp per head; its output, laid out (B, S, H, D),
      is o_proj's input without a copy: h_q c.
    MLP half: RMSNorm h(4 + c) + 4; gate/up input h c; SiLU input, SiLU output, up output and
      the product (down_proj input) 4 i c. RoPE multiplies by constant cos/sin and saves nothing
      per token; residual adds save nothing; dropout is 0.
    head: final norm and lm_head input, then the chunked cross-entropy's saved state
      (``training/loss.py``): the logits in the compute dtype V c (its backward writes the
      gradient into their storage), the fp32 log-sum-exp 4, the target index 8 and its mask 1.
      Its transient fp32 chunks are ``loss_chunk_bytes``, a constant, not per token.
    selective (torchtitan's op-level SAC, ``training.parallelize.sac_policy``, on Llama's
      unbiased projections): the layer's input h c, the outputs of the matmuls it saves,
      q (h_q c), v (h_kv c), gate (i c) and down (h c), and SDPA's output h_q c with its fp32
      log-sum-exp per head; the norms, RoPE, SiLU, the products and the k, o and up matmuls
      are recomputed in backward.
    Checked against autograd's saved tensors and the CPU allocator's live bytes per AC mode in
    tests/planner/test_activations_vs_autograd.py.
    """
    h, i, c = shape.hidden_size, shape.intermediate_size, p.compute
    norm = h * (4 + c) + 4
    attention = norm + h * c + (shape.q_size + 2 * shape.kv_size) * c + 4 * shape.num_heads
    attention += shape.q_size * c
    mlp = norm + h * c + 4 * i * c
    head = norm + h * c + shape.vocab_size * c + 4 + 8 + 1
    saved_by_sac = (2 * shape.q_size + shape.kv_size + i + h) * c + 4 * shape.num_heads
    return ActivationModel(
        per_layer=attention + mlp, layer_input=h * c, selective=h * c + saved_by_sac, head=head
    )


def loss_chunk_bytes(
    vocab: int, tokens: int, compute_bytes: int, chunk_bytes: int, min_chunks: int = 4
) -> int:
    """Transient memory of the chunked cross-entropy (``training/loss.py``).

    Chunks of ``rows = min(chunk_bytes // (4 V), ceil(tokens / min_chunks))`` tokens
    (``training.loss.chunk_rows_for``). In a
    low-precision run the forward holds the chunk's fp32 copy and logsumexp's fp32
    exponentials (2 fp32 chunks) and the backward one fp32 chunk; in fp32 the copy is a view,
    leaving one. No fp32 copy of the whole logits ever exists.
    """
    rows = max(1, min(chunk_bytes // (4 * vocab), -(-tokens // min_chunks)))
    return rows * vocab * 4 * (1 if compute_bytes >= 4 else 2)


@dataclass(frozen=True, kw_only=True)
class MemoryBreakdown:
    """Bytes per GPU (the largest rank)."""

    params: int
    grads: int
    optimizer: int
    activations: int
    """Saved activations for the chosen AC setting."""
    activations_no_ac: int
    activations_ac: int
    gathered_unit: int
    """One unsharded copy of the largest FSDP unit, in the compute dtype."""
    gathered_unit_name: str
    """``decoder layer``, ``embedding``, ``norm, lm_head`` or ``root (embedding, norm, lm_head)``."""
    gathered_peak: int
    """Transient unsharded parameters and gradients at the peak."""
    overhead: int
    """CUDA context + NCCL buffers + allocator fragmentation."""
    grad_at_peak: int = 0
    """The part of ``gathered_peak`` that is the largest unit's unsharded gradient
    (``grad_unit_at_peak``)."""

    @property
    def sharded_state(self) -> int:
        """Parameters + gradients + optimizer state."""
        return self.params + self.grads + self.optimizer

    @property
    def total(self) -> int:
        """Peak bytes per GPU."""
        return self.sharded_state + self.activations + self.gathered_peak + self.overhead

    def as_dict(self) -> dict[str, int | str]:
        """Plain values for the JSON output."""
        return {
            "params": self.params,
            "grads": self.grads,
            "optimizer": self.optimizer,
            "activations": self.activations,
            "activations_no_ac": self.activations_no_ac,
            "activations_ac": self.activations_ac,
            "gathered_unit": self.gathered_unit,
            "gathered_unit_name": self.gathered_unit_name,
            "gathered_peak": self.gathered_peak,
            "overhead": self.overhead,
            "sharded_state": self.sharded_state,
            "total": self.total,
        }


def grad_unit_at_peak(unit_params: int, p: Precision, layer_freed: float) -> int:
    """The largest unit's unsharded gradient (compute dtype) and its reduce-dtype copy, beyond
    what its layer's backward has freed by then.

    Autograd frees each saved tensor once the op that saved it has run backward, so a layer's
    saved (or recomputed) activations are gone when its backward ends; only then does FSDP2's
    post-backward copy the gradients into the reduce-scatter input (``foreach_reduce``: the
    copy-in follows the layer's backward on the compute stream). The bf16 gradient grows
    while the activations shrink, so at the peak the pair adds only what exceeds the layer's
    activations (Llama-2-13B, 2 x 4096 tokens, no AC: 1.9 GB of gradients against 1.9 GB of
    activations, nothing; counted whole before, 1.8 GiB too much).
    """
    grads = unit_params * (p.compute + (p.reduce if p.reduce != p.compute else 0))
    return int(max(0.0, grads - layer_freed))


def memory(
    shape: ModelShape,
    lay: Layout,
    p: Precision,
    *,
    batch: int,
    seq: int,
    ac: float,
    a: Assumptions,
    ac_mode: str = "full",
) -> MemoryBreakdown:
    """Peak memory of one GPU for one training step.

    ``ac``: fraction of the decoder layers checkpointed; ``ac_mode``: how (``full``: the layer's
    input only, ``selective``: op-level SAC, see ``activation_model``).
    """
    if ac_mode not in AC_MODES:
        raise ValueError(f"ac_mode {ac_mode!r}: one of {', '.join(AC_MODES)}")
    elems = shard_elements(shape.param_shapes(), lay.shard)
    params = elems * p.param
    grads = elems * p.grad
    # AdamW exp_avg and exp_avg_sq. The package runs it fused (torch 2.13 adam.py::_fused_adam:
    # one torch._fused_adamw_ call updates params, m and v in place), so a step allocates no
    # shard-sized temporaries (the foreach path's _foreach_sqrt(v) would be one more shard);
    # the per-tensor step counters are a few bytes each.
    optimizer = elems * 2 * p.optim

    tokens = batch * seq
    act = activation_model(shape, p)
    loss_tmp = loss_chunk_bytes(
        shape.vocab_size, tokens, p.compute, a.loss_chunk_bytes, a.loss_min_chunks
    )
    no_ac = int(tokens * (shape.num_layers * act.per_layer + act.head)) + loss_tmp
    with_ac = (
        int(tokens * (shape.num_layers * act.layer_input + act.per_layer + act.head)) + loss_tmp
    )

    # The units training.parallelize builds: NO_SHARD replicates each layer and the root (which
    # keeps embedding, norm and lm_head); the sharded strategies shard the embedding and
    # [norm, lm_head] apart (a tied embedding/head stays in the root with the norm).
    if lay.strategy == "NO_SHARD" or shape.tie_word_embeddings:
        kept_name = "root (embedding, norm, lm_head)"
        edges = {kept_name: shape.root_params}
    else:
        embed = shape.vocab_size * shape.hidden_size
        kept_name = "norm, lm_head"
        edges = {"embedding": embed, kept_name: shape.root_params - embed}
    unit_name, unit_params = max(
        [("decoder layer", shape.layer_params), *edges.items()], key=lambda u: u[1]
    )
    gathered_unit = unit_params * p.compute
    checkpointed = round(ac * shape.num_layers)
    if ac_mode == "selective":
        kept = act.selective
        recomputed = act.per_layer - (kept - act.layer_input) + act.layer_input  # + down's h c
    else:
        kept, recomputed = act.layer_input, act.per_layer
    # What the unit's backward frees before FSDP2 reduces its gradient: a layer's saved (or,
    # checkpointed, recomputed) activations, the smaller kind when the layers mix; the head's
    # logits and loss state; the embedding's backward frees nothing.
    if unit_name == "decoder layer":
        freed = tokens * min(
            act.per_layer if checkpointed < shape.num_layers else math.inf,
            recomputed if checkpointed else math.inf,
        )
    elif unit_name == kept_name:
        freed = tokens * act.head
    else:
        freed = 0.0
    grad_unit = grad_unit_at_peak(unit_params, p, freed)
    if lay.reshard_after_forward:
        # [norm, lm_head] (or the root that holds a tied head) is not resharded after forward
        # (backward needs it first): it is gathered at the peak, between forward and backward;
        # the embedding is resharded after its forward like the layers, which are gathered
        # two at a time (the running one and the prefetched next).
        gathered_peak = (
            edges[kept_name] * p.compute
            + a.prefetch_units * shape.layer_params * p.compute
            + grad_unit
        )
    else:
        gathered_peak = shape.n_params * p.compute + grad_unit
    # A fraction ``ac`` of the layers is checkpointed (1.0: every layer, --ac; 0.0: none). In
    # backward the layer being recomputed holds what it saves without AC again: all of it under
    # full AC; under selective AC the recomputed part, since the kept outputs are handed back
    # and freed as the replay uses them, except one: non-reentrant checkpoint stops the replay
    # early (torch.utils.checkpoint, set_checkpoint_early_stop), as soon as the last saved
    # tensor is produced, the down projection's input, before the down matmul hands over its
    # kept output, so that h c stays alive through the layer's backward (measured exactly).
    chosen = (
        int(
            tokens
            * (
                (shape.num_layers - checkpointed) * act.per_layer
                + checkpointed * kept
                + act.head
                + (recomputed if checkpointed else 0.0)
            )
        )
        + loss_tmp
    )
    # The allocator's slack falls on what is allocated and freed at varying sizes within a step
    # (gathered units, the recomputed layer, the loss chunks), not on the saved activations:
    # those are allocated in forward and freed in backward in the same sizes and order every
    # step, which the caching allocator serves again from the blocks of the step before
    # (PyTorch "CUDA semantics", memory management: fragmentation comes from allocation sizes
    # that change between iterations).
    saved = int(tokens * ((shape.num_layers - checkpointed) * act.per_layer + checkpointed * kept))
    transient = chosen - saved + gathered_peak
    overhead = a.cuda_context_bytes + a.nccl_buffer_bytes + int(a.fragmentation * transient)
    return MemoryBreakdown(
        params=params,
        grads=grads,
        optimizer=optimizer,
        activations=chosen,
        activations_no_ac=no_ac,
        activations_ac=with_ac,
        gathered_unit=gathered_unit,
        gathered_unit_name=unit_name,
        gathered_peak=gathered_peak,
        overhead=overhead,
        grad_at_peak=grad_unit,
    )
