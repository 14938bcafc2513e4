"""The end of a local run: what the pod logs say (resumes, a closed rendezvous, the training
package's own summary) and the summary the runner prints."""

from __future__ import annotations

import re
import subprocess
from collections.abc import Sequence

from localrun.result import RunResult

_RESUMED = re.compile(r"resumed from (\S+) at step (\d+)")
_CLOSED = "RendezvousClosedError"
_SUMMARY = "=== training summary ==="


def read_pod_logs(result: RunResult, procs: Sequence[subprocess.Popen[bytes]]) -> None:
    """Exit codes of the pods still unset (from their last agents, ``procs``), and from their
    logs: the steps resumed from, a RendezvousClosedError, the training summary block."""
    best = -1
    for pod, proc in zip(result.pods, procs, strict=False):
        if pod.exit_code is None:
            pod.exit_code = proc.returncode
        text = pod.log.read_text(errors="replace") if pod.log.is_file() else ""
        result.resumed_from_steps += [int(m.group(2)) for m in _RESUMED.finditer(text)]
        if _CLOSED in text:
            result.rendezvous_closed = True
        if pod.exit_code != 0:
            continue
        # Rank 0 prints the summary; after a restart rank 0 may sit on another pod, and a
        # stopped attempt printed one too: keep the block that got furthest.
        for block in re.finditer(re.escape(_SUMMARY), text):
            lines = text[block.start() :].splitlines()
            end = next((i for i, ln in enumerate(lines[1:], 1) if not ln.strip()), len(lines))
            steps = re.search(r"^steps\s+(\d+)", "\n".join(lines[:end]), re.MULTILINE)
            n = int(steps.group(1)) if steps else 0
            if n >= best:
                best, result.training_summary = n, "\n".join(lines[:end])


def summary(result: RunResult) -> str:
    """A readable summary of a run."""
    losses = result.losses
    steps = sorted(losses)
    lines = ["", "=== local PyTorchJob run ==="]
    lines.append(f"job            {result.job['metadata']['name']}  (rdzvId {result.rdzv_id})")
    status = "SUCCEEDED" if result.succeeded else "FAILED"
    if result.interrupted:
        status = "INTERRUPTED"
    lines.append(f"status         {status} in {result.wall_s:.1f} s")
    for pod in result.pods:
        lost = " (lost to the fault)" if pod.lost else ""
        again = f", restarted {pod.restarts}x" if pod.restarts else ""
        again += f", replaced {pod.replaced}x" if pod.replaced else ""
        lines.append(f"  {pod.name:<28} exit {pod.exit_code}{lost}{again}  log {pod.log}")
    if steps:
        first, last = losses[steps[0]], losses[steps[-1]]
        lines.append(
            f"steps          {len(steps)} (last {steps[-1]}), loss {first:.4f} -> {last:.4f} "
            f"({(last - first) / first * 100:+.1f}%)"
        )
        worlds = sorted({int(m.get("world_size", 0)) for m in result.metrics})
        lines.append(f"world sizes    {worlds}")
    if result.fault.kind != "none":
        when = (
            f"at t={result.fault_time_s:.1f}s" if result.fault_time_s is not None else "never fired"
        )
        lines.append(f"fault          {result.fault} {when}: {result.fault_note}")
        if result.recovery_s is not None:
            lines.append(
                f"recovery       next step logged {result.recovery_s:.1f} s after the fault"
            )
        new = f"{result.new_step_s:.1f} s" if result.new_step_s is not None else "never"
        lines.append(
            f"lost           {new} from the fault to the next new step; "
            f"{result.steps_redone} steps redone"
        )
    if result.resumed_from_steps:
        lines.append(f"resumed from   step(s) {sorted(set(result.resumed_from_steps))}")
    if result.rendezvous_closed:
        lines.append("rendezvous     RendezvousClosedError seen (reused rdzvId?)")
    lines.append(f"metrics        {result.metrics_path}")
    lines.append(f"checkpoints    {result.checkpoint_root}")
    out_dir = result.metrics_path.parent
    extras = [name for name in ("summary.json", "metrics.png", "hf") if (out_dir / name).exists()]
    if extras:
        lines.append(f"outputs        {out_dir} ({', '.join(extras)})")
    if result.training_summary:
        lines += ["", result.training_summary]
    return "\n".join(lines)
