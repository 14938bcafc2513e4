"""The observability section (``observability``): Prometheus/Grafana/DCGM switches, how long
Prometheus keeps its samples, and where Alertmanager sends the alerts."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from infra.config.fields import _bool, _check_keys, _choice, _fail, _mapping, _opt_str, _str

_OBSERVABILITY_KEYS = ("enabled", "dcgm", "retention", "retentionSize", "alerts")
_ALERTS_KEYS = ("receiver", "slackChannel")
ALERT_RECEIVERS = ("none", "slack", "pagerduty", "webhook")
"""Where Alertmanager sends the alerts: nowhere (the UI only), a Slack incoming webhook,
PagerDuty (Events API v2 routing key) or any webhook. The URL or key is the secret
``alertsSecret`` (never in a stack file): Alertmanager reads it from a mounted Secret
(``api_url_file`` / ``routing_key_file`` / ``url_file``; Alertmanager config/notifiers.go)."""
_DURATION = re.compile(r"^[1-9]\d*[smhdwy]$")
"""Prometheus' ``--storage.tsdb.retention.time`` units (a single unit here: ``15d``)."""
_SIZE = re.compile(r"^[1-9]\d*(B|KB|MB|GB|TB|PB)$")
"""Prometheus' ``--storage.tsdb.retention.size`` (base-2 units named KB, MB, GB...)."""


@dataclass(frozen=True, kw_only=True)
class AlertsConfig:
    """Where Alertmanager sends the alerts (``observability.alerts``)."""

    receiver: str = "none"
    """One of ``ALERT_RECEIVERS``; anything but ``none`` needs the ``alertsSecret`` secret."""
    slack_channel: str | None = None
    """Slack channel override (``#gpu-alerts``); None = the webhook's own channel."""


@dataclass(frozen=True, kw_only=True)
class ObservabilityConfig:
    """Prometheus/Grafana/DCGM switches (consumed by the observability workloads)."""

    enabled: bool = False
    """Deploy the observability stack."""
    dcgm: bool = True
    """Deploy the DCGM exporter on GPU nodes (only when ``enabled``)."""
    retention: str = "15d"
    """How long Prometheus keeps samples (``prometheusSpec.retention``)."""
    retention_size: str | None = None
    """Most bytes Prometheus keeps (``prometheusSpec.retentionSize``, e.g. ``40GB``); None =
    80% of its claim (``workloads.specs.observability``)."""
    alerts: AlertsConfig = field(default_factory=AlertsConfig)
    """Alertmanager's receiver."""


def _parse_alerts(value: Any, path: str) -> AlertsConfig:
    obj = _mapping(value if value is not None else {}, path)
    _check_keys(obj, _ALERTS_KEYS, path)
    receiver = _choice(obj.get("receiver", "none"), ALERT_RECEIVERS, f"{path}.receiver")
    channel = _opt_str(obj.get("slackChannel"), f"{path}.slackChannel")
    if channel is not None and receiver != "slack":
        raise _fail(f"{path}.slackChannel", f"is for receiver slack, not {receiver}")
    return AlertsConfig(receiver=receiver, slack_channel=channel)


def _parse_observability(value: Any) -> ObservabilityConfig:
    path = "observability"
    obj = _mapping(value if value is not None else {}, path)
    _check_keys(obj, _OBSERVABILITY_KEYS, path)
    retention = _str(obj.get("retention", "15d"), f"{path}.retention")
    if not _DURATION.match(retention):
        raise _fail(f"{path}.retention", f"{retention!r} is not like 15d (s m h d w y)")
    size = _opt_str(obj.get("retentionSize"), f"{path}.retentionSize")
    if size is not None and not _SIZE.match(size):
        raise _fail(f"{path}.retentionSize", f"{size!r} is not like 40GB (B KB MB GB TB)")
    return ObservabilityConfig(
        enabled=_bool(obj.get("enabled", False), f"{path}.enabled"),
        dcgm=_bool(obj.get("dcgm", True), f"{path}.dcgm"),
        retention=retention,
        retention_size=size,
        alerts=_parse_alerts(obj.get("alerts"), f"{path}.alerts"),
    )
