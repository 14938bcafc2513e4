"""LoRA (`--use_peft --peft_method lora`) under FSDP2: same updates at any world size, adapters
alone trained, checkpointed and exported.

If these fail, a 2-process FSDP2 LoRA run no longer follows the 1-process run step for step
(frozen and trainable parameters in one FSDP unit mishandled, the adapters initialised
differently per rank, gradients of the base reduced or clipped with the adapters'), the base
receives gradients or optimizer state (LoRA's memory saving lost), a checkpoint holds the base or
does not resume exactly (also after a SIGKILL, and across world sizes), the adapter folder does
not load with `peft.PeftModel.from_pretrained` to the model that was trained, or the merged
export differs from it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from tests.training.conftest import LORA_KILL_STEPS, RESUME_AT, STEPS
from tests.training.helpers import (
    REPO,
    TINY,
    child_env,
    ckpt_dir,
    finetune_cmd,
    max_diff,
    merge,
    metrics,
    run_dirs,
)
from training.checkpoint import latest_complete

TOL = 1e-4
BF16_LOSS_TOL = 1e-2
"""As tests/training/test_parity.py allows bf16 mixed precision against fp32 (the loss moves by
~1e-3 here; grad norms differ too much in bf16 to assert)."""


def _ok(results: dict[str, Any], name: str) -> None:
    assert results[name]["rc"] == [0] * len(results[name]["rc"]), results[name]["stderr"]


def _lora_params(hidden: int, kv_dim: int, layers: int, r: int = 8) -> int:
    """LoRA parameters on q_proj (hidden -> hidden) and v_proj (hidden -> kv_dim) per layer."""
    q = r * hidden + hidden * r
    v = r * hidden + kv_dim * r
    return layers * (q + v)


@pytest.mark.slow
def test_two_processes_match_one(
    world1: tuple[Path, dict[str, Any]], world2: tuple[Path, dict[str, Any]]
) -> None:
    (b1, r1), (b2, r2) = world1, world2
    _ok(r1, "lora_ref")
    _ok(r2, "lora_full_shard")
    ref, sharded = metrics(b1, "lora_ref"), metrics(b2, "lora_full_shard")
    assert [r["step"] for r in sharded] == list(range(1, STEPS + 1))
    assert max_diff(sharded, ref, "loss") < TOL
    assert max_diff(sharded, ref, "grad_norm") < TOL
    # the adapters learn: the loss moves (B starts at zero, so step 1 is the base's loss)
    assert ref[-1]["loss"] != ref[0]["loss"]


@pytest.mark.slow
@pytest.mark.parametrize("name", ["lora_bf16_mixed", "lora_pure_bf16"])
def test_bf16_runs_follow_fp32(
    world1: tuple[Path, dict[str, Any]], world2: tuple[Path, dict[str, Any]], name: str
) -> None:
    """bf16 compute (FSDP2's MixedPrecisionPolicy casts base and adapters alike), and pure bf16
    (the base in bf16; peft keeps the adapters in fp32, a second dtype in each FSDP2 unit)."""
    _ok(world2[1], name)
    got = metrics(world2[0], name)
    assert [r["step"] for r in got] == list(range(1, STEPS + 1))
    assert max_diff(got, metrics(world1[0], "lora_ref"), "loss") < BF16_LOSS_TOL


@pytest.mark.slow
def test_only_the_adapters_train(world1: tuple[Path, dict[str, Any]]) -> None:
    base, _ = world1
    summary = json.loads((base / "lora_ref" / "out" / "summary.json").read_text())
    full = json.loads((base / "ref" / "out" / "summary.json").read_text())
    # tiny-llama-2l: hidden 64, 2 layers, 2 of 4 heads for k/v (head_dim 16): v_proj 64 -> 32
    want = _lora_params(hidden=64, kv_dim=32, layers=2)
    assert summary["trainable_params"] == want == 3584
    assert summary["params"] == full["params"] + want
    assert full["trainable_params"] == full["params"]
    assert 0.01 < want / summary["params"] < 0.012


@pytest.mark.slow
def test_base_has_no_gradient_or_optimizer_state(world2: tuple[Path, dict[str, Any]]) -> None:
    ranks = world2[1]["lora_bytes"]["ranks"]
    for r in ranks:
        assert r["n_grads"] == r["n_trainable"] == 8  # 2 layers x (q, v) x (A, B)
        assert r["grad_bytes"] == r["trainable_bytes"] / 2  # sharded over 2 ranks
        # AdamW's two moments of the adapters' shards, plus one 4-byte step count per tensor
        assert r["optim_bytes"] == r["trainable_bytes"] + 4 * r["n_trainable"]
        assert abs(r["param_bytes"] / (r["full_param_bytes"] / 2) - 1) < 0.05  # base sharded


@pytest.mark.slow
def test_checkpoints_hold_the_adapters_only(world1: tuple[Path, dict[str, Any]]) -> None:
    import torch.distributed.checkpoint as dcp

    root = ckpt_dir(world1[0], "lora_ref")
    latest = latest_complete(root)
    assert latest is not None
    keys = list(dcp.FileSystemReader(str(latest)).read_metadata().state_dict_metadata)
    model_keys = [k for k in keys if k.startswith("app.model.")]
    assert model_keys and all(".lora_A." in k or ".lora_B." in k for k in model_keys), model_keys
    assert len(model_keys) == 8
    # the adapter settings travel with it, so --resume can refuse other ones (test_checkpoint)
    settings = json.loads((latest / "meta.json").read_text())["settings"]
    assert settings["use_peft"] is True and settings["lora_dropout"] == 0
    assert settings["lora_target_modules"] == "q_proj,v_proj"


@pytest.mark.slow
def test_resume_one_to_two_processes(
    world1: tuple[Path, dict[str, Any]], world2: tuple[Path, dict[str, Any]]
) -> None:
    _ok(world2[1], "lora_resume_1to2")
    ref, resumed = metrics(world1[0], "lora_ref"), metrics(world2[0], "lora_resume_1to2")
    assert [r["step"] for r in resumed] == list(range(RESUME_AT + 1, STEPS + 1))
    assert max_diff(resumed, ref, "loss") < TOL
    assert max_diff(resumed, ref, "grad_norm") < TOL


@pytest.mark.slow
def test_resume_after_sigkill_is_exact(tmp_path: Path, world1: tuple[Path, dict[str, Any]]) -> None:
    """LoRA with dropout (its random numbers drawn per step from the seed): a run killed with
    SIGKILL resumes from its newest complete checkpoint with the uninterrupted run's losses."""
    name = "killed"
    argv = merge(
        TINY,
        [
            "--use_peft",
            "--batch_size_training=4",
            f"--max_train_step={LORA_KILL_STEPS}",
            "--checkpoint_every=2",
            "--async_checkpoint=False",
        ],
        run_dirs(tmp_path, name),
    )
    root = ckpt_dir(tmp_path, name)
    proc = subprocess.Popen(
        finetune_cmd(0, argv),
        cwd=REPO,
        env=child_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline and proc.poll() is None:
            if latest_complete(root) is not None:
                break
            time.sleep(0.02)
        assert proc.poll() is None, "run ended before it could be killed"
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    latest = latest_complete(root)
    assert latest is not None
    saved_at = json.loads((latest / "meta.json").read_text())["step"]
    assert saved_at < LORA_KILL_STEPS

    resumed = subprocess.run(
        finetune_cmd(0, [*argv, "--resume"]),
        cwd=REPO,
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert f"resumed from {latest} at step {saved_at}" in resumed.stdout
    # the trainable fraction peft would print, in the run's own log and its summary
    summary = json.loads((tmp_path / name / "out" / "summary.json").read_text())
    trainable, total = _lora_params(hidden=64, kv_dim=32, layers=2), summary["params"]
    assert summary["trainable_params"] == trainable == 3584
    assert (
        f"on q_proj,v_proj: trainable params: {trainable:,d} || all params: {total:,d} || "
        f"trainable%: {100 * trainable / total:.4f}"
    ) in resumed.stdout
    ref, after = metrics(world1[0], "lora_dropout_ref"), metrics(tmp_path, name)
    assert [r["step"] for r in after] == list(range(1, LORA_KILL_STEPS + 1))
    redone = [r for r in after if r["step"] > saved_at]
    assert redone and max_diff(redone, ref, "loss") == 0.0
    assert max_diff(redone, ref, "grad_norm") == 0.0
    # the dropout is on: without it these losses would equal the dropout-free run's
    assert max_diff(ref, metrics(world1[0], "lora_ref"), "loss") > 1e-4


@pytest.mark.slow
def test_adapter_and_merged_exports_give_the_trained_logits(
    world2: tuple[Path, dict[str, Any]], hf_checkpoint: Path
) -> None:
    import torch
    from peft import PeftModel
    from safetensors import safe_open
    from transformers import AutoModelForCausalLM

    base, results = world2
    assert results["lora_export"]["rc"] == 0
    out = base / "lora_export" / "out"
    adapter, merged = out / "adapter", out / "hf"
    assert {"adapter_config.json", "adapter_model.safetensors", "tokenizer.json"} <= {
        p.name for p in adapter.iterdir()
    }
    config = json.loads((adapter / "adapter_config.json").read_text())
    assert config["peft_type"] == "LORA"
    assert (config["r"], config["lora_alpha"], config["lora_dropout"]) == (8, 32, 0.05)
    assert config["base_model_name_or_path"] == str(hf_checkpoint)
    # all-linear, resolved by peft (to full module names in this version)
    assert {t.rsplit(".", 1)[-1] for t in config["target_modules"]} == {
        "q_proj",
        "k_proj",
        "v_proj",
        "o_proj",
        "gate_proj",
        "up_proj",
        "down_proj",
    }
    with safe_open(str(adapter / "adapter_model.safetensors"), "pt") as f:
        keys = list(f.keys())
    assert len(keys) == 2 * 7 * 2  # layers x linear layers x (A, B)
    assert all(k.startswith("base_model.model.model.layers.") for k in keys)
    assert all(".default." not in k for k in keys)

    saved = torch.load(base / "lora_export" / "logits.pt")
    ids, trained = saved["input_ids"], saved["logits"]
    base_model = AutoModelForCausalLM.from_pretrained(hf_checkpoint, dtype=torch.float32)
    with torch.no_grad():
        base_logits = base_model(input_ids=ids).logits
    peft_model = PeftModel.from_pretrained(base_model, adapter)
    peft_model.eval()
    with torch.no_grad():
        via_peft = peft_model(input_ids=ids).logits
    assert (trained - base_logits).abs().max() > 1e-3  # the adapters changed the model
    assert torch.allclose(via_peft, trained, atol=1e-5, rtol=0)

    merged_model = AutoModelForCausalLM.from_pretrained(merged, dtype=torch.float32)
    assert not any("lora" in n for n, _ in merged_model.named_parameters())
    merged_model.eval()
    with torch.no_grad():
        via_merged = merged_model(input_ids=ids).logits
    assert torch.allclose(via_merged, trained, atol=1e-5, rtol=0)
    assert torch.allclose(via_merged, via_peft, atol=1e-5, rtol=0)


def test_targets_the_model_lacks_or_that_are_not_linear_are_one_line() -> None:
    from training.config import TrainConfig
    from training.data import load_tokenizer
    from training.lora import apply_lora
    from training.model import ModelError, build_empty, model_spec

    spec = model_spec("tiny-llama-2l", len(load_tokenizer("tiny-llama-2l")), 64)
    linear = "down_proj, gate_proj, k_proj, lm_head, o_proj, q_proj, up_proj, v_proj"
    for targets, message in [
        ("q_proj,wq", f"LlamaForCausalLM has no module named 'wq' (its linear layers: {linear})"),
        ("mlp", f"'mlp' names LlamaMLP modules, not linear layers (its linear layers: {linear})"),
    ]:
        cfg = TrainConfig(use_peft=True, lora_target_modules=targets)
        with pytest.raises(ModelError) as err:
            apply_lora(build_empty(spec), cfg, empty=True)
        assert str(err.value) == f"--lora_target_modules: {message}"


def test_describe_prints_peft_figures() -> None:
    from torch import nn

    from training.config import TrainConfig
    from training.lora import describe

    model = nn.Sequential(nn.Linear(10, 10), nn.Linear(10, 2, bias=False))
    model[0].requires_grad_(False)
    line = describe(TrainConfig(use_peft=True, lora_r=4), model)
    assert line == (
        "peft lora r=4 alpha=32 dropout=0.05 on q_proj,v_proj: trainable params: 20 || "
        "all params: 130 || trainable%: 15.3846"
    )


def test_checkpoint_settings_name_the_base_and_the_adapters() -> None:
    from training.config import TrainConfig
    from training.lora import checkpoint_settings

    full = checkpoint_settings(TrainConfig(model_name="tiny-llama-2l"))
    assert full == {"model_name": "tiny-llama-2l", "use_peft": False}
    lora = checkpoint_settings(TrainConfig(use_peft=True, lora_target_modules="v_proj, q_proj"))
    assert lora == {
        "model_name": "tiny-llama",
        "use_peft": True,
        "peft_method": "lora",
        "lora_r": 8,
        "lora_alpha": 32,
        "lora_dropout": 0.05,
        "lora_target_modules": "q_proj,v_proj",
    }
