"""Python's garbage collector under control during training (torchtitan's ``GarbageCollection``).

Automatic collection runs whenever enough objects were allocated, on each rank at its own
moment: a full collection of a process holding torch and transformers (~350k tracked objects)
takes 0.2-0.5 s, and the rank that does it becomes the straggler every collective waits for.
torchtitan therefore turns automatic collection off for the training loop and collects the
young generations every ``gc_freq`` steps, on every rank at the same step
(``torchtitan/tools/utils.py``, ``GarbageCollection``; ``--training.gc_freq``, default 50).

One addition: the objects that exist once the libraries are imported (modules, classes,
functions) are frozen (``gc.freeze``, Python's permanent generation), so the periodic
collections and the full one at the end of a run scan only what training created. The model,
optimizer and checkpoint state are created after the freeze and are collected normally:
``finetune.main`` frees them with the process group still alive.
"""

from __future__ import annotations

import contextlib
import gc
import time
from collections.abc import Iterator


class GarbageCollection:
    """Freezes what exists at construction; :meth:`paused` turns automatic GC off for the loop,
    which calls :meth:`step` after every optimizer step."""

    def __init__(self, every: int) -> None:
        if every < 1:
            raise ValueError(f"gc_freq: {every} must be at least 1")
        self.every = every
        self.seconds = 0.0
        """Time spent in the periodic collections."""
        gc.freeze()  # what the imports created: never garbage, never scanned again

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """Automatic collection off inside, as it was before on the way out."""
        was_enabled = gc.isenabled()
        gc.disable()
        try:
            yield
        finally:
            if was_enabled:
                gc.enable()

    def step(self, step: int) -> None:
        """After optimizer step ``step`` (1-based): the young generations every ``every`` steps,
        on every rank at the same step."""
        if step % self.every == 0:
            t0 = time.perf_counter()
            gc.collect(1)
            self.seconds += time.perf_counter() - t0
