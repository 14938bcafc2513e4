"""Helm values, Secret, ConfigMap and namespace of the observability stack are right.

If this fails, the cluster would install unpinned charts, dcgm-exporter would land on CPU nodes (or
none), Prometheus would not scrape training pods or load our alert rules, Grafana would not load the
dashboard or would use the chart's default password, or the objects would not be valid Kubernetes.
Pure data (kubernetes-validate strict, no API server).
"""

from __future__ import annotations

import json
import subprocess
import sys

import kubernetes_validate
import pytest

from infra import versions
from workloads.specs import observability as obs
from workloads.specs.prometheus_files import ALERT_NAMES, kubernetes_scrape_configs

K8S = versions.KUBERNETES_VERSION + ".0"


def test_objects_validate_strict() -> None:
    s = obs.ObservabilitySettings()
    for obj in (obs.namespace(s), obs.grafana_admin_secret(s, "pw"), obs.dashboard_configmap(s)):
        kubernetes_validate.validate(obj, K8S, strict=True)


def test_dashboard_configmap_label_and_json() -> None:
    s = obs.ObservabilitySettings(namespace="mon")
    cm = obs.dashboard_configmap(s)
    assert cm["metadata"]["labels"] == {"grafana_dashboard": "1"}
    assert cm["metadata"]["namespace"] == "mon"
    (payload,) = cm["data"].values()
    assert len([p for p in json.loads(payload)["panels"] if p["type"] != "row"]) == 12
    values = obs.kube_prometheus_stack_values(s)
    side = values["grafana"]["sidecar"]["dashboards"]
    assert (side["label"], side["labelValue"], side["searchNamespace"]) == (
        "grafana_dashboard",
        "1",
        "mon",
    )


def test_grafana_admin_from_secret_and_clusterip() -> None:
    s = obs.ObservabilitySettings(grafana_admin_user="ops")
    secret = obs.grafana_admin_secret(s, "s3cret")
    values = obs.kube_prometheus_stack_values(s)
    admin = values["grafana"]["admin"]
    assert admin["existingSecret"] == secret["metadata"]["name"] == "grafana-admin"
    assert secret["stringData"][admin["userKey"]] == "ops"
    assert secret["stringData"][admin["passwordKey"]] == "s3cret"
    assert "adminPassword" not in values["grafana"]  # never the chart's default password
    assert "s3cret" not in json.dumps(values)
    assert values["grafana"]["service"]["type"] == "ClusterIP"
    assert values["prometheus"]["service"]["type"] == "ClusterIP"
    assert values["grafana"]["fullnameOverride"] == s.grafana_service == "kps-grafana"
    assert values["fullnameOverride"] == "kps"
    cmds = obs.port_forward_commands(s)
    assert cmds["grafana"].startswith("kubectl -n monitoring port-forward svc/kps-grafana 3000:80")
    assert cmds["prometheus"].startswith(
        "kubectl -n monitoring port-forward svc/kps-prometheus 9090:9090"
    )


def test_prometheus_gets_our_scrape_jobs_and_rules() -> None:
    s = obs.ObservabilitySettings(scrape_interval="30s")
    spec = obs.kube_prometheus_stack_values(s)["prometheus"]["prometheusSpec"]
    assert spec["additionalScrapeConfigs"] == kubernetes_scrape_configs()
    assert spec["scrapeInterval"] == spec["evaluationInterval"] == "30s"
    groups = obs.kube_prometheus_stack_values(s)["additionalPrometheusRulesMap"]["eksfsdp"][
        "groups"
    ]
    assert tuple(r["alert"] for g in groups for r in g["rules"]) == ALERT_NAMES
    no_dcgm = obs.kube_prometheus_stack_values(obs.ObservabilitySettings(dcgm=False))
    jobs = [
        j["job_name"] for j in no_dcgm["prometheus"]["prometheusSpec"]["additionalScrapeConfigs"]
    ]
    assert jobs == ["eksfsdp-training"]


def test_dcgm_exporter_runs_on_gpu_nodes_only() -> None:
    s = obs.ObservabilitySettings()
    v = obs.dcgm_exporter_values(s)
    (term,) = v["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ]
    (expr,) = term["matchExpressions"]
    assert (expr["key"], expr["operator"], expr["values"]) == (
        "nvidia.com/gpu.present",
        "In",
        ["true"],
    )
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in v[
        "tolerations"
    ]
    assert v["serviceMonitor"] == {"enabled": False}  # our scrape job labels it instead
    assert v["image"]["tag"] == versions.DCGM_EXPORTER_IMAGE_TAG


def test_versions_pinned() -> None:
    for name in (
        "DCGM_EXPORTER_VERSION",
        "DCGM_EXPORTER_IMAGE_TAG",
        "KUBE_PROMETHEUS_STACK_VERSION",
    ):
        value = getattr(versions, name)
        assert value[0].isdigit() and "latest" not in value, name
    assert versions.DCGM_EXPORTER_REPO.startswith("https://")
    assert versions.KUBE_PROMETHEUS_STACK_REPO.startswith("https://")


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"namespace": "Monitoring"}, "observability.namespace 'Monitoring'"),
        ({"release": "a_b"}, "observability.release 'a_b'"),
        ({"scrape_interval": "15"}, "observability.scrape_interval '15'"),
        ({"retention": "forever"}, "observability.retention 'forever'"),
        ({"gpu_tolerations": ()}, "observability.gpu_tolerations is empty"),
    ],
)
def test_bad_settings_name_the_key(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=f"^{message}"):
        obs.ObservabilitySettings(**kwargs)


def test_specs_import_no_pulumi() -> None:
    code = (
        "import sys, workloads.specs.observability, workloads.specs.dashboard, "
        "workloads.specs.prometheus_files, localrun.prometheus; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('pulumi', 'torch')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
