"""Let measurements correct the planner: fit its efficiencies from a preflight and a real run.

    eks-fsdp plan calibrate --preflight preflight.json --run RUN_DIR \
        --model tiny-llama --instance local-cpu --batch 4 --seq 128 --precision fp32 --out cal.json
    eks-fsdp plan --model ... --instance local-cpu --nodes 1,2,4 --calibration cal.json

Two steps, both against the catalog's data-sheet figures of the instance type:

1. **The hardware, from the preflight** (``training.preflight``'s JSON): every collective
   (all-gather, reduce-scatter, all-reduce) on every link is fitted to the ring model over all
   its sizes (``_alpha_beta``); the network and NVLink efficiencies are the all-gather's busbw
   over the catalog's GB/s (the ratio ``planner.timing.ring_link`` multiplies by), with its
   per-hop latency, and the other two ops are kept as ratios to it (gloo's reduce-scatter is
   an all-reduce in disguise); the GEMM efficiency starts as measured matmul TFLOP/s over the
   peak, attention keeps its default ratio to GEMM, and the HBM efficiency is the measured
   copy bandwidth over the generation's HBM figure.
2. **The software, from the run** (``metrics.jsonl``): the median step of the run (the first
   step, with its one-off costs, left out) is split into what the planner predicts for
   communication (with step 1's figures) and compute; every compute efficiency is scaled by
   one factor so that the predicted compute equals the measured remainder (a few fixed-point
   rounds, since exposed communication depends on compute). What is left in the scale
   (Python and kernel-launch overhead, cache effects) is then carried to other node counts.

The result names its inputs and both predictions of the run (before / after), so a chart can
show how far the asserted efficiencies were off.
"""

from __future__ import annotations

import json
import statistics
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from planner.args import UsageError, parser, resolve_args
from planner.assumptions import GpuGeneration, generation
from planner.predict import PlanInput, predict


class CalibrationError(ValueError):
    """Unusable input; the message names the file."""


@dataclass(frozen=True, kw_only=True)
class Calibration:
    """Fitted efficiencies for one instance type, and where they came from."""

    instance: str
    """Instance type the figures belong to."""
    gpu: GpuGeneration
    """The generation row with measured efficiencies."""
    overrides: dict[str, float]
    """``planner.assumptions.Assumptions`` fields replaced (network, NVLink, HBM, latencies)."""
    compute_scale: float
    """Measured compute time / compute predicted from the preflight's figures alone."""
    run: dict[str, Any] = field(default_factory=dict)
    """The run: directory, world size, measured and predicted (before / after) tokens/s."""
    preflight: dict[str, float] = field(default_factory=dict)
    """The preflight figures used."""

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Calibration:
        # Fields a file from an older planner lacks come from the generation's row.
        gpu = {**asdict(generation(data["gpu"]["name"])), **data["gpu"]}
        return cls(**{**data, "gpu": GpuGeneration(**gpu)})


def load(path: Path) -> Calibration:
    """A calibration file written by ``eks-fsdp plan calibrate --out``."""
    try:
        return Calibration.from_json(json.loads(Path(path).read_text()))
    except (OSError, ValueError, TypeError, KeyError) as e:
        raise CalibrationError(f"--calibration {path}: not a calibration file ({e})") from None


def apply(inp: PlanInput, cal: Calibration) -> PlanInput:
    """``inp`` with the calibrated generation row and assumptions."""
    if cal.instance != inp.instance.name:
        raise CalibrationError(
            f"--calibration: fitted for {cal.instance}, but the plan is for {inp.instance.name}"
        )
    return replace(inp, gpu=cal.gpu, assumptions=inp.assumptions.with_overrides(**cal.overrides))


# ------------------------------------------------------------------------------------------------
# inputs


def _ring_terms(op: str, n: int) -> tuple[float, float]:
    """(hops, byte fraction) of a ring ``op`` on ``n`` ranks: t = hops x latency + fraction x S
    / busbw (nccl-tests' busbw; an all-reduce is two passes: ``planner.timing.collective_time``)."""
    passes = 2.0 if op == "all_reduce" else 1.0
    return passes * (n - 1), passes * (n - 1) / n


