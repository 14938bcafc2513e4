"""Subnet planning for the cluster VPC: a pure function, no Pulumi.

``plan_subnets`` carves one private and one public subnet per availability zone out of the VPC
CIDR. Private subnets (nodes and pods: the VPC CNI gives every pod a VPC address, and a p5 node
alone takes hundreds) get the large blocks; public subnets (NAT gateways and load balancers)
share one block of the same size, split further. ``infra.config`` calls it to validate
``vpcCidr`` and ``infra.network`` to create the subnets, so both agree by construction.
"""

from __future__ import annotations

import ipaddress
import math
from dataclasses import dataclass

MIN_VPC_PREFIX = 16
"""AWS allows VPC CIDR blocks from /16 ..."""
MAX_SUBNET_PREFIX = 28
"""... to /28, and subnets no smaller than /28."""


@dataclass(frozen=True, kw_only=True)
class SubnetPlan:
    """The two subnets of one availability zone."""

    availability_zone: str
    """Availability zone name, e.g. ``us-east-1a``."""
    private_cidr: str
    """CIDR of the private subnet (nodes and pods; routes to a NAT gateway)."""
    public_cidr: str
    """CIDR of the public subnet (NAT gateway, internet-facing load balancers)."""


def plan_subnets(vpc_cidr: str, azs: list[str] | tuple[str, ...]) -> list[SubnetPlan]:
    """One private and one public subnet per AZ, in the order of ``azs``.

    The VPC is split into ``2**bits`` equal blocks with ``2**bits > len(azs)``: blocks
    ``0..n-1`` are the private subnets, the last block is split again into ``2**bits`` public
    subnets. A /16 over 2 or 3 AZs gives /18 private and /20 public subnets.
    Raises ``ValueError`` (one line) when the CIDR is malformed or the subnets do not fit.
    """
    try:
        vpc = ipaddress.IPv4Network(vpc_cidr, strict=True)
    except ValueError as exc:
        raise ValueError(f"{vpc_cidr!r} is not an IPv4 network CIDR ({exc})") from None
    if not MIN_VPC_PREFIX <= vpc.prefixlen <= MAX_SUBNET_PREFIX:
        raise ValueError(
            f"{vpc_cidr} has prefix /{vpc.prefixlen}; a VPC must be /{MIN_VPC_PREFIX}"
            f" to /{MAX_SUBNET_PREFIX}"
        )
    n = len(azs)
    if n == 0:
        raise ValueError("no availability zones to plan subnets for")
    bits = math.ceil(math.log2(n + 1))
    private_prefix = vpc.prefixlen + bits
    public_prefix = private_prefix + bits
    if public_prefix > MAX_SUBNET_PREFIX:
        raise ValueError(
            f"{vpc_cidr} is too small for {n} availability zones: public subnets would be"
            f" /{public_prefix}, smaller than /{MAX_SUBNET_PREFIX}"
        )
    blocks = list(vpc.subnets(prefixlen_diff=bits))
    publics = list(blocks[-1].subnets(prefixlen_diff=bits))
    return [
        SubnetPlan(availability_zone=az, private_cidr=str(blocks[i]), public_cidr=str(publics[i]))
        for i, az in enumerate(azs)
    ]
