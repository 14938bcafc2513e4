"""Export the trained model for serving: sharded safetensors, config, generation config, tokenizer.

`export_model` writes the Hugging Face layout that `AutoModelForCausalLM.from_pretrained`, vLLM
and TGI load: `model-0000k-of-0000n.safetensors` shards of at most `--export_max_shard_gb` with
`model.safetensors.index.json` (one `model.safetensors` when everything fits one shard, as
`save_pretrained` does), `config.json` (the export dtype), `generation_config.json` (the base
model's when it has one), and the tokenizer with its chat template.

Gathered in pieces: the shards are planned from the parameters' global shapes before anything
is gathered; then every rank all-gathers one parameter at a time (`DTensor.full_tensor`, the
same order on every rank) and rank 0 keeps it, cast to the export dtype, only until its shard
is written. Rank 0 holds at most one shard plus one parameter, never the whole model (a 70B
model in bf16 is 140 GB; a shard is 5 GB by default), and the other ranks one parameter.
Tied weights are written once (the input embedding), as `save_pretrained` does.

With `--use_peft` the export is the adapter folder `<output_dir>/adapter` (only the trainable
parameters are gathered), which `peft.PeftModel.from_pretrained(base, folder)` loads, and with
`--merge_adapters` also `<output_dir>/hf`: each adapted layer's weight merged as peft's
`merge_and_unload` does (W + scaling * B @ A, in fp32), streamed the same way.

With `--output_dir s3://bucket/prefix` the same folders are made in a local staging folder
(`training.s3.transfer.OutputDir`) and each file is uploaded as soon as it is written and then
deleted, so the staging disk holds one shard at a time; `config.json` goes last, and objects of
an earlier export under the prefix that this one did not write (another sharding) are deleted.
"""

from __future__ import annotations

import copy
import json
import os
import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

from training.dist import barrier

if TYPE_CHECKING:
    from training.config import TrainConfig
    from training.model import ModelSpec
    from training.s3.uri import S3Uri

SINGLE_FILE = "model.safetensors"
INDEX_FILE = "model.safetensors.index.json"
EXPORT_DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
_LORA_ADAPTER = "default"  # training.lora.ADAPTER_NAME (that module needs peft; this one not)


@dataclass
class ExportReport:
    """What `export_model` wrote (rank 0)."""

    folder: Path
    files: list[str]
    """The weight files, in order."""
    total_bytes: int
    """Bytes of all exported tensors (the index's total_size)."""
    max_held_bytes: int
    """The most tensor bytes rank 0 held at once while gathering."""


def export_dtype(choice: str, device: torch.device, param_dtype: torch.dtype) -> torch.dtype:
    """--export_dtype: auto is bf16 on a GPU and the parameters' own dtype elsewhere."""
    if choice == "auto":
        return torch.bfloat16 if device.type == "cuda" else param_dtype
    return EXPORT_DTYPES[choice]


def shard_name(i: int, n: int) -> str:
    return SINGLE_FILE if n == 1 else f"model-{i + 1:05d}-of-{n:05d}.safetensors"


def plan_shards(sizes: list[tuple[str, int]], max_bytes: int) -> list[list[str]]:
    """Names grouped into shards in order, each at most `max_bytes` unless one tensor is larger
    (it then gets a shard of its own), as `save_pretrained` splits."""
    shards: list[list[str]] = []
    used = max_bytes + 1
    for name, size in sizes:
        if used + size > max_bytes and (not shards or shards[-1]):
            shards.append([])
            used = 0
        shards[-1].append(name)
        used += size
    return shards


@dataclass(frozen=True)
class _Entry:
    """One exported tensor: its name, global shape, and the model tensors it is made of."""

    name: str
    shape: tuple[int, ...]
    base: Any
    lora: tuple[Any, Any, float] | None = None
    """(lora_A weight, lora_B weight, scaling) to merge into `base`."""


def _entries(model: nn.Module, merge_adapters: bool) -> list[_Entry]:
    """The tensors to export, in state-dict order: tied weights once; with `merge_adapters`
    each adapted linear layer as its merged weight under the base model's own name."""
    sd = model.state_dict(keep_vars=True)
    seen: dict[int, str] = {}
    out = []
    for key, value in sd.items():
        if ".lora_" in key:
            continue
        if id(value) in seen:
            first = seen[id(value)]
            if ".base_layer." in key or ".base_layer." in first:
                # an adapted layer tied to another (lm_head on tied embeddings): the tensor is
                # written once, so one of the two would lose or wrongly gain the adapter's delta
                raise ValueError(f"{key}: adapted, and tied to {first}; cannot be exported")
            continue
        seen[id(value)] = key
        lora = None
        if ".base_layer." in key:
            if not merge_adapters:
                raise ValueError(f"{key}: an adapted model is exported with merge_adapters")
            module_name = key.split(".base_layer.")[0]
            if key.endswith(".base_layer.weight"):
                layer = model.get_submodule(module_name)
                a = sd[f"{module_name}.lora_A.{_LORA_ADAPTER}.weight"]
                b = sd[f"{module_name}.lora_B.{_LORA_ADAPTER}.weight"]
                lora = (a, b, float(layer.scaling[_LORA_ADAPTER]))  # type: ignore[index]
            key = key.replace(".base_layer.", ".")
        out.append(_Entry(key, tuple(value.shape), value, lora))
    return out


