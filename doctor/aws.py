"""The account checks: region and zones, capacity reservations, EC2 and VPC quotas.

Every call goes through boto3 with the user's credentials and the standard variables
(``AWS_PROFILE``, ``AWS_REGION``, ``AWS_ENDPOINT_URL`` and the per-service
``AWS_ENDPOINT_URL_EC2`` / ``AWS_ENDPOINT_URL_SERVICE_QUOTAS``: boto3 guide, "Configuration",
service-specific endpoints). Only read calls: ``ec2:DescribeRegions``,
``ec2:DescribeAvailabilityZones``, ``ec2:DescribeCapacityReservations``,
``ec2:DescribeAddresses``, ``ec2:DescribeVpcs``, ``servicequotas:GetServiceQuota``.

Response fields are the botocore service model's (``ec2`` ``CapacityReservation``: ``State``,
``InstanceType``, ``InstancePlatform``, ``AvailabilityZone``, ``TotalInstanceCount``,
``ReservationType``, ``StartDate``, ``EndDate``; ``service-quotas`` ``ServiceQuota.Value``).
boto3 is imported inside functions: ``infra.config`` users that never check the account do not
need it.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from doctor.awserrors import NOT_FOUND, api_errors, classify, field
from doctor.awserrors import fix as fix_for
from doctor.checks import FAIL, OK, SKIP, WARN, Result
from infra.config import GpuNodeGroupConfig, StackConfig
from infra.config.nodegroups import iso_utc

PLATFORM = "Linux/UNIX"
"""The platform of the nodes' AMI (EKS-optimized Amazon Linux 2023 accelerated AMIs): a
reservation of another platform does not take them (EC2 user guide, "Launch instances using
Capacity Blocks": an instance "can't launch using an AMI with a different platform than the
platform for your Capacity Block"; the same holds for ODCRs, "Capacity Reservation matching")."""
USABLE_STATES = ("active", "scheduled")
"""``CapacityReservation.State`` values a stack can be deployed against: ``active`` now, or
``scheduled`` (a future-dated ODCR or a capacity block before its start)."""
WAIT_STATES = ("payment-pending", "assessing", "pending", "delayed")
"""States that may still become usable (warned, not failed)."""

VCPU_QUOTAS: Mapping[str, tuple[str, str]] = {
    "p": ("L-417A185B", "Running On-Demand P instances"),
    "g": ("L-DB2E81BA", "Running On-Demand G and VT instances"),
}
"""Service Quotas codes (service ``ec2``) of the On-Demand vCPU quotas by instance family
letter (Service Quotas console, Amazon EC2; EC2 user guide, "On-Demand Instance quotas": the
quota counts vCPUs of running instances, instances in an On-Demand Capacity Reservation
included)."""
EIP_QUOTA = ("ec2", "L-0263D0A3", "EC2-VPC Elastic IPs")
"""One Elastic IP per NAT gateway (VPC user guide, "NAT gateways": a public NAT gateway needs an
Elastic IP); ``natGateways: perAz`` needs one per zone."""
VPC_QUOTA = ("vpc", "L-F678F1CE", "VPCs per Region")
"""The stack creates one VPC (VPC user guide, "Amazon VPC quotas")."""


@dataclass(frozen=True)
class Clients:
    """The boto3 clients the checks use (tests hand in Stubber-wrapped or loopback ones)."""

    ec2: Any
    """EC2: regions, zones, addresses, VPCs."""
    reservations: Any
    """EC2 for ``describe_capacity_reservations`` (the same client outside tests)."""
    quotas: Any
    """Service Quotas."""

    @classmethod
    def for_region(cls, region: str) -> Clients:
        """Clients of the default session (credentials and endpoints from the environment)."""
        import boto3

        session = boto3.session.Session(region_name=region)
        ec2 = session.client("ec2")
        return cls(ec2=ec2, reservations=ec2, quotas=session.client("service-quotas"))


def credentials_resolve() -> bool:
    """True when boto3's credential chain finds credentials (without calling AWS)."""
    import boto3

    return boto3.session.Session().get_credentials() is not None


def check_region(cfg: StackConfig, clients: Clients) -> list[Result]:
    """The stack's region exists and is enabled; each of its zones exists and is available."""
    region = cfg.region
    if not region:
        return [
            Result(
                check="region",
                status=FAIL,
                detail="aws:region is not set",
                fix=f"pulumi config set aws:region us-east-2 --stack {cfg.stack}",
            )
        ]
    try:
        regions = field(clients.ec2.describe_regions(AllRegions=True), "Regions", "DescribeRegions")
    except api_errors() as exc:
        err = classify(exc)
        return [
            Result(
                check="region",
                status=FAIL,
                detail=err.detail(),
                fix=fix_for(err, "ec2:DescribeRegions"),
            )
        ]
    by_name = {r["RegionName"]: r for r in regions}
    if region not in by_name:
        return [
            Result(
                check="region",
                status=FAIL,
                detail=f"{region} is not an AWS region",
                fix=f"set aws:region to one of {', '.join(sorted(by_name)[:6])}, ...",
            )
        ]
    opt_in = by_name[region].get("OptInStatus", "opt-in-not-required")
    if opt_in == "not-opted-in":
        return [
            Result(
                check="region",
                status=FAIL,
                detail=f"{region} is not enabled in this account",
                fix=f"enable {region} (Account settings, AWS Regions) or pick another",
            )
        ]
    out = [Result(check="region", status=OK, detail=f"{region} ({opt_in})")]
    try:
        zones = field(
            clients.ec2.describe_availability_zones(),
            "AvailabilityZones",
            "DescribeAvailabilityZones",
        )
    except api_errors() as exc:
        err = classify(exc)
        return [
            *out,
            Result(
                check="zones",
                status=FAIL,
                detail=err.detail(),
                fix=fix_for(err, "ec2:DescribeAvailabilityZones"),
            ),
        ]
    states = {z["ZoneName"]: z.get("State", "available") for z in zones}
    missing = [z for z in cfg.availability_zones if z not in states]
    down = [z for z in cfg.availability_zones if states.get(z, "available") != "available"]
    usable = sorted(z for z, s in states.items() if s == "available")
    if missing or down:
        what = (f"{', '.join(missing)} not in {region}" if missing else "") + (
            ("; " if missing and down else "")
            + (f"{', '.join(down)} not available" if down else "")
        )
        out.append(
            Result(
                check="zones",
                status=FAIL,
                detail=what,
                fix=f"set availabilityZones to zones of {region}: {', '.join(usable)}",
            )
        )
    else:
        out.append(Result(check="zones", status=OK, detail=", ".join(cfg.availability_zones)))
    return out


def reservation_problems(
    group: GpuNodeGroupConfig, r: Mapping[str, Any]
) -> tuple[list[str], list[str]]:
    """(problems, warnings) of reservation ``r`` (a ``CapacityReservation``) for ``group``."""
    problems: list[str] = []
    warnings: list[str] = []
    state = r.get("State")
    if state in WAIT_STATES:
        warnings.append(f"state {state}")
    elif state not in USABLE_STATES:
        problems.append(f"state {state} (needs active or scheduled)")
    if r.get("InstanceType") != group.instance_type:
        problems.append(
            f"instance type {r.get('InstanceType')}, the group runs {group.instance_type}"
        )
    if r.get("AvailabilityZone") != group.availability_zone:
        problems.append(
            f"zone {r.get('AvailabilityZone')}, the group is in {group.availability_zone}"
        )
    if r.get("InstancePlatform") != PLATFORM:
        problems.append(f"platform {r.get('InstancePlatform')}, the nodes run {PLATFORM}")
    total = int(r.get("TotalInstanceCount") or 0)
    if total < group.desired_size:
        problems.append(f"{total} instances, the group wants desiredSize {group.desired_size}")
    elif total < group.max_size:
        warnings.append(f"{total} instances, the group may scale to maxSize {group.max_size}")
    kind = r.get("ReservationType", "default")
    if group.capacity_type == "capacity-block" and kind != "capacity-block":
        problems.append(
            "an On-Demand Capacity Reservation, the group says capacityType capacity-block"
        )
    if group.capacity_type != "capacity-block" and kind == "capacity-block":
        problems.append("a capacity block, the group says capacityType on-demand")
    window = group.capacity_block
    start, end = r.get("StartDate"), r.get("EndDate")
    dated = isinstance(start, dt.datetime) and isinstance(end, dt.datetime)
    if window is None and group.capacity_type == "capacity-block" and kind == "capacity-block":
        warnings.append("no capacityBlock window: the group is never scaled down before the end")
    if window is not None and dated and (start, end) != (window.start, window.end):
        problems.append(
            f"window {iso_utc(start)} - {iso_utc(end)}, capacityBlock says "
            f"{iso_utc(window.start)} - {iso_utc(window.end)}"
        )
    return problems, warnings


def _window(r: Mapping[str, Any]) -> str:
    start, end = r.get("StartDate"), r.get("EndDate")
    parts = []
    if isinstance(start, dt.datetime):
        parts.append(f"start {iso_utc(start)}")
    if isinstance(end, dt.datetime):
        parts.append(f"end {iso_utc(end)}")
    return ", ".join(parts)


def check_reservation(cfg: StackConfig, group: GpuNodeGroupConfig, clients: Clients) -> Result:
    """The group's reservation exists and fits the group (type, zone, platform, count, kind)."""
    name = f"reservation {group.name}"
    rid = group.capacity_reservation_id
    if rid is None:
        return Result(
            check=name,
            status=SKIP,
            detail="a resource group of reservations "
            f"({group.capacity_reservation_resource_group_arn}) is not checked",
        )
    listing = f"aws ec2 describe-capacity-reservations --region {cfg.region}"
    missing = (
        f"set gpuNodeGroups[{group.name}].capacityReservationId to one of "
        f"yours ({listing}) or buy one (docs/capacity.md)"
    )
    try:
        found = field(
            clients.reservations.describe_capacity_reservations(CapacityReservationIds=[rid]),
            "CapacityReservations",
            "DescribeCapacityReservations",
        )
    except api_errors() as exc:
        err = classify(exc)
        if err.kind == NOT_FOUND:
            return Result(
                check=name,
                status=FAIL,
                detail=f"{rid} does not exist in this account in {cfg.region} ({err.code})",
                fix=missing,
            )
        return Result(
            check=name,
            status=FAIL,
            detail=f"{rid}: {err.detail()}",
            fix=fix_for(err, "ec2:DescribeCapacityReservations"),
        )
    if not found:
        return Result(
            check=name,
            status=FAIL,
            detail=f"{rid} not found in {cfg.region}",
            fix=f"set capacityReservationId to one of yours ({listing})",
        )
    r = found[0]
    problems, warnings = reservation_problems(group, r)
    seen = (
        f"{rid} {r.get('State')} {r.get('ReservationType', 'default')} "
        f"{r.get('TotalInstanceCount')}x {r.get('InstanceType')} in {r.get('AvailabilityZone')}"
    )
    window = _window(r)
    seen += f" ({window})" if window else ""
    if problems:
        fix = f"use a reservation that matches gpuNodeGroups[{group.name}] or change the group"
        if any(p.startswith("window") for p in problems) and window:
            fix = f"set capacityBlock to the reservation's times ({window})"
        return Result(check=name, status=FAIL, detail=f"{seen}: {'; '.join(problems)}", fix=fix)
    if warnings:
        fixes = []
        if any(w.startswith("no capacityBlock") for w in warnings):
            times = window or "the block's start and end, UTC"
            fixes.append(f"set gpuNodeGroups[{group.name}].capacityBlock to {times}")
        if any(not w.startswith("no capacityBlock") for w in warnings):
            fixes.append("wait for the reservation to become active, or lower maxSize")
        return Result(
            check=name,
            status=WARN,
            detail=f"{seen}: {'; '.join(warnings)}",
            fix="; ".join(fixes),
        )
    return Result(check=name, status=OK, detail=seen)


def _quota(clients: Clients, service: str, code: str) -> float:
    answer = clients.quotas.get_service_quota(ServiceCode=service, QuotaCode=code)
    return float(field(field(answer, "Quota", "GetServiceQuota"), "Value", "GetServiceQuota"))


def _quota_result(
    check: str,
    clients: Clients,
    quota: tuple[str, str, str],
    need: int,
    used: int,
    what: str,
    region: str | None,
) -> Result:
    service, code, title = quota
    try:
        value = _quota(clients, service, code)
    except api_errors() as exc:
        err = classify(exc)
        return Result(
            check=check,
            status=FAIL,
            detail=f"{title} ({code}): {err.detail()}",
            fix=fix_for(
                err,
                "servicequotas:GetServiceQuota",
                not_found=f"Service Quotas has no {service} quota {code} in {region}: "
                "check aws:region (aws service-quotas list-service-quotas "
                f"--service-code {service} --region {region})",
            ),
        )
    detail = f"{title} ({code}) {value:g}; in use {used}, the stack needs {need} {what}"
    if used + need > value:
        return Result(
            check=check,
            status=FAIL,
            detail=detail,
            fix=f"request {used + need:g} or more: aws service-quotas "
            f"request-service-quota-increase --service-code {service} --quota-code {code}"
            f" --desired-value {used + need} --region {region}",
        )
    return Result(check=check, status=OK, detail=detail)


def check_quotas(cfg: StackConfig, clients: Clients) -> list[Result]:
    """On-Demand vCPUs of the GPU families, Elastic IPs for the NAT gateways, VPCs."""
    out: list[Result] = []
    for letter, (code, title) in VCPU_QUOTAS.items():
        groups = [g for g in cfg.gpu_node_groups if g.instance_type.startswith(letter)]
        if not groups:
            continue
        # Capacity blocks are bought per block and are not On-Demand instances; the quota is
        # checked for the on-demand groups (ODCRs included, see VCPU_QUOTAS).
        od = [g for g in groups if g.capacity_type != "capacity-block"]
        if not od:
            out.append(
                Result(
                    check=f"quota {letter.upper()} vCPUs",
                    status=SKIP,
                    detail=f"{title}: only capacity-block groups",
                )
            )
            continue
        need = sum(g.max_size * g.instance.vcpus for g in od)
        out.append(
            _quota_result(
                f"quota {letter.upper()} vCPUs",
                clients,
                ("ec2", code, title),
                need,
                0,
                "vCPUs at maxSize (running instances not counted)",
                cfg.region,
            )
        )
    used: dict[str, int] = {}
    for call, key in (("DescribeAddresses", "Addresses"), ("DescribeVpcs", "Vpcs")):
        method = getattr(clients.ec2, "describe_" + call[len("Describe") :].lower())
        try:
            used[key] = len(field(method(), key, call))
        except api_errors() as exc:
            err = classify(exc)
            return [
                *out,
                Result(
                    check="quota usage",
                    status=FAIL,
                    detail=f"{call}: {err.detail()}",
                    fix=fix_for(err, f"ec2:{call}"),
                ),
            ]
    eips, vpcs = used["Addresses"], used["Vpcs"]
    nats = len(cfg.availability_zones) if cfg.nat_gateways == "perAz" else 1
    out.append(
        _quota_result(
            "quota Elastic IPs",
            clients,
            EIP_QUOTA,
            nats,
            eips,
            f"for {nats} NAT gateway(s) ({cfg.nat_gateways})",
            cfg.region,
        )
    )
    out.append(_quota_result("quota VPCs", clients, VPC_QUOTA, 1, vpcs, "VPC", cfg.region))
    return out


def account_checks(cfg: StackConfig, clients: Clients) -> list[Result]:
    """Region, zones, every reservation of the GPU groups, quotas."""
    out = check_region(cfg, clients)
    if any(r.status == FAIL and r.check == "region" for r in out):
        return out
    out += [check_reservation(cfg, g, clients) for g in cfg.gpu_node_groups if g.has_reservation]
    out += check_quotas(cfg, clients)
    return out


def reservation_failures(cfg: StackConfig, clients: Clients) -> Sequence[Result]:
    """The reservation checks that failed (what ``pulumi preview`` stops on)."""
    results = [check_reservation(cfg, g, clients) for g in cfg.gpu_node_groups if g.has_reservation]
    return [r for r in results if r.status == FAIL]


__all__ = [
    "EIP_QUOTA",
    "OK",
    "PLATFORM",
    "VCPU_QUOTAS",
    "VPC_QUOTA",
    "Clients",
    "account_checks",
    "check_quotas",
    "check_region",
    "check_reservation",
    "credentials_resolve",
    "reservation_failures",
    "reservation_problems",
]
