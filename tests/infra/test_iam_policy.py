"""docs/iam-policy*.json, the deploying principal's policy, covers what the program creates.

Mocked, and why: there is no Pulumi engine and no AWS account here, so the real program
(``__main__.py``) runs for every shipped stack under Pulumi's unit-test mocks
(``tests/pulumi_mocks.run_program``), which record each registered resource's type token; the
remote ``eks:index:Cluster`` runs nothing inside under mocks, so its children come from
``infra.iam_policy.COMPONENT_CHILDREN`` (pulumi/pulumi-eks ``nodejs/eks/cluster/cluster.ts``).
The policy grammar and the 6,144-character managed-policy quota are the IAM User Guide's ("IAM
JSON policy element reference", "IAM and AWS STS quotas").

If this fails, a resource type the program now creates has no row in ``infra.iam_policy.ACTIONS``
(``pulumi up`` with the documented policy stops with AccessDenied part-way through), a role the
stack creates is outside the roles ``iam:PassRole`` allows, the committed policy files differ
from the generator's output (``python -m infra.iam_policy docs`` rewrites them), or a file is
not a policy IAM accepts as one managed policy.
"""

from __future__ import annotations

import fnmatch
import json
import re
from pathlib import Path
from typing import Any

import pytest

from infra import iam_policy
from tests.pulumi_mocks import ProgramRun, run_program
from tests.shared import once

ROOT = Path(__file__).resolve().parents[2]
STACKS = tuple(sorted(p.name[len("Pulumi.") : -len(".yaml")] for p in ROOT.glob("Pulumi.*.yaml")))
SECRETS = {"hfToken": "hf_mock", "grafanaAdminPassword": "mock-password"}
"""The secrets the program requires (set with ``pulumi config set --secret`` on a stack)."""
ACTION = re.compile(r"^[a-z0-9-]+:[A-Z][A-Za-z0-9]+$")
"""``service:Action``, no wildcard (IAM JSON policy element reference, "Action")."""
VARIANTS: dict[str, tuple[str, dict[str, Any]]] = {
    # an EFA group outside a reservation gets a cluster placement group (no shipped stack
    # has one: tests/infra/test_program.py::test_placement_group_on_and_off)
    "p5-16+placement-group": (
        "p5-16",
        {
            "gpuNodeGroups": [
                {
                    "name": "p5-od",
                    "instanceType": "p5.48xlarge",
                    "minSize": 0,
                    "desiredSize": 2,
                    "maxSize": 2,
                    "availabilityZone": "us-east-2a",
                }
            ],
            "job": {},
        },
    ),
    # FSx PERSISTENT_2 written through to the data bucket: a data repository association, the
    # file system's KMS key, and FSx's service-linked role for S3 access (no shipped stack has
    # one: tests/infra/test_shared_storage.py builds the component alone)
    "p5-16+persistent-2-association": (
        "p5-16",
        {
            "sharedStorage": {
                "type": "fsx",
                "storageCapacityGiB": 2400,
                "deploymentType": "PERSISTENT_2",
                "perUnitStorageThroughput": 250,
                "dataRepositoryPrefix": "training/fsx",
            },
        },
    ),
    # Alertmanager's SNS receiver: a PodRole (its own role, passed to EKS Pod Identity by the
    # association; no shipped stack sets a topic)
    "p4de-odcr+sns-alerts": (
        "p4de-odcr",
        {
            "observability": {
                "enabled": True,
                "alerts": {
                    "receiver": "sns",
                    "snsTopicArn": "arn:aws:sns:us-east-1:123456789012:gpu-alerts",
                },
            },
        },
    ),
    # a Karpenter pool: its controller's IAM role and customer managed policies, the node role
    # (named KarpenterNodeRole-<cluster>), the interruption queue, its policy and the
    # EventBridge rules and targets that feed it (no shipped stack has one: infra/karpenter.py)
    "p4de-odcr+karpenter": (
        "p4de-odcr",
        {
            "gpuNodeGroups": [
                {
                    "name": "p4de-odcr",
                    "instanceType": "p4de.24xlarge",
                    "provisioner": "karpenter",
                    "minSize": 0,
                    "desiredSize": 2,
                    "maxSize": 2,
                    "availabilityZone": "us-east-1b",
                    "capacityReservationId": "cr-0123456789abcdef0",
                }
            ],
        },
    ),
}
"""Configurations beyond the stack files that create other resource types."""
ASSOCIATION = "aws:fsx/dataRepositoryAssociation:DataRepositoryAssociation"


