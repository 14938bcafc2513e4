"""Distributed checkpoints (torch.distributed.checkpoint): atomic, asynchronous, never a gap.

A checkpoint is a folder `<dist_checkpoint_root_folder>/<dist_checkpoint_folder>/step-000123/`
holding the DCP shards of every `Stateful` handed in (model + optimizer through
`get_state_dict`/`set_state_dict`, the LR scheduler, the data position, the trainer's counters),
a human-readable `meta.json`, and a `COMPLETE` marker:

1. all ranks write into `step-000123.tmp/`, synchronously (`dcp.save`) or in the background
   (`dcp.async_save`: the state is first copied to host memory, the only time the loop stalls,
   then written by a thread while training goes on);
2. when rank 0's write has finished, every rank's has: DCP's coordinator writes the metadata only
   after gathering every rank's write result. Rank 0 then writes `meta.json` and `COMPLETE`
   into the temporary folder and renames it to `step-000123/`, so a folder with that name is
   complete the moment it exists;
3. re-saving a step that already has a checkpoint (the end of an epoch after a periodic save)
   moves the old one aside as `step-000123.old/` first and deletes it only after the new one is
   in place; `latest_complete` accepts a `.old` folder when its step has nothing newer, so there
   is no moment without a complete newest checkpoint;
4. older checkpoints beyond `KEEP_LAST`, stale `*.tmp` folders of writes that never finished
   (a killed pod, an emergency checkpoint cut off by SIGKILL) and leftover `.old` folders are
   pruned after every checkpoint and when a run starts.

DCP stores tensors by their global shape, so a checkpoint loads into any world size or sharding.
The folder must be on storage every rank sees (a shared file system on multi-node jobs), or an
`s3://bucket/prefix` (`--dist_checkpoint_root_folder s3://...`): there a save is written in
place and made complete by the same `COMPLETE` marker written last, re-saves of a step are new
generations instead of renames (`training.s3.checkpoints`), and the shards go through DCP's
file-system writer on S3 (`training.s3.dcp`), in the background as locally.

`StopSignal` records a SIGTERM (this pod is going away, or torchrun restarts the group) and its
time, so the loop can stop at the next step boundary and decide whether an emergency
checkpoint still fits the time torchrun leaves before its SIGKILL (docs/adr/0004).
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import signal
import time
from collections.abc import Callable
from concurrent.futures import Future
from pathlib import Path
from types import FrameType
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch import nn
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_state_dict,
    set_state_dict,
)
from torch.distributed.checkpoint.stateful import Stateful

from training.dist import barrier
from training.s3.uri import S3Uri, is_s3

Location = Path | S3Uri
"""A checkpoint root or folder: a local path or an s3:// location."""

KEEP_LAST = 2
"""Complete checkpoints kept; older ones are deleted after a newer one is complete."""
MARKER = "COMPLETE"
_NAME = re.compile(r"^step-(\d{6,})(\.old)?$")
SHUTDOWN_TIMEOUT_ENV = "TORCH_ELASTIC_SHUTDOWN_TIMEOUT"
"""torchrun's seconds between forwarding SIGTERM and SIGKILL (torch/distributed/launcher/api.py,
default 30); the worker inherits the agent's environment, so it reads the same value."""
DEFAULT_SHUTDOWN_TIMEOUT_S = 30.0


class ModelOptimizerState(Stateful):
    """Model and optimizer state in DCP's sharded form (works with and without FSDP).

    `trainable_only` (LoRA): the frozen base is left out (`ignore_frozen_params`) and loaded
    again from the model's own weights at start; the checkpoint holds the adapters and their
    optimizer state, a few MB instead of the whole model. `ignore_frozen_params` drops the
    names of `model.named_parameters()`, which lists a tied weight once: the alias (lm_head.weight
    of a model with tie_word_embeddings) stayed, about 1 GB fp32 per checkpoint of
    Llama-3.2-1B. Every frozen name, aliases included, is dropped here.
    """

    def __init__(
        self, model: nn.Module, optimizer: torch.optim.Optimizer, *, trainable_only: bool = False
    ) -> None:
        self.model = model
        self.optimizer = optimizer
        self.options = StateDictOptions(
            ignore_frozen_params=trainable_only, strict=not trainable_only
        )

    def state_dict(self) -> dict[str, Any]:
        model_sd, optim_sd = get_state_dict(self.model, self.optimizer, options=self.options)
        if self.options.ignore_frozen_params:
            for name, p in self.model.named_parameters(remove_duplicate=False):
                if not p.requires_grad:
                    model_sd.pop(name, None)
        return {"model": model_sd, "optimizer": optim_sd}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        set_state_dict(
            self.model,
            self.optimizer,
            model_state_dict=state_dict["model"],
            optim_state_dict=state_dict["optimizer"],
            options=self.options,
        )


