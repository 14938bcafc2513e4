"""Process trees of the local pods, read from /proc: find every process below an agent, signal it.

torchrun starts its workers in sessions of their own, so a process-group signal to the agent
(the pod's PID 1) does not reach them: stopping a pod means walking its tree.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path


def _ppids() -> dict[int, int]:
    """pid -> parent pid of every process (from /proc)."""
    out = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # comm may contain spaces: the ppid is the 2nd field after the closing parenthesis.
        out[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
    return out


def children(pid: int) -> list[int]:
    """PIDs whose parent is ``pid``."""
    return sorted(child for child, parent in _ppids().items() if parent == pid)


def descendants(pid: int) -> list[int]:
    """Every process below ``pid``: torchrun starts its workers in sessions of their own, so a
    process-group signal to the agent does not reach them."""
    ppids = _ppids()
    found, frontier = [], [pid]
    while frontier:
        parent = frontier.pop()
        kids = [c for c, p in ppids.items() if p == parent]
        found += kids
        frontier += kids
    return found


def signal_pids(pids: Sequence[int], sig: int) -> None:
    """Send ``sig`` to each of ``pids``, skipping those already gone."""
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)


def signal_group(proc: subprocess.Popen[bytes], sig: int) -> None:
    """Send ``sig`` to the process group ``proc`` leads (a pod's agent: a session of its own)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, sig)


def kill_tree(proc: subprocess.Popen[bytes], sig: int) -> list[int]:
    """Send ``sig`` to the agent's process group and to every descendant; the pids hit."""
    pids = descendants(proc.pid)
    signal_group(proc, sig)
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)
    return pids


def kill_everything(procs: Sequence[subprocess.Popen[bytes]]) -> None:
    """SIGKILL every process below each agent, then the agents' groups, until none is left.

    Descendants first: once an agent is dead its workers (in sessions of their own) are
    re-parented and can no longer be found from it."""
    for _ in range(5):
        found = False
        for p in procs:
            for pid in descendants(p.pid):
                found = True
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
            signal_group(p, signal.SIGKILL)
        for p in procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.wait(timeout=2)
        if not found:
            return
        time.sleep(0.05)
