"""The policy pack (``policy/``) on every stack's resources, and on broken ones.

Mocked, and why: there is no Pulumi engine or AWS here. The program runs under Pulumi's
unit-test mocks (``tests/pulumi_mocks``); the resources it registers (inputs over the mock's
outputs, with the per-property dependencies the engine records) are written to JSON and handed
to ``policy/offline.py``, which calls every ``ResourceValidationPolicy.validate`` and
``StackValidationPolicy.validate`` of the pack, the calls ``pulumi preview --policy-pack policy``
makes, on the inputs only and wrapped as pulumi-policy's analyzer wraps them (wire ``Struct``,
``deserialize_properties``, ``unknown_checking_proxy``). Options, providers and config are
empty defaults there; the engine protocol itself is exercised by the last test. The pack runs in the tools virtualenv (``.venv-tools``, made by ``make setup``) because
pulumi-policy 1.21 pins protobuf 5 while the program's pulumi 3.272 runs on protobuf 6.

If these fail, either a stack would violate a rule at ``pulumi preview --policy-pack policy``
(a hop limit of 2, an admin policy on the node role, an open API endpoint, Secrets without
KMS, a data bucket without SSE-KMS, a public-access block or its TLS-only policy, an EKS
add-on build made for another Kubernetes minor...), or a rule has gone blind: each rule is fed a copy of the p5-16 (or p4de-odcr)
resources with exactly one thing broken and must fire, and only that rule may fire.
"""

from __future__ import annotations

import copy
import datetime as dt
import importlib.util
import json
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from infra import addon_versions, versions
from infra.cluster import CONTROL_PLANE_LOG_TYPES
from tests.pulumi_mocks import REPO_ROOT, ProgramRun, run_program

STACKS = ("dev", "p4de-odcr", "p5-16")
SECRETS = {"hfToken": "hf_mock", "grafanaAdminPassword": "mock-password"}
TOOLS_PYTHON = REPO_ROOT / ".venv-tools" / "bin" / "python"
OFFLINE = REPO_ROOT / "policy" / "offline.py"
Resources = list[dict[str, Any]]


def _tools() -> Path:
    if not TOOLS_PYTHON.is_file():
        pytest.fail(".venv-tools is missing: run `make setup` (it installs requirements-tools.txt)")
    return TOOLS_PYTHON


def as_policy_input(run: ProgramRun) -> Resources:
    """The resources as the engine hands them to a policy pack: props are the inputs only
    (``AnalyzeRequest.properties``; no provider outputs exist at preview)."""
    return [
        {
            "type": r.type,
            "name": r.name,
            "urn": r.urn,
            "props": dict(r.inputs),
            "propertyDependencies": {k: list(v) for k, v in r.property_dependencies.items()},
        }
        for r in run.resources
    ]


TODAY = "2026-11-30"
"""The day the standard-support rule judges on (pinned: 1.35 in support, 1.33 out)."""


def violations(resources: Resources, tmp_path: Path, today: str = TODAY) -> list[dict[str, str]]:
    path = tmp_path / "resources.json"
    path.write_text(json.dumps(resources, default=str))
    out = subprocess.run(
        [str(_tools()), str(OFFLINE), str(path), "--today", today],
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
    )
    return json.loads(out.stdout)  # type: ignore[no-any-return]