def _alpha_beta(rows: list[dict[str, Any]]) -> tuple[float, float]:
    """(bus GB/s, seconds per ring hop) of one (link, op), fitted to every size it measured.

    The ring model the planner uses, ``t = hops x latency + fraction x S / bus``, by least
    squares on relative residuals (each size counts the same, whatever its time: the
    smallest sizes decide the latency, the largest the bandwidth, and one noisy point moves
    the fit less than a line through two points). A fit that is not physical (noise that
    makes larger sizes no slower) falls back to the largest size's busbw and zero latency; a
    negative latency is refitted through zero. A row without a positive time and size, or a
    single size (nothing to split latency from bandwidth), is a ``CalibrationError``.
    """
    op, n, link = rows[0]["op"], rows[0]["ranks"], rows[0]["link"]
    what = f"--preflight: {op} on {link}"
    for r in rows:
        if not r["bytes"] > 0 or not r["time_us"] > 0:
            raise CalibrationError(
                f"{what}: {r['time_us']} us for {r['bytes']} bytes is not a measurement"
            )
    hops, frac = _ring_terms(op, n)
    pts = [(frac * r["bytes"], r["time_us"] * 1e-6) for r in rows]
    hi = max(rows, key=lambda r: r["bytes"])
    if len({x for x, _t in pts}) < 2:
        raise CalibrationError(
            f"{what}: one size only ({hi['bytes']} bytes); the ring fit of bandwidth and "
            "latency needs two or more (training.preflight --sizes)"
        )
    w = [1.0 / t**2 for _x, t in pts]
    sw = sum(w)
    mx = sum(wi * x for wi, (x, _t) in zip(w, pts, strict=True)) / sw
    mt = sum(wi * t for wi, (_x, t) in zip(w, pts, strict=True)) / sw
    sxx = sum(wi * (x - mx) ** 2 for wi, (x, _t) in zip(w, pts, strict=True))
    sxt = sum(wi * (x - mx) * (t - mt) for wi, (x, t) in zip(w, pts, strict=True))
    slope = sxt / sxx if sxx > 0 else 0.0
    if slope <= 0:
        return hi["busbw_gbps"], 0.0
    intercept = mt - slope * mx
    if intercept < 0:  # through zero: t = slope x
        slope = sum(wi * x * t for wi, (x, t) in zip(w, pts, strict=True)) / sum(
            wi * x * x for wi, (x, _t) in zip(w, pts, strict=True)
        )
        intercept = 0.0
    return 1.0 / slope / 1e9, intercept / hops


def preflight_figures(reports: list[dict[str, Any]]) -> dict[str, float]:
    """Worst device figures and link figures over one or more preflight reports.

    Links: every op FSDP and the step run (all-gather, reduce-scatter, all-reduce), each
    (link, op) fitted to the ring model over all its sizes (``_alpha_beta``); per op the
    slowest bus bandwidth and the median per-hop latency. The all-gather's figures are the
    link's (``<scope>_busbw_gbps``, ``<scope>_hop_latency_s``); reduce-scatter and all-reduce
    are kept as ratios to them (``<scope>_<op>_bus_ratio``, ``<scope>_<op>_latency_ratio``):
    NCCL gives about 1, gloo's reduce-scatter (a clone plus a whole all-reduce) about 1/2.
    ``world`` rows stand in for ``inter`` when there are no pair rows.
    """
    out: dict[str, float] = {}
    devices = [d for r in reports for d in r["devices"]]
    if not devices:
        raise CalibrationError("--preflight: no device figures in the report")
    out["matmul_tflops"] = min(d["matmul_tflops"] for d in devices)
    out["memory_gbps"] = min(d["memory_gbps"] for d in devices)
    for scope, key in (("intra", "intra"), ("inter", "inter"), ("world", "inter")):
        if f"{key}_busbw_gbps" in out:
            continue
        groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
        for r in reports:
            for c in r["collectives"]:
                if c["scope"] == scope:
                    groups.setdefault((c["link"], c["op"]), []).append(c)
        per_op: dict[str, tuple[float, float]] = {}
        for op in ("all_gather", "reduce_scatter", "all_reduce"):
            fits = [_alpha_beta(rows) for (_link, o), rows in groups.items() if o == op]
            if fits:
                per_op[op] = (
                    min(bus for bus, _lat in fits),
                    statistics.median(lat for _bus, lat in fits),
                )
        if "all_gather" not in per_op:
            continue
        bus, lat = per_op["all_gather"]
        out[f"{key}_busbw_gbps"] = bus
        out[f"{key}_hop_latency_s"] = lat
        for op in ("reduce_scatter", "all_reduce"):
            if op in per_op:
                out[f"{key}_{op}_bus_ratio"] = per_op[op][0] / bus
                out[f"{key}_{op}_latency_ratio"] = per_op[op][1] / lat if lat > 0 else 1.0
    return out


STEP_STATS = ("median", "min")


