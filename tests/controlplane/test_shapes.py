"""The fake nodes, kwok stages and webhook configurations the control plane installs, as data.

If this fails, the fake nodes no longer look like the stacks' node groups (labels, taints,
GPUs, EFA), so a pod that schedules here might not on EKS (or the reverse), or a webhook
configuration names a Service, which would make the API server dial a cluster IP. No control
plane runs here.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from controlplane import cluster, nodes, operators
from controlplane.__main__ import all_stacks
from infra.config import load_stack_file
from infra.config.nodegroups import node_labels
from tests.controlplane.helpers import job_quota


@pytest.mark.parametrize("stack", all_stacks())
def test_gpu_nodes_carry_what_the_node_group_gives_them(stack: str) -> None:
    cfg = load_stack_file(stack)
    for group in cfg.gpu_node_groups:
        shape = nodes.gpu_shape(group)
        assert node_labels(group).items() <= shape.labels.items()
        assert shape.taints == (
            {"key": group.taint.key, "value": group.taint.value, "effect": group.taint.effect},
        )
        assert shape.capacity[nodes.GPU_RESOURCE] == str(group.instance.gpus)
        if group.efa:
            assert shape.capacity[nodes.EFA_RESOURCE] == str(group.instance.efa_interfaces)
        else:
            assert nodes.EFA_RESOURCE not in shape.capacity
        assert shape.count == min(group.max_size, nodes.MAX_NODES_PER_GROUP)
        (node, *_) = nodes.node_objects(shape)
        assert node["status"]["allocatable"] == node["status"]["capacity"] == shape.capacity
        assert node["metadata"]["annotations"] == {nodes.KWOK_NODE_ANNOTATION: "fake"}


def test_p5_nodes_have_8_gpus_and_32_efa_interfaces() -> None:
    shapes = {s.group: s for s in nodes.stack_shapes(["p5-16"])}
    p5 = shapes["p5-block"]
    assert p5.capacity[nodes.GPU_RESOURCE] == "8"
    assert p5.capacity[nodes.EFA_RESOURCE] == "32"
    assert p5.count == 16
    assert "system" in shapes


def test_kwok_config_holds_upstream_stages_then_ours(tmp_path: Path) -> None:
    stage = {"apiVersion": "kwok.x-k8s.io/v1alpha1", "kind": "Stage", "metadata": {"name": "x"}}
    (tmp_path / "x.yaml").write_text(yaml.safe_dump(stage))
    docs = list(yaml.safe_load_all(nodes.kwok_config([tmp_path / "x.yaml"])))
    assert [d["kind"] for d in docs] == ["Stage", "Stage"]
    ours = docs[-1]
    assert ours["metadata"]["name"] == nodes.POD_EXIT_STAGE
    keys = [e["key"] for e in ours["spec"]["selector"]["matchExpressions"]]
    assert f'.metadata.annotations["{nodes.EXIT_CODE_ANNOTATION}"]' in keys


def _webhook_manifest() -> list[dict]:
    hook = {
        "name": "validator.pytorchjob.training-operator.kubeflow.org",
        "admissionReviewVersions": ["v1"],
        "clientConfig": {
            "service": {
                "name": "webhook-service",
                "namespace": "system",
                "path": "/validate-kubeflow-org-v1-pytorchjob",
            }
        },
        "rules": [],
        "sideEffects": "None",
    }
    return [
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingWebhookConfiguration",
            "metadata": {"name": "validating-webhook-configuration"},
            "webhooks": [hook],
        }
    ]


def test_webhooks_point_at_loopback_and_carry_the_ca() -> None:
    (vwc,) = operators.webhook_configurations(
        _webhook_manifest(), operators.TRAINING_OPERATOR, 9443, "Q0E="
    )
    assert vwc["metadata"]["name"] == operators.TRAINING_OPERATOR.validating
    (hook,) = vwc["webhooks"]
    assert hook["clientConfig"] == {
        "url": "https://127.0.0.1:9443/validate-kubeflow-org-v1-pytorchjob",
        "caBundle": "Q0E=",
    }
    assert "service" not in yaml.safe_dump(vwc)


def test_kueue_conversion_webhooks_on_loopback() -> None:
    crd = {"metadata": {"name": "workloads.kueue.x-k8s.io"}, "spec": {"versions": []}}
    out = operators.with_conversion_webhook(crd, operators.KUEUE, 9444, "Q0E=")
    conv = out["spec"]["conversion"]
    assert conv["strategy"] == "Webhook"
    assert conv["webhook"]["clientConfig"] == {
        "url": "https://127.0.0.1:9444/convert",
        "caBundle": "Q0E=",
    }
    other = {"metadata": {"name": "resourceflavors.kueue.x-k8s.io"}, "spec": {}}
    assert operators.with_conversion_webhook(other, operators.KUEUE, 9444, "Q0E=") == other


def test_kueue_configuration_binds_loopback_only(tmp_path: Path) -> None:
    cfg = operators.kueue_configuration(webhook_port=1, health_port=2, cert_dir=tmp_path)
    assert cfg["webhook"] == {"host": "127.0.0.1", "port": 1, "certDir": str(tmp_path)}
    assert cfg["health"]["healthProbeBindAddress"] == "127.0.0.1:2"
    assert cfg["metrics"]["bindAddress"] == "0"
    assert "kubeflow.org/pytorchjob" in cfg["integrations"]["frameworks"]


def test_runtime_cert_is_the_certificate_only_and_goes_away(tmp_path: Path) -> None:
    """The training operator's rotator folder (world-shared in a real run) gets ``tls.crt``
    only, only while the operator starts, and only when it has none."""
    folder = tmp_path / "shared" / "k8s-webhook-server" / "serving-certs"
    lock = tmp_path / "cache" / "runtime-cert.lock"
    (tmp_path / "shared").mkdir()  # the world-shared temp folder
    with operators.runtime_cert(b"CERT", lock, folder) as wrote:
        assert wrote
        assert sorted(p.name for p in folder.iterdir()) == ["tls.crt"]
        assert (folder / "tls.crt").read_bytes() == b"CERT"
    assert not (tmp_path / "shared" / "k8s-webhook-server").exists()
    assert (tmp_path / "shared").is_dir()  # not made for it: left alone

    folder.mkdir(parents=True)
    (folder / "tls.crt").write_bytes(b"SOMEONE ELSE'S")
    with operators.runtime_cert(b"CERT", lock, folder) as wrote:
        assert not wrote
    assert (folder / "tls.crt").read_bytes() == b"SOMEONE ELSE'S"


def test_scheduler_runs_from_a_configuration_file(tmp_path: Path) -> None:
    cfg = cluster.scheduler_configuration(tmp_path / "kubeconfig")
    assert cfg["apiVersion"] == "kubescheduler.config.k8s.io/v1"
    assert cfg["clientConnection"] == {"kubeconfig": str(tmp_path / "kubeconfig")}
    assert cfg["leaderElection"] == {"leaderElect": False}


def test_job_quota_sums_the_workers_requests_millis_included() -> None:
    job = {
        "spec": {
            "pytorchReplicaSpecs": {
                "Worker": {
                    "replicas": 3,
                    "template": {
                        "spec": {
                            "containers": [
                                {
                                    "name": "pytorch",
                                    "resources": {
                                        "requests": {
                                            "cpu": "500m",
                                            "memory": "1536Mi",
                                            "nvidia.com/gpu": "8",
                                        }
                                    },
                                }
                            ]
                        }
                    },
                }
            }
        }
    }
    assert job_quota(job) == {
        "cpu": "1500m",
        "memory": str(3 * 1536 * 2**20),
        "nvidia.com/gpu": "24",
    }
