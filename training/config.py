"""The training CLI: llama-recipes' `finetuning.py` flags, parsed into a frozen `TrainConfig`.

Flag names and defaults are llama-recipes' `train_config` / `fsdp_config` ones where they apply, so
the job commands people already use work. The parser is driven by the dataclass fields and mirrors
python-fire's forms (llama-recipes uses fire):

    --flag value     --flag=value     --flag-name value (hyphens and underscores are the same)
    --bool_flag      --bool_flag=False     --bool_flag false     --nobool_flag
    booleans accept true/false, 1/0, yes/no, on/off (any case)

Unlike argparse there are no abbreviations: an unknown flag is an error with a suggestion, and a
flag given twice is an error. Everything that can be checked without knowing the world size is
checked when a `TrainConfig` is constructed; each problem raises a `ConfigError` whose text is one
line naming the flag. World-size-dependent checks live in `training.parallelize`.

Decision on `--hsdp`: llama-recipes builds its 2-D device mesh only when `hsdp` is set AND the
sharding strategy is HYBRID_SHARD, and silently ignores `hsdp` otherwise. Here `--hsdp` without an
explicit `--sharding_strategy` selects HYBRID_SHARD; `--hsdp` with any other explicit strategy is
an error. `--sharding_group_size` / `--replica_group_size` are only accepted with `--hsdp`
(0 = derived from the world size by `training.parallelize`).

FSDP-only flags (`--sharding_strategy`, `--fsdp_cpu_offload`, ...) are accepted but unused without
`--enable_fsdp`, as in llama-recipes.
"""

from __future__ import annotations

import ast
import contextvars
import dataclasses
import inspect
import itertools
import math
import sys
import types
import typing
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from training import cookbook
from training.errors import ConfigError, suggest

__all__ = [
    "AC_MODES",
    "BATCHING_STRATEGIES",
    "DATASETS",
    "EXPORT_DTYPES",
    "PACKING_STRATEGIES",
    "PEFT_METHODS",
    "SHARDING_STRATEGIES",
    "TRACKERS",
    "ConfigError",
    "TrainConfig",
    "field_docs",
    "parse_args",
    "to_argv",
    "usage",
]

BATCHING_STRATEGIES = ("packing", "padding")
PACKING_STRATEGIES = ("wrapped", "bfd")
"""TRL's names: wrapped (llama-recipes' ConcatDataset) or bfd (best fit decreasing, whole samples)."""
AC_MODES = ("full", "selective", "none")
SHARDING_STRATEGIES = ("FULL_SHARD", "SHARD_GRAD_OP", "HYBRID_SHARD", "NO_SHARD")
DATASETS = (
    "samsum_dataset",
    "samsum_sample",
    "alpaca_dataset",
    "custom",
    "chat_sample",
    "hf_dataset",
    "preference_sample",
)
DATASETS_WITH_PATH = ("custom", "alpaca_dataset")
EXPORT_DTYPES = ("auto", "fp32", "bf16", "fp16")
PEFT_METHODS = ("lora",)
"""llama-recipes' --peft_method values this trainer runs (its llama_adapter and prefix are not)."""

_TRUE = ("true", "1", "yes", "on")
_FALSE = ("false", "0", "no", "off")


