"""LoRA adapters (peft) on a frozen base, sharded with FSDP2 like full fine-tuning.

`--use_peft --peft_method lora` (llama-recipes' names; `--lora_r --lora_alpha --lora_dropout
--lora_target_modules` as TRL's and axolotl's) wraps the model in `peft.get_peft_model` before
it is sharded: every rank injects the adapters into its empty (meta) model
(`low_cpu_mem_usage=True`), rank 0 builds the same adapters on its real weights under the run's
seed, and `training.model.materialize` broadcasts both, so every world size starts from the
adapters a 1-process run gets. The trainer keeps training the HF model itself (the adapters are
modules inside it; `PeftModel.forward` only adds routing this trainer never uses) and holds the
`PeftModel` for its config and the adapter export.

Frozen and trainable parameters share each FSDP2 unit (a decoder layer holds its base
projections and their `lora_A`/`lora_B`): FSDP2 shards every parameter on its own (DTensor,
dim 0) and requires a uniform dtype only of the parameters that require gradients
(`FSDPParamGroup._init_mp_dtypes`, torch/distributed/fsdp/_fully_shard/_fsdp_param_group.py);
after backward it reduce-scatters only the parameters that received a gradient
(`FSDPParamGroup.post_backward`), so the frozen base is all-gathered for compute but never
reduced, and it holds no gradient or optimizer state. FSDP1 needed `use_orig_params=True` for
that and then kept gradient memory for frozen parameters; the FSDP2 docs list "relaxes
constraints around frozen parameters" among the reasons for per-parameter sharding.

Checkpoints hold the adapters and their optimizer state only (`ignore_frozen_params`): the base
is read again from `--model_name` (or the preset's seed) at every start.
"""

from __future__ import annotations

import copy
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from training.model import ModelError

if TYPE_CHECKING:
    from training.config import TrainConfig

ADAPTER_NAME = "default"
"""peft's adapter name; the export drops it from the keys, as `PeftModel.save_pretrained`."""
ADAPTER_WEIGHTS = "adapter_model.safetensors"
ADAPTER_CONFIG = "adapter_config.json"
_PEFT_PREFIX = "base_model.model."
"""What `PeftModel.state_dict()` puts before the HF model's own parameter names."""


def target_modules(cfg: TrainConfig) -> list[str] | str:
    """--lora_target_modules as peft takes it: a list of names, or the string "all-linear"."""
    names = [t.strip() for t in cfg.lora_target_modules.split(",")]
    return "all-linear" if names == ["all-linear"] else names


def lora_config(cfg: TrainConfig) -> Any:
    """The `peft.LoraConfig` of the flags (llama-recipes' lora_config: bias none, causal LM)."""
    from peft import LoraConfig

    return LoraConfig(
        r=cfg.lora_r,
        lora_alpha=cfg.lora_alpha,
        lora_dropout=cfg.lora_dropout,
        target_modules=target_modules(cfg),
        bias="none",
        task_type="CAUSAL_LM",
    )


def check_targets(model: nn.Module, targets: list[str] | str) -> None:
    """Every named target is a linear layer of `model`, matched as peft matches a name (the
    module's full name, or its last dotted parts); else one line naming the flag.

    A target that is the output embedding while it shares its weight with the input embedding
    (tie_word_embeddings: Llama 3.2 1B/3B, small Qwen) is refused: the adapter would change
    lm_head alone, and the tied weight, stored once, cannot carry its merged delta. peft's own
    "all-linear" leaves the output embedding out (`_maybe_include_all_linear_layers`,
    peft/tuners/tuners_utils.py at v0.21.2), so it needs no check.
    """
    if targets == "all-linear":
        return
    tied = _tied_output_embedding(model)
    linear = sorted(
        {n.rsplit(".", 1)[-1] for n, m in model.named_modules() if isinstance(m, nn.Linear)}
    )
    for target in targets:
        hits = [m for n, m in model.named_modules() if n == target or n.endswith("." + target)]
        if not hits:
            raise ModelError(
                f"--lora_target_modules: {type(model).__name__} has no module named "
                f"{target!r} (its linear layers: {', '.join(linear)})"
            )
        other = sorted({type(m).__name__ for m in hits if not isinstance(m, nn.Linear)})
        if other:
            raise ModelError(
                f"--lora_target_modules: {target!r} names {', '.join(other)} modules, not "
                f"linear layers (its linear layers: {', '.join(linear)})"
            )
        if tied is not None and any(m is tied for m in hits):
            out_name = next(n for n, m in model.named_modules() if m is tied)
            raise ModelError(
                f"--lora_target_modules: {out_name} shares its weight with "
                f"{_input_embedding_name(model)} (tie_word_embeddings); leave it out"
            )