def _types(run: ProgramRun) -> dict[str, list[str]]:
    """{type token: [names]}: each resource's logical name, but a role's physical name where
    the stack gives one (the Karpenter node role, ``KarpenterNodeRole-<cluster>``): the names
    ``ROLE_NAME_PREFIXES`` must match."""
    types: dict[str, list[str]] = {}
    for resource in run.resources:
        name = resource.name
        if resource.type == "aws:iam/role:Role" and resource.inputs.get("name"):
            name = resource.inputs["name"]
        types.setdefault(resource.type, []).append(name)
    return types


def _registered(_folder: Path) -> dict[str, dict[str, list[str]]]:
    """For each stack (and variant): {type token: [logical names]} of what the program registers."""
    out: dict[str, dict[str, list[str]]] = {}
    for stack in STACKS:
        out[stack] = _types(run_program(stack, secrets=SECRETS))
    for label, (stack, overrides) in VARIANTS.items():
        out[label] = _types(run_program(stack, overrides=overrides, secrets=SECRETS))
    return out


@pytest.fixture(scope="module")
def registered(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, list[str]]]:
    return once(tmp_path_factory, "iam-policy-registered", _registered)


def test_every_stack_file_ran() -> None:
    assert {"dev", "p4de-odcr", "p5-16"} <= set(STACKS)
    assert {stack for stack, _ in VARIANTS.values()} <= set(STACKS)


def test_every_registered_aws_type_has_its_actions(
    registered: dict[str, dict[str, list[str]]],
) -> None:
    for stack, types in registered.items():
        needed = iam_policy.required_types(set(types))
        missing = sorted(t for t in needed if t not in iam_policy.ACTIONS)
        assert not missing, f"{stack}: no IAM actions for {missing} in infra/iam_policy.py"
        assert "aws:ec2/vpc:Vpc" in needed and "aws:eks/cluster:Cluster" in needed
    placement = registered["p5-16+placement-group"]
    assert "aws:ec2/placementGroup:PlacementGroup" in placement
    # every row is used by some stack: no action is granted for a type nothing creates
    used = set().union(*(iam_policy.required_types(set(t)) for t in registered.values()))
    unused = sorted(t for t, row in iam_policy.ACTIONS.items() if row and t not in used)
    assert not unused, f"rows for types no stack creates: {unused}"


def test_pass_role_covers_every_role_the_stack_creates(
    registered: dict[str, dict[str, list[str]]],
) -> None:
    for stack, types in registered.items():
        # Pulumi names a role <logical name>-<random suffix>; pulumi-eks names its service
        # role <cluster name>-eksRole-role (pulumi-eks nodejs/eks/servicerole.ts)
        names = [f"{n}-" for n in types.get("aws:iam/role:Role", [])]
        names += [f"{n}-eksRole-role-" for n in types.get("eks:index:Cluster", [])]
        assert len(names) >= 3
        for name in names:
            assert name.startswith(iam_policy.ROLE_NAME_PREFIXES), (stack, name)


def test_the_committed_files_are_the_generators_output() -> None:
    files = iam_policy.files()
    committed = {p.name: p.read_text() for p in (ROOT / "docs").glob("iam-policy*.json")}
    assert committed == files, "run: python -m infra.iam_policy docs"


def _statements(document: dict) -> list[dict]:
    assert set(document) == {"Version", "Statement"} and document["Version"] == "2012-10-17"
    return document["Statement"]