@dataclass(frozen=True, kw_only=True)
class TrainConfig:
    """One fine-tuning run. Field names are the CLI flags (`--<field>`)."""

    # --- llama-recipes train_config / fsdp_config -----------------------------------------------
    model_name: str = "tiny-llama"
    """Model: a tiny preset name (tiny-llama, ...), a local Hugging Face folder, a hub name, or s3://bucket/prefix."""
    enable_fsdp: bool = False
    """Shard the model with FSDP2 (torch.distributed.fsdp.fully_shard)."""
    run_validation: bool = True
    """Evaluate on the validation split at the end of each epoch."""
    batch_size_training: int = 4
    """Micro-batch size per rank (sequences per forward pass)."""
    batching_strategy: str = "packing"
    """packing (concatenate and cut into context_length chunks) or padding (one sample per row)."""
    packing_strategy: str = "wrapped"
    """With packing: wrapped (cut rows of exactly context_length) or bfd (whole samples, best fit decreasing)."""
    context_length: int = 4096
    """Tokens per packed chunk; with padding, samples are truncated to it."""
    gradient_accumulation_steps: int = 1
    """Micro-batches per optimizer step."""
    gradient_clipping: bool = False
    """Clip the global gradient norm to gradient_clipping_threshold."""
    gradient_clipping_threshold: float = 1.0
    """Max global gradient norm when gradient_clipping is on."""
    num_epochs: int = 3
    """Passes over the training split."""
    max_train_step: int = 0
    """Stop after this many optimizer steps in total; 0 = no limit."""
    max_eval_step: int = 0
    """Evaluate at most this many batches per rank; 0 = the whole validation split."""
    lr: float = 1e-4
    """AdamW learning rate."""
    weight_decay: float = 0.0
    """AdamW weight decay."""
    gamma: float = 0.85
    """StepLR decay of the learning rate after each epoch, as llama-recipes."""
    seed: int = 42
    """Seed for model init and data shuffling."""
    mixed_precision: bool = True
    """bf16 (or fp16 with use_fp16) compute with fp32 parameters and gradient reduction."""
    use_fp16: bool = False
    """llama-recipes' fp16 mixed precision: refused (no loss scaling with FSDP2); use bf16."""
    val_batch_size: int = 1
    """Validation micro-batch size per rank."""
    dataset: str = "samsum_dataset"
    """samsum_dataset (hub), samsum_sample (bundled), alpaca_dataset (JSON), custom (JSONL), chat_sample (bundled chats), hf_dataset, preference_sample (bundled pairs)."""
    data_path: str | None = None
    """File for --dataset custom (JSONL) or alpaca_dataset (JSON list)."""
    hf_dataset: str = ""
    """With --dataset hf_dataset: a hub name, a save_to_disk folder, or a .json/.jsonl/.csv/.parquet file."""
    hf_split: str = "train"
    """With --dataset hf_dataset: the training split (its last 10% validate unless --hf_eval_split)."""
    hf_eval_split: str = ""
    """With --dataset hf_dataset: the validation split; empty = the last 10% of --hf_split."""
    hf_columns: str = ""
    """With --dataset hf_dataset: ours=theirs column renames, e.g. messages=conversations."""
    chat_template: str = ""
    """A Jinja file to use as the tokenizer's chat template (for chat rows and the export)."""
    max_train_samples: int = 0
    """Tokenize and train on the first N rows of the training split only (smoke runs); 0 = all."""
    output_dir: str = "runs/finetune"
    """Where metrics.jsonl, summary.json, the plot and the exported model go (a folder or s3://bucket/prefix)."""
    save_model: bool = True
    """Export a servable Hugging Face folder at the end (sharded safetensors, configs, tokenizer)."""
    save_optimizer: bool = False
    """Accepted for llama-recipes compatibility; DCP checkpoints always hold the optimizer."""
    dist_checkpoint_root_folder: str = "runs/checkpoints"
    """Root folder of the distributed (DCP) checkpoints (a folder or s3://bucket/prefix)."""
    dist_checkpoint_folder: str = "fine-tuned"
    """Sub-folder of dist_checkpoint_root_folder for this run's checkpoints."""
    sharding_strategy: str = "FULL_SHARD"
    """FULL_SHARD, SHARD_GRAD_OP, HYBRID_SHARD or NO_SHARD."""
    hsdp: bool = False
    """Hybrid sharding on a 2-D (replicate, shard) mesh; implies HYBRID_SHARD."""
    sharding_group_size: int = 0
    """HSDP: ranks per sharding group; 0 = derived from the world size."""
    replica_group_size: int = 0
    """HSDP: number of replica groups; 0 = derived from the world size."""
    pure_bf16: bool = False
    """Keep parameters, gradients and optimizer state in bf16 (overrides mixed_precision)."""
    fsdp_activation_checkpointing: bool = True
    """With --enable_fsdp (as llama-recipes'): recompute each decoder layer's activations in backward."""
    fsdp_cpu_offload: bool = False
    """Offload sharded parameters, gradients and optimizer state to CPU."""
    use_peft: bool = False
    """Train low-rank adapters (peft) on a frozen base model instead of every weight."""
    peft_method: str = "lora"
    """With --use_peft: the adapter kind; lora (llama-recipes' lora_config)."""
    lora_r: int = 8
    """With --use_peft: the rank of each LoRA update (llama-recipes' lora_config.r)."""
    lora_alpha: int = 32
    """With --use_peft: LoRA scaling numerator; the update is scaled by lora_alpha / lora_r."""
    lora_dropout: float = 0.05
    """With --use_peft: dropout on the LoRA branch's input in training."""
    lora_target_modules: str = "q_proj,v_proj"
    """With --use_peft: comma-separated module names to adapt, or all-linear (every linear but lm_head)."""
    merge_adapters: bool = False
    """With --use_peft and --save_model: also export the base with the adapters merged into it."""
    export_dtype: str = "auto"
    """dtype of the exported weights: auto (bf16 on GPUs, the parameters' dtype on CPUs), fp32, bf16, fp16."""
    export_max_shard_gb: float = 5.0
    """Largest safetensors file of the export (GB); also the most the export holds in rank 0's memory."""

    # --- the rest of llama-cookbook's train_config / fsdp_config (training.cookbook) -----------
    model_revision: str = ""
    """Hub revision (commit, tag or branch) of --model_name's files; "" = the default branch."""
    dataset_revision: str = ""
    """Hub revision of --hf_dataset (or samsum_dataset); "" = the default branch."""
    tokenizer_name: str | None = None
    """Tokenizer to load (hub name or folder) instead of --model_name's; None = the model's."""
    low_cpu_fsdp: bool = False
    """Accepted, always on: rank 0 alone builds the weights, other ranks start on the meta device."""
    use_fast_kernels: bool = False
    """Accepted, always on: attention runs torch SDPA's fused kernels."""
    num_workers_dataloader: int = 0
    """DataLoader worker processes collating the batches per rank; 0 = in the training process."""
    freeze_layers: bool = False
    """Freeze the first --num_freeze_layers decoder layers (full fine-tuning; not with --use_peft)."""
    num_freeze_layers: int = 1
    """With --freeze_layers: how many decoder layers, from the embedding side, keep their weights."""
    freeze_LLM_only: bool = False
    """llama-cookbook's Mllama (vision) option: refused, this trainer runs text models."""
    from_peft_checkpoint: str = ""
    """With --use_peft: an adapter folder (adapter_config.json + weights) to continue training from."""
    one_gpu: bool = False
    """A single-process run (refused when WORLD_SIZE > 1)."""
    checkpoint_type: str = "SHARDED_STATE_DICT"
    """FULL_STATE_DICT: also write rank 0's full state dict (torch.save) at each epoch end."""
    optimizer: str = "AdamW"
    """AdamW, or anyprecision (with --pure_bf16: AdamW with bf16 state, as llama-cookbook's)."""

    # --- ours -----------------------------------------------------------------------------------
    resume: bool = False
    """Continue from the newest complete checkpoint in the checkpoint folder."""
    resume_required: bool = False
    """With --resume: no complete checkpoint is an error before step 1 (jobs submit --from)."""
    checkpoint_every: int = 0
    """Optimizer steps between checkpoints; 0 = no step-based interval."""
    checkpoint_every_s: float = 0.0
    """Seconds between checkpoints (agreed by all ranks at a step boundary); 0 = no time interval."""
    async_checkpoint: bool = True
    """Write checkpoints in the background (DCP async_save): the loop stalls only while staging."""
    checkpoint_write_estimate_s: float = 0.0
    """Expected seconds of one checkpoint write (from the job spec), until one is measured; 0 = unknown."""
    collective_timeout_s: float = 300.0
    """Timeout of every collective after the first step: a dead or hung peer fails within it."""
    log_every: int = 1
    """Optimizer steps between progress-bar / stdout updates (metrics.jsonl gets every step)."""
    gc_freq: int = 50
    """Steps between Python garbage collections (automatic GC is off while training, as torchtitan)."""
    metrics_port: int = 0
    """Port of the Prometheus exporter; 0 = off."""
    progress: bool = True
    """Show a tqdm progress bar on rank 0."""
    plot_metrics: bool = True
    """Draw metrics.png (loss and throughput per step) at the end, on rank 0 (~1 s of matplotlib)."""
    force_bf16: bool = False
    """Keep bf16 mixed precision on a CPU without native bf16 (else fp32 there, ~10x faster)."""
    compile: bool = False
    """torch.compile each decoder layer whole (per block, fullgraph, as torchtitan)."""
    ac_mode: str = "full"
    """With --fsdp_activation_checkpointing: full (recompute each layer), selective (op-level SAC) or none."""
    preflight: bool = False
    """Check the nodes (collectives, matmul, memory, transport) before step 1 (training.preflight)."""
    preflight_expect: str = ""
    """--preflight thresholds, e.g. intra_busbw=288,inter_busbw=225,tflops=445,net=OFI,gpus=8."""

    # --- experiment tracking and profiling (llama-cookbook train_config / wandb_config) ---------
    use_wandb: bool = False
    """Log the run to Weights & Biases from rank 0 (llama-cookbook's use_wandb; = --tracker wandb)."""
    tracker: str = "none"
    """Experiment tracker rank 0 logs to: none, wandb, mlflow or tensorboard (training.trackers)."""
    wandb_project: str = "llama_cookbook"
    """W&B project (llama-cookbook's wandb_config.project)."""
    wandb_entity: str | None = None
    """W&B entity, a user or team; None = the account's default (wandb_config.entity)."""
    wandb_job_type: str | None = None
    """W&B job type, e.g. fine-tune (wandb_config.job_type)."""
    wandb_tags: str | None = None
    """W&B tags, comma-separated or as a list [a,b] (wandb_config.tags)."""
    wandb_group: str | None = None
    """W&B group that gathers related runs (wandb_config.group)."""
    wandb_notes: str | None = None
    """W&B notes, a longer description of the run (wandb_config.notes)."""
    wandb_mode: str | None = None
    """W&B mode: online, offline, disabled or shared; None = WANDB_MODE or online (wandb_config.mode)."""
    use_profiler: bool = False
    """torch.profiler traces of steps 4-6 (1 skipped, 2 warm-up, 3 recorded) on every rank."""
    profiler_dir: str = ""
    """Folder of the --use_profiler traces (Perfetto / TensorBoard); empty = <output_dir>/profiler."""
    flop_counter: bool = False
    """Count the FLOPs of one step (torch FlopCounterMode) on every rank; report them beside the MFU formula."""
    flop_counter_start: int = 3
    """With --flop_counter: warm-up steps before the counted step (llama-cookbook's default 3)."""
    save_metrics: bool = False
    """Also write llama-cookbook's metrics_data_<rank>-<time>.json (step and epoch losses) on rank 0."""

    # --- preference tuning: TRL DPOConfig's names (training.preference) -----------------------
    method: str = "sft"
    """sft (next-token loss on the answers) or dpo (preference pairs: prompt, chosen, rejected)."""
    beta: float = 0.1
    """With --method dpo: how far the policy may move from the reference (TRL's beta; IPO's tau)."""
    loss_type: str = "sigmoid"
    """With --method dpo: sigmoid (DPO), robust, ipo, or simpo (reference-free, length-normalised)."""
    label_smoothing: float = 0.0
    """With --method dpo: the chance a label is flipped: conservative DPO (sigmoid), robust DPO, SimPO."""
    simpo_gamma: float = 0.5
    """With --loss_type simpo: the target reward margin gamma (TRL CPOConfig's simpo_gamma)."""
    precompute_ref_log_probs: bool = False
    """With --method dpo: compute the reference log-probs once before step 1, kept with the data."""

    def __post_init__(self) -> None:
        _check_types(self)
        _validate(self)


