"""`--from_peft_checkpoint`: which adapter folders are taken, and which are refused in one line.

If this fails, the package refuses the adapter folder it wrote itself with
`--lora_target_modules all-linear` (peft saves the layer names it resolved, never the string
"all-linear": `_maybe_include_all_linear_layers`, peft/tuners/tuners_utils.py at v0.21.2, full
dotted names in 0.21.2), or
refuses a folder whose `target_modules` are full dotted names, or silently loads an adapter whose
forward differs from the one built here (rsLoRA's scaling, DoRA's magnitude, per-layer ranks or
alphas, a subset of layers, extra trained modules, biases, transposed weights: the fields of
`peft.LoraConfig`, peft/tuners/lora/config.py at v0.21.2), or a folder of another model's
shapes ends in a torch traceback instead of a line naming the flag. The folders are written by
peft itself (`save_pretrained`) on a tiny random Llama.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

from training.config import ConfigError, parse_args
from training.model import ModelError


def _tiny(hidden: int = 32) -> Any:
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=96,
        hidden_size=hidden,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
    )
    torch.manual_seed(0)
    return LlamaForCausalLM(config)


def _peft_folder(path: Path, targets: Any, hidden: int = 32, **extra: Any) -> Path:
    """An adapter folder as peft writes it (r=8, alpha=32: the flags' defaults)."""
    from peft import LoraConfig, get_peft_model

    config = LoraConfig(r=8, lora_alpha=32, target_modules=targets, task_type="CAUSAL_LM", **extra)
    get_peft_model(_tiny(hidden), config).save_pretrained(str(path))
    return path


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("adapters")
    return {
        "all_linear": _peft_folder(root / "all_linear", "all-linear"),
        "qv": _peft_folder(root / "qv", ["q_proj", "v_proj"]),
        "dora": _peft_folder(root / "dora", ["q_proj", "v_proj"], use_dora=True),
        "wide": _peft_folder(root / "wide", ["q_proj", "v_proj"], hidden=64),
    }


def _args(folder: Path, *extra: str) -> list[str]:
    return ["--use_peft", f"--from_peft_checkpoint={folder}", *extra]


def test_the_packages_own_all_linear_folder_is_taken(folders: dict[str, Path]) -> None:
    saved = json.loads((folders["all_linear"] / "adapter_config.json").read_text())
    assert isinstance(saved["target_modules"], list)  # resolved names, not "all-linear"
    assert len(saved["target_modules"]) == 2 * 7  # full dotted names, each layer's seven
    assert {t.rsplit(".", 1)[-1] for t in saved["target_modules"]} == {
        "q_proj",
        "k_proj",
        "v_proj",
        "o_proj",
        "gate_proj",
        "up_proj",
        "down_proj",
    }
    cfg = parse_args(_args(folders["all_linear"], "--lora_target_modules=all-linear"))
    assert cfg.from_peft_checkpoint == str(folders["all_linear"])
    # the same seven layers named one by one are taken too
    named = "q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj"
    assert parse_args(_args(folders["all_linear"], f"--lora_target_modules={named}"))
    # but q and v alone are not what that folder adapted
    with pytest.raises(
        ConfigError, match=r"^--from_peft_checkpoint: .* pass --lora_target_modules"
    ):
        parse_args(_args(folders["all_linear"]))


def test_full_dotted_target_names_compare_by_their_last_part(tmp_path: Path) -> None:
    folder = tmp_path / "dotted"
    folder.mkdir()
    saved = {
        "peft_type": "LORA",
        "r": 8,
        "lora_alpha": 32,
        "target_modules": ["model.layers.0.self_attn.q_proj", "model.layers.1.self_attn.v_proj"],
    }
    (folder / "adapter_config.json").write_text(json.dumps(saved))
    assert parse_args(_args(folder, "--lora_target_modules=v_proj,q_proj"))


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("use_rslora", True),
        ("use_dora", True),
        ("rank_pattern", {"q_proj": 4}),
        ("alpha_pattern", {"v_proj": 8}),
        ("layers_to_transform", [0]),
        ("modules_to_save", ["lm_head"]),
        ("bias", "lora_only"),
        ("lora_bias", True),
        ("fan_in_fan_out", True),
    ],
)
def test_a_folder_whose_adapters_compute_otherwise_is_refused(
    folders: dict[str, Path], tmp_path: Path, key: str, value: Any
) -> None:
    folder = tmp_path / key
    folder.mkdir()
    saved = json.loads((folders["qv"] / "adapter_config.json").read_text())
    assert parse_args(_args(folders["qv"]))  # the plain folder is taken
    (folder / "adapter_config.json").write_text(json.dumps({**saved, key: value}))
    with pytest.raises(ConfigError) as err:
        parse_args(_args(folder))
    message = str(err.value)
    assert message.startswith(f"--from_peft_checkpoint: {folder} was trained with {key}=")
    assert "changes the adapters' forward" in message and "\n" not in message


def test_a_real_dora_folder_is_refused(folders: dict[str, Path]) -> None:
    with pytest.raises(ConfigError, match=r"use_dora=True, which changes the adapters' forward"):
        parse_args(_args(folders["dora"]))


def test_weights_of_another_shape_stop_in_one_line(folders: dict[str, Path]) -> None:
    """Same r, alpha and targets (the flag check passes), another model's width: the load
    stops naming the flag, not with load_state_dict's multi-line RuntimeError."""
    from training.cookbook_run import with_adapter
    from training.lora import apply_lora

    cfg = parse_args(_args(folders["wide"]))
    load = with_adapter(lambda m: apply_lora(m, cfg, empty=False), str(folders["wide"]))
    with pytest.raises(ModelError) as err:
        load(_tiny(hidden=32))
    message = str(err.value)
    assert message.startswith(f"--from_peft_checkpoint {folders['wide']}: weights do not fit (")
    assert "size mismatch" in message and "\n" not in message
    # the same folder fits the model it was trained on
    peft_model = load(_tiny(hidden=64))
    assert sum(p.numel() for p in peft_model.parameters() if p.requires_grad) == 2 * (
        8 * 64 + 64 * 8 + 8 * 64 + 32 * 8
    )
