"""Preflight: check the nodes a job actually got, before step 1, and stop on a bad one.

    torchrun ... -m training.preflight --expect intra_busbw=288,inter_busbw=225,tflops=445 --json out.json
    torchrun ... -m training.finetune --preflight --preflight_expect intra_busbw=288,... <flags>

What it measures (every rank, NCCL on CUDA, gloo on CPU):

- all-gather, reduce-scatter and all-reduce over a range of sizes, **within each node** (the
  ranks of one torchrun agent, ``GROUP_RANK``) and **across nodes**, node pairs in two rounds
  ((0,1), (2,3), ... then (1,2), (3,4), ..., (N-1,0)) so a slow link is named by its two ends,
  plus the whole world when there are more than two nodes. Reported as nccl-tests does
  (NVIDIA/nccl-tests doc/PERFORMANCE.md): ``algbw = S / t`` with S the full tensor (for
  all-gather and reduce-scatter ``count per rank x n``), ``busbw = algbw x 2(n-1)/n`` for
  all-reduce and ``algbw x (n-1)/n`` for all-gather and reduce-scatter. t is the slowest rank's
  mean over the timed iterations;
- dense matmul TFLOP/s (2 n^3 per product; bf16 on CUDA, fp32 on CPU) and memory bandwidth
  (a device-to-device copy moves 2 x its bytes) of each rank's device, every rank at once
  after a barrier, the median of rounds of ``--iters`` calls over at least ``DEVICE_MIN_S``;
- the network NCCL picked on every rank (``Using network OFI`` / ``Libfabric`` / ``AWS
  Libfabric`` vs ``Socket``) and, under OFI, the libfabric provider (``efa``), read from NCCL's
  INFO log when the job writes one (``NCCL_DEBUG_FILE``) or from ``NCCL_NET``, which NCCL
  honours strictly (it fails to initialise rather than fall back); GPUs per node; ECC,
  row-remapping and XID state where ``nvidia-smi`` and the kernel log are readable.

Expectations (``--expect``) come from the instance catalog when the job is rendered
(``planner.expect``); below any of them the check exits 3 after printing ONE line naming the
node(s) and the link, e.g.::

    preflight: FAILED inter-node ip-10-1-2-3 <-> ip-10-1-7-9: all_reduce busbw 4.1 GB/s < 225.0 GB/s expected

The report (JSON and a table) goes to stdout / ``--json``; ``training.prometheus`` exports it.
Imports torch only inside functions, so ``training.config`` can validate ``--preflight_expect``.
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

OPS = ("all_gather", "reduce_scatter", "all_reduce")
_SCOPES = ("intra", "inter", "world")
FAILED_EXIT = 3
"""Exit status when the nodes are below expectation (2 stays 'bad input')."""


# ------------------------------------------------------------------------------------------------
# nccl-tests' bandwidth formulas


def bus_factor(op: str, n: int) -> float:
    """busbw / algbw for ``op`` on ``n`` ranks (nccl-tests doc/PERFORMANCE.md, 'Summary')."""
    if n < 1:
        raise ValueError(f"ranks {n}: must be >= 1")
    if op == "all_reduce":
        return 2.0 * (n - 1) / n
    if op in ("all_gather", "reduce_scatter"):
        return (n - 1) / n
    raise ValueError(f"op {op!r}: one of {', '.join(OPS)}")


def algbw_gbps(size_bytes: float, seconds: float) -> float:
    """Algorithm bandwidth, GB/s (10^9 bytes, as nccl-tests prints): S / t."""
    return size_bytes / seconds / 1e9 if seconds > 0 else math.inf


def busbw_gbps(op: str, n: int, size_bytes: float, seconds: float) -> float:
    """Bus bandwidth, GB/s: algbw x the op's correction factor."""
    return algbw_gbps(size_bytes, seconds) * bus_factor(op, n)


# ------------------------------------------------------------------------------------------------
# expectations


@dataclass(frozen=True, kw_only=True)
class Expect:
    """Thresholds below which the nodes fail (0 / empty: not checked)."""

    intra_busbw: float = 0.0
    """Minimum busbw of every collective inside one node at the largest size, GB/s."""
    inter_busbw: float = 0.0
    """Minimum busbw of every collective across a pair of nodes at the largest size, GB/s."""
    tflops: float = 0.0
    """Minimum dense matmul TFLOP/s of every device."""
    mem_gbps: float = 0.0
    """Minimum memory bandwidth of every device, GB/s."""
    net: str = ""
    """Transport NCCL must use across nodes (``OFI`` on EFA instances); NET/Socket never passes."""
    gpus: int = 0
    """Processes (GPUs) per node the job must have got."""

    def to_arg(self) -> str:
        """The ``k=v,...`` form ``parse_expect`` reads (non-default fields only)."""
        parts = []
        for f in fields(self):
            value = getattr(self, f.name)
            if value != f.default:
                parts.append(
                    f"{f.name}={value:g}" if isinstance(value, float) else f"{f.name}={value}"
                )
        return ",".join(parts)