# ------------------------------------------------------------------------------------------------
# validation


def _check_types(cfg: TrainConfig) -> None:
    for f in dataclasses.fields(cfg):
        value = getattr(cfg, f.name)
        kind = _kind(f.name)
        if kind is bool:
            ok = isinstance(value, bool)
        elif kind is int:
            ok = isinstance(value, int) and not isinstance(value, bool)
        elif kind is float:
            ok = isinstance(value, int | float) and not isinstance(value, bool)
            if ok and isinstance(value, int):  # an int where a float is due: store the float
                object.__setattr__(cfg, f.name, float(value))
        elif kind is _OptStr:
            ok = value is None or isinstance(value, str)
        else:
            ok = isinstance(value, str)
        if not ok:
            raise ConfigError(
                f"--{f.name}: expects {_KIND_NAMES[kind]}, got {value!r}", flag=f.name
            )


def _validate(c: TrainConfig) -> None:
    def fail(flag: str, msg: str) -> typing.NoReturn:
        raise ConfigError(f"--{flag}: {msg}", flag=flag)

    def at_least(flag: str, lo: int) -> None:
        value = getattr(c, flag)
        if value < lo:
            fail(flag, f"must be >= {lo}, got {value}")

    def positive(flag: str) -> None:
        value = getattr(c, flag)
        if not (math.isfinite(value) and value > 0):
            fail(flag, f"must be a finite number > 0, got {value}")

    def one_of(flag: str, allowed: Sequence[str]) -> None:
        value = getattr(c, flag)
        if value not in allowed:
            hint = _suggest(value, allowed)
            fail(flag, f"must be one of {', '.join(allowed)}, got {value!r}{hint}")

    for flag in (
        "model_name",
        "output_dir",
        "dist_checkpoint_root_folder",
        "dist_checkpoint_folder",
    ):
        if not getattr(c, flag).strip():
            fail(flag, "must not be empty")
    from training.s3.uri import check_flag  # stdlib-only: s3:// names a valid bucket

    for flag in ("model_name", "output_dir", "dist_checkpoint_root_folder"):
        if problem := check_flag(flag, getattr(c, flag)):
            raise ConfigError(problem, flag=flag)

    if c.resume_required and not c.resume:
        fail("resume_required", "needs --resume")
    at_least("batch_size_training", 1)
    at_least("val_batch_size", 1)
    at_least("context_length", 2)
    at_least("gradient_accumulation_steps", 1)
    at_least("num_epochs", 1)
    at_least("max_train_step", 0)
    at_least("max_eval_step", 0)
    at_least("max_train_samples", 0)
    at_least("seed", 0)
    if c.seed >= 2**63:
        fail("seed", f"must be < 2**63, got {c.seed}")
    at_least("sharding_group_size", 0)
    at_least("replica_group_size", 0)
    at_least("checkpoint_every", 0)
    at_least("checkpoint_every_s", 0)
    at_least("checkpoint_write_estimate_s", 0)
    positive("collective_timeout_s")
    at_least("log_every", 1)
    at_least("gc_freq", 1)
    positive("lr")
    positive("gradient_clipping_threshold")
    if not (math.isfinite(c.weight_decay) and c.weight_decay >= 0):
        fail("weight_decay", f"must be a finite number >= 0, got {c.weight_decay}")
    if not (math.isfinite(c.gamma) and 0 < c.gamma <= 1):
        fail("gamma", f"must be in (0, 1], got {c.gamma}")
    if not 0 <= c.metrics_port <= 65535:
        fail("metrics_port", f"must be in 0..65535 (0 = off), got {c.metrics_port}")

    if c.preflight_expect:
        from training.preflight import parse_expect  # stdlib-only at import

        try:
            parse_expect(c.preflight_expect)
        except ValueError as e:
            fail("preflight_expect", str(e))
        if not c.preflight:
            fail("preflight_expect", "only used with --preflight")

    one_of("batching_strategy", BATCHING_STRATEGIES)
    one_of("packing_strategy", PACKING_STRATEGIES)
    if c.packing_strategy != "wrapped" and c.batching_strategy != "packing":
        fail(
            "packing_strategy",
            f"only used with --batching_strategy packing, not {c.batching_strategy}",
        )
    one_of("sharding_strategy", SHARDING_STRATEGIES)
    one_of("dataset", DATASETS)
    one_of("ac_mode", AC_MODES)
    one_of("export_dtype", EXPORT_DTYPES)
    positive("export_max_shard_gb")
    if c.ac_mode == "selective" and not c.fsdp_activation_checkpointing:
        fail("ac_mode", "selective needs --fsdp_activation_checkpointing (or pass --ac_mode none)")

    if c.dataset in DATASETS_WITH_PATH:
        if c.data_path is None or not c.data_path.strip():
            fail("data_path", f"required with --dataset {c.dataset}")
        _check_file("data_path", c.data_path, fail)
    elif c.data_path is not None:
        fail(
            "data_path",
            f"only used with --dataset {' or '.join(DATASETS_WITH_PATH)}, not {c.dataset}",
        )

    if c.chat_template:
        _check_file("chat_template", c.chat_template, fail)

    if c.hsdp and c.sharding_strategy != "HYBRID_SHARD":
        fail("hsdp", f"requires --sharding_strategy HYBRID_SHARD, got {c.sharding_strategy}")
    for flag in ("sharding_group_size", "replica_group_size"):
        if getattr(c, flag) > 0 and not c.hsdp:
            fail(flag, "only used with --hsdp")
    _validate_peft(c, fail)
    _validate_hf(c, fail)
    _validate_tracking(c, fail)
    _validate_cookbook(c)
    _validate_preference(c)
    if c.pure_bf16 and c.use_fp16:
        fail("pure_bf16", "cannot be combined with --use_fp16")
    if c.use_fp16 and c.mixed_precision:
        # fp16 gradients underflow without loss scaling, and torch has no gradient scaler for
        # FSDP2 (ShardedGradScaler is FSDP1's); bf16 has fp32's range and needs none.
        fail(
            "use_fp16",
            "fp16 training needs loss scaling, which this trainer does not do with FSDP2; "
            "use bf16 (the default --mixed_precision) or --mixed_precision=False",
        )


