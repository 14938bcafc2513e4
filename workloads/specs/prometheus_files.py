"""Prometheus scrape jobs, alert rules and rule unit tests: one source for cluster and laptop.

The in-cluster Prometheus (kube-prometheus-stack: ``additionalScrapeConfigs`` and
``additionalPrometheusRulesMap``) and the local one (``prometheus.yml`` + ``rules.yml`` written by
:func:`write_prometheus_files`) get the same scrape job names, the same target labels
(``training_job``, ``node``, ``pod``, ``namespace``) and the same alert rules. Only discovery
differs: Kubernetes pod discovery in the cluster, static targets locally.

The contract for training pods (see ``training_pod_annotations``): annotations
``prometheus.io/scrape: "true"``, ``prometheus.io/port: "<port>"`` (default 9102),
``prometheus.io/path: /metrics``, and the label ``training.kubeflow.org/job-name`` that the
Kubeflow training operator puts on every PyTorchJob pod. The job's command passes
``--metrics_port <port>``; local rank 0 of each pod serves.

Pure data, no pulumi import.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from training.preflight import FATAL_XIDS

TRAINING_SCRAPE_JOB = "eksfsdp-training"
DCGM_SCRAPE_JOB = "dcgm-exporter"
TRAINING_METRICS_PORT = 9102
"""Port the training pods serve metrics on (``--metrics_port``); 9102 is free in a GPU pod."""
METRICS_PATH = "/metrics"
DCGM_PORT = 9400
DCGM_APP_LABEL = "dcgm-exporter"
"""Value of ``app.kubernetes.io/name`` on the dcgm-exporter chart's pods."""
JOB_NAME_POD_LABEL = "training.kubeflow.org/job-name"
"""Label the training operator sets on every PyTorchJob pod, valued with the job's name
(``JobNameLabel`` in kubeflow/training-operator ``pkg/apis/kubeflow.org/v1/common_types.go``,
release-1.9)."""
JOB_LABEL = "training_job"
"""Target label that carries ``JOB_NAME_POD_LABEL`` on every training series: the per-job label
the alert rules group by and the dashboard's ``job`` variable selects on."""

ANNOTATION_SCRAPE = "prometheus.io/scrape"
ANNOTATION_PORT = "prometheus.io/port"
ANNOTATION_PATH = "prometheus.io/path"

RULES_FILE = "rules.yml"
CONFIG_FILE = "prometheus.yml"
RULE_TESTS_FILE = "rules_test.yml"


@dataclass(frozen=True, kw_only=True)
class AlertThresholds:
    """Thresholds of the alert rules (defaults suit H100/A100 fleets)."""

    gpu_temp_celsius: float = 85.0
    """GPU core temperature above which GpuTemperatureHigh fires (H100 slows down near 87 C)."""
    gpu_temp_for: str = "5m"
    """How long the temperature must stay high."""
    throughput_drop_ratio: float = 0.5
    """TrainingThroughputDropped fires when the last 5 min average falls below this fraction."""
    throughput_baseline: str = "30m"
    """Window (ending 5 min ago) that sets the throughput baseline."""
    throughput_for: str = "5m"
    """How long the drop must last."""
    stall_window: str = "10m"
    """TrainingStalled fires when the step counter has not moved for this long..."""
    stall_for: str = "5m"
    """...and that stays so for this much longer (checkpoints of large models take minutes)."""
    target_down_for: str = "5m"
    """How long a training pod's metrics endpoint may be unreachable."""

    def __post_init__(self) -> None:
        if not 0 < self.throughput_drop_ratio < 1:
            raise ValueError(
                f"throughput_drop_ratio {self.throughput_drop_ratio} must be between 0 and 1"
            )
        for name in (
            "gpu_temp_for",
            "throughput_baseline",
            "throughput_for",
            "stall_window",
            "stall_for",
            "target_down_for",
        ):
            if not re.fullmatch(r"\d+[smh]", getattr(self, name)):
                raise ValueError(f"{name} {getattr(self, name)!r} is not a duration like 5m")