def with_pulumi_eks_children(res: Resources) -> Resources:
    """``res`` as the analyzer would see it under the real engine, as far as pulumi-eks goes.

    The mocks register pulumi-eks's ``eks:index:Cluster`` with its args and never run the
    component, so its children do not exist here. Under the engine the component shows props
    ``{}`` and its children carry the settings. This adds the three children the rules read,
    derived from the component's args by the mapping pulumi-eks v4 makes
    (``nodejs/eks/cluster/cluster.ts``: ``aws.eks.Cluster`` with ``vpcConfig``,
    ``encryptionConfig {provider: {keyArn}, resources: ["secrets"]}``, ``version``,
    ``enabledClusterLogTypes``; the ``kube-proxy`` ``aws.eks.Addon``; ``addons/cni-addon.ts``:
    the ``vpc-cni`` ``aws.eks.Addon`` whose ``configurationValues`` JSON holds
    ``enableNetworkPolicy: "true"|"false"``), and empties the component's props. It is a
    derivation, not an observation: the args themselves are checked in
    ``tests/infra/test_program.py``."""
    out = []
    for r in res:
        if r["type"] != "eks:index:Cluster":
            out.append(r)
            continue
        args = r["props"]
        out.append({**r, "props": {}})
        prefix = "::".join(r["urn"].split("::")[:3])
        name = r["name"]

        def child(
            type_: str, suffix: str, props: dict[str, Any], prefix: str = prefix, name: str = name
        ) -> dict[str, Any]:
            return {
                "type": type_,
                "name": f"{name}{suffix}",
                "urn": f"{prefix}${type_}::{name}{suffix}",
                "props": props,
                "propertyDependencies": {},
            }

        public = args.get("endpointPublicAccess", True)
        vpc_config: dict[str, Any] = {
            "endpointPrivateAccess": args.get("endpointPrivateAccess"),
            "endpointPublicAccess": public,
        }
        if args.get("publicAccessCidrs"):
            vpc_config["publicAccessCidrs"] = args["publicAccessCidrs"]
        control_plane: dict[str, Any] = {
            "name": args.get("name"),
            "version": args.get("version"),
            "enabledClusterLogTypes": args.get("enabledClusterLogTypes"),
            "vpcConfig": vpc_config,
        }
        if args.get("encryptionConfigKeyArn"):
            control_plane["encryptionConfig"] = {
                "provider": {"keyArn": args["encryptionConfigKeyArn"]},
                "resources": ["secrets"],
            }
        out.append(child("aws:eks/cluster:Cluster", "-eksCluster", control_plane))
        cni = args.get("vpcCniOptions") or {}
        values: dict[str, Any] = {"env": {}}
        if "enableNetworkPolicy" in cni:
            values["enableNetworkPolicy"] = "true" if cni["enableNetworkPolicy"] else "false"
        out.append(
            child(
                "aws:eks/addon:Addon",
                "-vpc-cni",
                {
                    "addonName": "vpc-cni",
                    "addonVersion": cni.get("addonVersion"),
                    "configurationValues": json.dumps(values),
                },
            )
        )
        proxy = args.get("kubeProxyAddonOptions") or {}
        out.append(
            child(
                "aws:eks/addon:Addon",
                "-kube-proxy",
                {"addonName": "kube-proxy", "addonVersion": proxy.get("version")},
            )
        )
    return out


@pytest.fixture(scope="module")
def resources() -> dict[str, Resources]:
    return {
        s: with_pulumi_eks_children(as_policy_input(run_program(s, secrets=SECRETS)))
        for s in STACKS
    }


@pytest.mark.parametrize("stack", STACKS)
def test_every_stack_passes_the_pack(
    resources: dict[str, Resources], stack: str, tmp_path: Path
) -> None:
    # Each stack registers the resource kinds the rules look at (a rule on nothing passes).
    kinds = {r["type"] for r in resources[stack]}
    assert {
        "aws:ec2/launchTemplate:LaunchTemplate",
        "aws:eks/cluster:Cluster",
        "aws:iam/rolePolicyAttachment:RolePolicyAttachment",
        "aws:eks/addon:Addon",
        "kubernetes:helm.sh/v3:Release",
        "kubernetes:networking.k8s.io/v1:NetworkPolicy",
        "aws:s3/bucket:Bucket",
    } <= kinds
    assert violations(resources[stack], tmp_path) == []


def _one(res: Resources, type_: str, name: str | None = None) -> dict[str, Any]:
    found = [r for r in res if r["type"] == type_ and (name is None or r["name"] == name)]
    assert len(found) == 1, (type_, name, len(found))
    return found[0]


def _lt(res: Resources) -> dict[str, Any]:
    """The GPU nodegroup's launch template."""
    (lt,) = [
        r
        for r in res
        if r["type"] == "aws:ec2/launchTemplate:LaunchTemplate" and r["name"] != "cluster-system-lt"
    ]
    return lt


def _eks(res: Resources) -> dict[str, Any]:
    """The control plane pulumi-eks creates (derived, see ``with_pulumi_eks_children``)."""
    return _one(res, "aws:eks/cluster:Cluster")


