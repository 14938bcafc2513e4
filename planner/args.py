"""The planner's command-line arguments: the parsers and flags (or ``--stack``) -> a PlanInput.

Shared by ``planner.cli`` (``eks-fsdp plan`` and its ``calibrate`` command) and
``planner.calibrate.prediction_before_after`` (planner flags from the scaling study), so
neither of those imports the other. Bad input raises ``UsageError`` naming the flag (or the
stack key).
"""

from __future__ import annotations

import argparse
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

from eks_fsdp_cli.errors import Parser, suggest
from planner.assumptions import BUNDLED_DATASETS, DATASETS, DEFAULT, HF_DATASETS
from planner.catalog import lookup
from planner.lora import LINEAR, LoraSpec
from planner.memory import AC_MODES, PRECISIONS, STRATEGIES
from planner.predict import ON_DEMAND, PlanInput, price_basis
from planner.preference import job_preference
from planner.shapes import BUILTIN, ModelShape, ShapeError, resolve, training_presets
from planner.storage import Storage, from_stack_config
from planner.storage import parse as parse_storage

DESCRIPTION = "``eks-fsdp plan``: will it fit, how fast, how well it scales, what an epoch costs."
"""The help's description: the first line of ``planner.cli``'s docstring."""


class UsageError(Exception):
    """Bad input: the message names the flag (or the stack key)."""


class _Parser(Parser):
    def error(self, message: str) -> NoReturn:
        raise UsageError(self.explain(message))  # "did you mean --stack?" (eks_fsdp_cli.errors)


_HF_IDS = (
    (r"llama-2-7b", "llama2-7b"),
    (r"llama-2-13b", "llama2-13b"),
    (r"llama-2-70b", "llama2-70b"),
    (r"llama-3(\.\d)?-8b", "llama3-8b"),
    (r"llama-3(\.\d)?-70b", "llama3-70b"),
)


def builtin_for_hub_id(name: str) -> str:
    """``meta-llama/Llama-2-7b-hf`` -> ``llama2-7b``; other names unchanged."""
    lowered = name.lower()
    for pattern, key in _HF_IDS:
        if re.search(pattern, lowered):
            return key
    return name


def parser() -> argparse.ArgumentParser:
    p = _Parser(prog="eks-fsdp plan", description=DESCRIPTION)
    p.add_argument(
        "--model",
        help="llama2-7b|llama2-13b|llama2-70b|llama3-8b|llama3-70b, a "
        "training preset (tiny-llama), or a path to a Hugging Face config.json",
    )
    p.add_argument("--instance", help="EC2 instance type from infra/instances.py, or local-cpu")
    p.add_argument("--nodes", help="comma-separated node counts, e.g. 1,2,4,8,16")
    p.add_argument(
        "--stack",
        help="read instance, nodes, model, batch, seq, sharding, dataset and epochs from the "
        "stack's example job jobs/examples/<stack>.yaml on Pulumi.<stack>.yaml (flags given "
        "explicitly win)",
    )
    p.add_argument(
        "--job",
        type=Path,
        help="plan this job file instead (on its stack, or on --stack)",
    )
    p.add_argument("--sharding", choices=STRATEGIES, help="default FULL_SHARD")
    p.add_argument(
        "--hsdp-group", type=int, help="HYBRID_SHARD shard-group size (default: GPUs per node)"
    )
    p.add_argument(
        "--ac",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="activation checkpointing per decoder layer (default on)",
    )
    p.add_argument(
        "--ac-mode",
        choices=(*AC_MODES, "none"),
        help="how checkpointed layers recompute, as training's --ac_mode: full (default; the "
        "layer's input is kept) or selective (op-level SAC: attention and every other matmul "
        "kept)",
    )
    p.add_argument("--seq", type=int, help="tokens per sample (default 4096)")
    p.add_argument("--batch", type=int, help="micro-batch per GPU (default 3)")
    p.add_argument(
        "--grad-accum",
        type=int,
        default=None,
        help="micro-batches per optimizer step (default 1; --stack/--job: the job's)",
    )
    p.add_argument(
        "--precision",
        choices=tuple(PRECISIONS),
        default="mixed",
        help="mixed (bf16 compute, fp32 master), pure_bf16, fp32",
    )
    data = p.add_mutually_exclusive_group()
    data.add_argument("--dataset-tokens", type=int, help="training tokens per epoch")
    data.add_argument(
        "--dataset",
        help=f"named dataset ({', '.join([*DATASETS, *BUNDLED_DATASETS])}, default samsum; "
        "none: no epoch model)",
    )
    p.add_argument("--epochs", type=int, help="epochs in the job (default 1)")
    p.add_argument(
        "--storage",
        help="checkpoint target: node-disk (default), SCRATCH_2:<GiB> or "
        "PERSISTENT_2:<GiB>:<MB/s/TiB> (FSx for Lustre; --stack: its sharedStorage)",
    )
    p.add_argument("--price", type=float, help="USD per node-hour (default: catalog on-demand)")
    lora = p.add_argument_group("LoRA on a frozen base (training's --use_peft)")
    lora.add_argument(
        "--lora",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="plan a LoRA (the --lora-* flags imply it; --stack: on when the job has "
        "--use_peft); --no-lora plans a full fine-tune",
    )
    lora.add_argument("--lora-r", type=int, help="rank of each adapter (default 8, as --lora_r)")
    lora.add_argument(
        "--lora-targets",
        help=f"adapted layers, comma-separated ({','.join(LINEAR)}) or all-linear "
        "(default q_proj,v_proj, as --lora_target_modules)",
    )
    lora.add_argument(
        "--lora-dropout",
        type=float,
        help="as --lora_dropout (default 0.05); 0 keeps fewer activations",
    )
    p.add_argument(
        "--json", action="store_true", help="print a JSON list, one object per node count"
    )
    p.add_argument("--plot", type=Path, help="write a PNG: memory stack and predicted scaling")
    p.add_argument(
        "--calibration",
        type=Path,
        help="efficiencies fitted by `eks-fsdp plan calibrate` for this instance type",
    )
    p.add_argument(
        "--preflight",
        type=Path,
        action="append",
        default=[],
        help="preflight JSON (training.preflight --json, or <output_dir>/preflight.json), "
        "repeatable; calibrate: the run's; plan (with --calibration): the nodes to predict on",
    )
    return p


