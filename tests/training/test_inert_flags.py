"""Flags that only matter with their switch on are ignored with one line when it is off.

If this fails, a script that always passes `--profiler_dir`, `--wandb_config.project`, the LoRA
fields, `--from_peft_checkpoint`, `--flop_counter_start` or `--num_freeze_layers` and turns the
switch on or off (`--use_peft False`) stops with an error here, where llama-cookbook 0.0.5.post1
runs it and ignores them: its finetuning.py reads the wandb_config only in `setup_wandb`, under
`if train_config.use_wandb`; the lora_config (`generate_peft_config`) and from_peft_checkpoint
only under `if train_config.use_peft`; the layer count only under `freeze_layers`; and
utils/train_utils.py `profile` reads profiler_dir only when use_profiler is on and
flop_counter_start only when flop_counter is. Or the flag is ignored without a word, or said
more than once, or a flag that changes what a run does (`--merge_adapters` without LoRA, LoRA
with `--freeze_layers`) is no longer refused.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from training import cookbook
from training.config import ConfigError, parse_args

OFF = ": ignored, as llama-cookbook ignores it"
CASES = [
    (["--profiler_dir", "/tmp/p"], "--profiler_dir: only read with --use_profiler, which is off"),
    (
        ["--wandb_config.project", "p"],
        "--wandb_project: only read with --use_wandb (or --tracker wandb), which is off",
    ),
    (
        ["--project", "p", "--entity=me", "--use_wandb=False"],
        "--wandb_project, --wandb_entity: only read with --use_wandb (or --tracker wandb), which is off",
    ),
    (
        ["--lora_config.r", "16", "--lora_dropout=0", "--target_modules=[q_proj,k_proj]"],
        "--lora_r, --lora_dropout, --lora_target_modules: only read with --use_peft, which is off",
    ),
    (
        ["--use_peft", "False", "--peft_method", "lora2"],
        "--peft_method: only read with --use_peft, which is off",
    ),
    (
        ["--from_peft_checkpoint", "/no/such/folder"],
        "--from_peft_checkpoint: only read with --use_peft, which is off",
    ),
    (
        ["--flop_counter_start=5"],
        "--flop_counter_start: only read with --flop_counter, which is off",
    ),
    (
        ["--num_freeze_layers", "2"],
        "--num_freeze_layers: only read with --freeze_layers, which is off",
    ),
]


@pytest.mark.parametrize(("argv", "line"), CASES)
def test_an_inert_flag_is_said_once_and_the_run_goes_on(argv: list[str], line: str) -> None:
    said = [n for n in cookbook.notes(parse_args(argv)) if "only read with" in n]
    assert said == [line + OFF]


def test_with_the_switch_on_nothing_is_said() -> None:
    for argv in (
        ["--use_profiler", "--profiler_dir", "/tmp/p"],
        ["--use_wandb", "--wandb_config.project", "p"],
        ["--tracker", "wandb", "--wandb_project", "p"],
        ["--use_peft", "--lora_r", "16"],
        ["--flop_counter", "--flop_counter_start=5"],
        ["--freeze_layers", "--num_freeze_layers", "2"],
    ):
        assert not [n for n in cookbook.notes(parse_args(argv)) if "only read" in n], argv


@pytest.mark.parametrize(
    ("argv", "start"),
    [
        (["--merge_adapters"], "--merge_adapters: only used with --use_peft"),
        (["--use_peft", "--freeze_layers"], "--freeze_layers: not used with --use_peft"),
        (["--use_peft", "--lora_r", "0"], "--lora_r: must be >= 1"),
        (["--use_peft", "--from_peft_checkpoint", "/no/such"], "--from_peft_checkpoint: /no/such"),
        (["--use_wandb", "--tracker", "mlflow"], "--use_wandb: logs to W&B"),
    ],
)
def test_what_changes_a_run_is_still_refused(argv: list[str], start: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_args(argv)
    assert str(err.value).startswith(start), str(err.value)


def test_a_run_prints_each_line_once_and_ignores_the_flags(tmp_path: Path) -> None:
    """One process, two steps, with every inert flag given: exit 0, one line per switch in the
    log, no profiler trace, no adapters (every parameter trains)."""
    from tests.training.helpers import TINY, finetune_cmd, merge, run, run_dirs

    argv = [
        *merge(TINY, ["--max_train_step=2", "--batch_size_training=2"], run_dirs(tmp_path, "x")),
        f"--profiler_dir={tmp_path / 'prof'}",
        "--wandb_config.project=p",
        "--lora_config.r=16",
        "--use_peft=False",
        "--from_peft_checkpoint=/no/such/folder",
    ]
    proc = run(finetune_cmd(0, argv))
    assert proc.returncode == 0, proc.stderr[-3000:]
    said = [ln for ln in proc.stdout.splitlines() if "only read with" in ln]
    assert [ln.split(": only read with ")[1].split(",")[0] for ln in said] == [
        "--use_peft",
        "--use_wandb (or --tracker wandb)",
        "--use_profiler",
    ], said
    assert not (tmp_path / "prof").exists()
    summary = json.loads((tmp_path / "x" / "out" / "summary.json").read_text())
    assert summary["trainable_params"] == summary["params"] > 0
