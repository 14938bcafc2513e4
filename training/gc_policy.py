"""Python's garbage collector under control during training (torchtitan's ``GarbageCollection``).

Automatic collection runs whenever enough objects were allocated, on each rank at its own
moment: a full collection of a process holding torch and transformers (~350k tracked objects)
takes 0.2-0.5 s, and the rank that does it becomes the straggler every collective waits for.
torchtitan therefore turns automatic collection off and collects the young generations every
``gc_freq`` steps, on every rank at the same step (``torchtitan/tools/utils.py``,
``GarbageCollection``: ``gc.disable()``, then ``gc.collect(1)`` every ``--training.gc_freq``
steps). Here automatic collection is off for the whole of ``Trainer.fit`` (steps, validation,
checkpoints) and on outside it, so that setup and the end of the run collect as usual and
``finetune.main``'s final collection frees the model with the process group still alive.

Not covered: ``torch.compile`` runs ``gc.collect(1)`` after compiling each frame
(``torch._dynamo.config.run_gc_after_compile``), on each rank as it compiles, during the first
steps of a ``--compile`` run.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator


class GarbageCollection:
    """:meth:`paused` turns automatic GC off for the loop, which calls :meth:`step` after every
    optimizer step."""

    def __init__(self, every: int) -> None:
        if every < 1:
            raise ValueError(f"gc_freq: {every} must be at least 1")
        self.every = every

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """Automatic collection off inside, as it was before on the way out (also on errors)."""
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
            gc.collect(1)  # within the step's measured time (Trainer._train)
