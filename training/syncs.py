"""Count host syncs: every place where Python waits for a tensor's value.

On CUDA each of these blocks the CPU until the GPU has caught up (the GPU then idles while the
CPU launches the next kernels): `Tensor.item`, `tolist`, `float()`, `int()`, `bool()`,
`index()`, `numpy()`, and `torch.cuda.synchronize`. On CPU they are cheap, but they are the same
calls, so counting them on CPU tells how many a step would make on a GPU. Tensors marked
`training.dist.host_only` (CPU tensors of a gloo vote, which never wait for a device) are not
counted. Used by
`benchmarks/step_anatomy.py` and the tests; the training loop itself never imports it.
"""

from __future__ import annotations

import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch

from training.dist import HOST_ONLY

_TENSOR_METHODS = (
    "item",
    "tolist",
    "numpy",
    "__float__",
    "__int__",
    "__bool__",
    "__index__",
)


@dataclass
class SyncCount:
    """What `count_host_syncs` saw."""

    calls: list[str] = field(default_factory=list)
    """One entry per sync: the method and the caller's file:line."""

    @property
    def n(self) -> int:
        return len(self.calls)


@contextmanager
def count_host_syncs() -> Iterator[SyncCount]:
    """Patch the tensor -> Python conversions and `torch.cuda.synchronize` while inside."""
    seen = SyncCount()
    saved: dict[str, Any] = {}

    def wrap(name: str, original: Any) -> Any:
        def counting(*args: Any, **kwargs: Any) -> Any:
            if args and getattr(args[0], HOST_ONLY, False):  # a CPU vote, waits for no device
                return original(*args, **kwargs)
            frame = traceback.extract_stack(limit=2)[0]
            seen.calls.append(f"{name} at {frame.filename}:{frame.lineno}")
            return original(*args, **kwargs)

        return counting

    for name in _TENSOR_METHODS:
        saved[name] = getattr(torch.Tensor, name)
        setattr(torch.Tensor, name, wrap(name, saved[name]))
    sync = torch.cuda.synchronize
    torch.cuda.synchronize = wrap("torch.cuda.synchronize", sync)  # type: ignore[assignment]
    try:
        yield seen
    finally:
        for name, original in saved.items():
            setattr(torch.Tensor, name, original)
        torch.cuda.synchronize = sync  # type: ignore[assignment]
