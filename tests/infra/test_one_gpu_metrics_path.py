"""One GPU metrics path: the CloudWatch add-on's DCGM collection is off when the stack runs
its own dcgm-exporter, under Pulumi's mocks.

If this fails, a stack with both ``cloudwatchObservability`` and ``observability.dcgm`` would
run two DCGM exporters on every GPU node and ship the same GPU metrics to CloudWatch (billed per
metric) beside Prometheus; or a stack without our exporter would lose its only GPU metrics.
The key is the CloudWatch agent's ``accelerated_compute_metrics`` (amazon-cloudwatch-agent
``AcceleratedComputeMetricsEnabled``, default true; the agent operator's
``DcgmExporterReconciler`` reads it too).

Mocked, and why: there is no Pulumi engine and no AWS account here (``tests/pulumi_mocks``).
"""

from __future__ import annotations

import json

import pytest

from infra.cluster import CLOUDWATCH_NO_GPU_METRICS
from infra.config import load_stack_file
from tests.pulumi_mocks import run_program

SECRETS = {"hfToken": "hf_mock", "grafanaAdminPassword": "mock-password"}


def cloudwatch_addon(stack: str, **overrides: object) -> dict:
    run = run_program(stack, overrides=overrides, secrets=SECRETS)
    (addon,) = [
        a
        for a in run.of_type("aws:eks/addon:Addon")
        if a.inputs["addonName"] == "amazon-cloudwatch-observability"
    ]
    return addon.inputs


@pytest.mark.parametrize("stack", ["p4de-odcr", "p5-16"])
def test_our_dcgm_turns_the_add_on_gpu_path_off(stack: str) -> None:
    cfg = load_stack_file(stack)
    assert cfg.cloudwatch_observability and cfg.observability.enabled and cfg.observability.dcgm
    inputs = cloudwatch_addon(stack)
    config = json.loads(inputs["configurationValues"])
    assert config == CLOUDWATCH_NO_GPU_METRICS
    kubernetes = config["agent"]["config"]["logs"]["metrics_collected"]["kubernetes"]
    assert kubernetes == {"enhanced_container_insights": True, "accelerated_compute_metrics": False}


def test_without_our_dcgm_the_add_on_keeps_its_gpu_metrics() -> None:
    off = cloudwatch_addon("p4de-odcr", observability={"enabled": False, "dcgm": True})
    assert "configurationValues" not in off
    no_dcgm = cloudwatch_addon("p4de-odcr", observability={"enabled": True, "dcgm": False})
    assert "configurationValues" not in no_dcgm
