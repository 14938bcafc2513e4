"""Export the trained model as a consolidated Hugging Face folder (safetensors + config + tokenizer).

Every rank takes part in gathering the full state dict (`get_model_state_dict` with
`full_state_dict=True, cpu_offload=True`: shards are gathered one parameter at a time into rank 0's
CPU memory); rank 0 writes it with `save_pretrained`, so
`AutoModelForCausalLM.from_pretrained(<output_dir>/hf)` gives the trained model back.

With `--use_peft` the export is the adapter folder `<output_dir>/adapter` (only the trainable
parameters are gathered), which `peft.PeftModel.from_pretrained(base, folder)` loads, and with
`--merge_adapters` also `<output_dir>/hf`: the base with the adapters merged in.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch.distributed as dist
from torch import nn
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

from training.dist import barrier


def export_lora(
    model: nn.Module,
    peft_model: Any,
    config: Any,
    tokenizer: Any,
    out_dir: Path,
    *,
    merge: bool,
) -> list[tuple[str, Path]]:
    """Write `out_dir/adapter` and, with `merge`, `out_dir/hf` (collective); rank 0 returns
    [(what, folder)], the others []."""
    from training.lora import merged_state_dict, write_adapter_folder

    main = not dist.is_initialized() or dist.get_rank() == 0
    written: list[tuple[str, Path]] = []
    options = StateDictOptions(full_state_dict=True, cpu_offload=True, ignore_frozen_params=True)
    trainable = get_model_state_dict(model, options=options)
    if main:
        folder = write_adapter_folder(peft_model, trainable, tokenizer, out_dir / "adapter")
        written.append(("exported adapter", folder))
    del trainable
    if merge:
        options = StateDictOptions(full_state_dict=True, cpu_offload=True)
        full = get_model_state_dict(model, options=options)
        if main:
            merged = merged_state_dict(full, config, peft_model.peft_config["default"])
            written.append(
                ("merged model", write_hf_folder(merged, config, tokenizer, out_dir / "hf"))
            )
        del full
    barrier()
    return written


def export_hf(model: nn.Module, config: Any, tokenizer: Any, out_dir: Path) -> Path | None:
    """Write `out_dir` (collective). Returns the folder on rank 0, None elsewhere."""
    options = StateDictOptions(full_state_dict=True, cpu_offload=True)
    full = get_model_state_dict(model, options=options)
    path = None
    if not dist.is_initialized() or dist.get_rank() == 0:
        path = write_hf_folder(full, config, tokenizer, out_dir)
    barrier()
    return path


def write_hf_folder(state_dict: dict[str, Any], config: Any, tokenizer: Any, out_dir: Path) -> Path:
    """save_pretrained a model of `config` holding `state_dict` (no second copy in memory)."""
    from accelerate import init_empty_weights
    from transformers import AutoModelForCausalLM
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    with init_empty_weights(include_buffers=False):
        shell = AutoModelForCausalLM.from_config(config)
    dtype = next(iter(state_dict.values())).dtype
    shell.config.dtype = dtype
    shell.load_state_dict(state_dict, strict=False, assign=True)
    out_dir.mkdir(parents=True, exist_ok=True)
    shell.save_pretrained(str(out_dir), safe_serialization=True)
    if tokenizer is not None:
        tokenizer.save_pretrained(str(out_dir))
    return out_dir