_PATHS_HERE: contextvars.ContextVar[bool] = contextvars.ContextVar("paths_here", default=True)
"""Whether file flags name files on this machine (a run here) or on the pods (a cluster job,
checked at submit or render, where the file lives on the shared file system)."""


def _check_file(flag: str, path: str, fail: typing.Callable[[str, str], typing.NoReturn]) -> None:
    if _PATHS_HERE.get():
        if not Path(path).is_file():
            fail(flag, f"no such file: {path}")
    elif not PurePosixPath(path).is_absolute():
        fail(flag, f"{path}: a path the pods see, e.g. /checkpoints/data/train.jsonl")


def _validate_hf(c: TrainConfig, fail: typing.Callable[[str, str], typing.NoReturn]) -> None:
    """--hf_* only with --dataset hf_dataset, which needs --hf_dataset; column renames parse."""
    from training.data.hf_data import HFDataError, parse_columns  # stdlib-only at import

    defaults = {f.name: f.default for f in dataclasses.fields(c)}
    if c.dataset != "hf_dataset":
        for flag in ("hf_dataset", "hf_split", "hf_eval_split", "hf_columns"):
            if getattr(c, flag) != defaults[flag]:
                fail(flag, f"only used with --dataset hf_dataset, not {c.dataset}")
        return
    if not c.hf_dataset.strip():
        fail("hf_dataset", "required with --dataset hf_dataset")
    if not c.hf_split.strip():
        fail("hf_split", "must not be empty")
    try:
        parse_columns(c.hf_columns)
    except HFDataError as e:
        raise ConfigError(str(e), flag="hf_columns") from None


