"""llama-cookbook's command line, flag by flag: what each of its flags means here.

The seed's jobs run `python -m llama_cookbook.finetuning` (formerly `llama_recipes.finetuning`),
whose flags are the fields of its config dataclasses, set by `update_config`
(llama_cookbook/utils/config_utils.py at 0.0.5.post1): a flag names a field of `train_config`,
`fsdp_config`, the peft config in use (`lora_config`, `llama_adapter_config`, `prefix_config`)
or `wandb_config`, either bare (`--pure_bf16`, `--r`, `--project`) or dotted with its config's
class name (`--fsdp_config.pure_bf16`, `--lora_config.r`, `--wandb_config.project`).

`TABLE` holds every such field of the pinned release (`COOKBOOK_VERSION`; the test
tests/training/test_cookbook_wheel.py reads the dataclasses from that wheel and fails on a field
the table does not know). Each entry is one of:

- a `training.config.TrainConfig` field that carries its meaning (`ours`), with the value
  spelled as llama-cookbook spells it (`StateDictType.FULL_STATE_DICT`, `[q_proj,v_proj]`:
  `value_form`);
- a flag whose only value here is llama-cookbook's default (`fixed`): that value is accepted, any
  other is refused with the reason (`--lora_config.bias all`);
- a refusal (`refused`): one line with the reason and what to use instead.

Flags that name what this package always does (`--low_cpu_fsdp`, `--use_fast_kernels`) are
accepted and said once in the log (`notes`). Nothing here imports torch: the parser and the
planner read it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = [
    "CHECKPOINT_TYPES",
    "CONFIGS",
    "COOKBOOK_VERSION",
    "DATASET_CONFIGS",
    "OPTIMIZERS",
    "TABLE",
    "CookbookError",
    "Flag",
    "check",
    "check_world",
    "notes",
    "resolve",
    "spellings",
    "value_form",
]

COOKBOOK_VERSION = "0.0.5.post1"
"""The llama-cookbook release whose flags `TABLE` covers (PyPI `llama-cookbook`)."""
CONFIGS = (
    "train_config",
    "fsdp_config",
    "lora_config",
    "llama_adapter_config",
    "prefix_config",
    "wandb_config",
    "quantization_config",
)
"""llama-cookbook's config classes whose fields are flags (llama_cookbook/configs/)."""
CHECKPOINT_TYPES = ("SHARDED_STATE_DICT", "FULL_STATE_DICT")
"""fsdp_config.checkpoint_type values (utils/config_utils.py check_fsdp_config)."""
OPTIMIZERS = ("AdamW", "anyprecision")
"""fsdp_config.optimizer values llama-cookbook's finetuning.py tells apart."""


class CookbookError(ValueError):
    """A llama-cookbook flag refused here; str(err) is one line naming the flag, ``flag``."""

    def __init__(self, message: str, *, flag: str | None = None) -> None:
        super().__init__(message)
        self.flag = flag


@dataclass(frozen=True)
class Flag:
    """What one llama-cookbook field is here."""

    ours: str | None = None
    """The TrainConfig field that carries its meaning; None for `fixed` and `refused` flags."""
    fixed: tuple[str, ...] = ()
    """Accepted spellings of the only value it takes here (llama-cookbook's default)."""
    kind: type = str
    """bool or str: how the parser reads a `fixed` flag's value (a bare --flag is True)."""
    refused: str = ""
    """Why it is refused and what to use instead (for `fixed`: why other values are)."""


_ADAPTER_REFUSED = (
    "llama-cookbook's llama_adapter (peft AdaptionPrompt) is not supported here (llama-cookbook "
    "itself refuses it with FSDP, utils/config_utils.py generate_peft_config); "
    "use --peft_method lora"
)
_PREFIX_REFUSED = (
    "prefix tuning is not supported (llama-cookbook refuses --peft_method prefix too, "
    "utils/config_utils.py generate_peft_config); use --peft_method lora"
)
_FALSY = ("", "none", "false", "0", "no", "off")
_QLORA = (
    "4-bit/8-bit quantized base weights (bitsandbytes, QLoRA) are not supported yet; "
    "use --use_peft (LoRA on a bf16 base)"
)
_BF16 = ("torch.bfloat16", "bfloat16")

