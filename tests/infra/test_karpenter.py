"""Karpenter as a GPU pool's provisioner, under Pulumi's mocks: the controller and its pools.

If these fail, a stack with a ``provisioner: karpenter`` pool would install an unpinned chart or
none, give the controller more (or less) than upstream's policies at the pinned release
(aws/karpenter-provider-aws ``website/content/en/docs/getting-started/getting-started-with-
karpenter/cloudformation.yaml``), lose Spot, rebalance, health or capacity-reservation
interruption notices (no queue, or a rule that does not feed it), leave Karpenter's nodes unable
to join (no EC2_LINUX access entry for their role), run the controller on the nodes it manages,
or create a managed node group beside the pool; and a stack without such a pool would gain
any of it. A capacity type or field the pinned Karpenter lacks must stop the stack with one line.

Mocked, and why: there is no Pulumi engine and no AWS account here (``tests/pulumi_mocks``);
the chart is not fetched (a ``helm.v3.Release`` under mocks is its inputs).
"""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from infra import versions
from infra.capacity_schedule import OUTPUT_KEY as CAPACITY_BLOCKS
from infra.cluster import NODE_POLICY_ARNS
from infra.config import ConfigError, parse
from infra.karpenter import INTERRUPTION_EVENTS, controller_policies
from tests.pulumi_mocks import ACCOUNT, ProgramRun, run_program, stack_config
from workloads.specs import karpenter as spec
from workloads.specs.capacity import capacity_block_configmap
from workloads.specs.stack import JOBS_NAMESPACE

SECRETS = {"hfToken": "hf_mock", "grafanaAdminPassword": "mock-password"}
RELEASE = "kubernetes:helm.sh/v3:Release"
NG = "aws:eks/nodeGroup:NodeGroup"
UPSTREAM_SIDS = {
    "node-lifecycle": [
        "AllowScopedEC2InstanceAccessActions",
        "AllowScopedEC2LaunchTemplateAccessActions",
        "AllowScopedEC2InstanceActionsWithTags",
        "AllowScopedResourceCreationTagging",
        "AllowScopedResourceTagging",
        "AllowScopedDeletion",
    ],
    "iam-integration": [
        "AllowPassingInstanceRole",
        "AllowScopedInstanceProfileCreationActions",
        "AllowScopedInstanceProfileTagActions",
        "AllowScopedInstanceProfileActions",
    ],
    "eks-integration": ["AllowAPIServerEndpointDiscovery"],
    "interruption": ["AllowInterruptionQueueActions"],
    "resource-discovery": [
        "AllowRegionalReadActions",
        "AllowSSMReadActions",
        "AllowPricingReadActions",
        "AllowUnscopedInstanceProfileListAction",
        "AllowInstanceProfileReadActions",
    ],
}
"""The Sids of upstream's five controller policies at v1.14.1 (the zonal-shift one is left out)."""


def karpenter_raw(stack: str = "p4de-odcr", **extra: Any) -> dict[str, Any]:
    raw = copy.deepcopy(stack_config(stack))
    raw["gpuNodeGroups"] = [
        {**g, "provisioner": "karpenter", "minSize": 0, **extra} for g in raw["gpuNodeGroups"]
    ]
    return raw


@pytest.fixture(scope="module")
def run() -> ProgramRun:
    raw = karpenter_raw()
    return run_program(
        "p4de-odcr", overrides={"gpuNodeGroups": raw["gpuNodeGroups"]}, secrets=SECRETS
    )


def _release(run: ProgramRun) -> Any:
    (release,) = [r for r in run.of_type(RELEASE) if r.inputs.get("name") == "karpenter"]
    return release


