"""Pure functions of the infra room (subnet plan, EFA interfaces, catalog, component args).

Nothing is mocked: these functions need no Pulumi engine. If they fail, the VPC would be carved
into overlapping or misplaced subnets, a launch template would attach the wrong number or kind
of EFA interfaces (a p5 with fewer than 32 loses bandwidth; a wrong device index fails the
launch), worker pods would request the wrong extended resources, or a component would accept
arguments it cannot build.
"""

from __future__ import annotations

import ipaddress

import pytest

from infra import instances
from infra.cluster import ClusterArgs, ebs_csi_trust_policy
from infra.config import GpuNodeGroupConfig, Taint, parse_taint
from infra.config.nodegroups import node_labels
from infra.device_plugins import DevicePluginsArgs, nvidia_values, plugin_tolerations
from infra.gpu_nodegroup import GpuNodeGroupArgs, efa_network_interfaces
from infra.network import NetworkArgs, plan_subnets
from infra.outputs import next_steps


def test_plan_subnets_two_zones_of_a_slash_16() -> None:
    plan = plan_subnets("10.0.0.0/16", ["us-east-1a", "us-east-1b"])
    assert [(p.availability_zone, p.private_cidr, p.public_cidr) for p in plan] == [
        ("us-east-1a", "10.0.0.0/18", "10.0.192.0/20"),
        ("us-east-1b", "10.0.64.0/18", "10.0.208.0/20"),
    ]


@pytest.mark.parametrize("zones", [2, 3, 4, 6])
def test_plan_subnets_are_disjoint_and_inside_the_vpc(zones: int) -> None:
    vpc = ipaddress.IPv4Network("10.20.0.0/16")
    azs = [f"us-east-1{chr(ord('a') + i)}" for i in range(zones)]
    plan = plan_subnets(str(vpc), azs)
    nets = [ipaddress.IPv4Network(c) for p in plan for c in (p.private_cidr, p.public_cidr)]
    assert len(plan) == zones
    assert all(n.subnet_of(vpc) for n in nets)
    for i, a in enumerate(nets):
        for b in nets[i + 1 :]:
            assert not a.overlaps(b), (a, b)
    private = ipaddress.IPv4Network(plan[0].private_cidr)
    public = ipaddress.IPv4Network(plan[0].public_cidr)
    assert private.num_addresses > public.num_addresses  # nodes and pods live in private


def test_plan_subnets_rejects_too_small_a_vpc() -> None:
    with pytest.raises(ValueError, match="too small for 3 availability zones"):
        plan_subnets("10.0.0.0/26", ["a", "b", "c"])


def test_efa_interfaces_refuse_a_type_without_efa() -> None:
    with pytest.raises(ValueError, match=r"^instance: g5.xlarge has no EFA"):
        efa_network_interfaces(instances.lookup("g5.xlarge"), ["sg"])


def test_catalog_rows_drive_pod_resources() -> None:
    assert instances.lookup("p5.48xlarge").pod_resources() == {
        "nvidia.com/gpu": 8,
        "vpc.amazonaws.com/efa": 32,
    }
    assert instances.lookup("p4de.24xlarge").pod_resources() == {
        "nvidia.com/gpu": 8,
        "vpc.amazonaws.com/efa": 4,
    }
    assert instances.lookup("g5.xlarge").pod_resources() == {"nvidia.com/gpu": 1}
    assert instances.lookup("p4de.24xlarge").needs_fi_env
    assert not instances.lookup("p5.48xlarge").needs_fi_env
    with pytest.raises(KeyError, match=r"unknown instance type 'x1\.large'"):
        instances.lookup("x1.large")


def test_taint_round_trip_and_toleration() -> None:
    taint = parse_taint("nvidia.com/gpu=true:NoSchedule")
    assert taint == Taint(key="nvidia.com/gpu", value="true", effect="NoSchedule")
    assert str(taint) == "nvidia.com/gpu=true:NoSchedule"
    assert taint.toleration() == {
        "key": "nvidia.com/gpu",
        "operator": "Equal",
        "value": "true",
        "effect": "NoSchedule",
    }


