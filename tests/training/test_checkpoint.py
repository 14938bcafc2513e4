"""Checkpoint publishing, pruning, the emergency-checkpoint rule and the goodput ledger.

If these fail: a re-saved step opens a moment with no complete newest checkpoint (a crash then
resumes from an older one, or from scratch), stale `*.tmp` folders of killed writes pile up on
the shared file system, an asynchronous save no longer produces a loadable checkpoint, SIGTERM
is no longer recorded with its time (so the emergency checkpoint cannot be budgeted against
torchrun's SIGKILL), or restarts and redone steps are no longer counted across restarts, or the local runner's
record of the checkpoints complete at a fault disagrees with what a resume loads.
Single process, real DCP on a temporary folder; nothing is mocked.
"""

from __future__ import annotations

import json
import math
import os
import signal
import time
from pathlib import Path

import pytest
import torch
from torch.distributed.checkpoint.stateful import Stateful

from training.checkpoint import (
    MARKER,
    SETTINGS,
    Checkpointer,
    CheckpointError,
    StopSignal,
    emergency_checkpoint_fits,
    latest_complete,
    load,
    prune,
    shutdown_timeout_s,
    step_dir,
)
from training.metrics import Goodput, JsonlSink

# DCP in a single process (no process group) says so once per call; that is the intent here.
pytestmark = pytest.mark.filterwarnings("ignore:torch.distributed is disabled")


class _Box(Stateful):
    def __init__(self, value: float) -> None:
        self.t = torch.full((1000,), value)

    def state_dict(self) -> dict[str, torch.Tensor]:
        return {"t": self.t}

    def load_state_dict(self, sd: dict[str, torch.Tensor]) -> None:
        self.t.copy_(sd["t"])


def _complete(path: Path) -> bool:
    return (path / MARKER).is_file() and (path / "meta.json").is_file()


def test_sync_and_async_saves_publish_complete_loadable_checkpoints(tmp_path: Path) -> None:
    for use_async in (False, True):
        root = tmp_path / f"async-{use_async}"
        box = _Box(1.0)
        ck = Checkpointer(root, {"box": box}, use_async=use_async)
        stall = ck.save(3, {"step": 3})
        box.t.fill_(2.0)  # the staged copy is what gets written, not later changes
        ck.wait()
        assert stall >= 0 and ck.write_s is not None and ck.write_s > 0
        assert latest_complete(root) == step_dir(root, 3) and _complete(step_dir(root, 3))
        assert json.loads((step_dir(root, 3) / "meta.json").read_text())["step"] == 3
        fresh = _Box(0.0)
        load(step_dir(root, 3), {"box": fresh})
        assert torch.equal(fresh.t, torch.full((1000,), 1.0))
        assert not list(root.glob("*.tmp"))


def test_resume_refuses_a_checkpoint_made_with_other_settings(tmp_path: Path) -> None:
    """A LoRA checkpoint loads non-strictly (the frozen base is left out), so DCP alone would
    take adapters made with another alpha or base of the same shape; the recorded settings
    stop that with one line naming the flag, before any tensor is read."""
    root = tmp_path / "ck"
    made = {"model_name": "tiny-llama-2l", "use_peft": True, "lora_r": 8, "lora_alpha": 32}
    ck = Checkpointer(root, {"box": _Box(1.0)}, use_async=False)
    ck.save(7, {"step": 7, SETTINGS: made})
    path = step_dir(root, 7)
    for flag, value, message in [
        ("lora_alpha", 16, "--lora_alpha 32, this run has 16"),
        ("model_name", "other", "--model_name tiny-llama-2l, this run has other"),
        ("use_peft", False, "--use_peft on, this run has off"),
    ]:
        fresh = _Box(0.0)
        with pytest.raises(CheckpointError) as err:
            load(path, {"box": fresh}, {**made, flag: value})
        assert str(err.value) == f"--resume: checkpoint step-000007 was made with {message}"
        assert torch.equal(fresh.t, torch.zeros(1000))  # nothing was loaded
    with pytest.raises(CheckpointError, match=r"made with --lora_dropout unset, this run has 0\.1"):
        load(path, {"box": _Box(0.0)}, {**made, "lora_dropout": 0.1})
    fresh = _Box(0.0)
    assert load(path, {"box": fresh}, dict(made))[SETTINGS] == made  # same settings: loads
    assert torch.equal(fresh.t, torch.ones(1000))
    # a checkpoint that recorded no settings (an older one) is not checked
    ck.save(8, {"step": 8})
    load(step_dir(root, 8), {"box": _Box(0.0)}, {**made, "lora_alpha": 16})


