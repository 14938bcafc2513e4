"""Capacity blocks end on a date: the stack scales the group around the block and tells jobs.

If these fail, a capacity-block node group would not come up when its block starts, or would
still hold nodes when EC2 terminates the block's instances at its end (the job killed instead
of checkpointing: the EKS user guide, "Create a managed node group with Capacity Blocks for
ML", asks for scheduled scaling to zero more than 30 minutes before the end), jobs would not
learn the end time, or a window that cannot work (an end before its start, a margin inside
EC2's 30 minutes) would pass silently instead of stopping with one line.

Mocked, and why: there is no Pulumi engine and no AWS account here (``tests/pulumi_mocks``).
The shared mock of ``aws.eks.NodeGroup`` returns the ``resources`` output EKS returns (the
managed node group's Auto Scaling group).
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from infra.capacity_schedule import OUTPUT_KEY, scheduled_actions
from infra.config import ConfigError, parse, stack_file_values
from tests.pulumi_mocks import USER_SET, run_program
from workloads.specs.capacity import capacity_block_configmap

UTC = dt.UTC
START, END = "2099-03-02T11:30:00Z", "2099-03-09T11:30:00Z"
SCHEDULE = "aws:autoscaling/schedule:Schedule"
SECRETS = {"hfToken": "hf_mock", "grafanaAdminPassword": "mock-password"}


def raw_p5(**block: Any) -> dict[str, Any]:
    """The p5-16 stack's raw config with ``capacityBlock`` set on its group."""
    raw = {**USER_SET, **stack_file_values("p5-16")}
    (group,) = raw["gpuNodeGroups"]
    raw["gpuNodeGroups"] = [{**group, "capacityBlock": block}]
    return raw


def group_of(**block: Any):  # type: ignore[no-untyped-def]
    (group,) = parse(raw_p5(**block), stack="p5-16").gpu_node_groups
    return group


def test_the_window_parses_in_utc_with_a_default_margin() -> None:
    group = group_of(start=START, end=END)
    window = group.capacity_block
    assert window is not None
    assert window.start == dt.datetime(2099, 3, 2, 11, 30, tzinfo=UTC)
    assert window.end - window.start == dt.timedelta(days=7)
    assert window.end - window.scale_down_at == dt.timedelta(minutes=60)
    # YAML turns an unquoted timestamp into a datetime: the same instant.
    same = group_of(start=dt.datetime(2099, 3, 2, 11, 30, tzinfo=UTC), end=END)
    assert same.capacity_block == window
    offset = group_of(start="2099-03-02T11:30:00+00:00", end=END, scaleDownMinutesBeforeEnd=45)
    assert offset.capacity_block.end - offset.capacity_block.scale_down_at == dt.timedelta(
        minutes=45
    )


@pytest.mark.parametrize(
    ("block", "message"),
    [
        (
            {"start": END, "end": START},
            r"capacityBlock\.end: 2099-03-02T11:30:00Z is not after the start 2099-03-09T11:30:00Z",
        ),
        ({"start": START, "end": START}, r"capacityBlock\.end: .* is not after the start"),
        (
            {"start": START, "end": END, "scaleDownMinutesBeforeEnd": 30},
            r"capacityBlock\.scaleDownMinutesBeforeEnd: 30 min is not more than the 30 min",
        ),
        (
            {"start": START, "end": "2099-03-02T12:00:00Z"},
            r"capacityBlock\.scaleDownMinutesBeforeEnd: 60 min before 2099-03-02T12:00:00Z is befo",
        ),
        ({"start": "2099-03-02T11:30:00", "end": END}, r"capacityBlock\.start: .* not in UTC"),
        ({"start": "2099-03-02T13:30:00+02:00", "end": END}, r"capacityBlock\.start: .*UTC"),
        ({"start": "next tuesday", "end": END}, r"capacityBlock\.start: 'next tuesday' is not"),
        ({"start": START}, r"capacityBlock\.end: is required"),
        ({"start": START, "end": END, "stop": END}, r"capacityBlock\.stop: unknown key"),
    ],
)
def test_bad_windows_stop_with_one_line(block: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=r"^eks-fsdp:gpuNodeGroups\[0\]\." + message) as err:
        group_of(**block)
    assert "\n" not in str(err.value)


def test_only_a_capacity_block_group_takes_a_window() -> None:
    raw = {**USER_SET, **stack_file_values("p4de-odcr")}
    (group,) = raw["gpuNodeGroups"]
    raw["gpuNodeGroups"] = [{**group, "capacityBlock": {"start": START, "end": END}}]
    with pytest.raises(ConfigError, match=r"capacityBlock: is only for capacityType capacity-b"):
        parse(raw, stack="p4de-odcr")


def test_actions_still_ahead_are_the_ones_declared() -> None:
    group = group_of(start=START, end=END)
    window = group.capacity_block
    before = scheduled_actions(group, window.start - dt.timedelta(days=1))
    assert [(a.suffix, a.at) for a in before] == [
        ("scale-up", window.start),
        ("scale-down", window.end - dt.timedelta(minutes=60)),
    ]
    up, down = before
    assert (up.min_size, up.desired_capacity, up.max_size) == (
        group.min_size,
        group.desired_size,
        group.max_size,
    )
    assert (down.min_size, down.desired_capacity, down.max_size) == (0, 0, group.max_size)
    # Inside the window only the scale-down is left (the API refuses an action in the past).
    inside = scheduled_actions(group, window.start + dt.timedelta(hours=1))
    assert [a.suffix for a in inside] == ["scale-down"]
    assert scheduled_actions(group, window.scale_down_at) == []


