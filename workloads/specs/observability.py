"""The observability stack as data: Helm values, the Grafana Secret and dashboard ConfigMap.

- dcgm-exporter (NVIDIA's chart): a DaemonSet on GPU nodes only, serving DCGM metrics on 9400.
  Its own ServiceMonitor is off: our scrape job (``prometheus_files.kubernetes_scrape_configs``)
  finds the pods and labels them with ``node``, exactly as the local Prometheus does.
- kube-prometheus-stack: Prometheus (with our scrape jobs as ``additionalScrapeConfigs`` and our
  alert rules as ``additionalPrometheusRulesMap``), Alertmanager and Grafana, all ClusterIP.
  Grafana's admin user comes from a Secret we create (``grafana.admin.existingSecret``) and its
  dashboard sidecar loads every ConfigMap labelled ``grafana_dashboard: "1"``.
- Training pods are scraped through annotations (``training_pod_annotations``): no PodMonitor CRD
  is needed, and the same relabel rules run in the local Prometheus.

Pure data, no pulumi import. Versions live in ``infra/versions.py``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from infra import versions
from workloads.specs.dashboard import DASHBOARD_UID, dashboard_json
from workloads.specs.prometheus_files import (
    ANNOTATION_PATH,
    ANNOTATION_PORT,
    ANNOTATION_SCRAPE,
    DCGM_PORT,
    TRAINING_METRICS_PORT,
    AlertThresholds,
    kubernetes_scrape_configs,
    rule_groups,
    training_pod_annotations,
)

__all__ = [
    "ANNOTATION_PATH",
    "ANNOTATION_PORT",
    "ANNOTATION_SCRAPE",
    "DASHBOARD_LABEL",
    "TRAINING_METRICS_PORT",
    "ObservabilitySettings",
    "alertmanager_config",
    "alerts_secret",
    "dashboard_configmap",
    "dcgm_exporter_values",
    "grafana_admin_secret",
    "kube_prometheus_stack_values",
    "namespace",
    "port_forward_commands",
    "storage_class",
    "training_pod_annotations",
]

DASHBOARD_LABEL = {"grafana_dashboard": "1"}
"""Label the Grafana sidecar watches for dashboard ConfigMaps."""
GRAFANA_USER_KEY = "admin-user"
GRAFANA_PASSWORD_KEY = "admin-password"
GRAFANA_LOCAL_PORT = 3000
PROMETHEUS_LOCAL_PORT = 9090
ALERT_RECEIVERS = ("none", "slack", "pagerduty", "webhook", "sns")
"""``infra.config.observability.ALERT_RECEIVERS`` (a test keeps them equal)."""
SECRET_RECEIVERS = ("slack", "pagerduty", "webhook")
"""The receivers that read ``alertsSecret`` from the mounted Secret (``sns`` signs with the
pod's AWS credentials instead)."""
ALERTS_SECRET_KEY = "receiver"
"""Key of the alert receiver's URL (Slack, webhook) or routing key (PagerDuty) in its Secret."""
ALERTMANAGER_SECRETS_DIR = "/etc/alertmanager/secrets"
"""Where the operator mounts each Secret named in ``alertmanagerSpec.secrets``:
``<dir>/<secret>/<key>`` (prometheus-operator API, AlertmanagerSpec.secrets)."""
SNS_SUBJECT_MAX_CHARS = 99
"""SNS refuses a Publish whose Subject is 100 characters or more, or holds a line break or a
control character (SNS API reference, Publish, ``Subject``), and Alertmanager v0.28.1 neither
shortens it (``notify/sns/sns.go`` sets ``tmpl(Subject)`` as is) nor keeps the default short
(``sns.default.subject`` is ``__subject``: every common label value; prometheus/alertmanager
issue 2781)."""
SNS_SUBJECT = (
    '{{ $firing := "" }}{{ if eq .Status "firing" }}'
    '{{ $firing = printf ":%d" (len .Alerts.Firing) }}{{ end }}'
    '{{ printf "[%s%s] %s" (toUpper .Status) $firing (.GroupLabels.SortedPairs.Values | join " ")'
    ' | reReplaceAll "[^ -~]+" ""'
    f' | reReplaceAll "^(.{{0,{SNS_SUBJECT_MAX_CHARS}}}).*$" "$1" }}}}'
)
"""The SNS receiver's subject: ``[FIRING:2] <alertname> <node>`` (the route's group labels),
printable ASCII only, cut at ``SNS_SUBJECT_MAX_CHARS``. ``toUpper``, ``join`` and
``reReplaceAll`` (pattern, replacement, text) are Alertmanager's template functions
(``template/template.go`` at v0.28.1)."""
SNS_MESSAGE = '{{ template "__text_alert_list" .Alerts }}'
"""The SNS receiver's message: each alert's labels, annotations and source
(``template/default.tmpl`` at v0.28.1); the default ``sns.default.message`` is the common
annotations alone, empty when the alerts of a group share none."""
POD_IDENTITY_ANNOTATION = {"eks-fsdp/pod-identity": "alertmanager-sns"}
"""On the Alertmanager pods of an ``sns`` receiver: they are recreated, with the Pod Identity
credentials, when a running stack switches to ``sns`` (``_alertmanager_values``)."""
GPU_TAINT_KEY = "nvidia.com/gpu"
GPU_PRESENT_LABEL = "nvidia.com/gpu.present"
"""Node label the GPU nodegroups carry (``infra.config.nodegroups.GPU_PRESENT_LABEL``; a test pins it)."""

_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")


@dataclass(frozen=True, kw_only=True)
class ObservabilitySettings:
    """What the observability stack looks like in one cluster."""

    namespace: str = "monitoring"
    """Namespace of Prometheus, Grafana, dcgm-exporter and the dashboard ConfigMap."""
    dcgm: bool = True
    """Install dcgm-exporter on the GPU nodes (off for clusters without GPUs)."""
    release: str = "kps"
    """Helm release name and fullname of kube-prometheus-stack (services: kps-prometheus, ...)."""
    grafana_admin_user: str = "admin"
    """Grafana admin login (the password comes from the ``grafanaAdminPassword`` secret)."""
    grafana_admin_secret: str = "grafana-admin"
    """Name of the Secret holding the Grafana admin credentials."""
    scrape_interval: str = "15s"
    """Prometheus scrape and rule evaluation interval."""
    retention: str = "15d"
    """How long Prometheus keeps samples."""
    retention_size: str | None = None
    """Most bytes Prometheus keeps (``retentionSize``); None = 80% of its claim, so that the
    TSDB deletes old blocks before the volume fills (the WAL and compaction need the rest)."""
    alert_receiver: str = "none"
    """Where Alertmanager sends alerts: none | slack | pagerduty | webhook | sns
    (``ALERT_RECEIVERS``)."""
    slack_channel: str | None = None
    """Slack channel override of the incoming webhook (receiver slack)."""
    sns_topic_arn: str | None = None
    """The SNS topic Alertmanager publishes to (receiver sns; validated by ``infra.config``)."""
    sns_region: str | None = None
    """The topic's region, which Alertmanager signs its requests for (receiver sns)."""
    alerts_secret: str = "alertmanager-receiver"
    """Name of the Secret holding the receiver's URL or key (``alertsSecret``), mounted into
    Alertmanager and read through ``*_file``: the Helm values carry no secret."""
    prometheus_storage_gib: int = 50
    """Size of Prometheus' PersistentVolumeClaim (gp3): its data outlives the pod. 15 days of a
    16-node job's DCGM and training series take a few GiB; the rest is headroom."""
    storage_class: str = "eks-fsdp-gp3"
    """The StorageClass of the claim (``storage_class``: EBS CSI, gp3, encrypted)."""
    gpu_tolerations: tuple[dict[str, str], ...] = (
        {"key": GPU_TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"},
    )
    """Tolerations for the GPU nodegroups' taints (one per distinct taint)."""
    thresholds: AlertThresholds = field(default_factory=AlertThresholds)
    """Alert thresholds."""

    def __post_init__(self) -> None:
        if self.prometheus_storage_gib < 1:
            raise ValueError(
                f"observability.prometheus_storage_gib {self.prometheus_storage_gib} is below 1"
            )
        if self.alert_receiver not in ALERT_RECEIVERS:
            raise ValueError(
                f"observability.alert_receiver {self.alert_receiver!r} is not one of "
                f"{', '.join(ALERT_RECEIVERS)}"
            )
        if (self.alert_receiver == "sns") != (self.sns_topic_arn is not None):
            raise ValueError(
                "observability.sns_topic_arn is required by receiver sns and only by it"
                f" (receiver {self.alert_receiver})"
            )
        if self.sns_topic_arn is not None and self.sns_region is None:
            raise ValueError("observability.sns_region is required with sns_topic_arn")
        if self.retention_size is not None and not re.fullmatch(
            r"[1-9]\d*(B|KB|MB|GB|TB|PB)", self.retention_size
        ):
            raise ValueError(
                f"observability.retention_size {self.retention_size!r} is not like 40GB"
            )
        for name in (
            "namespace",
            "release",
            "grafana_admin_secret",
            "storage_class",
            "alerts_secret",
        ):
            value = getattr(self, name)
            if not _DNS_LABEL.fullmatch(value) or len(value) > 40:
                raise ValueError(f"observability.{name} {value!r} is not a DNS label (<= 40 chars)")
        if not re.fullmatch(r"\d+[smh]", self.scrape_interval):
            raise ValueError(
                f"observability.scrape_interval {self.scrape_interval!r} is not like 15s"
            )
        if not re.fullmatch(r"\d+[smhdwy]", self.retention):
            raise ValueError(f"observability.retention {self.retention!r} is not like 15d")
        if self.dcgm and not self.gpu_tolerations:
            raise ValueError("observability.gpu_tolerations is empty but dcgm is on")

    @property
    def prometheus_retention_size(self) -> str:
        """``retention_size``, else 80% of the claim in whole GB (Prometheus' GB is GiB)."""
        return self.retention_size or f"{self.prometheus_storage_gib * 8 // 10}GB"

    @property
    def alertmanager_service_account(self) -> str:
        """The Alertmanager pods' ServiceAccount: the chart's own name for it, which the values
        also set explicitly for receiver sns (kube-prometheus-stack 75.15.1 ``_helpers.tpl``,
        ``kube-prometheus-stack.alertmanager.serviceAccountName``: the fullname, truncated to
        26 characters, plus ``-alertmanager``)."""
        return f"{self.release[:26].rstrip('-')}-alertmanager"

    @property
    def grafana_service(self) -> str:
        """Grafana's ClusterIP Service name."""
        return f"{self.release}-grafana"

    @property
    def prometheus_service(self) -> str:
        """Prometheus' ClusterIP Service name."""
        return f"{self.release}-prometheus"


def settings_from_stack(cfg: Any) -> ObservabilitySettings:
    """Settings for a stack config (``infra.config.StackConfig``): DCGM only where there are GPU
    nodegroups, tolerating each distinct GPU taint."""
    tolerations: list[dict[str, str]] = []
    for group in cfg.gpu_node_groups:
        toleration = group.taint.toleration()
        if toleration not in tolerations:
            tolerations.append(toleration)
    o = cfg.observability
    alerts = getattr(o, "alerts", None)
    return ObservabilitySettings(
        dcgm=o.dcgm and bool(cfg.gpu_node_groups),
        gpu_tolerations=tuple(tolerations) or ObservabilitySettings().gpu_tolerations,
        retention=getattr(o, "retention", "15d"),
        retention_size=getattr(o, "retention_size", None),
        alert_receiver=getattr(alerts, "receiver", "none"),
        slack_channel=getattr(alerts, "slack_channel", None),
        sns_topic_arn=getattr(alerts, "sns_topic_arn", None),
        sns_region=getattr(alerts, "sns_region", None),
    )


def namespace(s: ObservabilitySettings) -> dict[str, Any]:
    """The monitoring Namespace."""
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": s.namespace}}


def grafana_admin_secret(s: ObservabilitySettings, password: Any) -> dict[str, Any]:
    """The Secret Grafana reads its admin credentials from.

    ``password`` is a string, or a Pulumi secret Output when the component builds it; the
    renderer passes a placeholder so no password is ever written to disk.
    """
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": s.grafana_admin_secret, "namespace": s.namespace},
        "type": "Opaque",
        "stringData": {GRAFANA_USER_KEY: s.grafana_admin_user, GRAFANA_PASSWORD_KEY: password},
    }


def alerts_secret(s: ObservabilitySettings, value: Any) -> dict[str, Any]:
    """The Secret Alertmanager reads the receiver's URL or routing key from (``alertsSecret``).

    ``value``: a string, or a Pulumi secret Output when the component builds it (as for
    ``grafana_admin_secret``); never rendered to disk.
    """
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": s.alerts_secret, "namespace": s.namespace},
        "type": "Opaque",
        "stringData": {ALERTS_SECRET_KEY: value},
    }


def alertmanager_config(s: ObservabilitySettings) -> dict[str, Any] | None:
    """Alertmanager's configuration (route and receivers) for ``s.alert_receiver``; None for
    ``none`` (the chart's own default config: alerts visible in the UI only).

    The receiver reads its URL or key from the mounted Secret (``*_file`` fields, Alertmanager
    ``config/notifiers.go`` at v0.28.1: SlackConfig.api_url_file, PagerdutyConfig.routing_key_file,
    WebhookConfig.url_file), so neither the values nor the Helm release hold it. ``sns``
    publishes to ``topic_arn`` with ``sigv4.region`` and no keys: Alertmanager then builds its
    AWS session from the default credential chain (``notify/sns/sns.go``, ``createSNSClient``:
    static credentials only when ``sigv4.access_key`` is set; aws-sdk-go v1.55.5, whose
    container provider reads the EKS Pod Identity token the webhook injects). The chart's
    ``Watchdog`` alert (always firing, a dead-man's switch) and ``InfoInhibitor`` go to a
    receiver with no integration, as the chart's default config routes them.
    """
    if s.alert_receiver == "none":
        return None
    path = f"{ALERTMANAGER_SECRETS_DIR}/{s.alerts_secret}/{ALERTS_SECRET_KEY}"
    integration: dict[str, Any]
    if s.alert_receiver == "slack":
        slack: dict[str, Any] = {"api_url_file": path, "send_resolved": True}
        if s.slack_channel:
            slack["channel"] = s.slack_channel
        integration = {"slack_configs": [slack]}
    elif s.alert_receiver == "pagerduty":
        integration = {"pagerduty_configs": [{"routing_key_file": path, "send_resolved": True}]}
    elif s.alert_receiver == "webhook":
        integration = {"webhook_configs": [{"url_file": path, "send_resolved": True}]}
    else:
        sns = {
            "topic_arn": s.sns_topic_arn,
            "sigv4": {"region": s.sns_region},
            "subject": SNS_SUBJECT,
            "message": SNS_MESSAGE,
        }
        integration = {"sns_configs": [{**sns, "send_resolved": True}]}
    return {
        "route": {
            "receiver": s.alert_receiver,
            "group_by": ["alertname", "node"],
            "group_wait": "30s",
            "group_interval": "5m",
            "repeat_interval": "4h",
            "routes": [
                {
                    "receiver": "null",
                    "matchers": ['alertname =~ "Watchdog|InfoInhibitor"'],
                }
            ],
        },
        "receivers": [{"name": "null"}, {"name": s.alert_receiver, **integration}],
    }


