"""Alertmanager sends the alerts somewhere a person reads, and Prometheus' retention is set.

If these fail, the XID, temperature and node-condition alerts would again fire into an
Alertmanager with no receiver (nobody told); or a receiver's URL or routing key would sit in
the Helm values (and so in the Helm release Secret and the rendered files) instead of a
mounted Secret read through ``*_file``; or a bad ``observability.alerts`` / ``retention``
value would not stop the stack with one line; or an SNS topic in another region (Alertmanager
signs for one region) or a malformed ARN would deploy and fail at the first alert; or an SNS
Subject of 100 characters or more (Alertmanager's default lists every common label value)
would make SNS refuse the Publish and the alert would be lost; or a stack switched to ``sns``
would keep Alertmanager pods started without Pod Identity credentials; or Prometheus would
fill its claim (no ``retentionSize``) and stop ingesting. ``amtool check-config`` and ``amtool
template render`` (Alertmanager's own parser and template engine, v0.28.1, built with ``go
install``; the ``*_file`` fields exist in Alertmanager since well before it) check each
configuration and the SNS subject and message when the binary is in the tools cache; those
tests are skipped with the reason otherwise.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from infra.config import ConfigError
from infra.config import observability as config_obs
from infra.config.sources import load_stack_file
from workloads.specs import observability as obs

AMTOOL_VERSION = "v0.28.1"
AMTOOL = Path.home() / ".cache" / "eks-fsdp" / "tools" / f"alertmanager-{AMTOOL_VERSION}" / "amtool"
SECRET_PATH = "/etc/alertmanager/secrets/alertmanager-receiver/receiver"


def _stack(**observability: object) -> obs.ObservabilitySettings:
    cfg = load_stack_file("p4de-odcr")
    parsed = config_obs._parse_observability({"enabled": True, **observability}, cfg.region)
    return obs.settings_from_stack(replace(cfg, observability=parsed))


def test_receiver_lists_agree() -> None:
    assert obs.ALERT_RECEIVERS == config_obs.ALERT_RECEIVERS
    assert tuple(config_obs.SECRET_RECEIVERS) == obs.SECRET_RECEIVERS


@pytest.mark.parametrize(
    ("receiver", "field", "key"),
    [
        ("slack", "slack_configs", "api_url_file"),
        ("pagerduty", "pagerduty_configs", "routing_key_file"),
        ("webhook", "webhook_configs", "url_file"),
    ],
)
def test_each_receiver_reads_its_secret_from_a_file(receiver: str, field: str, key: str) -> None:
    s = _stack(alerts={"receiver": receiver})
    values = obs.kube_prometheus_stack_values(s)
    am = values["alertmanager"]
    assert am["alertmanagerSpec"]["secrets"] == [s.alerts_secret]
    config = am["config"]
    assert config["route"]["receiver"] == receiver
    (ours,) = [r for r in config["receivers"] if r["name"] == receiver]
    assert ours[field] == [{key: SECRET_PATH, "send_resolved": True}]
    # the chart's always-firing Watchdog goes nowhere, as in its default config
    assert config["route"]["routes"][0]["receiver"] == "null"
    assert {"name": "null"} in config["receivers"]
    secret = obs.alerts_secret(s, "https://hooks.example.invalid/T000/B000/XXXX")
    assert secret["metadata"] == {"name": "alertmanager-receiver", "namespace": s.namespace}
    assert "hooks.example.invalid" not in yaml.safe_dump(values)


TOPIC = "arn:aws:sns:us-east-1:123456789012:gpu-alerts"


def test_sns_publishes_to_the_topic_in_its_region() -> None:
    s = _stack(alerts={"receiver": "sns", "snsTopicArn": TOPIC})
    am = obs.kube_prometheus_stack_values(s)["alertmanager"]
    (ours,) = [r for r in am["config"]["receivers"] if r["name"] == "sns"]
    assert ours["sns_configs"] == [
        {
            "topic_arn": TOPIC,
            "sigv4": {"region": "us-east-1"},
            "subject": obs.SNS_SUBJECT,
            "message": obs.SNS_MESSAGE,
            "send_resolved": True,
        }
    ]
    # the subject is cut below SNS's 100 characters and the message lists every alert
    assert 'reReplaceAll "^(.{0,99}).*$" "$1"' in ours["sns_configs"][0]["subject"]
    assert ours["sns_configs"][0]["message"] == '{{ template "__text_alert_list" .Alerts }}'
    assert am["serviceAccount"]["name"] == s.alertmanager_service_account == "kps-alertmanager"
    # the pods are recreated (and get the Pod Identity credentials) when a stack switches to
    # sns; nothing is mounted
    assert am["alertmanagerSpec"] == {
        "podMetadata": {"annotations": {"eks-fsdp/pod-identity": "alertmanager-sns"}}
    }
    for receiver in ("none", "slack", "pagerduty", "webhook"):
        alerts = {"receiver": receiver}
        other = obs.kube_prometheus_stack_values(_stack(alerts=alerts))["alertmanager"]
        assert "podMetadata" not in other.get("alertmanagerSpec", {}), receiver


def test_no_receiver_keeps_the_chart_default() -> None:
    am = obs.kube_prometheus_stack_values(_stack())["alertmanager"]
    assert am == {"enabled": True, "service": {"type": "ClusterIP"}}


def test_slack_channel_and_retention() -> None:
    s = _stack(
        alerts={"receiver": "slack", "slackChannel": "#gpu-alerts"},
        retention="30d",
        retentionSize="100GB",
    )
    values = obs.kube_prometheus_stack_values(s)
    slack = values["alertmanager"]["config"]["receivers"][1]["slack_configs"][0]
    assert slack["channel"] == "#gpu-alerts"
    spec = values["prometheus"]["prometheusSpec"]
    assert (spec["retention"], spec["retentionSize"]) == ("30d", "100GB")
    # default size: 80% of the 50 GiB claim, so the TSDB deletes blocks before the disk fills
    default = obs.kube_prometheus_stack_values(_stack())["prometheus"]["prometheusSpec"]
    assert (default["retention"], default["retentionSize"]) == ("15d", "40GB")
    claim = default["storageSpec"]["volumeClaimTemplate"]["spec"]["resources"]["requests"]
    assert claim["storage"] == "50Gi"


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (
            {"alerts": {"receiver": "email"}},
            "eks-fsdp:observability.alerts.receiver: ",
        ),
        (
            {"alerts": {"receiver": "webhook", "slackChannel": "#x"}},
            "eks-fsdp:observability.alerts.slackChannel: is for receiver slack, not webhook",
        ),
        ({"retention": "two weeks"}, "eks-fsdp:observability.retention: 'two weeks' is not like"),
        ({"retentionSize": "40G"}, "eks-fsdp:observability.retentionSize: '40G' is not like 40GB"),
        ({"alerts": {"to": "x"}}, "eks-fsdp:observability.alerts.to: unknown key"),
        (
            {"alerts": {"receiver": "sns"}},
            "eks-fsdp:observability.alerts.snsTopicArn: is required by receiver sns",
        ),
        (
            {"alerts": {"receiver": "sns", "snsTopicArn": "gpu-alerts"}},
            "eks-fsdp:observability.alerts.snsTopicArn: 'gpu-alerts' is not like arn:aws:sns:",
        ),
        (
            {"alerts": {"receiver": "sns", "snsTopicArn": TOPIC.replace(":1234", ":234")}},
            "eks-fsdp:observability.alerts.snsTopicArn: 'arn:aws:sns:us-east-1:23456789012:",
        ),
        (
            {"alerts": {"receiver": "sns", "snsTopicArn": TOPIC.replace("us-east-1", "eu-west-1")}},
            "eks-fsdp:observability.alerts.snsTopicArn: topic region eu-west-1 is not the"
            " stack's region us-east-1",
        ),
        (
            {"alerts": {"receiver": "slack", "snsTopicArn": TOPIC}},
            "eks-fsdp:observability.alerts.snsTopicArn: is for receiver sns, not slack",
        ),
    ],
)
def test_bad_values_are_one_line(value: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError) as err:
        config_obs._parse_observability(value, "us-east-1")
    assert str(err.value).startswith(message)
    assert "\n" not in str(err.value)


def test_sns_without_a_region_is_one_line() -> None:
    with pytest.raises(ConfigError) as err:
        config_obs._parse_observability({"alerts": {"receiver": "sns", "snsTopicArn": TOPIC}})
    assert str(err.value) == (
        "eks-fsdp:observability.alerts.snsTopicArn: needs aws:region set (the topic must be in"
        " the stack's region)"
    )


def _amtool() -> str:
    amtool = AMTOOL if AMTOOL.is_file() else shutil.which("amtool")
    if not amtool:
        pytest.skip(
            f"amtool {AMTOOL_VERSION} not built: go install "
            f"github.com/prometheus/alertmanager/cmd/amtool@{AMTOOL_VERSION} (GOBIN={AMTOOL.parent})"
        )
    return str(amtool)


def _alert(status: str, labels: dict[str, str]) -> dict[str, object]:
    return {
        "status": status,
        "labels": labels,
        "annotations": {"summary": f"{labels['alertname']} on {labels['node']}"},
        "startsAt": "2026-12-03T10:00:00Z",
        "endsAt": "0001-01-01T00:00:00Z",
        "generatorURL": "http://prometheus.invalid/graph",
        "fingerprint": labels["gpu"],
    }


def _render(amtool: str, tmp_path: Path, text: str, data: Mapping[str, object]) -> str:
    """Alertmanager's own template engine on ``data`` (template.Data, the JSON layout
    ``amtool template render --template.data`` reads); the default templates are always loaded,
    the glob adds none."""
    (tmp_path / "none.tmpl").write_text("")
    path = tmp_path / "data.json"
    path.write_text(json.dumps(data))
    done = subprocess.run(
        [
            amtool,
            "template",
            "render",
            f"--template.glob={tmp_path / 'none.tmpl'}",
            f"--template.text={text}",
            f"--template.data={path}",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


@pytest.mark.parametrize("status", ["firing", "resolved"])
def test_sns_subject_stays_under_snss_limit_whatever_the_labels(
    tmp_path: Path, status: str
) -> None:
    """A group whose labels are long, multi-line or non-ASCII still gets a Subject SNS accepts
    (SNS API reference, Publish: printable text, no line break, under 100 characters), and a
    short one gets its whole name; the message names every alert. Rendered by amtool v0.28.1."""
    amtool = _amtool()
    name = "GpuXidErrorOnANodeWhoseAlertNameIsFarLongerThanAnyoneWouldExpect"
    node = "ip-10-0-123-45.us-east-1.compute.internal\nsecond-line-\u00e9"
    alerts = [
        _alert(status, {"alertname": name, "node": node, "gpu": str(g), "xid": "79"})
        for g in range(2)
    ]
    group = {"alertname": name, "node": node}
    data: dict[str, object] = {
        "receiver": "sns",
        "status": status,
        "alerts": alerts,
        "groupLabels": group,
        "commonLabels": {**group, "xid": "79"},
        "commonAnnotations": {},
        "externalURL": "http://alertmanager.invalid",
    }
    subject = _render(amtool, tmp_path, obs.SNS_SUBJECT, data)
    prefix = "[FIRING:2] " if status == "firing" else "[RESOLVED] "
    whole = f"{prefix}{name} {node.replace(chr(10), '').replace(chr(233), '')}"
    assert len(whole) > obs.SNS_SUBJECT_MAX_CHARS
    assert subject == whole[: obs.SNS_SUBJECT_MAX_CHARS]
    assert len(subject) < 100 and subject.isascii() and subject.isprintable()
    short = {"alertname": "GpuTooHot", "node": "ip-10-0-1-2.ec2.internal", "gpu": "0"}
    grouped = {k: short[k] for k in ("alertname", "node")}
    data = {**data, "alerts": [_alert(status, short)], "groupLabels": grouped}
    subject = _render(amtool, tmp_path, obs.SNS_SUBJECT, data)
    one = "[FIRING:1] " if status == "firing" else "[RESOLVED] "
    assert subject == f"{one}GpuTooHot ip-10-0-1-2.ec2.internal"
    message = _render(amtool, tmp_path, obs.SNS_MESSAGE, {**data, "alerts": alerts})
    assert message.count("Labels:\n") == 2
    assert f" - alertname = {name}\n" in message
    assert " - summary = " in message and "Source: http://prometheus.invalid/graph" in message


@pytest.mark.parametrize("receiver", ["slack", "pagerduty", "webhook", "sns"])
def test_amtool_accepts_the_configuration(tmp_path: Path, receiver: str) -> None:
    amtool = _amtool()
    alerts = {"receiver": receiver, **({"snsTopicArn": TOPIC} if receiver == "sns" else {})}
    s = _stack(alerts=alerts)
    config = obs.alertmanager_config(s)
    assert config is not None
    # the chart merges our route and receivers into its default config; amtool reads the files
    secret = tmp_path / "receiver"
    secret.write_text("https://hooks.example.invalid/services/T0/B0/X\n")
    text = yaml.safe_dump(config).replace(SECRET_PATH, str(secret))
    path = tmp_path / "alertmanager.yaml"
    path.write_text(text)
    done = subprocess.run(
        [amtool, "check-config", str(path)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout
