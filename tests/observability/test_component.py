"""The ``Observability`` Pulumi component creates the right children, secret-safe.

If this fails, ``pulumi up`` would install unpinned or wrong charts, leak the Grafana password in
plain text, lose the dashboard ConfigMap label, or install dcgm-exporter where there is no GPU.
Mocked: the Pulumi engine and the Kubernetes provider (``tests/pulumi_mocks.py``: no CLI, no
cluster; Helm releases arrive as plain custom resources and fetch no chart). The program runs
``__main__.py`` itself for the real stacks, and a small program for the component alone.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
from pulumi.runtime import rpc

from infra import versions
from infra.config.nodegroups import GPU_PRESENT_LABEL
from tests.pulumi_mocks import run_program
from workloads.observability import OUTPUT_KEY, TYPE_TOKEN, ObservabilityArgs
from workloads.specs import observability as spec

RELEASE = "kubernetes:helm.sh/v3:Release"

PROGRAM = textwrap.dedent(
    """
    import pulumi
    from workloads.observability import Observability, ObservabilityArgs
    from workloads.specs.observability import ObservabilitySettings

    cfg = pulumi.Config()
    obs = Observability(
        "obs",
        ObservabilityArgs(
            settings=ObservabilitySettings(dcgm=cfg.get_bool("dcgmOn") is not False),
            grafana_admin_password=cfg.require_secret("grafanaAdminPassword"),
        ),
    )
    pulumi.export("portForward", obs.port_forward)
    pulumi.export("secretData", obs.grafana_admin.string_data)
    """
)


@pytest.fixture(scope="module")
def program(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("prog") / "__main__.py"
    path.write_text(PROGRAM)
    return path


def test_children_pinned_and_secret(program: Path) -> None:
    run = run_program("dev", program=program, secrets={"grafanaAdminPassword": "pw-123"})
    (comp,) = [r for r in run.resources if r.type == TYPE_TOKEN]
    children = {r.type: r for r in run.children_of(comp) if r.type != RELEASE}
    assert set(children) == {
        "kubernetes:core/v1:Namespace",
        "kubernetes:core/v1:Secret",
        "kubernetes:core/v1:ConfigMap",
        "kubernetes:storage.k8s.io/v1:StorageClass",
    }
    releases = {r.inputs["chart"]: r for r in run.resources if r.type == RELEASE}
    assert {
        c: (r.inputs["version"], r.inputs["repositoryOpts"]["repo"]) for c, r in releases.items()
    } == {
        "kube-prometheus-stack": (
            versions.KUBE_PROMETHEUS_STACK_VERSION,
            versions.KUBE_PROMETHEUS_STACK_REPO,
        ),
        "dcgm-exporter": (versions.DCGM_EXPORTER_VERSION, versions.DCGM_EXPORTER_REPO),
    }
    assert all(r.parent == comp.urn for r in releases.values())
    kps = releases["kube-prometheus-stack"]
    assert kps.inputs["values"] == json.loads(
        json.dumps(spec.kube_prometheus_stack_values(spec.ObservabilitySettings()))
    )
    assert kps.inputs["namespace"] == "monitoring"
    ns = children["kubernetes:core/v1:Namespace"]
    secret = children["kubernetes:core/v1:Secret"]
    assert ns.urn in kps.dependencies and secret.urn in kps.dependencies
    assert children["kubernetes:core/v1:ConfigMap"].inputs["metadata"]["labels"] == {
        "grafana_dashboard": "1"
    }
    data = secret.inputs["stringData"]  # sent to the engine as a secret envelope
    assert data[rpc._special_sig_key] == rpc._special_secret_sig
    assert data["value"] == {"admin-user": "admin", "admin-password": "pw-123"}
    assert "secretData" in run.secret_outputs  # the password never leaves as plain text
    assert "pw-123" not in json.dumps(kps.inputs)
    assert run.outputs["portForward"]["grafana"].startswith(
        "kubectl -n monitoring port-forward svc/kps-grafana"
    )


def test_dcgm_off(program: Path) -> None:
    run = run_program(
        "dev", program=program, overrides={"dcgmOn": False}, secrets={"grafanaAdminPassword": "x"}
    )
    charts = [r.inputs["chart"] for r in run.resources if r.type == RELEASE]
    assert charts == ["kube-prometheus-stack"]


def test_missing_password_is_one_clear_error() -> None:
    with pytest.raises(ValueError, match=r"^grafanaAdminPassword: not set"):
        ObservabilityArgs(grafana_admin_password=None)


def test_dcgm_affinity_matches_gpu_nodegroup_label() -> None:
    assert spec.GPU_PRESENT_LABEL == GPU_PRESENT_LABEL


@pytest.mark.parametrize("stack", ["p5-16", "p4de-odcr", "dev"])
def test_main_program_composes_observability(stack: str) -> None:
    run = run_program(stack, secrets={"grafanaAdminPassword": "pw", "hfToken": "hf_x"})
    comps = [r for r in run.resources if r.type == TYPE_TOKEN]
    if stack == "dev":  # observability.enabled is false in the dev stack
        assert comps == [] and OUTPUT_KEY not in run.outputs
        return
    (comp,) = comps
    releases = [r for r in run.resources if r.type == RELEASE and r.parent == comp.urn]
    assert {r.inputs["chart"] for r in releases} == {"kube-prometheus-stack", "dcgm-exporter"}
    assert all(r.provider and "cluster" in r.provider for r in releases), [
        r.provider for r in releases
    ]
    dcgm = next(r for r in releases if r.inputs["chart"] == "dcgm-exporter")
    taint_keys = {t["key"] for t in dcgm.inputs["values"]["tolerations"]}
    assert "nvidia.com/gpu" in taint_keys
    assert run.outputs[OUTPUT_KEY]["namespace"] == "monitoring"