def storage_class(s: ObservabilitySettings) -> dict[str, Any]:
    """The gp3 StorageClass of Prometheus' claim (EBS CSI driver, the cluster's add-on).

    EKS clusters created on Kubernetes 1.30 or later have no default StorageClass (EKS user
    guide, "Store Kubernetes volumes with Amazon EBS"), so the claim names this one. Parameters
    are the aws-ebs-csi-driver's (docs/parameters.md: ``type``, ``encrypted``);
    ``WaitForFirstConsumer`` creates the volume in the zone the pod is scheduled to."""
    return {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "StorageClass",
        "metadata": {"name": s.storage_class},
        "provisioner": "ebs.csi.aws.com",
        "parameters": {"type": "gp3", "encrypted": "true"},
        "reclaimPolicy": "Delete",
        "volumeBindingMode": "WaitForFirstConsumer",
        "allowVolumeExpansion": True,
    }


def dashboard_configmap(s: ObservabilitySettings) -> dict[str, Any]:
    """The dashboard as a ConfigMap the Grafana sidecar provisions (label grafana_dashboard=1)."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": f"{DASHBOARD_UID}-dashboard",
            "namespace": s.namespace,
            "labels": dict(DASHBOARD_LABEL),
        },
        "data": {f"{DASHBOARD_UID}.json": dashboard_json()},
    }


def dcgm_exporter_values(s: ObservabilitySettings) -> dict[str, Any]:
    """Values for NVIDIA's dcgm-exporter chart (a DaemonSet on the GPU nodes only)."""
    return {
        "image": {"tag": versions.DCGM_EXPORTER_IMAGE_TAG},
        "serviceMonitor": {"enabled": False},
        "service": {"enable": True, "type": "ClusterIP", "port": DCGM_PORT},
        "tolerations": [dict(t) for t in s.gpu_tolerations],
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {
                            "matchExpressions": [
                                {
                                    "key": GPU_PRESENT_LABEL,
                                    "operator": "In",
                                    "values": ["true"],
                                }
                            ]
                        }
                    ]
                }
            }
        },
        "resources": {
            "requests": {"cpu": "100m", "memory": "128Mi"},
            "limits": {"memory": "512Mi"},
        },
    }


