"""Add-on pins valid for the cluster's Kubernetes minor, and the VPC endpoints, under mocks.

If these fail, ``pulumi up`` would ask EKS for an add-on build of another Kubernetes minor
(``CreateAddon`` refuses it, or kube-proxy runs newer than the control plane) -- a stack that
picks ``kubernetesVersion: 1.34`` with the 1.35 pins would get that far before failing -- or
the nodes would pull their multi-GB images and call STS and Logs through the NAT gateway
(charged per GB) because an endpoint, its route tables, subnets or its HTTPS rule is missing,
or an endpoint would admit traffic from outside the VPC.

The table of valid builds is ``infra/addon_versions.py`` (sources: the EKS user guide's
kube-proxy, CoreDNS and VPC CNI version tables; describe-addon-versions records for the rest).
Mocked, and why: there is no Pulumi engine and no AWS account here (``tests/pulumi_mocks``).
"""

from __future__ import annotations

import pytest

from infra import versions
from infra.addon_versions import PINNED, RULES, addon_version_problem, pinned_problems
from infra.config import load_stack_file
from infra.network import NetworkArgs
from tests.pulumi_mocks import ProgramRun, run_program

STACKS = ("dev", "p4de-odcr", "p5-16")
SECRETS = {"hfToken": "hf_mock", "grafanaAdminPassword": "mock-password"}
ENDPOINT = "aws:ec2/vpcEndpoint:VpcEndpoint"


@pytest.fixture(scope="module")
def runs() -> dict[str, ProgramRun]:
    return {stack: run_program(stack, secrets=SECRETS) for stack in STACKS}


def test_every_pin_is_a_build_for_the_default_minor() -> None:
    assert set(PINNED) == set(RULES)
    assert pinned_problems(versions.KUBERNETES_VERSION) == []
    assert all(versions.KUBERNETES_VERSION in rule.series for rule in RULES.values())


@pytest.mark.parametrize(
    ("addon", "version", "minor", "problem"),
    [
        ("kube-proxy", "v1.34.6-eksbuild.2", "1.35", "is not a build for Kubernetes 1.35"),
        ("kube-proxy", "v1.35.0-eksbuild.2", "1.34", "(expected v1.34.x)"),
        ("coredns", "v1.11.4-eksbuild.24", "1.35", "(expected v1.13.x or v1.14.x)"),
        ("vpc-cni", "v1.19.0-eksbuild.1", "1.35", "is not a build for Kubernetes 1.35"),
        ("coredns", "1.13.2", "1.35", "is not shaped vX.Y.Z-eksbuild.N"),
        ("aws-ebs-csi-driver", "v1.57.1-eksbuild.1", "1.29", "no known builds for Kubernetes"),
        ("karpenter", "v1.0.0-eksbuild.1", "1.35", "has no row"),
    ],
)
def test_the_table_refuses_a_build_of_another_minor(
    addon: str, version: str, minor: str, problem: str
) -> None:
    message = addon_version_problem(addon, version, minor)
    assert message is not None and problem in message and "\n" not in message
    assert addon_version_problem("kube-proxy", "v1.35.3-eksbuild.2", "1.35") is None
    assert addon_version_problem("coredns", "v1.14.2-eksbuild.4", "1.35") is None


@pytest.mark.parametrize("stack", STACKS)
def test_the_program_installs_exactly_the_checked_pins(
    runs: dict[str, ProgramRun], stack: str
) -> None:
    run, cfg = runs[stack], load_stack_file(stack)
    eks = run.one("eks:index:Cluster")
    installed = {
        a.inputs["addonName"]: a.inputs["addonVersion"]
        for a in run.of_type("aws:eks/addon:Addon")
        if a.inputs["addonName"] in PINNED
    }
    installed["kube-proxy"] = eks.inputs["kubeProxyAddonOptions"]["version"]
    installed["vpc-cni"] = eks.inputs["vpcCniOptions"]["addonVersion"]
    assert installed == {name: PINNED[name] for name in installed}
    assert {"kube-proxy", "vpc-cni", "coredns", "aws-ebs-csi-driver"} <= set(installed)
    for name, version in installed.items():
        assert addon_version_problem(name, version, cfg.kubernetes_version) is None


