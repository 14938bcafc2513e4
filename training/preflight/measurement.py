"""One preflight run on every rank: the node layout, the collectives over every link, the
device figures, health and transport, gathered into one report (identical on all ranks)."""

from __future__ import annotations

import os
import re
import socket
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from training.preflight.collectives import OPS, SCOPES, algbw_gbps, busbw_gbps, collective, links
from training.preflight.device import matmul_tflops, memory_gbps, timed
from training.preflight.health import efa_devices, gpu_health
from training.preflight.transport import detect_transport

if TYPE_CHECKING:
    import torch


def parse_size(text: str) -> int:
    """``64K`` / ``16M`` / ``1G`` / ``4096`` -> bytes."""
    m = re.fullmatch(r"\s*(\d+)\s*([KMG]?)i?B?\s*", text, re.I)
    if not m:
        raise ValueError(f"size {text!r}: a byte count such as 4096, 64K, 16M or 1G")
    return int(m.group(1)) * {"": 1, "K": 2**10, "M": 2**20, "G": 2**30}[m.group(2).upper()]


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
    link_timeout_s: float | None = None
    """Collective timeout of each link's process group (``dist.new_group(timeout=...)``);
    None: the default group's (``training.dist.INIT_TIMEOUT_S``, 1800 s). The gate passes
    ``cli.GATE_LINK_TIMEOUT_S`` so a hung EFA link fails the attempt in minutes."""


def default_sizes(cuda: bool) -> tuple[int, ...]:
    """1 MiB..256 MiB on GPUs (bandwidth-bound at the top), 64 KiB..4 MiB on CPU (gloo)."""
    if cuda:
        return tuple(2**20 * 4**k for k in range(5))
    return tuple(2**16 * 4**k for k in range(4))


def _node_layout() -> tuple[str, int]:
    """(name, node index) of this process: NODE_NAME (downward API) or the host; GROUP_RANK."""
    name = os.environ.get("NODE_NAME") or socket.gethostname()
    return name, int(os.environ.get("GROUP_RANK", "0"))


@dataclass(frozen=True)
class Census:
    """Where every rank runs and what its node gave it, known before any device collective."""

    node: int
    """This process's node index (``GROUP_RANK``)."""
    names: dict[int, str]
    """Node index -> node name (host names shared by local agents get ``/node<k>``)."""
    nodes: list[tuple[str, list[int]]]
    """(name, ranks) per node, by node index."""
    efa: dict[str, int]
    """Node name -> the fewest EFA (verbs) devices any of its ranks sees."""


def census() -> Census:
    """Gather the node layout and each node's EFA device count over the CPU backend.

    ``all_gather_object`` runs on ``_get_object_coll_device(group)``, which for a group made of
    ``"cpu:gloo,cuda:nccl"`` is ``cpu`` (torch v2.13.0 torch/distributed/distributed_c10d.py:
    "If "cpu" is among those pairs, use "cpu""): gloo over TCP, so a node without EFA devices
    is named here instead of killing the first NCCL communicator (``NCCL_NET=OFI`` fails to
    initialise without them).
    """
    import torch.distributed as dist

    name, node = _node_layout()
    info: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(
        info, {"rank": dist.get_rank(), "node": node, "name": name, "efa": efa_devices()}
    )
    by_node: dict[int, list[int]] = {}
    names: dict[int, str] = {}
    efa: dict[int, int] = {}
    for entry in info:
        by_node.setdefault(entry["node"], []).append(entry["rank"])
        names.setdefault(entry["node"], entry["name"])
        efa[entry["node"]] = min(efa.get(entry["node"], entry["efa"]), entry["efa"])
    # Two agents on one host (a local run) share a host name: tell them apart by index.
    if len(set(names.values())) < len(names):
        names = {k: f"{v}/node{k}" for k, v in names.items()}
    return Census(
        node=node,
        names=names,
        nodes=[(names[k], sorted(by_node[k])) for k in sorted(by_node)],
        efa={names[k]: efa[k] for k in sorted(efa)},
    )


def node_report(layout: Census, backend: str) -> dict[str, Any]:
    """A report of the node-local checks alone (``verdict.problems`` reads ``gpus`` and
    ``efa`` from it): no collective, device or transport figures."""
    return {
        "stage": "nodes",
        "backend": backend,
        "world_size": sum(len(ranks) for _name, ranks in layout.nodes),
        "nodes": [{"name": nm, "ranks": rs} for nm, rs in layout.nodes],
        "transport": {"transport": None, "source": None, "provider": None},
        "transport_by_node": {},
        "collectives": [],
        "devices": [],
        "health": {nm: {"node": nm, "efa_devices": n} for nm, n in layout.efa.items()},
    }


def measure(opts: Options, device: torch.device, layout: Census | None = None) -> dict[str, Any]:
    """Run every measurement on every rank; return the whole report (identical on all ranks).

    ``layout``: the ``census()`` the caller already gathered (gathered here when None).
    """
    import torch
    import torch.distributed as dist

    rank, world = dist.get_rank(), dist.get_world_size()
    backend = str(dist.get_backend())
    layout = layout or census()
    node, names, nodes = layout.node, layout.names, layout.nodes
    timeout = (
        {} if opts.link_timeout_s is None else {"timeout": timedelta(seconds=opts.link_timeout_s)}
    )

    rows: list[dict[str, Any]] = []
    for rnd in links(nodes):
        # every rank, same order
        groups = [dist.new_group(list(link.ranks), **timeout) for link in rnd]
        for link, group in zip(rnd, groups, strict=True):
            if rank not in link.ranks:
                continue
            n = len(link.ranks)
            for op in OPS:
                for size in opts.sizes:
                    fn = collective(op, size, n, group, device)
                    seconds = timed(fn, device, opts.warmup, opts.iters)
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
    health["efa_devices"] = efa_devices()
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
            key=lambda r: (SCOPES.index(r["scope"]), r["link"], OPS.index(r["op"]), r["bytes"]),
        ),
        "devices": [{k: v for k, v in e.items() if k != "rows"} for e in everything],
        "health": {h["node"]: h for h in per_node_health},
    }