def kube_prometheus_stack_values(s: ObservabilitySettings) -> dict[str, Any]:
    """Values for kube-prometheus-stack: our scrape jobs, rules, Grafana admin and dashboards."""
    return {
        "fullnameOverride": s.release,
        # EKS runs the control plane: these endpoints are not scrapeable from the cluster.
        "kubeControllerManager": {"enabled": False},
        "kubeScheduler": {"enabled": False},
        "kubeEtcd": {"enabled": False},
        "kubeProxy": {"enabled": False},
        "alertmanager": _alertmanager_values(s),
        "prometheus": {
            "service": {"type": "ClusterIP"},
            "prometheusSpec": {
                "scrapeInterval": s.scrape_interval,
                "evaluationInterval": s.scrape_interval,
                "retention": s.retention,
                "retentionSize": s.prometheus_retention_size,
                # On a claim, not the chart's emptyDir: the samples outlive the pod
                # (prometheus-operator PrometheusSpec.storage.volumeClaimTemplate).
                "storageSpec": {
                    "volumeClaimTemplate": {
                        "spec": {
                            "storageClassName": s.storage_class,
                            "accessModes": ["ReadWriteOnce"],
                            "resources": {"requests": {"storage": f"{s.prometheus_storage_gib}Gi"}},
                        }
                    }
                },
                "additionalScrapeConfigs": kubernetes_scrape_configs(dcgm=s.dcgm),
                # Pick up ServiceMonitors/PodMonitors/rules from any release, not only ours.
                "serviceMonitorSelectorNilUsesHelmValues": False,
                "podMonitorSelectorNilUsesHelmValues": False,
                "ruleSelectorNilUsesHelmValues": False,
            },
        },
        "additionalPrometheusRulesMap": {"eksfsdp": {"groups": rule_groups(s.thresholds)}},
        "grafana": {
            "fullnameOverride": s.grafana_service,
            "admin": {
                "existingSecret": s.grafana_admin_secret,
                "userKey": GRAFANA_USER_KEY,
                "passwordKey": GRAFANA_PASSWORD_KEY,
            },
            "service": {"type": "ClusterIP"},
            "sidecar": {
                "dashboards": {
                    "enabled": True,
                    "label": next(iter(DASHBOARD_LABEL)),
                    "labelValue": next(iter(DASHBOARD_LABEL.values())),
                    "searchNamespace": s.namespace,
                },
                "datasources": {"enabled": True, "defaultDatasourceEnabled": True},
            },
        },
    }


