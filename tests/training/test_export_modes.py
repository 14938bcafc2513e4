"""Exported files are readable like any other file the run writes (training/export.py).

If this fails, the `--save_model` folder holds weights only its owner can read: safetensors
writes its files mode 0600 while config.json and the tokenizer get 0666 less the umask (0644
with the usual 022), so an inference server under another uid on shared storage (EFS, FSx)
loads the config and then fails on the weights. Checked for the servable folder (one file and
sharded) and the LoRA adapter folder, under two umasks.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from training.export import export_adapter, export_model


def _model() -> Any:
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=128,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
    )
    torch.manual_seed(0)
    return LlamaForCausalLM(config).eval()


@pytest.fixture(params=[0o022, 0o027])
def umask(request: pytest.FixtureRequest) -> Iterator[int]:
    old = os.umask(request.param)
    try:
        yield request.param
    finally:
        os.umask(old)


def _modes(folder: Path) -> dict[str, int]:
    return {p.name: stat.S_IMODE(p.stat().st_mode) for p in folder.iterdir() if p.is_file()}


@pytest.mark.parametrize("shard_bytes", [10**9, 40_000])
def test_weights_get_the_mode_of_the_other_files(
    tmp_path: Path, umask: int, shard_bytes: int
) -> None:
    from training.data import load_tokenizer

    model = _model()
    export_model(
        model,
        model.config,
        load_tokenizer("tiny-llama-2l"),
        tmp_path,
        dtype=torch.float32,
        max_shard_bytes=shard_bytes,
    )
    modes = _modes(tmp_path)
    weights = [n for n in modes if n.endswith(".safetensors")]
    assert len(weights) == (1 if shard_bytes == 10**9 else 3), sorted(modes)
    assert "config.json" in modes and "tokenizer.json" in modes
    assert set(modes.values()) == {0o666 & ~umask}, modes


@pytest.mark.filterwarnings("ignore::UserWarning")  # peft on a model without a hub config
def test_adapter_weights_get_the_mode_of_the_other_files(tmp_path: Path, umask: int) -> None:
    from training.config import TrainConfig
    from training.data import load_tokenizer
    from training.lora import ADAPTER_WEIGHTS, apply_lora

    model = _model()
    peft_model = apply_lora(model, TrainConfig(use_peft=True), empty=False)
    export_adapter(model, peft_model, load_tokenizer("tiny-llama-2l"), tmp_path)
    modes = _modes(tmp_path)
    assert ADAPTER_WEIGHTS in modes and "adapter_config.json" in modes
    assert set(modes.values()) == {0o666 & ~umask}, modes
