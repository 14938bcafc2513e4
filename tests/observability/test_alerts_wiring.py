"""The alert receiver reaches Alertmanager from the stack config, end to end under mocks.

If these fail, ``alertsSecret`` would again be read by nobody (the receiver's URL or key set
with ``pulumi config set --secret`` never reaching the cluster: Alertmanager's ``*_file`` would
point at a file that does not exist and no alert would go out); or it would reach the cluster
in plain text (a non-secret Output, the Helm values); or a stack with a receiver and no secret
would deploy and stay silent instead of stopping with one line; or an SNS receiver would run
without the Alertmanager's Pod Identity role (Publish denied), with a role wider than its
topic, with a second ``eks-pod-identity-agent`` add-on (CreateAddon refuses a duplicate), or
with pods started before the association (no credentials injected).

Mocked: the Pulumi engine and the AWS and Kubernetes providers (``tests/pulumi_mocks.py``: no
CLI, no cloud, no cluster); the program is the real ``__main__.py`` for the p4de-odcr stack
(region us-east-1) with the observability block and secrets overridden.
"""

from __future__ import annotations

import json

import pytest
from pulumi.runtime import rpc

from infra.config import ConfigError
from infra.pod_identity import POD_ROLE_TYPE_TOKEN, SNS_PUBLISH_ACTION
from tests.pulumi_mocks import ProgramRun, RecordedResource, run_program
from workloads.observability import TYPE_TOKEN, ObservabilityArgs
from workloads.specs import observability as spec

STACK = "p4de-odcr"
REGION = "us-east-1"
BASE_SECRETS = {"grafanaAdminPassword": "pw-obs", "hfToken": "hf_x"}
RECEIVER_VALUE = "https://hooks.example.invalid/services/T0/B0/secret-token-42"
TOPIC = f"arn:aws:sns:{REGION}:123456789012:gpu-alerts"
RELEASE = "kubernetes:helm.sh/v3:Release"
SECRET = "kubernetes:core/v1:Secret"
ADDON = "aws:eks/addon:Addon"


def _observability(alerts: dict[str, str]) -> dict[str, object]:
    return {"enabled": True, "dcgm": True, "alerts": alerts}


def _run(alerts: dict[str, str], secrets: dict[str, str], **overrides: object) -> ProgramRun:
    return run_program(
        STACK,
        overrides={"observability": _observability(alerts), **overrides},
        secrets={**BASE_SECRETS, **secrets},
    )


def _monitoring_secrets(run: ProgramRun) -> list[str]:
    return [
        r.name for r in run.of_type(SECRET) if r.inputs["metadata"].get("namespace") == "monitoring"
    ]


def _kps(run: ProgramRun) -> RecordedResource:
    (kps,) = [r for r in run.of_type(RELEASE) if r.inputs.get("chart") == "kube-prometheus-stack"]
    return kps


@pytest.mark.parametrize("receiver", ["slack", "pagerduty", "webhook"])
def test_the_receiver_secret_reaches_the_cluster_as_a_secret(receiver: str) -> None:
    run = _run({"receiver": receiver}, {"alertsSecret": RECEIVER_VALUE})
    (comp,) = run.of_type(TYPE_TOKEN)
    (secret,) = [r for r in run.of_type(SECRET) if r.name == "observability-alerts-secret"]
    assert secret.parent == comp.urn
    assert secret.inputs["metadata"]["name"] == spec.ObservabilitySettings().alerts_secret
    assert secret.inputs["metadata"]["namespace"] == "monitoring"
    data = secret.inputs["stringData"]  # a secret envelope, not a plain map
    assert data[rpc._special_sig_key] == rpc._special_secret_sig
    assert data["value"] == {spec.ALERTS_SECRET_KEY: RECEIVER_VALUE}
    kps = _kps(run)
    # the release waits for the Secret and mounts it; the value itself is not in the values
    assert secret.urn in kps.dependencies
    am = kps.inputs["values"]["alertmanager"]
    assert am["alertmanagerSpec"]["secrets"] == [secret.inputs["metadata"]["name"]]
    path = f"{spec.ALERTMANAGER_SECRETS_DIR}/alertmanager-receiver/{spec.ALERTS_SECRET_KEY}"
    assert path in json.dumps(am["config"])
    assert "secret-token-42" not in json.dumps([r.inputs for r in run.resources if r != secret])


