"""Prometheus keeps its samples on a gp3 PersistentVolumeClaim, not on the pod's emptyDir.

If this fails, Prometheus would lose every sample (and the alert history) whenever its pod
moves, e.g. when the system node it runs on is replaced; or the claim would name a
StorageClass that does not exist (EKS clusters created on 1.30+ have no default one), leaving
Prometheus Pending; or the StorageClass would not be the EBS CSI driver's encrypted gp3.

The objects are validated against the Kubernetes OpenAPI schema of the cluster's minor
(kubernetes-validate, strict); the component runs under Pulumi's mocks (no engine, no cluster
here: ``tests/pulumi_mocks``).
"""

from __future__ import annotations

import json

import kubernetes_validate
import pytest

from infra import versions
from tests.pulumi_mocks import run_program
from workloads.specs import observability as obs

K8S = versions.KUBERNETES_VERSION + ".0"


def test_the_claim_names_the_gp3_class_the_stack_creates() -> None:
    s = obs.ObservabilitySettings(prometheus_storage_gib=80)
    sc = obs.storage_class(s)
    kubernetes_validate.validate(sc, K8S, strict=True)
    assert sc["provisioner"] == "ebs.csi.aws.com"
    assert sc["parameters"] == {"type": "gp3", "encrypted": "true"}
    assert sc["volumeBindingMode"] == "WaitForFirstConsumer"
    spec = obs.kube_prometheus_stack_values(s)["prometheus"]["prometheusSpec"]
    claim = spec["storageSpec"]["volumeClaimTemplate"]["spec"]
    assert claim["storageClassName"] == sc["metadata"]["name"]
    assert claim["resources"]["requests"]["storage"] == "80Gi"
    assert claim["accessModes"] == ["ReadWriteOnce"]
    assert spec["retention"] == s.retention
    # The template is a PVC spec: validate it as one.
    pvc = {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "x"}}
    kubernetes_validate.validate({**pvc, "spec": claim}, K8S, strict=True)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"prometheus_storage_gib": 0}, "observability.prometheus_storage_gib 0 is below 1"),
        ({"storage_class": "GP3"}, "observability.storage_class 'GP3' is not a DNS label"),
    ],
)
def test_bad_storage_settings_name_the_field(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        obs.ObservabilitySettings(**kwargs)


def test_the_stack_creates_the_class_before_the_release() -> None:
    run = run_program("p5-16", secrets={"grafanaAdminPassword": "pw", "hfToken": "hf"})
    (sc,) = run.of_type("kubernetes:storage.k8s.io/v1:StorageClass")
    expected = json.loads(json.dumps(obs.storage_class(obs.ObservabilitySettings())))
    assert sc.inputs["provisioner"] == expected["provisioner"]
    assert sc.inputs["parameters"] == expected["parameters"]
    assert sc.inputs["metadata"]["name"] == expected["metadata"]["name"]
    (kps,) = [
        r
        for r in run.of_type("kubernetes:helm.sh/v3:Release")
        if r.inputs["chart"] == versions.KUBE_PROMETHEUS_STACK_CHART
    ]
    assert sc.urn in kps.dependencies
    claim = kps.inputs["values"]["prometheus"]["prometheusSpec"]["storageSpec"]
    assert claim["volumeClaimTemplate"]["spec"]["storageClassName"] == expected["metadata"]["name"]