def parse_expect(text: str) -> Expect:
    """``intra_busbw=288,inter_busbw=225,tflops=445,mem_gbps=1600,net=OFI,gpus=8`` -> Expect.

    ValueError naming the key on bad input.
    """
    kinds = {f.name: f.type for f in fields(Expect)}
    values: dict[str, Any] = {}
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        key, sep, raw = part.partition("=")
        key = key.strip()
        if not sep or key not in kinds:
            raise ValueError(f"{part!r}: expected key=value with key one of {', '.join(kinds)}")
        if key in values:
            raise ValueError(f"{key}: given twice")
        raw = raw.strip()
        if kinds[key] == "str":
            if not re.fullmatch(r"[A-Za-z0-9_]+", raw):
                raise ValueError(f"{key}={raw!r}: a transport name such as OFI, IB or Socket")
            values[key] = raw
            continue
        try:
            number = float(raw) if kinds[key] == "float" else int(raw)
        except ValueError:
            raise ValueError(f"{key}={raw!r}: not a number") from None
        if not math.isfinite(number) or number < 0:
            raise ValueError(f"{key}={raw!r}: must be a finite number >= 0")
        values[key] = number
    return Expect(**values)


# ------------------------------------------------------------------------------------------------
# parsers of what NCCL, nvidia-smi and the kernel say (pure; tested on captured text)

_USING_NETWORK = re.compile(r"NCCL INFO Using network (.+?)\s*$", re.M)
"""NCCL's choice of network module (src/init.cc: ``INFO(NCCL_INIT, "Using network %s",
...)``): ``Socket``, ``IB`` or a plugin's own name. aws-ofi-nccl calls itself ``AWS Libfabric``
(1.11.0 and before), ``Libfabric`` (later), or ``OFI`` / ``AWS Libfabric`` when NCCL_NET asks for
that name (src/nccl_ofi_interface_nvidia.c, ``nvidia_plugin_name_fixup``)."""
_VIA_NET = re.compile(r"via NET/([A-Za-z][A-Za-z ]*?)/\d")
"""Connection lines: ``Channel 00/0 : 0[0] -> 8[0] [send] via NET/AWS Libfabric/0``,
``... via NET/Socket/0``, ``... via NET/IB/0``."""
_OFI_PROVIDER = re.compile(r"NET/OFI Selected [Pp]rovider is ([A-Za-z0-9_;+-]+)")
"""aws-ofi-nccl's ``NET/OFI Selected Provider is efa (found 4 nics)``: the libfabric provider
under the plugin. ``efa`` on EFA instances; ``tcp`` / ``sockets`` would carry NCCL over TCP
behind an ``OFI`` network name."""


def net_name(raw: str) -> str:
    """A network module's name as this module reports it: ``OFI``, ``IB``, ``Socket`` or raw."""
    low = raw.strip().lower()
    if low in ("ofi", "libfabric", "aws libfabric"):
        return "OFI"
    if low == "ib":
        return "IB"
    if low == "socket":
        return "Socket"
    return raw.strip()


def transport_from_nccl_log(text: str) -> str | None:
    """The network transport an NCCL INFO log shows (``OFI``, ``IB``, ``Socket``), or None.

    ``Using network ...`` lines (the module NCCL selected) decide; without one, the
    connection lines (``via NET/...``). Socket anywhere wins: a log with one communicator on
    Socket is a job with one slow link. aws-ofi-nccl's other ``NET/OFI`` lines do not count:
    the plugin prints them also when it fails to initialise and NCCL falls back to Socket
    (NVIDIA/nccl#229: "NET/OFI Could not find any optimal provider" ... "Using network Socket").
    """
    names = {net_name(m) for m in _USING_NETWORK.findall(text)}
    if not names:
        names = {net_name(m) for m in _VIA_NET.findall(text)}
    for name in ("Socket", "IB", "OFI"):
        if name in names:
            return name
    return sorted(names)[0] if names else None


def ofi_provider_from_nccl_log(text: str) -> str | None:
    """The libfabric provider aws-ofi-nccl selected (``efa``), or None when the log has none."""
    found = _OFI_PROVIDER.findall(text)
    return found[-1] if found else None