TABLE: dict[str, dict[str, Flag]] = {
    # llama_cookbook/configs/training.py at 0.0.5.post1 (`dataset` is a class attribute, not a
    # dataclass field; update_config sets it all the same, as it checks hasattr)
    "train_config": {
        name: Flag(ours=name)
        for name in (
            "model_name",
            "tokenizer_name",
            "enable_fsdp",
            "low_cpu_fsdp",
            "run_validation",
            "batch_size_training",
            "batching_strategy",
            "context_length",
            "gradient_accumulation_steps",
            "gradient_clipping",
            "gradient_clipping_threshold",
            "num_epochs",
            "max_train_step",
            "max_eval_step",
            "num_workers_dataloader",
            "lr",
            "weight_decay",
            "gamma",
            "seed",
            "use_fp16",
            "mixed_precision",
            "val_batch_size",
            "dataset",
            "peft_method",
            "use_peft",
            "from_peft_checkpoint",
            "output_dir",
            "freeze_layers",
            "num_freeze_layers",
            "freeze_LLM_only",
            "one_gpu",
            "save_model",
            "dist_checkpoint_root_folder",
            "dist_checkpoint_folder",
            "save_optimizer",
            "use_fast_kernels",
            "use_wandb",
            "save_metrics",
            "flop_counter",
            "flop_counter_start",
            "use_profiler",
            "profiler_dir",
        )
    }
    | {"quantization": Flag(fixed=_FALSY, refused=_QLORA)},
    # llama_cookbook/configs/fsdp.py
    "fsdp_config": {
        name: Flag(ours=name)
        for name in (
            "mixed_precision",
            "use_fp16",
            "sharding_strategy",
            "hsdp",
            "sharding_group_size",
            "replica_group_size",
            "checkpoint_type",
            "fsdp_activation_checkpointing",
            "fsdp_cpu_offload",
            "pure_bf16",
            "optimizer",
        )
    },
    # llama_cookbook/configs/peft.py (`bias` is a class attribute, as `dataset` above)
    "lora_config": {
        "r": Flag(ours="lora_r"),
        "lora_alpha": Flag(ours="lora_alpha"),
        "target_modules": Flag(ours="lora_target_modules"),
        "bias": Flag(
            fixed=("none",),
            refused="LoRA here trains no bias (peft's bias='none', llama-cookbook's default)",
        ),
        "task_type": Flag(
            fixed=("CAUSAL_LM",), refused="this trainer fine-tunes causal LMs only (CAUSAL_LM)"
        ),
        "lora_dropout": Flag(ours="lora_dropout"),
        "inference_mode": Flag(
            fixed=("false",),
            kind=bool,
            refused="inference_mode=True makes the adapters untrainable: nothing would train",
        ),
    },
    "llama_adapter_config": {
        name: Flag(refused=_ADAPTER_REFUSED) for name in ("adapter_len", "adapter_layers")
    }
    | {"task_type": Flag(fixed=("CAUSAL_LM",), refused=_ADAPTER_REFUSED)},
    "prefix_config": {"num_virtual_tokens": Flag(refused=_PREFIX_REFUSED)}
    | {"task_type": Flag(fixed=("CAUSAL_LM",), refused=_PREFIX_REFUSED)},
    # llama_cookbook/configs/wandb.py: wandb.init's keyword arguments (finetuning.py setup_wandb)
    "wandb_config": {
        name: Flag(ours=f"wandb_{name}")
        for name in ("project", "entity", "job_type", "tags", "group", "notes", "mode")
    },
    # llama_cookbook/configs/quantization.py: the bitsandbytes settings of --quantization 4bit
    # (finetuning.py reads them only with quantization on); their defaults pass, as
    # --quantization False does, any other value gets the QLoRA reason
    "quantization_config": {
        "quant_type": Flag(fixed=("fp4",), refused=_QLORA),
        "compute_dtype": Flag(fixed=_BF16, refused=_QLORA),
        "use_double_quant": Flag(fixed=("false",), kind=bool, refused=_QLORA),
        "quant_storage": Flag(fixed=_BF16, refused=_QLORA),
    },
}
"""{config class: {field: Flag}} for every field of the pinned llama-cookbook configs."""