def test_the_controller_chart_is_pinned_and_set_up(run: ProgramRun) -> None:
    release = _release(run)
    assert release.inputs["chart"] == versions.KARPENTER_CHART
    assert release.inputs["version"] == versions.KARPENTER_VERSION != "latest"
    assert release.inputs["namespace"] == versions.KARPENTER_NAMESPACE
    values = release.inputs["values"]
    assert values["settings"]["clusterName"] == "eks-fsdp-p4de"
    (queue,) = run.of_type("aws:sqs/queue:Queue")
    assert values["settings"]["interruptionQueue"] == queue.inputs["name"]
    # on the system node group: the managed nodes' label, not a Karpenter node
    assert values["nodeSelector"]["eks-fsdp/nodegroup"] == "system"
    (role,) = [r for r in run.of_type("aws:iam/role:Role") if r.name == "karpenter-controller-role"]
    assert values["serviceAccount"]["annotations"] == {
        "eks.amazonaws.com/role-arn": role.outputs["arn"]
    }
    assert values["replicas"] == 2
    # the region told, not read from IMDS (out of a pod's reach at hop limit 1)
    assert values["controller"]["env"] == [{"name": "AWS_REGION", "value": "us-east-1"}]
    # after its IAM, its queue and the node role's access entry
    access = run.one("aws:eks/accessEntry:AccessEntry")
    assert {access.urn, queue.urn} <= set(release.dependencies)
    # through the cluster's Kubernetes provider
    (provider,) = run.of_type("pulumi:providers:kubernetes")
    assert release.provider.startswith(provider.urn)


def test_kueue_waits_for_the_nodes_karpenter_launches(run: ProgramRun) -> None:
    """The stack's Kueue chart carries the longer ``waitForPodsReady.timeout`` of a stack with a
    Karpenter pool (``workloads.specs.kueue.stack_settings``)."""
    import yaml

    from workloads.specs import kueue

    (release,) = [r for r in run.of_type(RELEASE) if r.inputs.get("name") == "kueue"]
    config = release.inputs["values"]["managerConfig"]["controllerManagerConfigYaml"]
    wait = yaml.safe_load(config)["waitForPodsReady"]
    assert wait["timeout"] == f"{kueue.KARPENTER_PODS_READY_TIMEOUT_S}s" == "1200s"


def test_the_crds_are_their_own_release_and_come_first(run: ProgramRun) -> None:
    """Helm installs a chart's ``crds/`` on first install only, so the controller's chart alone
    would never upgrade them; upstream's upgrade guide (website/content/en/docs/upgrading/
    upgrade-guide.md at v1.14.1, "CRD Upgrades") recommends the ``karpenter-crd`` chart. Ours
    is that chart at the controller's version, through the same provider, and the controller's
    release skips its own copy and waits for it."""
    (crds,) = [r for r in run.of_type(RELEASE) if r.inputs.get("name") == "karpenter-crd"]
    assert crds.inputs["chart"] == "oci://public.ecr.aws/karpenter/karpenter-crd"
    assert crds.inputs["chart"] == versions.KARPENTER_CRD_CHART
    assert crds.inputs["version"] == versions.KARPENTER_VERSION
    assert crds.inputs["namespace"] == versions.KARPENTER_NAMESPACE
    assert not crds.inputs.get("skipCrds")
    release = _release(run)
    assert release.inputs["skipCrds"] is True
    assert crds.urn in release.dependencies
    assert crds.provider == release.provider
    # the pools' objects wait for the controller, hence for the CRDs
    for token in ("karpenter.k8s.aws/v1:EC2NodeClass", "karpenter.sh/v1:NodePool"):
        assert release.urn in run.one(f"kubernetes:{token}").dependencies


def test_the_controller_role_is_irsa_for_its_service_account(run: ProgramRun) -> None:
    (role,) = [r for r in run.of_type("aws:iam/role:Role") if r.name == "karpenter-controller-role"]
    (statement,) = json.loads(role.inputs["assumeRolePolicy"])["Statement"]
    assert statement["Action"] == "sts:AssumeRoleWithWebIdentity"
    (sub,) = [v for k, v in statement["Condition"]["StringEquals"].items() if k.endswith(":sub")]
    assert sub == f"system:serviceaccount:{versions.KARPENTER_NAMESPACE}:{spec.SERVICE_ACCOUNT}"


