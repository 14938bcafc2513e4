"""The Grafana dashboard built with grafana-foundation-sdk shows the right series.

If this fails, a panel would query the wrong DCGM field or training metric, the datasource, job or
node selector would be missing (the dashboard would break on clusters whose Prometheus is not the
default datasource, or mix jobs), or the JSON Grafana imports would be malformed. Pure data: no
Grafana server exists here, so the structure of the SDK's JSON is asserted.
"""

from __future__ import annotations

import json
import re

from training.prometheus import METRIC_NAMES
from workloads.specs.dashboard import DASHBOARD_UID, build_dashboard, dashboard_json
from workloads.specs.prometheus_files import (
    JOB_NAME_POD_LABEL,
    TRAINING_SCRAPE_JOB,
    kubernetes_scrape_configs,
)

DCGM = [
    "DCGM_FI_DEV_GPU_UTIL",
    "DCGM_FI_DEV_MEM_COPY_UTIL",
    "DCGM_FI_DEV_XID_ERRORS",
    "DCGM_FI_DEV_SM_CLOCK",
    "DCGM_FI_DEV_GPU_TEMP",
    "DCGM_FI_DEV_POWER_USAGE",
]
TRAINING = {
    "eksfsdp_tokens_per_second": "short",
    "eksfsdp_mfu_ratio": "percentunit",
    "eksfsdp_loss": "none",
    "eksfsdp_step_time_seconds": "s",
    "eksfsdp_goodput_ratio": "percentunit",
    "eksfsdp_peak_memory_bytes": "bytes",
}


def panels_under(dash: dict, row_title: str) -> list[dict]:
    out, current = [], None
    for p in dash["panels"]:
        if p["type"] == "row":
            current = p["title"]
        elif current == row_title:
            out.append(p)
    return out


def test_six_dcgm_panels_in_order_filtered_by_node() -> None:
    gpu = panels_under(build_dashboard(), "GPUs (DCGM)")
    assert [p["targets"][0]["expr"] for p in gpu] == [f'{m}{{node=~"$node"}}' for m in DCGM]
    units = [p["fieldConfig"]["defaults"]["unit"] for p in gpu]
    assert units == ["percent", "percent", "none", "rotmhz", "celsius", "watt"]
    assert all(p["type"] == "timeseries" for p in gpu)


def test_training_panels_use_exporter_metrics_filtered_by_job() -> None:
    train = panels_under(build_dashboard(), "Training")
    got = {}
    for p in train:
        expr = p["targets"][0]["expr"]
        metric = next(m for m in TRAINING if m in expr)
        assert 'training_job=~"$job"' in expr
        assert expr.startswith("max by (training_job")
        got[metric] = p["fieldConfig"]["defaults"]["unit"]
    assert got == TRAINING
    assert set(TRAINING) <= set(METRIC_NAMES)  # the exporter serves every charted series


def test_variables_datasource_job_node() -> None:
    dash = build_dashboard()
    v = {x["name"]: x for x in dash["templating"]["list"]}
    assert list(v) == ["datasource", "job", "node"]
    assert v["datasource"]["type"] == "datasource" and v["datasource"]["query"] == "prometheus"
    assert v["job"]["query"] == "label_values(eksfsdp_step, training_job)"
    assert v["node"]["query"] == "label_values(DCGM_FI_DEV_GPU_UTIL, node)"
    for name in ("job", "node"):
        assert v[name]["type"] == "query"
        assert v[name]["multi"] is True and v[name]["includeAll"] is True
        assert v[name]["allValue"] == ".*"
        assert v[name]["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
    queries = [p for p in dash["panels"] if p["type"] != "row"]
    assert len(queries) == 12
    assert all(p["datasource"] == {"type": "prometheus", "uid": "${datasource}"} for p in queries)


def test_json_is_stable_and_ids_unique() -> None:
    text = dashboard_json()
    assert text == dashboard_json()
    dash = json.loads(text)
    assert dash["uid"] == DASHBOARD_UID
    ids = [p["id"] for p in dash["panels"]]
    assert len(ids) == len(set(ids)) == 14
    # Panels do not overlap on Grafana's 24-column grid.
    cells = set()
    for p in dash["panels"]:
        g = p["gridPos"]
        for x in range(g["x"], g["x"] + g["w"]):
            for y in range(g["y"], g["y"] + g["h"]):
                assert (x, y) not in cells, p["title"]
                cells.add((x, y))
        assert g["x"] + g["w"] <= 24


def test_job_selector_uses_the_label_the_scrape_job_writes() -> None:
    """Many jobs share a cluster: the ``job`` variable lists the values of the label the scrape
    relabelling copies from the operator's ``training.kubeflow.org/job-name`` pod label, and
    every training panel selects on it. Catches a renamed target label (an empty selector and
    blank panels) or a panel that mixes all jobs' series."""
    (training,) = [j for j in kubernetes_scrape_configs() if j["job_name"] == TRAINING_SCRAPE_JOB]
    pod_label = "__meta_kubernetes_pod_label_" + re.sub(r"[^a-zA-Z0-9_]", "_", JOB_NAME_POD_LABEL)
    (label,) = [
        r["target_label"]
        for r in training["relabel_configs"]
        if r.get("source_labels") == [pod_label] and "target_label" in r
    ]
    dash = build_dashboard()
    job = next(v for v in dash["templating"]["list"] if v["name"] == "job")
    metric = job["query"].removeprefix("label_values(").split(",")[0]
    assert job["query"] == f"label_values({metric}, {label})"
    assert metric in METRIC_NAMES
    train = panels_under(dash, "Training")
    assert len(train) == len(TRAINING)
    for p in train:
        (target,) = p["targets"]
        assert f'{{{label}=~"$job"}}' in target["expr"], p["title"]
        assert f"max by ({label}" in target["expr"], p["title"]
    # The GPU row stays per node: DCGM series carry no job label.
    assert all("$job" not in p["targets"][0]["expr"] for p in panels_under(dash, "GPUs (DCGM)"))
