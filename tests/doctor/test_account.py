"""The account checks of ``eks-fsdp doctor`` (``doctor.aws``).

If this fails, ``doctor`` would pass an account that ``pulumi up`` then fails on after 20+
billed minutes (a reservation that does not exist, is expired, holds another instance type,
zone, platform or fewer instances than the group; a zone the region lacks; a quota too low
for the GPU nodes, the NAT gateways' Elastic IPs or the VPC), or fail an account that is fine.

What answers each call (said again in each test): moto's real EC2 / Service Quotas HTTP API on
127.0.0.1 (``ThreadedMotoServer``) for ``describe_regions``, ``describe_availability_zones``,
``describe_addresses``, ``describe_vpcs`` and ``get_service_quota`` of service ``vpc``; a
botocore ``Stubber`` (requests and responses validated against the service model) for
``describe_capacity_reservations`` and ``get_service_quota`` of service ``ec2``, which moto
5.2.5 does not implement.
"""

from __future__ import annotations

import dataclasses
import datetime as dt

import pytest

from doctor.aws import (
    EIP_QUOTA,
    VCPU_QUOTAS,
    VPC_QUOTA,
    Clients,
    _quota_result,
    account_checks,
    check_quotas,
    check_region,
    check_reservation,
)
from doctor.checks import FAIL, OK, SKIP, WARN
from infra.config import load_stack_file
from infra.config.nodegroups import CapacityBlockWindow
from tests.doctor.conftest import quota, reservation, stubbed

PLACEHOLDER = "cr-0fedcba9876543210"


def _p5():
    return load_stack_file("p5-16")


def test_region_and_zones_against_moto(aws) -> None:
    """moto: the p5-16 stack's region and its three zones exist; a zone the region lacks fails,
    naming it and listing the region's zones; a region AWS does not have fails."""
    cfg = _p5()
    ec2 = aws.client("ec2")
    clients = Clients(ec2=ec2, reservations=None, quotas=None)
    results = check_region(cfg, clients)
    assert [(r.check, r.status) for r in results] == [("region", OK), ("zones", OK)]
    assert results[1].detail == "us-east-2a, us-east-2b, us-east-2c"

    bad_zone = dataclasses.replace(cfg, availability_zones=("us-east-2a", "us-east-2z"))
    zones = check_region(bad_zone, clients)[1]
    assert zones.status == FAIL and "us-east-2z not in us-east-2" in zones.detail
    assert zones.fix.endswith("us-east-2a, us-east-2b, us-east-2c")

    region = check_region(dataclasses.replace(cfg, region="mars-north-1"), clients)
    assert [(r.check, r.status) for r in region] == [("region", FAIL)]
    assert "mars-north-1 is not an AWS region" in region[0].detail


def test_placeholder_reservation_fails_with_the_fix() -> None:
    """Stubber: EC2 answers InvalidCapacityReservationId.NotFound for the shipped placeholder;
    the line names the reservation, the region and how to find one's own."""
    cfg = _p5()
    client, stub = stubbed("ec2")
    stub.add_client_error(
        "describe_capacity_reservations",
        service_error_code="InvalidCapacityReservationId.NotFound",
        service_message=f"The capacity reservation ID '{PLACEHOLDER}' does not exist",
        expected_params={"CapacityReservationIds": [PLACEHOLDER]},
    )
    result = check_reservation(cfg, cfg.gpu_node_groups[0], Clients(None, client, None))
    stub.assert_no_pending_responses()
    assert result.status == FAIL
    assert result.detail.startswith(f"{PLACEHOLDER} does not exist in this account in us-east-2")
    assert "capacityReservationId" in result.fix
    assert "aws ec2 describe-capacity-reservations --region us-east-2" in result.fix


def _check(cfg, r):
    client, stub = stubbed("ec2")
    stub.add_response(
        "describe_capacity_reservations",
        {"CapacityReservations": [r]},
        {"CapacityReservationIds": [r["CapacityReservationId"]]},
    )
    result = check_reservation(cfg, cfg.gpu_node_groups[0], Clients(None, client, None))
    stub.assert_no_pending_responses()
    return result


def test_matching_block_passes_and_shows_its_window() -> None:
    """Stubber: an active 16 x p5.48xlarge Linux capacity block in us-east-2a matches the
    group; the line shows the block's start and end. A scheduled block matches too."""
    cfg = _p5()
    ok = _check(cfg, reservation(PLACEHOLDER))
    assert ok.status == OK, ok
    assert "start 2026-12-10T11:30:00Z, end 2026-12-17T11:30:00Z" in ok.detail
    assert "16x p5.48xlarge in us-east-2a" in ok.detail
    assert _check(cfg, reservation(PLACEHOLDER, state="scheduled")).status == OK


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (
            {"instance_type": "p4de.24xlarge"},
            "instance type p4de.24xlarge, the group runs p5.48xlarge",
        ),
        ({"zone": "us-east-2b"}, "zone us-east-2b, the group is in us-east-2a"),
        ({"platform": "Windows"}, "platform Windows, the nodes run Linux/UNIX"),
        ({"count": 8}, "8 instances, the group wants desiredSize 16"),
        ({"state": "expired"}, "state expired (needs active or scheduled)"),
        ({"kind": "default"}, "an On-Demand Capacity Reservation, the group says capacityType"),
    ],
)
def test_mismatched_reservation_fails_naming_the_field(change, expected) -> None:
    """Stubber: each way a reservation can differ from the group is one named problem."""
    result = _check(_p5(), reservation(PLACEHOLDER, **change))
    assert result.status == FAIL
    assert expected in result.detail
    assert result.detail.startswith(PLACEHOLDER)