FATAL_XIDS = frozenset({48, 64, 74, 79, 92, 94, 95, 119, 120})
"""XIDs whose resolution in NVIDIA's Xid catalog (docs.nvidia.com/deploy/xid-errors,
"Analyzing Xid Errors with the Xid Catalog") is a GPU reset or node service, not an application
restart: double-bit ECC (48), a page or row that could not be retired / remapped (64), NVLink
(74), fallen off the bus (79), excessive SBE (92), contained / uncontained ECC (94, 95), GSP
(119, 120). Others (13, 31, 43: an application's own faults) are reported but do not fail the
node. Nor does 63, a page retired or a row remapped successfully ("Dynamic Page Retirement",
docs.nvidia.com/deploy/dynamic-page-retirement): the remap is pending until the next GPU reset,
and "unaffected applications can continue running without affecting accuracy and performance,
and new workloads can be launched" (A100 GPU memory error management, "Error Recovery and
Response Flags"). The kernel log keeps it until reboot, so failing on it would keep a healthy
node out of every restart."""

_XID = re.compile(r"NVRM: Xid \(PCI:([0-9a-fA-F:.]+)\): (\d+)")


def xids_from_kernel_log(text: str) -> list[dict[str, Any]]:
    """``NVRM: Xid (PCI:0000:10:1c): 79, pid=...`` lines -> [{"pci": ..., "xid": 79}, ...]."""
    return [{"pci": m.group(1), "xid": int(m.group(2))} for m in _XID.finditer(text)]


SMI_QUERY = "index,pci.bus_id,ecc.errors.uncorrected.volatile.total"
"""``nvidia-smi --query-gpu`` fields (``nvidia-smi --help-query-gpu``)."""
REMAP_QUERY = "gpu_bus_id,remapped_rows.pending,remapped_rows.failure"
"""``nvidia-smi --query-remapped-rows`` fields: the row remapper has its own query, as NVIDIA's
A100 GPU memory error management guide runs it (``nvidia-smi --query-remapped-rows=gpu_bus_id,
...,remapped_rows.pending,remapped_rows.failure --format=csv``); Ampere and newer only."""


def _smi_int(raw: str) -> int | None:
    return int(raw) if raw.isdigit() else None


def _smi_flag(raw: str) -> bool | None:
    low = raw.strip().lower()
    if low in ("yes", "1"):
        return True
    if low in ("no", "0"):
        return False
    return None  # [N/A], [Not Supported], empty


def gpus_from_smi_csv(text: str, remap: str = "") -> list[dict[str, Any]]:
    """``nvidia-smi --query-gpu=SMI_QUERY --format=csv,noheader,nounits`` (and the
    ``--query-remapped-rows=REMAP_QUERY`` output, matched by PCI bus id) -> one dict per GPU.

    ``[N/A]`` / ``[Not Supported]`` become None. A pending remap is reported, not judged (it
    takes effect at the next GPU reset and the GPU stays usable); a failed remap fails the node.
    """
    rows: dict[str, list[str]] = {}
    for line in remap.strip().splitlines():
        cols = [c.strip() for c in line.split(",")]
        if len(cols) == 3:
            rows[cols[0].lower()] = cols
    out = []
    for line in text.strip().splitlines():
        cols = [c.strip() for c in line.split(",")]
        if len(cols) != 3:
            continue
        r = rows.get(cols[1].lower())
        out.append(
            {
                "index": _smi_int(cols[0]),
                "pci": cols[1],
                "ecc_uncorrected": _smi_int(cols[2]),
                "row_remap_pending": _smi_flag(r[1]) if r else None,
                "row_remap_failure": _smi_flag(r[2]) if r else None,
            }
        )
    return out