TRACKERS = ("none", "wandb", "mlflow", "tensorboard")
WANDB_MODES = ("online", "offline", "disabled", "shared")
"""wandb.init's modes (wandb/sdk/wandb_init.py at 0.31.0, the `mode` Literal)."""
PROFILER_STEPS = 6
"""Steps --use_profiler needs: llama-cookbook's schedule, wait 1 + warm-up 2 + active 3."""


def _validate_tracking(c: TrainConfig, fail: typing.Callable[[str, str], typing.NoReturn]) -> None:
    """--tracker / --use_wandb / --wandb_*, --use_profiler, --flop_counter: values and pairings."""
    if c.tracker not in TRACKERS:
        hint = _suggest(c.tracker, TRACKERS)
        fail("tracker", f"must be one of {', '.join(TRACKERS)}, got {c.tracker!r}{hint}")
    if c.use_wandb and c.tracker not in ("none", "wandb"):
        fail("use_wandb", f"logs to W&B; it cannot be combined with --tracker {c.tracker}")
    # wandb_* without --use_wandb, --profiler_dir without --use_profiler and
    # --flop_counter_start without --flop_counter are ignored with a line (cookbook.notes)
    if not c.wandb_project.strip():
        fail("wandb_project", "must not be empty")
    if c.wandb_mode is not None and c.wandb_mode not in WANDB_MODES:
        hint = _suggest(c.wandb_mode, WANDB_MODES)
        fail("wandb_mode", f"must be one of {', '.join(WANDB_MODES)}, got {c.wandb_mode!r}{hint}")
    if c.use_profiler and c.flop_counter:  # as llama-cookbook's train_utils.profile
        fail(
            "flop_counter", "cannot be combined with --use_profiler (the profiler counts FLOPs too)"
        )
    if c.use_profiler and 0 < c.max_train_step < PROFILER_STEPS:
        fail(
            "use_profiler",
            f"needs at least {PROFILER_STEPS} steps, --max_train_step is {c.max_train_step}",
        )
    if c.flop_counter_start < 0:
        fail("flop_counter_start", f"must be >= 0, got {c.flop_counter_start}")
    if c.flop_counter and 0 < c.max_train_step <= c.flop_counter_start:
        fail(
            "flop_counter",
            f"counts step {c.flop_counter_start + 1}, --max_train_step is {c.max_train_step}",
        )