def training_pod_annotations(port: int = TRAINING_METRICS_PORT) -> dict[str, str]:
    """Annotations a PyTorchJob pod template carries so Prometheus scrapes its exporter."""
    if not 1 <= port <= 65535:
        raise ValueError(f"metrics port {port} is not a TCP port (1..65535)")
    return {ANNOTATION_SCRAPE: "true", ANNOTATION_PORT: str(port), ANNOTATION_PATH: METRICS_PATH}


def _meta(label: str) -> str:
    """Kubernetes SD meta label for a pod label/annotation name."""
    return re.sub(r"[^a-zA-Z0-9_]", "_", label)


FINISHED_PHASES = ("Succeeded", "Failed")
"""Pod phases whose pods are gone for good: ``role: pod`` discovery keeps listing them (their IP
may already belong to another pod) until the pod object is deleted, and a target that cannot
answer keeps ``up == 0`` (a TrainingTargetDown that never clears)."""
DROP_FINISHED_PODS: dict[str, Any] = {
    "source_labels": ["__meta_kubernetes_pod_phase"],
    "action": "drop",
    "regex": "|".join(FINISHED_PHASES),
}
"""First relabel rule of every pod scrape job."""
HARDWARE_XIDS: tuple[int, ...] = tuple(sorted(FATAL_XIDS))
"""XIDs that need a GPU reset or node service: the preflight's ``FATAL_XIDS``, the one list
(its docstring cites NVIDIA's Xid catalog per XID). 63, a page retired / row remapped
successfully, is benign there and so is not alerted on here; application faults (13, 31, 43,
45) are left to the job's own failure handling."""
XID_WINDOW = "15m"
"""An XID alert stays up this long after the XID is reported."""


def xid_expr(window: str = XID_WINDOW) -> str:
    """A hardware XID reported within ``window``. ``DCGM_FI_DEV_XID_ERRORS`` holds the *last* XID
    and never resets, so ``> 0`` would latch for ever: the alert needs the value to have changed
    (``changes()``) and to be one of ``HARDWARE_XIDS``."""
    xid = "DCGM_FI_DEV_XID_ERRORS"
    hardware = " or ".join(f"{xid} == {x}" for x in HARDWARE_XIDS)
    return f"max by (node, gpu) (({hardware}) and changes({xid}[{window}]) > 0)"


def kubernetes_scrape_configs(*, dcgm: bool = True) -> list[dict[str, Any]]:
    """Scrape jobs for the cluster: annotated PyTorchJob pods and dcgm-exporter pods (pods that
    have Succeeded or Failed are dropped)."""
    training = {
        "job_name": TRAINING_SCRAPE_JOB,
        "kubernetes_sd_configs": [{"role": "pod"}],
        "relabel_configs": [
            dict(DROP_FINISHED_PODS),
            {
                "source_labels": [f"__meta_kubernetes_pod_annotation_{_meta(ANNOTATION_SCRAPE)}"],
                "action": "keep",
                "regex": "true",
            },
            {
                "source_labels": [f"__meta_kubernetes_pod_label_{_meta(JOB_NAME_POD_LABEL)}"],
                "action": "keep",
                "regex": ".+",
            },
            {
                "source_labels": [f"__meta_kubernetes_pod_annotation_{_meta(ANNOTATION_PATH)}"],
                "regex": "(.+)",
                "target_label": "__metrics_path__",
            },
            {
                "source_labels": [
                    "__meta_kubernetes_pod_ip",
                    f"__meta_kubernetes_pod_annotation_{_meta(ANNOTATION_PORT)}",
                ],
                "regex": r"(.+);(\d+)",
                "replacement": "$1:$2",
                "target_label": "__address__",
            },
            {
                "source_labels": [f"__meta_kubernetes_pod_label_{_meta(JOB_NAME_POD_LABEL)}"],
                "target_label": JOB_LABEL,
            },
            {"source_labels": ["__meta_kubernetes_pod_node_name"], "target_label": "node"},
            {"source_labels": ["__meta_kubernetes_pod_name"], "target_label": "pod"},
            {"source_labels": ["__meta_kubernetes_namespace"], "target_label": "namespace"},
        ],
    }
    jobs = [training]
    if dcgm:
        jobs.append(
            {
                "job_name": DCGM_SCRAPE_JOB,
                "kubernetes_sd_configs": [{"role": "pod"}],
                "relabel_configs": [
                    dict(DROP_FINISHED_PODS),
                    {
                        "source_labels": [
                            "__meta_kubernetes_pod_label_app_kubernetes_io_name",
                            "__meta_kubernetes_pod_container_port_number",
                        ],
                        "action": "keep",
                        "regex": f"{DCGM_APP_LABEL};{DCGM_PORT}",
                    },
                    # No pod/namespace target labels: DCGM's own pod/namespace labels name the
                    # pod using the GPU (the training worker), and must not be overwritten.
                    {"source_labels": ["__meta_kubernetes_pod_node_name"], "target_label": "node"},
                ],
            }
        )
    return jobs