def _vpc_cni(res: Resources) -> dict[str, Any]:
    (addon,) = [
        r
        for r in res
        if r["type"] == "aws:eks/addon:Addon" and r["props"].get("addonName") == "vpc-cni"
    ]
    return addon


def hop_limit_2(res: Resources) -> None:
    _lt(res)["props"]["metadataOptions"]["httpPutResponseHopLimit"] = 2


def imds_v1(res: Resources) -> None:
    _lt(res)["props"]["metadataOptions"]["httpTokens"] = "optional"


def wildcard_action(res: Resources) -> None:
    role = _one(res, "aws:iam/role:Role", "cluster-ebs-csi-role")
    role["props"]["inlinePolicies"] = [
        {"name": "all", "policy": json.dumps({"Statement": [{"Effect": "Allow", "Action": "*"}]})}
    ]


def fsx_admin_on_node_role(res: Resources) -> None:
    attachment = next(
        r
        for r in res
        if r["type"] == "aws:iam/rolePolicyAttachment:RolePolicyAttachment"
        and r["name"].startswith("cluster-node-")
    )
    attachment["props"]["policyArn"] = (
        "arn:aws:iam::aws:policy/service-role/AmazonEBSCSIDriverPolicy"
    )


def full_access_on_irsa_role(res: Resources) -> None:
    """The FSx CSI controller's former grant, on the EBS CSI driver's IRSA role."""
    attachment = _one(
        res, "aws:iam/rolePolicyAttachment:RolePolicyAttachment", "cluster-ebs-csi-policy"
    )
    attachment["props"]["policyArn"] = "arn:aws:iam::aws:policy/AmazonFSxFullAccess"


def full_access_in_managed_policy_arns(res: Resources) -> None:
    role = _one(res, "aws:iam/role:Role", "cluster-ebs-csi-role")
    role["props"]["managedPolicyArns"] = ["arn:aws:iam::aws:policy/AmazonS3FullAccess"]


def public_node_subnet(res: Resources) -> None:
    ng = next(r for r in res if r["name"].startswith("gpu-") and r["name"].endswith("-ng"))
    (subnet_urn,) = ng["propertyDependencies"]["subnetIds"]
    next(r for r in res if r["urn"] == subnet_urn)["props"]["mapPublicIpOnLaunch"] = True


def public_ip_on_nic(res: Resources) -> None:
    _lt(res)["props"]["networkInterfaces"][0]["associatePublicIpAddress"] = "true"


def efa_sg_open_egress(res: Resources) -> None:
    rule = _one(
        res, "aws:vpc/securityGroupEgressRule:SecurityGroupEgressRule", "network-efa-egress-self"
    )
    rule["props"]["cidrIpv4"] = "0.0.0.0/0"
    rule["propertyDependencies"]["referencedSecurityGroupId"] = []


def _efa_sg(res: Resources) -> dict[str, Any]:
    urns = set(_lt(res)["propertyDependencies"]["networkInterfaces"])
    (sg,) = [
        r for r in res if r["urn"] in urns and r["type"] == "aws:ec2/securityGroup:SecurityGroup"
    ]
    return sg


def efa_sg_inline_open_ingress(res: Resources) -> None:
    _efa_sg(res)["props"]["ingress"] = [
        {"fromPort": 0, "toPort": 0, "protocol": "-1", "cidrBlocks": ["10.0.0.0/8"]}
    ]


def efa_sg_inline_egress_to_other_group(res: Resources) -> None:
    _efa_sg(res)["props"]["egress"] = [
        {"fromPort": 0, "toPort": 0, "protocol": "-1", "securityGroups": ["sg-0other"]}
    ]


def efa_sg_rule_open(res: Resources) -> None:
    """An ``aws:ec2/securityGroupRule`` on the EFA group admitting a CIDR."""
    sg = _efa_sg(res)
    res.append(
        {
            "type": "aws:ec2/securityGroupRule:SecurityGroupRule",
            "name": "efa-extra",
            "urn": sg["urn"]
            .rsplit("::", 1)[0]
            .replace(
                "aws:ec2/securityGroup:SecurityGroup", "aws:ec2/securityGroupRule:SecurityGroupRule"
            )
            + "::efa-extra",
            "props": {
                "type": "ingress",
                "fromPort": 0,
                "toPort": 0,
                "protocol": "-1",
                "cidrBlocks": ["0.0.0.0/0"],
            },
            "propertyDependencies": {"securityGroupId": [sg["urn"]]},
        }
    )