def test_a_minor_the_pins_are_not_built_for_stops_the_program() -> None:
    with pytest.raises(
        ValueError,
        match=r"^ClusterArgs\.kubernetes_version: kube-proxy v1\.35\.\S+ is not a build for"
        r" Kubernetes 1\.34 \(expected v1\.34\.x\)",
    ) as err:
        run_program("dev", overrides={"kubernetesVersion": "1.34"}, secrets=SECRETS)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("stack", STACKS)
def test_endpoints_serve_the_private_subnets_over_https_from_the_vpc(
    runs: dict[str, ProgramRun], stack: str
) -> None:
    run, cfg = runs[stack], load_stack_file(stack)
    endpoints = {e.inputs["serviceName"]: e for e in run.of_type(ENDPOINT)}
    if not cfg.vpc_endpoints:  # dev: off, its idle cost would double (Pulumi.dev.yaml)
        assert endpoints == {}
        return
    prefix = f"com.amazonaws.{cfg.region}."
    assert set(endpoints) == {prefix + s for s in ("s3", "ecr.api", "ecr.dkr", "sts", "logs")}
    vpc = run.one("aws:ec2/vpc:Vpc")
    private_rts = sorted(
        r.id for r in run.of_type("aws:ec2/routeTable:RouteTable") if "-private-" in r.name
    )
    private_subnets = sorted(
        s.id for s in run.of_type("aws:ec2/subnet:Subnet") if s.name.startswith("network-private-")
    )
    assert len(private_rts) == len(private_subnets) == len(cfg.availability_zones)
    s3 = endpoints[prefix + "s3"].inputs
    assert (s3["vpcEndpointType"], s3["vpcId"]) == ("Gateway", vpc.id)
    assert sorted(s3["routeTableIds"]) == private_rts
    sg = run.one("aws:ec2/securityGroup:SecurityGroup", "network-endpoints-sg")
    for service in ("ecr.api", "ecr.dkr", "sts", "logs"):
        e = endpoints[prefix + service].inputs
        assert (e["vpcEndpointType"], e["privateDnsEnabled"]) == ("Interface", True)
        assert sorted(e["subnetIds"]) == private_subnets
        assert e["securityGroupIds"] == [sg.id]
    rules = [
        r
        for r in run.resources
        if r.type.startswith("aws:vpc/securityGroup") and r.inputs["securityGroupId"] == sg.id
    ]
    assert [(r.type.rsplit(":", 1)[-1], r.inputs.get("cidrIpv4")) for r in rules] == [
        ("SecurityGroupIngressRule", cfg.vpc_cidr)
    ]
    (https,) = rules
    assert (https.inputs["ipProtocol"], https.inputs["fromPort"], https.inputs["toPort"]) == (
        "tcp",
        443,
        443,
    )


def test_endpoints_turn_off_and_need_a_region() -> None:
    assert load_stack_file("p4de-odcr").vpc_endpoints  # on by default
    run = run_program("p4de-odcr", overrides={"vpcEndpoints": False}, secrets=SECRETS)
    assert run.of_type(ENDPOINT) == []
    names = {r.name for r in run.of_type("aws:ec2/securityGroup:SecurityGroup")}
    assert "network-endpoints-sg" not in names
    with pytest.raises(ValueError, match=r"^NetworkArgs\.region: "):
        NetworkArgs(cluster_name="c", vpc_cidr="10.0.0.0/16", availability_zones=("a", "b"))
    assert not NetworkArgs(
        cluster_name="c", vpc_cidr="10.0.0.0/16", availability_zones=("a", "b"), vpc_endpoints=False
    ).vpc_endpoints