def _validate_cookbook(c: TrainConfig) -> None:
    """The rest of llama-cookbook's fields (training.cookbook.check)."""
    try:
        cookbook.check(c)
    except cookbook.CookbookError as e:
        raise ConfigError(str(e), flag=e.flag) from None


def _validate_preference(c: TrainConfig) -> None:
    """--method and TRL's preference flags (training.preference.check)."""
    from training.preference import PreferenceError, check  # no torch at import

    try:
        check(c)
    except PreferenceError as e:
        raise ConfigError(str(e)) from None


def _validate_peft(c: TrainConfig, fail: typing.Callable[[str, str], typing.NoReturn]) -> None:
    """The --use_peft flags: values in range; without --use_peft the LoRA fields are ignored
    with a line (cookbook.notes), and --merge_adapters, which asks for an export, is refused."""
    if not c.use_peft:
        if c.merge_adapters:
            fail("merge_adapters", "only used with --use_peft")
        return
    if c.peft_method not in PEFT_METHODS:
        hint = _suggest(c.peft_method, PEFT_METHODS)
        fail(
            "peft_method",
            f"must be one of {', '.join(PEFT_METHODS)} (llama-recipes' llama_adapter and "
            f"prefix are not supported), got {c.peft_method!r}{hint}",
        )
    if c.lora_r < 1:
        fail("lora_r", f"must be >= 1, got {c.lora_r}")
    if c.lora_alpha < 1:
        fail("lora_alpha", f"must be >= 1, got {c.lora_alpha}")
    if not (math.isfinite(c.lora_dropout) and 0 <= c.lora_dropout < 1):
        fail("lora_dropout", f"must be in [0, 1), got {c.lora_dropout}")
    names = [t.strip() for t in c.lora_target_modules.split(",")]
    if not all(names):
        fail("lora_target_modules", f"expects comma-separated names, got {c.lora_target_modules!r}")
    if "all-linear" in names and len(names) > 1:
        fail("lora_target_modules", "all-linear stands alone, not in a list")
    if c.merge_adapters and not c.save_model:
        fail("merge_adapters", "exports merged weights with --save_model; it is off")


