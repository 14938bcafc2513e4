"""Where the training exporter listens: loopback in a local run, every interface in a pod.

A local run's pods share this machine's interfaces, so an exporter on ``0.0.0.0`` would serve
training metrics to every network the machine is on; a pod has its own network namespace and
the workers' NetworkPolicy admits only the metrics namespace. If this fails, ``eks-fsdp local
--prometheus`` (and every local job) exposes its exporter beyond loopback again, or a pod's
exporter stops answering the cluster's Prometheus. The local case is checked on the real
listening socket; the pod case by the address it resolves (no test listens beyond loopback).
"""

from __future__ import annotations

from jobs.build import load_example
from localrun.pods import pod_env
from training.prometheus import METRICS_ADDR_ENV, metrics_addr, prometheus_sink_for_rank
from workloads.specs import pytorchjob as pj


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_a_local_pods_exporter_listens_on_loopback_only() -> None:
    _, w = load_example("dev")
    env = pod_env(pj.pytorchjob(w.job, "127.0.0.1"), "cpu", f"{w.job.name}-worker-0")
    assert env[METRICS_ADDR_ENV] == "127.0.0.1"
    assert prometheus_sink_for_rank(9, env={**env, "LOCAL_RANK": "1"}) is None  # rank 0 serves
    sink = prometheus_sink_for_rank(_free_port(), env={**env, "LOCAL_RANK": "0"})
    assert sink is not None
    try:
        assert sink._server.socket.getsockname()[0] == "127.0.0.1"
    finally:
        sink.close()


def test_a_pods_exporter_listens_on_every_interface_of_its_namespace() -> None:
    assert metrics_addr({"LOCAL_RANK": "0"}) == "0.0.0.0"
    assert metrics_addr({METRICS_ADDR_ENV: "127.0.0.1"}) == "127.0.0.1"
