"""``doctor`` tells failed AWS calls apart: credentials, access denied, not found, throttled,
unavailable, unexpected answer, each with its own fix.

If this fails, ``doctor`` sends a user to IAM for what IAM cannot fix (a throttled account, an
endpoint down, a proxy's HTML page, an endpoint that does not implement the call), or stops
with a traceback on a reply without the fields the service model promises.

What answers (said again in each test): a botocore ``Stubber`` (canned error responses, the
codes AWS documents) for the error codes; moto's real EC2 / Service Quotas API on 127.0.0.1
(``ThreadedMotoServer``), which does not implement ``DescribeCapacityReservations`` and answers
an HTML 500 page, and answers ``GetServiceQuota`` for service ``ec2`` with
``NoSuchResourceException``; a loopback HTTP server answering HTML with 200 or 502; a closed
loopback port. Error codes: EC2 API Reference, "Error codes for the Amazon EC2 API"; botocore
``retries/standard.py`` for the throttling and transient ones.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from doctor import awserrors
from doctor.aws import EIP_QUOTA, Clients, _quota_result, check_region, check_reservation
from doctor.checks import FAIL
from infra.config import load_stack_file
from tests.doctor.conftest import CREDS, REGION, stubbed

RID = "cr-0fedcba9876543210"
ACTION = "ec2:DescribeCapacityReservations"


def _p5() -> Any:
    return load_stack_file("p5-16")


def _no_retries(service: str, endpoint: str) -> Any:
    """A client of ``endpoint`` that tries once (botocore would retry 5xx and throttling)."""
    import boto3
    from botocore.config import Config

    return boto3.session.Session(region_name=REGION, **CREDS).client(
        service, endpoint_url=endpoint, config=Config(retries={"max_attempts": 1})
    )


def _reservation_with_error(code: str, status: int) -> Any:
    """Stubber: ``DescribeCapacityReservations`` answers ``code`` with HTTP ``status``."""
    cfg = _p5()
    client, stub = stubbed("ec2")
    stub.add_client_error(
        "describe_capacity_reservations",
        service_error_code=code,
        service_message=f"{code} from EC2",
        http_status_code=status,
    )
    result = check_reservation(cfg, cfg.gpu_node_groups[0], Clients(None, client, None))
    stub.assert_no_pending_responses()
    return result


CASES = {
    "UnauthorizedOperation": (403, "allow ec2:DescribeCapacityReservations for this principal"),
    "AccessDenied": (403, "allow ec2:DescribeCapacityReservations for this principal"),
    "AuthFailure": (401, "the AWS credentials are missing, expired or not accepted"),
    "RequestExpired": (400, "the AWS credentials are missing, expired or not accepted"),
    "RequestLimitExceeded": (503, "AWS throttled this account's API calls"),
    "Throttling": (400, "AWS throttled this account's API calls"),
    "InternalError": (500, "ec2 did not answer"),
    "Unavailable": (503, "ec2 did not answer"),
    "InvalidAction": (400, "the answer to ec2:DescribeCapacityReservations is not AWS's"),
}
"""Code -> (HTTP status, the start of its fix)."""


@pytest.mark.parametrize("code", CASES)
def test_each_error_code_gets_its_own_fix(code: str) -> None:
    """Stubber: before, every code but NotFound said "check ec2:DescribeCapacityReservations
    permission"; now the line names the code and the fix of its kind."""
    status, fix = CASES[code]
    result = _reservation_with_error(code, status)
    assert result.status == FAIL
    assert result.detail.startswith(f"{RID}: {code}"), result.detail
    assert result.fix.startswith(fix), result.fix
    if not fix.startswith("allow"):
        assert "permission" not in result.fix and "allow " not in result.fix


def test_the_kinds_have_different_fixes() -> None:
    """One fix per kind: a user told "credentials" does not go to IAM, and so on."""
    fixes = {awserrors.fix(awserrors.AwsError(kind, "X", "m"), ACTION) for kind in awserrors.KINDS}
    assert len(fixes) == len(awserrors.KINDS)


def test_an_endpoint_without_the_call_is_an_unexpected_answer(aws) -> None:
    """moto 5.2.5 does not implement DescribeCapacityReservations: its server answers an HTML
    500 page, which botocore cannot parse (``ResponseParserError``). Not a permission."""
    cfg = _p5()
    client = _no_retries("ec2", aws.endpoint)
    result = check_reservation(cfg, cfg.gpu_node_groups[0], Clients(None, client, None))
    assert result.status == FAIL
    assert result.detail.startswith(f"{RID}: ResponseParserError"), result.detail
    assert result.fix.startswith(
        "the answer to ec2:DescribeCapacityReservations is not AWS's: check AWS_ENDPOINT_URL "
        "/ AWS_ENDPOINT_URL_EC2"
    ), result.fix