def _alertmanager_values(s: ObservabilitySettings) -> dict[str, Any]:
    """The chart's ``alertmanager`` values: our config and the mounted receiver Secret when a
    receiver reads one (chart values ``alertmanager.config``, ``alertmanagerSpec.secrets``);
    for ``sns``, the ServiceAccount named explicitly (``alertmanager.serviceAccount.name``),
    the one the Pod Identity association names, and ``POD_IDENTITY_ANNOTATION`` on the pods.

    EKS Pod Identity injects credentials when a pod is created (amazon-eks-pod-identity-webhook,
    a mutating admission webhook on pod CREATE), and switching a running stack to ``sns``
    otherwise changes only the config Secret: the annotation changes the StatefulSet's pod
    template, so the operator's pods are recreated once, after the association exists (the
    release waits for it). The chart passes ``alertmanagerSpec.podMetadata`` to the
    Alertmanager resource (kube-prometheus-stack 75.15.1
    ``templates/alertmanager/alertmanager.yaml``), whose operator propagates its labels and
    annotations to the pods (CRD ``alertmanagers.monitoring.coreos.com``, ``podMetadata``)."""
    values: dict[str, Any] = {"enabled": True, "service": {"type": "ClusterIP"}}
    config = alertmanager_config(s)
    if config is not None:
        values["config"] = config
    if s.alert_receiver in SECRET_RECEIVERS:
        values["alertmanagerSpec"] = {"secrets": [s.alerts_secret]}
    if s.alert_receiver == "sns":
        values["serviceAccount"] = {"create": True, "name": s.alertmanager_service_account}
        values["alertmanagerSpec"] = {
            "podMetadata": {"annotations": dict(POD_IDENTITY_ANNOTATION)},
        }
    return values


def port_forward_commands(s: ObservabilitySettings) -> dict[str, str]:
    """kubectl port-forward commands to reach the ClusterIP services from a laptop."""
    return {
        "grafana": (
            f"kubectl -n {s.namespace} port-forward svc/{s.grafana_service} "
            f"{GRAFANA_LOCAL_PORT}:80  # then http://localhost:{GRAFANA_LOCAL_PORT}"
            f"/d/{DASHBOARD_UID} as {s.grafana_admin_user}"
        ),
        "prometheus": (
            f"kubectl -n {s.namespace} port-forward svc/{s.prometheus_service} "
            f"{PROMETHEUS_LOCAL_PORT}:9090  # then http://localhost:{PROMETHEUS_LOCAL_PORT}"
        ),
    }