def unencrypted_root_volume(res: Resources) -> None:
    _lt(res)["props"]["blockDeviceMappings"][0]["ebs"]["encrypted"] = "false"


def persistent_fsx_without_kms(res: Resources) -> None:
    _one(res, "aws:fsx/lustreFileSystem:LustreFileSystem")["props"]["deploymentType"] = (
        "PERSISTENT_2"
    )


def secrets_without_kms(res: Resources) -> None:
    del _eks(res)["props"]["encryptionConfig"]


def partial_logging(res: Resources) -> None:
    _eks(res)["props"]["enabledClusterLogTypes"] = ["api", "audit", "authenticator"]


def open_api_endpoint(res: Resources) -> None:
    _eks(res)["props"]["vpcConfig"] = {"endpointPublicAccess": True}


def no_network_policy_enforcement(res: Resources) -> None:
    _vpc_cni(res)["props"]["configurationValues"] = json.dumps({"env": {}})


def unpinned_vpc_cni(res: Resources) -> None:
    _vpc_cni(res)["props"].pop("addonVersion")


def unpinned_chart(res: Resources) -> None:
    _one(res, "kubernetes:helm.sh/v3:Release", "device-plugins-efa")["props"].pop("version")


def unpinned_addon(res: Resources) -> None:
    addon = next(r for r in res if r["type"] == "aws:eks/addon:Addon")
    addon["props"].pop("addonVersion")


def placement_group_with_block(res: Resources) -> None:
    _lt(res)["props"]["placement"] = {"groupName": "p5-pg"}


def kubernetes_1_33(res: Resources) -> None:
    _eks(res)["props"]["version"] = "1.33"


def addon_outside_table(res: Resources) -> None:
    """CoreDNS v1.11, a build EKS lists for Kubernetes 1.32 and earlier, on a 1.35 cluster."""
    (coredns,) = [
        r
        for r in res
        if r["type"] == "aws:eks/addon:Addon" and r["props"].get("addonName") == "coredns"
    ]
    coredns["props"]["addonVersion"] = "v1.11.4-eksbuild.2"


def system_hop_limit_2(res: Resources) -> None:
    lt = _one(res, "aws:ec2/launchTemplate:LaunchTemplate", "cluster-system-lt")
    lt["props"]["metadataOptions"]["httpPutResponseHopLimit"] = 2


S3_SSE = "aws:s3/bucketServerSideEncryptionConfiguration:BucketServerSideEncryptionConfiguration"


def bucket_sse_s3(res: Resources) -> None:
    """The data bucket's default encryption downgraded to S3-managed keys."""
    rule = _one(res, S3_SSE)["props"]["rules"][0]
    rule["applyServerSideEncryptionByDefault"] = {"sseAlgorithm": "AES256"}


def bucket_without_encryption(res: Resources) -> None:
    res.remove(_one(res, S3_SSE))


def bucket_public_policy_allowed(res: Resources) -> None:
    _one(res, "aws:s3/bucketPublicAccessBlock:BucketPublicAccessBlock")["props"][
        "blockPublicPolicy"
    ] = False


def bucket_without_tls_policy(res: Resources) -> None:
    res.remove(_one(res, "aws:s3/bucketPolicy:BucketPolicy"))


def gpu_job_without_queue(res: Resources) -> None:
    """A PyTorchJob asking for 8 GPUs, with no labels (so no Kueue queue)."""
    res.append(
        {
            "type": "kubernetes:kubeflow.org/v1:PyTorchJob",
            "name": "unqueued",
            "urn": "urn:pulumi:p5-16::eks-fsdp::kubernetes:kubeflow.org/v1:PyTorchJob::unqueued",
            "props": {
                "apiVersion": "kubeflow.org/v1",
                "kind": "PyTorchJob",
                "metadata": {"name": "unqueued", "namespace": "default"},
                "spec": {
                    "pytorchReplicaSpecs": {
                        "Worker": {
                            "replicas": 2,
                            "template": {
                                "spec": {
                                    "containers": [
                                        {
                                            "name": "pytorch",
                                            "image": "r/t:1",
                                            "resources": {"limits": {"nvidia.com/gpu": 8}},
                                        }
                                    ]
                                }
                            },
                        }
                    }
                },
            },
            "propertyDependencies": {},
        }
    )


