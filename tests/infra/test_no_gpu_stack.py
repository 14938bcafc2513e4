"""A stack without GPU node groups runs the real program to the end, under Pulumi's mocks.

If this fails, ``pulumi up`` of a CPU-only stack (the platform first, GPU capacity later, or a
stack whose capacity block has not started yet) stops with a Python error instead of building
the cluster: the program names a variable only GPU stacks bind (``device_plugins``).

Mocked, and why: there is no Pulumi engine and no AWS account here (``tests/pulumi_mocks``).
"""

from __future__ import annotations

import pytest

from infra import outputs
from tests.pulumi_mocks import run_program

SECRETS = {"grafanaAdminPassword": "mock-password"}


@pytest.mark.parametrize(
    "overrides",
    [
        {"gpuNodeGroups": [], "sharedStorage": {"type": "none"}},
        {
            "gpuNodeGroups": [],
            "sharedStorage": {"type": "none"},
            "observability": {"enabled": True, "dcgm": True},
        },
        {
            "gpuNodeGroups": [],
            "sharedStorage": {"type": "fsx", "availabilityZone": "us-east-2a"},
            "observability": {"enabled": True},
        },
    ],
    ids=["bare", "observability", "fsx-and-observability"],
)
def test_a_stack_without_gpu_node_groups_builds(overrides: dict[str, object]) -> None:
    run = run_program("p5-16", overrides=overrides, secrets=SECRETS)
    types = {r.type for r in run.resources}
    assert "eks-fsdp:infra:GpuNodeGroup" not in types
    assert "eks-fsdp:infra:DevicePlugins" not in types
    assert "eks-fsdp:infra:Cluster" in types
    assert run.outputs[outputs.GPU_NODE_GROUP_NAMES] == []
    # No device plugin chart without a GPU node group; observability installs no DCGM exporter.
    charts = {r.inputs.get("chart") for r in run.of_type("kubernetes:helm.sh/v3:Release")}
    assert not {"nvidia-device-plugin", "aws-efa-k8s-device-plugin", "dcgm-exporter"} & charts
