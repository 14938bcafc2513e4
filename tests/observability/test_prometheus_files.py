"""The generated Prometheus config, alert rules and rule unit tests pass promtool.

If this fails, the cluster's or the local Prometheus would refuse its config, an alert rule would
be invalid, or an alert would not fire on the series it exists for (XID error, hot GPU, training
throughput drop or stall, dead exporter, restart) or would fire on healthy series. No mocks:
Debian's promtool 2.42. (Debian builds Prometheus without Kubernetes discovery, so promtool checks
the local form of the config: the same jobs and relabel rules with static targets.)
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from localrun.prometheus import worker_targets
from workloads.specs.prometheus_files import (
    ALERT_NAMES,
    DCGM_SCRAPE_JOB,
    JOB_LABEL,
    TRAINING_SCRAPE_JOB,
    AlertThresholds,
    kubernetes_scrape_configs,
    rule_groups,
    static_scrape_configs,
    training_pod_annotations,
    write_prometheus_files,
)

PROMTOOL = shutil.which("promtool")
needs_promtool = pytest.mark.prometheus
"""promtool comes with Debian's prometheus: skipped without it, failed under
``EKS_FSDP_REQUIRE_PROMETHEUS=1`` (tests/conftest.py)."""


def promtool(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    assert PROMTOOL is not None
    return subprocess.run([PROMTOOL, *args], cwd=cwd, capture_output=True, text=True, timeout=120)


@pytest.fixture
def files(tmp_path: Path):
    scrape = static_scrape_configs(worker_targets("llama", [19001, 19002]), ["127.0.0.1:9400"])
    return write_prometheus_files(tmp_path, scrape, scrape_interval="1s")


@needs_promtool
def test_promtool_check_config_and_rules(files) -> None:
    res = promtool("check", "config", files.config.name, cwd=files.config.parent)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "SUCCESS" in res.stdout
    res = promtool("check", "rules", files.rules.name, cwd=files.rules.parent)
    assert res.returncode == 0, res.stdout + res.stderr
    assert f"SUCCESS: {len(ALERT_NAMES)} rules found" in res.stdout


@needs_promtool
def test_promtool_rule_unit_tests_pass(files) -> None:
    res = promtool("test", "rules", files.rule_tests.name, cwd=files.rule_tests.parent)
    assert res.returncode == 0, res.stdout + res.stderr
    tests = yaml.safe_load(files.rule_tests.read_text())["tests"]
    tested = {c["alertname"] for t in tests for c in t["alert_rule_test"]}
    assert tested == set(ALERT_NAMES)
    # Every alert has a case where it must stay silent and one where it must fire.
    for name in ALERT_NAMES:
        cases = [c for t in tests for c in t["alert_rule_test"] if c["alertname"] == name]
        assert any(not c["exp_alerts"] for c in cases), name
        assert any(c["exp_alerts"] for c in cases), name


@needs_promtool
@pytest.mark.parametrize(
    ("alert", "old", "new"),
    [
        # latching again (the field holds the last XID for ever)
        ("GpuXidError", "XID_ERRORS[15m]) > 0", "XID_ERRORS[15m]) >= 0"),
        # 79 (fallen off the bus) no longer counted as hardware
        ("GpuXidError", "DCGM_FI_DEV_XID_ERRORS == 79 or ", ""),
        # 63 (a row remapped: benign for the preflight) alerted on again
        (
            "GpuXidError",
            "DCGM_FI_DEV_XID_ERRORS == 48 or ",
            "DCGM_FI_DEV_XID_ERRORS == 48 or DCGM_FI_DEV_XID_ERRORS == 63 or ",
        ),
        ("GpuTemperatureHigh", "DCGM_FI_DEV_GPU_TEMP) > 85", "DCGM_FI_DEV_GPU_TEMP) > 95"),
        ("TrainingThroughputDropped", "< 0.5 *", "< 0.1 *"),
        ("TrainingStalled", "== 0 and", "== 1 and"),
        # an Unknown condition (the agent starting) taken for a fault
        ("NodeConditionUnhealthy", 'status="false"', 'status=~"false|unknown"'),
        # the agent's GPU condition left out
        ("NodeConditionUnhealthy", "AcceleratedHardwareReady|", ""),
    ],
)
def test_rule_tests_catch_a_broken_rule(files, alert: str, old: str, new: str) -> None:
    text = files.rules.read_text()
    assert old in text, alert
    files.rules.write_text(text.replace(old, new))
    res = promtool("test", "rules", files.rule_tests.name, cwd=files.rule_tests.parent)
    assert res.returncode != 0
    assert alert in res.stdout + res.stderr


def test_thresholds_flow_into_rules_and_are_validated(tmp_path: Path) -> None:
    rules = rule_groups(AlertThresholds(gpu_temp_celsius=80, stall_window="20m"))
    exprs = {r["alert"]: r["expr"] for g in rules for r in g["rules"]}
    assert exprs["GpuTemperatureHigh"].endswith("> 80")
    assert "changes(eksfsdp_step[20m])" in exprs["TrainingStalled"]
    with pytest.raises(ValueError, match=r"throughput_drop_ratio 1\.5"):
        AlertThresholds(throughput_drop_ratio=1.5)
    with pytest.raises(ValueError, match="stall_for '5 minutes'"):
        AlertThresholds(stall_for="5 minutes")


def test_cluster_and_local_jobs_share_relabelling() -> None:
    cluster = {j["job_name"]: j for j in kubernetes_scrape_configs()}
    local = {j["job_name"]: j for j in static_scrape_configs(worker_targets("x", [1]), ["h:9400"])}
    assert set(cluster) == set(local) == {TRAINING_SCRAPE_JOB, DCGM_SCRAPE_JOB}
    for name, job in cluster.items():
        assert job["kubernetes_sd_configs"] == [{"role": "pod"}]
        assert local[name]["relabel_configs"] == job["relabel_configs"]
    for job in cluster.values():  # finished pods first out: their IPs get reused
        assert job["relabel_configs"][0] == {
            "source_labels": ["__meta_kubernetes_pod_phase"],
            "action": "drop",
            "regex": "Succeeded|Failed",
        }
    keep = cluster[TRAINING_SCRAPE_JOB]["relabel_configs"][1:3]
    assert keep[0]["source_labels"] == ["__meta_kubernetes_pod_annotation_prometheus_io_scrape"]
    assert keep[1]["source_labels"] == [
        "__meta_kubernetes_pod_label_training_kubeflow_org_job_name"
    ]
    # The per-job label every training series carries (alerts group by it, the dashboard's job
    # variable selects on it) is the operator's job-name pod label.
    job_label = [
        r
        for r in cluster[TRAINING_SCRAPE_JOB]["relabel_configs"]
        if r.get("target_label") == JOB_LABEL
    ]
    assert job_label == [
        {
            "source_labels": ["__meta_kubernetes_pod_label_training_kubeflow_org_job_name"],
            "target_label": "training_job",
        }
    ]
    assert [j["job_name"] for j in kubernetes_scrape_configs(dcgm=False)] == [TRAINING_SCRAPE_JOB]
    assert training_pod_annotations() == {
        "prometheus.io/scrape": "true",
        "prometheus.io/port": "9102",
        "prometheus.io/path": "/metrics",
    }
    with pytest.raises(ValueError, match="metrics port 0"):
        training_pod_annotations(0)


@pytest.mark.slow
@pytest.mark.integration
@pytest.mark.prometheus
def test_prometheus_drops_finished_pods(tmp_path: Path) -> None:
    """A real Prometheus with the cluster's relabelling: of three workers discovered with the
    phases Running, Succeeded and Failed, only the running one stays a target (the others would
    be scraped at reused IPs or stay ``up == 0`` for ever)."""
    import dataclasses

    from localrun.prometheus import free_port, start_local_prometheus

    running, succeeded, failed = worker_targets("done", [free_port(), free_port(), free_port()])
    targets = [
        running,
        dataclasses.replace(succeeded, phase="Succeeded"),
        dataclasses.replace(failed, phase="Failed"),
    ]
    import time

    with start_local_prometheus(targets, tmp_path, scrape_interval="1s") as prom:
        deadline = time.monotonic() + 60  # discovery is applied shortly after start-up
        while True:
            data = prom._get("/api/v1/targets")
            active = {
                t["labels"]["pod"]
                for t in data["activeTargets"]
                if t["scrapePool"] == TRAINING_SCRAPE_JOB
            }
            dropped = {
                t["discoveredLabels"]["__meta_kubernetes_pod_name"] for t in data["droppedTargets"]
            }
            if (active and len(dropped) >= 2) or time.monotonic() > deadline:
                break
            time.sleep(0.5)
    assert active == {running.pod}
    assert dropped == {succeeded.pod, failed.pod}


def test_the_xid_alert_and_the_preflight_share_one_list(files) -> None:
    """The alert names exactly the XIDs that fail a node in the preflight (before, it also
    alerted on 63, which the preflight treats as benign, and on 61, 62 and 140)."""
    from training.preflight import FATAL_XIDS

    rules = yaml.safe_load(files.rules.read_text())
    (expr,) = [
        r["expr"] for g in rules["groups"] for r in g["rules"] if r.get("alert") == "GpuXidError"
    ]
    assert set(map(int, re.findall(r"DCGM_FI_DEV_XID_ERRORS == (\d+)", expr))) == FATAL_XIDS