def test_controller_policies_are_upstreams_statements(run: ProgramRun) -> None:
    policies = {
        p.name.removeprefix("karpenter-"): json.loads(p.inputs["policy"])
        for p in run.of_type("aws:iam/policy:Policy")
    }
    assert {k: [s["Sid"] for s in d["Statement"]] for k, d in policies.items()} == UPSTREAM_SIDS
    # each attached to the controller role, and nothing else is
    controller = run.one("aws:iam/role:Role", "karpenter-controller-role")
    arns = {p.outputs["arn"] for p in run.of_type("aws:iam/policy:Policy")}
    on_controller = {
        a.inputs["policyArn"]
        for a in run.of_type("aws:iam/rolePolicyAttachment:RolePolicyAttachment")
        if a.inputs["role"] == controller.outputs["name"]
    }
    assert on_controller == arns and len(arns) == 5
    node_role = run.one("aws:iam/role:Role", "karpenter-node-role")
    (queue,) = run.of_type("aws:sqs/queue:Queue")
    by_sid = {s["Sid"]: s for d in policies.values() for s in d["Statement"]}
    # PassRole only of the node role, only to EC2
    assert by_sid["AllowPassingInstanceRole"]["Resource"] == node_role.outputs["arn"]
    assert by_sid["AllowScopedDeletion"]["Condition"]["StringEquals"] == {
        "aws:ResourceTag/kubernetes.io/cluster/eks-fsdp-p4de": "owned"
    }
    assert by_sid["AllowInterruptionQueueActions"]["Resource"] == queue.outputs["arn"]
    assert by_sid["AllowAPIServerEndpointDiscovery"]["Resource"] == (
        f"arn:aws:eks:us-east-1:{ACCOUNT}:cluster/eks-fsdp-p4de"
    )
    # Resource "*" only where upstream has it: reads
    unscoped = {sid for sid, s in by_sid.items() if s["Resource"] == "*"}
    assert unscoped == {
        "AllowRegionalReadActions",
        "AllowPricingReadActions",
        "AllowUnscopedInstanceProfileListAction",
    }
    # every mutating EC2 statement is conditioned on the cluster's tag, but the one on the
    # shared inputs (images, subnets, security groups, reservations, placement groups)
    for sid in UPSTREAM_SIDS["node-lifecycle"][1:]:
        assert "eks-fsdp-p4de" in json.dumps(by_sid[sid]["Condition"]), sid


def test_policies_are_pure_and_regional() -> None:
    docs = controller_policies(
        partition="aws-cn",
        region="cn-north-1",
        account="210987654321",
        cluster_name="c",
        node_role_arn="arn:aws-cn:iam::210987654321:role/KarpenterNodeRole-c",
        queue_arn="arn:aws-cn:sqs:cn-north-1:210987654321:c-karpenter",
    )
    text = json.dumps(docs)
    assert "arn:aws:" not in text and "us-" not in text
    read = docs["resource-discovery"]["Statement"][0]
    assert read["Condition"] == {"StringEquals": {"aws:RequestedRegion": "cn-north-1"}}


def test_the_interruption_queue_and_its_rules(run: ProgramRun) -> None:
    (queue,) = run.of_type("aws:sqs/queue:Queue")
    assert queue.inputs["name"] == spec.interruption_queue_name("eks-fsdp-p4de")
    assert queue.inputs["messageRetentionSeconds"] == 300
    assert queue.inputs["sqsManagedSseEnabled"] is True
    policy = json.loads(run.one("aws:sqs/queuePolicy:QueuePolicy").inputs["policy"])
    allow, deny = policy["Statement"]
    assert allow["Principal"]["Service"] == ["events.amazonaws.com", "sqs.amazonaws.com"]
    assert allow["Action"] == "sqs:SendMessage" and allow["Resource"] == queue.outputs["arn"]
    assert deny["Effect"] == "Deny" and deny["Condition"] == {
        "Bool": {"aws:SecureTransport": "false"}
    }
    rules = {r.name: json.loads(r.inputs["eventPattern"]) for r in run.of_type(
        "aws:cloudwatch/eventRule:EventRule")}  # fmt: skip
    assert rules == {f"karpenter-{k}": v for k, v in INTERRUPTION_EVENTS.items()}
    detail_types = {t for p in rules.values() for t in p["detail-type"]}
    assert {
        "EC2 Spot Instance Interruption Warning",
        "EC2 Instance Rebalance Recommendation",
        "EC2 Instance State-change Notification",
        "AWS Health Event",
    } <= detail_types
    targets = run.of_type("aws:cloudwatch/eventTarget:EventTarget")
    assert len(targets) == len(rules)
    assert all(t.inputs["arn"] == queue.outputs["arn"] for t in targets)
    assert {t.inputs["rule"] for t in targets} == {
        r.outputs.get("name", r.inputs.get("name")) for r in run.of_type(
            "aws:cloudwatch/eventRule:EventRule")}  # fmt: skip


