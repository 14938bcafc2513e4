"""The observability section (``observability``): Prometheus/Grafana/DCGM switches, how long
Prometheus keeps its samples, and where Alertmanager sends the alerts."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from infra.config.fields import _bool, _check_keys, _choice, _fail, _mapping, _opt_str, _str

_OBSERVABILITY_KEYS = ("enabled", "dcgm", "retention", "retentionSize", "alerts")
_ALERTS_KEYS = ("receiver", "slackChannel", "snsTopicArn")
ALERT_RECEIVERS = ("none", "slack", "pagerduty", "webhook", "sns")
"""Where Alertmanager sends the alerts: nowhere (the UI only), a Slack incoming webhook,
PagerDuty (Events API v2 routing key), any webhook, or an SNS topic. The URL or key is the
secret ``alertsSecret`` (never in a stack file): Alertmanager reads it from a mounted Secret
(``api_url_file`` / ``routing_key_file`` / ``url_file``; Alertmanager ``config/notifiers.go``
at v0.28.1). SNS needs no secret: Alertmanager publishes with its pod's AWS credentials (EKS
Pod Identity, ``infra.pod_identity.PodRole``)."""
SECRET_RECEIVERS: dict[str, str] = {
    "slack": "Slack incoming webhook URL",
    "pagerduty": "PagerDuty Events API v2 routing key",
    "webhook": "webhook URL",
}
"""The receivers that read ``alertsSecret``, and what it holds for each."""
_SNS_TOPIC_ARN = re.compile(
    r"^arn:(?P<partition>aws|aws-cn|aws-us-gov):sns:(?P<region>[a-z]{2}(-[a-z]+)+-\d):"
    r"(?P<account>\d{12}):(?P<name>[A-Za-z0-9_-]{1,256}(\.fifo)?)$"
)
"""An SNS topic ARN (``arn:aws:sns:<region>:<account>:<name>``; SNS API reference, CreateTopic:
names of 1-256 letters, digits, hyphens and underscores, ``.fifo`` for a FIFO topic)."""
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
    sns_topic_arn: str | None = None
    """The SNS topic of receiver ``sns`` (in the stack's region); None otherwise."""

    @property
    def sns_region(self) -> str | None:
        """The region of ``sns_topic_arn`` (None without one)."""
        match = _SNS_TOPIC_ARN.match(self.sns_topic_arn or "")
        return match["region"] if match else None


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


def _parse_sns_topic(value: Any, receiver: str, region: str | None, path: str) -> str | None:
    arn = _opt_str(value, path)
    if receiver != "sns":
        if arn is not None:
            raise _fail(path, f"is for receiver sns, not {receiver}")
        return None
    if arn is None:
        raise _fail(path, "is required by receiver sns (arn:aws:sns:<region>:<account>:<topic>)")
    match = _SNS_TOPIC_ARN.match(arn)
    if match is None:
        raise _fail(path, f"{arn!r} is not like arn:aws:sns:<region>:<account>:<topic>")
    if region is None:
        raise _fail(path, "needs aws:region set (the topic must be in the stack's region)")
    if match["region"] != region:
        raise _fail(path, f"topic region {match['region']} is not the stack's region {region}")
    return arn


def _parse_alerts(value: Any, path: str, region: str | None = None) -> AlertsConfig:
    obj = _mapping(value if value is not None else {}, path)
    _check_keys(obj, _ALERTS_KEYS, path)
    receiver = _choice(obj.get("receiver", "none"), ALERT_RECEIVERS, f"{path}.receiver")
    channel = _opt_str(obj.get("slackChannel"), f"{path}.slackChannel")
    if channel is not None and receiver != "slack":
        raise _fail(f"{path}.slackChannel", f"is for receiver slack, not {receiver}")
    topic = _parse_sns_topic(obj.get("snsTopicArn"), receiver, region, f"{path}.snsTopicArn")
    return AlertsConfig(receiver=receiver, slack_channel=channel, sns_topic_arn=topic)


def _parse_observability(value: Any, region: str | None = None) -> ObservabilityConfig:
    """The ``observability`` block; ``region`` is the stack's ``aws:region`` (an SNS topic
    must be in it: Alertmanager signs for one region, ``sns_configs[].sigv4.region``)."""
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
        alerts=_parse_alerts(obj.get("alerts"), f"{path}.alerts", region),
    )