# ------------------------------------------------------------------------------------------------
# parsing


class _OptStr:
    """Marker kind for `str | None` fields."""


_KIND_NAMES: dict[Any, str] = {
    bool: "true/false",
    int: "an integer",
    float: "a number",
    str: "a string",
    _OptStr: "a string or None",
}


def _kind(name: str) -> Any:
    return _KINDS[name]


def _resolve_kinds() -> dict[str, Any]:
    hints = typing.get_type_hints(TrainConfig)
    kinds: dict[str, Any] = {}
    for f in dataclasses.fields(TrainConfig):
        hint = hints[f.name]
        if hint in (bool, int, float, str):
            kinds[f.name] = hint
        elif isinstance(hint, types.UnionType) and set(typing.get_args(hint)) == {str, type(None)}:
            kinds[f.name] = _OptStr
        else:  # a new field type needs a coercion rule here
            raise TypeError(f"TrainConfig.{f.name}: unsupported field type {hint}")
    return kinds


_KINDS = _resolve_kinds()
_FLAGS = tuple(_KINDS)


def _coerce(name: str, raw: str) -> Any:
    kind = _kind(name)
    if kind is bool:
        low = raw.strip().lower()
        if low in _TRUE:
            return True
        if low in _FALSE:
            return False
        raise ConfigError(f"--{name}: expects true/false (or 1/0, yes/no), got {raw!r}", flag=name)
    if kind is int:
        try:
            return int(raw.strip())
        except ValueError:
            raise ConfigError(f"--{name}: expects an integer, got {raw!r}", flag=name) from None
    if kind is float:
        try:
            value = float(raw.strip())
        except ValueError:
            raise ConfigError(f"--{name}: expects a number, got {raw!r}", flag=name) from None
        if not math.isfinite(value):
            raise ConfigError(f"--{name}: expects a finite number, got {raw!r}", flag=name)
        return value
    if kind is _OptStr:
        return None if raw.strip() in ("", "None", "none") else raw
    return raw


def _is_bool_literal(tok: str) -> bool:
    return tok.strip().lower() in _TRUE + _FALSE


def _suggest(word: str, choices: Sequence[str], prefix: str = "") -> str:
    """``training.errors.suggest``, with up to three choices ``word`` starts."""
    return suggest(word, choices, prefix=prefix, most=3)


def _unknown(flag: str) -> ConfigError:
    ours, theirs = _suggest(flag, _FLAGS, "--"), _suggest(flag, cookbook.spellings(), "--")
    hint = (theirs or ours) if "." in flag else (ours or theirs)  # a dotted name: theirs first
    return ConfigError(f"unknown flag --{flag}{hint}")


def _cookbook_flag(name: str) -> cookbook.Resolved | None:
    """llama-cookbook's spelling of a flag (`--fsdp_config.pure_bf16`, `--lora_config.r`, ...)."""
    try:
        return cookbook.resolve(name, _KINDS.__contains__)
    except cookbook.CookbookError as e:
        raise ConfigError(str(e), flag=e.flag) from None


