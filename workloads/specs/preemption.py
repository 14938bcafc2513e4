"""How long a worker pod may take to go away, derived from the stack in ONE place.

`preemption_budget` turns (instance type, checkpoint storage throughput, model size) into the
three numbers that must agree (docs/adr/0004-preemption-semantics.md):

- the emergency checkpoint write time: bytes / throughput, with 25% headroom and 10 s of fixed
  cost (the same headroom ``training.checkpoint.emergency_checkpoint_fits`` applies at run
  time, where the measured write time replaces this estimate);
- ``TORCH_ELASTIC_SHUTDOWN_TIMEOUT``: torchrun SIGKILLs its workers this many seconds after it
  forwards SIGTERM (``torch/distributed/launcher/api.py``: default 30, read from the env); it
  must cover the step in flight and that write;
- ``terminationGracePeriodSeconds``: the kubelet SIGKILLs the pod this long after SIGTERM; it
  must cover torchrun's shutdown timeout and the agent's own exit.

When the emergency write does not fit ``MAX_GRACE_S`` (a drain that waits longer than that
blocks node upgrades and capacity-block ends), the job skips it: the shutdown timeout covers
only the step in flight, and the periodic asynchronous checkpoint (``checkpoint_every_s``,
at least twice the write time so one write is in flight at a time) bounds the lost work.

The PyTorchJob spec (``workloads.specs.pytorchjob``) and ``docs/workloads.md`` both use this
function; nothing here imports torch or pulumi.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from infra.instances import lookup
from planner.storage import GP3_BASELINE_BYTES_PER_S
from planner.storage import from_stack_config as storage_from_stack

CHECKPOINT_BYTES_PER_PARAM = 12
"""fp32 weights (4 bytes) + AdamW exp_avg and exp_avg_sq (8): a 7B model's checkpoint is ~81 GB."""
LOCAL_DISK_MB_PER_S = GP3_BASELINE_BYTES_PER_S / 1e6
"""An emptyDir on the node's gp3 root volume: gp3's baseline 125 MiB/s (``planner.storage``)."""
STEP_ALLOWANCE_S = 60
"""The optimizer step in flight when SIGTERM arrives finishes before the loop sees the flag."""
WRITE_HEADROOM = 1.25
"""Factor on the estimated write time (same as the run-time check)."""
WRITE_FIXED_S = 10
"""Fixed cost of a write: planning, metadata, the rename, a file-system round trip."""
AGENT_EXIT_S = 15
"""The agent's own exit after its workers are gone (rendezvous keys, logs)."""
MAX_GRACE_S = 600
"""Longest grace period the job asks for; beyond it the emergency checkpoint is skipped."""
MIN_CHECKPOINT_EVERY_S = 600
"""Shortest time-based checkpoint interval the budget proposes."""
TINY_PARAMS = 10_000_000
"""Parameters assumed for the built-in tiny presets (``tiny-*``: 0.5-4 M)."""
DEFAULT_PARAMS = 7_000_000_000
"""Parameters assumed when the model name carries no size (a local folder, say)."""
_SIZE = re.compile(r"(?<![\w.])(\d+(?:\.\d+)?)[bB](?![a-zA-Z])")


def model_params(model: str) -> int:
    """Parameters of a model from its name: ``...-7b-...`` -> 7e9, ``tiny-*`` -> 1e7."""
    if model.startswith("tiny-"):
        return TINY_PARAMS
    tail = model.rstrip("/").rsplit("/", 1)[-1].replace("_", "-")
    sizes = [float(m.group(1)) for m in _SIZE.finditer(tail.replace("-", " "))]
    return int(sizes[-1] * 1e9) if sizes else DEFAULT_PARAMS


def storage_mb_per_s(shared_storage: object | None) -> float:
    """Write throughput of the checkpoint volume: the stack's FSx file system, or local disk.

    One model of storage for the whole project: ``planner.storage`` (FSx for Lustre writes are
    bound by the file servers' disk write throughput, 100 MB/s/TiB on SCRATCH_2, and their
    network throughput; AWS "Performance characteristics of SSD and HDD storage classes").
    """
    storage = storage_from_stack(shared_storage)
    if storage.kind == "node-disk":
        return LOCAL_DISK_MB_PER_S
    return storage.write_bytes_per_s(1) / 1e6


@dataclass(frozen=True)
class PreemptionBudget:
    """The numbers a worker pod's preemption runs on (all seconds, integers)."""

    checkpoint_bytes: int
    """Bytes of one checkpoint (model + optimizer state)."""
    storage_mb_per_s: float
    """Write throughput of the checkpoint volume, MB/s."""
    write_s: int
    """Expected seconds to write one checkpoint (headroom included)."""
    emergency_checkpoint: bool
    """Whether an emergency checkpoint fits the grace period."""
    shutdown_timeout_s: int
    """TORCH_ELASTIC_SHUTDOWN_TIMEOUT: SIGTERM to SIGKILL of the workers."""
    grace_period_s: int
    """terminationGracePeriodSeconds of the worker pods."""
    checkpoint_every_s: int
    """Time-based checkpoint interval (``--checkpoint_every_s``)."""