def test_the_node_role_and_its_access_entry(run: ProgramRun) -> None:
    role = run.one("aws:iam/role:Role", "karpenter-node-role")
    assert role.inputs["name"] == spec.node_role_name("eks-fsdp-p4de")
    assert json.loads(role.inputs["assumeRolePolicy"])["Statement"][0]["Principal"] == {
        "Service": "ec2.amazonaws.com"
    }
    attached = {
        a.inputs["policyArn"]
        for a in run.of_type("aws:iam/rolePolicyAttachment:RolePolicyAttachment")
        if a.inputs["role"] == role.outputs["name"]
    }
    assert attached == set(NODE_POLICY_ARNS)
    access = run.one("aws:eks/accessEntry:AccessEntry")
    assert access.inputs["type"] == "EC2_LINUX"
    assert access.inputs["principalArn"] == role.outputs["arn"]
    assert access.inputs["clusterName"] == "eks-fsdp-p4de"
    # the EC2NodeClass names this role
    nodeclass = run.one("kubernetes:karpenter.k8s.aws/v1:EC2NodeClass")
    assert nodeclass.inputs["spec"]["role"] == role.inputs["name"]


def test_per_pool_objects_replace_the_managed_group(run: ProgramRun) -> None:
    cfg = parse(karpenter_raw(), stack="p4de-odcr")
    (group,) = cfg.gpu_node_groups
    expected = spec.pool_objects(group, cfg.cluster_name)
    got = [
        run.one("kubernetes:karpenter.k8s.aws/v1:EC2NodeClass"),
        run.one("kubernetes:karpenter.sh/v1:NodePool"),
    ]
    for obj, res in zip(expected, got, strict=True):
        body = {k: v for k, v in res.inputs.items() if k in ("apiVersion", "kind", "spec")}
        body["metadata"] = {"name": res.inputs["metadata"]["name"]}
        assert json.loads(json.dumps(body)) == json.loads(json.dumps(obj)) | {}
        # after the chart, which brings the CRDs
        assert _release(run).urn in res.dependencies
    # no managed node group, launch template or placement group for the pool
    assert [r.name for r in run.of_type(NG)] == ["cluster-system"]
    assert run.outputs["gpuNodeGroupNames"] == []
    # no "expect N nodes" check for a pool that has none until a job waits
    assert not [line for line in run.outputs["nextSteps"] if "eks-fsdp/nodegroup=" in line]


def test_a_stack_without_karpenter_pools_gets_none_of_it() -> None:
    run = run_program("p4de-odcr", secrets=SECRETS)
    assert not [r for r in run.resources if "karpenter" in r.type.lower() + r.name.lower()]
    assert [r.name for r in run.of_type(NG)] == ["cluster-system", "gpu-p4de-odcr-ng"]


def test_a_capacity_block_pool_tells_jobs_its_end() -> None:
    raw = karpenter_raw(
        "p5-16",
        capacityBlock={"start": "2099-03-02T11:30:00Z", "end": "2099-03-09T11:30:00Z"},
    )
    run = run_program("p5-16", overrides={"gpuNodeGroups": raw["gpuNodeGroups"]}, secrets=SECRETS)
    (group,) = parse(raw, stack="p5-16").gpu_node_groups
    window = run.outputs[CAPACITY_BLOCKS][group.name]
    assert window == {
        "start": "2099-03-02T11:30:00Z",
        "end": "2099-03-09T11:30:00Z",
        "scaleDownAt": "2099-03-09T10:30:00Z",
    }
    (cm,) = [c for c in run.of_type("kubernetes:core/v1:ConfigMap") if "karpenter" in c.name]
    # the ConfigMap a managed group's CapacitySchedule writes, where jobs read it
    expected = capacity_block_configmap(group.name, window, JOBS_NAMESPACE)
    assert cm.inputs["data"] == expected["data"]
    assert cm.inputs["metadata"]["name"] == expected["metadata"]["name"]
    assert cm.inputs["metadata"]["namespace"] == JOBS_NAMESPACE
    # no Auto Scaling schedule: there is no Auto Scaling group
    assert not run.of_type("aws:autoscaling/schedule:Schedule")
    nodeclass = run.one("kubernetes:karpenter.k8s.aws/v1:EC2NodeClass")
    assert nodeclass.inputs["spec"]["capacityReservationSelectorTerms"] == [
        {"id": group.capacity_reservation_id}
    ]
    nodepool = run.one("kubernetes:karpenter.sh/v1:NodePool")
    (types,) = [
        r["values"]
        for r in nodepool.inputs["spec"]["template"]["spec"]["requirements"]
        if r["key"] == "karpenter.sh/capacity-type"
    ]
    assert types == ["reserved"]