def test_block_window_must_match_the_stack_and_payment_pending_warns() -> None:
    """Stubber: a capacityBlock window that differs from the block's fails with the block's
    times as the fix; a block whose payment is pending is a warning, not a failure."""
    cfg = _p5()
    group = dataclasses.replace(
        cfg.gpu_node_groups[0],
        capacity_block=CapacityBlockWindow(
            start=dt.datetime(2026, 12, 11, 11, 30, tzinfo=dt.UTC),
            end=dt.datetime(2026, 12, 17, 11, 30, tzinfo=dt.UTC),
        ),
    )
    shifted = dataclasses.replace(cfg, gpu_node_groups=(group,))
    result = _check(shifted, reservation(PLACEHOLDER))
    assert result.status == FAIL
    assert "capacityBlock says 2026-12-11T11:30:00Z - 2026-12-17T11:30:00Z" in result.detail
    assert result.fix == (
        "set capacityBlock to the reservation's times "
        "(start 2026-12-10T11:30:00Z, end 2026-12-17T11:30:00Z)"
    )
    assert _check(cfg, reservation(PLACEHOLDER, state="payment-pending")).status == WARN


def test_quotas_on_demand_gpus_eips_and_vpcs(aws) -> None:
    """moto for the Elastic IPs and VPCs in use; Stubber for the EC2 quota values (moto's
    service-quotas serves only ``vpc``). p4de-odcr's ODCR group (2 x 96 vCPUs) against a P
    quota of 96 fails with the increase command; 192 passes. p5-16 (a capacity block only)
    skips the P quota and needs 3 Elastic IPs (natGateways perAz over 3 zones)."""
    ec2 = aws.client("ec2", region="us-east-1")
    odcr = load_stack_file("p4de-odcr")
    p_code = VCPU_QUOTAS["p"][0]
    for value, status in ((96.0, FAIL), (192.0, OK)):
        quotas, stub = stubbed("service-quotas", "us-east-1")
        stub.add_response(
            "get_service_quota",
            quota("ec2", p_code, value),
            {"ServiceCode": "ec2", "QuotaCode": p_code},
        )
        stub.add_response(
            "get_service_quota",
            quota("ec2", EIP_QUOTA[1], 5.0),
            {"ServiceCode": "ec2", "QuotaCode": EIP_QUOTA[1]},
        )
        stub.add_response(
            "get_service_quota",
            quota("vpc", VPC_QUOTA[1], 5.0),
            {"ServiceCode": "vpc", "QuotaCode": VPC_QUOTA[1]},
        )
        results = {r.check: r for r in check_quotas(odcr, Clients(ec2, None, quotas))}
        stub.assert_no_pending_responses()
        assert results["quota P vCPUs"].status == status
        assert "the stack needs 192 vCPUs" in results["quota P vCPUs"].detail
        assert results["quota Elastic IPs"].status == OK
        assert results["quota VPCs"].status == OK
    assert "--quota-code L-417A185B --desired-value 192" in (
        _quota_result(
            "q",
            Clients(ec2, None, _one_quota("ec2", p_code, 96.0)),
            ("ec2", p_code, "P"),
            192,
            0,
            "vCPUs",
            "us-east-1",
        ).fix
    )

    p5 = _p5()
    quotas, stub = stubbed("service-quotas")
    stub.add_response(
        "get_service_quota",
        quota("ec2", EIP_QUOTA[1], 2.0),
        {"ServiceCode": "ec2", "QuotaCode": EIP_QUOTA[1]},
    )
    stub.add_response(
        "get_service_quota",
        quota("vpc", VPC_QUOTA[1], 5.0),
        {"ServiceCode": "vpc", "QuotaCode": VPC_QUOTA[1]},
    )
    results = {r.check: r for r in check_quotas(p5, Clients(aws.client("ec2"), None, quotas))}
    assert results["quota P vCPUs"].status == SKIP
    assert results["quota Elastic IPs"].status == FAIL
    assert "the stack needs 3 for 3 NAT gateway(s) (perAz)" in results["quota Elastic IPs"].detail


def _one_quota(service, code, value):
    quotas, stub = stubbed("service-quotas", "us-east-1")
    stub.add_response(
        "get_service_quota",
        quota(service, code, value),
        {"ServiceCode": service, "QuotaCode": code},
    )
    return quotas


def test_vpc_quota_from_moto_counts_vpcs_in_use(aws) -> None:
    """moto (real loopback API) for both calls: the VPC quota (5, moto's default for
    L-F678F1CE) and the VPCs in use; with 5 VPCs in the region the stack's one more fails."""
    region = "eu-west-3"  # a region no other test of this module touches
    ec2, quotas = aws.client("ec2", region), aws.client("service-quotas", region)
    clients = Clients(ec2, None, quotas)
    used = len(ec2.describe_vpcs()["Vpcs"])
    ok = _quota_result("quota VPCs", clients, VPC_QUOTA, 1, used, "VPC", region)
    assert ok.status == OK and "VPCs per Region (L-F678F1CE) 5;" in ok.detail
    for i in range(5 - used):
        ec2.create_vpc(CidrBlock=f"10.{i}.0.0/16")
    used = len(ec2.describe_vpcs()["Vpcs"])
    full = _quota_result("quota VPCs", clients, VPC_QUOTA, 1, used, "VPC", region)
    assert used == 5 and full.status == FAIL
    assert "--service-code vpc --quota-code L-F678F1CE --desired-value 6" in full.fix


def test_account_checks_stop_at_a_bad_region(aws) -> None:
    """moto: no reservation or quota call is made for a region that does not exist (the
    Stubber-less clients would raise if they were)."""
    cfg = dataclasses.replace(_p5(), region="mars-north-1")
    results = account_checks(cfg, Clients(aws.client("ec2"), None, None))
    assert [(r.check, r.status) for r in results] == [("region", FAIL)]