def calibrate_parser() -> argparse.ArgumentParser:
    """``eks-fsdp plan calibrate``: the plan flags of the run, plus its measurements."""
    p = parser()
    p.prog = "eks-fsdp plan calibrate"
    p.description = "Fit compute and network efficiencies from a preflight and a real run."
    p.add_argument("--run", type=Path, required=True, help="the run's output_dir (metrics.jsonl)")
    p.add_argument("--out", type=Path, help="write the calibration JSON here")
    p.add_argument(
        "--step-stat",
        choices=("median", "min"),
        default="median",
        help="the run's step time: median (dedicated nodes) or min (a shared machine)",
    )
    return p


@dataclass
class _Resolved:
    inp: PlanInput
    nodes: list[int]
    limits: dict[str, int | None] | None = None
    """A job file's ``max_steps`` (maxTrainStep) and ``checkpoint_every``; None without one."""
    device: str = "cuda"
    """A job file's ``device``: ``cpu`` for a job the GPU figures do not describe."""
    min_nodes: int | None = None
    """An elastic job file's ``minWorkers`` (its HSDP group must divide every world)."""


def _positive(value: int | None, flag: str, minimum: int = 1) -> None:
    if value is not None and value < minimum:
        raise UsageError(f"{flag} {value}: must be >= {minimum}")


def _nodes(text: str) -> list[int]:
    try:
        counts = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise UsageError(f"--nodes {text}: comma-separated positive integers, e.g. 1,2,4") from None
    if not counts or any(n < 1 for n in counts):
        raise UsageError(f"--nodes {text}: comma-separated positive integers, e.g. 1,2,4")
    return counts