def _karpenter_pool(kind: str) -> dict[str, Any]:
    """The p4de-odcr pool's Karpenter object of ``kind`` as the pack sees it (props: the
    object's fields), valid as ``workloads.specs.karpenter`` builds it."""
    from infra.config import parse
    from tests.pulumi_mocks import stack_config
    from workloads.specs import karpenter

    raw = copy.deepcopy(stack_config("p4de-odcr"))
    raw["gpuNodeGroups"] = [
        {**g, "provisioner": "karpenter", "minSize": 0} for g in raw["gpuNodeGroups"]
    ]
    cfg = parse(raw, stack="p4de-odcr")
    (nodeclass, nodepool) = karpenter.pool_objects(cfg.gpu_node_groups[0], cfg.cluster_name)
    obj = nodepool if kind == "NodePool" else nodeclass
    type_ = f"kubernetes:{obj['apiVersion']}:{kind}"
    return {
        "type": type_,
        "name": f"karpenter-p4de-odcr-{kind.lower()}",
        "urn": f"urn:pulumi:p4de-odcr::eks-fsdp::{type_}::karpenter-p4de-odcr-{kind.lower()}",
        "props": copy.deepcopy(obj),
        "propertyDependencies": {},
    }


def karpenter_consolidates_busy_nodes(res: Resources) -> None:
    pool = _karpenter_pool("NodePool")
    pool["props"]["spec"]["disruption"]["consolidationPolicy"] = "WhenEmptyOrUnderutilized"
    res.append(pool)


def karpenter_nodes_expire(res: Resources) -> None:
    pool = _karpenter_pool("NodePool")
    del pool["props"]["spec"]["template"]["spec"]["expireAfter"]  # the default: 720h
    res.append(pool)


def karpenter_ami_latest(res: Resources) -> None:
    nodeclass = _karpenter_pool("EC2NodeClass")
    nodeclass["props"]["spec"]["amiSelectorTerms"] = [{"alias": "al2023@latest"}]
    res.append(nodeclass)


def karpenter_hop_limit_2(res: Resources) -> None:
    nodeclass = _karpenter_pool("EC2NodeClass")
    nodeclass["props"]["spec"]["metadataOptions"]["httpPutResponseHopLimit"] = 2
    res.append(nodeclass)


def karpenter_unencrypted_root(res: Resources) -> None:
    nodeclass = _karpenter_pool("EC2NodeClass")
    nodeclass["props"]["spec"]["blockDeviceMappings"][0]["ebs"]["encrypted"] = False
    res.append(nodeclass)


