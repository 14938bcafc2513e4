"""The mocks harness itself (``tests/pulumi_mocks.py``), which the infra and workloads tests share.

Mocked: the Pulumi engine (``pulumi.runtime.set_mocks``) and every provider; no CLI, no AWS.
If these fail, a program that passes a resource as an input of a remote component (for example
an IAM role into ``eks.Cluster``) would flake under the stock ``MockMonitor`` ("Task got
Future attached to a different loop", measured 4 runs out of 4 with the stripping disabled),
or stack runs would leak config and resources into one another.
"""

from __future__ import annotations

from pathlib import Path

from tests.pulumi_mocks import run_program

REMOTE_WITH_RESOURCE_INPUT = """
import pulumi
import pulumi_aws as aws
import pulumi_eks as eks

role = aws.iam.Role("role", assume_role_policy="{}")
cluster = eks.Cluster(
    "cluster", service_role=role, instance_roles=[role], skip_default_node_group=True
)
pulumi.export("kubeconfig", cluster.kubeconfig_json)
"""


def test_resource_inputs_of_remote_components_arrive_as_ids(tmp_path: Path) -> None:
    program = tmp_path / "program.py"
    program.write_text(REMOTE_WITH_RESOURCE_INPUT)
    for _ in range(3):
        run = run_program("dev", program=program)
        cluster = run.one("eks:index:Cluster")
        assert cluster.inputs["serviceRole"] == "role-id"
        assert cluster.inputs["instanceRoles"] == ["role-id"]
        assert '"kind": "Config"' in run.outputs["kubeconfig"]


def test_runs_do_not_leak_into_one_another(tmp_path: Path) -> None:
    program = tmp_path / "program.py"
    program.write_text(
        "import pulumi\nfrom infra.config import from_pulumi\n"
        "pulumi.export('name', from_pulumi().cluster_name)\n"
    )
    first = run_program("p5-16", program=program)
    second = run_program("dev", program=program, overrides={"clusterName": "other"})
    third = run_program("p5-16", program=program)
    assert [r.outputs["name"] for r in (first, second, third)] == [
        "eks-fsdp-p5",
        "other",
        "eks-fsdp-p5",
    ]
    assert first.resources == [] and third.resources == []