def _tied_output_embedding(model: nn.Module) -> nn.Module | None:
    """The output embedding module when its weight is the input embedding's, else None."""
    get_out = getattr(model, "get_output_embeddings", None)
    get_in = getattr(model, "get_input_embeddings", None)
    if get_out is None or get_in is None:
        return None
    out, inp = get_out(), get_in()
    if out is None or inp is None or getattr(out, "weight", None) is None:
        return None
    return out if out.weight is inp.weight else None


def _input_embedding_name(model: nn.Module) -> str:
    inp = model.get_input_embeddings()  # type: ignore[operator]
    name = next((n for n, m in model.named_modules() if m is inp), "the input embedding")
    return name.rsplit(".", 1)[-1]


def apply_lora(model: nn.Module, cfg: TrainConfig, *, empty: bool) -> Any:
    """Inject the adapters into `model` in place (base frozen); returns the `PeftModel`.

    `empty`: `model`'s parameters are on the meta device and the adapters are created there too
    (filled later by `materialize`); otherwise they are initialised with the global RNG
    (kaiming-uniform A, zero B: the adapted model starts equal to the base).
    """
    from peft import get_peft_model

    targets = target_modules(cfg)
    check_targets(model, targets)
    with warnings.catch_warnings():
        # peft reads transformers' deprecated `is_gradient_checkpointing` while wrapping
        warnings.simplefilter("ignore", FutureWarning)
        peft_model = get_peft_model(model, lora_config(cfg), low_cpu_mem_usage=empty)
    peft_model.peft_config[ADAPTER_NAME].base_model_name_or_path = cfg.model_name
    return peft_model


def trainable_counts(model: nn.Module) -> tuple[int, int]:
    """(trainable, all) parameters of the whole (unsharded) model."""
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    return trainable, sum(p.numel() for p in model.parameters())


def describe(cfg: TrainConfig, model: nn.Module) -> str:
    """One line: the adapter settings and peft's trainable-parameter figures."""
    trainable, total = trainable_counts(model)
    return (
        f"peft lora r={cfg.lora_r} alpha={cfg.lora_alpha} dropout={cfg.lora_dropout} on "
        f"{cfg.lora_target_modules}: trainable params: {trainable:,d} || all params: "
        f"{total:,d} || trainable%: {100 * trainable / max(total, 1):.4f}"
    )


# ------------------------------------------------------------------------------------------------
# export


def adapter_state_dict(peft_model: Any, trainable: dict[str, torch.Tensor]) -> dict[str, Any]:
    """peft's saved form of the HF model's trainable parameters: `base_model.model.` prefix,
    adapter name dropped (`get_peft_model_state_dict`). `save_embedding_layers=False`: its
    "auto" asks the Hub whether the base's config exists (no network here; no embedding is
    adapted: the targets are linear layers)."""
    from peft import get_peft_model_state_dict

    full = {_PEFT_PREFIX + k: v for k, v in trainable.items()}
    return get_peft_model_state_dict(
        peft_model, state_dict=full, adapter_name=ADAPTER_NAME, save_embedding_layers=False
    )


def write_adapter_folder(
    peft_model: Any, trainable: dict[str, torch.Tensor], tokenizer: Any, out_dir: Path
) -> Path:
    """`adapter_config.json` + `adapter_model.safetensors` (+ tokenizer), the folder
    `PeftModel.from_pretrained(base, out_dir)` loads, as `PeftModel.save_pretrained` writes it."""
    from safetensors.torch import save_file

    out_dir.mkdir(parents=True, exist_ok=True)
    weights = adapter_state_dict(peft_model, trainable)
    save_file(
        {k: v.detach().contiguous() for k, v in weights.items()},
        str(out_dir / ADAPTER_WEIGHTS),
        metadata={"format": "pt"},
    )
    config = copy.deepcopy(peft_model.peft_config[ADAPTER_NAME])
    config.inference_mode = True
    config.save_pretrained(str(out_dir))
    if tokenizer is not None:
        tokenizer.save_pretrained(str(out_dir))
    return out_dir


def checkpoint_settings(cfg: TrainConfig) -> dict[str, Any]:
    """The flags a checkpoint fits only with, by name, as meta.json records them: the base
    (`--model_name`) and, for a LoRA run, the adapter settings (the LoraConfig essentials).

    Target modules are compared as a set (`k_proj,q_proj` is `q_proj,k_proj`)."""
    settings: dict[str, Any] = {"model_name": cfg.model_name, "use_peft": cfg.use_peft}
    if cfg.use_peft:
        targets = target_modules(cfg)
        settings.update(
            peft_method=cfg.peft_method,
            lora_r=cfg.lora_r,
            lora_alpha=cfg.lora_alpha,
            lora_dropout=cfg.lora_dropout,
            lora_target_modules=targets if isinstance(targets, str) else ",".join(sorted(targets)),
        )
    return settings
