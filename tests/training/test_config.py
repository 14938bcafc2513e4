"""The training CLI (training/config.py).

If these fail, job commands written for llama-recipes' finetuning.py stop working with
`python -m training.finetune` (a flag form, a default or a boolean spelling differs), or bad input
reaches the training loop instead of stopping at once with one line naming the flag.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from training.config import (
    DATASETS,
    SHARDING_STRATEGIES,
    ConfigError,
    TrainConfig,
    field_docs,
    parse_args,
    to_argv,
    usage,
)

# llama-recipes' train_config / fsdp_config defaults for the fields that carry over (its
# model_name, output_dir and dist_checkpoint_root_folder defaults are "PATH/to/..." placeholders).
LLAMA_RECIPES_DEFAULTS = {
    "enable_fsdp": False,
    "run_validation": True,
    "batch_size_training": 4,
    "batching_strategy": "packing",
    "context_length": 4096,
    "gradient_accumulation_steps": 1,
    "gradient_clipping": False,
    "gradient_clipping_threshold": 1.0,
    "num_epochs": 3,
    "max_train_step": 0,
    "max_eval_step": 0,
    "lr": 1e-4,
    "weight_decay": 0.0,
    "gamma": 0.85,
    "seed": 42,
    "use_fp16": False,
    "mixed_precision": True,
    "val_batch_size": 1,
    "dataset": "samsum_dataset",
    "save_model": True,
    "dist_checkpoint_folder": "fine-tuned",
    "save_optimizer": False,
    "sharding_strategy": "FULL_SHARD",
    "hsdp": False,
    "sharding_group_size": 0,
    "replica_group_size": 0,
    "fsdp_activation_checkpointing": True,
    "fsdp_cpu_offload": False,
    "pure_bf16": False,
    "use_peft": False,
    "peft_method": "lora",
    # llama-recipes' lora_config (configs/peft.py): r, lora_alpha, lora_dropout, target_modules
    "lora_r": 8,
    "lora_alpha": 32,
    "lora_dropout": 0.05,
    "lora_target_modules": "q_proj,v_proj",
}


@pytest.fixture
def jsonl(tmp_path: Path) -> str:
    p = tmp_path / "data.jsonl"
    p.write_text('{"text": "hello"}\n')
    return str(p)


def test_defaults_match_llama_recipes() -> None:
    cfg = parse_args([])
    assert cfg == TrainConfig()
    got = {k: getattr(cfg, k) for k in LLAMA_RECIPES_DEFAULTS}
    assert got == LLAMA_RECIPES_DEFAULTS
    assert (cfg.model_name, cfg.resume, cfg.checkpoint_every, cfg.metrics_port) == (
        "tiny-llama",
        False,
        0,
        0,
    )


def test_value_forms() -> None:
    a = parse_args(
        ["--lr", "2e-5", "--num_epochs", "7", "--model_name", "meta-llama/Llama-2-7b-hf"]
    )
    b = parse_args(["--lr=2e-5", "--num_epochs=7", "--model_name=meta-llama/Llama-2-7b-hf"])
    c = parse_args(["--lr=2e-5", "--num-epochs", "7", "--model-name=meta-llama/Llama-2-7b-hf"])
    assert a == b == c
    assert (a.lr, a.num_epochs, a.model_name) == (2e-5, 7, "meta-llama/Llama-2-7b-hf")
    assert isinstance(a.lr, float) and isinstance(a.num_epochs, int)
    # a value containing "=" keeps everything after the first one
    assert parse_args(["--output_dir=runs/a=b"]).output_dir == "runs/a=b"


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["--enable_fsdp"], True),
        (["--enable_fsdp=False"], False),
        (["--enable_fsdp=false"], False),
        (["--enable_fsdp", "False"], False),
        (["--enable_fsdp", "True"], True),
        (["--enable_fsdp=true"], True),
        (["--enable_fsdp=1"], True),
        (["--enable_fsdp=0"], False),
        (["--enable_fsdp=yes"], True),
        (["--enable_fsdp", "no"], False),
        (["--enable-fsdp"], True),
        (["--noenable_fsdp"], False),
    ],
)
def test_bool_forms(argv: list[str], expected: bool) -> None:
    assert parse_args(argv).enable_fsdp is expected


def test_bare_bool_does_not_eat_the_next_flag_or_a_non_bool_word() -> None:
    cfg = parse_args(["--enable_fsdp", "--run_validation", "False", "--lr", "1e-3"])
    assert (cfg.enable_fsdp, cfg.run_validation, cfg.lr) == (True, False, 1e-3)
    with pytest.raises(ConfigError, match=r"^unexpected argument 'maybe'"):
        parse_args(["--enable_fsdp", "maybe"])


def test_default_true_bools_can_be_turned_off() -> None:
    cfg = parse_args(
        [
            "--run_validation=False",
            "--mixed_precision",
            "false",
            "--fsdp_activation_checkpointing=0",
            "--save_model=no",
            "--progress=False",
        ]
    )
    assert not (
        cfg.run_validation
        or cfg.mixed_precision
        or cfg.fsdp_activation_checkpointing
        or cfg.save_model
        or cfg.progress
    )


def test_llama_recipes_job_command_parses() -> None:
    command = (
        "--enable_fsdp --model_name meta-llama/Llama-2-7b-hf --num_epochs 1 "
        "--batch_size_training 2 --lr 3e-4 --context_length 2048 --gradient_accumulation_steps 4 "
        "--batching_strategy padding --dataset samsum_dataset --seed 7 --output_dir out "
        "--max_train_step 100 --run_validation False --save_model "
        "--sharding_strategy SHARD_GRAD_OP --mixed_precision False --pure_bf16 "
        "--fsdp_activation_checkpointing True --fsdp_cpu_offload --dist_checkpoint_root_folder ck "
        "--dist_checkpoint_folder ft --resume --checkpoint_every 50"
    )
    argv = command.split(" ")
    cfg = parse_args(argv)
    assert cfg.enable_fsdp and cfg.pure_bf16 and cfg.fsdp_cpu_offload and cfg.resume
    assert (cfg.batch_size_training, cfg.gradient_accumulation_steps, cfg.context_length) == (
        2,
        4,
        2048,
    )
    assert (cfg.sharding_strategy, cfg.batching_strategy, cfg.checkpoint_every) == (
        "SHARD_GRAD_OP",
        "padding",
        50,
    )
    assert not cfg.run_validation and not cfg.mixed_precision


def test_hsdp_selects_hybrid_shard() -> None:
    cfg = parse_args(["--enable_fsdp", "--hsdp", "--sharding_group_size", "2"])
    assert (cfg.sharding_strategy, cfg.hsdp, cfg.sharding_group_size) == ("HYBRID_SHARD", True, 2)
    cfg = parse_args(["--hsdp", "--sharding_strategy=HYBRID_SHARD", "--replica_group_size=2"])
    assert cfg.sharding_strategy == "HYBRID_SHARD"
    # HYBRID_SHARD without --hsdp is allowed (group sizes then derived by parallelize)
    assert parse_args(["--sharding_strategy", "HYBRID_SHARD"]).hsdp is False


def test_data_path_and_negative_numbers(jsonl: str) -> None:
    cfg = parse_args(["--dataset", "custom", "--data_path", jsonl, "--weight_decay", "-0.0"])
    assert (cfg.dataset, cfg.data_path) == ("custom", jsonl)
    with pytest.raises(ConfigError, match=r"^--seed: must be >= 0, got -1$"):
        parse_args(["--seed", "-1"])


BAD = [
    (["--batch_size_training", "0"], "--batch_size_training: must be >= 1, got 0"),
    (["--batch_size_training=-2"], "--batch_size_training: must be >= 1, got -2"),
    (["--val_batch_size", "0"], "--val_batch_size: must be >= 1, got 0"),
    (["--context_length", "1"], "--context_length: must be >= 2, got 1"),
    (["--gradient_accumulation_steps=0"], "--gradient_accumulation_steps: must be >= 1, got 0"),
    (["--num_epochs", "0"], "--num_epochs: must be >= 1, got 0"),
    (["--lr", "0"], "--lr: must be a finite number > 0, got 0.0"),
    (["--lr", "-1e-4"], "--lr: must be a finite number > 0, got -0.0001"),
    (["--lr", "inf"], "--lr: expects a finite number, got 'inf'"),
    (["--lr", "fast"], "--lr: expects a number, got 'fast'"),
    (["--num_epochs", "1.5"], "--num_epochs: expects an integer, got '1.5'"),
    (["--enable_fsdp=maybe"], "--enable_fsdp: expects true/false (or 1/0, yes/no), got 'maybe'"),
    (["--lr"], "--lr: expects a value (a number)"),
    (["--lr", "--seed", "3"], "--lr: expects a value (a number)"),
    (
        ["--batching_strategy", "packed"],
        "--batching_strategy: must be one of packing, padding, got 'packed' (did you mean packing?)",
    ),
    (
        ["--sharding_strategy", "FULL"],
        "--sharding_strategy: must be one of FULL_SHARD, SHARD_GRAD_OP, HYBRID_SHARD, NO_SHARD, "
        "got 'FULL' (did you mean FULL_SHARD?)",
    ),
    (
        ["--dataset", "samsum"],
        "--dataset: must be one of samsum_dataset, samsum_sample, alpaca_dataset, custom, "
        "chat_sample, hf_dataset, preference_sample, got 'samsum' (did you mean samsum_dataset or "
        "samsum_sample?)",
    ),
    (["--dataset", "custom"], "--data_path: required with --dataset custom"),
    (["--dataset", "alpaca_dataset"], "--data_path: required with --dataset alpaca_dataset"),
    (
        ["--dataset", "custom", "--data_path", "/nonexistent/x.jsonl"],
        "--data_path: no such file: /nonexistent/x.jsonl",
    ),
    (
        ["--data_path", "x.jsonl"],
        "--data_path: only used with --dataset custom or alpaca_dataset, not samsum_dataset",
    ),
    (
        ["--hsdp", "--sharding_strategy", "FULL_SHARD"],
        "--hsdp: requires --sharding_strategy HYBRID_SHARD, got FULL_SHARD",
    ),
    (["--sharding_group_size", "2"], "--sharding_group_size: only used with --hsdp"),
    (["--hsdp", "--replica_group_size=-1"], "--replica_group_size: must be >= 0, got -1"),
    (["--pure_bf16", "--use_fp16"], "--pure_bf16: cannot be combined with --use_fp16"),
    (
        ["--use_fp16"],
        "--use_fp16: fp16 training needs loss scaling, which this trainer does not do with "
        "FSDP2; use bf16 (the default --mixed_precision) or --mixed_precision=False",
    ),
    (["--checkpoint_every", "-5"], "--checkpoint_every: must be >= 0, got -5"),
    (["--checkpoint_every_s", "-1"], "--checkpoint_every_s: must be >= 0, got -1.0"),
    (
        ["--collective_timeout_s", "0"],
        "--collective_timeout_s: must be a finite number > 0, got 0.0",
    ),
    (["--metrics_port", "70000"], "--metrics_port: must be in 0..65535 (0 = off), got 70000"),
    (["--log_every", "0"], "--log_every: must be >= 1, got 0"),
    (["--gamma", "1.5"], "--gamma: must be in (0, 1], got 1.5"),
    (["--weight_decay", "-0.1"], "--weight_decay: must be a finite number >= 0, got -0.1"),
    (
        ["--gradient_clipping_threshold", "0"],
        "--gradient_clipping_threshold: must be a finite number > 0, got 0.0",
    ),
    (["--max_train_step", "-1"], "--max_train_step: must be >= 0, got -1"),
    (["--max_train_samples", "-3"], "--max_train_samples: must be >= 0, got -3"),
    (["--model_name", ""], "--model_name: must not be empty"),
    (["--output_dir="], "--output_dir: must not be empty"),
    (
        ["--use_peft", "--peft_method", "prefix"],
        "--peft_method: must be one of lora (llama-recipes' llama_adapter and prefix are not "
        "supported), got 'prefix'",
    ),
    (
        ["--use_peft", "--peft_method", "LoRA"],
        "--peft_method: must be one of lora (llama-recipes' llama_adapter and prefix are not "
        "supported), got 'LoRA' (did you mean lora?)",
    ),
    (["--merge_adapters"], "--merge_adapters: only used with --use_peft"),
    (["--use_peft", "--lora_r", "0"], "--lora_r: must be >= 1, got 0"),
    (["--use_peft", "--lora_alpha", "0"], "--lora_alpha: must be >= 1, got 0"),
    (["--use_peft", "--lora_dropout", "1"], "--lora_dropout: must be in [0, 1), got 1.0"),
    (
        ["--use_peft", "--lora_target_modules", "q_proj,,v_proj"],
        "--lora_target_modules: expects comma-separated names, got 'q_proj,,v_proj'",
    ),
    (
        ["--use_peft", "--lora_target_modules", "all-linear,q_proj"],
        "--lora_target_modules: all-linear stands alone, not in a list",
    ),
    (
        ["--use_peft", "--merge_adapters", "--save_model=False"],
        "--merge_adapters: exports merged weights with --save_model; it is off",
    ),
    (
        ["--export_dtype", "bfloat16"],
        "--export_dtype: must be one of auto, fp32, bf16, fp16, got 'bfloat16' (did you mean bf16?)",
    ),
    (
        ["--export_max_shard_gb", "0"],
        "--export_max_shard_gb: must be a finite number > 0, got 0.0",
    ),
    (["--lr", "1e-4", "--lr", "2e-4"], "--lr: given more than once"),
    (["--lr=1e-4", "--lr", "2e-4"], "--lr: given more than once"),
    (["train.py"], "unexpected argument 'train.py' (flags look like --name value)"),
    (["-lr", "1"], "unexpected argument '-lr' (flags look like --name value)"),
]


@pytest.mark.parametrize(("argv", "message"), BAD, ids=[" ".join(a) for a, _ in BAD])
def test_bad_input_one_line_naming_the_flag(argv: list[str], message: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_args(argv)
    assert str(err.value) == message
    assert "\n" not in str(err.value)


@pytest.mark.parametrize(
    ("flag", "message"),
    [
        ("--batch_size", "unknown flag --batch_size (did you mean --batch_size_training?)"),
        (
            "--bach_size_training",
            "unknown flag --bach_size_training (did you mean --batch_size_training?)",
        ),
        ("--num_epoch", "unknown flag --num_epoch (did you mean --num_epochs?)"),
        ("--enable-fdsp", "unknown flag --enable_fdsp (did you mean --enable_fsdp?)"),
        ("--xyzzy", "unknown flag --xyzzy"),
        # no argparse-style abbreviations
        (
            "--grad",
            "unknown flag --grad (did you mean --gradient_accumulation_steps or "
            "--gradient_clipping or --gradient_clipping_threshold?)",
        ),
        ("--s", "unknown flag --s"),
        ("--context", "unknown flag --context (did you mean --context_length?)"),
    ],
)
def test_unknown_flag_suggestion(flag: str, message: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_args([flag, "1"])
    assert str(err.value) == message


def test_construction_validates_too() -> None:
    with pytest.raises(ConfigError, match=r"^--batch_size_training: must be >= 1, got 0$"):
        TrainConfig(batch_size_training=0)
    with pytest.raises(ConfigError, match=r"^--hsdp: requires --sharding_strategy HYBRID_SHARD"):
        TrainConfig(hsdp=True)
    with pytest.raises(ConfigError, match=r"^--batch_size_training: expects an integer, got '4'$"):
        TrainConfig(batch_size_training="4")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"^--enable_fsdp: expects true/false, got 1$"):
        TrainConfig(enable_fsdp=1)  # type: ignore[arg-type]
    assert TrainConfig(lr=1).lr == 1.0 and isinstance(TrainConfig(lr=1).lr, float)
    with pytest.raises(dataclasses.FrozenInstanceError):
        TrainConfig().lr = 1.0  # type: ignore[misc]
    with pytest.raises(ConfigError, match=r"^--sharding_strategy: must be one of"):
        dataclasses.replace(TrainConfig(), sharding_strategy="ZERO3")


def test_to_argv_round_trip(jsonl: str) -> None:
    cfg = parse_args(
        [
            *(
                "--enable_fsdp",
                "--hsdp",
                "--sharding_group_size=2",
                "--lr=3e-5",
                "--dataset=custom",
            ),
            *(f"--data_path={jsonl}", "--run_validation=False", "--output_dir=runs/x y"),
        ]
    )
    argv = to_argv(cfg)
    assert parse_args(argv) == cfg
    assert "--lr=3e-05" in argv and "--run_validation=False" in argv
    assert to_argv(TrainConfig()) == []
    full = to_argv(TrainConfig(), all_fields=True)
    assert len(full) == len(dataclasses.fields(TrainConfig))
    assert parse_args(full) == TrainConfig()


def test_every_field_documented_and_in_help(capsys: pytest.CaptureFixture[str]) -> None:
    docs = field_docs()
    names = [f.name for f in dataclasses.fields(TrainConfig)]
    assert set(docs) == set(names)
    assert all(docs[n] and "\n" not in docs[n] for n in names)
    with pytest.raises(SystemExit) as exit_:
        parse_args(["--lr", "1", "--help"])
    assert exit_.value.code == 0
    out = capsys.readouterr().out
    assert out.strip() == usage()
    assert all(f"--{n} (default" in out for n in names)


def test_choices_constants_match_the_docs() -> None:
    assert SHARDING_STRATEGIES == ("FULL_SHARD", "SHARD_GRAD_OP", "HYBRID_SHARD", "NO_SHARD")
    assert set(DATASETS) == {
        "samsum_dataset",
        "samsum_sample",
        "alpaca_dataset",
        "custom",
        "chat_sample",
        "hf_dataset",
        "preference_sample",
    }


def test_no_flag_is_swallowed_by_torchrun() -> None:
    """torchrun prefix-matches its own options (--start -> --start-method); none of ours may be
    a prefix of one of torchrun's, in underscore or hyphen form."""
    from torch.distributed.run import get_args_parser

    theirs = [o for a in get_args_parser()._actions for o in a.option_strings if o.startswith("--")]
    assert len(theirs) > 20
    for f in dataclasses.fields(TrainConfig):
        for ours in (f"--{f.name}", f"--{f.name.replace('_', '-')}"):
            clashes = [o for o in theirs if o.startswith(ours)]
            assert not clashes, f"{ours} is a prefix of torchrun's {clashes}"
