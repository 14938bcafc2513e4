"""A real Prometheus scrapes a real exporter process through the cluster's relabelling.

If this fails, the local runner's ``--prometheus`` (and the scaling notebook) would show nothing,
or the cluster's scrape job would label training series wrongly: the values logged by a process
running PrometheusSink must come back from Prometheus' HTTP API with the pod/job labels that
Kubernetes discovery + our relabel rules produce. No mocks: Debian's prometheus 2.42 on loopback.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time
import urllib.request
from pathlib import Path

import pytest

from localrun.prometheus import free_port, start_local_prometheus, worker_targets
from workloads.specs.prometheus_files import ALERT_NAMES

pytestmark = [pytest.mark.slow, pytest.mark.integration, pytest.mark.prometheus]

EXPORTER = textwrap.dedent(
    """
    import json, sys, time
    from training.prometheus import PrometheusSink
    port, rank, out = int(sys.argv[1]), sys.argv[2], sys.argv[3]
    sink = PrometheusSink(port, addr="127.0.0.1",
                          env={"RANK": rank, "WORLD_SIZE": "2", "TORCHELASTIC_RESTART_COUNT": "1"})
    with open(out, "w") as f:
        for step in range(1, 9):
            m = {"step": step, "epoch": 0, "loss": 3.0 / step, "lr": 1e-3, "grad_norm": 0.5 * step,
                 "tokens": 2048, "tokens_per_s": 1000.0 + 7.25 * step, "step_time_s": 2048 / (1000.0 + 7.25 * step),
                 "world_size": 2, "peak_mem_bytes": 100_000_000 + step, "mfu": 0.01 * step}
            sink.log(m, step)
            f.write(json.dumps(m) + "\\n"); f.flush()
            time.sleep(0.25)
    time.sleep(120)
    """
)


def test_prometheus_reads_back_exporter_values(tmp_path: Path) -> None:
    ports = [free_port(), free_port()]
    root = Path(__file__).resolve().parents[2]
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", EXPORTER, str(p), str(rank), str(tmp_path / f"m{rank}.jsonl")],
            cwd=root,
        )
        for rank, p in enumerate(ports)
    ]
    t0 = time.monotonic()
    try:
        with start_local_prometheus(worker_targets("e2e", ports), tmp_path) as prom:
            ready_s = time.monotonic() - t0
            done = prom.wait_for('eksfsdp_step{training_job="e2e"} == 8', count=2, timeout=60)
            seen_s = time.monotonic() - t0
            logged = [json.loads(x) for x in (tmp_path / "m0.jsonl").read_text().splitlines()]
            last = logged[-1]
            want = {
                "eksfsdp_tokens_per_second": last["tokens_per_s"],
                "eksfsdp_step_time_seconds": last["step_time_s"],
                "eksfsdp_loss": last["loss"],
                "eksfsdp_mfu_ratio": last["mfu"],
                "eksfsdp_peak_memory_bytes": last["peak_mem_bytes"],
                "eksfsdp_grad_norm": last["grad_norm"],
                "eksfsdp_world_size": 2.0,
                "eksfsdp_elastic_restarts": 1.0,
                "eksfsdp_tokens_total": sum(m["tokens"] for m in logged),
                "eksfsdp_steps_total": 8.0,
            }
            for name, value in want.items():
                got = prom.query_values(f'{name}{{training_job="e2e",pod="e2e-worker-0"}}')
                assert list(got.values()) == [pytest.approx(value, rel=1e-9)], (name, got)
            # Labels produced by the cluster's relabel rules from the simulated pod metadata.
            labels = dict(next(iter(prom.query_values('eksfsdp_loss{pod="e2e-worker-1"}'))))
            assert labels == {
                "__name__": "eksfsdp_loss",
                "instance": f"127.0.0.1:{ports[1]}",
                "job": "eksfsdp-training",
                "training_job": "e2e",
                "pod": "e2e-worker-1",
                "node": "local-1",
                "namespace": "local",
                "rank": "1",
            }
            # The dashboard's aggregation gives the job's throughput, not twice it.
            agg = prom.query_values("max by (training_job) (eksfsdp_tokens_per_second)")
            assert agg == {(("training_job", "e2e"),): pytest.approx(last["tokens_per_s"])}
            assert {t["health"] for t in prom.targets()} == {"up"}
            assert sum(len(g["rules"]) for g in prom.rules()) == len(ALERT_NAMES)
            print(
                f"prometheus ready after {ready_s:.1f}s; final step seen after {seen_s:.1f}s; "
                f"series={len(done)}"
            )
    finally:
        for p in procs:
            p.kill()
            p.wait()


def test_cluster_relabelling_keeps_only_annotated_job_pods(tmp_path: Path) -> None:
    """Pods without ``prometheus.io/scrape: "true"`` or the operator's job label are dropped."""
    from workloads.specs.prometheus_files import static_scrape_configs, write_prometheus_files

    port = free_port()
    (job,) = static_scrape_configs(worker_targets("keep", [port, port + 1, port + 2]))
    groups = job["static_configs"]
    groups[1]["labels"]["__meta_kubernetes_pod_annotation_prometheus_io_scrape"] = "false"
    del groups[2]["labels"]["__meta_kubernetes_pod_label_training_kubeflow_org_job_name"]
    files = write_prometheus_files(tmp_path, [job], scrape_interval="1s")
    proc = subprocess.Popen(
        [
            "prometheus",
            f"--config.file={files.config}",
            f"--storage.tsdb.path={tmp_path / 'data'}",
            f"--web.listen-address=127.0.0.1:{(api := free_port())}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 30
        body: dict = {}
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{api}/api/v1/targets") as r:
                    body = json.loads(r.read())["data"]
                if len(body["activeTargets"]) + len(body["droppedTargets"]) == 3:
                    break
            except OSError:
                pass
            time.sleep(0.5)
        (active,) = body["activeTargets"]
        assert active["labels"] == {
            "instance": f"127.0.0.1:{port}",
            "job": "eksfsdp-training",
            "training_job": "keep",
            "pod": "keep-worker-0",
            "node": "local-0",
            "namespace": "local",
        }
        assert active["scrapeUrl"] == f"http://127.0.0.1:{port}/metrics"
        assert len(body["droppedTargets"]) == 2
    finally:
        proc.terminate()
        proc.wait(timeout=10)
