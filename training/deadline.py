"""Stop before the capacity ends: a capacity block's scale-down, announced in the environment.

A capacity-block node group is scaled to zero at a fixed UTC time (``scaleDownAt``,
``infra.capacity_schedule``); the job's pods read that time from the group's ConfigMap into
``EKS_FSDP_CAPACITY_ENDS_AT`` (``workloads.specs.pytorchjob.container_env``). The trainer then
stops at the step boundary after which one more step and a checkpoint would no longer fit
before it, writes that checkpoint and exits **0** (docs/capacity.md, "How jobs react").

Why 0 and not 143, the preemption status of docs/adr/0004: 143 makes torchrun restart the
group (each restart costs one of ``maxRestarts``) and the kubelet restart the container
(``restartPolicy: OnFailure``), on nodes that are about to go, until the block's nodes are
drained; the pods would then wait Pending, holding the job's queue quota, until some later
block, with no date. An exit 0 on every rank (they all stop after the same step: the vote
below) ends the elastic PyTorchJob as Succeeded (training-operator v1.9,
``pytorchjob_controller.go``: an elastic job succeeds when a worker succeeds) and frees the
quota; its checkpoint is complete, and the next block's run continues it with ``--resume``
(``eks-fsdp jobs resume``). ``summary.json`` says ``"capacity_end": true`` and the model is
not exported, so a finished-looking job is told apart from a complete one. A SIGTERM on any
rank still wins (the node is going away now: exit 143).

The lead time is the emergency-checkpoint rule of ``training.checkpoint``
(``emergency_checkpoint_fits``: 1.25 x the write estimate + 2 s) plus the longest step seen,
doubled for an asynchronous checkpoint that may still be writing when the stop comes. Not a
full ``--checkpoint_every_s`` interval: the stop is decided every step, so waiting one
interval early would waste up to ``checkpoint_every_s`` of a paid block for nothing.
"""

from __future__ import annotations

import datetime as dt
import os
import time
from typing import TYPE_CHECKING, Any

from training.config import ConfigError

if TYPE_CHECKING:
    from training.config import TrainConfig

ENV = "EKS_FSDP_CAPACITY_ENDS_AT"
"""ISO 8601 UTC time by which the job must have checkpointed and exited (``scaleDownAt``)."""
SIGTERM_VOTE = 2.0
"""A rank's stop vote for a SIGTERM: above the capacity vote, so the element-wise MAX of the
trainer's vote makes a SIGTERM anywhere win (exit 143)."""
CAPACITY_VOTE = 1.0
"""A rank's stop vote for the capacity end (exit 0)."""
HEADROOM = 1.25
"""Factor on the write estimate (``training.checkpoint.emergency_checkpoint_fits``)."""
HEADROOM_S = 2.0
"""Seconds added to it (likewise)."""


def parse_ends_at(text: str, where: str = ENV) -> float:
    """The POSIX time of an ISO 8601 UTC ``text`` (``2026-12-17T10:30:00Z``); one line if bad."""
    try:
        moment = dt.datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise ConfigError(f"{where}: {text!r} is not an ISO 8601 time") from None
    if moment.utcoffset() != dt.timedelta(0):
        raise ConfigError(f"{where}: {text!r} is not in UTC: end it with Z")
    return moment.timestamp()


class CapacityDeadline:
    """The trainer's view of the capacity end: ``vote`` every step, ``reached`` once decided."""

    def __init__(
        self,
        ends_at: float | None,
        *,
        write_estimate_s: float = 0.0,
        async_checkpoint: bool = True,
        clock: Any = time.time,
    ) -> None:
        self.ends_at = ends_at
        """POSIX time of the end; None: no end known (no capacity block), never votes."""
        self.write_estimate_s = write_estimate_s
        self.writes = 2 if async_checkpoint else 1
        self.clock = clock
        self.reached = False
        """True once every rank decided to stop for the capacity end (and no rank for SIGTERM)."""
        self.stopped_at: float | None = None
        self._last_vote: float | None = None
        self._step_s = 0.0

    @classmethod
    def from_env(cls, cfg: TrainConfig, env: Any = None) -> CapacityDeadline:
        """From ``EKS_FSDP_CAPACITY_ENDS_AT`` (unset or empty: no end) and the run's flags."""
        text = (os.environ if env is None else env).get(ENV, "")
        return cls(
            parse_ends_at(text) if text.strip() else None,
            write_estimate_s=cfg.checkpoint_write_estimate_s,
            async_checkpoint=cfg.async_checkpoint,
        )

    def lead_s(self, write_s: float | None) -> float:
        """Seconds before the end at which the run stops: the longest step seen plus the
        write(s) with the emergency-checkpoint headroom."""
        write = write_s or self.write_estimate_s
        return self._step_s + self.writes * HEADROOM * write + HEADROOM_S

    def vote(self, sigterm: bool, write_s: float | None) -> float:
        """This rank's stop vote after a step: SIGTERM_VOTE, CAPACITY_VOTE or 0.

        Called once per step, so the time between two calls is a step (the longest one seen
        is kept: the step in flight must fit too). ``write_s``: the last measured checkpoint
        write, None before any.
        """
        now = self.clock()
        if self._last_vote is not None:
            self._step_s = max(self._step_s, now - self._last_vote)
        self._last_vote = now
        if sigterm:
            return SIGTERM_VOTE
        if self.ends_at is not None and now + self.lead_s(write_s) >= self.ends_at:
            return CAPACITY_VOTE
        return 0.0

    def decided(self, vote: float) -> bool:
        """Whether to stop, from the vote all ranks agreed on (the MAX); records the reason."""
        self.reached = vote == CAPACITY_VOTE
        if self.reached and self.stopped_at is None:
            self.stopped_at = self.clock()
        return vote > 0

    def exit_status(self, stopped: bool, preempted_exit: int) -> int:
        """0 when complete or stopped for the capacity end, ``preempted_exit`` after SIGTERM."""
        return preempted_exit if stopped and not self.reached else 0

    def stop(self, trainer: Any) -> bool:
        """The capacity ends: let the write in flight finish, checkpoint this step, say so.
        Returns True (stopped early: ``finish`` exports nothing)."""
        st = trainer.state
        trainer.checkpointer.wait()
        trainer.save()  # a no-op when this step's checkpoint is already written
        trainer.checkpointer.wait()
        if trainer.env.is_main:
            end = dt.datetime.fromtimestamp(self.ends_at or 0, dt.UTC)
            print(
                f"capacity ends at {end:%Y-%m-%dT%H:%M:%SZ}: stopped at step {st.step} "
                f"with {(self.ends_at or 0) - self.clock():.0f} s left; checkpoint step "
                f"{st.step} complete; exiting 0 (resume with --resume on new capacity)",
                flush=True,
            )
        return True