class _Html(BaseHTTPRequestHandler):
    """Answers every request with an HTML page and the server's ``status`` (a proxy, a
    captive portal, a gateway in front of an endpoint)."""

    def do_POST(self) -> None:
        body = b"<html><body><h1>Bad Gateway</h1></body></html>"
        self.send_response(self.server.status)  # type: ignore[attr-defined]
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def html() -> Iterator[ThreadingHTTPServer]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Html)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server
    server.shutdown()
    server.server_close()


def test_an_html_page_is_unexpected_or_unavailable(html: ThreadingHTTPServer) -> None:
    """Loopback HTML: with 200, botocore parses a reply of metadata only, which had no
    ``CapacityReservations`` (a KeyError traceback before); with 502, botocore's transient
    status: unavailable."""
    cfg = _p5()
    endpoint = f"http://127.0.0.1:{html.server_address[1]}"
    group = cfg.gpu_node_groups[0]
    html.status = 200  # type: ignore[attr-defined]
    ok_page = check_reservation(cfg, group, Clients(None, _no_retries("ec2", endpoint), None))
    assert ok_page.status == FAIL
    assert ok_page.detail == (
        f"{RID}: UnexpectedResponse: DescribeCapacityReservations answered without "
        "CapacityReservations"
    )
    assert ok_page.fix.startswith("the answer to ec2:DescribeCapacityReservations is not AWS's")
    html.status = 502  # type: ignore[attr-defined]
    gateway = check_reservation(cfg, group, Clients(None, _no_retries("ec2", endpoint), None))
    assert gateway.detail.startswith(f"{RID}: 502"), gateway.detail
    assert gateway.fix.startswith("ec2 did not answer"), gateway.fix


def test_no_answer_at_all_is_unavailable() -> None:
    """A closed loopback port: ``EndpointConnectionError`` for the first call, the region."""
    import socket

    with socket.socket() as s:  # a port nobody listens on once this closes
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    client = _no_retries("ec2", f"http://127.0.0.1:{port}")
    (region,) = check_region(_p5(), Clients(client, None, None))
    assert region.status == FAIL and region.detail.startswith("EndpointConnectionError")
    assert region.fix.startswith("ec2 did not answer: check the network"), region.fix


def test_no_credentials_is_not_a_permission() -> None:
    """botocore raises ``NoCredentialsError`` before any request when the chain finds none."""
    from botocore.exceptions import NoCredentialsError

    err = awserrors.classify(NoCredentialsError())
    assert err.kind == awserrors.CREDENTIALS
    assert awserrors.fix(err, ACTION).startswith("the AWS credentials are missing")


def test_quota_not_found_and_throttled(aws) -> None:
    """moto answers GetServiceQuota for service ec2 with ``NoSuchResourceException``: the quota
    is not there (not a permission); a Stubber's ``ThrottlingException`` is throttling."""
    quotas = _no_retries("service-quotas", aws.endpoint)
    clients = Clients(None, None, quotas)
    missing = _quota_result("quota Elastic IPs", clients, EIP_QUOTA, 1, 0, "x", REGION)
    assert missing.status == FAIL and "NoSuchResourceException" in missing.detail
    assert missing.fix.startswith(f"Service Quotas has no ec2 quota {EIP_QUOTA[1]} in {REGION}")
    client, stub = stubbed("service-quotas")
    stub.add_client_error(
        "get_service_quota", service_error_code="ThrottlingException", http_status_code=400
    )
    throttled = _quota_result(
        "quota Elastic IPs", Clients(None, None, client), EIP_QUOTA, 1, 0, "x", REGION
    )
    assert throttled.fix.startswith("AWS throttled"), throttled.fix


def test_codes_cover_botocores_own_lists() -> None:
    """The throttling and transient codes botocore retries on are classified as such (an
    upgrade of botocore that adds one fails here until the list has it)."""
    from botocore.retries.standard import ThrottledRetryableChecker, TransientRetryableChecker

    assert set(ThrottledRetryableChecker._THROTTLED_ERROR_CODES) <= awserrors.THROTTLED_CODES
    transient = set(TransientRetryableChecker._TRANSIENT_ERROR_CODES) - awserrors.THROTTLED_CODES
    assert transient <= awserrors.UNAVAILABLE_CODES
    assert set(TransientRetryableChecker._TRANSIENT_STATUS_CODES) == awserrors.UNAVAILABLE_STATUS
