"""Distributed checkpoints (torch.distributed.checkpoint), written atomically; preemption.

A checkpoint is a folder `<dist_checkpoint_root_folder>/<dist_checkpoint_folder>/step-000123/`
holding the DCP shards of every `Stateful` handed in (model + optimizer through
`get_state_dict`/`set_state_dict`, the LR scheduler, the data position, the trainer's counters),
a human-readable `meta.json`, and a `COMPLETE` marker:

1. all ranks write into `step-000123.tmp/`;
2. after `dcp.save` returns everywhere (its metadata is written last, by rank 0), rank 0 renames
   the folder to `step-000123/` and then writes `COMPLETE`;
3. `latest_complete` only ever returns folders with the marker, so a crash mid-write leaves the
   previous checkpoint as the newest loadable one.

DCP stores tensors by their global shape, so a checkpoint loads into any world size or sharding.
The folder must be on storage every rank sees (a shared file system on multi-node jobs).

`StopSignal` turns SIGTERM (preemption, an elastic membership change) into a flag the training
loop reads at step boundaries: it finishes the step, checkpoints and exits cleanly.
"""

from __future__ import annotations

import json
import re
import shutil
import signal
import time
from pathlib import Path
from types import FrameType
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch import nn
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
from torch.distributed.checkpoint.stateful import Stateful

from training.dist import barrier

KEEP_LAST = 2
"""Complete checkpoints kept; older ones are deleted after a newer one is complete."""
MARKER = "COMPLETE"
_NAME = re.compile(r"^step-(\d{6,})$")


class ModelOptimizerState(Stateful):
    """Model and optimizer state in DCP's sharded form (works with and without FSDP)."""

    def __init__(self, model: nn.Module, optimizer: torch.optim.Optimizer) -> None:
        self.model = model
        self.optimizer = optimizer

    def state_dict(self) -> dict[str, Any]:
        model_sd, optim_sd = get_state_dict(self.model, self.optimizer)
        return {"model": model_sd, "optimizer": optim_sd}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        set_state_dict(
            self.model,
            self.optimizer,
            model_state_dict=state_dict["model"],
            optim_state_dict=state_dict["optimizer"],
        )


def step_dir(root: Path, step: int) -> Path:
    return root / f"step-{step:06d}"


def latest_complete(root: Path) -> Path | None:
    """The complete checkpoint with the highest step under `root` (partial ones are ignored)."""
    if not root.is_dir():
        return None
    best: tuple[int, Path] | None = None
    for child in root.iterdir():
        m = _NAME.match(child.name)
        if m and child.is_dir() and (child / MARKER).is_file():
            step = int(m.group(1))
            if best is None or step > best[0]:
                best = (step, child)
    return best[1] if best else None


def save(root: Path, step: int, state: dict[str, Stateful], meta: dict[str, Any]) -> Path:
    """Write `state` to `root/step-NNNNNN/` atomically (collective: every rank calls it)."""
    final = step_dir(root, step)
    tmp = final.with_name(final.name + ".tmp")
    main = not dist.is_initialized() or dist.get_rank() == 0
    if main:
        root.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(tmp, ignore_errors=True)
    barrier()
    dcp.save(state, checkpoint_id=str(tmp))
    barrier()
    if main:
        (tmp / "meta.json").write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")
        if final.exists():
            shutil.rmtree(final)
        tmp.rename(final)
        with (final / MARKER).open("w", encoding="utf-8") as f:
            f.write(f"{time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}\n")
            f.flush()
        _prune(root, keep=KEEP_LAST)
    barrier()
    return final


class CheckpointError(ValueError):
    """A checkpoint that does not fit this run (another model, say); one line naming --resume."""


def load(path: Path, state: dict[str, Stateful]) -> dict[str, Any]:
    """Load `state` in place from a complete checkpoint; returns its meta.json."""
    from torch.distributed.checkpoint.api import CheckpointException

    try:
        dcp.load(state, checkpoint_id=str(path))
    except CheckpointException as e:  # raised on every rank: DCP gathers the planning errors
        lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
        raise CheckpointError(
            f"--resume: {path} does not fit this run ({lines[-1] if lines else e!r})"
        ) from None
    meta_path = path / "meta.json"
    return json.loads(meta_path.read_text(encoding="utf-8")) if meta_path.is_file() else {}


def _prune(root: Path, keep: int) -> None:
    complete = sorted(
        (int(m.group(1)), p)
        for p in root.iterdir()
        if (m := _NAME.match(p.name)) and (p / MARKER).is_file()
    )
    for _, path in complete[:-keep]:
        shutil.rmtree(path, ignore_errors=True)


class StopSignal:
    """Records SIGTERM instead of dying; the loop checks `requested` between steps."""

    def __init__(self) -> None:
        self.requested = False
        self._previous: Any = None

    def install(self) -> StopSignal:
        self._previous = signal.signal(signal.SIGTERM, self._handle)
        return self

    def uninstall(self) -> None:
        if self._previous is not None:
            signal.signal(signal.SIGTERM, self._previous)
            self._previous = None

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        self.requested = True
