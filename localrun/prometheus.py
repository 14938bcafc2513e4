"""A real Prometheus on loopback for local runs, with the cluster's scrape jobs and alert rules.

``start_local_prometheus(targets, out_dir)`` writes ``prometheus.yml``, ``rules.yml`` and
``rules_test.yml`` (from :mod:`workloads.specs.prometheus_files`, the same content the cluster's
kube-prometheus-stack gets) under ``out_dir/prometheus``, starts ``prometheus`` (Debian's package,
2.42) on ``127.0.0.1`` at a free port with a fresh data directory, and waits until it is ready.
The handle queries the HTTP API and stops the server (also at interpreter exit).

Used by the local runner (``eks-fsdp local --prometheus``), the end-to-end test and
the scaling notebook's local mode.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import shutil
import socket
import statistics
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from workloads.specs.prometheus_files import (
    TRAINING_SCRAPE_JOB,
    LocalTarget,
    PrometheusFiles,
    static_scrape_configs,
    write_prometheus_files,
)

LOCAL_SCRAPE_INTERVAL = "250ms"
"""Local runs last seconds to minutes and a tiny model's step takes ~0.1 s: scrape four times a
second (the cluster uses 15 s), so a rate() window of a few seconds still holds enough samples."""


def free_port() -> int:
    """A TCP port that is free on loopback right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def prometheus_binary() -> str:
    """Path of the ``prometheus`` server; one clear error when it is missing."""
    path = shutil.which("prometheus")
    if path is None:
        raise FileNotFoundError(
            "prometheus not found on PATH: run 'sudo apt-get install -y prometheus' "
            "(or 'make setup' as root)"
        )
    return path


def worker_targets(
    job_name: str, ports: Sequence[int], host: str = "127.0.0.1"
) -> list[LocalTarget]:
    """Targets for local workers ``<job>-worker-<i>``, as their pods would be labelled."""
    return [
        LocalTarget(
            address=f"{host}:{p}",
            training_job=job_name,
            pod=f"{job_name}-worker-{i}",
            node=f"local-{i}",
        )
        for i, p in enumerate(ports)
    ]