def _group(**kw: object) -> GpuNodeGroupConfig:
    base: dict[str, object] = {
        "name": "p5",
        "instance_type": "p5.48xlarge",
        "min_size": 0,
        "desired_size": 2,
        "max_size": 2,
        "availability_zone": "us-east-1a",
        "efa": True,
    }
    return GpuNodeGroupConfig(**{**base, **kw})  # type: ignore[arg-type]


def test_node_labels_select_plugins_and_name_the_group() -> None:
    labels = node_labels(_group(labels={"team": "ml", "eks-fsdp/nodegroup": "spoofed"}))
    assert labels["eks-fsdp/nodegroup"] == "p5"
    assert labels["node.kubernetes.io/instance-type"] == "p5.48xlarge"
    assert labels["nvidia.com/gpu.present"] == "true"
    assert labels["vpc.amazonaws.com/efa.present"] == "true"
    assert labels["team"] == "ml"
    assert "vpc.amazonaws.com/efa.present" not in node_labels(_group(efa=False))


def test_plugin_tolerations_deduplicate_taints() -> None:
    gpu = Taint(key="nvidia.com/gpu", value="true", effect="NoSchedule")
    other = Taint(key="dedicated", value="train", effect="NoExecute")
    tolerations = plugin_tolerations((gpu, gpu, other))
    assert tolerations == [
        gpu.toleration(),
        other.toleration(),
        {"key": "CriticalAddonsOnly", "operator": "Exists"},
    ]
    affinity = nvidia_values((gpu,))["affinity"]
    assert "nvidia.com/gpu.present" in str(affinity)


def test_ebs_csi_trust_policy_is_scoped_to_its_service_account() -> None:
    policy = ebs_csi_trust_policy("arn:oidc", "https://oidc.eks.x/id/ABC")
    assert '"oidc.eks.x/id/ABC:sub": "system:serviceaccount:kube-system:ebs-csi-controller-sa"' in (
        policy
    )
    assert '"Federated": "arn:oidc"' in policy


def test_next_steps_start_with_the_kubeconfig() -> None:
    steps = next_steps("dev", "eks-fsdp-dev", "us-west-2")
    assert "pulumi stack output kubeconfig --show-secrets > kubeconfig" in steps
    assert any(s.startswith("kubectl get nodes") for s in steps)
    assert any("--name eks-fsdp-dev --region us-west-2" in s for s in steps)


@pytest.mark.parametrize(
    ("build", "field"),
    [
        (lambda: NetworkArgs(cluster_name="c", vpc_cidr="10.0.0.0/16",
                             availability_zones=("a",)), "NetworkArgs.availability_zones"),
        (lambda: NetworkArgs(cluster_name="c", vpc_cidr="10.0.0.0/16",
                             availability_zones=("a", "b"), nat_gateways="many"),
         "NetworkArgs.nat_gateways"),
        (lambda: NetworkArgs(cluster_name="c", vpc_cidr="10.0.0.0/27",
                             availability_zones=("a", "b")), "NetworkArgs.vpc_cidr"),
        (lambda: ClusterArgs(cluster_name="c", kubernetes_version="1.33", vpc_id="v",
                             public_subnet_ids=["p"], private_subnet_ids=["x"]),
         "ClusterArgs.private_subnet_ids"),
        (lambda: ClusterArgs(cluster_name="c", kubernetes_version="v1", vpc_id="v",
                             public_subnet_ids=["p"], private_subnet_ids=["x", "y"]),
         "ClusterArgs.kubernetes_version"),
        (lambda: GpuNodeGroupArgs(group=_group(), cluster_name="c", node_role_arn="r",
                                  subnet_ids=["a", "b"], security_group_ids=["s"]),
         "GpuNodeGroupArgs.subnet_ids"),
        (lambda: GpuNodeGroupArgs(group=_group(), cluster_name="c", node_role_arn="r",
                                  subnet_ids=["a"]), "GpuNodeGroupArgs.security_group_ids"),
        (lambda: DevicePluginsArgs(gpu_taints=(), efa=False), "DevicePluginsArgs.gpu_taints"),
    ],
)  # fmt: skip
def test_component_args_validate_at_construction(build: object, field: str) -> None:
    with pytest.raises(ValueError, match=rf"^{field}: "):
        build()  # type: ignore[operator]