def run_figures(run_dir: Path, stat: str = "median") -> dict[str, Any]:
    """One step time for a run (``metrics.jsonl``; the first step left out when there are more).

    ``median`` on dedicated nodes; ``min`` on a machine shared with other work, where the
    fastest step is the best estimate of the uncontended cost (the load of others only ever
    adds time; Python's ``timeit`` documentation makes the same argument).
    """
    if stat not in STEP_STATS:
        raise CalibrationError(f"step statistic {stat!r}: one of {', '.join(STEP_STATS)}")
    path = Path(run_dir) / "metrics.jsonl"
    try:
        rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    except (OSError, ValueError) as e:
        raise CalibrationError(f"--run {run_dir}: cannot read metrics.jsonl ({e})") from None
    steps = [r for r in rows if r.get("step_time_s") and r.get("tokens")]
    if not steps:
        raise CalibrationError(f"--run {run_dir}: metrics.jsonl has no timed steps")
    steady = steps[1:] if len(steps) > 1 else steps
    worlds = {int(r.get("world_size", 1)) for r in steady}
    if len(worlds) != 1:
        raise CalibrationError(
            f"--run {run_dir}: world size changed during the run {sorted(worlds)}"
        )
    times = [r["step_time_s"] for r in steady]
    step_s = statistics.median(times) if stat == "median" else min(times)
    tokens = statistics.median(r["tokens"] for r in steady)
    return {
        "dir": str(run_dir),
        "world_size": worlds.pop(),
        "steps": len(steady),
        "step_time_s": step_s,
        "tokens_per_step": tokens,
        "tokens_per_s": tokens / step_s,
        "step_stat": stat,
    }


# ------------------------------------------------------------------------------------------------
# the fit


def _hardware(inp: PlanInput, pf: dict[str, float]) -> tuple[GpuGeneration, dict[str, float]]:
    it = inp.instance
    gen = inp.gpu or generation(it.gpu_model)
    gemm = pf["matmul_tflops"] / it.peak_bf16_tflops
    gpu = replace(
        gen,
        gemm_efficiency=gemm,
        attention_efficiency=gemm * gen.attention_efficiency / gen.gemm_efficiency,
    )
    overrides = {"hbm_efficiency": pf["memory_gbps"] / gen.hbm_gbytes_per_s}
    if "intra_busbw_gbps" in pf:
        overrides["nvlink_efficiency"] = pf["intra_busbw_gbps"] / it.nvlink_gbytes_per_s
        overrides["intra_hop_latency_s"] = pf["intra_hop_latency_s"]
    if "inter_busbw_gbps" in pf:
        overrides["network_efficiency"] = pf["inter_busbw_gbps"] / it.inter_node_gbytes_per_s
        overrides["inter_hop_latency_s"] = pf["inter_hop_latency_s"]
    # One set of op ratios for both links: the network's when measured (it sets the pace
    # across nodes), else the node's.
    scope = "inter" if "inter_busbw_gbps" in pf else "intra"
    for op in ("reduce_scatter", "all_reduce"):
        for what in ("bus", "latency"):
            if f"{scope}_{op}_{what}_ratio" in pf:
                overrides[f"{op}_{what}_ratio"] = pf[f"{scope}_{op}_{what}_ratio"]
    return gpu, overrides


def _scaled(
    gpu: GpuGeneration, overrides: dict[str, float], k: float
) -> tuple[GpuGeneration, dict[str, float]]:
    """Every compute efficiency divided by ``k`` (compute time x k)."""
    return (
        replace(
            gpu,
            gemm_efficiency=gpu.gemm_efficiency / k,
            attention_efficiency=gpu.attention_efficiency / k,
        ),
        {**overrides, "hbm_efficiency": overrides["hbm_efficiency"] / k},
    )


def _tokens_per_s(inp: PlanInput, nodes: int) -> float:
    pr = predict(inp, nodes)
    return pr.tokens_per_s_per_gpu * pr.gpus