BROKEN: list[tuple[str, str, Callable[[Resources], None]]] = [
    ("imdsv2-hop-limit-1", "p5-16", hop_limit_2),
    ("imdsv2-hop-limit-1", "dev", system_hop_limit_2),
    ("imdsv2-hop-limit-1", "p5-16", imds_v1),
    ("no-wildcard-iam-actions", "p5-16", wildcard_action),
    ("no-storage-admin-on-node-roles", "p5-16", fsx_admin_on_node_role),
    ("no-full-access-managed-policies", "p5-16", full_access_on_irsa_role),
    ("no-full-access-managed-policies", "dev", full_access_in_managed_policy_arns),
    ("no-public-ips-on-nodes", "p5-16", public_node_subnet),
    ("no-public-ip-on-node-interfaces", "p5-16", public_ip_on_nic),
    ("efa-security-group-self-only", "p5-16", efa_sg_open_egress),
    ("efa-security-group-self-only", "p5-16", efa_sg_inline_open_ingress),
    ("efa-security-group-self-only", "p4de-odcr", efa_sg_inline_egress_to_other_group),
    ("efa-security-group-self-only", "p5-16", efa_sg_rule_open),
    ("encryption-at-rest", "p5-16", unencrypted_root_volume),
    ("encryption-at-rest", "p4de-odcr", persistent_fsx_without_kms),
    ("eks-secrets-kms", "p5-16", secrets_without_kms),
    ("eks-control-plane-logging", "p5-16", partial_logging),
    ("eks-api-endpoint-restricted", "p5-16", open_api_endpoint),
    ("network-policy-enforced", "p5-16", no_network_policy_enforcement),
    ("pinned-versions", "p5-16", unpinned_chart),
    ("pinned-versions", "p4de-odcr", unpinned_addon),
    ("pinned-versions", "dev", unpinned_vpc_cni),
    ("no-placement-group-with-capacity-block", "p5-16", placement_group_with_block),
    ("gpu-jobs-name-a-queue", "p5-16", gpu_job_without_queue),
    ("eks-standard-support", "p5-16", kubernetes_1_33),
    ("addon-versions-fit-cluster", "p4de-odcr", addon_outside_table),
    ("s3-bucket-encrypted-kms", "p5-16", bucket_sse_s3),
    ("s3-bucket-encrypted-kms", "dev", bucket_without_encryption),
    ("s3-bucket-private", "p5-16", bucket_public_policy_allowed),
    ("s3-bucket-private", "p4de-odcr", bucket_without_tls_policy),
    ("karpenter-keeps-training-nodes", "p4de-odcr", karpenter_consolidates_busy_nodes),
    ("karpenter-keeps-training-nodes", "p4de-odcr", karpenter_nodes_expire),
    ("pinned-versions", "p4de-odcr", karpenter_ami_latest),
    ("imdsv2-hop-limit-1", "p4de-odcr", karpenter_hop_limit_2),
    ("encryption-at-rest", "p4de-odcr", karpenter_unencrypted_root),
]


ALSO_FIRES: dict[str, set[str]] = {
    # A 1.33 control plane under the 1.35 add-on pins is broken twice: out of standard support,
    # and kube-proxy v1.35 plus the add-ons with 1.35 rows only do not fit it (the program's
    # Cluster refuses this stack for the same reason, infra.addon_versions.pinned_problems).
    # ``test_standard_support_is_judged_on_the_preview_day`` shows the support rule alone.
    "kubernetes_1_33": {"addon-versions-fit-cluster"},
}
"""Broken inputs that rightly break a second rule too: the exact set expected."""


@pytest.mark.parametrize(
    ("policy", "stack", "breaks"), BROKEN, ids=[b.__name__ for _, _, b in BROKEN]
)
def test_each_rule_fires_on_its_broken_input_and_only_it(
    resources: dict[str, Resources],
    policy: str,
    stack: str,
    breaks: Callable[[Resources], None],
    tmp_path: Path,
) -> None:
    broken = copy.deepcopy(resources[stack])
    breaks(broken)
    found = violations(broken, tmp_path)
    assert found, f"{policy} did not fire on {breaks.__name__}"
    assert {v["policy"] for v in found} == {policy, *ALSO_FIRES.get(breaks.__name__, ())}, found
    assert {v["level"] for v in found} == {"mandatory"}, found
    assert all(v["urn"] for v in found)


def test_a_stack_with_the_sns_alert_receiver_passes_the_pack(tmp_path: Path) -> None:
    """The Alertmanager's Pod Identity role (receiver sns: sns:Publish on one topic, its own
    trust policy and association) breaks no rule."""
    observability = {
        "enabled": True,
        "dcgm": True,
        "alerts": {"receiver": "sns", "snsTopicArn": "arn:aws:sns:us-east-2:123456789012:alerts"},
    }
    run = run_program("p5-16", overrides={"observability": observability}, secrets=SECRETS)
    res = with_pulumi_eks_children(as_policy_input(run))
    (policy,) = [r for r in res if r["name"] == "alertmanager-sns-policy"]
    assert json.loads(policy["props"]["policy"])["Statement"][0]["Action"] == "sns:Publish"
    assert violations(res, tmp_path) == []