@dataclass
class LocalPrometheus:
    """A running local Prometheus. Use as a context manager or call :meth:`stop`."""

    process: subprocess.Popen[bytes]
    port: int
    files: PrometheusFiles
    data_dir: Path
    log_path: Path
    _log: Any = field(repr=False, default=None)

    @property
    def url(self) -> str:
        """Base URL of the HTTP API and UI."""
        return f"http://127.0.0.1:{self.port}"

    def _get(self, path: str, params: dict[str, str] | None = None) -> Any:
        query = f"?{urllib.parse.urlencode(params)}" if params else ""
        with urllib.request.urlopen(f"{self.url}{path}{query}", timeout=10) as resp:
            body = json.loads(resp.read().decode())
        if body.get("status") != "success":
            raise RuntimeError(f"Prometheus {path} failed: {body}")
        return body["data"]

    def query(self, promql: str) -> list[dict[str, Any]]:
        """Instant query; returns the ``result`` list (vector samples)."""
        return list(self._get("/api/v1/query", {"query": promql})["result"])

    def query_values(self, promql: str) -> dict[tuple[tuple[str, str], ...], float]:
        """Instant query as ``{sorted label items: value}``."""
        return {
            tuple(sorted(r["metric"].items())): float(r["value"][1]) for r in self.query(promql)
        }

    def query_range(
        self, promql: str, start: float, end: float, step: float = 1.0
    ) -> list[dict[str, Any]]:
        """Range query; returns the ``result`` list (matrix)."""
        params = {"query": promql, "start": f"{start:.3f}", "end": f"{end:.3f}", "step": f"{step}"}
        return list(self._get("/api/v1/query_range", params)["result"])

    def targets(self) -> list[dict[str, Any]]:
        """Active scrape targets (labels, health, last error)."""
        return list(self._get("/api/v1/targets")["activeTargets"])

    def rules(self) -> list[dict[str, Any]]:
        """Loaded rule groups."""
        return list(self._get("/api/v1/rules")["groups"])

    def wait_for(self, promql: str, count: int = 1, timeout: float = 60.0) -> list[dict[str, Any]]:
        """Poll until ``promql`` returns at least ``count`` series; raise TimeoutError otherwise."""
        deadline = time.monotonic() + timeout
        result: list[dict[str, Any]] = []
        while time.monotonic() < deadline:
            result = self.query(promql)
            if len(result) >= count:
                return result
            if self.process.poll() is not None:
                raise RuntimeError(f"prometheus exited with {self.process.returncode}")
            time.sleep(0.5)
        raise TimeoutError(f"{promql!r}: {len(result)} series after {timeout:.0f}s, wanted {count}")

    def stop(self) -> None:
        """Stop the server (SIGTERM, then SIGKILL after 10 s). Idempotent."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)
        if self._log is not None and not self._log.closed:
            self._log.close()

    def __enter__(self) -> LocalPrometheus:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _wait_ready(proc: subprocess.Popen[bytes], port: int, log_path: Path, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            tail = log_path.read_text(errors="replace").strip().splitlines()[-3:]
            raise RuntimeError(
                f"prometheus exited with {proc.returncode} at start: {' | '.join(tail)}"
            )
        url = f"http://127.0.0.1:{port}/-/ready"
        with (
            contextlib.suppress(OSError, urllib.error.URLError),
            urllib.request.urlopen(url, timeout=1) as r,
        ):
            if r.status == 200:
                return
        time.sleep(0.2)
    proc.terminate()
    raise TimeoutError(f"prometheus not ready on 127.0.0.1:{port} after {timeout:.0f}s")


def start_local_prometheus(
    targets: Sequence[LocalTarget],
    out_dir: str | Path,
    *,
    scrape_interval: str = LOCAL_SCRAPE_INTERVAL,
    dcgm_targets: Sequence[str] = (),
    port: int | None = None,
    ready_timeout: float = 30.0,
) -> LocalPrometheus:
    """Write the config for ``targets``, start Prometheus on loopback and wait until ready.

    Files go to ``out_dir/prometheus/`` (config, rules, rule tests, ``prometheus.log``, a fresh
    ``data/``). The server is stopped at interpreter exit if the caller does not stop it.
    """
    binary = prometheus_binary()
    root = Path(out_dir) / "prometheus"
    files = write_prometheus_files(
        root, static_scrape_configs(targets, dcgm_targets), scrape_interval=scrape_interval
    )
    data_dir = root / "data"
    shutil.rmtree(data_dir, ignore_errors=True)
    data_dir.mkdir(parents=True)
    port = port or free_port()
    log_path = root / "prometheus.log"
    log = log_path.open("wb")
    proc = subprocess.Popen(
        [
            binary,
            f"--config.file={files.config}",
            f"--storage.tsdb.path={data_dir}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--storage.tsdb.retention.time=1d",
            "--web.enable-lifecycle",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
    )
    handle = LocalPrometheus(proc, port, files, data_dir, log_path, log)
    atexit.register(handle.stop)
    try:
        _wait_ready(proc, port, log_path, ready_timeout)
    except BaseException:
        handle.stop()
        raise
    return handle


SNAPSHOT_FILE = "snapshot.json"
"""Written under ``<out>/prometheus/`` when the local run ends: what Prometheus saw."""

R0 = 'rank="0"'
SNAPSHOT_QUERIES: dict[str, str] = {
    "tokens_per_second_last": (
        f"max by (training_job) (last_over_time(eksfsdp_tokens_per_second{{{R0}}}[1h]))"
    ),
    "tokens_per_second_median": (
        f"max by (training_job) (quantile_over_time(0.5, eksfsdp_tokens_per_second{{{R0}}}[1h]))"
    ),
    "step_time_seconds_median": (
        f"max by (training_job) (quantile_over_time(0.5, eksfsdp_step_time_seconds{{{R0}}}[1h]))"
    ),
    "loss_last": f"max by (training_job) (last_over_time(eksfsdp_loss{{{R0}}}[1h]))",
    "step_last": f"max by (training_job) (last_over_time(eksfsdp_step{{{R0}}}[1h]))",
    "world_size_last": "max by (training_job) (last_over_time(eksfsdp_world_size[1h]))",
    "peak_memory_bytes_max": (
        "max by (training_job) (max_over_time(eksfsdp_peak_memory_bytes[1h]))"
    ),
    "mfu_median": (
        f"max by (training_job) (quantile_over_time(0.5, eksfsdp_mfu_ratio{{{R0}}}[1h]))"
    ),
    "restarts_max": "max by (training_job) (max_over_time(eksfsdp_elastic_restarts[1h]))",
    "scrapes_up": (
        f'sum by (training_job) (count_over_time(up{{job="{TRAINING_SCRAPE_JOB}"}}[1h]))'
    ),
}
"""Job-level figures the local runner records (the scaling notebook reads them).

Throughput, step time and loss are global rank 0's (step time is measured per rank, so another
rank's tokens/s differs slightly); rank 0 also writes metrics.jsonl, so the two agree exactly.
Elastic rank order can change between rounds: the ``rank`` label follows the rank, not the pod.
The snapshot also holds ``samples`` (rank 0's scraped rows) and ``tokens_per_second_step_median``
(median over distinct steps, see :func:`per_step_median`), the figure the scaling notebook uses.
"""


SAMPLES_PNG = "training.png"
"""Loss and tokens/s per step as Prometheus scraped them, next to ``snapshot.json``."""


def plot_samples(samples: Sequence[dict[str, float]], png: Path, title: str) -> Path:
    """Loss and tokens/s against the step, from Prometheus' samples (matplotlib, Agg)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = [s["step"] for s in samples]
    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(8, 6), sharex=True)
    ax1.plot(steps, [s["loss"] for s in samples], "o-", lw=1, ms=3)
    ax1.set_ylabel("train loss")
    ax1.grid(alpha=0.3)
    ax2.plot(steps, [s["tokens_per_s"] for s in samples], "o-", lw=1, ms=3, color="tab:orange")
    ax2.set_ylabel("tokens/s (rank 0)")
    ax2.set_xlabel("optimizer step (as scraped by Prometheus)")
    ax2.grid(alpha=0.3)
    fig.suptitle(f"{title}: Prometheus samples")
    fig.tight_layout()
    fig.savefig(png, dpi=100)
    plt.close(fig)
    return png


