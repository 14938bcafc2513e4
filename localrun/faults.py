"""Fault injection for a local run, and the figures the summary reports about the fault.

``FaultInjector`` watches the run (the last step logged, a checkpoint folder being written) and
fires the fault once: SIGKILL or SIGSTOP to worker processes, SIGKILL to a whole pod, a pod
deleted (SIGTERM, grace period, replacement), or etcd stopped and started again beside the
monitor loop. ``fault_figures`` turns the rows seen before and after it into steps redone and
seconds to the next new step.
"""

from __future__ import annotations

import shutil
import signal
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from localrun.etcd_server import EtcdError, LocalEtcd
from localrun.options import LocalOptions, LocalRunError
from localrun.pods import Pods
from localrun.procs import children, kill_tree, signal_pids
from localrun.result import RunResult, complete_checkpoint_steps

WATCH_REFRESH_S = 0.3
"""kill-in-checkpoint: how often the pids to freeze are read again while no write is seen."""
POLL_S = 0.2
"""The monitor loop's pause between two reads of the metrics."""


class FaultInjector:
    """Fires ``opts.fault`` once, at its step, on pod ``opts.fault_pod`` (or the last pod)."""

    def __init__(
        self,
        opts: LocalOptions,
        pods: Pods,
        etcd: LocalEtcd | None,
        echo: Callable[[str], None],
    ) -> None:
        """``etcd``: the runner's own server (restart-etcd / lose-etcd need it)."""
        self.opts = opts
        self.fault = opts.fault
        self.pods = pods
        self.etcd = etcd
        self.echo = echo
        self.fired = False
        self._watch_pids: list[int] = []
        self._watch_refreshed = 0.0
        self._etcd_fault: threading.Thread | None = None
        """restart-etcd / lose-etcd run beside the monitor loop, which keeps reading the
        metrics meanwhile (the outage must not stop the clock that measures it)."""
        self._stopping = threading.Event()
        """Set by ``stop``: an etcd fault still waiting out ``--etcd-down`` starts nothing."""

    @property
    def pod_index(self) -> int:
        """The pod the fault hits."""
        return min(self.opts.fault_pod, len(self.pods.procs) - 1)

    def _tmp_dir(self, result: RunResult) -> Path:
        """The folder checkpoint K is written to before its rename publishes it."""
        return result.checkpoint_root / f"step-{self.fault.step:06d}.tmp"

    def check(self, result: RunResult, t0: float, now: float, last_step: int) -> None:
        """Fire when it is due: checkpoint K's write seen (kill-in-checkpoint), else step K
        logged."""
        if self.fired or self.fault.kind == "none":
            return
        if self.fault.kind == "kill-in-checkpoint":
            if self._tmp_dir(result).is_dir():
                self.fired = self._fire(result, t0, self._watch_pids)
            elif now - self._watch_refreshed > WATCH_REFRESH_S:
                # know whom to freeze before it matters
                self._watch_pids = children(self.pods.procs[self.pod_index].pid)
                self._watch_refreshed = now
        elif last_step >= self.fault.step:
            self.fired = self._fire(result, t0)

    def pause(self, result: RunResult, t0: float) -> None:
        """The monitor loop's pause; before a kill-in-checkpoint fires, a watch for its folder."""
        if self.fault.kind == "kill-in-checkpoint" and not self.fired:
            # A checkpoint of a small model is written in tens of milliseconds: watch for
            # its folder with a cheap stat every millisecond, not a metrics read.
            tmp_dir = self._tmp_dir(result)
            until = time.monotonic() + POLL_S
            while time.monotonic() < until and not tmp_dir.is_dir():
                time.sleep(0.001)
            if tmp_dir.is_dir():
                self.fired = self._fire(result, t0, self._watch_pids)
        else:
            time.sleep(POLL_S)

    def _fire(self, result: RunResult, t0: float, known_pids: Sequence[int] = ()) -> bool:
        fault = self.fault
        pod_index = self.pod_index
        proc, pod = self.pods.procs[pod_index], result.pods[pod_index]
        result.fault_time_s = time.monotonic() - t0
        result.checkpoints_at_fault = complete_checkpoint_steps(result.checkpoint_root)
        if fault.kind in ("kill-worker", "kill-in-checkpoint"):
            workers = list(known_pids) or children(proc.pid)
            if fault.kind == "kill-in-checkpoint":
                # freeze first: the write cannot finish without them
                signal_pids(workers, signal.SIGSTOP)
                workers = sorted(set(workers) | set(children(proc.pid)))
                signal_pids(workers, signal.SIGSTOP)
            complete = (result.checkpoint_root / f"step-{fault.step:06d}" / "COMPLETE").exists()
            if fault.kind == "kill-in-checkpoint":
                result.fault_checkpoint_complete = complete
            signal_pids(workers, signal.SIGKILL)
            result.fault_note = f"SIGKILL to the training process(es) {workers} of {pod.name}" + (
                f"; checkpoint {fault.step} complete at that moment: {complete}"
                if fault.kind == "kill-in-checkpoint"
                else ""
            )
        elif fault.kind == "kill-node":
            kill_tree(proc, signal.SIGKILL)
            pod.lost = True
            result.fault_note = f"SIGKILL to every process of {pod.name} (node lost, not replaced)"
        elif fault.kind in ("preempt-node", "drain-node"):
            grace = self.pods.grace_period_s()
            delay = self.opts.replacement_delay_s if fault.kind == "preempt-node" else 0.0
            self.pods.delete(pod_index, grace, delay)
            result.fault_note = (
                f"SIGTERM to {pod.name} (its torchrun agent), SIGKILL after the {grace:.0f} s "
                f"grace period; replacement pod {delay:.0f} s after it is gone"
            )
        elif fault.kind == "hang-worker":
            workers = children(proc.pid)
            signal_pids(workers, signal.SIGSTOP)
            result.fault_note = f"SIGSTOP to the training process(es) {workers} of {pod.name}"
        elif fault.kind in ("restart-etcd", "lose-etcd"):
            if self.etcd is None:
                raise LocalRunError(f"--fault {fault.kind} needs the runner's own etcd")
            self._etcd_fault = threading.Thread(
                target=self._bounce_etcd, args=(result, fault.kind == "lose-etcd"), daemon=True
            )
            self._etcd_fault.start()
            result.fault_note = "etcd stopping"
        self.echo(f"fault {fault} at t={result.fault_time_s:.1f}s: {result.fault_note}")
        return True

    def _bounce_etcd(self, result: RunResult, lose: bool) -> None:
        """Stop etcd, delete its data dir when ``lose``, start it again on the same ports."""
        assert self.etcd is not None
        t = time.monotonic()
        self.etcd.stop()
        if lose:
            shutil.rmtree(self.etcd.data_dir, ignore_errors=True)
        if self._stopping.wait(self.opts.etcd_down_s):
            result.fault_note = "etcd stopped; the run ended before its start"
            return
        try:
            self.etcd.start()
        except EtcdError as err:
            result.fault_note = f"etcd did not come back: {err}"
            self.echo(f"  {result.fault_note}")
            return
        down = time.monotonic() - t
        result.fault_note = (
            f"etcd stopped, its data dir deleted, started again empty ({down:.1f} s down)"
            if lose
            else f"etcd stopped and started again ({down:.1f} s down)"
        )
        self.echo(f"  {result.fault_note}")

    def stop(self) -> None:
        """An etcd fault in its --etcd-down wait starts nothing; one starting etcd finishes
        first (never stop etcd while the fault starts it; ``LocalEtcd.start`` waits 20 s at
        most)."""
        self._stopping.set()
        if self._etcd_fault is not None:
            self._etcd_fault.join(timeout=30)


def fault_figures(result: RunResult, seen_at: Sequence[float]) -> None:
    """Steps redone after the fault, and seconds from the fault to the next NEW step.

    ``seen_at``: seconds after the start at which each row of ``result.observed`` was seen.
    A row is redone when its step was logged before it. The next new step is the first row
    past every step logged before it; when the fault restarted the job (the training
    package counts restarts in every row), the first such row of the restarted job, so
    that a step the old group still finished right after the fault does not count."""
    fault_t = result.fault_time_s
    if fault_t is None:
        return
    rows = list(zip(seen_at, result.observed, strict=True))
    before = [m for t, m in rows if t <= fault_t]
    running = max((int(m["step"]) for m in before), default=0)
    r0 = max((int(m.get("restarts", 0)) for m in before), default=0)
    after = [(t, m) for t, m in rows if t > fault_t]
    restarted = any(int(m.get("restarts", 0)) > r0 for _, m in after)
    redone, new = 0, None
    for t, m in after:
        step = int(m["step"])
        if step <= running:
            redone += 1
        elif new is None and (not restarted or int(m.get("restarts", 0)) > r0):
            new = t - fault_t
        running = max(running, step)
    result.steps_redone, result.new_step_s = redone, new
