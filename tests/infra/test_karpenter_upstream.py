"""The Karpenter controller's IAM, queue and rules are upstream's, read from upstream's own file.

``workloads/manifests/karpenter/cloudformation.yaml`` is aws/karpenter-provider-aws
``website/content/en/docs/getting-started/getting-started-with-karpenter/cloudformation.yaml``
at tag v1.14.1 (``versions.KARPENTER_VERSION``), vendored unchanged. Its ``!Sub`` policy
documents are filled in here for one cluster and compared with ``infra.karpenter``'s, statement
for statement. If this fails, the controller would get more than upstream grants (a launch or a
deletion not scoped to this cluster's tagged resources, PassRole of any role) or less (a call
the pinned controller makes would be denied: nodes would not launch, or interruption notices
would not be read), or the interruption queue would miss an event upstream routes to it.

Nothing is mocked: pure functions compared with a file.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import yaml

from infra import versions
from infra.cluster import NODE_POLICY_ARNS
from infra.karpenter import (
    INTERRUPTION_EVENTS,
    QUEUE_RETENTION_SECONDS,
    controller_policies,
    queue_policy,
)
from workloads.specs import karpenter as spec

UPSTREAM = Path(spec.CRD_DIR).parent / "cloudformation.yaml"
PARTITION, REGION, ACCOUNT, CLUSTER = "aws", "us-east-2", "123456789012", "eks-fsdp-p5"
NODE_ROLE_ARN = f"arn:aws:iam::{ACCOUNT}:role/{spec.node_role_name(CLUSTER)}"
QUEUE_ARN = f"arn:aws:sqs:{REGION}:{ACCOUNT}:{spec.interruption_queue_name(CLUSTER)}"
OURS_BY_UPSTREAM = {
    "NodeLifecyclePolicy": "node-lifecycle",
    "IAMIntegrationPolicy": "iam-integration",
    "EKSIntegrationPolicy": "eks-integration",
    "InterruptionPolicy": "interruption",
    "ResourceDiscoveryPolicy": "resource-discovery",
}
LEFT_OUT = {"ZonalShiftPolicy"}
"""Upstream's policy for ``settings.enableZonalShift``, which the stack leaves off."""


class _Tagged(str):
    """A CloudFormation intrinsic (``!Sub``, ``!Ref``, ``!GetAtt``) kept as its text."""

    tag: str


def _loader() -> type[yaml.SafeLoader]:
    class Loader(yaml.SafeLoader):
        pass

    def construct(loader: yaml.SafeLoader, node: yaml.Node) -> _Tagged:
        value = _Tagged(loader.construct_scalar(node))  # type: ignore[arg-type]
        value.tag = node.tag
        return value

    for tag in ("!Sub", "!Ref", "!GetAtt"):
        Loader.add_constructor(tag, construct)
    return Loader


def _sub(text: str) -> str:
    values = {
        "AWS::Partition": PARTITION,
        "AWS::Region": REGION,
        "AWS::AccountId": ACCOUNT,
        "AWS::URLSuffix": "amazonaws.com",
        "ClusterName": CLUSTER,
        "KarpenterNodeRole.Arn": NODE_ROLE_ARN,
        "KarpenterInterruptionQueue.Arn": QUEUE_ARN,
    }
    return re.sub(r"\$\{([^}]+)\}", lambda m: values[m.group(1)], text)


def _upstream() -> dict[str, Any]:
    doc = yaml.load(UPSTREAM.read_text(), Loader=_loader())  # a SafeLoader subclass
    return doc["Resources"]  # type: ignore[no-any-return]


def test_the_vendored_file_is_the_pinned_releases() -> None:
    assert versions.KARPENTER_VERSION == "1.14.1"  # re-vendor the file when this changes
    resources = _upstream()
    managed = {n for n, r in resources.items() if r["Type"] == "AWS::IAM::ManagedPolicy"}
    assert managed == set(OURS_BY_UPSTREAM) | LEFT_OUT


def test_controller_policies_equal_upstreams() -> None:
    ours = controller_policies(
        partition=PARTITION,
        region=REGION,
        account=ACCOUNT,
        cluster_name=CLUSTER,
        node_role_arn=NODE_ROLE_ARN,
        queue_arn=QUEUE_ARN,
    )
    assert set(ours) == set(OURS_BY_UPSTREAM.values())
    resources = _upstream()
    for upstream_name, our_name in OURS_BY_UPSTREAM.items():
        upstream = json.loads(_sub(resources[upstream_name]["Properties"]["PolicyDocument"]))
        assert ours[our_name] == upstream, upstream_name