DATASET_CONFIGS = {
    "samsum_dataset": ("dataset", "train_split", "test_split"),
    "grammar_dataset": ("dataset", "train_split", "test_split"),
    "alpaca_dataset": ("dataset", "train_split", "test_split", "data_path"),
    "custom_dataset": ("dataset", "file", "train_split", "test_split", "data_path"),
    "llamaguard_toxicchat_dataset": ("dataset", "train_split", "test_split"),
}
"""llama-cookbook's dataset configs (configs/datasets.py), set by update_config like the others
(`--samsum_dataset.train_split`, bare `--file`): outside TABLE, refused with `_DATASET_REFUSED`."""
_DATASET_REFUSED = (
    "llama-cookbook's dataset configs are not read here; choose the data with --dataset "
    "(samsum_dataset, alpaca_dataset or custom with --data_path, hf_dataset with --hf_dataset "
    "--hf_split --hf_eval_split)"
)

_BARE_ORDER = (
    "train_config",
    "fsdp_config",
    "lora_config",
    "wandb_config",
    "quantization_config",
    "llama_adapter_config",
)
"""Which config a bare name resolves to when several have it (`task_type`): lora_config, the
peft config of the one --peft_method this trainer runs, before the refused ones."""


def _bare() -> dict[str, tuple[str, Flag]]:
    out: dict[str, tuple[str, Flag]] = {}
    for config in (*_BARE_ORDER, "prefix_config"):
        for name, flag in TABLE[config].items():
            out.setdefault(name, (config, flag))
    return out


_BARE = _bare()


@dataclass(frozen=True)
class Resolved:
    """A llama-cookbook flag as the parser takes it."""

    field: str | None
    """The TrainConfig field to set; None: a `fixed` flag whose value `accept` checks."""
    flag: Flag
    spelled: str
    """The flag as given (for messages)."""

    def accept(self, raw: str) -> None:
        """For a `fixed` flag: pass when `raw` is its one value here, else CookbookError."""
        if raw.strip().strip("'\"").lower() not in {v.lower() for v in self.flag.fixed}:
            raise CookbookError(f"--{self.spelled} {raw}: {self.flag.refused}")


def resolve(name: str, is_ours: Callable[[str], bool]) -> Resolved | None:
    """`name` (a flag without `--`, hyphens already underscores) as llama-cookbook spells it.

    `is_ours(field)` tells whether TrainConfig has `field`. Returns None when `name` is not a
    llama-cookbook flag (the caller reports it unknown); raises CookbookError for a refused flag
    and for a dotted name whose config has no such field.
    """
    config, dot, field = name.partition(".")
    if config in DATASET_CONFIGS or (not dot and name in ("train_split", "test_split", "file")):
        raise CookbookError(f"--{name}: {_DATASET_REFUSED}", flag=name)
    if dot:
        if config not in TABLE:
            return None
        flag = TABLE[config].get(field)
        if flag is None:
            close = _close(field, list(TABLE[config]))
            raise CookbookError(
                f"--{name}: llama-cookbook's {config} has no field {field!r}{close}"
            )
    else:
        hit = _BARE.get(name)
        if hit is None:
            return None
        flag = hit[1]
    if flag.refused and not flag.fixed:
        raise CookbookError(f"--{name}: {flag.refused}", flag=name)
    if flag.ours is not None and not is_ours(flag.ours):  # the table names a missing field
        raise CookbookError(f"--{name}: not available in this build (no --{flag.ours})", flag=name)
    return Resolved(flag.ours, flag, name)


