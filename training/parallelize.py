"""Parallelism applied outside the model: mesh, activation checkpointing, FSDP2, mixed precision.

`ParallelDims` turns the llama-recipes flags plus WORLD_SIZE into a validated layout;
`build_mesh` makes the device mesh ("cpu" + gloo without CUDA, "cuda" + NCCL with it);
`parallelize(model, mesh, cfg)` applies activation checkpointing to each decoder layer, then
`fully_shard` (or `replicate` for NO_SHARD) to each decoder layer, then to the root.

Strategies (llama-recipes names -> FSDP2):
  FULL_SHARD     1-D mesh, reshard_after_forward=True   (ZeRO-3)
  SHARD_GRAD_OP  1-D mesh, reshard_after_forward=False  (ZeRO-2)
  HYBRID_SHARD   2-D mesh (replicate, shard): shard inside a group, replicate across groups
                 (also selected by --hsdp; --hsdp with SHARD_GRAD_OP keeps params after forward)
  NO_SHARD       `replicate` on a 1-D mesh: plain data parallel, gradients all-reduced
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

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


def parallelize(
    model: nn.Module, mesh: DeviceMesh | None, cfg: TrainConfig, dims: ParallelDims
) -> nn.Module:
    """Apply activation checkpointing, then FSDP2 per decoder layer, then to the root (in place)."""
    layers = decoder_layers(model)
    if cfg.fsdp_activation_checkpointing and cfg.enable_fsdp:
        if not layers:
            raise ParallelError(
                f"--fsdp_activation_checkpointing: no decoder layers found in "
                f"{type(model).__name__} (its _no_split_modules is "
                f"{getattr(model, '_no_split_modules', None)!r}); pass "
                "--fsdp_activation_checkpointing=False"
            )
        from torch.distributed._composable import checkpoint

        for layer in layers:
            checkpoint(layer)  # non-reentrant, recomputes the layer's forward in backward
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

    for layer in layers:
        fully_shard(
            layer,
            mesh=mesh,
            reshard_after_forward=dims.reshard_after_forward,
            mp_policy=mp,
            offload_policy=offload,
        )
    # The root keeps its parameters (embeddings, norm, head) after forward: backward needs them first.
    fully_shard(model, mesh=mesh, reshard_after_forward=False, mp_policy=mp, offload_policy=offload)
    return model


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
