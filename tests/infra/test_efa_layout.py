"""EFA interfaces per instance type against the EC2 guide's rule, and the catalog's figures.

If these fail, a GPU node would launch with fewer EFA devices than its network cards carry
(lost inter-node bandwidth), with an EFA-only primary interface (the launch fails), or with two
EFA interfaces on one card (the launch fails), or the catalog would disagree with the EC2 docs.

The rule is the EC2 user guide's "Maximize network bandwidth on Amazon EC2 instances with
multiple network cards" (efa-acc-inst-types, current English page): an ENA primary at network
card 0 / device 0, an ``efa-only`` interface at card 0 / device 1, and an ``efa-only`` interface
at device 0 of each other card; "Network cards" (using-eni) allows one EFA or EFA-only
interface per card. Nothing is mocked: ``efa_network_interfaces`` is a pure function.
"""

from __future__ import annotations

import pytest

from infra import instances
from infra.gpu_nodegroup import efa_network_interfaces

EFA_TYPES = sorted(name for name, it in instances.CATALOG.items() if it.efa_supported)

NETWORK_CARDS_PER_EC2_DOCS = {
    "p5.48xlarge": 32,
    "p5e.48xlarge": 32,
    "p5en.48xlarge": 16,
    "p6-b200.48xlarge": 8,
    "p4d.24xlarge": 4,
    "p4de.24xlarge": 4,
}
"""The EC2 user guide's "Network cards" table (using-eni.html) for the multi-card types; a type
it does not list (g5.48xlarge, g6.48xlarge) has one card."""


def guide_layout(network_cards: int) -> list[tuple[int, int, str]]:
    """(card, device, interface type) as the guide lays a type with ``network_cards`` out."""
    layout = [(0, 0, "interface"), (0, 1, "efa-only")]
    layout += [(card, 0, "efa-only") for card in range(1, network_cards)]
    return layout


def test_every_efa_type_of_the_catalog_is_checked() -> None:
    assert set(NETWORK_CARDS_PER_EC2_DOCS) <= set(EFA_TYPES)
    assert {"g5.48xlarge", "g6.48xlarge"} <= set(EFA_TYPES)
    assert "p6-b200.48xlarge" in EFA_TYPES and "p5en.48xlarge" in EFA_TYPES


@pytest.mark.parametrize("name", EFA_TYPES)
def test_interfaces_follow_the_guide(name: str) -> None:
    instance = instances.lookup(name)
    cards = NETWORK_CARDS_PER_EC2_DOCS.get(name, 1)
    assert instance.network_cards == cards
    nics = efa_network_interfaces(instance, ["sg-cluster", "sg-efa"])
    got = [(n["network_card_index"], n["device_index"], n["interface_type"]) for n in nics]
    assert got == guide_layout(cards)
    # One EFA device per card, every card used: the pod's vpc.amazonaws.com/efa request.
    efa = [n for n in nics if n["interface_type"] == "efa-only"]
    assert len(efa) == instance.efa_interfaces == cards
    assert sorted(n["network_card_index"] for n in efa) == list(range(cards))
    assert instance.pod_resources()["vpc.amazonaws.com/efa"] == cards
    # The primary is never EFA-only; no (card, device) slot is used twice.
    assert (nics[0]["network_card_index"], nics[0]["device_index"]) == (0, 0)
    assert nics[0]["interface_type"] == "interface"
    assert len({(c, d) for c, d, _ in got}) == len(got)
    assert all(n["security_groups"] == ["sg-cluster", "sg-efa"] for n in nics)
    assert all(n["delete_on_termination"] == "true" for n in nics)


@pytest.mark.parametrize(
    ("name", "gpus", "gpu_memory_gib", "vcpus"),
    [
        # EC2 accelerated-computing specifications: GPUs, memory per GPU, vCPUs.
        ("p5.48xlarge", 8, 80, 192),
        ("p5e.48xlarge", 8, 141, 192),
        ("p5en.48xlarge", 8, 141, 192),
        ("p6-b200.48xlarge", 8, 180, 192),
        ("p4de.24xlarge", 8, 80, 96),
    ],
)
def test_catalog_figures_of_the_large_types(
    name: str, gpus: int, gpu_memory_gib: int, vcpus: int
) -> None:
    it = instances.lookup(name)
    assert (it.gpus, it.gpu_memory_gib, it.vcpus) == (gpus, gpu_memory_gib, vcpus)
    assert it.network_gbps == (3200 if name.startswith(("p5", "p6")) else 400)
