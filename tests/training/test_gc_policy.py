"""The training loop's garbage-collection policy (``training/gc_policy.py``), on its own.

If this fails, the loop would leave Python's automatic collection off after training (a
library call that changes process-wide state), turn it on for a caller that had it off, or
collect at other steps than every ``--gc_freq``: ranks would stop for collections at their own
moments again. The loop's use of it is checked per rank in ``test_host_syncs.py``. The last test
runs the program's start-up freeze for real: if it fails, either the libraries are no longer
frozen (each worker's end costs a second more) or a run's model is frozen and never freed.
"""

from __future__ import annotations

import gc
import itertools
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from training.gc_policy import GarbageCollection


@pytest.fixture
def collections() -> Iterator[list[int]]:
    """Generations of the collections Python runs during the test (``gc.callbacks``)."""
    seen: list[int] = []

    def record(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            seen.append(info["generation"])

    was_enabled = gc.isenabled()
    gc.callbacks.append(record)
    try:
        yield seen
    finally:
        gc.callbacks.remove(record)
        if was_enabled:
            gc.enable()


def _cyclic_garbage(n: int = 5_000) -> None:
    """``n`` container objects in cycles (far past generation 0's threshold of 2,000
    allocations): with automatic collection on, this alone triggers collections."""
    garbage: list[list[object]] = [[] for _ in range(n)]
    for a, b in itertools.pairwise(garbage):
        a.append(b)
        b.append(a)


def test_young_generations_every_gc_freq_steps_and_nothing_automatic(
    collections: list[int],
) -> None:
    policy = GarbageCollection(3)
    with policy.paused():
        assert not gc.isenabled()
        for step in range(1, 8):
            _cyclic_garbage()
            policy.step(step)
            collections.append(-step)  # a step boundary in the record
        paused = list(collections)
    assert gc.isenabled()
    # generation 1 once after steps 3 and 6, nothing else although garbage piled up
    assert paused == [-1, -2, 1, -3, -4, -5, 1, -6, -7], paused
    collections.clear()
    _cyclic_garbage()  # automatic collection is back
    assert collections and all(g >= 0 for g in collections)


def test_pausing_restores_the_state_it_found_also_on_errors() -> None:
    policy = GarbageCollection(50)
    try:
        with pytest.raises(RuntimeError, match="a step failed"), policy.paused():
            raise RuntimeError("a step failed")
        assert gc.isenabled()
        gc.disable()  # a caller that runs with automatic collection off keeps it off
        with policy.paused():
            assert not gc.isenabled()
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_gc_freq_below_one_is_refused() -> None:
    with pytest.raises(ValueError, match="gc_freq: 0 must be at least 1"):
        GarbageCollection(0)


_FREEZE_PROBE = """
import gc, json, sys, weakref
import training.finetune as ft

argv, out = json.loads(sys.argv[1]), sys.argv[2]
models, freeze_in_trainer = [], [False]
build = ft.Trainer.__init__

def spy(self, cfg, env):
    build(self, cfg, env)
    models.append(weakref.ref(self.model))
    if freeze_in_trainer[0]:
        gc.freeze()  # the control: frozen with the run's objects alive

ft.Trainer.__init__ = spy
report = {"rc": ft.main([*argv, f"--output_dir={out}/program"], freeze_libraries=True)}
report["frozen"] = gc.get_freeze_count()
from transformers import LlamaForCausalLM
report["llama_frozen"] = gc.is_tracked(LlamaForCausalLM) and not any(
    o is LlamaForCausalLM for o in gc.get_objects()  # the permanent generation is not listed
)
report["model_kept"] = models[-1]() is not None
gc.unfreeze()
freeze_in_trainer[0] = True
report["control_rc"] = ft.main([*argv, f"--output_dir={out}/control"])
report["control_model_kept"] = models[-1]() is not None
gc.unfreeze()
gc.collect()
report["control_model_kept_after_unfreeze"] = models[-1]() is not None
print(json.dumps(report))
"""


@pytest.mark.slow
def test_the_program_freezes_the_libraries_and_never_the_run(tmp_path: Path) -> None:
    """``python -m training.finetune`` (``main(freeze_libraries=True)``) freezes what its
    imports created, torch's and transformers' objects (LlamaForCausalLM among them), before
    the Trainer exists: the FSDP2-sharded model is still freed by ``main``'s final collection.
    The control in the same process freezes inside the Trainer instead, and its model outlives
    ``main`` (it sits in reference cycles: FSDP2's hooks and states, the optimizer) until
    unfrozen: what freezing the run would leak on every call."""
    from tests.training.helpers import TINY, child_env

    argv = [
        *TINY,
        "--enable_fsdp",  # as every cluster job: a world of one, sharded
        "--max_train_step=2",
        f"--dist_checkpoint_root_folder={tmp_path}/ckpt",
    ]
    proc = subprocess.run(
        [sys.executable, "-c", _FREEZE_PROBE, json.dumps(argv), str(tmp_path)],
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    print(report)
    assert report["rc"] == 0 and report["control_rc"] == 0, report
    assert report["llama_frozen"], report
    assert not report["model_kept"], report
    assert report["control_model_kept"] and not report["control_model_kept_after_unfreeze"]
    # torch alone (what main imports first) is ~250k objects; with transformers ~350k
    assert report["frozen"] > 300_000, report
