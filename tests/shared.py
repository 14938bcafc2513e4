"""Run-wide sharing of expensive fixtures across pytest-xdist workers (``make test``).

``make test`` runs the suite on two workers (``pytest -n 2 --dist loadgroup``): most slow tests
wait (on Prometheus scrapes, etcd, paced fake jobs, restarts) as much as they compute, so two
workers keep both cores busy. Two rules keep that correct and cheap:

- **An expensive fixture is computed once for the whole run**, not once per worker:
  :func:`once` computes it under a file lock in the directory all workers share and hands the
  others its pickled result (the pattern of pytest-xdist's documentation, "Making
  session-scoped fixtures execute only once").
- **Tests that share a module- or session-scoped fixture which cannot be shared through a file**
  carry ``pytest.mark.xdist_group``: ``--dist loadgroup`` sends a group to one worker (the
  training runs of ``tests/training/conftest.py``, and modules with a module fixture).

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
