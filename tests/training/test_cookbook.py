"""llama-cookbook's spellings of the training flags (training/cookbook.py), parsed.

If these fail, a llama-cookbook job command (`--fsdp_config.pure_bf16`, `--lora_config.r 16`,
`--checkpoint_type StateDictType.FULL_STATE_DICT`, `--target_modules [q_proj,k_proj]`) stops
parsing or means something else than with our own names, a refused flag stops without saying
why and what to use, or a bad value reaches the training loop. The flags' effect on a run is
tested in test_cookbook_runs.py; the table against the pinned wheel in test_cookbook_wheel.py.
Also: llama-cookbook's quantization_config fields (`--quant_type nf4`) must get the QLoRA reason
`--quantization` gets, not a "did you mean" of another flag, and `--dataset custom_dataset`
(llama-cookbook's name) must be taken as `custom`, not corrected to `samsum_dataset`.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from training import cookbook
from training.config import ConfigError, TrainConfig, parse_args, to_argv
from training.data import SAMSUM_SAMPLE as SAMPLE
from training.finetune import main


@pytest.mark.parametrize(
    ("cookbook_argv", "our_argv"),
    [
        (["--fsdp_config.pure_bf16"], ["--pure_bf16"]),
        (["--fsdp_config.pure_bf16=False"], []),
        (
            ["--train_config.enable_fsdp", "--train_config.lr", "3e-4"],
            ["--enable_fsdp", "--lr=3e-4"],
        ),
        (["--use_peft", "--lora_config.r=16"], ["--use_peft", "--lora_r=16"]),
        (
            ["--use_peft", "--r", "16", "--lora_config.lora_alpha", "8"],
            ["--use_peft", "--lora_r=16", "--lora_alpha=8"],
        ),
        (
            ["--use_peft", "--lora_config.target_modules=[q_proj,k_proj]"],
            ["--use_peft", "--lora_target_modules=q_proj,k_proj"],
        ),
        (
            ["--use_peft", "--target_modules", "['q_proj', 'o_proj']"],
            ["--use_peft", "--lora_target_modules=q_proj,o_proj"],
        ),
        (
            ["--fsdp_config.checkpoint_type=StateDictType.FULL_STATE_DICT"],
            ["--checkpoint_type=FULL_STATE_DICT"],
        ),
        (
            ["--sharding_strategy", "ShardingStrategy.SHARD_GRAD_OP"],
            ["--sharding_strategy=SHARD_GRAD_OP"],
        ),
        (["--fsdp_config.optimizer", "adamw"], []),
        (
            ["--use_wandb", "--wandb_config.project=p", "--entity", "team"],
            ["--use_wandb", "--wandb_project=p", "--wandb_entity=team"],
        ),
        (["--quantization", "False", "--lora_config.bias=none", "--inference_mode", "false"], []),
        (["--task_type=CAUSAL_LM", "--lora_config.task_type", "CAUSAL_LM"], []),
        (["--low_cpu_fsdp", "--use_fast_kernels"], ["--low_cpu_fsdp", "--use_fast_kernels"]),
        # llama-cookbook's name of the JSONL-or-script dataset is ours for a JSONL file
        (
            ["--dataset", "custom_dataset", f"--data_path={SAMPLE}"],
            ["--dataset=custom", f"--data_path={SAMPLE}"],
        ),
        # quantization_config at its defaults (what finetuning.py reads only with quantization)
        (["--quant_type=fp4", "--quantization_config.use_double_quant=False"], []),
        (["--compute_dtype", "torch.bfloat16", "--quant_storage=bfloat16"], []),
    ],
)
def test_cookbook_spelling_means_ours(cookbook_argv: list[str], our_argv: list[str]) -> None:
    cfg = parse_args(cookbook_argv)
    assert cfg == parse_args(our_argv)
    assert parse_args(to_argv(cfg)) == cfg  # round trip through our own names


@pytest.mark.parametrize(
    ("argv", "start", "reason"),
    [
        (["--quantization"], "--quantization true: ", "use --use_peft"),
        (["--quantization=4bit"], "--quantization 4bit: ", "QLoRA"),
        (["--quant_type", "nf4"], "--quant_type nf4: ", "QLoRA"),
        (["--use_double_quant"], "--use_double_quant true: ", "QLoRA"),
        (
            ["--quantization_config.quant_type=nf4"],
            "--quantization_config.quant_type nf4: ",
            "QLoRA",
        ),
        (["--compute_dtype=torch.float16"], "--compute_dtype torch.float16: ", "QLoRA"),
        (["--lora_config.bias", "all"], "--lora_config.bias all: ", "bias='none'"),
        (["--inference_mode"], "--inference_mode true: ", "nothing would train"),
        (
            ["--llama_adapter_config.adapter_len=10"],
            "--llama_adapter_config.adapter_len: ",
            "use --peft_method lora",
        ),
        (["--num_virtual_tokens", "30"], "--num_virtual_tokens: ", "use --peft_method lora"),
        (["--freeze_LLM_only"], "--freeze_LLM_only: ", "use --freeze_layers"),
        (["--use_fp16", "--fsdp_config.mixed_precision"], "--use_fp16: ", "use bf16"),
        (["--optimizer", "anyprecision"], "--optimizer: ", "add --pure_bf16"),
        (["--optimizer", "sgd"], "--optimizer: ", "AdamW, anyprecision"),
        (["--checkpoint_type", "LOCAL_STATE_DICT"], "--checkpoint_type: ", "FULL_STATE_DICT"),
        (["--use_peft", "--freeze_layers"], "--freeze_layers: ", "frozen already"),
        (["--freeze_layers", "--num_freeze_layers=0"], "--num_freeze_layers: ", ">= 1"),
        (["--num_workers_dataloader=-1"], "--num_workers_dataloader: ", ">= 0"),
        (["--fsdp_config.pure_bf1"], "--fsdp_config.pure_bf1: ", "did you mean pure_bf16?"),
        (
            ["--samsum_dataset.trust_remote_code=True"],
            "--samsum_dataset.trust_remote_code: ",
            "--dataset",
        ),
        (["--custom_dataset.file", "ds.py"], "--custom_dataset.file: ", "custom with --data_path"),
        (["--train_split", "train"], "--train_split: ", "--hf_split"),
        (["--train_config.lr", "1", "--lr", "2"], "--lr: ", "given more than once"),
    ],
)
def test_refusals_are_one_line_with_the_reason(argv: list[str], start: str, reason: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_args(argv)
    msg = str(err.value)
    assert "\n" not in msg and msg.startswith(start) and reason in msg, msg


def test_empty_tokenizer_name_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"^--tokenizer_name: must not be empty"):
        TrainConfig(tokenizer_name=" ")


def test_unknown_flag_suggests_a_cookbook_spelling() -> None:
    with pytest.raises(
        ConfigError,
        match=r"^unknown flag --fsdp_confg\.pure_bf16 \(did you mean --fsdp_config\.pure_bf16\?\)$",
    ):
        parse_args(["--fsdp_confg.pure_bf16"])


def _adapter_folder(path: Path, **config: object) -> Path:
    path.mkdir()
    saved = {"peft_type": "LORA", "r": 8, "lora_alpha": 32, "target_modules": ["v_proj", "q_proj"]}
    (path / "adapter_config.json").write_text(json.dumps({**saved, **config}))
    return path


def test_from_peft_checkpoint_must_match_the_folders_settings(tmp_path: Path) -> None:
    """llama-cookbook trains with the folder's own LoRA settings; here the flags must say the
    same, or the run stops naming the flag to pass."""
    ok = _adapter_folder(tmp_path / "ok")
    cfg = parse_args(["--use_peft", f"--from_peft_checkpoint={ok}"])
    assert cfg.from_peft_checkpoint == str(ok)
    other = _adapter_folder(tmp_path / "r16", r=16)
    with pytest.raises(
        ConfigError, match=r"^--from_peft_checkpoint: .* r=16; pass --lora_r to match$"
    ):
        parse_args(["--use_peft", f"--from_peft_checkpoint={other}"])
    with pytest.raises(ConfigError, match=r"no adapter_config\.json"):
        parse_args(["--use_peft", f"--from_peft_checkpoint={tmp_path}"])


def test_one_gpu_refuses_a_larger_world(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """--one_gpu under a 2-process torchrun stops before the process group, one line, exit 2."""
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    assert main(["--one_gpu", "--enable_fsdp"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (
        "eks-fsdp train: error: --one_gpu: runs a single process, but WORLD_SIZE is 2; "
        "drop --one_gpu or start one process"
    )


def test_notes_only_for_the_flags_given() -> None:
    assert cookbook.notes(TrainConfig()) == []
    lines = cookbook.notes(parse_args(["--low_cpu_fsdp", "--num_workers_dataloader=4"]))
    # --num_workers_dataloader starts DataLoader workers (carries its meaning): no line for it
    assert [line.split(":")[0] for line in lines] == ["--low_cpu_fsdp"]


def test_every_table_entry_names_a_field_or_a_reason() -> None:
    """A Flag either carries a TrainConfig field, or says why (fixed or refused)."""
    fields = set(TrainConfig.__dataclass_fields__)
    for config, flags in cookbook.TABLE.items():
        for name, flag in flags.items():
            assert (flag.ours in fields) != bool(flag.refused), (config, name)
            assert not flag.fixed or flag.refused, (config, name)


def test_migration_page_lists_every_flag() -> None:
    """docs/migrating.md has a row for every field of every llama-cookbook config."""
    page = (Path(__file__).resolve().parents[2] / "docs" / "migrating.md").read_text()
    for config, flags in cookbook.TABLE.items():
        section = page.split(f"**`{config}`**", 1)[1].split("\n**`", 1)[0]
        for name in flags:
            assert f"| `{name}` |" in section, (config, name)
