"""The jobs' AWS identity (EKS Pod Identity, ``infra.pod_identity``) in the real Pulumi program.

Mocked, and why: there is no Pulumi CLI/engine, no AWS account and no Kubernetes API server
here, so ``tests/pulumi_mocks.run_program`` replaces the engine's resource monitor with Pulumi's
unit-test mocks (providers echo their inputs plus made-up ids and ARNs). Everything else is the
real program. The IAM documents are read as the engine would send them to IAM.

If these fail, a training pod could not reach its checkpoints and exports in S3 (no agent, no
association, an association to another namespace or ServiceAccount than the jobs use, a role
anything but EKS Pod Identity could assume), or it could reach more than its prefix (the whole
bucket, every bucket, any KMS key), or the node role, which every pod on a node would share if
IMDS were reachable, gained S3 access.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from infra import outputs, versions
from infra.cluster import NODE_POLICY_ARNS
from infra.config import load_stack_file
from infra.pod_identity import KMS_ACTIONS, OBJECT_ACTIONS, PodIdentityArgs
from tests.pulumi_mocks import ProgramRun, RecordedResource, run_program
from workloads.specs.pytorchjob import SERVICE_ACCOUNT
from workloads.specs.stack import JOBS_NAMESPACE
from workloads.specs.teams import SERVICE_ACCOUNT as TEAM_SERVICE_ACCOUNT

STACKS = ("dev", "p5-16")
SECRETS = {"hfToken": "hf_mock", "grafanaAdminPassword": "mock-password"}
COMPONENT = "eks-fsdp:infra:PodIdentity"
ROLE = "aws:iam/role:Role"
ASSOCIATION = "aws:eks/podIdentityAssociation:PodIdentityAssociation"


@pytest.fixture(scope="module")
def runs() -> dict[str, ProgramRun]:
    return {stack: run_program(stack, secrets=SECRETS) for stack in STACKS}


def _in_component(run: ProgramRun, resource: RecordedResource) -> bool:
    parent = run.by_urn(resource.parent)
    return parent is not None and parent.type == COMPONENT


def _policy(run: ProgramRun) -> dict[str, Any]:
    (policy,) = [r for r in run.of_type("aws:iam/rolePolicy:RolePolicy") if _in_component(run, r)]
    return json.loads(policy.inputs["policy"])  # type: ignore[no-any-return]


@pytest.mark.parametrize("stack", STACKS)
def test_the_agent_add_on_is_pinned_and_after_the_nodes(
    runs: dict[str, ProgramRun], stack: str
) -> None:
    run = runs[stack]
    (agent,) = [
        a
        for a in run.of_type("aws:eks/addon:Addon")
        if a.inputs["addonName"] == "eks-pod-identity-agent"
    ]
    assert _in_component(run, agent)
    assert agent.inputs["addonVersion"] == versions.POD_IDENTITY_AGENT_ADDON_VERSION
    assert agent.inputs["clusterName"] == load_stack_file(stack).cluster_name
    system = run.one("aws:eks/nodeGroup:NodeGroup", "cluster-system")
    assert system.urn in agent.dependencies


@pytest.mark.parametrize("stack", STACKS)
def test_only_eks_pod_identity_assumes_the_role(runs: dict[str, ProgramRun], stack: str) -> None:
    run = runs[stack]
    (role,) = [r for r in run.of_type(ROLE) if _in_component(run, r)]
    (statement,) = json.loads(role.inputs["assumeRolePolicy"])["Statement"]
    assert statement == {
        "Effect": "Allow",
        "Principal": {"Service": "pods.eks.amazonaws.com"},
        "Action": ["sts:AssumeRole", "sts:TagSession"],
    }
    assert "managedPolicyArns" not in role.inputs
    attached = [
        a
        for a in run.of_type("aws:iam/rolePolicyAttachment:RolePolicyAttachment")
        if role.urn in a.property_dependencies.get("role", ())
    ]
    assert attached == []
    assert run.outputs[outputs.JOBS_ROLE_ARN] == role.outputs["arn"]


@pytest.mark.parametrize("stack", STACKS)
def test_the_policy_reaches_the_prefix_and_the_bucket_key_only(
    runs: dict[str, ProgramRun], stack: str
) -> None:
    run, cfg = runs[stack], load_stack_file(stack)
    bucket = run.outputs[outputs.DATA_BUCKET_NAME]
    arn = f"arn:aws:s3:::{bucket}"
    prefix = cfg.data_bucket.prefix
    key = run.one("aws:kms/key:Key", "data-bucket-key").outputs["arn"]
    statements = {s["Sid"]: s for s in _policy(run)["Statement"]}
    assert set(statements) == {"ListThePrefix", "ObjectsUnderThePrefix", "TheBucketKey"}
    assert statements["ListThePrefix"] == {
        "Sid": "ListThePrefix",
        "Effect": "Allow",
        "Action": "s3:ListBucket",
        "Resource": arn,
        "Condition": {"StringLike": {"s3:prefix": [prefix, f"{prefix}/*"]}},
    }
    objects = statements["ObjectsUnderThePrefix"]
    assert (
        objects["Action"]
        == list(OBJECT_ACTIONS)
        == [
            "s3:GetObject",
            "s3:PutObject",
            "s3:DeleteObject",
            "s3:AbortMultipartUpload",
        ]
    )
    assert objects["Resource"] == f"{arn}/{prefix}/*"
    assert statements["TheBucketKey"]["Action"] == list(KMS_ACTIONS)
    assert statements["TheBucketKey"]["Resource"] == key
    assert all(s["Effect"] == "Allow" for s in statements.values())
    assert not [s for s in statements.values() if "*" in json.dumps(s["Action"])]


def test_every_team_namespace_gets_the_role() -> None:
    """A team's jobs run as the ServiceAccount ``jobs`` of its own namespace, which
    ``workloads.team`` creates; the role is associated there too, and this component creates
    only the jobs namespace's ServiceAccount."""
    arn = "arn:aws:iam::123456789012:role/{}"
    teams = [{"name": n, "principalArns": [arn.format(n)]} for n in ("nlp", "vision")]
    run = run_program("p5-16", overrides={"teams": teams}, secrets=SECRETS)
    (role,) = [r for r in run.of_type(ROLE) if _in_component(run, r)]
    pairs = {
        (a.inputs["namespace"], a.inputs["serviceAccount"]): a.inputs["roleArn"]
        for a in run.of_type(ASSOCIATION)
    }
    assert pairs == {
        (JOBS_NAMESPACE, SERVICE_ACCOUNT): role.outputs["arn"],
        ("nlp", SERVICE_ACCOUNT): role.outputs["arn"],
        ("vision", SERVICE_ACCOUNT): role.outputs["arn"],
    }
    assert TEAM_SERVICE_ACCOUNT == SERVICE_ACCOUNT
    created = [a for a in run.of_type("kubernetes:core/v1:ServiceAccount") if _in_component(run, a)]
    assert [a.inputs["metadata"]["namespace"] for a in created] == [JOBS_NAMESPACE]