def preemption_budget(
    instance_type: str, model: str, storage_mb_per_s: float, workers: int = 1
) -> PreemptionBudget:
    """Grace period, torchrun shutdown timeout and checkpoint budget, derived together.

    The write is bounded by the shared storage's throughput (every node writes its shard at
    once) or, on per-node local disk, by one node's disk writing its 1/workers share.
    """
    lookup(instance_type)  # a bad instance type is an error here too
    if storage_mb_per_s <= 0:
        raise ValueError(f"storage throughput must be > 0 MB/s, got {storage_mb_per_s}")
    nbytes = model_params(model) * CHECKPOINT_BYTES_PER_PARAM
    write = nbytes / (storage_mb_per_s * 1e6)
    if storage_mb_per_s == LOCAL_DISK_MB_PER_S:
        write /= max(workers, 1)
    write_s = math.ceil(WRITE_HEADROOM * write + WRITE_FIXED_S)
    with_write = STEP_ALLOWANCE_S + write_s
    fits = with_write + AGENT_EXIT_S <= MAX_GRACE_S
    shutdown = with_write if fits else STEP_ALLOWANCE_S
    return PreemptionBudget(
        checkpoint_bytes=nbytes,
        storage_mb_per_s=storage_mb_per_s,
        write_s=write_s,
        emergency_checkpoint=fits,
        shutdown_timeout_s=shutdown,
        grace_period_s=shutdown + AGENT_EXIT_S,
        checkpoint_every_s=max(MIN_CHECKPOINT_EVERY_S, 2 * write_s),
    )


def budget_table(rows: list[tuple[str, str, str, float, int]]) -> str:
    """A markdown table of budgets: rows of (stack, instance type, model, MB/s, workers).

    ``docs/workloads.md`` carries this table for the repository's stacks; a test checks that it
    equals what this function renders, so the docs cannot drift from the spec.
    """
    lines = [
        "| stack | model | checkpoint | storage | write | emergency | shutdown timeout | grace "
        "| checkpoint every |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for stack, instance, model, mbps, workers in rows:
        b = preemption_budget(instance, model, mbps, workers)
        lines.append(
            f"| {stack} | {model} | {b.checkpoint_bytes / 1e9:,.1f} GB | {mbps:,.0f} MB/s "
            f"| {b.write_s} s | {'yes' if b.emergency_checkpoint else 'no'} "
            f"| {b.shutdown_timeout_s} s | {b.grace_period_s} s | {b.checkpoint_every_s} s |"
        )
    return "\n".join(lines)


def backoff_limit(workers: int, max_restarts: int, rdzv_backend: str) -> int:
    """``runPolicy.backoffLimit`` for a job of ``workers`` pods with elastic ``maxRestarts``.

    What counts where (the two budgets are different things):

    - torchrun's ``maxRestarts`` is per agent lifetime: every FAILED worker group costs one
      (``elastic/agent/server/api.py``, ``_invoke_run``: ``_remaining_restarts -= 1``;
      membership changes cost none). A preemption or drain anywhere stops every rank with exit
      143 (ADR 4), so it costs each *surviving* agent one. An agent out of restarts exits 1 and
      the kubelet restarts its container (``restartPolicy: OnFailure``) with a fresh agent.
    - the operator's ``backoffLimit`` (training-operator v1.9, ``pkg/core/job.go``,
      ``PastBackoffLimit``) is the sum of ``restartCount`` over the containers of the job's
      *Running* pods: a preempted or drained pod is deleted and its replacement starts at 0, so
      the SIGTERM'd pod's exit 143 never counts; only survivors' container restarts do.
    - with ``c10d`` the store lives in worker 0's agent: losing that pod fails every other
      agent at once (one container restart each, no ``maxRestarts`` spent; ADR 5).

    Sized so that the job survives one full rolling replacement of its nodes (a node-group
    upgrade or capacity swap drains each node once: ``workers`` disruptions, worker 0 among
    them) plus ``max_restarts`` crashes: ``D = workers + max_restarts`` disruptions make at most
    ``floor(D / (max_restarts + 1))`` container restarts of each pod (survivors run out of
    restarts together), plus one each for the loss of the c10d store; every pod is counted,
    not only the ``workers - 1`` survivors, so that an event failing every agent at once (a
    store outage) fits as well. The job fails when the sum *reaches* the limit, hence the +1.
    p5-16 (16 workers, maxRestarts 3, c10d): (19 // 4 + 1) x 16 + 1 = 81; dev (2, 3, etcd): 3.
    ``max_restarts = 0`` asks to fail fast: limit 0 (the operator fails the job at the first
    container restart).
    """
    if workers < 1 or max_restarts < 0:
        raise ValueError(f"workers {workers} must be >= 1 and max_restarts {max_restarts} >= 0")
    if max_restarts == 0:
        return 0
    disruptions = workers + max_restarts
    events = disruptions // (max_restarts + 1) + (1 if rdzv_backend == "c10d" else 0)
    return events * workers + 1