def parse_args(argv: Sequence[str] | None = None, *, local_paths: bool = True) -> TrainConfig:
    """Parse llama-recipes-style flags (sys.argv[1:] by default) into a validated TrainConfig.

    `--help` / `-h` prints the flags with their defaults and exits 0. Everything else that is
    wrong raises ConfigError with a one-line message naming the flag. `local_paths=False`
    checks a cluster job's flags where they are submitted: file flags (`--data_path`,
    `--chat_template`) name files on the pods' shared file system, so they must be absolute and
    are not looked up on this machine.
    """
    token = _PATHS_HERE.set(local_paths)
    try:
        return _parse_args(argv)
    finally:
        _PATHS_HERE.reset(token)


def _parse_args(argv: Sequence[str] | None) -> TrainConfig:
    args = list(sys.argv[1:] if argv is None else argv)
    if any(a in ("-h", "--help") for a in args):
        print(usage())
        raise SystemExit(0)
    values: dict[str, Any] = {}
    i = 0
    while i < len(args):
        tok = args[i]
        i += 1
        if not tok.startswith("--") or tok == "--":
            raise ConfigError(f"unexpected argument {tok!r} (flags look like --name value)")
        name, eq, raw = tok[2:].partition("=")
        name = name.replace("-", "_")
        alias = None if name in _KINDS else _cookbook_flag(name)
        if alias is not None and alias.field is not None:
            name = alias.field
        elif alias is not None:  # a value llama-cookbook defaults to: accepted, nothing to set
            if not eq:  # a bare flag is True, as fire reads it
                nxt = args[i] if i < len(args) else "--"
                takes = not nxt.startswith("--") and (
                    alias.flag.kind is not bool or _is_bool_literal(nxt)
                )
                raw, i = (nxt, i + 1) if takes else ("true", i)
            try:
                alias.accept(raw)
            except cookbook.CookbookError as e:
                raise ConfigError(str(e)) from None
            continue
        elif name not in _KINDS:
            if name.startswith("no") and _KINDS.get(name[2:]) is bool and not eq:
                name, eq, raw = name[2:], "=", "false"  # fire's --noflag
            else:
                raise _unknown(name)
        if name in values:
            raise ConfigError(f"--{name}: given more than once", flag=name)
        if not eq:
            if _kind(name) is bool:
                if i < len(args) and _is_bool_literal(args[i]):
                    raw = args[i]
                    i += 1
                else:
                    raw = "true"
            elif i < len(args) and not args[i].startswith("--"):
                raw = args[i]
                i += 1
            else:
                raise ConfigError(
                    f"--{name}: expects a value ({_KIND_NAMES[_kind(name)]})", flag=name
                )
        values[name] = _coerce(name, cookbook.value_form(name, raw))
    # --hsdp picks HYBRID_SHARD unless a strategy is given explicitly (see the module docstring).
    if values.get("hsdp") and "sharding_strategy" not in values:
        values["sharding_strategy"] = "HYBRID_SHARD"
    return TrainConfig(**values)


def to_argv(cfg: TrainConfig, *, all_fields: bool = False) -> list[str]:
    """The flags that reproduce `cfg` (only those differing from the defaults unless all_fields).

    parse_args(to_argv(cfg)) == cfg. Every flag uses the `--name=value` form, so the list can be
    appended to a torchrun command line as is.
    """
    out = []
    for f in dataclasses.fields(TrainConfig):
        value = getattr(cfg, f.name)
        if not all_fields and value == f.default:
            continue
        out.append(f"--{f.name}={'None' if value is None else value}")
    return out


# ------------------------------------------------------------------------------------------------
# help


def field_docs() -> dict[str, str]:
    """{field name: its one-line docstring}, read from this module's source."""
    tree = ast.parse(inspect.getsource(TrainConfig))
    body = tree.body[0].body  # type: ignore[attr-defined]
    docs: dict[str, str] = {}
    for node, nxt in itertools.pairwise(body):
        if (
            isinstance(node, ast.AnnAssign)
            and isinstance(node.target, ast.Name)
            and isinstance(nxt, ast.Expr)
            and isinstance(nxt.value, ast.Constant)
            and isinstance(nxt.value.value, str)
        ):
            docs[node.target.id] = nxt.value.value.strip()
    return docs


def usage() -> str:
    """The --help text: every flag with its default and docstring."""
    docs = field_docs()
    lines = [
        "usage: eks-fsdp train [--flag value | --flag=value | --bool_flag] ...  (in a pod: python -m"
        " training.finetune, under torchrun)",
        "",
    ]
    for f in dataclasses.fields(TrainConfig):
        lines.append(f"  --{f.name} (default {f.default!r})")
        lines.append(f"      {docs.get(f.name, '')}")
    return "\n".join(lines)
