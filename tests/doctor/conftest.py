"""Fixtures of the doctor's tests: a real AWS API on loopback (moto's ``ThreadedMotoServer``,
for the calls moto implements) and botocore ``Stubber`` clients (for the ones it does not:
``ec2 describe_capacity_reservations`` raises NotImplementedError in moto 5.2.5 and its
``service-quotas`` backend serves only service code ``vpc``). A Stubber validates every
request's parameters and every canned response against botocore's service model."""

from __future__ import annotations

import datetime as dt
import logging
import socket
from collections.abc import Iterator
from typing import Any

import pytest

REGION = "us-east-2"
CREDS = {"aws_access_key_id": "testing", "aws_secret_access_key": "testing"}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class AwsOnLoopback:
    """moto's server on 127.0.0.1 and clients of it (a fresh account per server)."""

    def __init__(self) -> None:
        from moto.server import ThreadedMotoServer

        self.port = _free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        logging.getLogger("werkzeug").setLevel(logging.ERROR)  # no line per request
        self._server = ThreadedMotoServer(ip_address="127.0.0.1", port=self.port, verbose=False)
        self._server.start()

    def client(self, service: str, region: str = REGION) -> Any:
        import boto3

        return boto3.session.Session(region_name=region, **CREDS).client(
            service, endpoint_url=self.endpoint
        )

    def stop(self) -> None:
        self._server.stop()


@pytest.fixture(scope="module")
def aws() -> Iterator[AwsOnLoopback]:
    server = AwsOnLoopback()
    yield server
    server.stop()


def stubbed(service: str, region: str = REGION) -> tuple[Any, Any]:
    """(client, activated Stubber): a client whose calls only the Stubber answers."""
    import boto3
    from botocore.stub import Stubber

    client = boto3.session.Session(region_name=region, **CREDS).client(
        service,
        endpoint_url="http://127.0.0.1:9",  # never reached: the Stubber answers
    )
    stub = Stubber(client)
    stub.activate()
    return client, stub


def reservation(
    rid: str,
    *,
    instance_type: str = "p5.48xlarge",
    zone: str = "us-east-2a",
    count: int = 16,
    state: str = "active",
    kind: str = "capacity-block",
    platform: str = "Linux/UNIX",
    start: dt.datetime | None = None,
    end: dt.datetime | None = None,
) -> dict[str, Any]:
    """A ``CapacityReservation`` as ``describe_capacity_reservations`` returns it."""
    start = start or dt.datetime(2026, 12, 10, 11, 30, tzinfo=dt.UTC)
    end = end or dt.datetime(2026, 12, 17, 11, 30, tzinfo=dt.UTC)
    return {
        "CapacityReservationId": rid,
        "InstanceType": instance_type,
        "InstancePlatform": platform,
        "AvailabilityZone": zone,
        "Tenancy": "default",
        "TotalInstanceCount": count,
        "AvailableInstanceCount": count,
        "State": state,
        "StartDate": start,
        "EndDate": end,
        "EndDateType": "limited",
        "InstanceMatchCriteria": "targeted",
        "ReservationType": kind,
    }


def quota(service: str, code: str, value: float) -> dict[str, Any]:
    """A ``GetServiceQuota`` response."""
    return {"Quota": {"ServiceCode": service, "QuotaCode": code, "Value": value}}
