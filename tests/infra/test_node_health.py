"""Node health under Pulumi's mocks: the EKS node monitoring agent and node auto repair.

If these fail, a GPU node whose GPU throws XID errors (or whose EFA or kernel fails) would stay
in the cluster until someone notices: EKS only repairs managed nodes with
``nodeRepairConfig.enabled`` (default off in the EKS API and in pulumi-aws
``NodeGroupNodeRepairConfigArgs``), and it only sees GPU faults through the conditions the
``eks-node-monitoring-agent`` add-on sets (EKS user guide, "Detect node health issues and
enable automatic node repair"; "Automatically repair nodes in EKS clusters"). Or the switches
that turn them off would not, or a bad value would pass silently.

Mocked, and why: there is no Pulumi engine and no AWS account here (``tests/pulumi_mocks``).
"""

from __future__ import annotations

import pytest

from infra import versions
from infra.config import ConfigError, load_stack_file, parse, stack_file_values
from tests.pulumi_mocks import USER_SET, ProgramRun, run_program

STACKS = ("dev", "p4de-odcr", "p5-16")
NG = "aws:eks/nodeGroup:NodeGroup"
ADDON = "aws:eks/addon:Addon"
SECRETS = {"hfToken": "hf_mock", "grafanaAdminPassword": "mock-password"}


@pytest.fixture(scope="module")
def runs() -> dict[str, ProgramRun]:
    return {stack: run_program(stack, secrets=SECRETS) for stack in STACKS}


@pytest.mark.parametrize("stack", STACKS)
def test_gpu_groups_repair_and_the_agent_runs_by_default(
    runs: dict[str, ProgramRun], stack: str
) -> None:
    run, cfg = runs[stack], load_stack_file(stack)
    gpu = [r for r in run.of_type(NG) if r.name != "cluster-system"]
    assert len(gpu) == len(cfg.gpu_node_groups) > 0
    assert all(ng.inputs["nodeRepairConfig"] == {"enabled": True} for ng in gpu)
    (agent,) = [
        a for a in run.of_type(ADDON) if a.inputs["addonName"] == "eks-node-monitoring-agent"
    ]
    assert agent.inputs["addonVersion"] == versions.NODE_MONITORING_AGENT_ADDON_VERSION
    # After the system nodes, like every add-on whose pods need a node.
    system = run.one(NG, "cluster-system")
    assert system.urn in agent.dependencies


def test_both_turn_off() -> None:
    cfg = load_stack_file("p5-16")
    groups = [{**g, "nodeRepair": False} for g in stack_file_values("p5-16")["gpuNodeGroups"]]
    run = run_program(
        "p5-16",
        overrides={"gpuNodeGroups": groups, "nodeMonitoringAgent": False},
        secrets=SECRETS,
    )
    gpu = [r for r in run.of_type(NG) if r.name != "cluster-system"]
    assert len(gpu) == len(cfg.gpu_node_groups)
    assert all(ng.inputs["nodeRepairConfig"] == {"enabled": False} for ng in gpu)
    names = {a.inputs["addonName"] for a in run.of_type(ADDON)}
    assert "eks-node-monitoring-agent" not in names
    assert "coredns" in names


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            {"nodeMonitoringAgent": "yes"},
            r"^eks-fsdp:nodeMonitoringAgent: ",
        ),
        (
            {"gpuNodeGroups": [{"nodeRepair": "sometimes"}]},
            r"^eks-fsdp:gpuNodeGroups\[0\]\.nodeRepair: ",
        ),
    ],
)
def test_bad_values_stop_with_one_line(change: dict[str, object], message: str) -> None:
    raw = {**USER_SET, **stack_file_values("p5-16")}
    if "gpuNodeGroups" in change:
        raw["gpuNodeGroups"] = [{**raw["gpuNodeGroups"][0], **change["gpuNodeGroups"][0]}]
    else:
        raw.update(change)
    with pytest.raises(ConfigError, match=message) as err:
        parse(raw, stack="p5-16")
    assert "\n" not in str(err.value)
