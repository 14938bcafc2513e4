"""Count host syncs: every place where Python (or an op) waits for a tensor's value.

On CUDA each of these blocks the CPU until the GPU has caught up (the GPU then idles while the
CPU launches the next kernels). Two layers count them:

- Python-level conversions: `Tensor.item`, `tolist`, `float()`, `int()`, `bool()`, `index()`,
  `numpy()`, and `torch.cuda.synchronize`, `torch.cuda.Stream.synchronize`,
  `torch.cuda.Event.synchronize`;
- ops, seen by a `TorchDispatchMode` (what `torch.cuda.set_sync_debug_mode` flags on a GPU):
  `aten::_local_scalar_dense` (any scalar read, also from C++), the ops whose output size
  depends on the data (`nonzero`, `masked_select`, `unique`, `repeat_interleave` without
  `output_size`, indexing with a boolean mask), and copies to the CPU from another device
  (`aten::_to_copy` / `copy_`).

On CPU the calls are cheap, but they are the same calls, so counting them on CPU tells how many
a step would make on a GPU. Tensors marked `training.dist.host_only` (CPU tensors of a gloo
vote, which never wait for a device) are not counted; a conversion counted at the Python level
is not counted again for the op it runs. Used by `benchmarks/step_anatomy.py` and the tests;
the training loop itself never imports it.
"""

from __future__ import annotations

import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

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


_aten = torch.ops.aten
_DATA_DEPENDENT_SIZE = {
    _aten.nonzero,
    _aten.nonzero_static,
    _aten.masked_select,
    _aten.unique_dim,
    _aten._unique,
    _aten._unique2,
    _aten.unique_consecutive,
    _aten.unique_dim_consecutive,
    _aten.repeat_interleave,
}
_DATA_DEPENDENT_SIZE.discard(_aten.nonzero_static)  # its size is given: no sync


def _caller() -> str:
    """file:line of the first frame outside this module and torch."""
    for frame in reversed(traceback.extract_stack()):
        if frame.filename != __file__ and "/torch/" not in frame.filename:
            return f"{frame.filename}:{frame.lineno}"
    return "?"


def _not_cpu(x: Any) -> bool:
    return isinstance(x, torch.Tensor) and x.device.type != "cpu"


class _SyncOps(TorchDispatchMode):
    """Counts the ops that make the host wait for a device (see the module docstring)."""

    def __init__(self, seen: SyncCount, quiet: list[int]) -> None:
        super().__init__()
        self.seen, self.quiet = seen, quiet

    def __torch_dispatch__(
        self, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: Any = None
    ) -> Any:
        kwargs = kwargs or {}
        if not self.quiet[0]:
            why = _op_sync(func, args, kwargs)
            if why and not getattr(args[0] if args else None, HOST_ONLY, False):
                self.seen.calls.append(f"{why} at {_caller()}")
        return func(*args, **kwargs)


def _op_sync(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> str | None:
    """The op's name when it waits for the device's data, else None."""
    packet = func.overloadpacket
    if packet is _aten._local_scalar_dense:
        return "aten::_local_scalar_dense"
    if packet in _DATA_DEPENDENT_SIZE:
        if packet is _aten.repeat_interleave and kwargs.get("output_size") is not None:
            return None
        if packet is _aten.repeat_interleave and len(args) > 2 and args[2] is not None:
            return None  # repeat_interleave.Tensor(repeats, output_size=...) positionally
        return f"aten::{packet.__name__}"
    if packet in (_aten.index, _aten.index_put, _aten.index_put_) and len(args) > 1:
        masks = [i for i in args[1] if isinstance(i, torch.Tensor) and i.dtype == torch.bool]
        return f"aten::{packet.__name__} (boolean mask)" if masks else None
    if packet is _aten._to_copy:
        to = kwargs.get("device")
        if to is not None and torch.device(to).type == "cpu" and _not_cpu(args[0]):
            return "aten::_to_copy (device -> cpu)"
        return None
    if packet is _aten.copy_:
        dst, src = args[0], args[1]
        if dst.device.type == "cpu" and _not_cpu(src):
            return "aten::copy_ (device -> cpu)"
    return None


def _sync_functions() -> list[tuple[Any, str, str]]:
    """(owner, attribute, label) of the stream / device synchronize calls to patch."""
    out: list[tuple[Any, str, str]] = [(torch.cuda, "synchronize", "torch.cuda.synchronize")]
    for cls, label in ((torch.cuda.Stream, "Stream"), (torch.cuda.Event, "Event")):
        out.append((cls, "synchronize", f"torch.cuda.{label}.synchronize"))
    return out


@contextmanager
def count_host_syncs() -> Iterator[SyncCount]:
    """Patch the tensor -> Python conversions and the synchronize calls, and count the
    syncing ops, while inside."""
    seen = SyncCount()
    saved: list[tuple[Any, str, Any]] = []
    quiet = [0]  # > 0 inside a conversion already counted (its op is not counted twice)

    def wrap(name: str, original: Any) -> Any:
        def counting(*args: Any, **kwargs: Any) -> Any:
            if not (args and getattr(args[0], HOST_ONLY, False)):  # a CPU vote waits for nothing
                frame = traceback.extract_stack(limit=2)[0]
                seen.calls.append(f"{name} at {frame.filename}:{frame.lineno}")
            quiet[0] += 1
            try:
                return original(*args, **kwargs)
            finally:
                quiet[0] -= 1

        return counting

    targets = [(torch.Tensor, name, name) for name in _TENSOR_METHODS] + _sync_functions()
    for owner, attr, label in targets:
        original = getattr(owner, attr)
        saved.append((owner, attr, original))
        setattr(owner, attr, wrap(label, original))
    try:
        with _SyncOps(seen, quiet):
            yield seen
    finally:
        for owner, attr, original in saved:
            setattr(owner, attr, original)
