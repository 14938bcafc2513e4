"""Prometheus exporter for the training loop: a metrics sink served over HTTP.

``PrometheusSink`` implements the metrics sink interface (``log(metrics, step)``, ``close()``)
and serves the latest per-step values on ``http://<addr>:<port>/metrics`` (prometheus-client,
its own registry, a daemon thread).

Who serves: **local rank 0 of every node** (one endpoint per pod, so a PyTorchJob pod carries a
single ``prometheus.io/port`` annotation). Every series carries a ``rank`` label (the global rank
of the serving process) and, in the multi-node case, Prometheus adds pod/node labels from
discovery. The loop's values are global (loss averaged over ranks, tokens/s of the whole job), so
every node reports the same numbers; dashboards aggregate with ``max by (training_job)``. Only
peak memory is per node (that node's local rank 0). Other local ranks get ``None`` from
:func:`prometheus_sink_for_rank` and serve nothing, so ports never clash inside a pod.

Names (all prefixed ``eksfsdp_``; see ``METRIC_NAMES``): tokens/s, step time, loss, MFU, peak
memory, step, epoch, learning rate, grad norm, world size, goodput (``eksfsdp_goodput_ratio``),
the last checkpoint's stall, the job's restarts and redone steps (kept across restarts in the
output folder's goodput.json, unlike the counters below), elastic restarts
(``TORCHELASTIC_RESTART_COUNT``), the wall-clock time of the last step, and the counters
``eksfsdp_tokens_total`` / ``eksfsdp_steps_total``. A counter restarts from zero when torchrun
restarts the worker; Prometheus' ``rate()``/``increase()`` handle that reset.
"""

from __future__ import annotations

import math
import os
import threading
import time
from collections.abc import Iterable, Mapping
from typing import Any

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import start_http_server
from prometheus_client.registry import Collector

PREFIX = "eksfsdp_"

# metric name -> (per-step key in the metrics dict, help text). Gauges set from each log() call.
STEP_GAUGES: dict[str, tuple[str, str]] = {
    "eksfsdp_tokens_per_second": ("tokens_per_s", "Global training throughput of the last step."),
    "eksfsdp_step_time_seconds": ("step_time_s", "Wall time of the last optimizer step."),
    "eksfsdp_loss": ("loss", "Training loss of the last step (mean over ranks)."),
    "eksfsdp_mfu_ratio": ("mfu", "Model FLOPs utilisation of the last step (0..1)."),
    "eksfsdp_peak_memory_bytes": ("peak_mem_bytes", "Peak memory of this rank (CUDA or RSS)."),
    "eksfsdp_step": ("step", "Optimizer step last completed."),
    "eksfsdp_epoch": ("epoch", "Epoch of the last step."),
    "eksfsdp_learning_rate": ("lr", "Learning rate of the last step."),
    "eksfsdp_grad_norm": ("grad_norm", "Gradient norm of the last step (before clipping)."),
    "eksfsdp_world_size": ("world_size", "Number of training processes."),
    "eksfsdp_goodput_ratio": (
        "goodput",
        "Step time of the final history / wall time since the job first started (0..1).",
    ),
    "eksfsdp_checkpoint_stall_seconds": (
        "ckpt_stall_s",
        "Seconds the training loop was blocked by the last checkpoint.",
    ),
    "eksfsdp_job_restarts": ("restarts", "Starts of the job after its first one (any cause)."),
    "eksfsdp_steps_redone": (
        "steps_redone",
        "Steps trained again because a restart went back to an older checkpoint.",
    ),
}
RESTARTS = "eksfsdp_elastic_restarts"
LAST_STEP_TIME = "eksfsdp_last_step_timestamp_seconds"
TOKENS_TOTAL = "eksfsdp_tokens_total"
STEPS_TOTAL = "eksfsdp_steps_total"