def job_values(job: Any, flag: str) -> dict[str, Any]:
    """The plan's inputs from a loaded job (``jobs.schema.JobSpec``, read duck-typed: the job
    schema sits above the planner; ``flag`` names it in errors)."""
    cfg = job.platform
    stack = cfg.stack
    group = job.group
    return {
        "model": builtin_for_hub_id(job.model),
        "instance": group.instance_type,
        "nodes": str(job.workers),
        "batch": job.batch_size,
        "seq": job.context_length,
        "sharding": job.sharding_strategy,
        "dataset": job.dataset,
        "epochs": job.num_epochs,
        "price": group.price_per_hour,
        "price_basis": price_basis(group),
        "storage": from_stack_config(getattr(cfg, "shared_storage", None)),
        **_stack_ac(stack, job.extra_args),
        **_stack_lora(stack, job.extra_args),
        **_stack_data(stack, job.dataset, job.extra_args),
        **job_preference(job.extra_args, job.dataset, job.context_length),
        "limits": {"max_steps": job.max_train_step, "checkpoint_every": job.checkpoint_every},
        "device": job.device,
        "min_nodes": job.min_workers,
    }


_DATA_FLAGS = (
    "hf_dataset",
    "hf_split",
    "gradient_accumulation_steps",
    "hsdp",
    "sharding_group_size",
)


def _stack_data(stack: str, dataset: str, extra_args: tuple[str, ...]) -> dict[str, Any]:
    """The job's dataset as the planner names it (a ``--dataset hf_dataset`` whose
    ``--hf_dataset``/``--hf_split`` is a row of ``planner.assumptions.HF_DATASETS``) and its
    gradient accumulation, read as ``_stack_ac`` reads AC."""
    from training.config import ConfigError, parse_args

    ours = [a for a in extra_args if a[2:].partition("=")[0].replace("-", "_") in _DATA_FLAGS]
    if any(a.startswith("--hf_") for a in ours):
        ours.append(f"--dataset={dataset}")
    try:
        cfg = parse_args(ours)
    except ConfigError as e:
        raise UsageError(f"--stack {stack}: the job's args: {e}") from None
    out: dict[str, Any] = {"grad_accum": cfg.gradient_accumulation_steps}
    if cfg.hsdp and cfg.sharding_group_size > 0:
        out["hsdp_group"] = cfg.sharding_group_size
    if dataset == "hf_dataset":
        out["dataset"] = HF_DATASETS.get((cfg.hf_dataset, cfg.hf_split), cfg.hf_dataset)
    return out


_AC_FLAGS = ("fsdp_activation_checkpointing", "nofsdp_activation_checkpointing", "ac_mode")


def _stack_ac(stack: str, extra_args: tuple[str, ...]) -> dict[str, Any]:
    """The job's activation checkpointing, read from its training flags (a job file's
    ``args``, each ``--flag=value``) with the training CLI's own parser and
    defaults (``training.config``: pure Python, no torch). Only the AC flags are parsed: the
    others' checks need the rest of the job's command (``--data_path`` needs its dataset)."""
    from training.config import ConfigError, parse_args

    ours = [a for a in extra_args if a[2:].partition("=")[0].replace("-", "_") in _AC_FLAGS]
    try:
        cfg = parse_args(ours)
    except ConfigError as e:
        raise UsageError(f"--stack {stack}: the job's args: {e}") from None
    on = cfg.fsdp_activation_checkpointing and cfg.ac_mode != "none"
    return {"ac": on, "ac_mode": cfg.ac_mode if on else None}


_LORA_FLAGS = ("use_peft", "peft_method", "lora_r", "lora_dropout", "lora_target_modules")


def _stack_lora(stack: str, extra_args: tuple[str, ...]) -> dict[str, Any]:
    """The job's LoRA (``--use_peft`` and its flags), read as ``_stack_ac`` reads AC."""
    from training.config import ConfigError, parse_args

    ours = [a for a in extra_args if a[2:].partition("=")[0].replace("-", "_") in _LORA_FLAGS]
    try:
        cfg = parse_args(ours)
    except ConfigError as e:
        raise UsageError(f"--stack {stack}: the job's args: {e}") from None
    if not cfg.use_peft:
        return {}
    return {
        "lora": {
            "r": cfg.lora_r,
            "targets": cfg.lora_target_modules,
            "dropout": cfg.lora_dropout,
            "flag": f"--stack {stack}: the job's --lora_target_modules",
        }
    }


