"""The parts of an optimizer step the trainer composes (and benchmarks/gpu_mfu.py reuses): the
optimizer, the token loss sum of a micro-batch, gradient clipping on FSDP2's DTensor grads."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

    from training.config import TrainConfig


def clip_grads(model: Any, max_norm: float | None) -> torch.Tensor:
    """The global gradient norm of `model` (a 0-d tensor on the device, no host sync), and
    the gradients scaled to `max_norm` when given: the trainer's clipping path.

    The norm of FSDP2's DTensor gradients is a DTensor: `full_tensor()` all-reduces it once,
    and the clip uses that norm (`clip_grads_with_norm_`) instead of computing it again.
    """
    from torch.nn.utils import clip_grads_with_norm_, get_total_norm

    params = [p for p in model.parameters() if p.grad is not None]
    norm = get_total_norm([p.grad for p in params], norm_type=2.0)
    if hasattr(norm, "full_tensor"):  # a DTensor under FSDP2
        norm = norm.full_tensor()
    if max_norm is not None:  # takes the PARAMETERS (it reads .grad): gradients clip nothing
        clip_grads_with_norm_(params, max_norm, norm)
    return norm


def build_optimizer(model: Any, cfg: TrainConfig) -> torch.optim.Optimizer:
    """AdamW with the fused kernel (one pass over each shard, no fp32 temporaries per step).

    torch's fused AdamW runs on CUDA and CPU (`_get_fused_kernels_supported_devices`) and
    accepts FSDP2's DTensor shards, as torchtitan uses it (`optimizer.implementation = "fused"`);
    the foreach fallback is for parameters on any other device.
    """
    import torch
    from torch.optim.optimizer import _get_fused_kernels_supported_devices

    if cfg.optimizer == "anyprecision":  # llama-cookbook's bf16-state AdamW (--pure_bf16)
        from training.cookbook_run import anyprecision

        return anyprecision(model, cfg)
    params = [p for p in model.parameters() if p.requires_grad]
    fused = all(p.device.type in _get_fused_kernels_supported_devices() for p in params)
    kernel: dict[str, Any] = {"fused": True} if fused else {"foreach": True}
    return torch.optim.AdamW(params, lr=cfg.lr, weight_decay=cfg.weight_decay, **kernel)


def token_loss_sum(model: Any, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """Sum of next-token cross-entropy over the label tokens of `batch` (fp32).

    The model gets attention_mask=None: HF's SDPA path then uses the causal kernel without
    reading a mask on the host (`_ignore_causal_mask_sdpa`, a sync per forward on CUDA). That
    changes no scored position: packed rows are all ones, and padded rows (training.data.collate)
    are padded on the right with ignored labels, which a causal model never attends from a real
    token. The loss shifts the labels, not the logits, and is chunked (training.loss): no fp32
    copy of the full logits.
    """
    from training import loss

    logits = model(input_ids=batch["input_ids"], attention_mask=None, use_cache=False).logits
    return loss.token_loss_sum(logits, batch["labels"], overwrite_logits=logits.requires_grad)