def calibrate(
    inp: PlanInput, reports: list[dict[str, Any]], run_dir: Path, stat: str = "median"
) -> Calibration:
    """Fit ``inp.instance``'s efficiencies to a preflight and a run of ``inp``'s configuration."""
    pf = preflight_figures(reports)
    run = run_figures(run_dir, stat)
    gpus = inp.instance.gpus
    if run["world_size"] % gpus:
        raise CalibrationError(
            f"--run {run_dir}: world size {run['world_size']} is not whole {inp.instance.name} "
            f"nodes of {gpus} GPUs"
        )
    nodes = run["world_size"] // gpus
    expected_tokens = inp.batch * inp.seq * inp.grad_accum * run["world_size"]
    if abs(run["tokens_per_step"] - expected_tokens) > 0.01 * expected_tokens:
        raise CalibrationError(
            f"--run {run_dir}: {run['tokens_per_step']:.0f} tokens per step, but --batch "
            f"{inp.batch} x --seq {inp.seq} x --grad-accum {inp.grad_accum} x world "
            f"{run['world_size']} = {expected_tokens}: give the run's own settings"
        )
    before = _tokens_per_s(inp, nodes)
    gpu, overrides = _hardware(inp, pf)
    micro_measured = run["step_time_s"] / inp.grad_accum
    k = 1.0
    for _ in range(5):  # exposed communication depends on compute: a few fixed-point rounds
        g, o = _scaled(gpu, overrides, k)
        trial = replace(inp, gpu=g, assumptions=inp.assumptions.with_overrides(**o))
        pr = predict(trial, nodes)
        comm = pr.comm.exposed_s + pr.comm.interference_s
        compute_measured = max(micro_measured - comm, 0.05 * micro_measured)
        k *= compute_measured / pr.compute.total_s
    gpu, overrides = _scaled(gpu, overrides, k)
    cal = Calibration(
        instance=inp.instance.name,
        gpu=gpu,
        overrides=overrides,
        compute_scale=k,
        preflight=pf,
        run={**run, "nodes": nodes, "predicted_before": before},
    )
    after = _tokens_per_s(apply(inp, cal), nodes)
    return replace(cal, run={**cal.run, "predicted_after": after})


def with_preflight(cal: Calibration, inp: PlanInput, reports: list[dict[str, Any]]) -> Calibration:
    """The calibration on the nodes a newer preflight measured.

    A job's own preflight runs on the nodes it got, before step 1, every rank measuring at
    once. Its NVLink and network figures (bus bandwidth and per-hop latency) replace the
    calibration's. Its device figures scale the fitted compute: GEMM and attention by its
    slowest matmul over the calibration preflight's, the memory-bound part by its copy
    bandwidth likewise. What the run taught about the software (``compute_scale``) carries
    over, and devices that give less while their neighbours work (cores sharing caches and
    memory bandwidth, GPUs sharing a power budget) slow the prediction as they slow the job.
    Links the new preflight did not measure (a single node has no network) keep the
    calibration's.
    """
    pf = preflight_figures(reports)
    missing = [k for k in ("matmul_tflops", "memory_gbps") if k not in cal.preflight]
    if missing:
        raise CalibrationError(
            f"--calibration: no {' or '.join(missing)} of its own preflight to compare the "
            "new one with: calibrate again (eks-fsdp plan calibrate)"
        )
    _gpu, fresh = _hardware(replace(inp, gpu=None), pf)
    overrides = {**cal.overrides, **{k: v for k, v in fresh.items() if k != "hbm_efficiency"}}
    mm = pf["matmul_tflops"] / cal.preflight["matmul_tflops"]
    overrides["hbm_efficiency"] *= pf["memory_gbps"] / cal.preflight["memory_gbps"]
    gpu = replace(
        cal.gpu,
        gemm_efficiency=cal.gpu.gemm_efficiency * mm,
        attention_efficiency=cal.gpu.attention_efficiency * mm,
    )
    return replace(cal, gpu=gpu, overrides=overrides, preflight={**cal.preflight, **pf})


def before_after(
    inp: PlanInput,
    cal: Calibration,
    node_counts: list[int],
    reports: list[dict[str, Any]] | None = None,
) -> list[dict[str, Any]]:
    """Predicted tokens/s (whole job) per node count, with the asserted and the fitted figures.

    ``reports``: the target nodes' preflight (``with_preflight``). For charts:
    ``[{"nodes", "gpus", "before", "after"}, ...]``.
    """
    if reports:
        cal = with_preflight(cal, inp, reports)
    fitted = apply(inp, cal)
    return [
        {
            "nodes": n,
            "gpus": n * inp.instance.gpus,
            "before": _tokens_per_s(inp, n),
            "after": _tokens_per_s(fitted, n),
        }
        for n in node_counts
    ]


def prediction_before_after(
    plan_args: list[str], calibration: Path, preflight: list[Path] | None = None
) -> list[dict[str, Any]]:
    """``before_after`` from planner flags (``--stack p5-16 --nodes 1,2,4`` or ``--model ...``).

    The scaling notebook charts both curves against its measured points.
    """
    try:
        resolved = resolve_args(parser().parse_args(plan_args))
    except UsageError as e:
        raise CalibrationError(str(e)) from None
    reports = [json.loads(Path(p).read_text()) for p in preflight or []]
    return before_after(resolved.inp, load(calibration), resolved.nodes, reports or None)