# --- bad input: one line each, naming the key ---------------------------------------------------

BAD: list[tuple[dict[str, Any], str]] = [
    ({"provisioner": "fargate"}, r"gpuNodeGroups\[0\]\.provisioner: .*fargate"),
    ({"minSize": 1}, r"gpuNodeGroups\[0\]\.minSize: 1 with provisioner karpenter"),
    (
        {"karpenterCapacityTypes": ["reserved", "interruptible"]},
        r"gpuNodeGroups\[0\]\.karpenterCapacityTypes: .*interruptible",
    ),
    ({"karpenterCapacityTypes": []}, r"karpenterCapacityTypes: expected a non-empty list"),
    ({"karpenterCapacityTypes": ["on-demand"]}, r"karpenterCapacityTypes: has no reserved"),
    (
        {"karpenterCapacityTypes": ["reserved", "reserved"]},
        r"karpenterCapacityTypes: lists a capacity type twice",
    ),
]


@pytest.mark.parametrize(("extra", "message"), BAD)
def test_bad_karpenter_pool_is_one_line(extra: dict[str, Any], message: str) -> None:
    raw = karpenter_raw()
    raw["gpuNodeGroups"] = [{**raw["gpuNodeGroups"][0], **extra}]
    with pytest.raises(ConfigError, match=message) as err:
        parse(raw, stack="p4de-odcr")
    assert "\n" not in str(err.value)


def test_reserved_without_a_reservation_and_resource_groups_are_refused() -> None:
    raw = karpenter_raw()
    group = {k: v for k, v in raw["gpuNodeGroups"][0].items() if k != "capacityReservationId"}
    raw["gpuNodeGroups"] = [{**group, "karpenterCapacityTypes": ["reserved", "on-demand"]}]
    with pytest.raises(ConfigError, match="reserved needs capacityReservationId"):
        parse(raw, stack="p4de-odcr")
    arn = "arn:aws:resource-groups:us-east-1:123456789012:group/odcrs"
    raw["gpuNodeGroups"] = [{**group, "capacityReservationResourceGroupArn": arn}]
    with pytest.raises(ConfigError, match="not resource groups: set capacityReservationId"):
        parse(raw, stack="p4de-odcr")


def test_a_managed_group_takes_no_karpenter_key() -> None:
    raw = copy.deepcopy(stack_config("p4de-odcr"))
    raw["gpuNodeGroups"] = [{**raw["gpuNodeGroups"][0], "karpenterCapacityTypes": ["reserved"]}]
    with pytest.raises(ConfigError, match="karpenterCapacityTypes: is only for provisioner"):
        parse(raw, stack="p4de-odcr")


def test_a_capacity_block_pool_launches_only_into_its_block() -> None:
    raw = karpenter_raw("p5-16", karpenterCapacityTypes=["reserved", "on-demand"])
    with pytest.raises(ConfigError, match=r"launches only into its block: \[reserved\]"):
        parse(raw, stack="p5-16")


def test_node_repair_is_one_switch_for_karpenter() -> None:
    raw = karpenter_raw()
    first = raw["gpuNodeGroups"][0]
    second = {**first, "name": "p4de-two", "nodeRepair": False}
    raw["gpuNodeGroups"] = [first, second]
    with pytest.raises(ConfigError, match=r"gpuNodeGroups\[1\]\.nodeRepair: Karpenter repairs"):
        parse(raw, stack="p4de-odcr")


