"""Scaling study: measured tokens/s per node count next to the capacity planner's prediction.

Plain functions that ``notebooks/scaling.ipynb`` calls (and the tests call directly):

- :func:`measure_local`: the local mode. For each worker count, the stack's PyTorchJob runs on this
  machine (``workloads.local`` with ``--prometheus``: real etcd, one torchrun agent per "pod", a
  real Prometheus scraping every pod); the throughput is read from Prometheus (the snapshot the
  runner writes when the job ends). If the training package does not export metrics, the
  figures come from ``metrics.jsonl`` and the measurement says so (``source``).
- :func:`measure_cloud`: the cloud mode, with Pulumi's Automation API. For each node count: set
  the stack config (nodegroup size, job workers, a job name per count, ``maxTrainStep``), ``up``,
  port-forward to the cluster's Prometheus, wait until the job has logged its last step, read
  tokens/s from Prometheus; ``destroy`` at the end (also on error).
- :func:`planner_prediction`: ``python -m planner --json`` for the same node counts.
- :func:`scaling_table` and :func:`plot_scaling`: efficiency vs one node, and the PNG chart.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

PROJECT = "eks-fsdp"
R0 = 'rank="0"'


@dataclass(frozen=True)
class Measurement:
    """Throughput of one run."""

    nodes: int
    """Worker pods (= nodes on the cluster)."""
    tokens_per_s: float
    """Job-wide tokens/s: median over the run's steps of global rank 0's value."""
    source: str
    """Where the number came from: ``prometheus`` or ``metrics.jsonl``."""
    job: str
    """Training job name (the ``training_job`` label)."""
    steps: int
    """Last optimizer step seen."""
    wall_s: float
    """Wall time of the run (local) or of up + training (cloud)."""


# --- Prometheus HTTP API ------------------------------------------------------------------------


def prom_query(
    url: str, promql: str, timeout: float = 10.0
) -> dict[tuple[tuple[str, str], ...], float]:
    """Instant query against a Prometheus at ``url``: ``{sorted labels: value}``."""
    q = urllib.parse.urlencode({"query": promql})
    with urllib.request.urlopen(f"{url}/api/v1/query?{q}", timeout=timeout) as resp:
        body = json.loads(resp.read().decode())
    if body.get("status") != "success":
        raise RuntimeError(f"Prometheus query {promql!r} failed: {body}")
    return {
        tuple(sorted(r["metric"].items())): float(r["value"][1]) for r in body["data"]["result"]
    }


def _one(values: dict[tuple[tuple[str, str], ...], float]) -> float | None:
    return next(iter(values.values())) if values else None


def prom_range(
    url: str, promql: str, start: float, end: float, step: float
) -> list[dict[str, Any]]:
    """Range query against a Prometheus at ``url``: the ``result`` matrix."""
    q = urllib.parse.urlencode({"query": promql, "start": start, "end": end, "step": step})
    with urllib.request.urlopen(f"{url}/api/v1/query_range?{q}", timeout=30) as resp:
        body = json.loads(resp.read().decode())
    if body.get("status") != "success":
        raise RuntimeError(f"Prometheus range query {promql!r} failed: {body}")
    return list(body["data"]["result"])


def last_logged_step(url: str, job: str, window: str = "6h") -> int | None:
    """The last step rank 0 of ``job`` logged, as Prometheus holds it."""
    sel = f'training_job="{job}",{R0}'
    step = _one(prom_query(url, f"max(last_over_time(eksfsdp_step{{{sel}}}[{window}]))"))
    return int(step) if step is not None else None


def job_throughput(
    url: str, job: str, *, since: float, resolution_s: float = 5.0
) -> tuple[float | None, int | None]:
    """(median tokens/s of rank 0 over distinct steps, last step) of ``job`` since ``since``."""
    from workloads.local_prometheus import per_step_median

    sel = f'training_job="{job}",{R0}'
    rows: dict[float, dict[str, float]] = {}
    now = time.time()
    start = now - math.ceil(max(now - since, resolution_s) / resolution_s) * resolution_s
    for column, metric in (("step", "eksfsdp_step"), ("tokens_per_s", "eksfsdp_tokens_per_second")):
        for series in prom_range(url, f"{metric}{{{sel}}}", start, now, resolution_s):
            for t, v in series["values"]:
                rows.setdefault(float(t), {})[column] = float(v)
    samples = [r for _, r in sorted(rows.items()) if len(r) == 2]
    return per_step_median(samples), last_logged_step(url, job)


def wait_for_job(
    url: str, job: str, last_step: int, *, timeout_s: float = 3600, poll_s: float = 30
) -> int:
    """Poll Prometheus until ``job`` has logged step ``last_step``; returns the step seen."""
    deadline = time.monotonic() + timeout_s
    seen: int | None = None
    while True:
        with contextlib.suppress(OSError, RuntimeError):
            seen = last_logged_step(url, job)
            if seen is not None and seen >= last_step:
                return seen
        if time.monotonic() > deadline:
            raise TimeoutError(
                f"job {job}: step {seen} after {timeout_s:.0f}s, waiting for {last_step}"
            )
        time.sleep(poll_s)


# --- planner -------------------------------------------------------------------------------------


def planner_prediction(
    nodes: Sequence[int], *, stack: str | None = None, args: Sequence[str] = ()
) -> list[dict[str, Any]]:
    """The capacity planner's prediction (``python -m planner ... --json``)."""
    cmd = [sys.executable, "-m", "planner", "--nodes", ",".join(map(str, nodes)), "--json"]
    if stack:
        cmd += ["--stack", stack]
    cmd += list(args)
    out = subprocess.run(cmd, cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)
    if out.returncode != 0:
        raise RuntimeError(f"planner failed: {out.stderr.strip().splitlines()[-1:]}")
    rows: list[dict[str, Any]] = json.loads(out.stdout)
    return rows