def _full(t: Any) -> torch.Tensor:
    """The whole tensor (collective for a DTensor: every rank calls it in the same order)."""
    from torch.distributed.tensor import DTensor

    if isinstance(t, DTensor):
        if t.device.type != t.device_mesh.device_type:  # CPU-offloaded shards
            t = t.to(t.device_mesh.device_type)
        t = t.full_tensor()
    return t.detach()


def _materialize(entry: _Entry, dtype: torch.dtype) -> torch.Tensor:
    weight = _full(entry.base)
    if entry.lora is not None:
        a, b, scaling = entry.lora
        delta = _full(b).float() @ _full(a).float()
        weight = weight.float() + scaling * delta
    return weight.to(dtype)


def _gathered(
    entries: list[_Entry], dtype: torch.dtype, main: bool
) -> Iterator[tuple[str, torch.Tensor | None]]:
    for entry in entries:
        tensor = _materialize(entry, dtype)
        yield entry.name, tensor.to("cpu").contiguous() if main else None
        del tensor


def export_model(
    model: nn.Module,
    config: Any,
    tokenizer: Any,
    out_dir: Path,
    *,
    dtype: torch.dtype,
    max_shard_bytes: int,
    merge_adapters: bool = False,
    generation_source: str | None = None,
    generation_revision: str | None = None,
    sink: Callable[[Path], None] | None = None,
) -> ExportReport | None:
    """Write the servable folder `out_dir` (collective); rank 0 returns what it wrote.

    `sink` (rank 0): called with each file once it is complete, weights first and config.json
    last (an upload to S3 that then deletes the local file)."""
    from safetensors.torch import save_file

    main = not dist.is_initialized() or dist.get_rank() == 0
    entries = _entries(model, merge_adapters)
    width = torch.empty((), dtype=dtype).element_size()
    sizes = [(e.name, width * _numel(e.shape)) for e in entries]
    shards = plan_shards(sizes, max_shard_bytes)
    shard_of = {name: i for i, names in enumerate(shards) for name in names}
    size_of = dict(sizes)
    if main:
        out_dir.mkdir(parents=True, exist_ok=True)
        for stale in [*out_dir.glob("model*.safetensors"), out_dir / INDEX_FILE]:
            stale.unlink(missing_ok=True)  # an earlier export with another sharding
    held: dict[str, torch.Tensor] = {}
    held_bytes = max_held = 0
    for name, tensor in _gathered(entries, dtype, main):
        if tensor is None:
            continue
        held[name] = tensor
        held_bytes += size_of[name]
        max_held = max(max_held, held_bytes)
        i = shard_of[name]
        if name == shards[i][-1]:  # the shard is complete: write it, let its tensors go
            path = out_dir / shard_name(i, len(shards))
            save_file(held, str(path), metadata={"format": "pt"})
            readable_like_the_rest(path)
            held, held_bytes = {}, 0
            if sink is not None:
                sink(path)
    report = None
    if main:
        files = [shard_name(i, len(shards)) for i in range(len(shards))]
        total = sum(size_of.values())
        if len(shards) > 1:
            index = {
                "metadata": {"total_size": total},
                "weight_map": {name: files[shard_of[name]] for name, _ in sizes},
            }
            (out_dir / INDEX_FILE).write_text(json.dumps(index, indent=2) + "\n", encoding="utf-8")
        _write_configs(
            model, config, tokenizer, out_dir, dtype, generation_source, generation_revision
        )
        if sink is not None:
            rest = sorted(p for p in out_dir.rglob("*") if p.is_file() and p.name not in files)
            for path in sorted(rest, key=lambda p: p.name == "config.json"):
                sink(path)
        report = ExportReport(out_dir, files, total, max_held)
    barrier()
    return report


def readable_like_the_rest(path: Path) -> None:
    """Give `path` the mode a file created with open() gets in its folder: 0666 less the umask
    (and whatever the folder's default ACL takes away), as config.json and the tokenizer files
    get. safetensors' save_file creates its file 0600, owner only, so a server under another
    uid on shared storage read the config and failed on the weights. The mode is probed with
    a file of our own, not read with os.umask, which sets the process-wide umask for a moment
    (a race with any thread creating files, the background checkpoint writer's included)."""
    probe = path.with_name(f".{path.name}.mode")
    fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o666)
    try:
        mode = os.fstat(fd).st_mode & 0o777
    finally:
        os.close(fd)
        probe.unlink()
    os.chmod(path, mode)


