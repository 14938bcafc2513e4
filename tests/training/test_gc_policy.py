"""The training loop's garbage-collection policy (``training/gc_policy.py``), on its own.

If this fails, the loop would leave Python's automatic collection off after training (a
library call that changes process-wide state), turn it on for a caller that had it off, or
collect at other steps than every ``--gc_freq``: ranks would stop for collections at their own
moments again. The loop's use of it is checked per rank in ``test_host_syncs.py``.
"""

from __future__ import annotations

import gc
import itertools
from collections.abc import Iterator

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