def root_of(cfg: Any) -> Location:
    """A TrainConfig's --dist_checkpoint_root_folder / --dist_checkpoint_folder: a Path, or an
    S3Uri for s3://."""
    root, folder = cfg.dist_checkpoint_root_folder, cfg.dist_checkpoint_folder
    return S3Uri.parse(root) / folder if is_s3(root) else Path(root) / folder


def step_dir(root: Location, step: int) -> Location:
    return root / f"step-{step:06d}"


def _complete(root: Path) -> list[tuple[int, bool, Path]]:
    """(step, is_old, path) of every complete checkpoint folder under `root`."""
    if not root.is_dir():
        return []
    out = []
    for child in root.iterdir():
        m = _NAME.match(child.name)
        if m and child.is_dir() and (child / MARKER).is_file():
            out.append((int(m.group(1)), bool(m.group(2)), child))
    return out


def _listing(path: Path) -> dict[str, int]:
    """{name relative to `path`: size} of every file under a checkpoint folder."""
    return {
        f.relative_to(path).as_posix(): f.stat().st_size for f in path.rglob("*") if f.is_file()
    }


def _intact(path: Path) -> bool | None:
    """Every file of the folder's manifest (meta.json `files`) there at its size
    (`training.s3.checkpoints.intact`: a checkpoint root that FSx for Lustre exports to S3
    reaches S3, and so a new cluster, file by file in no order). None when meta.json cannot be
    read now (an I/O error of a lazily restored FSx file, say): not a resume candidate, but
    not known to be torn either, so `prune` keeps it."""
    from training.s3.checkpoints import intact

    meta_path = path / "meta.json"
    try:
        meta = json.loads(meta_path.read_text(encoding="utf-8")) if meta_path.is_file() else {}
    except (OSError, ValueError):
        return None
    return intact(_listing(path), meta)


def latest_complete(root: Location) -> Location | None:
    """The complete checkpoint with the highest step under `root` (partial ones are ignored;
    `step-N.old` only counts while its replacement `step-N` is not complete yet; on S3 the
    highest generation of a step). Candidates with a marker are tried newest first; one whose
    files do not match its manifest (a shard missing or truncated) is passed over."""
    if isinstance(root, S3Uri):
        from training.s3 import checkpoints as s3_checkpoints

        return s3_checkpoints.latest_complete(root)
    # highest step first; for the same step the new folder wins over the one set aside
    for _, _, path in sorted(_complete(root), key=lambda t: (t[0], not t[1]), reverse=True):
        if _intact(path):
            return path
    return None


def resume_point(
    root: Location, *, required: bool, group: dist.ProcessGroup | None = None
) -> Location | None:
    """``latest_complete(root)``, chosen by rank 0 and broadcast on `group` (every rank loads
    the same checkpoint even when a listing changes between ranks' looks); with ``required``
    (``--resume_required``) a ``CheckpointError`` when there is none, so a resume that names
    the wrong root stops before its first step instead of training again from step 0."""
    box: list[Any] = [None]
    if not dist.is_initialized() or dist.get_rank() == 0:
        box[0] = latest_complete(root)
    if dist.is_initialized() and dist.get_world_size() > 1:
        dist.broadcast_object_list(box, src=0, group=group)
    latest = box[0]
    if latest is None and required:
        raise CheckpointError(
            f"--resume_required: no complete checkpoint under {root} (no step-N with a "
            f"{MARKER} marker): check --dist_checkpoint_root_folder and "
            "--dist_checkpoint_folder (the job's checkpoints are ROOT/NAME/step-N)"
        )
    return latest


