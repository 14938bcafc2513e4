"""Run-wide sharing of expensive fixtures across pytest-xdist workers (``make test``).

``make test`` runs the suite on three pytest-xdist workers (see ``tests/conftest.py``). A
session fixture that is expensive to build (a multi-process training launch, a local run, a
checkov scan) would otherwise run once per worker: :func:`once` builds it under a file lock in
the folder all workers share and hands the others its pickled result (the pattern of
pytest-xdist's documentation, "Making session-scoped fixtures execute only once"). Without
xdist it is a plain cache in the run's base temp folder.

If this file breaks, a parallel run computes the shared runs twice (slower, still correct) or a
test reads another worker's half-written result (a failure naming the fixture).
"""

from __future__ import annotations

import pickle
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import pytest
from filelock import FileLock

T = TypeVar("T")


def shared_dir(tmp_path_factory: pytest.TempPathFactory, name: str) -> Path:
    """A folder every worker of this run sees (the parent of the workers' base temp dirs under
    xdist; the base temp dir itself without it)."""
    base = tmp_path_factory.getbasetemp()
    root = base.parent if base.name.startswith("popen-gw") else base
    path = root / "shared" / name
    path.mkdir(parents=True, exist_ok=True)
    return path


def once(tmp_path_factory: pytest.TempPathFactory, name: str, compute: Callable[[Path], T]) -> T:
    """``compute(folder)``'s result, computed by the first worker that asks, read by the others.

    ``folder`` (shared by all workers) is where ``compute`` writes its files; the result must
    pickle. A computation that raised is not cached: the next worker that asks computes it again
    and meets the same error in its own test.
    """
    folder = shared_dir(tmp_path_factory, name)
    result = folder / "result.pickle"
    with FileLock(str(folder) + ".lock"):
        if result.is_file():
            value: T = pickle.loads(result.read_bytes())
            return value
        value = compute(folder)
        tmp = result.with_suffix(".tmp")
        tmp.write_bytes(pickle.dumps(value))
        tmp.replace(result)
        return value
