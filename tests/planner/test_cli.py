"""``eks-fsdp plan``: JSON schema, human table, --stack, --plot and bad inputs.

If this fails, users (and the scaling notebook) lose a documented output key, a stack file
is no longer read the way `pulumi up` would deploy it, the plot is not written, or a bad flag
gives a traceback instead of one line naming the flag with exit status 2; or the LoRA flags
(``--lora``, ``--lora-r``, ``--lora-targets``, ``--lora-dropout``, or a stack job's
``--use_peft``) no longer plan what ``planner.lora`` models. In-process calls of ``main`` plus
one real subprocess; nothing is mocked.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from planner.args import builtin_for_hub_id
from planner.cli import main

REPO = Path(__file__).resolve().parents[2]
REQUIRED = {
    "nodes",
    "gpus",
    "fits",
    "mem_per_gpu_bytes",
    "step_time_s",
    "tokens_per_s_per_gpu",
    "mfu",
    "scaling_efficiency",
    "cost_per_epoch_usd",
    "memory",
    "comm_s",
    "assumptions",
    "recommendation",
    "epoch",
    "flops_per_token",
    "checkpoint_s",
    "checkpoint_bytes",
    "storage",
}
MEMORY = {
    "params",
    "grads",
    "optimizer",
    "activations",
    "activations_no_ac",
    "activations_ac",
    "gathered_unit",
    "gathered_unit_name",
    "gathered_peak",
    "overhead",
    "total",
}


def _json(capsys: pytest.CaptureFixture[str], *argv: str) -> list[dict[str, Any]]:
    """The JSON rows; a plan that fits at none of its node counts still prints them and exits
    1 (tests/planner/test_fit_advice.py), which some figures here are read from."""
    code = main([*argv, "--json"])
    rows = json.loads(capsys.readouterr().out)
    assert code == (0 if any(r["fits"] for r in rows) else 1)
    return rows


def test_json_has_one_object_per_node_count_with_the_schema(
    capsys: pytest.CaptureFixture[str],
) -> None:
    rows = _json(
        capsys,
        "--model",
        "llama2-70b",
        "--instance",
        "p4de.24xlarge",
        "--nodes",
        "1,2,4,8,16",
        "--dataset",
        "samsum",
    )
    assert [r["nodes"] for r in rows] == [1, 2, 4, 8, 16]
    assert [r["gpus"] for r in rows] == [8, 16, 32, 64, 128]
    for r in rows:
        assert r.keys() >= REQUIRED
        assert r["memory"].keys() >= MEMORY
        assert {"nvlink", "efa", "exposed"} <= r["comm_s"].keys()
        assert r["mem_per_gpu_bytes"] == r["memory"]["total"]
    assert [r["fits"] for r in rows] == [False, False, True, True, True]
    a = rows[0]["assumptions"]
    assert a["gpu_generation"]["name"] == "A100-SXM-80GB"
    assert a["dataset_tokens"] == 14732 * 190


def test_without_a_dataset_there_is_no_epoch_or_cost(capsys: pytest.CaptureFixture[str]) -> None:
    rows = _json(
        capsys,
        "--model",
        "llama2-7b",
        "--instance",
        "p5.48xlarge",
        "--nodes",
        "1,2",
        "--dataset",
        "none",
    )
    assert rows[0]["epoch"] is None and rows[0]["cost_per_epoch_usd"] is None
    assert rows[1]["scaling_efficiency"] == rows[1]["step_scaling_efficiency"]


def test_flags_change_the_plan(capsys: pytest.CaptureFixture[str]) -> None:
    base = ["--model", "llama2-13b", "--instance", "p5.48xlarge", "--nodes", "2"]
    ac = _json(capsys, *base)[0]
    no_ac = _json(capsys, *base, "--no-ac")[0]
    assert no_ac["memory"]["activations"] > ac["memory"]["activations"]
    hsdp = _json(capsys, *base, "--sharding", "HYBRID_SHARD", "--hsdp-group", "8")[0]
    assert (hsdp["shard_group"], hsdp["replicas"]) == (8, 2)
    small = _json(capsys, *base, "--batch", "1", "--seq", "2048")[0]
    assert small["mem_per_gpu_bytes"] < ac["mem_per_gpu_bytes"]


def test_human_table(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--model", "llama2-70b", "--instance", "p4de.24xlarge", "--nodes", "2,4"]) == 0
    out = capsys.readouterr().out
    assert "GiB/GPU" in out and "recommend @ 2 nodes" in out and "NO" in out


def test_stack_file_supplies_instance_nodes_model_and_batch(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from jobs.schema import load

    job = load(Path(__file__).resolve().parents[2] / "jobs" / "examples" / "p5-16.yaml")
    rows = _json(capsys, "--stack", "p5-16")
    assert len(rows) == 1
    r = rows[0]
    assert r["nodes"] == job.workers
    assert r["gpus"] == job.workers * 8
    assert r["instance"] == job.group.instance_type
    assert r["model"] == builtin_for_hub_id(job.model)
    assert (r["micro_batch"], r["seq"]) == (job.batch_size, job.context_length)
    assert r["sharding"] == job.sharding_strategy
    assert r["usd_per_hour"] == job.group.usd_per_hour
    override = _json(capsys, "--stack", "p5-16", "--nodes", "1,16", "--batch", "1")
    assert [x["nodes"] for x in override] == [1, 16]
    assert override[0]["micro_batch"] == 1
    # --stack reads the stack's example job; --job any job file (on its own stack)
    assert _json(capsys, "--job", "jobs/examples/p5-16.yaml") == rows
    assert main(["--stack", "nope"]) == 2
    assert "Pulumi.nope.yaml" in capsys.readouterr().err


def test_ac_mode_and_the_stack_jobs_own_checkpointing(capsys: pytest.CaptureFixture[str]) -> None:
    """--ac-mode selective plans op-level SAC (between full AC and none, faster than full AC);
    --stack reads its example job's activation checkpointing from its args with the training
    CLI's parser: the dev stack turns it off (--fsdp_activation_checkpointing=False), as p5-16's
    recommended layout does; p4de-odcr keeps it on (full AC, the training default mode)."""
    full, sac, off = (
        _json(capsys, *BASE, *extra)[0] for extra in ([], ["--ac-mode", "selective"], ["--no-ac"])
    )
    assert (full["ac_mode"], sac["ac_mode"], off["ac_mode"]) == ("full", "selective", "none")
    act = [r["memory"]["activations"] for r in (full, sac, off)]
    assert act == sorted(act) and len(set(act)) == 3
    assert full["step_time_s"] > sac["step_time_s"] > off["step_time_s"]
    assert _json(capsys, *BASE, "--ac-mode", "none")[0]["ac_mode"] == "none"
    dev = _json(capsys, "--stack", "dev")[0]
    assert (dev["ac_fraction"], dev["ac_mode"]) == (0.0, "none")
    assert _json(capsys, "--stack", "dev", "--ac")[0]["ac_mode"] == "full"
    assert _json(capsys, "--stack", "dev", "--ac-mode", "selective")[0]["ac_mode"] == "selective"
    assert _json(capsys, "--stack", "p5-16")[0]["ac_mode"] == "none"
    assert _json(capsys, "--stack", "p5-16", "--ac-mode", "full")[0]["ac_mode"] == "full"
    assert _json(capsys, "--stack", "p4de-odcr")[0]["ac_mode"] == "full"
    assert _json(capsys, "--stack", "p4de-odcr", "--ac-mode", "none")[0]["ac_mode"] == "none"


def test_stack_ac_reads_only_the_ac_flags_of_extra_args() -> None:
    """The AC flags in every form a job's flags allow; the other flags are left to the job's
    own check (a --data_path alone would fail the training CLI without its --dataset); a bad AC
    value is one line naming the stack and the job's args."""
    from planner.args import UsageError, _stack_ac

    assert _stack_ac("s", ("--data_path=/data/x.jsonl", "--ac_mode=selective")) == {
        "ac": True,
        "ac_mode": "selective",
    }
    assert _stack_ac("s", ("--nofsdp_activation_checkpointing",)) == {"ac": False, "ac_mode": None}
    assert _stack_ac("s", ("--fsdp-activation-checkpointing=false",))["ac"] is False
    assert _stack_ac("s", ("--ac_mode=none",)) == {"ac": False, "ac_mode": None}
    assert _stack_ac("s", ()) == {"ac": True, "ac_mode": "full"}  # the training defaults
    with pytest.raises(UsageError, match=r"^--stack s: the job's args: --ac_mode"):
        _stack_ac("s", ("--ac_mode=layer",))