class Checkpointer:
    """Saves `state` under `root`, synchronously or in the background; every rank calls `save`.

    `save` returns the seconds the caller was blocked (the stall: waiting for the previous
    write, staging, and for a synchronous save the write itself). `write_s` holds the duration
    of the last finished write (call to files complete), which the emergency checkpoint
    decision uses. `group`: the process group DCP coordinates on (a gloo group of its own, so
    a background write never shares a communicator with the training collectives).
    """

    def __init__(
        self,
        root: Location,
        state: dict[str, Stateful],
        *,
        use_async: bool,
        group: dist.ProcessGroup | None = None,
    ) -> None:
        self.root = root
        self.state = state
        self.use_async = use_async
        self.group = group
        self.main = not dist.is_initialized() or dist.get_rank() == 0
        self.write_s: float | None = None
        """Seconds of the last finished write (None before the first one)."""
        self.written: list[Location] = []
        """Checkpoints this process completed, in order."""
        self.after_publish: Callable[[], object] | None = None
        """Called on rank 0 once each checkpoint is complete (the trainer pushes its
        `--output_dir s3://` outputs, so the metrics reach S3 with the checkpoint they go with,
        not only at the end or on SIGTERM)."""
        self._pending: tuple[Future[Any], Any, Any, dict[str, Any], float] | None = None
        self._done_at: float | None = None

    @property
    def pending(self) -> bool:
        return self._pending is not None

    def save(self, step: int, meta: dict[str, Any]) -> float:
        """Checkpoint `state` as step `step` (collective); returns the stall in seconds."""
        t0 = time.monotonic()
        self.wait()  # one write in flight at a time
        tmp, final, writer = self._target(step)
        barrier()
        if self.use_async:
            self._done_at = None
            fut = dcp.async_save(
                self.state, checkpoint_id=str(tmp), storage_writer=writer, process_group=self.group
            )
            if not isinstance(fut, Future):  # an AsyncSaveResponse: its upload future
                fut = fut.upload_completion
            fut.add_done_callback(self._mark_done)
            self._pending = (fut, tmp, final, meta, t0)
        else:
            dcp.save(
                self.state, checkpoint_id=str(tmp), storage_writer=writer, process_group=self.group
            )
            self._done_at = time.monotonic()
            self._pending = (_done_future(), tmp, final, meta, t0)
            self.wait()
        return time.monotonic() - t0

    def _target(self, step: int) -> tuple[Location, Location, Any]:
        """(where the save is written, its final name, DCP's storage writer or None) of a save
        of `step`, with any leftover of an earlier write there removed (rank 0)."""
        if isinstance(self.root, S3Uri):
            from training.s3 import checkpoints as s3_checkpoints
            from training.s3.dcp import S3Writer

            box: list[Any] = [None]
            if self.main:  # step-N, or its next generation when step-N is complete
                box[0] = s3_checkpoints.next_target(self.root, step)
                s3_checkpoints.delete(box[0])
            if dist.is_initialized() and dist.get_world_size() > 1:
                dist.broadcast_object_list(box, src=0, group=self.group)
            return box[0], box[0], S3Writer(str(box[0]))
        final = step_dir(self.root, step)
        assert isinstance(final, Path)
        tmp = final.with_name(final.name + ".tmp")
        if self.main:
            self.root.mkdir(parents=True, exist_ok=True)
            shutil.rmtree(tmp, ignore_errors=True)
        return tmp, final, None

    def poll(self) -> None:
        """Finish a background write that is done (cheap; call at step boundaries)."""
        if self._pending is not None and self._pending[0].done():
            self.wait()

    def wait(self) -> None:
        """Block until the write in flight (if any) is complete and in place."""
        if self._pending is None:
            return
        fut, tmp, final, meta, t0 = self._pending
        self._pending = None
        fut.result()  # a failed write raises here, on the rank where it failed
        self.write_s = (self._done_at or time.monotonic()) - t0
        if self.main:
            _publish(self.root, tmp, final, {**meta, "write_s": round(self.write_s, 3)})
            if self.after_publish is not None:
                try:  # the outputs' copy must not end a run whose checkpoint is safe
                    self.after_publish()
                except Exception as err:
                    print(f"warning: outputs not pushed after {final}: {err}", flush=True)
        self.written.append(final)

    def _mark_done(self, _fut: Future[Any]) -> None:
        self._done_at = time.monotonic()


def _done_future() -> Future[Any]:
    fut: Future[Any] = Future()
    fut.set_result(None)
    return fut