# --- local mode ----------------------------------------------------------------------------------


def measure_local(
    workers: Sequence[int] = (1, 2, 3),
    *,
    stack: str = "dev",
    steps: int = 12,
    out_dir: str | Path | None = None,
    log: Callable[[str], None] = print,
) -> list[Measurement]:
    """Run the stack's job locally with each worker count; read tokens/s from Prometheus."""
    from workloads.local import LocalOptions, Runner
    from workloads.local_prometheus import SNAPSHOT_FILE

    root = Path(out_dir) if out_dir else Path(tempfile.mkdtemp(prefix="scaling-"))
    results = []
    for n in workers:
        out = root / f"workers-{n}"
        opts = LocalOptions(
            stack=stack,
            out=out,
            workers=n,
            min_workers=n,
            train_overrides=(f"--max_train_step={steps}", "--checkpoint_every=0"),
            prometheus=True,
            timeout_s=600,
        )
        lines: list[str] = []
        result = Runner(opts, echo=lines.append).run()
        if not result.succeeded:
            raise RuntimeError(f"local run with {n} workers failed:\n" + "\n".join(lines[-20:]))
        job = result.job["metadata"]["name"]
        snap_path = out / "prometheus" / SNAPSHOT_FILE
        snap = json.loads(snap_path.read_text()) if snap_path.is_file() else {}
        if snap.get("tokens_per_second_step_median") is not None:
            tps, last, source = (
                snap["tokens_per_second_step_median"],
                int(snap["step_last"]),
                "prometheus",
            )
        else:
            logged = result.metrics
            tps = statistics.median(float(m["tokens_per_s"]) for m in logged)
            last, source = int(logged[-1]["step"]), "metrics.jsonl"
        m = Measurement(
            nodes=n, tokens_per_s=tps, source=source, job=job, steps=last, wall_s=result.wall_s
        )
        log(
            f"{n} worker(s): {tps:,.0f} tokens/s (median, from {source}), {last} steps, "
            f"{result.wall_s:.0f} s"
        )
        results.append(m)
    return results


