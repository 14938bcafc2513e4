"""LoRA on a frozen base (training's ``--use_peft``): bytes per GPU and the smallest fleet.

What changes against full fine-tuning (``planner.memory.memory``), tensor by tensor:

- **Sharded state.** The base keeps its FSDP2 shard in the parameter dtype (``Precision.param``:
  fp32 under mixed precision, as ``training`` keeps it; bf16 with pure bf16) but has no
  gradient and no AdamW state. The adapters (``lora_A`` r x in, ``lora_B`` out x r per adapted
  linear layer) are sharded like every parameter and carry a gradient and two moments.
- **Gathered units.** A unit's all-gather carries its base and adapter weights; only the
  adapters' unsharded gradients exist in backward.
- **Activations** (per token; c = compute bytes). Autograd saves an input for a weight
  gradient only when the weight requires one: a frozen projection saves nothing of its own, and
  a frozen RMSNorm keeps its fp32 input and 1/rms (4h + 4) but not the normalised input it
  multiplies its weight with (h c). Without dropout, q/k/v keep their shared input (h c) when
  one of them is adapted (lora_A's), gate/up theirs likewise, down its input (i c) when adapted;
  with dropout each adapted layer keeps instead the dropped copy of its input (in c, lora_A's)
  and the dropout mask. SDPA's q, k, v, output and log-sum-exp, the SiLU input and the SwiGLU
  product's two factors stay, as with full fine-tuning; each adapted layer adds lora_B's input
  (r c). The frozen lm_head
  keeps no input; the logits and the loss's state are unchanged. The first decoder layer saves
  less still (its input needs no gradient): the per-layer figure is an upper bound for it.
  Checked against autograd's saved tensors in tests/planner/test_lora_memory.py.

Op-level selective AC is not modelled for LoRA (its every-second-matmul rule counts the
adapters' matmuls too): ``lora_memory`` takes full AC or none.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from planner.assumptions import Assumptions
from planner.memory import (
    ActivationModel,
    Layout,
    MemoryBreakdown,
    Precision,
    activation_model,
    layout,
    memory,
    shard_elements,
)
from planner.shapes import ModelShape

LINEAR = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
"""The decoder layer's linear layers (training's ``--lora_target_modules=all-linear``)."""


@dataclass(frozen=True, kw_only=True)
class LoraSpec:
    """The adapters: training's --lora_r, --lora_target_modules, --lora_dropout > 0."""

    r: int = 8
    targets: tuple[str, ...] = ("q_proj", "v_proj")
    """Adapted linear layers of each decoder layer (llama-recipes' default: q and v)."""
    dropout: bool = True
    """Whether --lora_dropout is above 0 (llama-recipes' 0.05)."""

    def __post_init__(self) -> None:
        unknown = sorted(set(self.targets) - set(LINEAR))
        if unknown or not self.targets:
            raise ValueError(
                f"--lora-targets {','.join(self.targets)}: each one of {', '.join(LINEAR)}"
            )
        if self.r < 1:
            raise ValueError(f"--lora-r {self.r}: must be >= 1")


def linear_dims(shape: ModelShape) -> dict[str, tuple[int, int]]:
    """(in, out) features of each linear layer of a decoder layer."""
    h, i, q, kv = shape.hidden_size, shape.intermediate_size, shape.q_size, shape.kv_size
    return {
        "q_proj": (h, q),
        "k_proj": (h, kv),
        "v_proj": (h, kv),
        "o_proj": (q, h),
        "gate_proj": (h, i),
        "up_proj": (h, i),
        "down_proj": (i, h),
    }


def adapter_shapes(shape: ModelShape, spec: LoraSpec) -> list[tuple[int, ...]]:
    """Every adapter tensor of the model, as peft stores them: lora_A (r, in), lora_B (out, r)."""
    dims = linear_dims(shape)
    per_layer: list[tuple[int, ...]] = []
    for name in spec.targets:
        fan_in, fan_out = dims[name]
        per_layer += [(spec.r, fan_in), (fan_out, spec.r)]
    return per_layer * shape.num_layers