def _numel(shape: tuple[int, ...]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def _model_class(model: nn.Module) -> type:
    """The model's own class: `fully_shard` and `replicate` swap in a subclass of it."""
    from torch.distributed.fsdp import FSDPModule

    return next(c for c in type(model).__mro__ if not issubclass(c, FSDPModule))


def _write_configs(
    model: nn.Module,
    config: Any,
    tokenizer: Any,
    out_dir: Path,
    dtype: torch.dtype,
    generation_source: str | None,
    generation_revision: str | None = None,
) -> None:
    """config.json (dtype, architectures), generation_config.json and the tokenizer (rank 0)."""
    from transformers import GenerationConfig

    config = copy.deepcopy(config)
    config.dtype = dtype
    config.architectures = [_model_class(model).__name__]
    config.save_pretrained(str(out_dir))
    generation = None
    if generation_source is not None:
        try:
            generation = GenerationConfig.from_pretrained(
                generation_source, revision=generation_revision
            )
        except (OSError, ValueError):
            generation = None  # the base has none: derived from its config below
    if generation is None:
        generation = GenerationConfig.from_model_config(config)
    for attr in ("bos_token_id", "eos_token_id", "pad_token_id"):  # where generation stops
        if getattr(generation, attr, None) is None and tokenizer is not None:
            setattr(generation, attr, getattr(tokenizer, attr, None))
    generation.save_pretrained(str(out_dir))
    if tokenizer is not None:
        tokenizer.save_pretrained(str(out_dir))


def export_adapter(model: nn.Module, peft_model: Any, tokenizer: Any, out_dir: Path) -> Path | None:
    """Write the adapter folder `out_dir` (collective): only the trainable parameters are
    gathered. Returns the folder on rank 0, None elsewhere."""
    from training.lora import ADAPTER_WEIGHTS, write_adapter_folder

    options = StateDictOptions(full_state_dict=True, cpu_offload=True, ignore_frozen_params=True)
    trainable = get_model_state_dict(model, options=options)
    path = None
    if not dist.is_initialized() or dist.get_rank() == 0:
        path = write_adapter_folder(peft_model, trainable, tokenizer, out_dir)
        readable_like_the_rest(path / ADAPTER_WEIGHTS)
    barrier()
    return path


class _S3Sink:
    """Uploads each exported file under `uri` and deletes the local copy (rank 0); `close`
    deletes what an earlier export left under `uri` and this one did not write."""

    def __init__(self, folder: Path, uri: S3Uri) -> None:
        self.folder, self.uri = folder, uri
        self.sent: set[str] = set()

    def __call__(self, path: Path) -> None:
        from training.s3.transfer import upload_file

        name = str(path.relative_to(self.folder))
        upload_file(path, self.uri / name)
        path.unlink()
        self.sent.add(name)

    def close(self) -> S3Uri:
        from training.s3.transfer import delete_keys, list_keys

        delete_keys(self.uri, [n for n, _ in list_keys(self.uri) if n not in self.sent])
        return self.uri


def export_run(
    cfg: TrainConfig,
    model: nn.Module,
    peft_model: Any,
    spec: ModelSpec,
    tokenizer: Any,
    device: torch.device,
) -> list[tuple[str, Any]]:
    """What `--save_model` writes under --output_dir (collective): `hf/` (the model), or with
    --use_peft `adapter/` and, with --merge_adapters, `hf/` merged. Rank 0 returns
    [(what, folder)] (an S3Uri for an s3:// --output_dir), the others []."""
    from training.s3.transfer import OutputDir, upload_folder

    target = OutputDir(cfg.output_dir)
    out = target.local
    main = not dist.is_initialized() or dist.get_rank() == 0
    written: list[tuple[str, Any]] = []
    if peft_model is not None:
        path = export_adapter(model, peft_model, tokenizer, out / "adapter")
        where: Any = path
        if path is not None and target.uri is not None:
            upload_folder(path, target.uri / "adapter", last=["adapter_config.json"])
            shutil.rmtree(path)
            where = target.uri / "adapter"
        written += [("exported adapter", where)] if where is not None else []
        if not cfg.merge_adapters:
            return written
    sink = _S3Sink(out / "hf", target.uri / "hf") if target.uri is not None and main else None
    report = export_model(
        model,
        spec.config,
        tokenizer,
        out / "hf",
        dtype=export_dtype(cfg.export_dtype, device, spec.dtype),
        max_shard_bytes=int(cfg.export_max_shard_gb * 1e9),
        merge_adapters=peft_model is not None,
        generation_source=None if spec.is_preset else spec.name,
        generation_revision=spec.revision,
        sink=sink,
    )
    if report is not None:
        what = "merged model" if peft_model is not None else "exported model"
        written.append((what, report.folder if sink is None else sink.close()))
    return written