def test_resaving_a_step_never_leaves_it_missing(tmp_path: Path) -> None:
    root = tmp_path / "ck"
    box = _Box(1.0)
    ck = Checkpointer(root, {"box": box}, use_async=False)
    ck.save(4, {"step": 4, "epoch": 0})
    # The moment of the swap: the old folder set aside, the new one not yet renamed.
    (step_dir(root, 4)).rename(root / "step-000004.old")
    assert latest_complete(root) == root / "step-000004.old"  # still loadable
    (root / "step-000004.old").rename(step_dir(root, 4))
    box.t.fill_(5.0)
    ck.save(4, {"step": 4, "epoch": 1})  # the end-of-epoch save of the same step
    assert json.loads((step_dir(root, 4) / "meta.json").read_text())["epoch"] == 1
    assert not (root / "step-000004.old").exists()
    fresh = _Box(0.0)
    load(latest_complete(root), {"box": fresh})  # type: ignore[arg-type]
    assert float(fresh.t[0]) == 5.0


def test_prune_keeps_the_newest_two_and_drops_stale_temporaries(tmp_path: Path) -> None:
    root = tmp_path / "ck"
    ck = Checkpointer(root, {"box": _Box(1.0)}, use_async=False)
    for step in (1, 2, 3):
        ck.save(step, {"step": step})
    assert sorted(p.name for p in root.iterdir()) == ["step-000002", "step-000003"]
    (root / "step-000007.tmp").mkdir()  # a write killed with its pod
    (root / "step-000002.old").mkdir()  # a swap interrupted after its replacement was in place
    (root / "step-000002.old" / MARKER).write_text("x")
    removed = prune(root)
    assert {p.name for p in removed} == {"step-000007.tmp", "step-000002.old"}
    assert sorted(p.name for p in root.iterdir()) == ["step-000002", "step-000003"]


def test_emergency_checkpoint_rule_and_shutdown_timeout() -> None:
    assert shutdown_timeout_s({}) == 30.0  # torchrun's default (launcher/api.py)
    assert shutdown_timeout_s({"TORCH_ELASTIC_SHUTDOWN_TIMEOUT": "518"}) == 518.0
    assert emergency_checkpoint_fits(math.inf, 1e9)  # survivors: no deadline of their own
    assert emergency_checkpoint_fits(60.0, 40.0)  # 1.25 x 40 + 2 = 52 < 60
    assert not emergency_checkpoint_fits(50.0, 40.0)
    assert emergency_checkpoint_fits(3.0, 0.0)  # unknown write time: try while time is left
    assert not emergency_checkpoint_fits(-1.0, 0.0)


def test_sigterm_is_recorded_with_its_time() -> None:
    stop = StopSignal().install()
    try:
        assert stop.seconds_left(30.0) == math.inf and not stop.requested
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.05)
        assert stop.requested
        assert 25.0 < stop.seconds_left(30.0) <= 30.0
    finally:
        stop.uninstall()


def test_goodput_ledger_counts_restarts_and_redone_steps(tmp_path: Path) -> None:
    """A crash after step 7 with the last checkpoint at 5: steps 6 and 7 are redone."""
    jsonl, ledger_path = tmp_path / "metrics.jsonl", tmp_path / "goodput.json"
    first = Goodput(started_at=time.time() - 100.0)
    first.save(ledger_path)
    sink = JsonlSink(jsonl)
    for step in range(1, 8):
        sink.log({"loss": 1.0, "step_time_s": 2.0}, step)
    sink.close()
    resumed = JsonlSink(jsonl, resume_step=5)
    again = Goodput.resume(ledger_path, resumed)
    resumed.close()
    assert again is not None
    assert (again.restarts, again.steps_redone) == (1, 2)
    assert again.productive_s == 10.0  # the 5 steps kept
    assert again.started_at == first.started_at
    assert 0.09 < again.ratio() < 0.11  # 10 s of steps in ~100 s
    assert Goodput.resume(tmp_path / "none.json", resumed) is None  # a first start


def test_the_local_runner_counts_as_complete_what_a_resume_can_load(tmp_path: Path) -> None:
    """``localrun`` records the checkpoints complete when a fault fires without
    importing torch, by folder names: a write in flight (``step-N.tmp``) holds its COMPLETE
    marker just before its rename and is not complete yet (a kill-worker run once failed
    reading it as a step); a re-saved step's previous copy (``step-N.old``) still loads; a
    folder without the marker never does. The same folders as the loader's own list."""
    from localrun.result import complete_checkpoint_steps
    from training.checkpoint import MARKER, _complete

    for name, marked in [
        ("step-000004", True),
        ("step-000008.tmp", True),
        ("step-000012", False),
        ("step-000016.old", True),
        ("step-000020", True),
        ("step-000020.old", True),
    ]:
        (tmp_path / name).mkdir()
        if marked:
            (tmp_path / name / MARKER).write_text("done\n")
    assert complete_checkpoint_steps(tmp_path) == [4, 16, 20]
    assert complete_checkpoint_steps(tmp_path) == sorted({s for s, _, _ in _complete(tmp_path)})
    assert complete_checkpoint_steps(tmp_path / "absent") == []
