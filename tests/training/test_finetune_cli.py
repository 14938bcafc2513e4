"""`python -m training.finetune` end to end: its outputs, and bad input stopping with one line.

If these fail, a job writes incomplete outputs (metrics.jsonl keys, summary.json's llama-recipes
keys, the plot, the checkpoint, the HF export), or a bad input that can only be judged knowing
the world size or the model (HSDP group sizes, FSDP off with several processes, a batch larger
than the data, a context longer than the model's, a checkpoint of another model, a malformed
data row) reaches the training loop or dies with a stack trace instead of one line
`error: ...` naming the flag, or a flag error pays for importing torch first.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.shared import once
from tests.training.helpers import (
    PYTHON,
    REPO,
    TINY,
    child_env,
    ckpt_dir,
    finetune_cmd,
    launch,
    merge,
    run,
    run_dirs,
)
from training.parallelize import ParallelDims, ParallelError, parallelize

STEP_KEYS = {
    "step",
    "epoch",
    "loss",
    "lr",
    "grad_norm",
    "tokens",
    "tokens_per_s",
    "step_time_s",
    "world_size",
    "peak_mem_bytes",
}
SUMMARY_KEYS = {
    "avg_train_loss",
    "avg_train_prep",
    "avg_eval_loss",
    "avg_eval_prep",
    "avg_epoch_time",
    "avg_checkpoint_time",
    "tokens_per_s",
    "peak_mem_bytes",
}
FSDP2 = ["--enable_fsdp", "--batch_size_training=2"]

# name -> (extra flags at world size 2, fragment of the one error line)
BAD_AT_WORLD_2: dict[str, tuple[list[str], str]] = {
    "fsdp_off": (["--enable_fsdp=False"], "WORLD_SIZE is 2 but --enable_fsdp is off"),
    "hsdp_product": (
        ["--hsdp", "--sharding_group_size=3", "--replica_group_size=1"],
        "--sharding_group_size 3 x --replica_group_size 1 = 3, but WORLD_SIZE is 2",
    ),
    "hsdp_shard_divide": (
        ["--hsdp", "--sharding_group_size=3"],
        "--sharding_group_size 3 does not divide WORLD_SIZE 2",
    ),
    "hsdp_replica_divide": (
        ["--hsdp", "--replica_group_size=4"],
        "--replica_group_size 4 does not divide WORLD_SIZE 2",
    ),
    "batch_too_big": (["--batch_size_training=2000"], "fewer than one global batch of 4000"),
    "context_too_long": (
        ["--context_length=8192"],
        "--context_length 8192 exceeds the model's max_position_embeddings 4096",
    ),
    "no_such_model": (["--model_name=/nonexistent/model"], "--model_name /nonexistent/model"),
    "resume_other_model": (
        ["--model_name=tiny-llama", "--resume"],
        "--resume: checkpoint step-000004 was made with --model_name tiny-llama-2l, "
        "this run has tiny-llama",
    ),
    "bad_row": (["--dataset=custom", "--data_path=BAD"], "bad.jsonl:2: missing field 'summary'"),
    "lora_target_missing": (
        ["--use_peft", "--lora_target_modules=q_proj,qkv_proj"],
        "--lora_target_modules: LlamaForCausalLM has no module named 'qkv_proj' (its linear "
        "layers: down_proj, gate_proj, k_proj, lm_head, o_proj, q_proj, up_proj, v_proj)",
    ),
}


@pytest.fixture(scope="session")
def campaign(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    """One 2-process launch: a complete run with every output, then each bad input (once per
    test run, shared by the pytest-xdist workers: ``tests/shared.py``)."""
    return once(tmp_path_factory, "finetune-cli", _campaign)


def _campaign(base: Path) -> tuple[Path, dict[str, Any]]:
    bad = base / "bad.jsonl"
    bad.write_text('{"dialogue": "A: hi", "summary": "greeting"}\n{"dialogue": "B: yo"}\n')
    full = merge(
        TINY,
        FSDP2,
        run_dirs(base, "full"),
        [
            "--max_train_step=4",
            "--run_validation=True",
            "--max_eval_step=2",
            "--save_model=True",
            "--checkpoint_every=2",
            "--plot_metrics=True",
        ],
    )
    chat = merge(
        TINY,
        FSDP2,
        run_dirs(base, "chat"),
        ["--dataset=chat_sample", "--context_length=160", "--max_train_step=2"],
    )
    jobs: list[dict[str, Any]] = [
        {"kind": "train", "name": "full", "argv": full},
        {"kind": "train", "name": "chat", "argv": chat, "stdout": True},
    ]
    for name, (extra, _) in BAD_AT_WORLD_2.items():
        flags = [f.replace("BAD", str(bad)) for f in extra]
        # resume_other_model resumes from the tiny-llama-2l checkpoint of the "full" run.
        dirs = run_dirs(base, "full" if name == "resume_other_model" else name)
        jobs.append({"kind": "train", "name": name, "argv": merge(TINY, FSDP2, dirs, flags)})
    return base, launch(2, jobs, base)


@pytest.mark.slow
def test_full_run_writes_every_output(campaign: tuple[Path, dict[str, Any]]) -> None:
    base, results = campaign
    assert results["full"]["rc"] == [0, 0], results["full"]["stderr"]
    out = base / "full" / "out"
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2, 3, 4]
    for r in rows:
        assert set(r) >= STEP_KEYS
        assert r["world_size"] == 2 and r["tokens"] == 4 * 64 and r["tokens_per_s"] > 0
        assert r["peak_mem_bytes"] > 0 and r["grad_norm"] > 0
    summary = json.loads((out / "summary.json").read_text())
    assert set(summary) >= SUMMARY_KEYS
    assert summary["avg_eval_loss"] > 0 and summary["avg_eval_prep"] > 1
    assert summary["steps"] == 4
    assert (out / "metrics.png").stat().st_size > 1000
    assert (out / "hf" / "model.safetensors").is_file()
    ckpts = sorted(p.name for p in ckpt_dir(base, "full").iterdir())
    assert ckpts == ["step-000002", "step-000004"]


@pytest.mark.slow
def test_chat_run_learns_assistant_turns_and_says_what_it_left_out(
    campaign: tuple[Path, dict[str, Any]],
) -> None:
    base, results = campaign
    assert results["chat"]["rc"] == [0, 0], results["chat"]["stderr"]
    out = results["chat"]["stdout"]
    line = (
        "data chat_sample (train): 70 of 256 conversations are longer than --context_length 160 "
        "tokens (up to 186) and are left out, not cut; packing splits conversations across rows "
        "of 160 tokens and drops the last 80 (--batching_strategy padding keeps each whole)"
    )
    assert line in out[0].splitlines() and line not in out[1]  # rank 0 says it, once
    rows = [
        json.loads(x) for x in (base / "chat" / "out" / "metrics.jsonl").read_text().splitlines()
    ]
    assert [r["step"] for r in rows] == [1, 2]
    # system and user turns are not learned: well under half the packed tokens carry labels
    assert all(0 < r["label_tokens"] < 0.5 * r["tokens"] for r in rows)


@pytest.mark.slow
@pytest.mark.parametrize("name", list(BAD_AT_WORLD_2))
def test_bad_input_at_world_2_is_one_line(campaign: tuple[Path, dict[str, Any]], name: str) -> None:
    _, results = campaign
    res = results[name]
    assert res["rc"] == [2, 2]
    lines = res["stderr"][0].strip().splitlines()
    assert len(lines) == 1, res["stderr"][0]
    assert lines[0].startswith("eks-fsdp train: error: ")
    assert BAD_AT_WORLD_2[name][1] in lines[0]
    assert res["stderr"][1] == ""  # rank 1 finds the same problem and keeps quiet


@pytest.mark.slow
def test_torchrun_user_sees_one_error_line(tmp_path: Path) -> None:
    argv = merge(TINY, FSDP2, run_dirs(tmp_path, "x"), ["--hsdp", "--sharding_group_size=3"])
    proc = run(finetune_cmd(2, argv), timeout=300)
    ours = [
        ln
        for ln in (proc.stdout + proc.stderr).splitlines()
        if ln.startswith("eks-fsdp train: error:")
    ]
    assert ours == ["eks-fsdp train: error: --sharding_group_size 3 does not divide WORLD_SIZE 2"]
    assert proc.returncode != 0
    assert "Traceback" not in proc.stdout  # torchrun's own failure report goes to stderr


def test_flag_error_stops_before_importing_torch() -> None:
    code = (
        "import sys\n"
        "from training.finetune import main\n"
        "rc = main(['--batch_size_training', '0'])\n"
        "print('torch' in sys.modules)\n"
        "sys.exit(rc)\n"
    )
    proc = subprocess.run(
        [PYTHON, "-c", code], cwd=REPO, env=child_env(), capture_output=True, text=True
    )
    assert proc.returncode == 2
    assert proc.stdout.strip() == "False"
    assert proc.stderr.strip().splitlines() == [
        "eks-fsdp train: error: --batch_size_training: must be >= 1, got 0"
    ]


def test_unknown_flag_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    from training.finetune import main

    assert main(["--enable_fdsp"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        "eks-fsdp train: error: unknown flag --enable_fdsp (did you mean --enable_fsdp?)"
    ]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            {"world_size": 4, "replicate": 2, "shard": 3},
            "--sharding_group_size 3 x --replica_group_size 2 = 6, but WORLD_SIZE is 4",
        ),
        ({"world_size": 2, "enable_fsdp": False}, "pass --enable_fsdp"),
        ({"world_size": 2, "strategy": "ZERO3", "shard": 2}, "--sharding_strategy ZERO3"),
        ({"world_size": 0}, "WORLD_SIZE must be at least 1"),
    ],
)
def test_parallel_dims_validate(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ParallelError, match=message.replace("+", r"\+")) as err:
        ParallelDims(**kwargs)
    assert "\n" not in str(err.value)


def test_parallel_dims_infer_hsdp_groups() -> None:
    from training.config import TrainConfig

    cfg = TrainConfig(enable_fsdp=True, hsdp=True, sharding_strategy="HYBRID_SHARD")
    dims = ParallelDims.from_config(cfg, world_size=8, local_world_size=4)
    assert (dims.replicate, dims.shard) == (2, 4)  # shard within a node, replicate across
    cfg = TrainConfig(
        enable_fsdp=True, hsdp=True, sharding_strategy="HYBRID_SHARD", replica_group_size=4
    )
    assert ParallelDims.from_config(cfg, world_size=8).shard == 2
    grad_op = TrainConfig(enable_fsdp=True, sharding_strategy="SHARD_GRAD_OP")
    assert ParallelDims.from_config(grad_op, world_size=2).reshard_after_forward is False


def test_activation_checkpointing_needs_decoder_layers() -> None:
    import torch

    from training.config import TrainConfig

    cfg = TrainConfig(enable_fsdp=True, fsdp_activation_checkpointing=True)
    model = torch.nn.Sequential(torch.nn.Linear(4, 4))
    with pytest.raises(ParallelError, match="--fsdp_activation_checkpointing") as err:
        parallelize(model, None, cfg, ParallelDims(world_size=1, shard=1))
    assert "\n" not in str(err.value)


@pytest.mark.slow
def test_plain_python_single_process(tmp_path: Path) -> None:
    """Without torchrun: a world of one, no FSDP, all outputs."""
    argv = merge(TINY, run_dirs(tmp_path, "p"), ["--max_train_step=2"])
    proc = run([sys.executable, "-m", "training.finetune", *argv], timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "=== training summary ===" in proc.stdout
    rows = (tmp_path / "p" / "out" / "metrics.jsonl").read_text().splitlines()
    assert len(rows) == 2