@dataclass(frozen=True, kw_only=True)
class LocalTarget:
    """One local training worker's metrics endpoint, labelled as its pod would be."""

    address: str
    """host:port of the worker's exporter."""
    training_job: str
    """The job name (label ``training_job``)."""
    pod: str
    """The worker's pod name, e.g. ``<job>-worker-0``."""
    node: str = "localhost"
    """The node label."""
    namespace: str = "local"
    """The namespace label."""
    phase: str = "Running"
    """The pod phase Kubernetes discovery would report."""


def _pod_meta_labels(t: LocalTarget, host: str, port: str) -> dict[str, str]:
    """The ``__meta_kubernetes_pod_*`` labels Kubernetes discovery would give this worker."""
    return {
        "__meta_kubernetes_pod_ip": host,
        "__meta_kubernetes_pod_name": t.pod,
        "__meta_kubernetes_pod_node_name": t.node,
        "__meta_kubernetes_namespace": t.namespace,
        "__meta_kubernetes_pod_phase": t.phase,
        "__meta_kubernetes_pod_container_port_number": port,
        f"__meta_kubernetes_pod_label_{_meta(JOB_NAME_POD_LABEL)}": t.training_job,
        **{
            f"__meta_kubernetes_pod_annotation_{_meta(k)}": v
            for k, v in training_pod_annotations(int(port)).items()
        },
    }


def static_scrape_configs(
    targets: Sequence[LocalTarget], dcgm_targets: Sequence[str] = ()
) -> list[dict[str, Any]]:
    """The cluster's scrape jobs for a Prometheus outside Kubernetes.

    Each job keeps its ``relabel_configs`` unchanged; only ``kubernetes_sd_configs`` is replaced
    by ``static_configs`` whose targets carry the ``__meta_kubernetes_*`` labels pod discovery
    would attach (pod IP, annotations, the operator's job-name label, node, pod, namespace).
    So the local Prometheus exercises the very relabelling the cluster uses.
    """
    by_name = {job["job_name"]: job for job in kubernetes_scrape_configs(dcgm=bool(dcgm_targets))}
    groups = []
    for t in targets:
        host, _, port = t.address.rpartition(":")
        groups.append({"targets": [t.address], "labels": _pod_meta_labels(t, host, port)})
    jobs: list[dict[str, Any]] = []
    training = {
        k: v for k, v in by_name[TRAINING_SCRAPE_JOB].items() if k != "kubernetes_sd_configs"
    }
    jobs.append({**training, "static_configs": groups})
    if dcgm_targets:
        dcgm_groups = []
        for i, address in enumerate(dcgm_targets):
            host, _, port = address.rpartition(":")
            labels = {
                "__meta_kubernetes_pod_label_app_kubernetes_io_name": DCGM_APP_LABEL,
                "__meta_kubernetes_pod_container_port_number": port,
                "__meta_kubernetes_pod_node_name": f"node-{i}",
                "__meta_kubernetes_pod_phase": "Running",
            }
            dcgm_groups.append({"targets": [address], "labels": labels})
        dcgm = {k: v for k, v in by_name[DCGM_SCRAPE_JOB].items() if k != "kubernetes_sd_configs"}
        jobs.append({**dcgm, "static_configs": dcgm_groups})
    return jobs