def test_the_program_schedules_the_group_and_publishes_the_end() -> None:
    raw = raw_p5(start=START, end=END, scaleDownMinutesBeforeEnd=90)
    run = run_program("p5-16", overrides={"gpuNodeGroups": raw["gpuNodeGroups"]}, secrets=SECRETS)
    (group,) = raw["gpuNodeGroups"]
    actions = {a.inputs["scheduledActionName"]: a.inputs for a in run.of_type(SCHEDULE)}
    asg = "eks-gpu-p5-block-ng-asg"
    assert actions == {
        "eks-fsdp-p5-block-scale-up": {
            "autoscalingGroupName": asg,
            "scheduledActionName": "eks-fsdp-p5-block-scale-up",
            "startTime": START,
            "minSize": group["minSize"],
            "desiredCapacity": group["desiredSize"],
            "maxSize": group["maxSize"],
        },
        "eks-fsdp-p5-block-scale-down": {
            "autoscalingGroupName": asg,
            "scheduledActionName": "eks-fsdp-p5-block-scale-down",
            "startTime": "2099-03-09T10:00:00Z",
            "minSize": 0,
            "desiredCapacity": 0,
            "maxSize": group["maxSize"],
        },
    }
    window = {"start": START, "end": END, "scaleDownAt": "2099-03-09T10:00:00Z"}
    assert run.outputs[OUTPUT_KEY] == {"p5-block": window}
    expected = capacity_block_configmap("p5-block", window, "default")
    (cm,) = [
        c
        for c in run.of_type("kubernetes:core/v1:ConfigMap")
        if c.inputs["metadata"]["name"] == expected["metadata"]["name"]
    ]
    assert cm.inputs["metadata"]["namespace"] == "default"
    assert cm.inputs["data"] == expected["data"]
    provider = run.one("pulumi:providers:kubernetes", "cluster-k8s")
    assert cm.provider.startswith(provider.urn + "::")


@pytest.mark.parametrize("stack", ["dev", "p4de-odcr"])
def test_stacks_without_a_window_schedule_nothing(stack: str) -> None:
    run = run_program(stack, secrets=SECRETS)
    assert run.of_type(SCHEDULE) == []
    assert run.outputs[OUTPUT_KEY] == {}


def test_the_shipped_p5_16_window_is_scheduled_as_the_clock_allows() -> None:
    """The p5-16 stack file carries its block's window (2026-12-10 to 12-17): the program
    schedules what is still ahead of it (both actions before the start, the scale-down inside
    the block, nothing after it) and always publishes the window."""
    (group,) = parse({**USER_SET, **stack_file_values("p5-16")}, stack="p5-16").gpu_node_groups
    assert group.capacity_block is not None
    run = run_program("p5-16", secrets=SECRETS)
    ahead = scheduled_actions(group, dt.datetime.now(UTC))
    names = sorted(a.inputs["scheduledActionName"] for a in run.of_type(SCHEDULE))
    assert names == sorted(f"eks-fsdp-{group.name}-{a.suffix}" for a in ahead)
    assert run.outputs[OUTPUT_KEY] == {
        group.name: {
            "start": "2026-12-10T11:30:00Z",
            "end": "2026-12-17T11:30:00Z",
            "scaleDownAt": "2026-12-17T10:30:00Z",
        }
    }


def test_the_configmap_builder_refuses_an_incomplete_window() -> None:
    with pytest.raises(ValueError, match=r"^window: missing scaleDownAt$"):
        capacity_block_configmap("p5-block", {"start": START, "end": END}, "default")


def test_a_block_without_a_window_is_warned_about_at_config(
    tmp_path: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """``new-stack --capacity-type capacity-block`` wrote no ``capacityBlock``: the group then
    never scales down and jobs never learn the end. ``from_pulumi`` warns (``pulumi.log.warn``,
    which the mock engine hands to ``logging``: pulumi ``runtime/mocks.py`` ``MockEngine.Log``),
    once per such group; the shipped p5-16 window is not warned about."""
    import logging

    program = tmp_path / "program.py"
    program.write_text("from infra.config import from_pulumi\nfrom_pulumi()\n")
    raw = stack_file_values("p5-16")
    (group,) = raw["gpuNodeGroups"]
    bare = {k: v for k, v in group.items() if k != "capacityBlock"}
    with caplog.at_level(logging.WARNING):
        run_program("p5-16", overrides={"gpuNodeGroups": [bare]}, secrets=SECRETS, program=program)
    warned = [r.getMessage() for r in caplog.records if "capacityBlock" in r.getMessage()]
    assert warned == [
        f"eks-fsdp:gpuNodeGroups[{group['name']}].capacityBlock is not set: the capacity block's "
        "group is never scaled down before the block ends and jobs get no end time to "
        "checkpoint before; set its start and end, UTC (eks-fsdp doctor shows the block's times)"
    ], warned
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        run_program("p5-16", secrets=SECRETS, program=program)
    assert not [r for r in caplog.records if "capacityBlock" in r.getMessage()]