def _close(word: str, choices: list[str]) -> str:
    from training.errors import suggest

    return suggest(word, choices)


def spellings() -> list[str]:
    """Every llama-cookbook spelling of a flag (bare and dotted), for suggestions."""
    return sorted({*_BARE, *(f"{c}.{n}" for c, fields in TABLE.items() for n in fields)})


_ENUM_PREFIX = {"checkpoint_type": "StateDictType.", "sharding_strategy": "ShardingStrategy."}


def value_form(field: str, raw: str) -> str:
    """`raw` as TrainConfig takes it, from llama-cookbook's spelling of the value.

    `StateDictType.FULL_STATE_DICT` -> `FULL_STATE_DICT` (check_fsdp_config's string form),
    `ShardingStrategy.HYBRID_SHARD` -> `HYBRID_SHARD`, a list (python-fire's `[a,b]`, a Python
    literal or `a,b`) -> `a,b` for --lora_target_modules, `adamw` -> `AdamW` for --optimizer,
    `custom_dataset` -> `custom` for --dataset.
    """
    prefix = _ENUM_PREFIX.get(field)
    if prefix and raw.startswith(prefix):
        return raw[len(prefix) :]
    if field == "lora_target_modules":
        return _list_value(raw)
    if field == "dataset" and raw.strip() == "custom_dataset":
        return "custom"  # llama-cookbook's name; here a JSONL file (--data_path)
    if field == "optimizer":
        for known in OPTIMIZERS:
            if raw.strip().lower() == known.lower():
                return known
    return raw


def _list_value(raw: str) -> str:
    text = raw.strip()
    if len(text) < 2 or text[0] + text[-1] not in ("[]", "()"):
        return raw  # already a,b (checked by training.config)
    items = [t.strip().strip("'\"").strip() for t in text[1:-1].split(",")]
    return ",".join(items)


# ------------------------------------------------------------------------------------------------
# meanings that need the whole config


def check(cfg: Any) -> None:
    """The llama-cookbook fields' values and pairings; CookbookError "--flag: ..." on the first
    problem. `cfg` is a TrainConfig (not imported: training.config imports this module)."""

    def fail(flag: str, msg: str) -> None:
        raise CookbookError(f"--{flag}: {msg}", flag=flag)

    if cfg.tokenizer_name is not None and not cfg.tokenizer_name.strip():
        fail("tokenizer_name", "must not be empty (omit it to use --model_name's)")
    if cfg.num_workers_dataloader < 0:
        fail("num_workers_dataloader", f"must be >= 0, got {cfg.num_workers_dataloader}")
    if cfg.freeze_layers:
        if cfg.use_peft:  # llama-cookbook freezes layers only without peft (finetuning.py)
            fail("freeze_layers", "not used with --use_peft (the base model is frozen already)")
        if cfg.num_freeze_layers < 1:
            fail("num_freeze_layers", f"must be >= 1, got {cfg.num_freeze_layers}")
    if cfg.freeze_LLM_only:
        fail(
            "freeze_LLM_only",
            "freezes a vision model's language layers (llama-cookbook applies it to Mllama only); "
            "this trainer runs text models: use --freeze_layers --num_freeze_layers N",
        )
    if cfg.checkpoint_type not in CHECKPOINT_TYPES:
        fail(
            "checkpoint_type",
            f"must be one of {', '.join(CHECKPOINT_TYPES)} (or StateDictType.<name>), "
            f"got {cfg.checkpoint_type!r}",
        )
    if cfg.optimizer not in OPTIMIZERS:
        fail("optimizer", f"must be one of {', '.join(OPTIMIZERS)}, got {cfg.optimizer!r}")
    if cfg.optimizer == "anyprecision" and not cfg.pure_bf16:
        fail(
            "optimizer",
            "anyprecision keeps bf16 optimizer state for --pure_bf16 (llama-cookbook silently "
            "uses AdamW without it); add --pure_bf16 or use --optimizer AdamW",
        )
    if cfg.from_peft_checkpoint and cfg.use_peft:  # without --use_peft: ignored (notes)
        _check_adapter_folder(cfg, fail)