def test_each_file_is_a_valid_policy_within_the_quota() -> None:
    files = {name: json.loads(text) for name, text in iam_policy.files().items()}
    whole = files.pop("iam-policy.json")
    sids = []
    for statement in _statements(whole):
        assert set(statement) <= {"Sid", "Effect", "Action", "Resource", "Condition"}
        assert statement["Effect"] == "Allow" and re.fullmatch(r"[A-Za-z0-9]+", statement["Sid"])
        actions = statement["Action"]
        actions = [actions] if isinstance(actions, str) else actions
        assert actions and all(ACTION.match(a) for a in actions), actions
        assert len(actions) == len(set(actions))
        resources = statement["Resource"]
        resources = [resources] if isinstance(resources, str) else resources
        assert resources == ["*"] or all(r.startswith("arn:aws:") for r in resources)
        sids.append(statement["Sid"])
    assert len(sids) == len(set(sids))
    actions = {
        a
        for s in whole["Statement"]
        for a in ([s["Action"]] if isinstance(s["Action"], str) else s["Action"])
    }
    assert {"iam:PassRole", "iam:CreateServiceLinkedRole", "sts:GetCallerIdentity"} <= actions
    assert set(iam_policy.DOCTOR_READS) <= actions
    # one managed policy holds it, or the parts do: the same statements, each within the quota
    if iam_policy.size(whole) <= iam_policy.MANAGED_POLICY_MAX_CHARS:
        assert not files
    else:
        parts = [files[f"iam-policy-{n}.json"] for n in range(1, len(files) + 1)]
        assert [s for p in parts for s in _statements(p)] == whole["Statement"]
        assert all(iam_policy.size(p) <= iam_policy.MANAGED_POLICY_MAX_CHARS for p in parts)
        assert len(parts) <= 10  # managed policies per role or user (IAM quotas, default)


def _actions(statement: dict) -> list[str]:
    actions = statement["Action"]
    return [actions] if isinstance(actions, str) else actions


def test_a_linked_file_system_gets_fsx_s3_service_linked_role_only_when_it_has_one(
    registered: dict[str, dict[str, list[str]]],
) -> None:
    """FSx creates AWSServiceRoleForFSxS3Access_<fs id> with the caller's permissions when a
    file system is linked to a bucket (FSx for Lustre User Guide, "Setting up": "Adding
    permissions to use data repositories in Amazon S3", and "Using service-linked roles for
    Amazon FSx"); without iam:AttachRolePolicy/PutRolePolicy on that role's path FSx would edit
    the bucket policy instead ("How FSx for Lustre checks for access to linked S3 buckets")."""
    role_path = "arn:aws:iam::*:role/aws-service-role/s3.data-source.lustre.fsx.amazonaws.com/*"
    for stack, types in registered.items():
        needed = iam_policy.required_types(set(types))
        document = iam_policy.policy(needed)
        by_sid = {s["Sid"]: s for s in document["Statement"]}
        names = by_sid["IamServiceLinkedRoles"]["Condition"]["StringEquals"]["iam:AWSServiceName"]
        # the stack's policy holds exactly the rows of what it creates
        granted = {a for s in document["Statement"] for a in _actions(s)}
        for typ in needed:
            assert set(iam_policy.ACTIONS[typ]) <= granted, (stack, typ)
        if ASSOCIATION in types:
            role = by_sid["IamFsxS3AccessRole"]
            assert role["Resource"] == role_path
            assert set(_actions(role)) == {"iam:AttachRolePolicy", "iam:PutRolePolicy"}
            assert iam_policy.FSX_S3_SERVICE in names
            assert "fsx:CreateDataRepositoryAssociation" in granted
            assert "fsx:DeleteDataRepositoryAssociation" in granted
        else:
            assert "IamFsxS3AccessRole" not in by_sid, stack
            assert iam_policy.FSX_S3_SERVICE not in names, stack
            assert not any("DataRepositoryAssociation" in a for a in granted), stack
    assert ASSOCIATION in registered["p5-16+persistent-2-association"]
    assert "aws:kms/key:Key" in registered["p5-16+persistent-2-association"]
    # the committed policy (every row) holds the statement, since some stack may need it
    whole = {s["Sid"]: s for s in iam_policy.policy()["Statement"]}
    assert whole["IamFsxS3AccessRole"]["Resource"] == role_path