def test_the_queue_its_policy_and_the_rules_equal_upstreams() -> None:
    resources = _upstream()
    queue = resources["KarpenterInterruptionQueue"]["Properties"]
    assert queue["MessageRetentionPeriod"] == QUEUE_RETENTION_SECONDS
    assert queue["SqsManagedSseEnabled"] is True
    upstream_policy = resources["KarpenterInterruptionQueuePolicy"]["Properties"]["PolicyDocument"]
    ours = queue_policy(QUEUE_ARN)
    assert ours["Id"] == upstream_policy["Id"]
    for statement in upstream_policy["Statement"]:
        if isinstance(statement.get("Resource"), _Tagged):  # !GetAtt KarpenterInterruptionQueue.Arn
            statement["Resource"] = QUEUE_ARN
    # YAML reads the condition's false as a boolean; IAM compares it as the string "false"
    deny = upstream_policy["Statement"][1]
    deny["Condition"]["Bool"]["aws:SecureTransport"] = "false"
    assert ours["Statement"] == upstream_policy["Statement"]
    rules = [r["Properties"] for r in resources.values() if r["Type"] == "AWS::Events::Rule"]
    assert sorted(json.dumps(r["EventPattern"], sort_keys=True) for r in rules) == sorted(
        json.dumps(p, sort_keys=True) for p in INTERRUPTION_EVENTS.values()
    )
    assert all(t["Id"] == "KarpenterInterruptionQueueTarget" for r in rules for t in r["Targets"])


def test_the_node_role_has_upstreams_policies() -> None:
    """Upstream's four, with ECR read-only (a superset of its ``PullOnly``, what the managed
    nodes have) and the CloudWatch agent's policy the managed nodes carry too."""
    role = _upstream()["KarpenterNodeRole"]["Properties"]
    upstream = {_sub(arn) for arn in role["ManagedPolicyArns"]}
    pull_only = "arn:aws:iam::aws:policy/AmazonEC2ContainerRegistryPullOnly"
    assert upstream - {pull_only} <= set(NODE_POLICY_ARNS)
    assert "arn:aws:iam::aws:policy/AmazonEC2ContainerRegistryReadOnly" in NODE_POLICY_ARNS
    assert _sub(role["RoleName"]) == spec.node_role_name(CLUSTER)


CHART_VALUES = Path(spec.CRD_DIR).parent / "chart-values.yaml"
"""``charts/karpenter/values.yaml`` at tag v1.14.1 (the release job sets the image tag and the
chart version when it publishes; the keys are the tag's)."""
MAPS = {("nodeSelector",), ("serviceAccount", "annotations"), ("controller", "resources")}
"""Values that are free maps in the chart (``{}`` there): their keys are ours to choose (the
controller's resources are a container's ``resources``, as upstream's getting-started sets)."""


def _paths(values: Any, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    if not isinstance(values, dict) or prefix in MAPS:
        return [prefix]
    return [p for key, sub in values.items() for p in _paths(sub, (*prefix, key))]


def test_every_controller_value_is_a_key_of_the_pinned_chart() -> None:
    """A misspelt key (``settings.interruptionQueueName``) would be ignored by the chart and
    interruption handling silently off."""
    upstream = yaml.safe_load(CHART_VALUES.read_text())
    ours = spec.controller_values(
        cluster_name=CLUSTER,
        region=REGION,
        interruption_queue=spec.interruption_queue_name(CLUSTER),
        role_arn=NODE_ROLE_ARN,
        node_selector={"eks-fsdp/nodegroup": "system"},
        replicas=2,
        node_repair=True,
    )
    for path in _paths(ours):
        node: Any = upstream
        for key in path:
            assert isinstance(node, dict) and key in node, ".".join(path)
            node = node[key]
    assert (
        upstream["settings"]["clusterName"] == ""
        and upstream["settings"]["interruptionQueue"] == ""
    )
    assert upstream["nodeSelector"] == {"kubernetes.io/os": "linux"}  # kept in ours