def _alert(
    name: str, expr: str, severity: str, summary: str, description: str, for_: str | None = None
) -> dict[str, Any]:
    rule: dict[str, Any] = {"alert": name, "expr": expr}
    if for_:
        rule["for"] = for_
    rule["labels"] = {"severity": severity}
    rule["annotations"] = {"summary": summary, "description": description}
    return rule


NODE_MONITORING_CONDITIONS = (
    "AcceleratedHardwareReady",
    "NetworkingReady",
    "KernelReady",
    "StorageReady",
    "ContainerRuntimeReady",
)
"""Node conditions the EKS node monitoring agent sets (EKS user guide, "Detect node health
issues with the EKS node monitoring agent"); kube-state-metrics exports every node condition
as ``kube_node_status_condition{node, condition, status}`` (kube-state-metrics
docs/metrics/cluster/node-metrics.md), which kube-prometheus-stack scrapes."""
NODE_CONDITION_FOR = "5m"
"""Half of EKS's 10-minute repair delay for AcceleratedHardwareReady: the alert comes first."""


def node_condition_expr() -> str:
    """A monitored condition reported False on a node."""
    conditions = "|".join(NODE_MONITORING_CONDITIONS)
    return (
        "max by (node, condition) (kube_node_status_condition"
        f'{{condition=~"{conditions}",status="false"}}) == 1'
    )


def rule_groups(thresholds: AlertThresholds | None = None) -> list[dict[str, Any]]:
    """Alert rule groups (the ``groups`` of a Prometheus rules file)."""
    t = thresholds or AlertThresholds()
    tps = "eksfsdp_tokens_per_second"
    gpu = [
        _alert(
            "GpuXidError",
            xid_expr(),
            "critical",
            "XID {{ $value }} on GPU {{ $labels.gpu }} of node {{ $labels.node }}",
            f"The GPU driver reported a hardware XID in the last {XID_WINDOW}; drain the node"
            " and check the GPU.",
        ),
        _alert(
            "GpuTemperatureHigh",
            f"max by (node, gpu) (DCGM_FI_DEV_GPU_TEMP) > {t.gpu_temp_celsius:g}",
            "warning",
            "GPU {{ $labels.gpu }} of node {{ $labels.node }} is hot",
            f"GPU temperature above {t.gpu_temp_celsius:g} C for {t.gpu_temp_for}: clocks throttle.",
            t.gpu_temp_for,
        ),
    ]
    training = [
        _alert(
            "TrainingThroughputDropped",
            f"max by (training_job) (avg_over_time({tps}[5m])) < {t.throughput_drop_ratio:g} * "
            f"max by (training_job) (avg_over_time({tps}[{t.throughput_baseline}] offset 5m))",
            "warning",
            "Training job {{ $labels.training_job }} slowed down",
            f"tokens/s over the last 5m is below {t.throughput_drop_ratio:g} x its average over "
            f"the {t.throughput_baseline} before.",
            t.throughput_for,
        ),
        _alert(
            "TrainingStalled",
            f"max by (training_job) (changes(eksfsdp_step[{t.stall_window}])) == 0 "
            "and max by (training_job) (eksfsdp_step)",
            "critical",
            "Training job {{ $labels.training_job }} makes no progress",
            f"The step counter has not moved for {t.stall_window} while the job is still scraped.",
            t.stall_for,
        ),
        _alert(
            "TrainingTargetDown",
            f'up{{job="{TRAINING_SCRAPE_JOB}"}} == 0',
            "warning",
            "Metrics of training pod {{ $labels.pod }} are unreachable",
            "The pod is running but its exporter does not answer.",
            t.target_down_for,
        ),
        _alert(
            "TrainingRestarted",
            "max by (training_job) (max_over_time(eksfsdp_elastic_restarts[15m])) > "
            "min by (training_job) (min_over_time(eksfsdp_elastic_restarts[15m]))",
            "info",
            "Training job {{ $labels.training_job }} restarted its workers",
            "torchrun restarted the worker group in the last 15 minutes (a failure or a "
            "membership change).",
        ),
    ]
    nodes = [
        _alert(
            "NodeConditionUnhealthy",
            node_condition_expr(),
            "critical",
            "Node {{ $labels.node }}: {{ $labels.condition }} is False",
            "The EKS node monitoring agent reports a fault (GPU/XID, network, kernel, storage or"
            " container runtime); node auto repair reboots or replaces the node if it stays"
            " (10 min for AcceleratedHardwareReady). Pods on it may be stuck or slow.",
            NODE_CONDITION_FOR,
        ),
    ]
    return [
        {"name": "eksfsdp-gpu", "rules": gpu},
        {"name": "eksfsdp-training", "rules": training},
        {"name": "eksfsdp-node", "rules": nodes},
    ]