def _publish(root: Location, tmp: Any, final: Any, meta: dict[str, Any]) -> None:
    """Mark `tmp` complete and move it to `final` without a moment lacking a newest checkpoint."""
    if isinstance(root, S3Uri):
        from training.s3 import checkpoints as s3_checkpoints

        s3_checkpoints.publish(final, meta)  # written in place: the marker completes it
        prune(root, keep=KEEP_LAST)
        return
    from training.s3.checkpoints import MANIFEST

    files = _listing(tmp)  # what DCP wrote: the manifest `latest_complete` checks
    files.pop("meta.json", None)
    files.pop(MARKER, None)
    meta = {**meta, MANIFEST: files}
    (tmp / "meta.json").write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")
    with (tmp / MARKER).open("w", encoding="utf-8") as f:
        f.write(f"{time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}\n")
        f.flush()
        os.fsync(f.fileno())
    old = final.with_name(final.name + ".old")
    if final.exists():
        shutil.rmtree(old, ignore_errors=True)
        final.rename(old)  # still loadable as step-N.old until the rename below
    tmp.rename(final)
    shutil.rmtree(old, ignore_errors=True)
    prune(root, keep=KEEP_LAST)


def prune(root: Location, keep: int = KEEP_LAST, in_flight: Any = None) -> list[Any]:
    """Delete complete checkpoints beyond the newest `keep`, stale `*.tmp` folders (except
    `in_flight`) and `.old` folders whose step has a complete replacement; the paths removed.
    On S3: older generations and every folder without a marker (`training.s3.checkpoints`).

    Call on one rank only, when no other write is in flight (or name it in `in_flight`)."""
    if isinstance(root, S3Uri):
        from training.s3 import checkpoints as s3_checkpoints

        return s3_checkpoints.prune(root, keep, in_flight)
    if not root.is_dir():
        return []
    removed = []
    complete = _complete(root)
    for _, _, path in complete:  # a marker but files missing or cut short: not complete
        if _intact(path) is False:
            removed.append(path)
    complete = [t for t in complete if t[2] not in removed]
    finals = sorted((step, p) for step, old, p in complete if not old)
    for _, path in finals[:-keep] if keep else finals:
        removed.append(path)
    final_steps = {step for step, _ in finals}
    for step, old, path in complete:
        if old and step in final_steps:
            removed.append(path)
    for child in root.iterdir():
        if child.name.endswith(".tmp") and child.is_dir() and child != in_flight:
            removed.append(child)
    for path in removed:
        shutil.rmtree(path, ignore_errors=True)
    return removed


class CheckpointError(ValueError):
    """A checkpoint that does not fit this run (another model, say); one line naming --resume."""


SETTINGS = "settings"
"""meta.json's key for the flags a checkpoint fits only with (`--model_name`, the adapters)."""


def check_settings(path: Location, meta: dict[str, Any], settings: dict[str, Any]) -> None:
    """Stop with one line naming the first flag whose value differs from the checkpoint's.

    Needed because a LoRA checkpoint leaves the frozen base out and loads non-strictly: DCP
    would silently take adapters made with another alpha, dropout, rank subset or base of the
    same shape. A checkpoint without recorded settings (older ones) is not checked."""
    saved = meta.get(SETTINGS)
    if not isinstance(saved, dict):
        return
    for flag in sorted(set(saved) | set(settings)):
        made, now = saved.get(flag), settings.get(flag)
        if made != now:
            raise CheckpointError(
                f"--resume: checkpoint {path.name} was made with --{flag} {_flag_value(made)}, "
                f"this run has {_flag_value(now)}"
            )


REVISIONS = "revisions"
"""meta.json's key for the Hub revisions the run loaded (``{"model": ..., "dataset": ...}``:
``--model_revision`` / ``--dataset_revision``, a commit once ``jobs submit`` pinned it). Kept out
of ``SETTINGS``: checkpoints made before it was recorded lack it and still load."""
REVISION_KEYS = {"model": "modelRevision", "dataset": "datasetRevision"}
"""The job-file key that sets each revision (``jobs.schema``), named in the refusal's fix."""


def revisions_of(cfg: Any) -> dict[str, str]:
    """The revisions a checkpoint of this run records: ``""`` is the default branch."""
    return {"model": cfg.model_revision or "", "dataset": cfg.dataset_revision or ""}