def test_a_prefix_from_config_narrows_the_policy() -> None:
    run = run_program(
        "dev",
        overrides={
            "dataBucket": {"prefix": "team-a/runs", "checkpointPrefix": "team-a/runs/checkpoints"}
        },
        secrets=SECRETS,
    )
    statements = {s["Sid"]: s for s in _policy(run)["Statement"]}
    assert statements["ObjectsUnderThePrefix"]["Resource"].endswith("/team-a/runs/*")
    condition = statements["ListThePrefix"]["Condition"]["StringLike"]["s3:prefix"]
    assert condition == ["team-a/runs", "team-a/runs/*"]
    assert run.outputs[outputs.DATA_BUCKET_PREFIX] == "team-a/runs"


@pytest.mark.parametrize("stack", STACKS)
def test_the_jobs_service_account_is_associated(runs: dict[str, ProgramRun], stack: str) -> None:
    run = runs[stack]
    (role,) = [r for r in run.of_type(ROLE) if _in_component(run, r)]
    assert not load_stack_file(stack).teams  # one association: the jobs namespace's
    (association,) = run.of_type(ASSOCIATION)
    assert association.inputs == {
        "clusterName": load_stack_file(stack).cluster_name,
        "namespace": JOBS_NAMESPACE,
        "serviceAccount": SERVICE_ACCOUNT,
        "roleArn": role.outputs["arn"],
        "tags": {"eks-fsdp/cluster": load_stack_file(stack).cluster_name},
    }
    (account,) = [
        a for a in run.of_type("kubernetes:core/v1:ServiceAccount") if _in_component(run, a)
    ]
    assert account.inputs["metadata"]["name"] == SERVICE_ACCOUNT
    assert account.inputs["metadata"]["namespace"] == JOBS_NAMESPACE
    assert account.inputs["automountServiceAccountToken"] is False
    provider = run.one("pulumi:providers:kubernetes", "cluster-k8s")
    assert account.provider.startswith(provider.urn + "::")
    assert account.urn in association.dependencies
    assert run.outputs[outputs.JOBS_SERVICE_ACCOUNT] == f"{JOBS_NAMESPACE}/{SERVICE_ACCOUNT}"


@pytest.mark.parametrize("stack", STACKS)
def test_the_node_role_gains_no_s3_access(runs: dict[str, ProgramRun], stack: str) -> None:
    """The node role keeps exactly its managed policies (ECR read-only is the one that touches a
    registry; it holds ``ecr:`` actions and no ``s3:`` one) and no inline policy."""
    run = runs[stack]
    node_role = run.one(ROLE, "cluster-node-role")
    on_node = [
        a.inputs["policyArn"]
        for a in run.of_type("aws:iam/rolePolicyAttachment:RolePolicyAttachment")
        if node_role.urn in a.property_dependencies.get("role", ())
    ]
    assert sorted(on_node) == sorted(NODE_POLICY_ARNS)
    assert not [p for p in on_node if "S3" in p]
    inline = [
        p
        for p in run.of_type("aws:iam/rolePolicy:RolePolicy")
        if node_role.urn in p.property_dependencies.get("role", ())
    ]
    assert inline == []


def test_pod_identity_args_validate_at_construction() -> None:
    ok: dict[str, Any] = {
        "cluster_name": "c",
        "label": "c",
        "bucket_arn": "arn:aws:s3:::b",
        "prefix": "training",
        "kms_key_arn": None,
        "service_accounts": (("default", "training"),),
    }
    PodIdentityArgs(**ok)
    for change, field in (
        ({"label": "bad name"}, "label"),
        ({"prefix": ""}, "prefix"),
        ({"prefix": "training/"}, "prefix"),
        ({"service_accounts": ()}, "service_accounts"),
        ({"service_accounts": (("Default", "training"),)}, "service_accounts"),
        ({"service_accounts": (("default", "t"), ("default", "t"))}, "service_accounts"),
        ({"create_service_accounts": (("other", "jobs"),)}, "create_service_accounts"),
    ):
        with pytest.raises(ValueError, match=f"^PodIdentityArgs.{field}"):
            PodIdentityArgs(**{**ok, **change})