def adapter_params(shape: ModelShape, spec: LoraSpec) -> int:
    return sum(a * b for a, b in adapter_shapes(shape, spec))


def adapter_bytes(p: Precision) -> int:
    """Bytes per element of the adapters and of their compute: peft keeps adapters in fp32 on a
    16-bit base (`get_peft_model`'s `autocast_adapter_dtype`), so with pure bf16 they are fp32
    (parameters, gradients, AdamW state, their matmuls on an fp32 copy of the input); under
    mixed precision FSDP2 casts them with everything else (fp32 master, compute dtype)."""
    return 4 if p.name == "pure_bf16" else p.compute


def first_layer_skipped_flops(shape: ModelShape, spec: LoraSpec) -> int:
    """Backward GEMM FLOPs per token the first decoder layer does not run with LoRA: autograd
    computes an input's gradient only when the input requires one (torch's autograd engine
    prunes the graph to the inputs that need gradients), and the frozen embedding's output does
    not. So the q/k/v projections (and their lora_A) never get an input gradient there; o_proj
    gets one only when an attention projection is adapted, the MLP's input only when the
    attention block is, down_proj's input only when gate/up or the MLP input needs one.
    Checked against ``torch.utils.flop_counter`` in tests/planner/test_lora_memory.py."""
    dims = linear_dims(shape)
    targets = set(spec.targets)

    def skip(*names: str) -> int:
        base = sum(2 * dims[n][0] * dims[n][1] for n in names)
        adapters = sum(2 * spec.r * dims[n][0] for n in names if n in targets)  # lora_A's
        return base + adapters

    skipped = skip("q_proj", "k_proj", "v_proj")
    attention_grad = bool(targets & {"q_proj", "k_proj", "v_proj"})
    if not attention_grad:
        skipped += skip("o_proj")
    mlp_input_grad = attention_grad or "o_proj" in targets
    if not mlp_input_grad:
        skipped += skip("gate_proj", "up_proj")
    if not (mlp_input_grad or targets & {"gate_proj", "up_proj"}):
        skipped += skip("down_proj")
    return skipped


def lora_activations(
    shape: ModelShape, p: Precision, spec: LoraSpec, *, on_cpu: bool = False
) -> ActivationModel:
    """Bytes per token a decoder layer (whose input needs a gradient) and the head save, with
    the base frozen (see the module docstring); `selective` is not modelled (set to per_layer).

    `on_cpu`: a dropout mask is a bool on GPUs (`native_dropout`) but a noise tensor of the
    input's dtype on a CPU (`at::native::dropout` multiplies by it and keeps it)."""
    h, i, c = shape.hidden_size, shape.intermediate_size, p.compute
    ca = adapter_bytes(p)
    targets = set(spec.targets)
    # An adapted layer's input is kept for lora_A's gradient: shared with the other layers that
    # read it when the adapters compute in the base's dtype and there is no dropout; otherwise
    # each adapted layer keeps its own copy (the dropped or fp32-cast input), with the branch.
    shared = not spec.dropout and ca == c
    kept_input = targets if shared else set()
    frozen_norm = 4 * h + 4
    sdpa = (2 * shape.q_size + 2 * shape.kv_size) * c + 4 * shape.num_heads  # q, k, v, out, lse
    attention = frozen_norm + sdpa
    attention += h * c if kept_input & {"q_proj", "k_proj", "v_proj"} else 0
    mlp = frozen_norm + 3 * i * c + (h * c if kept_input & {"gate_proj", "up_proj"} else 0)
    mlp += i * c if "down_proj" in kept_input else 0  # o_proj's input is SDPA's output, kept
    branches = 0
    for name in spec.targets:
        fan_in, _ = linear_dims(shape)[name]
        branches += spec.r * ca  # lora_B's input
        if spec.dropout:
            branches += fan_in * (ca + (ca if on_cpu else 1))  # dropped copy and mask
        elif not shared:
            branches += fan_in * ca  # the fp32 copy of the input
    per_layer = attention + mlp + branches
    head = frozen_norm + shape.vocab_size * c + 4 + 8 + 1
    full = activation_model(shape, p)
    return ActivationModel(
        per_layer=per_layer, layer_input=full.layer_input, selective=per_layer, head=head
    )


