"""The manifest scanner gate: checkov 3.3.30 on everything each stack deploys to Kubernetes.

Nothing is mocked: ``workloads.scan`` writes each stack's rendered objects, the opt-in debug
DaemonSets and the PyTorchJob's pod templates as Pods (checkov does not know the custom
resource), and runs the real checkov from the tools virtualenv with ``.checkov.yaml``.

If these fail, a stack ships a Kubernetes object with a known weakness that nobody decided to
accept (a root container with capabilities, a mounted service-account token, a pod without a
NetworkPolicy, no resource limits...), or a suppression has lost its written reason, or the
gate has gone blind (it no longer sees the training pods, or no longer fails a privileged pod).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from tests.shared import once
from workloads import scan

pytestmark = pytest.mark.slow


@pytest.fixture(scope="session")
def results(tmp_path_factory: pytest.TempPathFactory) -> dict[str, scan.ScanResult]:
    """checkov on every stack, once per test run (shared by the xdist workers)."""
    return once(
        tmp_path_factory, "checkov", lambda root: {s: scan.scan(s, root / s) for s in scan.STACKS}
    )


@pytest.mark.parametrize("stack", scan.STACKS)
def test_no_unsuppressed_failure(results: dict[str, scan.ScanResult], stack: str) -> None:
    result = results[stack]
    assert result.failures == [], result.failures
    assert result.failed == 0
    assert result.passed > 200  # the objects were scanned, not skipped


@pytest.mark.parametrize("stack", scan.STACKS)
def test_every_suppression_carries_a_reason(
    results: dict[str, scan.ScanResult], stack: str
) -> None:
    result = results[stack]
    assert result.suppressed == len(result.suppressions) > 0
    for check, resource, reason in result.suppressions:
        assert len(reason.split()) >= 5, (check, resource, reason)


def test_global_skips_each_carry_a_reason() -> None:
    text = scan.CONFIG.read_text()
    skipped = yaml.safe_load(text)["skip-check"]
    for check in skipped:
        assert re.search(rf"^\s*# {check}: \S+(\s+\S+){{5,}}", text, re.M), check
    # A global skip is for checks no object of the project can pass on purpose; everything
    # else is suppressed on its object.
    assert set(skipped) == {"CKV_K8S_43", "CKV_K8S_15", "CKV_K8S_21"}


def test_the_training_pods_are_scanned(tmp_path: Path) -> None:
    """The PyTorchJob's pod template reaches checkov as a Pod with the template's spec."""
    objs = scan.stack_objects("p5-16")
    (job,) = [o for o in objs["pytorchjob"] if o["kind"] == "PyTorchJob"]
    (pod,) = objs["pytorchjob-pods"]
    template = job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]
    assert pod["kind"] == "Pod" and pod["spec"] == template["spec"]
    assert pod["metadata"]["labels"] == template["metadata"]["labels"]
    assert set(objs) >= {"pytorchjob", "workers-network-policy", "debug-tools", "checkpoint-volume"}


def test_the_gate_fails_a_privileged_pod(tmp_path: Path) -> None:
    bad = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "bad", "namespace": "x"},
        "spec": {
            "containers": [{"name": "c", "image": "r/i:1", "securityContext": {"privileged": True}}]
        },
    }
    (tmp_path / "bad.yaml").write_text(yaml.safe_dump(bad))
    report = scan.run_checkov(tmp_path)
    failed = {c["check_id"] for c in report["results"]["failed_checks"]}
    assert {"CKV_K8S_16", "CKV_K8S_20", "CKV_K8S_38"} <= failed