def test_hub_ids_map_to_builtin_shapes() -> None:
    assert builtin_for_hub_id("meta-llama/Llama-2-70b-hf") == "llama2-70b"
    assert builtin_for_hub_id("meta-llama/Meta-Llama-3-8B") == "llama3-8b"
    assert builtin_for_hub_id("meta-llama/Llama-3.1-70B-Instruct") == "llama3-70b"
    assert builtin_for_hub_id("tiny-llama") == "tiny-llama"


def test_plot_writes_a_png(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "plan.png"
    assert (
        main(
            [
                "--model",
                "llama2-7b",
                "--instance",
                "p5.48xlarge",
                "--nodes",
                "1,2,4",
                "--dataset",
                "samsum",
                "--plot",
                str(out),
            ]
        )
        == 0
    )
    data = out.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 20_000


def _bad_config(tmp_path: Path) -> str:
    path = tmp_path / "config.json"
    path.write_text('{\n  "hidden_size": 64,\n  oops\n}')
    return str(path)


BASE = ["--model", "llama2-7b", "--instance", "p5.48xlarge", "--nodes", "1"]


@pytest.mark.parametrize(
    ("argv", "flag"),
    [
        (
            ["--model", "llama9-1b", "--instance", "p5.48xlarge", "--nodes", "1"],
            "--model llama9-1b",
        ),
        (["--model", "llama2-7b", "--instance", "p9.huge", "--nodes", "1"], "--instance p9.huge"),
        (["--model", "llama2-7b", "--instance", "p5.48xlarge", "--nodes", "0"], "--nodes 0"),
        (["--model", "llama2-7b", "--instance", "p5.48xlarge", "--nodes", "1,x"], "--nodes 1,x"),
        (["--model", "BADCONFIG", "--instance", "p5.48xlarge", "--nodes", "1"], "config.json:3"),
        ([*BASE, "--seq", "0"], "--seq 0"),
        ([*BASE, "--seq", "100000"], "--seq 100000"),
        ([*BASE, "--batch", "0"], "--batch 0"),
        ([*BASE, "--epochs", "0"], "--epochs 0"),
        ([*BASE, "--hsdp-group", "8"], "--hsdp-group"),
        ([*BASE, "--sharding", "HYBRID_SHARD", "--hsdp-group", "3"], "--hsdp-group 3"),
        ([*BASE, "--sharding", "ZERO9"], "--sharding"),
        ([*BASE, "--ac-mode", "layer"], "--ac-mode"),
        ([*BASE, "--no-ac", "--ac-mode", "selective"], "--ac-mode selective"),
        ([*BASE, "--ac", "--ac-mode", "none"], "--ac-mode none"),
        ([*BASE, "--dataset", "nope"], "--dataset nope"),
        (["--instance", "p5.48xlarge", "--nodes", "1"], "--model"),
        (["--stack", "no-such-stack"], "--stack no-such-stack"),
        ([*BASE, "--bogus"], "--bogus"),
        ([*BASE, "--storage", "SCRATCH_3:1200"], "--storage SCRATCH_3:1200"),
        ([*BASE, "--storage", "PERSISTENT_2:2400:300"], "PERSISTENT_2 at 300"),
        ([*BASE, "--calibration", "/nonexistent/cal.json"], "--calibration /nonexistent/cal.json"),
        ([*BASE, "--preflight", "/nonexistent/pf.json"], "--preflight needs --calibration"),
        (["calibrate", *BASE, "--run", "/nonexistent"], "--preflight is required"),
        ([*BASE, "--no-lora", "--lora-r", "4"], "--no-lora: contradicts --lora-r"),
        ([*BASE, "--lora-r", "0"], "--lora-r 0"),
        ([*BASE, "--lora-targets", "q_proj,lm_head"], "--lora-targets q_proj,lm_head"),
        ([*BASE, "--lora-dropout", "1.5"], "--lora-dropout 1.5"),
        ([*BASE, "--lora", "--ac-mode", "selective"], "--ac-mode selective: not modelled for LoRA"),
    ],
)
def test_bad_input_is_one_line_naming_the_flag(
    argv: list[str], flag: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = [_bad_config(tmp_path) if a == "BADCONFIG" else a for a in argv]
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and flag in lines[0], captured.err


def test_module_entry_point_exit_codes() -> None:
    ok = subprocess.run(
        [sys.executable, "-m", "planner", *BASE, "--json"],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    assert ok.returncode == 0 and json.loads(ok.stdout)[0]["nodes"] == 1
    bad = subprocess.run(
        [sys.executable, "-m", "planner", *BASE[:-1], "0"],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "--nodes 0" in bad.stderr


def test_checkpoint_time_is_model_plus_optimizer_over_the_stack_storage(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """p5-16 checkpoints llama2-7b to its SCRATCH_2 file system (4800 GiB): parameters (fp32)
    plus AdamW's two fp32 moments, 12 bytes per parameter, written at SCRATCH_2's disk write
    throughput of 100 MB/s per TiB (FSx for Lustre performance tables)."""
    from infra.config import load_stack_file
    from planner.shapes import BUILTIN

    r = _json(capsys, "--stack", "p5-16")[0]
    storage = load_stack_file("p5-16").shared_storage
    assert storage.is_fsx and storage.deployment_type == "SCRATCH_2"
    n = BUILTIN["llama2-7b"].n_params
    assert r["checkpoint_bytes"] == 12 * n
    tib = storage.storage_capacity_gib / 1024
    assert r["checkpoint_s"] == pytest.approx(12 * n / (100e6 * tib))
    assert r["checkpoint_s"] > 120  # minutes, not the 1.7 s of a params-only 1 GB/s/node model
    assert r["epoch"]["checkpoint_s"] == r["checkpoint_s"]
    faster = _json(capsys, "--stack", "p5-16", "--storage", "PERSISTENT_2:2400:1000")[0]
    assert faster["checkpoint_s"] == pytest.approx(12 * n / (1000e6 * 2400 / 1024))
    local = _json(capsys, *BASE, "--nodes", "2")
    # no shared storage: each node writes its shards to its own gp3 root volume (125 MiB/s)
    assert local[0]["checkpoint_s"] == pytest.approx(12 * n / (2 * 125 * 2**20))


def test_lora_flags_plan_a_lora_on_a_frozen_base(capsys: pytest.CaptureFixture[str]) -> None:
    """--lora uses the training defaults (--lora_r 8 on q_proj,v_proj with dropout); the row's
    memory is planner.lora's for that spec, its checkpoint the adapters and their AdamW state;
    the frozen base has no gradient, AdamW state or weight-gradient FLOPs, so the step is
    shorter and the memory smaller than the full fine-tune's."""
    from planner.assumptions import DEFAULT
    from planner.catalog import lookup
    from planner.lora import LINEAR, LoraSpec, adapter_params, lora_memory
    from planner.memory import PRECISIONS, layout
    from planner.shapes import resolve
    from training.config import TrainConfig

    argv = ["--model", "llama3.1-70b", "--instance", "p5.48xlarge", "--nodes", "1", "--batch", "1"]
    full = _json(capsys, *argv)[0]
    lora = _json(capsys, *argv, "--lora")[0]
    t = TrainConfig()
    spec = LoraSpec(r=t.lora_r, targets=tuple(t.lora_target_modules.split(",")), dropout=True)
    shape = resolve("llama3.1-70b")
    n = adapter_params(shape, spec)
    assert full["lora"] is None
    assert lora["lora"] == {
        "r": 8,
        "targets": ["q_proj", "v_proj"],
        "dropout": True,
        "adapter_params": n,
    }
    mem = lora_memory(
        shape,
        layout("FULL_SHARD", 8, 8),
        PRECISIONS["mixed"],
        spec,
        batch=1,
        seq=4096,
        ac=1.0,
        a=DEFAULT,
    )
    assert lora["mem_per_gpu_bytes"] == mem.total
    assert lora["memory"]["grads"] == mem.grads and lora["memory"]["optimizer"] == mem.optimizer
    assert lora["checkpoint_bytes"] == n * (4 + 2 * 4)  # fp32 adapters + two fp32 moments
    assert (
        lora["mem_per_gpu_bytes"]
        < lookup("p5.48xlarge").gpu_memory_bytes
        < full["mem_per_gpu_bytes"]
    )
    assert lora["fits"] and not full["fits"]
    assert lora["compute_s"]["gemm"] < full["compute_s"]["gemm"]
    assert lora["compute_s"]["optimizer"] < full["compute_s"]["optimizer"]
    assert lora["step_time_s"] < full["step_time_s"]
    wide = _json(
        capsys, *argv, "--lora-r", "16", "--lora-targets", "all-linear", "--lora-dropout", "0"
    )[0]
    assert wide["lora"]["targets"] == list(LINEAR) and wide["lora"]["dropout"] is False
    assert wide["lora"]["adapter_params"] == adapter_params(
        shape, LoraSpec(r=16, targets=LINEAR, dropout=False)
    )
    assert main([*argv, "--lora-r", "16"]) == 0
    out = capsys.readouterr().out
    assert "LoRA r 16 on q_proj,v_proj (32.8 M trainable)" in out.splitlines()[0]
    assert "(adapters + AdamW state)" in out


def test_stack_lora_reads_the_jobs_peft_flags() -> None:
    """A stack job's --use_peft and --lora_* flags, read with the training CLI's parser; no
    --use_peft, no LoRA; a bad value is one line naming the stack and the job's args."""
    from planner.args import UsageError, _stack_lora

    assert _stack_lora("s", ("--ac_mode=full", "--dataset=custom")) == {}
    got = _stack_lora("s", ("--use_peft", "--lora_r=4", "--lora_target_modules=all-linear"))
    assert {k: v for k, v in got["lora"].items() if k != "flag"} == {
        "r": 4,
        "targets": "all-linear",
        "dropout": 0.05,
    }
    assert _stack_lora("s", ("--lora_r=4",)) == {}  # without --use_peft: ignored, as training does
    with pytest.raises(UsageError, match=r"^--stack s: the job's args: --lora_r"):
        _stack_lora("s", ("--use_peft", "--lora_r=0"))