def test_no_receiver_no_secret_and_no_role() -> None:
    run = _run({"receiver": "none"}, {})
    assert _monitoring_secrets(run) == ["observability-grafana-admin"]
    assert run.of_type(POD_ROLE_TYPE_TOKEN) == []


@pytest.mark.parametrize("receiver", ["slack", "pagerduty", "webhook"])
def test_a_receiver_without_its_secret_is_one_line(receiver: str) -> None:
    with pytest.raises(ConfigError) as err:
        _run({"receiver": receiver}, {})
    message = str(err.value)
    assert message.startswith(
        f"eks-fsdp:alertsSecret: is required by observability.alerts.receiver {receiver}; run"
        " `pulumi config set --secret alertsSecret <"
    )
    assert "\n" not in message


def test_the_component_alone_refuses_a_receiver_without_its_secret() -> None:
    """The same guard where the component is built outside ``__main__.py``."""
    settings = spec.ObservabilitySettings(alert_receiver="pagerduty")
    with pytest.raises(ValueError, match=r"^alertsSecret: not set but receiver pagerduty"):
        ObservabilityArgs(settings=settings, grafana_admin_password="pw")
    assert ObservabilityArgs(settings=settings, grafana_admin_password="pw", alerts_secret="k")


def test_a_plaintext_receiver_secret_is_one_line() -> None:
    with pytest.raises(ConfigError) as err:
        _run({"receiver": "slack"}, {}, alertsSecret=RECEIVER_VALUE)
    message = str(err.value)
    assert message == (
        "eks-fsdp:alertsSecret: is set in plaintext; remove it and run"
        " `pulumi config set --secret alertsSecret ...`"
    )


def _sns_role(run: ProgramRun) -> RecordedResource:
    (role,) = run.of_type(POD_ROLE_TYPE_TOKEN)
    return role


@pytest.mark.parametrize("data_bucket", [True, False])
def test_sns_publishes_with_its_own_pod_identity_role(data_bucket: bool) -> None:
    overrides: dict[str, object] = {}
    if not data_bucket:
        overrides["dataBucket"] = {"enabled": False}
    run = _run({"receiver": "sns", "snsTopicArn": TOPIC}, {}, **overrides)
    comp = _sns_role(run)
    children = run.children_of(comp)
    (policy,) = [r for r in children if r.type == "aws:iam/rolePolicy:RolePolicy"]
    assert json.loads(policy.inputs["policy"])["Statement"] == [
        {
            "Sid": "PublishToTheAlertTopic",
            "Effect": "Allow",
            "Action": SNS_PUBLISH_ACTION,
            "Resource": TOPIC,
        }
    ]
    (role,) = [r for r in children if r.type == "aws:iam/role:Role"]
    trust = json.loads(role.inputs["assumeRolePolicy"])["Statement"]
    assert [s["Principal"] for s in trust] == [{"Service": "pods.eks.amazonaws.com"}]
    (assoc,) = [
        r for r in children if r.type == "aws:eks/podIdentityAssociation:PodIdentityAssociation"
    ]
    settings = spec.ObservabilitySettings()
    assert (assoc.inputs["namespace"], assoc.inputs["serviceAccount"]) == (
        settings.namespace,
        "kps-alertmanager",
    )
    # one Pod Identity agent in the cluster, in neither component, whoever needs it
    agents = [r for r in run.of_type(ADDON) if r.inputs["addonName"] == "eks-pod-identity-agent"]
    assert len(agents) == 1
    assert run.by_urn(agents[0].parent) is None
    assert agents[0].urn in assoc.dependencies
    kps = _kps(run)
    assert assoc.urn in kps.dependencies  # pods start after the association
    am = kps.inputs["values"]["alertmanager"]
    assert am["serviceAccount"] == {"create": True, "name": "kps-alertmanager"}
    # nothing to mount; the pod template changes, so pods started before the association go
    assert am["alertmanagerSpec"] == {
        "podMetadata": {"annotations": dict(spec.POD_IDENTITY_ANNOTATION)}
    }
    (ours,) = [r for r in am["config"]["receivers"] if r["name"] == "sns"]
    assert ours["sns_configs"] == [
        {
            "topic_arn": TOPIC,
            "sigv4": {"region": REGION},
            "subject": spec.SNS_SUBJECT,
            "message": spec.SNS_MESSAGE,
            "send_resolved": True,
        }
    ]
    assert _monitoring_secrets(run) == ["observability-grafana-admin"]