def _lora_spec(args: argparse.Namespace, stack: dict[str, Any] | None) -> LoraSpec | None:
    """--lora and its flags over the stack job's LoRA; None: a full fine-tune."""
    given = [f for f in ("lora_r", "lora_targets", "lora_dropout") if getattr(args, f) is not None]
    if args.lora is False:
        if given:
            flag = "--" + given[0].replace("_", "-")
            raise UsageError(f"--no-lora: contradicts {flag} (drop one)")
        return None
    if not (args.lora or given or stack):
        return None
    base = stack or {"r": 8, "targets": "q_proj,v_proj", "dropout": 0.05}
    r = args.lora_r if args.lora_r is not None else base["r"]
    _positive(r, "--lora-r")
    dropout = args.lora_dropout if args.lora_dropout is not None else base["dropout"]
    if not 0.0 <= dropout < 1.0:
        raise UsageError(f"--lora-dropout {dropout}: must be in [0, 1)")
    text = args.lora_targets if args.lora_targets is not None else base["targets"]
    flag = "--lora-targets" if args.lora_targets is not None else base.get("flag", "--lora-targets")
    if text.strip() == "all-linear":
        targets = LINEAR
    else:
        targets = tuple(t.strip() for t in text.split(",") if t.strip())
    unknown = [t for t in targets if t not in LINEAR]
    if unknown or not targets:
        raise UsageError(
            f"{flag} {text}: the planner models {', '.join(LINEAR)} or all-linear"
            + (f" (not {', '.join(unknown)})" if unknown else "")
        )
    return LoraSpec(r=r, targets=tuple(dict.fromkeys(targets)), dropout=dropout > 0)


def _shape(model: str) -> ModelShape:
    """``--model``: a built-in name, a training preset, a config.json, or the Hugging Face id a
    built-in stands for (``meta-llama/Llama-2-7b-hf``, as ``--stack`` maps a job's model); an
    unknown name gets the closest known one."""
    try:
        return resolve(model)
    except ShapeError as e:
        hub = builtin_for_hub_id(model) if "/" in model and not Path(model).exists() else model
        if hub != model:
            return resolve(hub)
        known = [*BUILTIN, *training_presets()]
        raise UsageError(
            str(e).replace(": unknown", ": unknown" + suggest(model, known), 1)
        ) from None


def _named_tokens(dataset: str, model: str, *, explicit: bool) -> int:
    """Training tokens per epoch of a named dataset (``planner.assumptions``): a hub dataset's
    row of ``DATASETS``, or a bundled one's count with the tiny presets' tokenizer, which only
    those presets use (``training.data.load_tokenizer``). 0 when unknown; ``explicit`` (the
    ``--dataset`` flag rather than a job file's key): a UsageError instead."""
    key = {"samsum_dataset": "samsum"}.get(dataset, dataset)
    if key in DATASETS:
        return DATASETS[key]
    if key in BUNDLED_DATASETS:
        if model in training_presets():
            return BUNDLED_DATASETS[key]
        if explicit:
            raise UsageError(
                f"--dataset {dataset}: counted with the tiny presets' bundled tokenizer only, "
                f"not {model}'s (give --dataset-tokens)"
            )
        return 0
    if explicit:
        raise UsageError(
            f"--dataset {dataset}: unknown (known: {', '.join([*DATASETS, *BUNDLED_DATASETS])}; "
            "or give --dataset-tokens)"
        )
    return 0


