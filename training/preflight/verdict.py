"""The verdict on a preflight report: the expectations (``--expect``), one line per problem,
the nccl-tests-like table and the summary figures calibration and dashboards read."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, fields
from typing import Any

from training.preflight.health import FATAL_XIDS


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
    efa: int = 0
    """EFA devices every node's container must see (``health.efa_devices``): the pod's
    ``vpc.amazonaws.com/efa`` request or its EFA ResourceClaim."""

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
    """``intra_busbw=288,inter_busbw=225,tflops=445,mem_gbps=1600,net=OFI,gpus=8,efa=32`` ->
    Expect.

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


def merge_expect(*texts: str) -> str:
    """``k=v`` expectation strings joined, a later key replacing an earlier one (a job file's
    ``preflight: {expect: ...}`` over the catalog's); ValueError on bad input."""
    merged: dict[str, str] = {}
    for text in texts:
        parse_expect(text)
        for part in (p.strip() for p in text.split(",")):
            if part:
                key, _, raw = part.partition("=")
                merged.pop(key.strip(), None)
                merged[key.strip()] = raw.strip()
    return ",".join(f"{k}={v}" for k, v in merged.items())


@dataclass(frozen=True)
class Problem:
    """One failed check: where (a node, a node and rank, a link) and what."""

    where: str
    """``node ip-10-1-2-3``, ``node ip-10-1-2-3 rank 5``, ``inter-node a <-> b``, ..."""
    what: str
    """The check that failed, with the figures: ``EFA devices 0/32``."""

    def __str__(self) -> str:
        return f"{self.where}: {self.what}"

    def line(self) -> str:
        """The gate's one line (stderr, the container's termination message, ``jobs status``):
        ``preflight failed on node ip-10-1-2-3: EFA devices 0/32``."""
        return f"preflight failed on {self.where}: {self.what}"


def failures(report: dict[str, Any], expect: Expect) -> list[str]:
    """One line per problem, worst first within each kind; empty when the nodes pass."""
    return [str(p) for p in problems(report, expect)]


def problems(report: dict[str, Any], expect: Expect) -> list[Problem]:
    """Every failed check, worst first within each kind; empty when the nodes pass."""
    out: list[Problem] = []
    nodes = report["nodes"]
    if expect.gpus:
        for node in nodes:
            if len(node["ranks"]) != expect.gpus:
                out.append(
                    Problem(
                        f"node {node['name']}",
                        f"{len(node['ranks'])} processes (GPUs), expected {expect.gpus}",
                    )
                )
    if expect.efa:
        for name, h in report["health"].items():
            seen = h.get("efa_devices")
            if seen is None or seen < expect.efa:
                out.append(Problem(f"node {name}", f"EFA devices {seen or 0}/{expect.efa}"))
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
                Problem(
                    f"{what} {r['link']}",
                    f"{r['op']} busbw {r['busbw_gbps']:.1f} GB/s < {floor:.1f} GB/s expected "
                    f"({r['bytes'] / 2**20:.0f} MiB, {r['ranks']} ranks)",
                )
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
                    Problem(
                        f"node {d['node']} rank {d['rank']}",
                        f"{label} {d[key]:.1f} {unit} < {floor:.1f} {unit} expected",
                    )
                )
    if expect.net and len(nodes) > 1 and "nccl" in report["backend"]:
        by_node = report.get("transport_by_node") or {"every node": report["transport"]}
        for name, t in by_node.items():
            transport, provider = t["transport"], t.get("provider")
            if transport is None or transport.lower() != expect.net.lower():
                out.append(
                    Problem(
                        f"inter-node transport on {name}",
                        f"NCCL uses {transport or 'an unknown network'} (source {t['source']}), "
                        f"expected {expect.net}",
                    )
                )
            elif expect.net.lower() == "ofi" and provider and provider.split(";")[0] != "efa":
                # aws-ofi-nccl over libfabric's tcp/sockets provider: an "OFI" network on TCP
                out.append(
                    Problem(
                        f"inter-node transport on {name}",
                        f"NCCL's OFI plugin uses the libfabric provider {provider} "
                        f"(source {t['source']}), expected efa",
                    )
                )
    for name, h in report["health"].items():
        for g in h.get("gpus", []):
            if g.get("ecc_uncorrected"):
                out.append(
                    Problem(
                        f"node {name} GPU {g['index']}",
                        f"{g['ecc_uncorrected']} uncorrected ECC errors",
                    )
                )
            if g.get("row_remap_failure"):
                out.append(Problem(f"node {name} GPU {g['index']}", "row remapping failed"))
        for x in h.get("xids") or []:
            if x["xid"] in FATAL_XIDS:
                out.append(
                    Problem(f"node {name}", f"XID {x['xid']} on GPU {x['pci']} (needs a GPU reset)")
                )
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
