"""docs/deploy.md says what the stacks cost idle and how sizes are changed, consistently with its
own price table and with the program.

Nothing is mocked: the document and the modules are read as they are. If this fails, the deploy
guide promises an idle ``dev`` stack costs nothing (it bills the control plane, a NAT gateway,
the system node and a KMS key), states an idle total its Costs table does not add up to, or
tells the reader to change ``desiredSize`` in the stack file although the program ignores it
after creation.
"""

from __future__ import annotations

import re
from pathlib import Path

from infra import gpu_nodegroup

DOC = (Path(__file__).resolve().parents[2] / "docs" / "deploy.md").read_text()
IDLE_ROWS = ("EKS control plane", "NAT gateway", "System nodegroup", "KMS keys")
"""What a dev stack at zero GPU nodes still bills (rows of the Costs table)."""
HOURS_PER_MONTH = 730


def _costs_row(label: str) -> list[str]:
    (line,) = [ln for ln in DOC.splitlines() if ln.startswith(f"| {label}")]
    return [cell.strip() for cell in line.strip("|").split("|")]


def _dollars(text: str) -> float:
    """The first dollar figure of ``text``."""
    return float(re.findall(r"\$([\d,.]+)", text)[0].replace(",", ""))


def test_idle_dev_total_adds_up_from_the_costs_table() -> None:
    monthly = {}
    for label in IDLE_ROWS:
        _, price, dev, *_ = _costs_row(label)
        if label == "KMS keys":
            monthly[label] = _dollars(price) * int(dev)
            continue
        count = int(m.group(1)) if (m := re.match(r"(\d+):", dev)) else 1
        assert abs(_dollars(dev) - count * _dollars(price.split("+")[0]) * HOURS_PER_MONTH) < 1
        monthly[label] = _dollars(dev)
    total = round(sum(monthly.values()) / 5) * 5  # the docs round to $5
    stated = re.findall(r"bills? ~\$(\d+)/month", DOC)
    assert len(stated) >= 2 and {int(x) for x in stated} == {total}, (stated, monthly)
    assert "costs nothing" not in DOC


def test_node_counts_are_changed_the_way_the_program_allows() -> None:
    section = DOC.split("## Change node counts", 1)[1].split("\n## ", 1)[0]
    assert gpu_nodegroup.DESIRED_SIZE_PATH == "scalingConfig.desiredSize"
    assert "aws eks update-nodegroup-config" in section
    assert "desiredSize" not in "".join(
        ln for ln in section.splitlines() if ln.startswith("pulumi config set")
    )


def test_the_policy_pack_environment_is_made_before_preview() -> None:
    deploy = DOC.split("## Deploy", 1)[1]
    assert deploy.index("(cd policy && pulumi install)") < deploy.index(
        "pulumi preview --policy-pack policy"
    )
    assert "CLI builds" not in DOC
