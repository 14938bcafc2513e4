"""The network section: ``availabilityZones``, ``vpcCidr``, ``kubernetesServiceCidr``,
``natGateways``."""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping
from typing import Any

from infra.config.fields import _choice, _fail, _str, _str_list
from infra.subnets import plan_subnets

NAT_MODES = ("single", "perAz")
DEFAULT_SERVICE_CIDR = "172.20.0.0/16"

_AZ = re.compile(r"^[a-z]{2}(-[a-z]+)+-\d[a-z]$")


def _parse_network(raw: Mapping[str, Any], region: str | None) -> tuple[Any, ...]:
    azs = (
        _str_list(raw.get("availabilityZones"), "availabilityZones")
        if (raw.get("availabilityZones") is not None)
        else ()
    )
    if len(azs) < 2:
        raise _fail("availabilityZones", f"needs at least 2 zones for EKS, got {len(azs)}")
    for i, az in enumerate(azs):
        if not _AZ.match(az):
            raise _fail(f"availabilityZones[{i}]", f"{az!r} is not an availability zone name")
        if region and not (az.startswith(region) and len(az) == len(region) + 1):
            raise _fail(f"availabilityZones[{i}]", f"{az} is not in aws:region {region}")
    if len(set(azs)) != len(azs):
        raise _fail("availabilityZones", f"lists a zone twice: {', '.join(azs)}")
    vpc_cidr = _str(raw.get("vpcCidr", "10.0.0.0/16"), "vpcCidr")
    try:
        plan_subnets(vpc_cidr, azs)
    except ValueError as exc:
        raise _fail("vpcCidr", str(exc)) from None
    svc = _str(raw.get("kubernetesServiceCidr", DEFAULT_SERVICE_CIDR), "kubernetesServiceCidr")
    try:
        svc_net = ipaddress.IPv4Network(svc, strict=True)
    except ValueError as exc:
        raise _fail(
            "kubernetesServiceCidr", f"{svc!r} is not an IPv4 network CIDR ({exc})"
        ) from None
    if svc_net.overlaps(ipaddress.IPv4Network(vpc_cidr)):
        raise _fail("kubernetesServiceCidr", f"{svc} overlaps vpcCidr {vpc_cidr}")
    nat = _choice(raw.get("natGateways", "single"), NAT_MODES, "natGateways")
    return azs, vpc_cidr, svc, nat
