"""llama-cookbook's flags that act on the model, the optimizer or the files (the torch side of
`training.cookbook`): `--freeze_layers`, `--optimizer anyprecision`, `--checkpoint_type
FULL_STATE_DICT`, `--from_peft_checkpoint`.

Each does what llama-cookbook 0.0.5.post1 does (file named at each function), on FSDP2:

- freezing sets `requires_grad=False` on the empty model before it is sharded; FSDP2 keeps the
  flag per parameter, reduces no gradient for them, and the optimizer never holds them;
- anyprecision is AdamW with momentum and variance in bf16 and the update done in their dtype
  (its `AnyPrecisionAdamW` without Kahan summation, as finetuning.py builds it), written out
  here with the same operations in the same order;
- FULL_STATE_DICT gathers the full state dict to rank 0's CPU (DCP's `get_model_state_dict`
  with `full_state_dict` and `cpu_offload`, FSDP2's form of FSDP1's `FullStateDictConfig(
  offload_to_cpu=True, rank0_only=True)`) and `torch.save`s it under llama-cookbook's name;
- an adapter folder is loaded into rank 0's adapted model before the weights are broadcast, so
  every rank continues from it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from training.model import ModelError, decoder_layers

if TYPE_CHECKING:
    from training.config import TrainConfig


def freeze_first_layers(model: nn.Module, n: int) -> int:
    """Freeze the first `n` decoder layers of `model` (llama-cookbook's
    `freeze_transformer_layers`, utils/train_utils.py: `model.model.layers[:n]`); returns the
    number of frozen parameters. Found by `_no_split_modules`, so any causal LM works."""
    layers = decoder_layers(model)
    if n > len(layers):
        raise ModelError(f"--num_freeze_layers {n}: the model has {len(layers)} decoder layers")
    frozen = 0
    for layer in layers[:n]:
        for p in layer.parameters():
            p.requires_grad_(False)
            frozen += p.numel()
    return frozen


class AnyPrecisionAdamW(torch.optim.Optimizer):
    """AdamW keeping momentum and variance in `state_dtype` (bf16), as llama-cookbook's
    `--optimizer anyprecision` (policies/anyprecision_optimizer.py, built in finetuning.py with
    bf16 momentum and variance and `use_kahan_summation=False`).

    The step, per parameter: decoupled weight decay `p *= 1 - lr*wd`; `m = m*b1 + g*(1-b1)`;
    `v = v*b2 + g*g*(1-b2)`; `p -= lr/(1-b1^t) * m / (sqrt(v)/sqrt(1-b2^t) + eps)`, every
    operation in the state's dtype. Pointwise only, so FSDP2's DTensor shards step locally.
    """

    def __init__(
        self,
        params: Iterable[nn.Parameter],
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0.0,
        state_dtype: torch.dtype = torch.bfloat16,
    ) -> None:
        defaults = {"lr": lr, "betas": betas, "eps": eps, "weight_decay": weight_decay}
        super().__init__(params, defaults)
        self.state_dtype = state_dtype

    @torch.no_grad()
    def step(self, closure: Callable[[], Any] | None = None) -> None:  # type: ignore[override]
        if closure is not None:
            with torch.enable_grad():
                closure()
        for group in self.param_groups:
            beta1, beta2 = group["betas"]
            lr, wd, eps = group["lr"], group["weight_decay"], group["eps"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if not state:
                    state["step"] = torch.tensor(0.0)
                    state["exp_avg"] = torch.zeros_like(p, dtype=self.state_dtype)
                    state["exp_avg_sq"] = torch.zeros_like(p, dtype=self.state_dtype)
                state["step"] += 1
                step = state["step"]
                exp_avg, exp_avg_sq, grad = state["exp_avg"], state["exp_avg_sq"], p.grad
                if wd:
                    p.mul_(1 - lr * wd)
                exp_avg.mul_(beta1).add_(grad, alpha=1 - beta1)
                exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
                step_size = lr / (1 - beta1**step)
                denom = (exp_avg_sq.sqrt() / (1 - beta2**step) ** 0.5).add_(eps, alpha=1)
                p.addcdiv_(exp_avg, denom, value=-step_size)


def anyprecision(model: nn.Module, cfg: TrainConfig) -> AnyPrecisionAdamW:
    """`--optimizer anyprecision` (with --pure_bf16) over the trainable parameters."""
    params = [p for p in model.parameters() if p.requires_grad]
    return AnyPrecisionAdamW(params, lr=cfg.lr, weight_decay=cfg.weight_decay)


def full_state_paths(cfg: TrainConfig, epoch: int) -> tuple[Path, Path]:
    """(model file, optimizer file) of a FULL_STATE_DICT save, named as llama-cookbook's
    `save_fsdp_model_checkpoint_full` / `save_optimizer_checkpoint`
    (model_checkpointing/checkpoint_handler.py): `<root>/<folder>-<model_name>/`."""
    folder = Path(
        f"{cfg.dist_checkpoint_root_folder}/{cfg.dist_checkpoint_folder}-{cfg.model_name}"
    )
    model_file = folder / f"{cfg.model_name.replace('/', '--')}-{epoch}.pt"
    return model_file, folder / f"optimizer-{cfg.model_name}-{epoch}.pt"


def save_full_state(trainer: Any, epoch: int) -> Path | None:
    """At an epoch's end (every rank calls it, with the `training.finetune.Trainer`): with
    --checkpoint_type FULL_STATE_DICT and --save_model, write the full state dict on rank 0
    when llama-cookbook would (utils/train_utils.py `train`: always without validation, else
    when this epoch's eval loss is the best so far), and the full optimizer state with
    --save_optimizer. Returns the model file rank 0 wrote."""
    cfg: TrainConfig = trainer.cfg
    if cfg.checkpoint_type != "FULL_STATE_DICT" or not cfg.save_model or cfg.use_peft:
        return None  # with --use_peft the adapter folder is the save (training.cookbook.notes)
    model, optimizer, is_main = trainer.model, trainer.optimizer, trainer.env.is_main
    eval_losses: list[float] = trainer.history["eval_loss"]
    if (
        cfg.run_validation
        and eval_losses
        and eval_losses[-1] >= min(eval_losses[:-1], default=1e300)
    ):
        return None
    from torch.distributed.checkpoint.state_dict import (
        StateDictOptions,
        get_model_state_dict,
        get_optimizer_state_dict,
    )

    options = StateDictOptions(full_state_dict=True, cpu_offload=True)
    model_file, optim_file = full_state_paths(cfg, epoch)
    state = get_model_state_dict(model, options=options)  # collective; empty off rank 0
    if is_main:
        model_file.parent.mkdir(parents=True, exist_ok=True)
        torch.save(state, model_file)
        print(f"FULL_STATE_DICT: epoch {epoch} saved to {model_file}", flush=True)
    del state
    if cfg.save_optimizer:
        optim_state = get_optimizer_state_dict(model, optimizer, options=options)
        if is_main:
            optim_file.parent.mkdir(parents=True, exist_ok=True)
            torch.save(optim_state, optim_file)
    return model_file if is_main else None


def with_adapter(adapt: Callable[[nn.Module], Any], folder: str) -> Callable[[nn.Module], Any]:
    """`adapt` (LoRA injection on rank 0's real model) followed by loading the adapter weights
    of `folder`, as llama-cookbook's `PeftModel.from_pretrained(model, from_peft_checkpoint,
    is_trainable=True)` (finetuning.py); the folder's settings were checked against the flags
    (training.cookbook.check)."""

    def load(model: nn.Module) -> Any:
        from peft import set_peft_model_state_dict

        peft_model = adapt(model)
        weights = _adapter_weights(Path(folder))
        try:
            result = set_peft_model_state_dict(peft_model, weights)
        except RuntimeError as e:  # load_state_dict's size mismatch: another model or rank
            first = str(e).strip().splitlines()[-1].strip()
            raise ModelError(
                f"--from_peft_checkpoint {folder}: weights do not fit ({first})"
            ) from e
        missing = [k for k in result.missing_keys if "lora_" in k]
        if result.unexpected_keys or missing:
            bad = (result.unexpected_keys or missing)[0]
            raise ModelError(f"--from_peft_checkpoint {folder}: weights do not fit ({bad})")
        return peft_model

    return load


def _adapter_weights(folder: Path) -> dict[str, torch.Tensor]:
    safetensors = folder / "adapter_model.safetensors"
    if safetensors.is_file():
        from safetensors.torch import load_file

        return load_file(str(safetensors))
    bin_file = folder / "adapter_model.bin"
    if bin_file.is_file():
        return torch.load(bin_file, map_location="cpu", weights_only=True)
    raise ModelError(f"--from_peft_checkpoint {folder}: no adapter_model.safetensors or .bin")