def _run_smi(smi: str, query: str) -> tuple[str | None, str | None]:
    """(stdout, None) or (None, why): a failed query is reported, never silently skipped."""
    try:
        res = subprocess.run(
            [smi, query, "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        return None, f"{query}: {e}"
    if res.returncode != 0:
        first = (res.stderr or res.stdout).strip().splitlines()
        return None, f"{query}: exit {res.returncode}{': ' + first[0] if first else ''}"
    return res.stdout, None


def gpu_health() -> dict[str, Any]:
    """ECC / row-remap state from nvidia-smi and XIDs from the kernel log, where readable."""
    health: dict[str, Any] = {"nvidia_smi": False, "gpus": [], "xids": None, "errors": []}
    smi = shutil.which("nvidia-smi")
    if smi:
        ecc, err = _run_smi(smi, f"--query-gpu={SMI_QUERY}")
        remap, err_remap = _run_smi(smi, f"--query-remapped-rows={REMAP_QUERY}")
        health["errors"] = [e for e in (err, err_remap) if e]
        if ecc is not None:
            health["nvidia_smi"] = True
            health["gpus"] = gpus_from_smi_csv(ecc, remap or "")
    dmesg = shutil.which("dmesg")
    if dmesg:  # containers usually cannot read the kernel log: then XIDs stay unknown (None)
        try:
            res = subprocess.run([dmesg], capture_output=True, text=True, timeout=10, check=False)
        except (OSError, subprocess.TimeoutExpired):
            res = None
        if res is not None and res.returncode == 0:
            health["xids"] = xids_from_kernel_log(res.stdout)
    return health


def nccl_debug_file(template: str, hostname: str, pid: int) -> str:
    """``NCCL_DEBUG_FILE`` expanded as NCCL's src/debug.cc does: ``%h`` the host name up to its
    first dot (``getHostName(hostname, 1024, '.')``), ``%p`` the process id, ``%%`` a percent
    sign; any other ``%x`` stays as it is."""
    host = hostname.split(".", 1)[0]
    out, i = [], 0
    while i < len(template):
        ch = template[i]
        if ch != "%" or i + 1 >= len(template):
            out.append(ch)
            i += 1
            continue
        nxt = template[i + 1]
        out.append({"%": "%", "h": host, "p": str(pid)}.get(nxt, "%" + nxt))
        i += 2
    return "".join(out)


def detect_transport(backend: str, env: dict[str, str] | os._Environ[str]) -> dict[str, str | None]:
    """What carries inter-node traffic, and how we know.

    gloo: TCP. NCCL: the INFO log in ``NCCL_DEBUG_FILE`` when present (``nccl_debug_file``:
    this host and process), else ``NCCL_NET``: NCCL
    fails to initialise when the named network cannot be used (NCCL env docs, NCCL_NET: "make
    sure NCCL uses an external plugin and doesn't automatically fall back on the internal IB or
    Socket implementation"), so a collective that completed under NCCL_NET=OFI ran on the OFI
    plugin. ``provider``: the libfabric provider under OFI, when the log names it.
    """
    if "nccl" not in backend:
        return {"transport": "gloo/tcp", "source": "backend", "provider": None}
    log = env.get("NCCL_DEBUG_FILE", "")
    if log:
        path = Path(nccl_debug_file(log, socket.gethostname(), os.getpid()))
        if path.is_file():
            text = path.read_text(errors="replace")
            found = transport_from_nccl_log(text)
            if found:
                return {
                    "transport": found,
                    "source": str(path),
                    "provider": ofi_provider_from_nccl_log(text) if found == "OFI" else None,
                }
    net = env.get("NCCL_NET", "")
    if net:
        return {"transport": net_name(net), "source": "NCCL_NET", "provider": None}
    return {"transport": None, "source": None, "provider": None}


# ------------------------------------------------------------------------------------------------
# measurements


def parse_size(text: str) -> int:
    """``64K`` / ``16M`` / ``1G`` / ``4096`` -> bytes."""
    m = re.fullmatch(r"\s*(\d+)\s*([KMG]?)i?B?\s*", text, re.I)
    if not m:
        raise ValueError(f"size {text!r}: a byte count such as 4096, 64K, 16M or 1G")
    return int(m.group(1)) * {"": 1, "K": 2**10, "M": 2**20, "G": 2**30}[m.group(2).upper()]


def _sync(device: torch.device) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _timed(
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
    seconds = _timed(lambda: torch.mm(a, b, out=out), device, 2, iters, DEVICE_MIN_S)
    return 2.0 * n**3 / seconds / 1e12


def memory_gbps(device: torch.device, nbytes: int, iters: int) -> float:
    """Copy bandwidth, GB/s: a copy reads and writes ``nbytes`` each."""
    import torch

    src = torch.empty(nbytes // 4, device=device, dtype=torch.float32).fill_(1.0)
    dst = torch.empty_like(src)
    seconds = _timed(lambda: dst.copy_(src), device, 2, iters, DEVICE_MIN_S)
    return 2.0 * src.numel() * 4 / seconds / 1e9


def _collective(
    op: str, size: int, n: int, group: Any, device: torch.device
) -> Callable[[], object]:
    """One call of ``op`` whose full tensor is ``size`` bytes (fp32) across ``n`` ranks.

    As FSDP2 issues them: the all-gather's output and the reduce-scatter's output are new
    tensors every call (``_fsdp_collectives.py``: ``all_gather_comm.allocate`` /
    ``reduce_scatter_comm.allocate`` per unit and step), so the figure includes what a fresh
    buffer costs the device (nothing with CUDA's caching allocator; first-touch page faults
    on CPU, measured 1.3 -> 2.0 ms for a 2.9 MB gloo all-gather of 2 ranks).
    """
    import torch
    import torch.distributed as dist

    per_rank = max(1, size // 4 // n)
    full = torch.ones(per_rank * n, device=device, dtype=torch.float32)
    part = torch.ones(per_rank, device=device, dtype=torch.float32)
    if op == "all_gather":
        return lambda: dist.all_gather_into_tensor(torch.empty_like(full), part, group=group)
    if op == "reduce_scatter":
        return lambda: dist.reduce_scatter_tensor(torch.empty_like(part), full, group=group)
    return lambda: dist.all_reduce(full, group=group)


@dataclass(frozen=True)
class Link:
    """A set of ranks measured together, and what to call it in a failure line."""

    scope: str
    """``intra`` (one node), ``inter`` (a pair of nodes) or ``world`` (every node)."""
    name: str
    """``node-a`` / ``node-a <-> node-b`` / ``all N nodes``."""
    ranks: tuple[int, ...]


def links(nodes: Sequence[tuple[str, Sequence[int]]]) -> list[list[Link]]:
    """Rounds of disjoint links: every node alone, then neighbouring node pairs (two rounds, three
    for an odd ring), then the world.

    Links in one round share no rank, so they run at the same time (as training does).
    """
    rounds: list[list[Link]] = []
    intra = [Link("intra", name, tuple(r)) for name, r in nodes if len(r) > 1]
    if intra:
        rounds.append(intra)
    n = len(nodes)
    if n >= 2:
        pairs_a = [(i, i + 1) for i in range(0, n - 1, 2)]
        pairs_b = [(i, (i + 1) % n) for i in range(1, n, 2)] if n > 2 else []
        # an odd ring closes in a third round: (N-1, 0) shares a node with both others
        pairs_c = [(n - 1, 0)] if n > 2 and n % 2 else []
        for pairs in (pairs_a, pairs_b, pairs_c):
            if pairs:
                rounds.append(
                    [
                        Link(
                            "inter",
                            f"{nodes[i][0]} <-> {nodes[j][0]}",
                            tuple(sorted([*nodes[i][1], *nodes[j][1]])),
                        )
                        for i, j in pairs
                    ]
                )
    if n > 2:
        everyone = tuple(sorted(r for _name, rs in nodes for r in rs))
        rounds.append([Link("world", f"all {n} nodes", everyone)])
    return rounds


@dataclass(frozen=True, kw_only=True)
class Options:
    """How much to measure."""

    sizes: tuple[int, ...]
    """Full-tensor sizes of the collectives, bytes."""
    iters: int = 5
    warmup: int = 2
    matmul_n: int = 0
    """Matmul size (0: 8192 on CUDA, 512 on CPU)."""
    mem_bytes: int = 0
    """Bytes copied for the bandwidth test (0: 1 GiB on CUDA, 64 MiB on CPU)."""


def default_sizes(cuda: bool) -> tuple[int, ...]:
    """1 MiB..256 MiB on GPUs (bandwidth-bound at the top), 64 KiB..4 MiB on CPU (gloo)."""
    if cuda:
        return tuple(2**20 * 4**k for k in range(5))
    return tuple(2**16 * 4**k for k in range(4))


def _node_layout() -> tuple[str, int]:
    """(name, node index) of this process: NODE_NAME (downward API) or the host; GROUP_RANK."""
    name = os.environ.get("NODE_NAME") or socket.gethostname()
    return name, int(os.environ.get("GROUP_RANK", "0"))


def measure(opts: Options, device: torch.device) -> dict[str, Any]:
    """Run every measurement on every rank; return the whole report (identical on all ranks)."""
    import torch
    import torch.distributed as dist

    rank, world = dist.get_rank(), dist.get_world_size()
    backend = str(dist.get_backend())
    name, node = _node_layout()
    info: list[Any] = [None] * world
    dist.all_gather_object(info, {"rank": rank, "node": node, "name": name})
    by_node: dict[int, list[int]] = {}
    names: dict[int, str] = {}
    for entry in info:
        by_node.setdefault(entry["node"], []).append(entry["rank"])
        names.setdefault(entry["node"], entry["name"])
    # Two agents on one host (a local run) share a host name: tell them apart by index.
    if len(set(names.values())) < len(names):
        names = {k: f"{v}/node{k}" for k, v in names.items()}
    nodes = [(names[k], sorted(by_node[k])) for k in sorted(by_node)]

    rows: list[dict[str, Any]] = []
    for rnd in links(nodes):
        groups = [dist.new_group(list(link.ranks)) for link in rnd]  # every rank, same order
        for link, group in zip(rnd, groups, strict=True):
            if rank not in link.ranks:
                continue
            n = len(link.ranks)
            for op in OPS:
                for size in opts.sizes:
                    fn = _collective(op, size, n, group, device)
                    seconds = _timed(fn, device, opts.warmup, opts.iters)
                    slowest = torch.tensor([seconds], dtype=torch.float64, device=device)
                    dist.all_reduce(slowest, op=dist.ReduceOp.MAX, group=group)
                    seconds = float(slowest.item())
                    full = max(1, size // 4 // n) * n * 4
                    if rank == link.ranks[0]:
                        rows.append(
                            {
                                "scope": link.scope,
                                "link": link.name,
                                "ranks": n,
                                "op": op,
                                "bytes": full,
                                "time_us": seconds * 1e6,
                                "algbw_gbps": algbw_gbps(full, seconds),
                                "busbw_gbps": busbw_gbps(op, n, full, seconds),
                            }
                        )
        dist.barrier()
        # An NCCL communicator keeps its buffers on the GPU until it is destroyed: hand them
        # back before the model is built (a member-less rank's group is NON_GROUP_MEMBER,
        # which destroy_process_group ignores).
        for group in groups:
            dist.destroy_process_group(group)

    cuda = device.type == "cuda"
    dtype = torch.bfloat16 if cuda else torch.float32
    dist.barrier()  # every device measured at once (``DEVICE_MIN_S``)
    tflops = matmul_tflops(
        device, dtype, opts.matmul_n or (8192 if cuda else 512), max(3, opts.iters)
    )
    dist.barrier()  # the copy, too, while every neighbour copies
    mem = memory_gbps(device, opts.mem_bytes or (2**30 if cuda else 64 * 2**20), max(3, opts.iters))
    local = {
        "rank": rank,
        "node": names[node],
        "device": torch.cuda.get_device_name(device) if cuda else "cpu",
        "matmul_dtype": str(dtype).removeprefix("torch."),
        "matmul_tflops": tflops,
        "memory_gbps": mem,
        "rows": rows,
    }
    everything: list[Any] = [None] * world
    dist.all_gather_object(everything, local)
    health = gpu_health() if cuda else {"nvidia_smi": False, "gpus": [], "xids": None, "errors": []}
    per_node_health: list[Any] = [None] * world
    dist.all_gather_object(per_node_health, {"node": names[node], **health})
    # Every rank's own view of the network (each rank's NCCL picks its network itself), so the
    # verdict is the same on every rank: a rank that alone returned "failed" would leave the
    # others waiting in their first training collective.
    mine = detect_transport(backend, os.environ)
    per_rank_transport: list[Any] = [None] * world
    dist.all_gather_object(per_rank_transport, {"node": names[node], "rank": rank, **mine})
    by_node_transport: dict[str, dict[str, Any]] = {}
    for t in per_rank_transport:  # per node: the first rank that differs from rank 0, if any
        first = by_node_transport.setdefault(t["node"], t)
        if (t["transport"], t["provider"]) != (first["transport"], first["provider"]):
            by_node_transport[t["node"]] = t
    return {
        "backend": backend,
        "world_size": world,
        "nodes": [{"name": nm, "ranks": rs} for nm, rs in nodes],
        "transport": {k: per_rank_transport[0][k] for k in ("transport", "source", "provider")},
        "transport_by_node": by_node_transport,
        "collectives": sorted(
            (row for e in everything for row in e["rows"]),
            key=lambda r: (_SCOPES.index(r["scope"]), r["link"], OPS.index(r["op"]), r["bytes"]),
        ),
        "devices": [{k: v for k, v in e.items() if k != "rows"} for e in everything],
        "health": {h["node"]: h for h in per_node_health},
    }


# ------------------------------------------------------------------------------------------------
# verdict


def failures(report: dict[str, Any], expect: Expect) -> list[str]:
    """One line per problem, worst first within each kind; empty when the nodes pass."""
    out: list[str] = []
    nodes = report["nodes"]
    if expect.gpus:
        for node in nodes:
            if len(node["ranks"]) != expect.gpus:
                out.append(
                    f"node {node['name']}: {len(node['ranks'])} processes (GPUs), "
                    f"expected {expect.gpus}"
                )
    rows = report["collectives"]
    for scope, floor, what in (
        ("intra", expect.intra_busbw, "intra-node"),
        ("inter", expect.inter_busbw, "inter-node"),
    ):
        if not floor:
            continue
        top: dict[tuple[str, str], dict[str, Any]] = {}
        for r in rows:
            if r["scope"] == scope:
                link_op = (r["link"], r["op"])
                if link_op not in top or r["bytes"] > top[link_op]["bytes"]:
                    top[link_op] = r
        bad = sorted(
            (r for r in top.values() if r["busbw_gbps"] < floor), key=lambda r: r["busbw_gbps"]
        )
        for r in bad:
            out.append(
                f"{what} {r['link']}: {r['op']} busbw {r['busbw_gbps']:.1f} GB/s < "
                f"{floor:.1f} GB/s expected ({r['bytes'] / 2**20:.0f} MiB, {r['ranks']} ranks)"
            )
    for key, floor, unit, label in (
        ("matmul_tflops", expect.tflops, "TFLOP/s", "matmul"),
        ("memory_gbps", expect.mem_gbps, "GB/s", "memory bandwidth"),
    ):
        if not floor:
            continue
        for d in sorted(report["devices"], key=lambda d: d[key]):
            if d[key] < floor:
                out.append(
                    f"node {d['node']} rank {d['rank']}: {label} {d[key]:.1f} {unit} < "
                    f"{floor:.1f} {unit} expected"
                )
    if expect.net and len(nodes) > 1 and "nccl" in report["backend"]:
        by_node = report.get("transport_by_node") or {"every node": report["transport"]}
        for name, t in by_node.items():
            transport, provider = t["transport"], t.get("provider")
            if transport is None or transport.lower() != expect.net.lower():
                out.append(
                    f"inter-node transport on {name}: NCCL uses "
                    f"{transport or 'an unknown network'} (source {t['source']}), "
                    f"expected {expect.net}"
                )
            elif expect.net.lower() == "ofi" and provider and provider.split(";")[0] != "efa":
                # aws-ofi-nccl over libfabric's tcp/sockets provider: an "OFI" network on TCP
                out.append(
                    f"inter-node transport on {name}: NCCL's OFI plugin uses the libfabric "
                    f"provider {provider} (source {t['source']}), expected efa"
                )
    for name, h in report["health"].items():
        for g in h.get("gpus", []):
            if g.get("ecc_uncorrected"):
                out.append(
                    f"node {name} GPU {g['index']}: {g['ecc_uncorrected']} uncorrected ECC errors"
                )
            if g.get("row_remap_failure"):
                out.append(f"node {name} GPU {g['index']}: row remapping failed")
        for x in h.get("xids") or []:
            if x["xid"] in FATAL_XIDS:
                out.append(f"node {name}: XID {x['xid']} on GPU {x['pci']} (needs a GPU reset)")
    return out


def table(report: dict[str, Any]) -> str:
    """nccl-tests-like text: one line per (link, op, size), then devices."""
    lines = [
        f"preflight: {report['world_size']} ranks on {len(report['nodes'])} node(s), "
        f"backend {report['backend']}, transport {report['transport']['transport']}",
        f"{'scope':<6} {'link':<34} {'op':<15} {'size':>10} {'time us':>10} "
        f"{'algbw GB/s':>11} {'busbw GB/s':>11}",
    ]
    for r in report["collectives"]:
        lines.append(
            f"{r['scope']:<6} {r['link'][:34]:<34} {r['op']:<15} {r['bytes']:>10} "
            f"{r['time_us']:>10.1f} {r['algbw_gbps']:>11.3f} {r['busbw_gbps']:>11.3f}"
        )
    for d in report["devices"]:
        lines.append(
            f"rank {d['rank']:>4} on {d['node']}: {d['device']}, matmul {d['matmul_tflops']:.3f} "
            f"TFLOP/s ({d['matmul_dtype']}), memory {d['memory_gbps']:.1f} GB/s"
        )
    for name, h in report["health"].items():
        lines.extend(
            f"node {name}: nvidia-smi {e} (ECC / row-remap state unknown)"
            for e in h.get("errors", [])
        )
    return "\n".join(lines)


def summary(report: dict[str, Any]) -> dict[str, float]:
    """The figures calibration and dashboards use: worst busbw per scope at the largest size,
    lowest matmul TFLOP/s and memory bandwidth."""
    out: dict[str, float] = {}
    for scope in ("intra", "inter", "world"):
        rows = [r for r in report["collectives"] if r["scope"] == scope]
        if rows:
            top = max(r["bytes"] for r in rows)
            out[f"{scope}_busbw_gbps"] = min(r["busbw_gbps"] for r in rows if r["bytes"] == top)
    out["matmul_tflops"] = min(d["matmul_tflops"] for d in report["devices"])
    out["memory_gbps"] = min(d["memory_gbps"] for d in report["devices"])
    return out


def check(opts: Options, expect: Expect, device: torch.device) -> tuple[dict[str, Any], list[str]]:
    """Measure, judge, and record the verdict in the report (and for the Prometheus exporter)."""
    from training import prometheus

    report = measure(opts, device)
    report["expect"] = asdict(expect)
    report["summary"] = summary(report)
    problems = failures(report, expect)
    report["passed"] = not problems
    report["failures"] = problems
    prometheus.set_preflight(report)
    if device.type == "cuda":
        import torch

        torch.cuda.empty_cache()  # hand the test buffers back before the model is built
    return report, problems


def _one_line(problems: list[str]) -> str:
    more = len(problems) - 1
    return problems[0] + (f" (+{more} more in the report)" if more else "")


def gate(expect_text: str, out_dir: str | Path, device: torch.device) -> int:
    """``finetune --preflight``: check, write ``preflight.json``, 0 or FAILED_EXIT.

    Called on every rank after the process group forms and before the trainer is built.
    """
    import torch.distributed as dist

    expect = parse_expect(expect_text)
    opts = Options(sizes=default_sizes(device.type == "cuda"))
    report, problems = check(opts, expect, device)
    if dist.get_rank() == 0:
        path = Path(out_dir) / "preflight.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(report, indent=2) + "\n")
        print(table(report), flush=True)
        if problems:
            print(f"preflight: FAILED {_one_line(problems)}", file=sys.stderr, flush=True)
        else:
            print("preflight: passed", flush=True)
    dist.barrier()  # no rank exits (and makes torchrun stop the others) before rank 0 reported
    return FAILED_EXIT if problems else 0


# ------------------------------------------------------------------------------------------------
# CLI


def _parse(argv: Sequence[str] | None) -> Any:
    import argparse

    p = argparse.ArgumentParser(
        prog="python -m training.preflight", description=__doc__.splitlines()[0]
    )
    p.add_argument(
        "--expect",
        default="",
        help="thresholds: intra_busbw=,inter_busbw=,tflops=,mem_gbps=,net=,gpus=",
    )
    p.add_argument(
        "--sizes", default="", help="collective sizes, e.g. 1M,16M,256M (default by device)"
    )
    p.add_argument(
        "--iters",
        type=int,
        default=5,
        help="timed iterations per measurement (per round for the device figures)",
    )
    p.add_argument("--warmup", type=int, default=2, help="untimed iterations first")
    p.add_argument(
        "--matmul_n", type=int, default=0, help="matmul size (default 8192 GPU / 512 CPU)"
    )
    p.add_argument("--json", type=Path, help="write the report here (rank 0)")
    p.add_argument("--metrics_port", type=int, default=0, help="serve the report for Prometheus")
    p.add_argument("--hold_s", type=float, default=0.0, help="keep serving metrics this long")
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = _parse(argv)
    try:
        expect = parse_expect(args.expect)
        sizes = tuple(parse_size(s) for s in args.sizes.split(",") if s.strip())
        for flag in ("iters", "warmup", "matmul_n"):
            if getattr(args, flag) < (1 if flag == "iters" else 0):
                raise ValueError(f"--{flag} {getattr(args, flag)}: too small")
    except ValueError as e:
        print(
            f"error: --expect/--sizes: {e}" if "--" not in str(e) else f"error: {e}",
            file=sys.stderr,
        )
        return 2
    from training.dist import distributed

    with distributed() as env:
        opts = Options(
            sizes=sizes or default_sizes(env.device.type == "cuda"),
            iters=args.iters,
            warmup=args.warmup,
            matmul_n=args.matmul_n,
        )
        report, problems = check(opts, expect, env.device)
        sink = None
        if args.metrics_port and int(os.environ.get("LOCAL_RANK", "0")) == 0:
            from training.prometheus import PrometheusSink

            sink = PrometheusSink(args.metrics_port)
        if env.is_main:
            print(table(report))
            if args.json:
                args.json.parent.mkdir(parents=True, exist_ok=True)
                args.json.write_text(json.dumps(report, indent=2) + "\n")
            if problems:
                print(f"preflight: FAILED {_one_line(problems)}", file=sys.stderr, flush=True)
            else:
                print("preflight: passed", flush=True)
        if sink is not None:
            time.sleep(args.hold_s)
            sink.close()
        import torch.distributed as dist

        dist.barrier()  # rank 0 reports before any rank exits
    return FAILED_EXIT if problems else 0


if __name__ == "__main__":
    sys.exit(main())
