"""The jobs' AWS identity (EKS Pod Identity, ``infra.pod_identity``) in the real Pulumi program.

Mocked, and why: there is no Pulumi CLI/engine, no AWS account and no Kubernetes API server
here, so ``tests/pulumi_mocks.run_program`` replaces the engine's resource monitor with Pulumi's
unit-test mocks (providers echo their inputs plus made-up ids and ARNs). Everything else is the
real program. The IAM documents are read as the engine would send them to IAM.

If these fail, a training pod could not reach its checkpoints and exports in S3 (no agent, no
association, an association to another namespace or ServiceAccount than the jobs use, a role
anything but EKS Pod Identity could assume), or it could reach more than its prefix (the whole
bucket, every bucket, any KMS key), or the node role, which every pod on a node would share if
IMDS were reachable, gained S3 access; or the ``eks-pod-identity-agent`` add-on would be made
twice, or move (delete and create) when the data bucket or the SNS alert receiver is toggled,
or an existing stack's add-on would be replaced instead of kept under its new name.
"""

from __future__ import annotations

import json
from pathlib import Path
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
ADDON = "aws:eks/addon:Addon"


@pytest.fixture(scope="module")
def runs() -> dict[str, ProgramRun]:
    return {stack: run_program(stack, secrets=SECRETS) for stack in STACKS}


def _in_component(run: ProgramRun, resource: RecordedResource) -> bool:
    parent = run.by_urn(resource.parent)
    return parent is not None and parent.type == COMPONENT


def _policy(run: ProgramRun) -> dict[str, Any]:
    (policy,) = [r for r in run.of_type("aws:iam/rolePolicy:RolePolicy") if _in_component(run, r)]
    return json.loads(policy.inputs["policy"])  # type: ignore[no-any-return]


def _agents(run: ProgramRun) -> list[RecordedResource]:
    return [a for a in run.of_type(ADDON) if a.inputs["addonName"] == "eks-pod-identity-agent"]


@pytest.mark.parametrize("stack", STACKS)
def test_the_agent_add_on_is_pinned_and_after_the_nodes(
    runs: dict[str, ProgramRun], stack: str
) -> None:
    run = runs[stack]
    (agent,) = _agents(run)
    assert agent.inputs["addonVersion"] == versions.POD_IDENTITY_AGENT_ADDON_VERSION
    assert agent.inputs["clusterName"] == load_stack_file(stack).cluster_name
    system = run.one("aws:eks/nodeGroup:NodeGroup", "cluster-system")
    assert system.urn in agent.dependencies
    (association,) = run.of_type(ASSOCIATION)
    assert agent.urn in association.dependencies


@pytest.mark.parametrize(
    ("bucket", "sns"), [(True, False), (False, True), (True, True), (False, False)]
)
def test_one_agent_whichever_needs_it(bucket: bool, sns: bool) -> None:
    """The data bucket's roles and Alertmanager's SNS role share one add-on, at one URN
    whichever of them is on: toggling ``dataBucket.enabled`` on an ``sns`` stack neither
    deletes the cluster's agent nor creates a second (EKS ``CreateAddon`` refuses one:
    ResourceInUseException)."""
    topic = "arn:aws:sns:us-east-1:123456789012:gpu-alerts"
    alerts = {"receiver": "sns", "snsTopicArn": topic} if sns else {"receiver": "none"}
    run = run_program(
        "p4de-odcr",
        overrides={
            "dataBucket": {"enabled": bucket},
            "observability": {"enabled": True, "alerts": alerts},
        },
        secrets=SECRETS,
    )
    agents = _agents(run)
    if not (bucket or sns):
        assert agents == []
        assert run.of_type(ASSOCIATION) == []
        return
    (agent,) = agents
    assert agent.name == "pod-identity-agent"
    assert run.by_urn(agent.parent) is None  # the stack's, in no component
    associations = run.of_type(ASSOCIATION)
    assert len(associations) == bucket + sns
    assert all(agent.urn in a.dependencies for a in associations)


ALIAS_PROGRAM = """
import pulumi
import pulumi_aws as aws

from infra.pod_identity import POD_ROLE_TYPE_TOKEN, TYPE_TOKEN, pod_identity_agent

# where the add-on was: a child "<component>-agent" of PodIdentity or of PodRole
before = []
for token, name in ((TYPE_TOKEN, "pod-identity"), (POD_ROLE_TYPE_TOKEN, "alertmanager-sns")):
    component = pulumi.ComponentResource(token, name)
    addon = aws.eks.Addon(
        f"{name}-agent",
        cluster_name="c",
        addon_name="eks-pod-identity-agent",
        opts=pulumi.ResourceOptions(parent=component),
    )
    before.append(addon.urn)
agent = pod_identity_agent(
    "pod-identity-agent",
    cluster_name="c",
    label="c",
    formerly=((TYPE_TOKEN, "pod-identity"), (POD_ROLE_TYPE_TOKEN, "alertmanager-sns")),
)
pulumi.export("before", before)
pulumi.export("aliases", agent._aliases)
"""


def test_the_aliases_name_where_the_agent_was(tmp_path: Path) -> None:
    """An existing stack's add-on moves to the new URN instead of being replaced: each alias
    resolves to the URN the SDK gave the add-on under PodIdentity or PodRole before. The
    aliases are read as the SDK resolves them for an engine (``Resource._aliases``); the
    engine itself is mocked."""
    program = tmp_path / "aliases.py"
    program.write_text(ALIAS_PROGRAM)
    run = run_program("dev", secrets=SECRETS, program=program)
    before = run.outputs["before"]
    names = ("pod-identity-agent", "alertmanager-sns-agent")
    assert [urn.rsplit("::", 1)[1] for urn in before] == list(names)
    assert sorted(run.outputs["aliases"]) == sorted(before)


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
        # the add-on is only depended on, not inspected, at construction
        "agent": object(),
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