METRIC_NAMES: tuple[str, ...] = (
    *STEP_GAUGES,
    RESTARTS,
    LAST_STEP_TIME,
    TOKENS_TOTAL,
    STEPS_TOTAL,
)
"""Every series name the exporter serves (counters with their ``_total`` suffix)."""


def _env_int(env: Mapping[str, str], key: str, default: int) -> int:
    raw = env.get(key, "")
    if raw == "":
        return default
    try:
        return int(raw)
    except ValueError:
        raise ValueError(f"environment variable {key}={raw!r} is not an integer") from None


class _StepCollector(Collector):
    """Serves one consistent snapshot: a scrape never mixes two steps' values."""

    def __init__(self, rank: str) -> None:
        self.rank = rank
        self.lock = threading.Lock()
        self.gauges: dict[str, float] = {}
        self.tokens_total = 0.0
        self.steps_total = 0.0

    def collect(self) -> Iterable[Metric]:
        with self.lock:
            gauges = dict(self.gauges)
            tokens, steps = self.tokens_total, self.steps_total
        docs = {
            **{name: doc for name, (_key, doc) in STEP_GAUGES.items()},
            RESTARTS: "torchrun restarts of this worker group (TORCHELASTIC_RESTART_COUNT).",
            LAST_STEP_TIME: "Unix time at which the last step was logged.",
        }
        for name, doc in docs.items():
            if name in gauges:
                family = GaugeMetricFamily(name, doc, labels=["rank"])
                family.add_metric([self.rank], gauges[name])
                yield family
        for name, doc, value in (
            (TOKENS_TOTAL, "Tokens trained on (global).", tokens),
            (STEPS_TOTAL, "Optimizer steps completed.", steps),
        ):
            counter = CounterMetricFamily(name.removesuffix("_total"), doc, labels=["rank"])
            counter.add_metric([self.rank], value)
            yield counter


PREFLIGHT_BUSBW = "eksfsdp_preflight_busbw_gbytes_per_second"
PREFLIGHT_TFLOPS = "eksfsdp_preflight_matmul_tflops"
PREFLIGHT_MEMORY = "eksfsdp_preflight_memory_gbytes_per_second"
PREFLIGHT_PASSED = "eksfsdp_preflight_passed"
PREFLIGHT_METRIC_NAMES: tuple[str, ...] = (
    PREFLIGHT_BUSBW,
    PREFLIGHT_TFLOPS,
    PREFLIGHT_MEMORY,
    PREFLIGHT_PASSED,
)
"""Series of the last preflight (``training.preflight``), served next to the step metrics."""


