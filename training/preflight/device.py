"""What one device gives: dense matmul TFLOP/s and copy bandwidth, and the timer every
preflight figure (collectives too) is measured with."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch


def _sync(device: torch.device) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed(
    fn: Callable[[], object], device: torch.device, warmup: int, iters: int, min_s: float = 0.0
) -> float:
    """Seconds per call of ``fn`` after ``warmup`` calls: the mean of ``iters`` calls, or with
    ``min_s`` the median over rounds of ``iters`` calls (one sync per round), at least five
    rounds and ``min_s`` seconds in all, so that a moment of other work on the device (a
    neighbour's thread, a descheduled vCPU) does not become the figure."""
    for _ in range(warmup):
        fn()
    _sync(device)
    rounds: list[float] = []
    start = time.perf_counter()
    while True:
        t0 = time.perf_counter()
        for _ in range(iters):
            fn()
        _sync(device)
        rounds.append((time.perf_counter() - t0) / iters)
        if min_s <= 0.0 or (len(rounds) >= 5 and time.perf_counter() - start >= min_s):
            return statistics.median(rounds)


DEVICE_MIN_S = 0.5
"""Least time each device figure (matmul, copy) is measured for. Every rank measures at once,
right after a barrier, so the figure is what a device gives while its neighbours work too
(cores sharing caches and memory bandwidth, GPUs sharing a power budget); the planner scales
a calibrated compute by it (``planner.calibrate.with_preflight``)."""


def matmul_tflops(device: torch.device, dtype: torch.dtype, n: int, iters: int) -> float:
    """Dense n x n x n matmul TFLOP/s (2 n^3 FLOPs per product)."""
    import torch

    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)
    out = torch.empty(n, n, device=device, dtype=dtype)
    seconds = timed(lambda: torch.mm(a, b, out=out), device, 2, iters, DEVICE_MIN_S)
    return 2.0 * n**3 / seconds / 1e12


def memory_gbps(device: torch.device, nbytes: int, iters: int) -> float:
    """Copy bandwidth, GB/s: a copy reads and writes ``nbytes`` each."""
    import torch

    src = torch.empty(nbytes // 4, device=device, dtype=torch.float32).fill_(1.0)
    dst = torch.empty_like(src)
    seconds = timed(lambda: dst.copy_(src), device, 2, iters, DEVICE_MIN_S)
    return 2.0 * src.numel() * 4 / seconds / 1e9
