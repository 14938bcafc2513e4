"""``Network``: the cluster VPC, built from plain pulumi-aws resources.

One VPC across >= 2 zones; per zone a public subnet (NAT gateway, internet-facing load
balancers) and a private subnet (every node and pod); one NAT gateway or one per zone; the
EKS / load-balancer discovery tags; and the EFA security group: all traffic between its members
and nothing else, in or out (EFA needs self-referencing inbound and outbound rules; the nodes'
other traffic goes through the cluster security group each EFA interface also carries). Plain resources rather than ``awsx.ec2.Vpc`` keep every subnet, route and
tag visible to the unit tests (awsx is a remote component: under mocks nothing inside runs).

VPC endpoints (``vpcEndpoints``, on by default): a gateway endpoint for S3 on every private
route table, and interface endpoints (private DNS, one ENI per private subnet) for ECR's API
and registry (``ecr.api``, ``ecr.dkr``), STS and CloudWatch Logs, behind a security group that
admits HTTPS (443) from the VPC's CIDR only. The EKS user guide ("Deploy private clusters with
limited internet access") names these for nodes without internet; here the nodes keep their
NAT route, and the endpoints take the heavy traffic off it: a training image is several GB of
ECR layers, served from S3 (hence the S3 gateway, which ECR's layer downloads go through),
and NAT gateways charge per GB processed. STS serves IRSA and Pod Identity token exchanges,
Logs the CloudWatch agent and Fluent Bit.
"""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_aws as aws

from infra.subnets import SubnetPlan, plan_subnets

TYPE_TOKEN = "eks-fsdp:infra:Network"
INTERFACE_ENDPOINT_SERVICES = ("ecr.api", "ecr.dkr", "sts", "logs")
"""Interface endpoints (``com.amazonaws.<region>.<service>``): ECR API and registry, STS, Logs."""
GATEWAY_ENDPOINT_SERVICES = ("s3",)
"""Gateway endpoints on the private route tables: S3 (ECR image layers, datasets, checkpoints)."""
HTTPS_PORT = 443

__all__ = ["Network", "NetworkArgs", "SubnetPlan", "plan_subnets"]


@dataclass(frozen=True, kw_only=True)
class NetworkArgs:
    """Arguments of ``Network``."""

    cluster_name: str
    """EKS cluster name, for the ``kubernetes.io/cluster/<name>`` tags."""
    vpc_cidr: str
    """VPC CIDR block."""
    availability_zones: tuple[str, ...]
    """Zones to span (at least 2)."""
    nat_gateways: str = "single"
    """``single`` | ``perAz``."""
    vpc_endpoints: bool = True
    """Create the S3 gateway and the ECR/STS/Logs interface endpoints."""
    region: str | None = None
    """AWS region (``aws:region``): the endpoints' service names; required with endpoints."""
    tags: dict[str, str] | None = None
    """Extra tags on every resource."""

    def __post_init__(self) -> None:
        if not self.cluster_name:
            raise ValueError("NetworkArgs.cluster_name: must not be empty")
        if len(self.availability_zones) < 2:
            raise ValueError(
                "NetworkArgs.availability_zones: EKS needs at least 2 zones,"
                f" got {len(self.availability_zones)}"
            )
        if self.nat_gateways not in ("single", "perAz"):
            raise ValueError(
                f"NetworkArgs.nat_gateways: {self.nat_gateways!r} is not single or perAz"
            )
        try:
            plan_subnets(self.vpc_cidr, self.availability_zones)
        except ValueError as exc:
            raise ValueError(f"NetworkArgs.vpc_cidr: {exc}") from None
        if self.vpc_endpoints and not self.region:
            raise ValueError("NetworkArgs.region: the VPC endpoints' service names need it")