def test_a_stack_with_a_karpenter_pool_passes_the_pack(tmp_path: Path) -> None:
    """The Karpenter controller (IAM, queue, rules, chart) and a pool's EC2NodeClass and
    NodePool break no rule, and the Karpenter rules do see the pool's objects."""
    raw = stack_config_for_karpenter()
    run = run_program("p4de-odcr", overrides={"gpuNodeGroups": raw}, secrets=SECRETS)
    res = with_pulumi_eks_children(as_policy_input(run))
    kinds = {r["type"] for r in res}
    assert {
        "kubernetes:karpenter.sh/v1:NodePool",
        "kubernetes:karpenter.k8s.aws/v1:EC2NodeClass",
        "aws:iam/policy:Policy",
    } <= kinds
    assert violations(res, tmp_path) == []


def stack_config_for_karpenter() -> list[dict[str, Any]]:
    """p4de-odcr's GPU pools switched to Karpenter."""
    from tests.pulumi_mocks import stack_config

    raw = copy.deepcopy(stack_config("p4de-odcr"))
    return [{**g, "provisioner": "karpenter", "minSize": 0} for g in raw["gpuNodeGroups"]]


def test_standard_support_is_judged_on_the_preview_day(
    resources: dict[str, Resources], tmp_path: Path
) -> None:
    """The default version passes on its last day of standard support and fails the day
    after; only the rule sees the date (stack parsing is undated)."""
    end = versions.EKS_STANDARD_SUPPORT_END[versions.KUBERNETES_VERSION]
    stack = resources["p5-16"]
    assert violations(stack, tmp_path, end.isoformat()) == []
    late = violations(stack, tmp_path, (end + dt.timedelta(days=1)).isoformat())
    assert {v["policy"] for v in late} == {"eks-standard-support"}, late


def test_pulumi_eks_component_as_the_engine_shows_it_is_not_applicable(
    resources: dict[str, Resources], tmp_path: Path
) -> None:
    """Under the engine ``eks:index:Cluster`` arrives with props ``{}``; no rule may read it.
    Before, six rules read its args and would have failed every real preview. The other
    resources are the p5-16 stack's, with the component alone (its children removed)."""
    alone = [
        r
        for r in copy.deepcopy(resources["p5-16"])
        if r["type"] != "aws:eks/cluster:Cluster"
        and not (r["type"] == "aws:eks/addon:Addon" and "eks:index:Cluster$" in r["urn"])
    ]
    assert _one(alone, "eks:index:Cluster")["props"] == {}
    assert violations(alone, tmp_path) == []


def test_props_arrive_as_the_analyzer_prepares_them(tmp_path: Path) -> None:
    """An unknown input (a preview's ``04da6b54-...`` sentinel) makes the reading rule report at
    advisory level instead of crashing or passing, as the analyzer servicer does; and an
    integer hop limit passes after the wire turns it into a float."""
    unknown = "04da6b54-80e4-46f7-96ec-b56ff0331ba9"  # pulumi's UNKNOWN sentinel
    base = {
        "type": "aws:ec2/launchTemplate:LaunchTemplate",
        "name": "lt",
        "urn": "urn:pulumi:s::eks-fsdp::aws:ec2/launchTemplate:LaunchTemplate::lt",
        "propertyDependencies": {},
    }
    known = {
        **base,
        "props": {"metadataOptions": {"httpTokens": "required", "httpPutResponseHopLimit": 1}},
    }
    assert violations([known], tmp_path) == []
    pending = {
        **base,
        "props": {"metadataOptions": {"httpTokens": unknown, "httpPutResponseHopLimit": 1}},
    }
    found = violations([pending], tmp_path)
    assert [(v["policy"], v["level"]) for v in found] == [("imdsv2-hop-limit-1", "advisory")]


def test_every_rule_has_a_broken_input_and_the_pack_shares_the_infra_facts() -> None:
    out = subprocess.run(
        [str(_tools()), str(OFFLINE), "--facts"],
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
    )
    facts = json.loads(out.stdout)
    assert set(facts["policies"]) == {p for p, _, _ in BROKEN}
    assert facts["standardSupportEnd"] == {
        v: d.isoformat() for v, d in versions.EKS_STANDARD_SUPPORT_END.items()
    }
    assert facts["logTypes"] == list(CONTROL_PLANE_LOG_TYPES)
    assert facts["addonSeries"] == {
        name: {minor: list(series) for minor, series in rule.series.items()}
        for name, rule in addon_versions.RULES.items()
    }