def lora_memory(
    shape: ModelShape,
    lay: Layout,
    p: Precision,
    spec: LoraSpec,
    *,
    batch: int,
    seq: int,
    ac: float,
    a: Assumptions,
    on_cpu: bool = False,
) -> MemoryBreakdown:
    """Peak memory of one GPU for one LoRA training step (full AC on a fraction ``ac`` of the
    layers), built from the full fine-tuning breakdown with the frozen base's terms replaced
    (`on_cpu`: see `lora_activations`)."""
    full = memory(shape, lay, p, batch=batch, seq=seq, ac=ac, a=a)
    adapters = adapter_shapes(shape, spec)
    base_elems = shard_elements(shape.param_shapes(), lay.shard)
    adapter_elems = shard_elements(adapters, lay.shard)
    act = lora_activations(shape, p, spec, on_cpu=on_cpu)
    ca = adapter_bytes(p)
    full_act = activation_model(shape, p)
    tokens, layers = batch * seq, shape.num_layers

    def saved(x: ActivationModel, checkpointed: int) -> float:
        recompute = x.per_layer if checkpointed else 0.0
        rest = (layers - checkpointed) * x.per_layer + checkpointed * x.layer_input
        return tokens * (rest + x.head + recompute)

    def lora_minus_full(checkpointed: int) -> int:
        return int(saved(act, checkpointed) - saved(full_act, checkpointed))

    activations = full.activations + lora_minus_full(round(ac * layers))
    unit_adapters = sum(a * b for a, b in adapters) // shape.num_layers
    # the gathered unit now also carries its adapters; only the adapters' gradients exist
    full_grad_unit = full.grad_at_peak
    lora_grad_unit = unit_adapters * (ca + (p.reduce if p.reduce != ca else 0))
    gathered_peak = full.gathered_peak - full_grad_unit + lora_grad_unit
    if lay.reshard_after_forward:  # the running and the prefetched layer
        gathered_peak += a.prefetch_units * unit_adapters * ca
    else:  # everything stays gathered after forward
        gathered_peak += adapter_params(shape, spec) * ca
    # fragmentation on the transient memory only, as ``planner.memory.memory`` counts it
    checkpointed = round(ac * layers)
    kept = tokens * ((layers - checkpointed) * act.per_layer + checkpointed * act.layer_input)
    transient = activations - int(kept) + gathered_peak
    overhead = a.cuda_context_bytes + a.nccl_buffer_bytes + int(a.fragmentation * transient)
    gathered_unit = full.gathered_unit
    if full.gathered_unit_name == "decoder layer":
        gathered_unit += unit_adapters * ca
    return replace(
        full,
        params=base_elems * p.param + adapter_elems * max(p.param, ca),
        grads=adapter_elems * max(p.grad, ca),
        optimizer=adapter_elems * 2 * max(p.optim, ca),
        activations=activations,
        activations_no_ac=full.activations_no_ac + lora_minus_full(0),
        activations_ac=full.activations_ac + lora_minus_full(layers),
        gathered_unit=gathered_unit,
        gathered_peak=gathered_peak,
        overhead=overhead,
    )


def smallest_fleet(
    shape: ModelShape,
    gpus_per_node: int,
    gpu_memory_bytes: int,
    p: Precision,
    spec: LoraSpec | None,
    *,
    seq: int,
    a: Assumptions,
    batch: int = 1,
    max_nodes: int = 64,
) -> int | None:
    """The fewest nodes whose GPUs hold one step with FULL_SHARD over all of them and full AC
    (the most memory-frugal layout; ``spec`` None: full fine-tuning); None up to max_nodes."""
    for nodes in range(1, max_nodes + 1):
        lay = layout("FULL_SHARD", nodes * gpus_per_node, gpus_per_node)
        if spec is None:
            mem = memory(shape, lay, p, batch=batch, seq=seq, ac=1.0, a=a)
        else:
            mem = lora_memory(shape, lay, p, spec, batch=batch, seq=seq, ac=1.0, a=a)
        if mem.total <= gpu_memory_bytes:
            return nodes
    return None