ALERT_NAMES: tuple[str, ...] = tuple(r["alert"] for g in rule_groups() for r in g["rules"])


def prometheus_config(
    scrape_configs: list[dict[str, Any]],
    *,
    scrape_interval: str = "15s",
    evaluation_interval: str | None = None,
    rule_files: Sequence[str] = (RULES_FILE,),
) -> dict[str, Any]:
    """A complete ``prometheus.yml`` for the given scrape jobs."""
    return {
        "global": {
            "scrape_interval": scrape_interval,
            "evaluation_interval": evaluation_interval or scrape_interval,
        },
        "rule_files": list(rule_files),
        "scrape_configs": scrape_configs,
    }


def _render(template: str, labels: Mapping[str, str], value: str) -> str:
    out = template.replace("{{ $value }}", value)
    return re.sub(r"\{\{ \$labels\.(\w+) \}\}", lambda m: labels.get(m.group(1), ""), out)


def _expected(
    alert: str, labels: dict[str, str], value: str, thresholds: AlertThresholds
) -> dict[str, Any]:
    rule = next(r for g in rule_groups(thresholds) for r in g["rules"] if r["alert"] == alert)
    return {
        "exp_labels": {**labels, **rule["labels"]},
        "exp_annotations": {k: _render(v, labels, value) for k, v in rule["annotations"].items()},
    }