@pytest.mark.parametrize(
    ("pinned", "stack", "message"),
    [
        ("1.2.0", "p4de-odcr", r"karpenterCapacityTypes: capacity-type reserved needs Karpenter"
         r" >= 1\.3\.0; the stack pins 1\.2\.0"),
        ("1.5.2", "p5-16", r"capacityType: capacity blocks needs Karpenter >= 1\.6\.0"),
        ("1.10.0", "p4de-odcr", r"efa: networkInterfaces needs Karpenter >= 1\.11\.0"),
    ],
)  # fmt: skip
def test_what_the_pinned_karpenter_lacks_is_refused(
    monkeypatch: pytest.MonkeyPatch, pinned: str, stack: str, message: str
) -> None:
    """The gates of ``versions.KARPENTER_FEATURES_SINCE`` (tasks/odcrs.md at v1.14.1: ODCRs from
    v1.3, Capacity Blocks from v1.6; ``networkInterfaces`` in the CRD from v1.11.0)."""
    monkeypatch.setattr(versions, "KARPENTER_VERSION", pinned)
    with pytest.raises(ConfigError, match=message) as err:
        parse(karpenter_raw(stack), stack=stack)
    assert "\n" not in str(err.value)


def test_the_pinned_release_has_every_gated_feature() -> None:
    pinned = versions.version_tuple(versions.KARPENTER_VERSION)
    assert all(
        versions.version_tuple(v) <= pinned for v in versions.KARPENTER_FEATURES_SINCE.values()
    )


def test_names_aws_refuses_stop_before_any_resource() -> None:
    """The node role's name (at most 64 characters) carries the cluster's; so does the queue's,
    whose limit (80) a name that fits the role's cannot reach."""
    from infra.karpenter import KarpenterArgs

    common: dict[str, Any] = {
        "cluster": "c",
        "region": "us-east-1",
        "oidc_provider_arn": "arn",
        "oidc_issuer": "issuer",
        "system_node_selector": {"eks-fsdp/nodegroup": "system"},
    }
    with pytest.raises(ValueError, match=r"KarpenterArgs\.cluster_name: the node role"):
        KarpenterArgs(cluster_name="c" * 50, **common)
    KarpenterArgs(cluster_name="c" * 46, **common)  # KarpenterNodeRole- + 46 = 64
    with pytest.raises(ValueError, match=r"KarpenterArgs\.region: required"):
        KarpenterArgs(cluster_name="c", **{**common, "region": ""})


def test_a_long_cluster_name_is_refused_at_parse_time_with_a_karpenter_pool() -> None:
    """``KarpenterNodeRole-`` (18 characters) + the cluster's name must fit IAM's 64 (upstream's
    role name, cloudformation.yaml at v1.14.1): 46 passes, 47 is one line naming clusterName;
    a stack without a Karpenter pool takes the longer name."""
    from infra.config.nodegroups import MAX_KARPENTER_CLUSTER_NAME, _parse_gpu_groups

    raw = karpenter_raw()
    azs = tuple(raw["availabilityZones"])
    assert MAX_KARPENTER_CLUSTER_NAME == 64 - len("KarpenterNodeRole-") == 46
    (ok,) = _parse_gpu_groups(raw["gpuNodeGroups"], azs, cluster_name="c" * 46)
    assert len(spec.node_role_name("c" * 46)) == spec.MAX_ROLE_NAME
    with pytest.raises(
        ConfigError, match=r"eks-fsdp:clusterName: 47 characters; with a Karpenter"
    ) as err:
        _parse_gpu_groups(raw["gpuNodeGroups"], azs, cluster_name="c" * 47)
    assert "\n" not in str(err.value)
    managed = copy.deepcopy(stack_config("p4de-odcr"))["gpuNodeGroups"]
    (group,) = _parse_gpu_groups(managed, azs, cluster_name="c" * 47)
    assert not group.uses_karpenter and ok.uses_karpenter
    # and through the stack's own parse, where every key is read
    assert parse({**raw, "clusterName": "c" * 46}, stack="p4de-odcr").cluster_name == "c" * 46
    with pytest.raises(ConfigError, match=r"^eks-fsdp:clusterName: 47 characters; with a Karp"):
        parse({**raw, "clusterName": "c" * 47}, stack="p4de-odcr")


