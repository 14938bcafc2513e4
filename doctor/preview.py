"""The reservation check the Pulumi program runs at ``preview`` (``pulumi up`` previews first),
so a missing or mismatched reservation stops the deployment before any resource exists.

It runs only when the program is a preview (``pulumi.runtime.is_dry_run()``) and boto3's
credential chain resolves (the same credentials the AWS provider uses: the standard
variables, profile or instance role); otherwise it is skipped with one info line. A failure
raises ``ReservationError``: one line per reservation, the fix beside it.
"""

from __future__ import annotations

from typing import Any

from doctor.aws import Clients, credentials_resolve, reservation_failures
from infra.config import ConfigError, StackConfig


class ReservationError(ConfigError):
    """A GPU group's reservation is missing or does not match the group."""


def check_on_preview(cfg: StackConfig, clients: Clients | None = None, log: Any = None) -> str:
    """``"checked"``, ``"skipped: <why>"``, or raises ``ReservationError``."""
    import pulumi

    log = log or pulumi.log
    if not any(g.capacity_reservation_id for g in cfg.gpu_node_groups):
        return "skipped: no capacity reservation"
    if not pulumi.runtime.is_dry_run():
        return "skipped: not a preview"
    if clients is None:
        if not credentials_resolve():
            log.info("doctor: no AWS credentials resolve: capacity reservations not checked")
            return "skipped: no credentials"
        clients = Clients.for_region(cfg.region or "us-east-1")
    failures = reservation_failures(cfg, clients)
    if failures:
        raise ReservationError(
            "; ".join(f"{r.check}: {r.detail} (fix: {r.fix})" for r in failures)
            + f" -- eks-fsdp doctor --stack {cfg.stack} checks the whole account"
        )
    return "checked"
