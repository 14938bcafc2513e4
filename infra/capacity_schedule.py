"""``CapacitySchedule``: a capacity-block node group scaled up at the block's start and to zero
before its end, and the end time published for jobs.

A Capacity Block for ML runs between two fixed UTC times; EC2 terminates its instances at the
end whatever runs on them. The EKS user guide ("Create a managed node group with Capacity
Blocks for ML", and "Create self-managed nodes with Capacity Blocks for ML") describes the
remedy this component declares: scheduled actions on the Auto Scaling group EKS creates for the
managed node group, one that scales it up when the block becomes active and one that scales it
to zero "more than 30 minutes before the Capacity Block reservation end time", so the nodes
drain (and the job gets its SIGTERM and checkpoints) before EC2 terminates them.

Scheduled actions are one-time actions (``aws.autoscaling.Schedule`` with ``start_time`` and
no recurrence). The Auto Scaling API refuses an action in the past (PutScheduledUpdateGroupAction:
"If you try to schedule your action in the past, Amazon EC2 Auto Scaling returns an error"), so
an action whose time has passed when the program runs is left out: a stack brought up inside
the block's window gets only the scale-down (the node group's own desired size is the
scale-up); after the scale-down time, nothing is scheduled and the program warns.

The end time reaches jobs twice: the stack output ``capacityBlocks`` (``eks-fsdp jobs`` reads
stack outputs without a cluster call) and a ConfigMap per group in the jobs' namespace
(``workloads.specs.capacity``), which a pod reads through ``configMapKeyRef`` without any
access to the stack or the AWS API.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_aws as aws
import pulumi_kubernetes as k8s

from infra.config import GpuNodeGroupConfig
from infra.config.nodegroups import iso_utc

TYPE_TOKEN = "eks-fsdp:infra:CapacitySchedule"
OUTPUT_KEY = "capacityBlocks"
"""Stack output: ``{<node group>: {"start", "end", "scaleDownAt"}}`` (ISO 8601 UTC)."""


@dataclass(frozen=True, kw_only=True)
class ScheduledAction:
    """One one-time scaling action of the group's Auto Scaling group."""

    suffix: str
    """Stable resource-name suffix: ``scale-up`` or ``scale-down``."""
    at: dt.datetime
    """When it runs (UTC)."""
    min_size: int
    desired_capacity: int
    max_size: int


def scheduled_actions(group: GpuNodeGroupConfig, now: dt.datetime) -> list[ScheduledAction]:
    """The actions still ahead of ``now`` for ``group``'s capacity block (pure)."""
    window = group.capacity_block
    if window is None:
        return []
    actions = [
        ScheduledAction(
            suffix="scale-up",
            at=window.start,
            min_size=group.min_size,
            desired_capacity=group.desired_size,
            max_size=group.max_size,
        ),
        ScheduledAction(
            suffix="scale-down",
            at=window.scale_down_at,
            min_size=0,
            desired_capacity=0,
            max_size=group.max_size,
        ),
    ]
    return [a for a in actions if a.at > now]


def output_value(group: GpuNodeGroupConfig) -> dict[str, str]:
    """The group's entry in the ``capacityBlocks`` output (and the ConfigMap's data)."""
    window = group.capacity_block
    if window is None:
        raise ValueError(f"group: {group.name} has no capacityBlock window")
    return {
        "start": iso_utc(window.start),
        "end": iso_utc(window.end),
        "scaleDownAt": iso_utc(window.scale_down_at),
    }


def _asg_name(resources: Any) -> str:
    """The Auto Scaling group's name from ``aws.eks.NodeGroup.resources`` (typed or plain)."""
    first = resources[0]
    groups = (
        first["autoscaling_groups"] if "autoscaling_groups" in first else first["autoscalingGroups"]
    )
    return groups[0]["name"]


@dataclass(frozen=True, kw_only=True)
class CapacityScheduleArgs:
    """Arguments of ``CapacitySchedule``."""

    group: GpuNodeGroupConfig
    """A capacity-block group with its ``capacity_block`` window."""
    node_group_resources: pulumi.Input[Any]
    """``aws.eks.NodeGroup.resources`` of the group (holds its Auto Scaling group's name)."""
    configmap: Mapping[str, Any] | None = None
    """The ConfigMap for jobs (``workloads.specs.capacity``); None: none is created."""
    now: dt.datetime | None = None
    """The program's clock (UTC); None: the time the program runs."""

    def __post_init__(self) -> None:
        if self.group.capacity_block is None:
            raise ValueError(f"CapacityScheduleArgs.group: {self.group.name} has no capacityBlock")
        if self.now is not None and self.now.tzinfo is None:
            raise ValueError("CapacityScheduleArgs.now: must be aware (UTC)")


class CapacitySchedule(pulumi.ComponentResource):
    """Scheduled scale-up/scale-down of one capacity-block group, and its end time for jobs."""

    actions: list[ScheduledAction]
    """The actions declared (those still ahead when the program ran)."""
    window: dict[str, str]
    """``start``, ``end``, ``scaleDownAt`` (ISO 8601 UTC)."""

    def __init__(
        self, name: str, args: CapacityScheduleArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__(TYPE_TOKEN, name, {}, opts)
        child = pulumi.ResourceOptions(parent=self)
        group = args.group
        now = args.now or dt.datetime.now(dt.UTC)
        self.window = output_value(group)
        self.actions = scheduled_actions(group, now)
        if not self.actions:
            pulumi.log.warn(
                f"gpuNodeGroups {group.name}: its capacity block's scale-down time"
                f" ({self.window['scaleDownAt']}) has passed; nothing is scheduled. Update or"
                " remove capacityBlock for the next block.",
                resource=self,
            )
        asg_name = pulumi.Output.from_input(args.node_group_resources).apply(_asg_name)
        for action in self.actions:
            aws.autoscaling.Schedule(
                f"{name}-{action.suffix}",
                autoscaling_group_name=asg_name,
                scheduled_action_name=f"eks-fsdp-{group.name}-{action.suffix}",
                start_time=iso_utc(action.at),
                min_size=action.min_size,
                desired_capacity=action.desired_capacity,
                max_size=action.max_size,
                opts=child,
            )
        if args.configmap is not None:
            meta = args.configmap["metadata"]
            k8s.core.v1.ConfigMap(
                f"{name}-configmap",
                metadata=k8s.meta.v1.ObjectMetaArgs(
                    name=meta["name"], namespace=meta["namespace"], labels=meta.get("labels")
                ),
                data=dict(args.configmap["data"]),
                opts=child,
            )
        self.register_outputs({"window": self.window, "actions": [a.suffix for a in self.actions]})
