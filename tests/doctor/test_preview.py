"""The reservation check the Pulumi program runs at preview (``doctor.preview``).

If this fails, ``pulumi preview`` / the preview ``pulumi up`` starts with no longer stops on a
reservation that does not exist or does not match its group, so the VPC, EKS and FSx are
created (20+ minutes, billed) before the GPU nodes fail to launch; or the check runs where it
must not (outside a preview, without credentials) and breaks deployments or offline tests.

What is mocked and why: the Pulumi engine (``pulumi.runtime.set_mocks`` with ``preview=True``,
no Pulumi CLI here) and EC2's ``describe_capacity_reservations`` (a botocore ``Stubber``,
which validates request and response against the service model: moto 5.2.5 does not implement
the call). No test leaves 127.0.0.1: the instance-metadata credential lookup is disabled.
"""

from __future__ import annotations

import ast
import asyncio
from pathlib import Path

import pulumi
import pytest
from pulumi.runtime import mocks as pulumi_mocks
from pulumi.runtime import settings as runtime_settings

from doctor.aws import Clients
from doctor.preview import ReservationError, check_on_preview
from infra.config import load_stack_file
from tests.doctor.conftest import reservation, stubbed

PLACEHOLDER = "cr-0fedcba9876543210"


class _Mocks(pulumi_mocks.Mocks):
    def new_resource(self, args):  # pragma: no cover - no resource is registered here
        return f"{args.name}-id", dict(args.inputs)

    def call(self, args):  # pragma: no cover
        return {}, []


@pytest.fixture
def engine():
    """The mocked engine in preview (``is_dry_run()``) or update mode, on a loop of its own."""
    loops: list[asyncio.AbstractEventLoop] = []

    def start(preview: bool) -> None:
        loops.append(asyncio.new_event_loop())
        asyncio.set_event_loop(loops[-1])
        pulumi.runtime.set_mocks(_Mocks(), project="eks-fsdp", stack="p5-16", preview=preview)

    yield start
    runtime_settings.reset_options()
    for loop in loops:
        loop.run_until_complete(asyncio.sleep(0))  # let the mocks' pending RPC tasks finish
        loop.close()
    asyncio.set_event_loop(None)


class _Log:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def info(self, msg: str) -> None:
        self.lines.append(msg)


def _reservations(found: dict | None) -> Clients:
    client, stub = stubbed("ec2")
    if found is None:
        stub.add_client_error(
            "describe_capacity_reservations",
            service_error_code="InvalidCapacityReservationId.NotFound",
            service_message="does not exist",
            expected_params={"CapacityReservationIds": [PLACEHOLDER]},
        )
    else:
        stub.add_response("describe_capacity_reservations", {"CapacityReservations": [found]})
    return Clients(ec2=None, reservations=client, quotas=None)


def test_preview_stops_on_the_placeholder_and_passes_a_matching_block(engine) -> None:
    """Under a mocked preview: the placeholder raises one line naming the reservation, its
    fix and the doctor command; a matching capacity block passes."""
    engine(True)
    assert pulumi.runtime.is_dry_run()
    cfg = load_stack_file("p5-16")
    with pytest.raises(ReservationError) as err:
        check_on_preview(cfg, _reservations(None))
    line = str(err.value)
    assert "\n" not in line
    assert line.startswith(f"reservation p5-block: {PLACEHOLDER} does not exist in this account")
    assert line.endswith("eks-fsdp doctor --stack p5-16 checks the whole account")
    assert check_on_preview(cfg, _reservations(reservation(PLACEHOLDER))) == "checked"
    with pytest.raises(ReservationError, match=r"instance type p4de\.24xlarge"):
        check_on_preview(
            cfg, _reservations(reservation(PLACEHOLDER, instance_type="p4de.24xlarge"))
        )


def test_skipped_outside_preview_without_credentials_or_reservations(engine, monkeypatch) -> None:
    """An update (not a preview) makes no call; a preview without credentials logs one info
    line and makes no call (clients that would raise on any call); a stack without a
    reservation (dev) is skipped."""
    for key in (
        "AWS_PROFILE",
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_SESSION_TOKEN",
        "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
        "AWS_CONTAINER_CREDENTIALS_FULL_URI",
        "AWS_WEB_IDENTITY_TOKEN_FILE",
    ):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")  # never ask 169.254.169.254
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent/aws-config")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent/aws-credentials")
    cfg = load_stack_file("p5-16")
    engine(False)
    assert check_on_preview(cfg, Clients(None, None, None)) == "skipped: not a preview"
    runtime_settings.reset_options()
    engine(True)
    log = _Log()
    assert check_on_preview(cfg, log=log) == "skipped: no credentials"
    assert log.lines == ["doctor: no AWS credentials resolve: capacity reservations not checked"]
    assert check_on_preview(load_stack_file("dev")) == "skipped: no capacity reservation"


def test_the_program_checks_right_after_reading_its_config() -> None:
    """``__main__.py`` calls ``check_on_preview(cfg)`` as the statement after ``cfg =
    from_pulumi()``, before the first resource (``Network``)."""
    tree = ast.parse((Path(__file__).resolve().parents[2] / "__main__.py").read_text())
    body = [
        n
        for n in tree.body
        if not isinstance(n, ast.Import | ast.ImportFrom | ast.Expr)
        or (isinstance(n, ast.Expr) and isinstance(n.value, ast.Call))
    ]
    first = [ast.unparse(n) for n in body[:3]]
    assert first[0] == "cfg = from_pulumi()"
    assert first[1] == "check_on_preview(cfg)"
    assert first[2].startswith("network = Network(")