def test_an_efa_pool_without_a_zone_is_refused_even_without_a_placement_group() -> None:
    """EFA traffic does not cross availability zones (EC2 user guide, "Elastic Fabric Adapter":
    an EFA's traffic stays within its subnet, one zone): a Karpenter EFA pool with
    ``placementGroup: none`` and no reservation (so nothing else pins a zone) would let one
    job's nodes launch in several zones."""
    raw = karpenter_raw()
    group = {
        k: v
        for k, v in raw["gpuNodeGroups"][0].items()
        if k not in ("capacityReservationId", "availabilityZone")
    }
    raw["gpuNodeGroups"] = [{**group, "placementGroup": "none", "efa": True}]
    with pytest.raises(
        ConfigError, match=r"gpuNodeGroups\[0\]\.availabilityZone: is required with efa"
    ) as err:
        parse(raw, stack="p4de-odcr")
    assert "\n" not in str(err.value)
    from infra.config.nodegroups import _parse_gpu_groups

    azs = tuple(raw["availabilityZones"])
    (no_efa,) = _parse_gpu_groups([{**group, "placementGroup": "none", "efa": False}], azs)
    assert no_efa.availability_zone is None  # without EFA every private subnet may serve
    assert len(spec.subnet_selector_terms("c", no_efa)[0]["tags"]) == 2


def test_a_kubernetes_version_the_ami_alias_lacks_is_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Karpenter resolves ``al2023@<release>`` through the SSM parameter of the cluster's minor
    (``pkg/providers/amifamily/al2023.go`` at v1.14.1): a minor the release did not publish
    (``versions.KARPENTER_AL2023_AMI_KUBERNETES``, from amazon-eks-ami's CHANGELOG) finds no
    AMI and the pool never launches. The stack's own version is one the alias publishes."""
    cfg = parse(karpenter_raw(), stack="p4de-odcr")
    assert cfg.kubernetes_version in versions.KARPENTER_AL2023_AMI_KUBERNETES
    monkeypatch.setattr(versions, "KARPENTER_AL2023_AMI_KUBERNETES", ("1.30", "1.31"))
    with pytest.raises(ConfigError) as err:
        parse(karpenter_raw(), stack="p4de-odcr")
    assert str(err.value) == (
        f"eks-fsdp:gpuNodeGroups[0].provisioner: karpenter: the pinned AMI alias"
        f" {versions.KARPENTER_AL2023_AMI_ALIAS} has no AMI for Kubernetes"
        f" {cfg.kubernetes_version} (it publishes 1.30-1.31)"
    )
    parse(copy.deepcopy(stack_config("p4de-odcr")), stack="p4de-odcr")  # managed: no alias


def test_a_karpenter_pools_placement_group_is_a_stack_output() -> None:
    """``placementGroupNames`` lists every pool's group, the Karpenter pools' too: an EFA pool
    outside a reservation gets one (``<cluster>-<pool>``), which its EC2NodeClass selects."""
    from infra import outputs

    group = {
        "name": "p5-od",
        "instanceType": "p5.48xlarge",
        "minSize": 0,
        "desiredSize": 2,
        "maxSize": 2,
        "availabilityZone": "us-east-2a",
        "provisioner": "karpenter",
    }
    p5 = run_program("p5-16", overrides={"gpuNodeGroups": [group], "job": {}}, secrets=SECRETS)
    pg = p5.one("aws:ec2/placementGroup:PlacementGroup")
    assert pg.inputs["name"] == f"{p5.outputs['clusterName']}-p5-od"
    nodeclass = p5.one("kubernetes:karpenter.k8s.aws/v1:EC2NodeClass")
    assert nodeclass.inputs["spec"]["placementGroupSelector"] == {"name": pg.inputs["name"]}
    assert p5.outputs[outputs.PLACEMENT_GROUP_NAMES] == {"p5-od": pg.outputs["name"]}
    assert [ng.name for ng in p5.of_type(NG)] == ["cluster-system"]  # no managed GPU group
