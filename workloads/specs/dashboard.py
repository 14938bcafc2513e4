"""The Grafana dashboard: GPUs (DCGM exporter) next to the training's own numbers.

Built with grafana-foundation-sdk (typed builders, no hand-written JSON). Layout:

- Variables: ``datasource`` (any Prometheus), ``job`` (``training_job`` label of the training
  series, ``prometheus_files.JOB_LABEL``, written by the scrape relabelling from the operator's
  pod label; multi-select, All) and ``node`` (``node`` label of the DCGM series; multi-select, All).
- Row "GPUs (DCGM)": the six DCGM panels, filtered by ``node``.
- Row "Training": tokens/s, MFU, loss, step time, goodput, peak memory, filtered by ``job``. Every node of
  a job reports the job-wide value, so the panels aggregate with ``max by (training_job)``.

Pure data, no pulumi import. ``dashboard_json()`` is what the Grafana ConfigMap carries.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from grafana_foundation_sdk.builders import dashboard as gd
from grafana_foundation_sdk.builders import prometheus as gp
from grafana_foundation_sdk.builders import timeseries
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models.dashboard import DataSourceRef, VariableRefresh

from workloads.specs.prometheus_files import JOB_LABEL

DASHBOARD_UID = "eksfsdp-overview"
DASHBOARD_TITLE = "eks-fsdp: GPUs and training"
DATASOURCE_VAR = "datasource"
JOB_VAR = "job"
NODE_VAR = "node"
DATASOURCE = DataSourceRef(type_val="prometheus", uid=f"${{{DATASOURCE_VAR}}}")

NODE_SEL = f'node=~"${NODE_VAR}"'
JOB_SEL = f'{JOB_LABEL}=~"${JOB_VAR}"'
JOB_VAR_METRIC = "eksfsdp_step"
"""Series whose ``JOB_LABEL`` values fill the ``job`` variable (every training pod serves it)."""


@dataclass(frozen=True)
class PanelSpec:
    """One time-series panel: title, PromQL, Grafana unit, legend."""

    title: str
    expr: str
    unit: str
    legend: str
    description: str


GPU_LEGEND = "{{node}} GPU {{gpu}}"
DCGM_PANELS: tuple[PanelSpec, ...] = (
    PanelSpec(
        "GPU utilisation",
        f"DCGM_FI_DEV_GPU_UTIL{{{NODE_SEL}}}",
        "percent",
        GPU_LEGEND,
        "Fraction of time a kernel was running (DCGM_FI_DEV_GPU_UTIL).",
    ),
    PanelSpec(
        "Memory copy utilisation",
        f"DCGM_FI_DEV_MEM_COPY_UTIL{{{NODE_SEL}}}",
        "percent",
        GPU_LEGEND,
        "Fraction of time device memory was read or written.",
    ),
    PanelSpec(
        "XID errors",
        f"DCGM_FI_DEV_XID_ERRORS{{{NODE_SEL}}}",
        "none",
        GPU_LEGEND,
        "Last XID error code per GPU (0 = none); any non-zero value alerts.",
    ),
    PanelSpec(
        "SM clock",
        f"DCGM_FI_DEV_SM_CLOCK{{{NODE_SEL}}}",
        "rotmhz",
        GPU_LEGEND,
        "Streaming multiprocessor clock; drops under thermal or power throttling.",
    ),
    PanelSpec(
        "GPU temperature",
        f"DCGM_FI_DEV_GPU_TEMP{{{NODE_SEL}}}",
        "celsius",
        GPU_LEGEND,
        "GPU core temperature.",
    ),
    PanelSpec(
        "Power usage",
        f"DCGM_FI_DEV_POWER_USAGE{{{NODE_SEL}}}",
        "watt",
        GPU_LEGEND,
        "Board power draw.",
    ),
)

JOB_LEGEND = "{{training_job}}"
TRAINING_PANELS: tuple[PanelSpec, ...] = (
    PanelSpec(
        "Throughput (tokens/s)",
        f"max by (training_job) (eksfsdp_tokens_per_second{{{JOB_SEL}}})",
        "short",
        JOB_LEGEND,
        "Global tokens per second of the last optimizer step.",
    ),
    PanelSpec(
        "MFU",
        f"max by (training_job) (eksfsdp_mfu_ratio{{{JOB_SEL}}})",
        "percentunit",
        JOB_LEGEND,
        "Model FLOPs utilisation (achieved / peak bf16 FLOP/s).",
    ),
    PanelSpec(
        "Loss",
        f"max by (training_job) (eksfsdp_loss{{{JOB_SEL}}})",
        "none",
        JOB_LEGEND,
        "Training loss, mean over ranks.",
    ),
    PanelSpec(
        "Step time",
        f"max by (training_job) (eksfsdp_step_time_seconds{{{JOB_SEL}}})",
        "s",
        JOB_LEGEND,
        "Wall time of one optimizer step.",
    ),
    PanelSpec(
        "Goodput",
        f"max by (training_job) (eksfsdp_goodput_ratio{{{JOB_SEL}}})",
        "percentunit",
        JOB_LEGEND,
        "Optimizer-step time of the final history / wall time since the job first started: "
        "start-up, restarts, redone steps and checkpoint stalls lower it.",
    ),
    PanelSpec(
        "Peak memory",
        f"max by (training_job, pod) (eksfsdp_peak_memory_bytes{{{JOB_SEL}}})",
        "bytes",
        "{{pod}}",
        "Peak device memory (or host RSS on CPU) of local rank 0, per pod.",
    ),
)


def _panel(spec: PanelSpec, panel_id: int) -> timeseries.Panel:
    return (
        timeseries.Panel()
        .id(panel_id)
        .title(spec.title)
        .description(spec.description)
        .unit(spec.unit)
        .datasource(DATASOURCE)
        .span(8)
        .height(8)
        .with_target(gp.Dataquery().expr(spec.expr).legend_format(spec.legend).ref_id("A"))
    )


def _variables() -> list[Any]:
    datasource = gd.DatasourceVariable(DATASOURCE_VAR).label("Data source").type("prometheus")
    job = (
        gd.QueryVariable(JOB_VAR)
        .label("Training job")
        .datasource(DATASOURCE)
        .query(f"label_values({JOB_VAR_METRIC}, {JOB_LABEL})")
        .refresh(VariableRefresh.ON_TIME_RANGE_CHANGED)
        .multi(True)
        .include_all(True)
        .all_value(".*")
    )
    node = (
        gd.QueryVariable(NODE_VAR)
        .label("Node")
        .datasource(DATASOURCE)
        .query("label_values(DCGM_FI_DEV_GPU_UTIL, node)")
        .refresh(VariableRefresh.ON_TIME_RANGE_CHANGED)
        .multi(True)
        .include_all(True)
        .all_value(".*")
    )
    return [datasource, job, node]


def build_dashboard() -> dict[str, Any]:
    """The dashboard as a JSON-ready dict (what Grafana imports)."""
    builder = (
        gd.Dashboard(DASHBOARD_TITLE)
        .uid(DASHBOARD_UID)
        .tags(["eks-fsdp", "gpu", "training"])
        .time("now-1h", "now")
        .refresh("30s")
        .editable()
        .variables(_variables())
    )
    panel_id = 1
    for row_title, specs in (("GPUs (DCGM)", DCGM_PANELS), ("Training", TRAINING_PANELS)):
        builder = builder.with_row(gd.Row(row_title).id(panel_id))
        panel_id += 1
        for spec in specs:
            builder = builder.with_panel(_panel(spec, panel_id))
            panel_id += 1
    as_dict: dict[str, Any] = json.loads(json.dumps(builder.build(), cls=JSONEncoder))
    return as_dict


def dashboard_json(indent: int | None = None) -> str:
    """The dashboard as JSON text (stable key order)."""
    return json.dumps(build_dashboard(), indent=indent, sort_keys=True)