class Network(pulumi.ComponentResource):
    """VPC, subnets, gateways, routes and the EFA security group."""

    vpc_id: pulumi.Output[str]
    """The VPC id."""
    public_subnet_ids: list[pulumi.Output[str]]
    """Public subnet ids, in zone order."""
    private_subnet_ids: list[pulumi.Output[str]]
    """Private subnet ids, in zone order."""
    private_subnet_ids_by_az: dict[str, pulumi.Output[str]]
    """Private subnet id of each zone (GPU nodegroups pin to one)."""
    efa_security_group_id: pulumi.Output[str]
    """Security group allowing all traffic between its members (EFA)."""
    nat_gateway_ids: list[pulumi.Output[str]]
    """NAT gateway ids (one, or one per zone)."""
    endpoint_ids: dict[str, pulumi.Output[str]]
    """VPC endpoint id per service (``s3``, ``ecr.api``, ...); empty without endpoints."""

    def __init__(
        self, name: str, args: NetworkArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__(TYPE_TOKEN, name, {}, opts)
        child = pulumi.ResourceOptions(parent=self)
        base_tags = {**(args.tags or {}), f"kubernetes.io/cluster/{args.cluster_name}": "shared"}
        plan = plan_subnets(args.vpc_cidr, args.availability_zones)

        vpc = aws.ec2.Vpc(
            f"{name}-vpc",
            cidr_block=args.vpc_cidr,
            enable_dns_hostnames=True,
            enable_dns_support=True,
            tags={**base_tags, "Name": f"{args.cluster_name}-vpc"},
            opts=child,
        )
        igw = aws.ec2.InternetGateway(
            f"{name}-igw",
            vpc_id=vpc.id,
            tags={**base_tags, "Name": f"{args.cluster_name}-igw"},
            opts=child,
        )
        public_rt = aws.ec2.RouteTable(
            f"{name}-public-rt",
            vpc_id=vpc.id,
            routes=[aws.ec2.RouteTableRouteArgs(cidr_block="0.0.0.0/0", gateway_id=igw.id)],
            tags={**base_tags, "Name": f"{args.cluster_name}-public"},
            opts=child,
        )

        public_subnets: list[aws.ec2.Subnet] = []
        private_subnets: list[aws.ec2.Subnet] = []
        private_route_tables: list[aws.ec2.RouteTable] = []
        nats: list[aws.ec2.NatGateway] = []
        for i, zone in enumerate(plan):
            az = zone.availability_zone
            public = aws.ec2.Subnet(
                f"{name}-public-{az}",
                vpc_id=vpc.id,
                cidr_block=zone.public_cidr,
                availability_zone=az,
                map_public_ip_on_launch=True,
                tags={
                    **base_tags,
                    "Name": f"{args.cluster_name}-public-{az}",
                    "kubernetes.io/role/elb": "1",
                },
                opts=child,
            )
            aws.ec2.RouteTableAssociation(
                f"{name}-public-{az}-rta",
                subnet_id=public.id,
                route_table_id=public_rt.id,
                opts=child,
            )
            public_subnets.append(public)
            if args.nat_gateways == "perAz" or i == 0:
                eip = aws.ec2.Eip(
                    f"{name}-nat-{az}-eip",
                    domain="vpc",
                    tags={**base_tags, "Name": f"{args.cluster_name}-nat-{az}"},
                    opts=child,
                )
                nats.append(
                    aws.ec2.NatGateway(
                        f"{name}-nat-{az}",
                        allocation_id=eip.id,
                        subnet_id=public.id,
                        tags={**base_tags, "Name": f"{args.cluster_name}-nat-{az}"},
                        opts=pulumi.ResourceOptions(parent=self, depends_on=[igw]),
                    )
                )

        for i, zone in enumerate(plan):
            az = zone.availability_zone
            nat = nats[i] if args.nat_gateways == "perAz" else nats[0]
            private = aws.ec2.Subnet(
                f"{name}-private-{az}",
                vpc_id=vpc.id,
                cidr_block=zone.private_cidr,
                availability_zone=az,
                map_public_ip_on_launch=False,
                tags={
                    **base_tags,
                    "Name": f"{args.cluster_name}-private-{az}",
                    "kubernetes.io/role/internal-elb": "1",
                },
                opts=child,
            )
            rt = aws.ec2.RouteTable(
                f"{name}-private-{az}-rt",
                vpc_id=vpc.id,
                routes=[aws.ec2.RouteTableRouteArgs(cidr_block="0.0.0.0/0", nat_gateway_id=nat.id)],
                tags={**base_tags, "Name": f"{args.cluster_name}-private-{az}"},
                opts=child,
            )
            aws.ec2.RouteTableAssociation(
                f"{name}-private-{az}-rta",
                subnet_id=private.id,
                route_table_id=rt.id,
                opts=child,
            )
            private_subnets.append(private)
            private_route_tables.append(rt)

        efa_sg = aws.ec2.SecurityGroup(
            f"{name}-efa-sg",
            vpc_id=vpc.id,
            description="EFA: all traffic between members, nothing else",
            tags={**base_tags, "Name": f"{args.cluster_name}-efa"},
            opts=child,
        )
        aws.vpc.SecurityGroupIngressRule(
            f"{name}-efa-ingress-self",
            security_group_id=efa_sg.id,
            referenced_security_group_id=efa_sg.id,
            ip_protocol="-1",
            description="all traffic from members",
            opts=child,
        )
        aws.vpc.SecurityGroupEgressRule(
            f"{name}-efa-egress-self",
            security_group_id=efa_sg.id,
            referenced_security_group_id=efa_sg.id,
            ip_protocol="-1",
            description="all traffic to members",
            opts=child,
        )

        self.endpoint_ids: dict[str, pulumi.Output[str]] = {}
        if args.vpc_endpoints:
            for service in GATEWAY_ENDPOINT_SERVICES:
                gateway = aws.ec2.VpcEndpoint(
                    f"{name}-endpoint-{service}",
                    vpc_id=vpc.id,
                    service_name=f"com.amazonaws.{args.region}.{service}",
                    vpc_endpoint_type="Gateway",
                    route_table_ids=[rt.id for rt in private_route_tables],
                    tags={**base_tags, "Name": f"{args.cluster_name}-{service}"},
                    opts=child,
                )
                self.endpoint_ids[service] = gateway.id
            endpoint_sg = aws.ec2.SecurityGroup(
                f"{name}-endpoints-sg",
                vpc_id=vpc.id,
                description="VPC interface endpoints: HTTPS from the VPC",
                tags={**base_tags, "Name": f"{args.cluster_name}-endpoints"},
                opts=child,
            )
            aws.vpc.SecurityGroupIngressRule(
                f"{name}-endpoints-https-from-vpc",
                security_group_id=endpoint_sg.id,
                cidr_ipv4=args.vpc_cidr,
                ip_protocol="tcp",
                from_port=HTTPS_PORT,
                to_port=HTTPS_PORT,
                description="HTTPS from the VPC",
                opts=child,
            )
            for service in INTERFACE_ENDPOINT_SERVICES:
                interface = aws.ec2.VpcEndpoint(
                    f"{name}-endpoint-{service.replace('.', '-')}",
                    vpc_id=vpc.id,
                    service_name=f"com.amazonaws.{args.region}.{service}",
                    vpc_endpoint_type="Interface",
                    private_dns_enabled=True,
                    subnet_ids=[s.id for s in private_subnets],
                    security_group_ids=[endpoint_sg.id],
                    tags={**base_tags, "Name": f"{args.cluster_name}-{service}"},
                    opts=child,
                )
                self.endpoint_ids[service] = interface.id

        self.vpc_id = vpc.id
        self.public_subnet_ids = [s.id for s in public_subnets]
        self.private_subnet_ids = [s.id for s in private_subnets]
        self.private_subnet_ids_by_az = {
            zone.availability_zone: s.id for zone, s in zip(plan, private_subnets, strict=True)
        }
        self.efa_security_group_id = efa_sg.id
        self.nat_gateway_ids = [n.id for n in nats]
        self.register_outputs(
            {
                "vpcId": self.vpc_id,
                "publicSubnetIds": self.public_subnet_ids,
                "privateSubnetIds": self.private_subnet_ids,
                "efaSecurityGroupId": self.efa_security_group_id,
            }
        )

    def private_subnets_in(self, availability_zone: str | None) -> list[pulumi.Output[str]]:
        """The private subnet of ``availability_zone``; all private subnets for None."""
        if availability_zone is None:
            return list(self.private_subnet_ids)
        if availability_zone not in self.private_subnet_ids_by_az:
            raise ValueError(
                f"availability_zone: {availability_zone} is not one of the network's zones"
                f" ({', '.join(self.private_subnet_ids_by_az)})"
            )
        return [self.private_subnet_ids_by_az[availability_zone]]