def test_the_pack_judges_add_on_versions_as_infra_does() -> None:
    """The pack's copy of ``addon_version_problem`` (it cannot import ``infra``) gives the
    same verdict as ``infra.addon_versions`` on every pinned build, builds one minor either
    side, a malformed version and an unknown add-on, on every minor either table knows."""
    spec = importlib.util.spec_from_file_location(
        "pack_addons", REPO_ROOT / "policy" / "addon_versions.py"
    )
    assert spec is not None and spec.loader is not None
    pack = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(pack)
    minors = {m for r in addon_versions.RULES.values() for m in r.series} | {"1.32", "1.36"}
    cases = [("no-such-addon", "v1.0.0-eksbuild.1"), ("coredns", "1.13.2")]
    for name, version in addon_versions.PINNED.items():
        major, minor, rest = version[1:].split(".", 2)
        cases += [(name, version)] + [
            (name, f"v{major}.{int(minor) + d}.{rest}") for d in (-1, 1) if int(minor) + d >= 0
        ]
    verdicts = 0
    for name, version in cases:
        for k8s in sorted(minors):
            ours = addon_versions.addon_version_problem(name, version, k8s)
            theirs = pack.addon_version_problem(name, version, k8s)
            assert (ours is None) == (theirs is None), (name, version, k8s, ours, theirs)
            verdicts += ours is None
    assert verdicts >= len(addon_versions.PINNED)  # every pin fits 1.35, at least
    both = "infra/addon_versions.py and policy/addon_versions.py"
    for table in (addon_versions, pack):  # a missing row names both tables to add it to
        assert both in table.addon_version_problem("no-such-addon", "v1.0.0-eksbuild.1", "1.35")


ENGINE_CHECK = """
import json, os, subprocess, sys
import grpc
from google.protobuf import empty_pb2, struct_pb2
from pulumi.runtime.proto import analyzer_pb2, analyzer_pb2_grpc

# pulumi_policy (policy.py, PolicyPack.__init__) writes the port to sys.stdout.buffer without a
# flush: on a pipe it would sit in the buffer until the pack exits unless Python runs
# unbuffered, which the test must not leave to the caller's environment.
pack = subprocess.Popen([sys.executable, "policy"], stdout=subprocess.PIPE, text=True,
                        env={**os.environ, "PYTHONUNBUFFERED": "1"})
try:
    port = int(pack.stdout.readline().strip())  # the engine reads the port the same way
    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    grpc.channel_ready_future(channel).result(timeout=60)
    stub = analyzer_pb2_grpc.AnalyzerStub(channel)
    info = stub.GetAnalyzerInfo(empty_pb2.Empty())
    out = {"name": info.name, "policies": [p.name for p in info.policies], "verdicts": []}
    for hops in (2, 1):
        props = struct_pb2.Struct()
        props.update({"metadataOptions": {"httpTokens": "required",
                                          "httpPutResponseHopLimit": hops}})
        response = stub.Analyze(analyzer_pb2.AnalyzeRequest(
            type="aws:ec2/launchTemplate:LaunchTemplate", properties=props, name="lt",
            urn="urn:pulumi:s::eks-fsdp::aws:ec2/launchTemplate:LaunchTemplate::lt"))
        out["verdicts"].append([(d.policyName, d.enforcementLevel) for d in response.diagnostics])
    print(json.dumps(out))
finally:
    pack.terminate()
    pack.wait()
"""


def test_the_pack_serves_the_engine_protocol() -> None:
    """``policy/`` started the way the Pulumi CLI starts a Python pack (its folder run by the
    pack's interpreter, the port read from stdout) answers the analyzer gRPC calls: it names
    every rule, and Analyze reports a hop limit of 2 as a MANDATORY violation and passes 1."""
    out = subprocess.run(
        [str(_tools()), "-c", ENGINE_CHECK],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
    )
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["name"] == "eks-fsdp-security"
    assert set(result["policies"]) == {p for p, _, _ in BROKEN}
    mandatory = 1  # pulumirpc.EnforcementLevel.MANDATORY
    assert result["verdicts"] == [[["imdsv2-hop-limit-1", mandatory]], []]