def test_the_sns_receivers_role_is_one_the_deployer_may_create_and_pass(
    registered: dict[str, dict[str, list[str]]],
) -> None:
    """The SNS alert receiver's PodRole creates ``alertmanager-sns-role-<suffix>`` and its Pod
    Identity association passes it to EKS Pod Identity (EKS API reference,
    CreatePodIdentityAssociation: the caller needs ``iam:PassRole`` on the role): the stack's
    policy must allow creating and passing that role, and only to the services it names."""
    types = registered["p4de-odcr+sns-alerts"]
    roles = types["aws:iam/role:Role"]
    assert "alertmanager-sns-role" in roles
    document = iam_policy.policy(iam_policy.required_types(set(types)))
    by_sid = {s["Sid"]: s for s in document["Statement"]}
    passing = by_sid["IamPassStackRoles"]
    assert _actions(passing) == ["iam:PassRole"]
    passed_to = passing["Condition"]["StringEquals"]["iam:PassedToService"]
    assert "pods.eks.amazonaws.com" in passed_to
    creating = by_sid["IamStackRoles"]
    assert "iam:CreateRole" in _actions(creating)
    for name in roles:
        # what IAM gets: the logical name plus Pulumi's random suffix
        arn = f"arn:aws:iam::123456789012:role/{name}-a1b2c3d"
        for statement in (passing, creating):
            patterns = statement["Resource"]
            patterns = [patterns] if isinstance(patterns, str) else patterns
            assert any(fnmatch.fnmatchcase(arn, p) for p in patterns), (name, statement["Sid"])


KARPENTER_TYPES = (
    "aws:sqs/queue:Queue",
    "aws:sqs/queuePolicy:QueuePolicy",
    "aws:cloudwatch/eventRule:EventRule",
    "aws:cloudwatch/eventTarget:EventTarget",
    "aws:iam/policy:Policy",
)


def test_a_karpenter_stacks_policy_may_create_its_queue_rules_roles_and_policies(
    registered: dict[str, dict[str, list[str]]],
) -> None:
    """A stack with a Karpenter pool (``infra/karpenter.py``) creates an SQS queue and its
    policy, EventBridge rules and targets, customer managed policies and two roles of its own
    (Service Authorization Reference: "Actions, resources, and condition keys for Amazon SQS /
    Amazon EventBridge / AWS Identity and Access Management"): its policy grants their calls,
    the policies only under ``POLICY_NAME_PREFIXES`` and attached only to the stack's roles;
    a stack without such a pool gets none of it."""
    types = registered["p4de-odcr+karpenter"]
    assert set(KARPENTER_TYPES) <= set(types)
    roles = types["aws:iam/role:Role"]
    assert "KarpenterNodeRole-eks-fsdp-p4de" in roles
    assert "karpenter-controller-role" in roles
    document = iam_policy.policy(iam_policy.required_types(set(types)))
    by_sid = {s["Sid"]: s for s in document["Statement"]}
    assert {"sqs:CreateQueue", "sqs:SetQueueAttributes"} <= set(_actions(by_sid["Sqs"]))
    assert {"events:PutRule", "events:PutTargets"} <= set(_actions(by_sid["Events"]))
    policies = by_sid["IamStackPolicies"]
    assert {"iam:CreatePolicy", "iam:CreatePolicyVersion", "iam:DeletePolicy"} <= set(
        _actions(policies)
    )
    assert not set(_actions(policies)) & set(_actions(by_sid["IamStackRoles"]))
    for name in types["aws:iam/policy:Policy"]:
        arn = f"arn:aws:iam::123456789012:policy/{name}-a1b2c3d"
        assert any(fnmatch.fnmatchcase(arn, p) for p in policies["Resource"]), name
        attach = by_sid["IamAttachStackPolicies"]
        assert any(
            fnmatch.fnmatchcase(arn, p) for p in attach["Condition"]["ArnLike"]["iam:PolicyARN"]
        )
    for name in roles:
        physical = name if name.startswith("KarpenterNodeRole-") else f"{name}-a1b2c3d"
        arn = f"arn:aws:iam::123456789012:role/{physical}"
        for sid in ("IamStackRoles", "IamAttachStackPolicies"):
            assert any(fnmatch.fnmatchcase(arn, p) for p in by_sid[sid]["Resource"]), (name, sid)
    plain = iam_policy.policy(iam_policy.required_types(set(registered["p4de-odcr"])))
    sids = {s["Sid"] for s in plain["Statement"]}
    assert not {"Sqs", "Events", "IamStackPolicies", "IamAttachStackPolicies"} & sids
