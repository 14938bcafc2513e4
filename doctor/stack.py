"""Checks of the stack file itself that only ``pulumi preview`` (or a block's end) would
otherwise reveal: the required ``apiPublicAccessCidrs``, and a capacity-block group's window.

``apiPublicAccessCidrs`` has no default on purpose (``Pulumi.yaml``): ``infra.config.from_pulumi``
stops the program without it, and ``new-stack`` cannot know the user's address, so it does not
write it. A capacity-block group without ``capacityBlock`` deploys, but is never scaled down
before the block ends (``infra.config.nodegroups.capacity_block_warnings``).
"""

from __future__ import annotations

from doctor.checks import FAIL, OK, WARN, Result
from infra.config import StackConfig


def check_api_access(cfg: StackConfig) -> Result:
    """``apiPublicAccessCidrs`` is set (a list of CIDRs, or ``[]`` for a private endpoint)."""
    name = "apiPublicAccessCidrs"
    cidrs = cfg.api_public_access_cidrs
    if cidrs is None:
        return Result(
            check=name,
            status=FAIL,
            detail="not set (required: pulumi preview stops on it)",
            fix=f"pulumi config set --path 'apiPublicAccessCidrs[0]' <your egress IP>/32 --stack "
            f"{cfg.stack} (or [] for a private endpoint only, docs/deploy.md)",
        )
    if not cidrs:
        return Result(check=name, status=OK, detail="[]: private endpoint only")
    return Result(check=name, status=OK, detail=", ".join(cidrs))


def check_block_windows(cfg: StackConfig) -> list[Result]:
    """A warning per capacity-block group without its ``capacityBlock`` window."""
    return [
        Result(
            check=f"capacityBlock {g.name}",
            status=WARN,
            detail="not set: the group is never scaled down before the block ends and jobs "
            "get no end time to checkpoint before",
            fix=f"set gpuNodeGroups[{g.name}].capacityBlock start and end, UTC (the "
            f"reservation {g.name} row shows the block's times when AWS answers)",
        )
        for g in cfg.gpu_node_groups
        if g.capacity_type == "capacity-block" and g.capacity_block is None
    ]


def stack_checks(cfg: StackConfig) -> list[Result]:
    """Every check of the stack file (no AWS call)."""
    return [check_api_access(cfg), *check_block_windows(cfg)]