def rule_tests(thresholds: AlertThresholds | None = None) -> dict[str, Any]:
    """``promtool test rules`` cases: each alert fires on a bad series and not on a healthy one.

    Written for the default thresholds' windows; the temperature threshold is read from
    ``thresholds``.
    """
    t = thresholds or AlertThresholds()
    hot = t.gpu_temp_celsius + 5
    cool = t.gpu_temp_celsius - 20
    n1 = {"node": "n1", "gpu": "0"}
    job = {"training_job": "llama"}
    pod = {"training_job": "llama", "pod": "llama-worker-0", "node": "n1", "namespace": "ml"}

    def tps(pod_name: str) -> str:
        return f'eksfsdp_tokens_per_second{{training_job="llama",pod="{pod_name}",rank="0"}}'

    def alert(at: str, name: str, *exp: dict[str, Any]) -> dict[str, Any]:
        return {"eval_time": at, "alertname": name, "exp_alerts": list(exp)}

    return {
        "rule_files": [RULES_FILE],
        "evaluation_interval": "1m",
        "tests": [
            {  # XID: n1 reports hardware XID 79 at minute 3 (and keeps holding it: the field is
                # the last XID); n2 an application XID 13; n3 holds 79 from before the exporter
                # started; n4 a benign 63 (row remapped). Only n1 fires, and only for the
                # window after its XID.
                "interval": "1m",
                "input_series": [
                    {
                        "series": 'DCGM_FI_DEV_XID_ERRORS{node="n1",gpu="0",Hostname="n1"}',
                        "values": "0 0 0 79x40",
                    },
                    {
                        "series": 'DCGM_FI_DEV_XID_ERRORS{node="n2",gpu="3",Hostname="n2"}',
                        "values": "0 0 0 13x40",
                    },
                    {
                        "series": 'DCGM_FI_DEV_XID_ERRORS{node="n3",gpu="1",Hostname="n3"}',
                        "values": "79x43",
                    },
                    {
                        "series": 'DCGM_FI_DEV_XID_ERRORS{node="n4",gpu="2",Hostname="n4"}',
                        "values": "0 0 0 63x40",
                    },
                ],
                "alert_rule_test": [
                    alert("2m", "GpuXidError"),
                    alert("4m", "GpuXidError", _expected("GpuXidError", n1, "79", t)),
                    alert("30m", "GpuXidError"),  # cleared: the XID did not latch
                ],
            },
            {  # Temperature: n1 hot for 10 minutes, n2 cool throughout.
                "interval": "1m",
                "input_series": [
                    {
                        "series": 'DCGM_FI_DEV_GPU_TEMP{node="n1",gpu="0"}',
                        "values": f"{cool:g}x2 {hot:g}x10",
                    },
                    {
                        "series": 'DCGM_FI_DEV_GPU_TEMP{node="n2",gpu="3"}',
                        "values": f"{cool:g}x12",
                    },
                ],
                "alert_rule_test": [
                    alert("4m", "GpuTemperatureHigh"),  # hot, but not for 5m yet
                    alert("10m", "GpuTemperatureHigh", _expected("GpuTemperatureHigh", n1, "", t)),
                ],
            },
            {  # Throughput: steady 1000 tokens/s for 60m, then 300 tokens/s.
                "interval": "1m",
                "input_series": [
                    {"series": tps("llama-worker-0"), "values": "1000x60 300x20"},
                    {"series": tps("llama-worker-1"), "values": "1000x60 300x20"},
                    # A healthy job next to it: small jitter, never fires.
                    {
                        "series": 'eksfsdp_tokens_per_second{training_job="ok",pod="ok-worker-0"}',
                        "values": "1000 990 1010 1000 995 1005 " * 13,
                    },
                ],
                "alert_rule_test": [
                    alert("59m", "TrainingThroughputDropped"),
                    alert(
                        "72m",
                        "TrainingThroughputDropped",
                        _expected("TrainingThroughputDropped", job, "", t),
                    ),
                ],
            },
            {  # Stall: the step counter advances for 20m, then freezes while still scraped.
                "interval": "1m",
                "input_series": [
                    {
                        "series": 'eksfsdp_step{training_job="llama",pod="llama-worker-0"}',
                        "values": "1+1x20 21x30",
                    },
                    {
                        "series": 'eksfsdp_step{training_job="ok",pod="ok-worker-0"}',
                        "values": "1+1x50",
                    },
                    # A job that finished: its series ends (stale) and must not alert.
                    {
                        "series": 'eksfsdp_step{training_job="done",pod="done-worker-0"}',
                        "values": "1+1x10 stale",
                    },
                ],
                "alert_rule_test": [
                    alert("25m", "TrainingStalled"),
                    alert("40m", "TrainingStalled", _expected("TrainingStalled", job, "", t)),
                ],
            },
            {  # Target down: the exporter stops answering at minute 5.
                "interval": "1m",
                "input_series": [
                    {
                        "series": f'up{{job="{TRAINING_SCRAPE_JOB}",training_job="llama",'
                        'pod="llama-worker-0",node="n1",namespace="ml"}',
                        "values": "1x4 0x10",
                    },
                    {
                        "series": f'up{{job="{TRAINING_SCRAPE_JOB}",training_job="llama",'
                        'pod="llama-worker-1",node="n2",namespace="ml"}',
                        "values": "1x14",
                    },
                ],
                "alert_rule_test": [
                    alert("7m", "TrainingTargetDown"),
                    alert(
                        "12m",
                        "TrainingTargetDown",
                        _expected("TrainingTargetDown", {**pod, "job": TRAINING_SCRAPE_JOB}, "", t),
                    ),
                ],
            },
            {  # Restart: restart count goes 0 -> 1 at minute 10 (with a new rank label).
                "interval": "1m",
                "input_series": [
                    {
                        "series": 'eksfsdp_elastic_restarts{training_job="llama",rank="0"}',
                        "values": "0x9 stale",
                    },
                    {
                        "series": 'eksfsdp_elastic_restarts{training_job="llama",rank="1"}',
                        "values": "_x10 1x30",
                    },
                    {
                        "series": 'eksfsdp_elastic_restarts{training_job="ok",rank="0"}',
                        "values": "0x40",
                    },
                ],
                "alert_rule_test": [
                    alert("8m", "TrainingRestarted"),
                    alert("12m", "TrainingRestarted", _expected("TrainingRestarted", job, "", t)),
                    alert("35m", "TrainingRestarted"),  # the restart left the 15m window
                ],
            },
            {  # Node conditions: n1's GPU goes bad at minute 3 (False = 1) and is repaired at
                # minute 20; n2 stays healthy; n3's NetworkingReady is Unknown (agent starting),
                # which is not a fault. Only n1 fires, after 5m, and clears once repaired.
                "interval": "1m",
                "input_series": [
                    {
                        "series": 'kube_node_status_condition{node="n1",'
                        'condition="AcceleratedHardwareReady",status="false"}',
                        "values": "0 0 0 1x16 0x20",
                    },
                    {
                        "series": 'kube_node_status_condition{node="n2",'
                        'condition="AcceleratedHardwareReady",status="false"}',
                        "values": "0x40",
                    },
                    {
                        "series": 'kube_node_status_condition{node="n3",'
                        'condition="NetworkingReady",status="unknown"}',
                        "values": "1x40",
                    },
                ],
                "alert_rule_test": [
                    alert("6m", "NodeConditionUnhealthy"),  # pending: not for 5m yet
                    alert(
                        "10m",
                        "NodeConditionUnhealthy",
                        _expected(
                            "NodeConditionUnhealthy",
                            {"node": "n1", "condition": "AcceleratedHardwareReady"},
                            "",
                            t,
                        ),
                    ),
                    alert("30m", "NodeConditionUnhealthy"),  # repaired
                ],
            },
        ],
    }


@dataclass(frozen=True)
class PrometheusFiles:
    """Paths of the files written by :func:`write_prometheus_files`."""

    config: Path
    rules: Path
    rule_tests: Path
    extra: dict[str, Path] = field(default_factory=dict)


def dump_yaml(obj: Any) -> str:
    """YAML text with keys in insertion order."""
    return yaml.safe_dump(obj, sort_keys=False, default_flow_style=False, width=100)


def write_prometheus_files(
    out_dir: str | Path,
    scrape_configs: list[dict[str, Any]],
    *,
    scrape_interval: str = "15s",
    thresholds: AlertThresholds | None = None,
) -> PrometheusFiles:
    """Write ``prometheus.yml``, ``rules.yml`` and ``rules_test.yml`` into ``out_dir``."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    files = PrometheusFiles(out / CONFIG_FILE, out / RULES_FILE, out / RULE_TESTS_FILE)
    files.config.write_text(
        dump_yaml(prometheus_config(scrape_configs, scrape_interval=scrape_interval))
    )
    files.rules.write_text(dump_yaml({"groups": rule_groups(thresholds)}))
    files.rule_tests.write_text(dump_yaml(rule_tests(thresholds)))
    return files