class _PreflightCollector(Collector):
    """The last preflight report of this process (empty until one ran)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.report: dict[str, Any] | None = None

    def collect(self) -> Iterable[Metric]:
        with self.lock:
            report = self.report
        if report is None:
            return
        busbw = GaugeMetricFamily(
            PREFLIGHT_BUSBW,
            "nccl-tests bus bandwidth of a collective in the last preflight.",
            labels=["scope", "link", "op", "bytes"],
        )
        for r in report["collectives"]:
            busbw.add_metric([r["scope"], r["link"], r["op"], str(r["bytes"])], r["busbw_gbps"])
        yield busbw
        for name, key, doc in (
            (PREFLIGHT_TFLOPS, "matmul_tflops", "Dense matmul TFLOP/s of a device."),
            (PREFLIGHT_MEMORY, "memory_gbps", "Copy bandwidth of a device, GB/s."),
        ):
            family = GaugeMetricFamily(name, doc, labels=["node", "rank"])
            for d in report["devices"]:
                family.add_metric([d["node"], str(d["rank"])], d[key])
            yield family
        passed = GaugeMetricFamily(PREFLIGHT_PASSED, "1 when the last preflight passed.")
        passed.add_metric([], 1.0 if report.get("passed") else 0.0)
        yield passed


PREFLIGHT = _PreflightCollector()


def set_preflight(report: dict[str, Any]) -> None:
    """Publish a preflight report (``training.preflight.check`` calls this)."""
    with PREFLIGHT.lock:
        PREFLIGHT.report = report


class PrometheusSink:
    """Metrics sink that serves the latest training metrics for Prometheus to scrape.

    Args:
        port: TCP port to listen on (``0`` picks a free one; see :attr:`port`).
        addr: Listen address; ``0.0.0.0`` in a pod, ``127.0.0.1`` locally.
        env: Environment to read ``RANK``, ``WORLD_SIZE`` and ``TORCHELASTIC_RESTART_COUNT`` from.
    """

    def __init__(
        self, port: int, *, addr: str = "0.0.0.0", env: Mapping[str, str] | None = None
    ) -> None:
        if not 0 <= port <= 65535:
            raise ValueError(f"metrics_port {port} is not a TCP port (0..65535)")
        env = os.environ if env is None else env
        self.rank = str(_env_int(env, "RANK", 0))
        self._collector = _StepCollector(self.rank)
        self._collector.gauges[RESTARTS] = float(_env_int(env, "TORCHELASTIC_RESTART_COUNT", 0))
        self._collector.gauges["eksfsdp_world_size"] = float(_env_int(env, "WORLD_SIZE", 1))
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(self._collector)
        self.registry.register(PREFLIGHT)
        try:
            self._server, self._thread = start_http_server(port, addr=addr, registry=self.registry)
        except OSError as exc:
            raise OSError(f"metrics_port {port}: cannot listen on {addr}: {exc.strerror}") from None
        self.port: int = int(self._server.server_port)
        """The port actually bound (differs from the argument only when it was 0)."""
        self.addr = addr
        self._closed = False

    @property
    def url(self) -> str:
        """The scrape URL of this endpoint."""
        host = "127.0.0.1" if self.addr in ("0.0.0.0", "") else self.addr
        return f"http://{host}:{self.port}/metrics"

    def log(self, metrics: Mapping[str, Any], step: int) -> None:
        """Publish one step's metrics atomically. Missing or non-numeric keys are skipped."""
        update: dict[str, float] = {}
        for name, (key, _doc) in STEP_GAUGES.items():
            value = step if key == "step" else metrics.get(key)
            if isinstance(value, bool) or not isinstance(value, int | float):
                continue
            update[name] = float(value)
        update[LAST_STEP_TIME] = time.time()
        tokens = metrics.get("tokens")
        c = self._collector
        with c.lock:
            c.gauges.update(update)
            if isinstance(tokens, int | float) and math.isfinite(tokens) and tokens > 0:
                c.tokens_total += float(tokens)
            c.steps_total += 1

    def close(self) -> None:
        """Stop serving (idempotent)."""
        if self._closed:
            return
        self._closed = True
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)


METRICS_ADDR_ENV = "EKS_FSDP_METRICS_ADDR"
"""Listen address of the exporter when set: the local runner sets ``127.0.0.1`` (its pods share
this machine's interfaces); a pod leaves it unset and listens on every interface of its own
network namespace, which the workers' NetworkPolicy guards (``workloads.specs.pytorchjob``)."""


def prometheus_sink_for_rank(
    port: int, *, addr: str | None = None, env: Mapping[str, str] | None = None
) -> PrometheusSink | None:
    """The sink for this process: a server on local rank 0 of each node, ``None`` elsewhere.

    ``port`` 0 means metrics are off (the default of ``TrainConfig.metrics_port``); ``addr``:
    ``addr``, else ``$EKS_FSDP_METRICS_ADDR``, else ``0.0.0.0``.
    """
    env = os.environ if env is None else env
    if port == 0 or _env_int(env, "LOCAL_RANK", 0) != 0:
        return None
    return PrometheusSink(port, addr=addr or metrics_addr(env), env=env)


def metrics_addr(env: Mapping[str, str]) -> str:
    """The exporter's listen address in ``env``: ``$EKS_FSDP_METRICS_ADDR``, else ``0.0.0.0``."""
    return env.get(METRICS_ADDR_ENV) or "0.0.0.0"