def per_step_median(samples: Sequence[dict[str, float]]) -> float | None:
    """Median tokens/s over the distinct steps in ``samples`` (rows with ``step``, ``tokens_per_s``).

    Counting each step once keeps the scrapes taken while a run saves and exits (which all repeat
    the last step) from pulling the median towards the last step.
    """
    per_step: dict[float, float] = {}
    for row in samples:
        per_step.setdefault(row["step"], row["tokens_per_s"])
    return statistics.median(per_step.values()) if per_step else None


def with_metrics_port(command: Sequence[str], port: int) -> list[str]:
    """The container command with its training ``--metrics_port`` set to ``port``.

    Local pods share one host, so each gets its own port (the cluster uses one port per pod IP).
    """
    kept = [a for a in command if not a.startswith("--metrics_port")]
    return [*kept, f"--metrics_port={port}"]


class LocalPrometheusHook:
    """The local runner's ``--prometheus``: ports per pod, a Prometheus scraping them, a snapshot.

    ``start`` picks a free metrics port per worker pod and starts Prometheus with those targets;
    ``command_for`` gives pod ``i`` its port; ``stop`` (after the pods ended) writes
    ``<out>/prometheus/snapshot.json`` with :data:`SNAPSHOT_QUERIES` and the rank-0 samples, then
    stops the server.
    """

    def __init__(self, job_name: str, ports: list[int], prometheus: LocalPrometheus) -> None:
        self.job_name = job_name
        self.ports = ports
        self.prometheus = prometheus
        self.started_at = time.time()

    @classmethod
    def start(
        cls, job_name: str, pods: int, out_dir: str | Path, echo: Any = print
    ) -> LocalPrometheusHook:
        """Start Prometheus for ``pods`` worker pods of ``job_name``."""
        ports = [free_port() for _ in range(pods)]
        prom = start_local_prometheus(worker_targets(job_name, ports), out_dir)
        echo(f"prometheus: {prom.url} scraping {pods} pod(s) on ports {ports}")
        return cls(job_name, ports, prom)

    def command_for(self, command: Sequence[str], pod_index: int) -> list[str]:
        """Pod ``pod_index``'s command with its metrics port."""
        return with_metrics_port(command, self.ports[pod_index])

    def snapshot(self) -> dict[str, Any]:
        """The job-level figures Prometheus holds now (``{name: value or None}``) and samples."""
        out: dict[str, Any] = {"training_job": self.job_name, "prometheus": self.prometheus.url}
        for name, promql in SNAPSHOT_QUERIES.items():
            values = self.prometheus.query_values(promql)
            out[name] = values.get((("training_job", self.job_name),))
        out["samples"] = self.samples()
        out["tokens_per_second_step_median"] = per_step_median(out["samples"])
        return out

    def samples(self) -> list[dict[str, float]]:
        """Rank 0's scraped values, one row per second: ``{t, step, tokens_per_s, loss}``.

        The exporter serves each step atomically, so each row pairs a step with the values
        logged at that step.
        """
        columns = {
            "step": "eksfsdp_step",
            "tokens_per_s": "eksfsdp_tokens_per_second",
            "loss": "eksfsdp_loss",
        }
        rows: dict[float, dict[str, float]] = {}
        end = time.time()
        for column, metric in columns.items():
            promql = f'{metric}{{training_job="{self.job_name}",{R0}}}'
            for series in self.prometheus.query_range(promql, self.started_at, end, 1.0):
                for t, v in series["values"]:
                    rows.setdefault(float(t), {"t": float(t)})[column] = float(v)
        return [r for _, r in sorted(rows.items()) if len(r) == 1 + len(columns)]

    def stop(self) -> dict[str, Any] | None:
        """Write the snapshot (when Prometheus still runs) and stop Prometheus. Idempotent."""
        snap = None
        if self.prometheus.process.poll() is None:
            with contextlib.suppress(OSError, RuntimeError, urllib.error.URLError):
                snap = self.snapshot()
                path = self.prometheus.files.config.parent / SNAPSHOT_FILE
                path.write_text(json.dumps(snap, indent=2))
                if snap["samples"]:
                    plot_samples(snap["samples"], path.with_name(SAMPLES_PNG), self.job_name)
        self.prometheus.stop()
        return snap