def resolve_args(args: argparse.Namespace, preset: dict[str, Any] | None = None) -> _Resolved:
    """Flags (and the stack, or ``preset``: ``job_values`` of a loaded job file) -> a
    PlanInput; UsageError naming the flag on bad input."""
    if preset is not None:
        values: dict[str, Any] = dict(preset)
    else:
        values = {}  # --stack / --job: the command loads the job (planner.cli.job_preset)
    for key in ("model", "instance", "nodes", "batch", "seq", "sharding", "epochs", "price"):
        if getattr(args, key) is not None:
            values[key] = getattr(args, key)
    if args.dataset is not None or args.dataset_tokens is not None:
        values.pop("dataset", None)
    for flag in ("model", "instance", "nodes"):
        if values.get(flag) is None:
            raise UsageError(f"--{flag} is required (or --stack / --job)")
    _positive(values.get("batch"), "--batch")
    _positive(values.get("seq"), "--seq")
    _positive(values.get("epochs"), "--epochs")
    _positive(args.grad_accum, "--grad-accum")
    grad_accum = args.grad_accum if args.grad_accum is not None else values.get("grad_accum", 1)
    _positive(args.hsdp_group, "--hsdp-group")
    _positive(args.dataset_tokens, "--dataset-tokens")
    # Explicit flags win over the stack's job; --ac-mode full|selective implies --ac.
    if args.ac_mode == "none" and args.ac:
        raise UsageError("--ac-mode none: contradicts --ac (drop one)")
    if args.ac_mode not in (None, "none") and args.ac is False:
        raise UsageError(f"--ac-mode {args.ac_mode}: needs activation checkpointing (drop --no-ac)")
    if args.ac_mode is not None:
        ac = args.ac_mode != "none"
    else:
        ac = values.get("ac", True) if args.ac is None else args.ac
    ac_mode = args.ac_mode if args.ac_mode not in (None, "none") else values.get("ac_mode")
    lora = _lora_spec(args, values.get("lora"))
    if lora is not None and ac and ac_mode == "selective":
        raise UsageError(
            "--ac-mode selective: not modelled for LoRA (its rule counts the adapters' matmuls "
            "too); use --ac-mode full"
        )
    if values.get("price") is not None and values["price"] < 0:
        raise UsageError(f"--price {values['price']}: must be >= 0")
    nodes = _nodes(str(values["nodes"]))
    shape = _shape(str(values["model"]))
    try:
        instance = lookup(str(values["instance"]))
    except KeyError as e:
        raise UsageError(f"--instance {values['instance']}: {e.args[0]}") from None
    seq = int(values.get("seq") or 4096)
    if seq > shape.max_position_embeddings:
        raise UsageError(
            f"--seq {seq}: longer than the model's max_position_embeddings "
            f"{shape.max_position_embeddings}"
        )
    dataset = args.dataset if args.dataset is not None else values.get("dataset")
    tokens = args.dataset_tokens or 0
    if dataset is None and not tokens:
        dataset = "samsum"
    if dataset == "none":
        dataset = None
    if dataset is not None:
        tokens = _named_tokens(dataset, str(values["model"]), explicit=args.dataset is not None)
    if values.get("preference") is not None and args.dataset is None and not args.dataset_tokens:
        tokens = values["pairs_tokens"]  # planner.preference: pairs x seq
    storage: Storage = values.get("storage") or Storage()
    if args.storage is not None:
        try:
            storage = parse_storage(args.storage)
        except ValueError as e:
            raise UsageError(str(e)) from None
    strategy = values.get("sharding") or "FULL_SHARD"
    gpus = instance.gpus
    hsdp_group = args.hsdp_group if args.hsdp_group is not None else values.get("hsdp_group")
    if args.hsdp_group is not None:
        if strategy != "HYBRID_SHARD":
            raise UsageError("--hsdp-group needs --sharding HYBRID_SHARD")
        for n in nodes:
            if (n * gpus) % args.hsdp_group:
                raise UsageError(
                    f"--hsdp-group {args.hsdp_group}: does not divide "
                    f"{n} nodes x {gpus} GPUs = {n * gpus}"
                )
    inp = PlanInput(
        shape=shape,
        instance=instance,
        precision=PRECISIONS[args.precision],
        strategy=strategy,
        hsdp_group=hsdp_group,
        ac=ac,
        ac_mode=ac_mode or "full",
        batch=int(values.get("batch") or 3),
        seq=seq,
        grad_accum=grad_accum,
        dataset_tokens=tokens,
        epochs=int(values.get("epochs") or 1),
        usd_per_hour=values.get("price"),
        price_basis="--price" if args.price is not None else values.get("price_basis") or ON_DEMAND,
        storage=storage,
        assumptions=DEFAULT,
        lora=lora,
        preference=values.get("preference"),
    )
    # a CPU job planned on an --instance named explicitly: its GPU figures are what was asked
    device = "cuda" if args.instance is not None else values.get("device", "cuda")
    return _Resolved(
        inp=inp,
        nodes=nodes,
        limits=values.get("limits"),
        device=device,
        min_nodes=values.get("min_nodes"),
    )


def read_reports(paths: list[Path]) -> list[dict[str, Any]]:
    """The ``--preflight`` JSON files; UsageError naming the file that cannot be read."""
    reports = []
    for path in paths:
        try:
            reports.append(json.loads(path.read_text()))
        except (OSError, ValueError) as e:
            raise UsageError(f"--preflight {path}: {e}") from None
    return reports
