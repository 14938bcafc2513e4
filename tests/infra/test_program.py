"""The real Pulumi program (``__main__.py``) for each shipped stack, run under Pulumi mocks.

Mocked, and why: there is no Pulumi CLI/engine and no AWS account here, so
``tests/pulumi_mocks.run_program`` replaces the engine's resource monitor with Pulumi's
unit-test mocks (providers echo their inputs plus made-up ids/ARNs; the remote ``eks.Cluster``
returns a kubeconfig and security-group/OIDC outputs). Everything else is the real program:
config parsing, component code, resource inputs.

If these fail, ``pulumi up`` would build a different cluster than the stack file describes:
GPU nodes without all their EFA interfaces, outside the reservation or the capacity block,
in a public subnet or the wrong zone, without the GPU taint or IMDSv2, device plugins at an
unpinned chart version or on the wrong provider, a kubeconfig exported in clear text, or
resources outside their component (breaking ``pulumi stack`` grouping and aliases).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pulumi.runtime import rpc

from infra import outputs, versions
from infra.cluster import NODE_POLICY_ARNS
from infra.config import ConfigError, load_stack_file
from tests.pulumi_mocks import ProgramRun, RecordedResource, run_program

STACKS = ("dev", "p4de-odcr", "p5-16")
LT = "aws:ec2/launchTemplate:LaunchTemplate"
NG = "aws:eks/nodeGroup:NodeGroup"
SUBNET = "aws:ec2/subnet:Subnet"
RELEASE = "kubernetes:helm.sh/v3:Release"
COMPONENT_PREFIX = "eks-fsdp:infra:"


SECRETS = {"hfToken": "hf_mock", "grafanaAdminPassword": "mock-password"}
"""Secrets other parts of the program may require (set with --secret on a real stack)."""


@pytest.fixture(scope="module")
def runs() -> dict[str, ProgramRun]:
    return {stack: run_program(stack, secrets=SECRETS) for stack in STACKS}


def is_infra(resource: RecordedResource) -> bool:
    """True for the infra components and everything under them (not the workloads')."""
    qualified = resource.urn.split("::")[2].removeprefix("pulumi:pulumi:Stack$")
    return qualified.startswith(COMPONENT_PREFIX)


def gpu_lt(run: ProgramRun) -> RecordedResource:
    """The launch template of the stack's (single) GPU nodegroup."""
    (lt,) = [r for r in run.of_type(LT) if r.name != "cluster-system-lt"]
    return lt


def gpu_nodegroups(run: ProgramRun) -> list[RecordedResource]:
    return [r for r in run.of_type(NG) if r.name != "cluster-system"]


def subnet_ids(run: ProgramRun, kind: str) -> dict[str, str]:
    """{zone: subnet id} of the public or private subnets."""
    return {
        r.inputs["availabilityZone"]: r.id
        for r in run.of_type(SUBNET)
        if r.name.startswith(f"network-{kind}-")
    }


@pytest.mark.parametrize("stack", STACKS)
def test_components_and_resource_counts(runs: dict[str, ProgramRun], stack: str) -> None:
    run, cfg = runs[stack], load_stack_file(stack)
    zones = len(cfg.availability_zones)
    nats = zones if cfg.nat_gateways == "perAz" else 1
    counts = {
        "eks-fsdp:infra:Network": 1,
        "eks-fsdp:infra:Cluster": 1,
        "eks-fsdp:infra:GpuNodeGroup": len(cfg.gpu_node_groups),
        "eks-fsdp:infra:DevicePlugins": 1,
        "eks:index:Cluster": 1,
        "pulumi:providers:kubernetes": 1,
        "aws:ec2/vpc:Vpc": 1,
        SUBNET: 2 * zones,
        "aws:ec2/natGateway:NatGateway": nats,
        "aws:ec2/eip:Eip": nats,
        "aws:ec2/internetGateway:InternetGateway": 1,
        "aws:ec2/routeTable:RouteTable": 1 + zones,
        "aws:ec2/routeTableAssociation:RouteTableAssociation": 2 * zones,
        NG: 1 + len(cfg.gpu_node_groups),
        LT: 1 + len(cfg.gpu_node_groups),
        "aws:ec2/placementGroup:PlacementGroup": sum(
            g.creates_placement_group for g in cfg.gpu_node_groups
        ),
        RELEASE: 1 + any(g.efa for g in cfg.gpu_node_groups),
        "aws:eks/addon:Addon": 2
        + cfg.node_monitoring_agent
        + cfg.cloudwatch_observability
        + cfg.shared_storage.is_fsx,
    }
    infra = [r for r in run.resources if is_infra(r)]
    assert {t: sum(r.type == t for r in infra) for t in counts} == counts
    # The Pod Identity agent is the composition root's own, shared by the bucket's jobs and
    # the Alertmanager (infra/pod_identity.pod_identity_agent): one when either needs it.
    agents = [
        a
        for a in run.of_type("aws:eks/addon:Addon")
        if a.inputs["addonName"] == "eks-pod-identity-agent"
    ]
    assert len(agents) == int(cfg.data_bucket.enabled) and not any(is_infra(a) for a in agents)


@pytest.mark.parametrize(("stack", "count"), [("dev", 0), ("p4de-odcr", 4), ("p5-16", 32)])
def test_launch_template_attaches_every_efa_interface(
    runs: dict[str, ProgramRun], stack: str, count: int
) -> None:
    run = runs[stack]
    lt = gpu_lt(run)
    nics = lt.inputs.get("networkInterfaces", [])
    efa = [n for n in nics if n["interfaceType"] == "efa-only"]
    assert len(efa) == count
    if count:
        # The EC2 guide's layout (tests/infra/test_efa_layout.py): ENA primary at (0, 0),
        # efa-only at (0, 1) and at device 0 of every other card.
        cluster_sg = run.one("eks:index:Cluster").outputs["clusterSecurityGroupId"]
        efa_sg = run.one("aws:ec2/securityGroup:SecurityGroup", "network-efa-sg").id
        assert len(nics) == count + 1
        assert (nics[0]["networkCardIndex"], nics[0]["deviceIndex"]) == (0, 0)
        assert nics[0]["interfaceType"] == "interface"
        assert [(n["networkCardIndex"], n["deviceIndex"]) for n in efa] == [(0, 1)] + [
            (card, 0) for card in range(1, count)
        ]
        assert all(n["securityGroups"] == [cluster_sg, efa_sg] for n in nics)


def test_reservation_and_market_type(runs: dict[str, ProgramRun]) -> None:
    dev, p4de, p5 = (gpu_lt(runs[s]).inputs for s in STACKS)
    assert "capacityReservationSpecification" not in dev
    assert "instanceMarketOptions" not in dev
    target = p4de["capacityReservationSpecification"]["capacityReservationTarget"]
    assert target == {"capacityReservationId": "cr-0123456789abcdef0"}
    assert "instanceMarketOptions" not in p4de
    target = p5["capacityReservationSpecification"]["capacityReservationTarget"]
    assert target == {"capacityReservationId": "cr-0fedcba9876543210"}
    assert p5["instanceMarketOptions"] == {"marketType": "capacity-block"}
    capacity = {s: gpu_nodegroups(runs[s])[0].inputs["capacityType"] for s in STACKS}
    assert capacity == {"dev": "ON_DEMAND", "p4de-odcr": "ON_DEMAND", "p5-16": "CAPACITY_BLOCK"}


def test_reservation_by_resource_group() -> None:
    arn = "arn:aws:resource-groups:us-east-1:123456789012:group/p4de-odcrs"
    cfg = load_stack_file("p4de-odcr")
    group = {
        "name": "p4de-rg",
        "instanceType": "p4de.24xlarge",
        "minSize": 0,
        "desiredSize": 2,
        "maxSize": 2,
        "availabilityZone": cfg.availability_zones[1],
        "capacityReservationResourceGroupArn": arn,
    }
    run = run_program("p4de-odcr", overrides={"gpuNodeGroups": [group], "job": {}}, secrets=SECRETS)
    target = gpu_lt(run).inputs["capacityReservationSpecification"]["capacityReservationTarget"]
    assert target == {"capacityReservationResourceGroupArn": arn}


def test_placement_group_on_and_off(runs: dict[str, ProgramRun]) -> None:
    """No shipped stack creates one (the capacity block is already co-located); an EFA group
    outside a reservation does."""
    for stack in STACKS:
        assert "placement" not in gpu_lt(runs[stack]).inputs
        assert runs[stack].outputs[outputs.PLACEMENT_GROUP_NAMES] == {}
    group = {
        "name": "p5-od",
        "instanceType": "p5.48xlarge",
        "minSize": 0,
        "desiredSize": 2,
        "maxSize": 2,
        "availabilityZone": "us-east-2a",
    }
    p5 = run_program("p5-16", overrides={"gpuNodeGroups": [group], "job": {}}, secrets=SECRETS)
    pg = p5.one("aws:ec2/placementGroup:PlacementGroup")
    assert pg.inputs["strategy"] == "cluster"
    assert gpu_lt(p5).inputs["placement"] == {"groupName": pg.outputs["name"]}
    assert p5.outputs[outputs.PLACEMENT_GROUP_NAMES] == {"p5-od": pg.outputs["name"]}


@pytest.mark.parametrize("stack", STACKS)
def test_gpu_nodegroup_shape(runs: dict[str, ProgramRun], stack: str) -> None:
    run, cfg = runs[stack], load_stack_file(stack)
    (group,) = cfg.gpu_node_groups
    (ng,) = gpu_nodegroups(run)
    lt = gpu_lt(run)
    assert ng.inputs["nodeGroupName"] == group.name
    assert ng.inputs["amiType"] == versions.GPU_AMI_TYPE
    assert ng.inputs["taints"] == [
        {"key": "nvidia.com/gpu", "value": "true", "effect": "NO_SCHEDULE"}
    ]
    assert ng.inputs["scalingConfig"] == {
        "minSize": group.min_size,
        "desiredSize": group.desired_size,
        "maxSize": group.max_size,
    }
    assert ng.inputs["labels"]["eks-fsdp/nodegroup"] == group.name
    assert ng.inputs["labels"]["node.kubernetes.io/instance-type"] == group.instance_type
    assert ng.inputs["launchTemplate"] == {"id": lt.id, "version": "1"}
    assert "instanceTypes" not in ng.inputs  # the type lives in the launch template
    assert lt.inputs["instanceType"] == group.instance_type
    assert lt.inputs["metadataOptions"] == {
        "httpEndpoint": "enabled",
        "httpTokens": "required",
        "httpPutResponseHopLimit": 1,
        "instanceMetadataTags": "disabled",
    }
    # Day 2 in a full reservation: terminate before launch, and the desired size is left to
    # the operator after creation (a scale-to-0 before a capacity block ends sticks).
    assert ng.inputs["updateConfig"] == {"maxUnavailable": 1, "updateStrategy": "MINIMAL"}
    (disk,) = lt.inputs["blockDeviceMappings"]
    assert disk["ebs"]["encrypted"] == "true"
    assert disk["deviceName"] == "/dev/xvda"
    assert (disk["ebs"]["volumeType"], disk["ebs"]["volumeSize"]) == ("gp3", 500)
    system = run.one(NG, "cluster-system")
    assert "taints" not in system.inputs
    assert system.inputs["instanceTypes"] == [cfg.system_node_group.instance_type]
    system_lt = run.one(LT, "cluster-system-lt")
    assert system.inputs["launchTemplate"] == {"id": system_lt.id, "version": "1"}
    assert system_lt.inputs["metadataOptions"] == lt.inputs["metadataOptions"]
    assert system_lt.inputs["blockDeviceMappings"][0]["ebs"]["encrypted"] == "true"


@pytest.mark.parametrize("stack", STACKS)
def test_gpu_nodes_only_in_private_subnets_of_their_zone(
    runs: dict[str, ProgramRun], stack: str
) -> None:
    run, cfg = runs[stack], load_stack_file(stack)
    (group,) = cfg.gpu_node_groups
    private, public = subnet_ids(run, "private"), subnet_ids(run, "public")
    (ng,) = gpu_nodegroups(run)
    expected = (
        [private[group.availability_zone]]
        if group.availability_zone
        else [private[az] for az in cfg.availability_zones]
    )
    assert ng.inputs["subnetIds"] == expected
    assert not set(ng.inputs["subnetIds"]) & set(public.values())
    for subnet in run.of_type(SUBNET):
        private_subnet = subnet.name.startswith("network-private-")
        assert subnet.inputs["mapPublicIpOnLaunch"] is (not private_subnet)
        role = "kubernetes.io/role/internal-elb" if private_subnet else "kubernetes.io/role/elb"
        assert subnet.inputs["tags"][role] == "1"
        assert subnet.inputs["tags"][f"kubernetes.io/cluster/{cfg.cluster_name}"] == "shared"
    for rt in run.of_type("aws:ec2/routeTable:RouteTable"):
        (route,) = rt.inputs["routes"]
        assert ("natGatewayId" in route) is ("private" in rt.name)


def test_efa_security_group_allows_all_traffic_between_members_only(
    runs: dict[str, ProgramRun],
) -> None:
    run = runs["p5-16"]
    sg = run.one("aws:ec2/securityGroup:SecurityGroup", "network-efa-sg")
    rules = [
        r
        for r in run.resources
        if r.type.startswith("aws:vpc/securityGroup") and r.inputs["securityGroupId"] == sg.id
    ]
    assert sorted(r.name for r in rules) == ["network-efa-egress-self", "network-efa-ingress-self"]
    assert all("cidrIpv4" not in r.inputs for r in rules)
    ingress = run.one(
        "aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule", "network-efa-ingress-self"
    )
    egress_self = run.one(
        "aws:vpc/securityGroupEgressRule:SecurityGroupEgressRule", "network-efa-egress-self"
    )
    for rule in (ingress, egress_self):
        assert rule.inputs["ipProtocol"] == "-1"
        assert rule.inputs["securityGroupId"] == sg.id
        assert rule.inputs["referencedSecurityGroupId"] == sg.id


@pytest.mark.parametrize("stack", STACKS)
def test_cluster_control_plane_and_addons(runs: dict[str, ProgramRun], stack: str) -> None:
    run, cfg = runs[stack], load_stack_file(stack)
    eks = run.one("eks:index:Cluster")
    assert eks.inputs["version"] == cfg.kubernetes_version == versions.KUBERNETES_VERSION
    assert eks.inputs["name"] == cfg.cluster_name
    assert eks.inputs["authenticationMode"] == "API"
    assert eks.inputs["createOidcProvider"] is True
    assert eks.inputs["skipDefaultNodeGroup"] is True
    zones = cfg.availability_zones
    private, public = subnet_ids(run, "private"), subnet_ids(run, "public")
    assert eks.inputs["privateSubnetIds"] == [private[az] for az in zones]
    assert eks.inputs["publicSubnetIds"] == [public[az] for az in zones]
    kube_proxy = eks.inputs["kubeProxyAddonOptions"]
    assert (kube_proxy["enabled"], kube_proxy["version"]) == (
        True,
        versions.KUBE_PROXY_ADDON_VERSION,
    )
    # Secure by default: NetworkPolicies enforced, Secrets under a rotating KMS key, every
    # control-plane log type, the public endpoint only for the configured CIDRs.
    cni = eks.inputs["vpcCniOptions"]
    assert (cni["addonVersion"], cni["enableNetworkPolicy"]) == (
        versions.VPC_CNI_ADDON_VERSION,
        True,
    )
    key = run.one("aws:kms/key:Key", "cluster-secrets-key")
    assert key.inputs["enableKeyRotation"] is True
    assert eks.inputs["encryptionConfigKeyArn"] == key.outputs["arn"]
    assert sorted(eks.inputs["enabledClusterLogTypes"]) == sorted(
        ["api", "audit", "authenticator", "controllerManager", "scheduler"]
    )
    assert eks.inputs["endpointPublicAccess"] is True
    assert eks.inputs["publicAccessCidrs"] == ["198.51.100.7/32"]
    assert eks.inputs["corednsAddonOptions"]["enabled"] is False  # ours, after the nodes
    addons = {a.inputs["addonName"]: a for a in run.of_type("aws:eks/addon:Addon")}
    expected = {"coredns", "aws-ebs-csi-driver"}
    if cfg.node_monitoring_agent:
        expected.add("eks-node-monitoring-agent")
    if cfg.data_bucket.enabled:
        expected.add("eks-pod-identity-agent")
    if cfg.cloudwatch_observability:
        expected.add("amazon-cloudwatch-observability")
    if cfg.shared_storage.is_fsx:
        expected.add("aws-fsx-csi-driver")
    assert set(addons) == expected
    system = run.one(NG, "cluster-system")
    assert all(system.urn in a.dependencies for a in addons.values())
    ebs_role = run.one("aws:iam/role:Role", "cluster-ebs-csi-role")
    assert addons["aws-ebs-csi-driver"].inputs["serviceAccountRoleArn"] == ebs_role.outputs["arn"]
    trust = json.loads(ebs_role.inputs["assumeRolePolicy"])
    condition = trust["Statement"][0]["Condition"]["StringEquals"]
    assert "system:serviceaccount:kube-system:ebs-csi-controller-sa" in condition.values()
    attached = {
        a.inputs["policyArn"]
        for a in run.of_type("aws:iam/rolePolicyAttachment:RolePolicyAttachment")
        if a.name.startswith("cluster-node-")
    }
    assert attached == set(NODE_POLICY_ARNS)
    # The EBS CSI policy lives on its controller's IRSA role, never on the nodes (FSx: none).
    assert (
        not {
            "arn:aws:iam::aws:policy/service-role/AmazonEBSCSIDriverPolicy",
            "arn:aws:iam::aws:policy/AmazonFSxFullAccess",
        }
        & attached
    )
    versions_by_addon = {name: a.inputs.get("addonVersion") for name, a in addons.items()}
    assert versions_by_addon["coredns"] == versions.COREDNS_ADDON_VERSION
    assert versions_by_addon["aws-ebs-csi-driver"] == versions.EBS_CSI_ADDON_VERSION
    assert all(versions_by_addon.values()), versions_by_addon
    # Nodegroups wait for the control plane (their cluster name comes from its outputs) and
    # GPU nodegroups for the node role's policies; the k8s provider waits for nodes and DNS.
    node_policies = {
        a.urn
        for a in run.of_type("aws:iam/rolePolicyAttachment:RolePolicyAttachment")
        if a.name.startswith("cluster-node-")
    }
    for ng in run.of_type(NG):
        assert ng.inputs["clusterName"] == cfg.cluster_name
        assert eks.urn in ng.dependencies
        assert node_policies <= set(ng.dependencies)
    provider = run.one("pulumi:providers:kubernetes", "cluster-k8s")
    assert {system.urn, addons["coredns"].urn} <= set(provider.dependencies)


def test_access_entries_are_cluster_admins() -> None:
    arn = "arn:aws:iam::123456789012:role/platform-admin"
    run = run_program("dev", overrides={"accessEntries": [arn]}, secrets=SECRETS)
    entries = run.one("eks:index:Cluster").inputs["accessEntries"]
    (entry,) = entries.values()
    assert entry["principalArn"] == arn
    (policy,) = entry["accessPolicies"].values()
    assert policy["policyArn"].endswith("AmazonEKSClusterAdminPolicy")
    assert policy["accessScope"] == {"type": "cluster"}


@pytest.mark.parametrize("stack", STACKS)
def test_device_plugin_charts_are_pinned_and_use_the_cluster_provider(
    runs: dict[str, ProgramRun], stack: str
) -> None:
    run = runs[stack]
    provider = run.one("pulumi:providers:kubernetes", "cluster-k8s")
    releases = {r.inputs["chart"]: r for r in run.of_type(RELEASE) if is_infra(r)}
    nvidia = releases[versions.NVIDIA_DEVICE_PLUGIN_CHART]
    assert nvidia.inputs["version"] == versions.NVIDIA_DEVICE_PLUGIN_VERSION
    assert nvidia.inputs["repositoryOpts"] == {"repo": versions.NVIDIA_DEVICE_PLUGIN_REPO}
    if len(releases) == 2:
        efa = releases[versions.EFA_DEVICE_PLUGIN_CHART]
        assert efa.inputs["version"] == versions.EFA_DEVICE_PLUGIN_VERSION
        assert efa.inputs["repositoryOpts"] == {"repo": versions.EFA_DEVICE_PLUGIN_REPO}
        # The EFA chart renders .Values.nodeSelector; it has no affinity value.
        assert efa.inputs["values"]["nodeSelector"] == {"vpc.amazonaws.com/efa.present": "true"}
        assert "affinity" not in efa.inputs["values"]
    gpu_toleration = {
        "key": "nvidia.com/gpu",
        "operator": "Equal",
        "value": "true",
        "effect": "NoSchedule",
    }
    for release in releases.values():
        assert release.provider.startswith(provider.urn + "::")
        assert gpu_toleration in release.inputs["values"]["tolerations"]
        assert release.inputs["namespace"] == "kube-system"
    # The provider's kubeconfig input stays a secret (the engine's secret envelope).
    kubeconfig = provider.inputs["kubeconfig"]
    assert kubeconfig[rpc._special_sig_key] == rpc._special_secret_sig
    assert kubeconfig["value"] == run.outputs[outputs.KUBECONFIG]


@pytest.mark.parametrize("stack", STACKS)
def test_stack_outputs(runs: dict[str, ProgramRun], stack: str) -> None:
    run, cfg = runs[stack], load_stack_file(stack)
    assert outputs.KUBECONFIG in run.secret_outputs
    assert json.loads(run.outputs[outputs.KUBECONFIG])["kind"] == "Config"
    assert not {outputs.CLUSTER_NAME, outputs.GPU_NODE_GROUP_NAMES} & run.secret_outputs
    assert run.outputs[outputs.CLUSTER_NAME] == cfg.cluster_name
    assert run.outputs[outputs.GPU_NODE_GROUP_NAMES] == [g.name for g in cfg.gpu_node_groups]
    assert run.outputs[outputs.SYSTEM_NODE_GROUP_NAME] == "system"
    steps = run.outputs[outputs.NEXT_STEPS]
    assert "pulumi stack output kubeconfig --show-secrets > kubeconfig" in steps
    assert any(s.startswith("kubectl get nodes") for s in steps)
    # One node-count check per GPU nodegroup: EKS reports a capacity-block group ACTIVE even
    # when no instance joined.
    for group in cfg.gpu_node_groups:
        assert (
            f"kubectl get nodes -l eks-fsdp/nodegroup={group.name} --no-headers | wc -l"
            f"   # expect {group.desired_size}"
        ) in steps


@pytest.mark.parametrize("stack", STACKS)
def test_every_resource_lives_in_its_component(runs: dict[str, ProgramRun], stack: str) -> None:
    run = runs[stack]
    components = {r.urn: r for r in run.resources if r.type.startswith(COMPONENT_PREFIX)}
    for resource in filter(is_infra, run.resources):
        if resource.type.startswith(COMPONENT_PREFIX):
            assert resource.parent == "" or resource.parent.endswith(f"::eks-fsdp-{stack}")
            continue
        parent = components.get(resource.parent)
        assert parent is not None, f"{resource.type} {resource.name} is outside a component"
        assert resource.name.startswith(f"{parent.name}-"), (resource.name, parent.name)
    assert all(run.children_of(c) for c in components.values())


def test_secrets_stay_outputs_and_typos_stop_the_program(tmp_path: Path) -> None:
    program = tmp_path / "program.py"
    program.write_text(
        "import pulumi\n"
        "from infra.config import from_pulumi\n"
        "cfg = from_pulumi()\n"
        "pulumi.export('hf', cfg.secrets.hf_token)\n"
        "pulumi.export('grafana_unset', cfg.secrets.grafana_admin_password is None)\n"
        "pulumi.export('groups', [g.name for g in cfg.gpu_node_groups])\n"
    )
    run = run_program("dev", secrets={"hfToken": "hf_secret"}, program=program)
    assert run.outputs == {"hf": "hf_secret", "grafana_unset": True, "groups": ["gpu-g5"]}
    assert run.secret_outputs == {"hf"}
    # The optional secrets are not declared in Pulumi.yaml (no default, not required): unset
    # reads as None and nothing asks for them.
    unset = run_program("dev", program=program)
    assert unset.outputs["hf"] is None and unset.outputs["grafana_unset"] is True
    with pytest.raises(ConfigError, match=r"^eks-fsdp:clusterNmae: unknown key"):
        run_program("dev", overrides={"clusterNmae": "x"}, program=program)


def test_desired_size_is_left_to_the_operator_and_api_cidrs_are_required(tmp_path: Path) -> None:
    """``ignore_changes`` reaches the engine for every GPU nodegroup (read from the registration
    request the mock monitor receives), and a program run without
    apiPublicAccessCidrs stops with one line naming the key; [] turns the public endpoint off."""
    run = run_program("dev", overrides={"apiPublicAccessCidrs": []}, secrets=SECRETS)
    eks = run.one("eks:index:Cluster")
    assert eks.inputs["endpointPublicAccess"] is False
    assert "publicAccessCidrs" not in eks.inputs
    (ng,) = gpu_nodegroups(run)
    assert ng.ignore_changes == ("scalingConfig.desiredSize",)
    assert run.one(NG, "cluster-system").ignore_changes == ()
    program = tmp_path / "program.py"
    program.write_text("from infra.config import from_pulumi\nfrom_pulumi()\n")
    with pytest.raises(ConfigError, match=r"^eks-fsdp:apiPublicAccessCidrs: is required"):
        run_program("dev", overrides={"apiPublicAccessCidrs": None}, program=program)


def test_a_plaintext_secret_in_the_engine_config_stops_the_program() -> None:
    """Under mocks (no engine here): ``hfToken`` set without ``--secret`` reaches the program
    as a non-secret config value; ``from_pulumi`` refuses it with one line, the check the CLI
    would make for a ``secret: true`` key (not declared so, see Pulumi.yaml). Set as a secret,
    the same value passes."""
    with pytest.raises(Exception, match="eks-fsdp:hfToken: is set in plaintext"):
        run_program("dev", overrides={"hfToken": "hf_plain"})
    assert run_program("dev", secrets={"hfToken": "hf_plain"}).resources
