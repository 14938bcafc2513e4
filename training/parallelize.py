"""Parallelism applied outside the model: mesh, activation checkpointing, FSDP2, mixed precision.

`ParallelDims` turns the llama-recipes flags plus WORLD_SIZE into a validated layout;
`build_mesh` makes the device mesh ("cpu" + gloo without CUDA, "cuda" + NCCL with it);
`parallelize(model, mesh, cfg)` applies activation checkpointing (full or selective) and
`torch.compile` to each decoder layer, then `fully_shard` to the embedding, each decoder layer,
`[norm, lm_head]` and the root (or `replicate` per layer and root for NO_SHARD);
`resolve_precision` turns bf16 mixed precision off on a CPU that would only emulate it.

Strategies (llama-recipes names -> FSDP2):
  FULL_SHARD     1-D mesh, reshard_after_forward=True   (ZeRO-3)
  SHARD_GRAD_OP  1-D mesh, reshard_after_forward=False  (ZeRO-2)
  HYBRID_SHARD   2-D mesh (replicate, shard): shard inside a group, replicate across groups
                 (also selected by --hsdp; --hsdp with SHARD_GRAD_OP keeps params after forward)
  NO_SHARD       `replicate` on a 1-D mesh: plain data parallel, gradients all-reduced
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from training.model import decoder_layers

if TYPE_CHECKING:
    from torch.distributed.device_mesh import DeviceMesh

    from training.config import TrainConfig

STRATEGIES = ("FULL_SHARD", "SHARD_GRAD_OP", "HYBRID_SHARD", "NO_SHARD")


class ParallelError(ValueError):
    """A layout that cannot work with this world size; the message names the flag."""


@dataclass(frozen=True)
class ParallelDims:
    """The data-parallel layout of the job, validated against the world size."""

    world_size: int
    """Number of processes (WORLD_SIZE)."""
    enable_fsdp: bool = True
    """--enable_fsdp: shard with FSDP2; without it the job must be a single process."""
    strategy: str = "FULL_SHARD"
    """--sharding_strategy, with --hsdp folded in (HYBRID_SHARD)."""
    replicate: int = 1
    """Size of the replicate mesh dimension (HSDP: --replica_group_size; NO_SHARD: world size)."""
    shard: int = 1
    """Size of the shard mesh dimension (HSDP: --sharding_group_size)."""
    reshard_after_forward: bool = True
    """False for SHARD_GRAD_OP (also under --hsdp)."""

    def __post_init__(self) -> None:
        if self.world_size < 1:
            raise ParallelError(f"WORLD_SIZE must be at least 1, got {self.world_size}")
        if not self.enable_fsdp:
            if self.world_size > 1:
                raise ParallelError(
                    f"WORLD_SIZE is {self.world_size} but --enable_fsdp is off: "
                    "pass --enable_fsdp to train with more than one process"
                )
            return
        if self.strategy not in STRATEGIES:
            raise ParallelError(
                f"--sharding_strategy {self.strategy}: expected one of {', '.join(STRATEGIES)}"
            )
        if self.replicate < 1 or self.shard < 1:
            raise ParallelError(
                f"--sharding_group_size {self.shard} and --replica_group_size {self.replicate} "
                "must be positive"
            )
        if self.replicate * self.shard != self.world_size:
            raise ParallelError(
                f"--sharding_group_size {self.shard} x --replica_group_size {self.replicate} "
                f"= {self.shard * self.replicate}, but WORLD_SIZE is {self.world_size}"
            )

    @classmethod
    def from_config(
        cls, cfg: TrainConfig, world_size: int, local_world_size: int | None = None
    ) -> ParallelDims:
        """Derive the layout from the flags; missing HSDP group sizes are inferred."""
        if not cfg.enable_fsdp:
            if cfg.ac_mode == "selective":  # (config: selective implies the AC flag)
                # full is the default and, as llama-recipes' flag, means nothing without FSDP;
                # an explicit selective would be dropped without a word
                raise ParallelError(
                    "--ac_mode selective: activation checkpointing is applied with "
                    "--enable_fsdp; pass --enable_fsdp (or --ac_mode none)"
                )
            return cls(world_size=world_size, enable_fsdp=False, strategy="NONE")
        strategy = cfg.sharding_strategy
        hybrid = strategy == "HYBRID_SHARD" or cfg.hsdp
        reshard = strategy != "SHARD_GRAD_OP"
        if strategy == "NO_SHARD":
            return cls(world_size=world_size, strategy=strategy, replicate=world_size, shard=1)
        if not hybrid:
            return cls(
                world_size=world_size,
                strategy=strategy,
                shard=world_size,
                reshard_after_forward=reshard,
            )
        shard, rep = cfg.sharding_group_size, cfg.replica_group_size
        if shard <= 0 and rep <= 0:
            shard = local_world_size or world_size  # shard within a node, replicate across
        if shard <= 0:
            if world_size % rep:
                raise ParallelError(
                    f"--replica_group_size {rep} does not divide WORLD_SIZE {world_size}"
                )
            shard = world_size // rep
        if rep <= 0:
            if world_size % shard:
                raise ParallelError(
                    f"--sharding_group_size {shard} does not divide WORLD_SIZE {world_size}"
                )
            rep = world_size // shard
        return cls(
            world_size=world_size,
            strategy="HYBRID_SHARD",
            replicate=rep,
            shard=shard,
            reshard_after_forward=reshard,
        )

    def describe(self) -> str:
        if not self.enable_fsdp:
            return "single process, no FSDP"
        if self.strategy == "HYBRID_SHARD":
            return f"HYBRID_SHARD: {self.replicate} replicas x {self.shard} shards"
        if self.strategy == "NO_SHARD":
            return f"NO_SHARD: {self.replicate} replicas"
        return f"{self.strategy} over {self.shard} ranks"


def build_mesh(dims: ParallelDims, device_type: str) -> DeviceMesh | None:
    """The device mesh for `dims` (None without FSDP)."""
    from torch.distributed.device_mesh import init_device_mesh

    if not dims.enable_fsdp:
        return None
    if dims.strategy == "HYBRID_SHARD":
        return init_device_mesh(
            device_type, (dims.replicate, dims.shard), mesh_dim_names=("replicate", "shard")
        )
    if dims.strategy == "NO_SHARD":
        return init_device_mesh(device_type, (dims.world_size,), mesh_dim_names=("replicate",))
    return init_device_mesh(device_type, (dims.world_size,), mesh_dim_names=("shard",))


def resolve_precision(cfg: TrainConfig, device: torch.device) -> tuple[TrainConfig, str | None]:
    """The config with the precision this device runs well, and one line saying so if it changed.

    On a CPU without native bf16 (fp16) arithmetic, bf16 mixed precision is emulated through
    fp32 and a step is ~10x slower (228 vs 2,098 tokens/s for 2-process tiny-llama on a 2-core
    AVX2 EPYC), so FSDP mixed precision is turned off unless --force_bf16. --pure_bf16 is an
    explicit choice of storage dtype and is kept. CUDA is never changed.
    """
    from training.model import native_low_precision

    if not (cfg.enable_fsdp and cfg.mixed_precision) or cfg.pure_bf16 or cfg.force_bf16:
        return cfg, None
    low = torch.float16 if cfg.use_fp16 else torch.bfloat16
    if native_low_precision(device, low):
        return cfg, None
    name = "fp16" if cfg.use_fp16 else "bf16"
    capability = torch.backends.cpu.get_cpu_capability()
    note = (
        f"precision: fp32 (this CPU, {capability}, has no native {name}; "
        f"--force_bf16 keeps {name} mixed precision, ~10x slower here)"
    )
    return dataclasses.replace(cfg, mixed_precision=False), note


def parallelize(
    model: nn.Module, mesh: DeviceMesh | None, cfg: TrainConfig, dims: ParallelDims
) -> nn.Module:
    """Activation checkpointing and compile per decoder layer, then FSDP2 units (in place).

    Follows torchtitan's `parallelize_llama` (torchtitan/models/llama3/infra/parallelize.py):
    AC wrapping, then per-block `torch.compile`, then `fully_shard` on the token embedding,
    each block, `[norm, lm_head]` (kept unsharded after forward: backward needs them first) and
    the root; explicit forward/backward prefetch along that order as in torchtitan's llama4
    `apply_fsdp`. Parameter names never change (no wrapper modules), so checkpoints and exports
    are the same with every option.
    """
    layers = decoder_layers(model)
    ac = cfg.ac_mode if cfg.fsdp_activation_checkpointing and cfg.enable_fsdp else "none"
    if (ac != "none" or cfg.compile) and not layers:
        flag = "--compile" if cfg.compile else "--fsdp_activation_checkpointing"
        raise ParallelError(
            f"{flag}: no decoder layers found in {type(model).__name__} (its "
            f"_no_split_modules is {getattr(model, '_no_split_modules', None)!r}); pass "
            f"{flag}=False"
        )
    for layer in layers:
        _wrap_layer_forward(layer, ac, compile_layer=cfg.compile)
    if mesh is None:
        return model

    from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, OffloadPolicy

    mp = MixedPrecisionPolicy()
    if cfg.mixed_precision and not cfg.pure_bf16:
        low = torch.float16 if cfg.use_fp16 else torch.bfloat16
        mp = MixedPrecisionPolicy(param_dtype=low, reduce_dtype=torch.float32)
    # Pinned host memory needs CUDA; on a CPU-only machine offloading is a no-op anyway.
    pin = torch.cuda.is_available()
    offload = CPUOffloadPolicy(pin_memory=pin) if cfg.fsdp_cpu_offload else OffloadPolicy()

    if dims.strategy == "NO_SHARD":
        from torch.distributed._composable.replicate_with_fsdp import replicate

        for layer in layers:
            replicate(layer, mesh=mesh, mp_policy=mp, offload_policy=offload)
        replicate(model, mesh=mesh, mp_policy=mp, offload_policy=offload)
        return model

    from torch.distributed.fsdp import fully_shard

    kw: dict[str, Any] = {"mesh": mesh, "mp_policy": mp, "offload_policy": offload}
    reshard = dims.reshard_after_forward
    embed, head, norm = _edge_modules(model)
    units: list[Any] = []
    if embed is not None:
        units.append(fully_shard(embed, reshard_after_forward=reshard, **kw))
    for layer in layers:
        units.append(fully_shard(layer, reshard_after_forward=reshard, **kw))
    if head is not None:
        # Gathered last in forward and first in backward: resharding it in between only
        # repeats the all-gather (torchtitan keeps [norm, output] unsharded after forward).
        fully_shard([m for m in (norm, head) if m is not None], reshard_after_forward=False, **kw)
        units.append(head)
    # The root owns what is left (a tied embedding/head, rotary buffers): kept after forward.
    fully_shard(model, reshard_after_forward=False, **kw)
    _set_prefetch(units)
    return model


def _edge_modules(model: nn.Module) -> tuple[Any, Any, Any]:
    """(embedding, lm_head, final norm) to shard as their own units, or Nones to leave to the root.

    A tied embedding/head is one parameter and so one unit: both stay in the root then.
    """
    get_in = getattr(model, "get_input_embeddings", None)
    get_out = getattr(model, "get_output_embeddings", None)
    embed = get_in() if callable(get_in) else None
    head = get_out() if callable(get_out) else None
    if embed is None or head is None:
        return None, None, None
    if getattr(embed, "weight", None) is getattr(head, "weight", None):
        return None, None, None
    base = getattr(model, "base_model", None)
    norm = getattr(base, "norm", None) if base is not model else None
    return embed, head, norm if isinstance(norm, nn.Module) else None


def _set_prefetch(units: list[Any]) -> None:
    """Unit i all-gathers unit i+1 during its forward and unit i-1 during its backward."""
    for i, unit in enumerate(units):
        if i + 1 < len(units):
            unit.set_modules_to_forward_prefetch([units[i + 1]])
        if i > 0:
            unit.set_modules_to_backward_prefetch([units[i - 1]])


_SAC_SAVE = frozenset(
    {
        # torch's compute-intensive matmuls (torch._functorch.partitioners.get_default_op_list),
        # which torchtitan's `_get_default_save_ops` saves (torchtitan/distributed/
        # activation_checkpoint.py); `bmm` left out: in a decoder layer it only appears in
        # SDPA's math fallback, where saving it keeps the B x H x S x S scores
        torch.ops.aten.mm.default,
        torch.ops.aten.addmm.default,
        torch.ops.aten._scaled_mm.default,
        # attention: every SDPA kernel (the math path decomposes before the policy sees it)
        torch.ops.aten._scaled_dot_product_efficient_attention.default,
        torch.ops.aten._scaled_dot_product_flash_attention.default,
        torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default,
        torch.ops.aten._scaled_dot_product_cudnn_attention.default,
        torch.ops.aten._flash_attention_forward.default,
        torch.ops.aten._efficient_attention_forward.default,
        # low-precision scales and the reduce-scatter, as torchtitan
        torch.ops.aten.max.default,
        torch.ops._c10d_functional.reduce_scatter_tensor.default,
    }
)
"""Ops whose outputs selective (op-level) AC keeps: the part of torchtitan's save set a dense
decoder layer reaches (`linear` decomposes to `mm`/`addmm` before the policy sees it; no
topk, flex attention, all-to-all or compiled regions here), less `bmm`."""
_SAC_MM = (torch.ops.aten.mm.default,)
"""The matmuls of which every second one is recomputed (torchtitan counts `mm` and `linear`;
`linear` decomposes to `mm`/`addmm` before the policy sees it on CUDA and CPU). A biased
projection (`addmm`) is saved and not counted, as there."""


def sac_policy() -> Any:
    """torchtitan's op-level SAC policy: save the compute-intensive ops' outputs except every
    second mm, recompute the rest (`SelectiveAC._wrap_block`: "Save all compute/comm ops,
    except every second mm/linear"). torch 2.13 consults it in forward only and replays
    those decisions (`_CachedTorchDispatchMode`); the separate recompute count keeps the
    decisions the same where the replay asks again (earlier torch, torchtitan's policy)."""
    from torch.utils.checkpoint import CheckpointPolicy

    counts = {"forward": 0, "recompute": 0}

    def policy(ctx: Any, func: Any, *args: Any, **kwargs: Any) -> CheckpointPolicy:
        if func in _SAC_MM:
            key = "recompute" if ctx.is_recompute else "forward"
            counts[key] += 1
            if counts[key] % 2 == 0:
                return CheckpointPolicy.PREFER_RECOMPUTE
        if func in _SAC_SAVE:
            return CheckpointPolicy.MUST_SAVE
        return CheckpointPolicy.PREFER_RECOMPUTE

    return policy


def _sac_context() -> Any:
    from torch.utils.checkpoint import create_selective_checkpoint_contexts

    return create_selective_checkpoint_contexts(sac_policy())


def uses_dropout(layer: nn.Module) -> bool:
    """Whether `layer` draws random numbers in training: an `nn.Dropout` with p > 0, or a
    dropout rate kept as a float attribute (HF attention modules' `attention_dropout`)."""
    for m in layer.modules():
        if isinstance(m, nn.modules.dropout._DropoutNd) and m.p > 0:
            return True
        for name, value in vars(m).items():
            if "dropout" in name and isinstance(value, float) and value > 0:
                return True
    return False


def _wrap_layer_forward(layer: nn.Module, ac: str, *, compile_layer: bool) -> None:
    """Replace `layer.forward` by its checkpointed and/or compiled version.

    The module object (and so every parameter name, FSDP's hooks around it and the state dict)
    stays as it is; FSDP's all-gather hooks run eagerly around the compiled forward, as with
    torchtitan's per-block compile before `fully_shard`.
    """
    inner = layer.forward
    if ac != "none":
        from torch.utils.checkpoint import checkpoint

        context: dict[str, Any] = {"context_fn": _sac_context} if ac == "selective" else {}
        # Without dropout the replay draws no random numbers: no RNG state to stash and restore
        # per layer. (torchtitan stashes it by default, preserve_rng_state=True, for any model;
        # a Llama block without dropout replays identically either way: tested.)
        context["preserve_rng_state"] = uses_dropout(layer)

        @functools.wraps(inner)
        def checkpointed(*args: Any, **kwargs: Any) -> Any:
            # The recompute in backward replays the layer: with a KV cache passed in, it appends
            # the keys a second time (keys 2x the queries: a shape error with a padding mask;
            # selective AC's replay check fails either way). transformers' GradientCheckpointingLayer
            # drops the cache for the same reason (modeling_layers.py); training never reads it.
            if kwargs.get("past_key_values") is not None:
                kwargs["past_key_values"] = None
            return checkpoint(inner, *args, use_reentrant=False, **context, **kwargs)

        forward: Any = checkpointed
    else:
        forward = inner
    if compile_layer:
        # fullgraph=True, as torchtitan's apply_compile: a graph break is an error at the
        # block's first forward, and needing more than dynamo's recompile_limit (8 compiled
        # versions of the forward: new shapes, eval, no_grad) an error when it happens, never
        # a silent fall-back to eager for part or all of the block (torch/_dynamo/
        # convert_frame.py raises FailOnRecompileLimitHit "due to fullgraph=True"; without it
        # the frame runs eager).
        forward = torch.compile(forward, fullgraph=True)
    if forward is not inner:
        layer.forward = forward  # type: ignore[method-assign]


def set_gradient_sync(model: nn.Module, dims: ParallelDims, *, last_micro_batch: bool) -> None:
    """Reduce gradients across replicas only on the last micro-batch of an optimizer step.

    - NO_SHARD: no all-reduce until the last micro-batch; gradients are full-size on every rank
      anyway, so accumulating them locally costs no memory and saves (A-1)/A of the traffic.
    - HYBRID_SHARD: the reduce-scatter inside the shard group runs every micro-batch (gradients
      stay sharded), the all-reduce across replica groups (the inter-node traffic) only on the
      last one.
    - FULL_SHARD / SHARD_GRAD_OP: unchanged: reduce-scatter every micro-batch keeps gradient
      memory sharded (skipping it would hold unsharded gradients between micro-batches).
    The sum of the gradients is the same either way; the parity tests check it.
    """
    from torch.distributed.fsdp import FSDPModule

    if not isinstance(model, FSDPModule):
        return
    if dims.strategy == "NO_SHARD":
        model.set_requires_gradient_sync(last_micro_batch)
    elif dims.strategy == "HYBRID_SHARD":
        model.set_requires_all_reduce(last_micro_batch)
