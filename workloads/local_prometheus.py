"""A real Prometheus on loopback for local runs, with the cluster's scrape jobs and alert rules.

``start_local_prometheus(targets, out_dir)`` writes ``prometheus.yml``, ``rules.yml`` and
``rules_test.yml`` (from :mod:`workloads.specs.prometheus_files`, the same content the cluster's
kube-prometheus-stack gets) under ``out_dir/prometheus``, starts ``prometheus`` (Debian's package,
2.42) on ``127.0.0.1`` at a free port with a fresh data directory, and waits until it is ready.
The handle queries the HTTP API and stops the server (also at interpreter exit).

Used by the local runner (``python -m workloads.local --prometheus``), the end-to-end test and
the scaling notebook's local mode.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import shutil
import socket
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
    LocalTarget,
    PrometheusFiles,
    static_scrape_configs,
    write_prometheus_files,
)

LOCAL_SCRAPE_INTERVAL = "1s"
"""Local runs last seconds to minutes: scrape every second (the cluster uses 15 s)."""


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