def check_revisions(path: Location, meta: dict[str, Any], revisions: dict[str, str]) -> None:
    """Stop with one line when the checkpoint was made from another commit of the model or the
    dataset than this run names: a LoRA checkpoint's adapters would sit on other base weights
    (the frozen base is not in it), a full one would continue on other rows. Only two named
    revisions that differ are refused: "" (the default branch) or an older checkpoint without
    the key says nothing about which commit was loaded."""
    saved = meta.get(REVISIONS)
    if not isinstance(saved, dict):
        return
    for kind, key in REVISION_KEYS.items():
        made, now = str(saved.get(kind) or ""), str(revisions.get(kind) or "")
        if made and now and made != now:
            raise CheckpointError(
                f"--resume: checkpoint {path.name} was made with --{kind}_revision {made}, "
                f"this run has {now}; set {key}: {made}"
            )


def _flag_value(value: Any) -> str:
    if value is None:
        return "unset"
    if isinstance(value, bool):
        return "on" if value else "off"
    return str(value)


def load(
    path: Location,
    state: dict[str, Stateful],
    settings: dict[str, Any] | None = None,
    revisions: dict[str, str] | None = None,
) -> dict[str, Any]:
    """Load `state` in place from a complete checkpoint; returns its meta.json.

    `settings`: the run's flags a checkpoint must have been made with (`check_settings`);
    `revisions`: the run's Hub revisions (`check_revisions`); both compared before any tensor
    is read."""
    from torch.distributed.checkpoint.api import CheckpointException

    reader = None
    if isinstance(path, S3Uri):
        from training.s3 import checkpoints as s3_checkpoints
        from training.s3.dcp import S3Reader

        meta = s3_checkpoints.read_meta(path)
        reader = S3Reader(str(path))
    else:
        meta_path = path / "meta.json"
        meta = json.loads(meta_path.read_text(encoding="utf-8")) if meta_path.is_file() else {}
    if settings is not None:
        check_settings(path, meta, settings)
    if revisions is not None:
        check_revisions(path, meta, revisions)
    try:
        dcp.load(state, checkpoint_id=str(path), storage_reader=reader)
    except CheckpointException as e:  # raised on every rank: DCP gathers the planning errors
        lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
        raise CheckpointError(
            f"--resume: {path} does not fit this run ({lines[-1] if lines else e!r})"
        ) from None
    return meta


def shutdown_timeout_s(env: dict[str, str] | None = None) -> float:
    """torchrun's SIGTERM-to-SIGKILL seconds, as the agent reads them."""
    raw = (os.environ if env is None else env).get(SHUTDOWN_TIMEOUT_ENV, "")
    try:
        return float(raw) if raw else DEFAULT_SHUTDOWN_TIMEOUT_S
    except ValueError:
        return DEFAULT_SHUTDOWN_TIMEOUT_S


def emergency_checkpoint_fits(seconds_left: float, write_estimate_s: float) -> bool:
    """Whether a checkpoint expected to take `write_estimate_s` fits in `seconds_left`.

    25% and 2 s of headroom: a write cut off by SIGKILL costs nothing on disk (it stays a
    `.tmp` folder, pruned later) but its time, and the peers then wait for it in vain. An
    unknown estimate (0) is tried whenever any time is left.
    """
    if not math.isfinite(seconds_left):
        return True
    return seconds_left > 1.25 * write_estimate_s + 2.0


class StopSignal:
    """Records SIGTERM (and when) instead of dying; the loop checks `requested` between steps."""

    def __init__(self) -> None:
        self.requested = False
        self.at: float | None = None
        """time.monotonic() of the first SIGTERM."""
        self._previous: Any = None

    def install(self) -> StopSignal:
        self._previous = signal.signal(signal.SIGTERM, self._handle)
        return self

    def uninstall(self) -> None:
        if self._previous is not None:
            signal.signal(signal.SIGTERM, self._previous)
            self._previous = None

    def seconds_left(self, budget_s: float) -> float:
        """Seconds until torchrun's SIGKILL (`budget_s` after the SIGTERM); inf without one."""
        if self.at is None:
            return math.inf
        return budget_s - (time.monotonic() - self.at)

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self.at is None:
            self.at = time.monotonic()
        self.requested = True