def _check_adapter_folder(cfg: Any, fail: Callable[[str, str], None]) -> None:
    import json
    from pathlib import Path

    flag = "from_peft_checkpoint"
    folder = Path(cfg.from_peft_checkpoint)
    config_file = folder / "adapter_config.json"
    if not config_file.is_file():
        fail(flag, f"{folder} is not an adapter folder (no adapter_config.json)")
    try:
        saved = json.loads(config_file.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        fail(flag, f"{config_file}: unreadable ({e})")
    if saved.get("peft_type") != "LORA":
        fail(flag, f"{folder} holds a {saved.get('peft_type')} adapter, not LoRA")
    # llama-cookbook takes the folder's own peft config; here the flags must agree with it
    for key, ours, value in (
        ("r", "lora_r", cfg.lora_r),
        ("lora_alpha", "lora_alpha", cfg.lora_alpha),
    ):
        if saved.get(key) != value:
            fail(
                flag, f"{folder} was trained with {key}={saved.get(key)!r}; pass --{ours} to match"
            )
    targets = _targets(cfg.lora_target_modules)
    got = saved.get("target_modules")
    # peft saves the names it matched: "all-linear" resolved to the layers' full dotted names
    # (`_maybe_include_all_linear_layers`, peft/tuners/tuners_utils.py at v0.21.2), a list as
    # given (short or full names): compared by their last dotted part. With all-linear here the comparison is left to the
    # weights' keys (training.cookbook_run.with_adapter: a missing or unexpected key stops).
    if targets != "all-linear":
        short = sorted({t.rsplit(".", 1)[-1] for t in got}) if isinstance(got, list) else got
        if short != targets:
            fail(
                flag,
                f"{folder} was trained with target_modules={got!r}; "
                "pass --lora_target_modules to match",
            )
    for key, plain in _ADAPTER_FORWARD.items():
        value = saved.get(key)
        if value is None or value == plain or (not isinstance(plain, str) and not value):
            continue  # absent (an older peft), the default, or an empty pattern / list
        fail(
            flag,
            f"{folder} was trained with {key}={value!r}, which changes the adapters' forward "
            f"and is not built here (peft's default: {plain!r})",
        )


_ADAPTER_FORWARD: dict[str, Any] = {
    "use_rslora": False,
    "use_dora": False,
    "rank_pattern": {},
    "alpha_pattern": {},
    "layers_to_transform": None,
    "modules_to_save": [],
    "bias": "none",
    "lora_bias": False,
    "fan_in_fan_out": False,
}
"""`peft.LoraConfig` fields (peft/tuners/lora/config.py at v0.21.2) that change what a loaded
adapter computes, with the value training.lora builds (peft's default): a folder saved with
another value is refused rather than loaded into adapters that compute something else."""


def _targets(value: str) -> list[str] | str:
    names = sorted(t.strip() for t in value.split(","))
    return "all-linear" if names == ["all-linear"] else names


def check_world(cfg: Any, world_size: int) -> None:
    """--one_gpu: a single process (llama-cookbook reads the field nowhere; here it asks for a
    world of one, the process group then being an in-memory one: training.dist)."""
    if cfg.one_gpu and world_size > 1:
        raise CookbookError(
            f"--one_gpu: runs a single process, but WORLD_SIZE is {world_size}; "
            "drop --one_gpu or start one process"
        )


def notes(cfg: Any) -> list[str]:
    """One log line per given flag that names what this package always does."""
    out = []
    if cfg.low_cpu_fsdp:
        out.append(
            "--low_cpu_fsdp: always on here: rank 0 alone builds the weights, the other ranks "
            "start on the meta device and receive their shards (training.model)"
        )
    if cfg.use_fast_kernels:
        out.append(
            "--use_fast_kernels: always on here: attention runs torch SDPA's fused causal "
            "kernels (flash / memory-efficient where the device has them)"
        )
    if cfg.checkpoint_type == "FULL_STATE_DICT" and cfg.use_peft:
        # llama-cookbook saves the PEFT modules whatever checkpoint_type says (train_utils.py
        # `train` at 0.0.5.post1: the use_peft branch comes before the checkpoint_type test)
        out.append(
            "--checkpoint_type FULL_STATE_DICT with --use_peft: the adapters are what is saved "
            "(<output_dir>/adapter with --save_model), as llama-cookbook saves the PEFT modules"
        )
    out += step_unit_notes(cfg) + inert_notes(cfg)
    # --num_workers_dataloader carries its meaning (DataLoader workers: training.data.batches), so it
    # needs no line here.
    return out


def step_unit_notes(cfg: Any) -> list[str]:
    """--max_train_step and --flop_counter_start count optimizer steps here; llama-cookbook's
    train loop counts dataloader batches (`total_train_steps += 1` per batch, before the
    accumulation test: llama_cookbook/utils/train_utils.py at 0.0.5.post1, and its FlopMeasure
    steps per batch). The two agree without gradient accumulation; with it, one line each."""
    accum = cfg.gradient_accumulation_steps
    if accum <= 1:
        return []
    out = []
    if cfg.max_train_step > 0:
        out.append(
            f"--max_train_step {cfg.max_train_step}: counts optimizer steps here "
            f"({cfg.max_train_step * accum} micro-batches with --gradient_accumulation_steps "
            f"{accum}); llama-cookbook counts micro-batches and would stop after "
            f"{cfg.max_train_step // accum} optimizer steps"
        )
    if cfg.flop_counter:
        out.append(
            f"--flop_counter_start {cfg.flop_counter_start}: counts optimizer steps here "
            f"({accum} micro-batches each); llama-cookbook counts micro-batches"
        )
    return out


INERT: dict[str, tuple[str, ...]] = {
    "use_peft": (
        "peft_method",
        "lora_r",
        "lora_alpha",
        "lora_dropout",
        "lora_target_modules",
        "from_peft_checkpoint",
    ),
    "use_wandb": tuple(f"wandb_{name}" for name in TABLE["wandb_config"]),
    "use_profiler": ("profiler_dir",),
    "flop_counter": ("flop_counter_start",),
    "freeze_layers": ("num_freeze_layers",),
}
"""{switch: the fields read only when it is on}, as llama-cookbook 0.0.5.post1 reads them:
finetuning.py builds the wandb_config in `setup_wandb`, called only `if train_config.use_wandb`;
the lora_config (`generate_peft_config`) and from_peft_checkpoint only `if
train_config.use_peft`; the layer count only `if not train_config.use_peft and
train_config.freeze_layers`; utils/train_utils.py `profile` reads profiler_dir only `if
use_profiler` and flop_counter_start only `elif use_flop_counter`. Given with the switch off,
they are ignored there, so here too (`inert_notes`), not refused: a script that always passes
them and turns the switch on or off runs on both."""


def inert_notes(cfg: Any) -> list[str]:
    """One line per switch that is off while fields only it reads were given."""
    fields = cfg.__dataclass_fields__
    out = []
    for switch, names in INERT.items():
        on = getattr(cfg, switch) or (switch == "use_wandb" and cfg.tracker == "wandb")
        given = [n for n in names if getattr(cfg, n) != fields[n].default]
        if on or not given:
            continue
        named = "--use_wandb (or --tracker wandb)" if switch == "use_wandb" else f"--{switch}"
        out.append(
            f"{', '.join('--' + n for n in given)}: only read with {named}, which is off: "
            "ignored, as llama-cookbook ignores it"
        )
    return out