# --- cloud mode ----------------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def kubectl_port_forward(outputs: dict[str, Any], job: str) -> Iterator[str]:
    """Port-forward to the cluster's Prometheus with the stack's kubeconfig; yields its URL."""
    from workloads.observability import OUTPUT_KEY
    from workloads.specs.observability import ObservabilitySettings

    obs = outputs.get(OUTPUT_KEY) or {}
    namespace = obs.get("namespace", ObservabilitySettings().namespace)
    service = ObservabilitySettings().prometheus_service
    kubeconfig = outputs["kubeconfig"]
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        f.write(kubeconfig if isinstance(kubeconfig, str) else json.dumps(kubeconfig))
    port = _free_port()
    proc = subprocess.Popen(
        [
            "kubectl",
            "--kubeconfig",
            f.name,
            "-n",
            namespace,
            "port-forward",
            f"svc/{service}",
            f"{port}:9090",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        url = f"http://127.0.0.1:{port}"
        for _ in range(60):
            with contextlib.suppress(OSError):
                urllib.request.urlopen(f"{url}/-/ready", timeout=2).close()
                break
            time.sleep(1)
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        os.unlink(f.name)


def measure_cloud(
    nodes: Sequence[int],
    *,
    stack_name: str,
    work_dir: str | Path = REPO_ROOT,
    steps: int = 50,
    destroy: bool = True,
    select_stack: Callable[..., Any] | None = None,
    prometheus: Callable[
        [dict[str, Any], str], contextlib.AbstractContextManager[str]
    ] = kubectl_port_forward,
    wait_timeout_s: float = 3600,
    poll_s: float = 30,
    log: Callable[[str], None] = print,
) -> list[Measurement]:
    """For each node count: set config, ``up``, wait for the job, read tokens/s; ``destroy``.

    ``select_stack`` defaults to ``pulumi.automation.select_stack`` (needs the Pulumi CLI and the
    stack's backend); ``prometheus(outputs, job)`` yields a Prometheus URL (default: kubectl
    port-forward to the stack's in-cluster Prometheus). Each node count gets its own job name
    (``<job>-<n>n``), so its series and its rendezvous id are new.
    """
    from pulumi.automation import ConfigValue

    if select_stack is None:
        from pulumi import automation

        select_stack = automation.select_stack
    if not nodes or any(n < 1 for n in nodes):
        raise ValueError(f"nodes: {list(nodes)} must be positive node counts")
    stack = select_stack(stack_name=stack_name, work_dir=str(work_dir))
    groups = json.loads(stack.get_config(f"{PROJECT}:gpuNodeGroups").value)
    job_cfg = json.loads(stack.get_config(f"{PROJECT}:job").value)
    group_name = job_cfg.get("nodeGroup", groups[0]["name"])
    index = next(i for i, g in enumerate(groups) if g["name"] == group_name)
    base_name = job_cfg.get("name", "llama-finetune")
    results: list[Measurement] = []

    def put(path: str, value: Any) -> None:
        stack.set_config(f"{PROJECT}:{path}", ConfigValue(value=str(value)), path=True)

    try:
        for n in nodes:
            job = f"{base_name}-{n}n"
            t0 = time.monotonic()
            put(f"gpuNodeGroups[{index}].desiredSize", n)
            put(f"gpuNodeGroups[{index}].maxSize", max(n, int(groups[index].get("maxSize", n))))
            put("job.name", job)
            put("job.workers", n)
            put("job.minWorkers", n)
            put("job.maxTrainStep", steps)
            log(f"{n} node(s): pulumi up ({job})")
            started = time.time()
            stack.up(on_output=lambda _line: None)
            outputs = {k: v.value for k, v in stack.outputs().items()}
            with prometheus(outputs, job) as url:
                last = wait_for_job(url, job, steps, timeout_s=wait_timeout_s, poll_s=poll_s)
                tps, _ = job_throughput(url, job, since=started)
            if tps is None:
                raise RuntimeError(f"job {job}: no eksfsdp_tokens_per_second in Prometheus")
            m = Measurement(
                nodes=n,
                tokens_per_s=tps,
                source="prometheus",
                job=job,
                steps=last,
                wall_s=time.monotonic() - t0,
            )
            log(f"{n} node(s): {tps:,.0f} tokens/s (median, from Prometheus)")
            results.append(m)
    finally:
        if destroy:
            log(f"pulumi destroy ({stack_name})")
            stack.destroy(on_output=lambda _line: None)
    return results


# --- analysis ------------------------------------------------------------------------------------


def scaling_table(
    measured: Sequence[Measurement], predicted: Sequence[dict[str, Any]] = ()
) -> list[dict[str, Any]]:
    """One row per node count: measured tokens/s and efficiency vs the planner's."""
    if not measured:
        return []
    base = min(measured, key=lambda m: m.nodes)
    per_node_base = base.tokens_per_s / base.nodes
    pred = {int(p["nodes"]): p for p in predicted}
    rows = []
    for m in sorted(measured, key=lambda m: m.nodes):
        p = pred.get(m.nodes, {})
        predicted_tps = (
            p["tokens_per_s_per_gpu"] * p["gpus"] if "tokens_per_s_per_gpu" in p else None
        )
        rows.append(
            {
                "nodes": m.nodes,
                "tokens_per_s": m.tokens_per_s,
                "efficiency": m.tokens_per_s / (per_node_base * m.nodes),
                "source": m.source,
                "predicted_tokens_per_s": predicted_tps,
                "predicted_efficiency": p.get("scaling_efficiency"),
            }
        )
    return rows


def plot_scaling(
    rows: Sequence[dict[str, Any]], png: str | Path, *, title: str, predicted_label: str = "planner"
) -> Path:
    """Throughput and scaling efficiency vs node count (measured, ideal, planner) as a PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    nodes = [r["nodes"] for r in rows]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 4))
    tps = [r["tokens_per_s"] for r in rows]
    ax1.plot(nodes, tps, "o-", label="measured")
    ax1.plot(nodes, [tps[0] / nodes[0] * n for n in nodes], "k--", label="linear")
    handles, labels = ax1.get_legend_handles_labels()
    if all(r["predicted_tokens_per_s"] is not None for r in rows):
        ax1b = ax1.twinx()
        (line,) = ax1b.plot(
            nodes,
            [r["predicted_tokens_per_s"] for r in rows],
            "s:",
            color="tab:orange",
            label=f"{predicted_label} (right axis)",
        )
        ax1b.set_ylabel(f"{predicted_label} tokens/s", color="tab:orange")
        handles, labels = [*handles, line], [*labels, line.get_label()]
    ax1.set_xlabel("nodes")
    ax1.set_ylabel("tokens/s (job)")
    ax1.set_title("Throughput")
    ax1.legend(handles, labels, loc="upper left")
    ax2.plot(nodes, [r["efficiency"] for r in rows], "o-", label="measured")
    if all(r["predicted_efficiency"] is not None for r in rows):
        ax2.plot(nodes, [r["predicted_efficiency"] for r in rows], "s:", label=predicted_label)
    ax2.axhline(1.0, color="k", ls="--", lw=0.8)
    ax2.set_ylim(0, 1.1)
    ax2.set_xlabel("nodes")
    ax2.set_ylabel("scaling efficiency vs 1 node")
    ax2.set_title("Efficiency")
    ax2.legend()
    for ax in (ax1, ax2):
        ax.set_xticks(nodes)
    fig.suptitle(title)
    fig.tight_layout()
    path = Path(png)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def to_json(measured: Sequence[Measurement]) -> str:
    """Measurements as JSON (for saving next to the PNG)."""
    return json.dumps([asdict(m) for m in measured], indent=2)
