"""``eks-fsdp local [FILE]``: a job file's PyTorchJob run on this machine in the foreground, for
real, with a fault to rehearse (FILE defaults to the ``--stack``'s example job,
``jobs/examples/<stack>.yaml``; ``eks-fsdp jobs submit --local FILE --fault ...`` runs the same
detached, as a job the other ``jobs`` verbs see).

The runner builds the PyTorchJob exactly as the stack applies it (``workloads.specs``), starts a
real etcd 3.5 on loopback, and runs each worker "pod" as a ``torchrun`` agent with the container's
command and the environment the training operator would inject (PET_NNODES=min:max,
PET_RDZV_BACKEND, PET_RDZV_ENDPOINT, PET_RDZV_ID, PET_MAX_RESTARTS, PET_NPROC_PER_NODE,
PYTHONUNBUFFERED, plus the container's env). Only what cannot exist here is swapped: the
rendezvous endpoint (loopback etcd instead of the Service), the shared checkpoint volume (a
folder under ``--out``), and on ``device: cpu`` one process per worker with no GPU.

Faults rehearse what happens on the cluster:
``kill-worker@K``      SIGKILL the training process of worker 1 at step K (torchrun restarts it),
``kill-node@K``        SIGKILL worker 1's whole pod (agent included) at step K, never replaced,
``kill-in-checkpoint@K`` freeze then kill worker 1 while checkpoint K is being written,
``restart-etcd@K``     stop etcd at step K and start it again on the same data
                       (``--etcd-down`` seconds later),
``lose-etcd@K``        the same, on an EMPTY data dir,
``preempt-node@K``     SIGTERM to worker 1's pod (its torchrun agent, the container's PID 1), as
                       the kubelet does on a spot/capacity-block reclaim or a ``kubectl delete``;
                       SIGKILL after the pod's grace period; the operator's replacement pod
                       arrives ``--replacement-delay`` seconds after the old one is gone,
``drain-node@K``       the same, with the replacement at once (a node drain onto a spare node),
``hang-worker@K``      SIGSTOP worker 1's training process: a hung rank, never resumed.
``--fault-pod`` picks another pod (0 hosts the c10d store).

The summary names the fault, the seconds from the fault to the next NEW step (a step past every
step logged before) and the steps redone (logged again after a restart went back to an older
checkpoint). Logs go to ``<out>/logs/<pod>.log``; metrics to
``<out>/shared/<job>/output/metrics.jsonl``. On exit, Ctrl-C or SIGTERM every pod (agents and
their workers, which torchrun starts in sessions of their own) and etcd are stopped within
seconds: SIGTERM, a short wait, then SIGKILL to every process found below each agent.
"""

from __future__ import annotations

import dataclasses
import signal
import sys
from collections.abc import Sequence
from pathlib import Path

from eks_fsdp_cli.errors import Parser, fail
from jobs.schema import JobFileError
from localrun.etcd_server import EtcdError
from localrun.options import (
    ETCD_DOWN_S,
    FAULT_KINDS,
    FAULT_POD,
    REPLACEMENT_DELAY_S,
    Fault,
    LocalOptions,
    LocalRunError,
)
from localrun.runner import Runner
from localrun.summary import summary


def parse_options(argv: Sequence[str] | None = None) -> tuple[LocalOptions, Path | None]:
    """Command-line flags to ``LocalOptions`` and the job file (``LocalRunError`` on bad
    input)."""
    parser = Parser(
        command="local",
        prog="eks-fsdp local",
        description="Run a job file's PyTorchJob locally: real etcd, one torchrun agent per pod.",
    )
    parser.add_argument(
        "file",
        metavar="FILE",
        nargs="?",
        type=Path,
        help="job file (default: the stack's example, jobs/examples/<stack>.yaml)",
    )
    parser.add_argument(
        "--stack", help="stack name (default: the FILE's stack; without a FILE, dev and its job)"
    )
    parser.add_argument("--workers", type=int, help="worker pods (default: the stack's)")
    parser.add_argument("--min-workers", type=int, help="elastic minimum (default: the stack's)")
    parser.add_argument("--backend", help="rendezvous backend: etcd | etcd-v2 | c10d")
    parser.add_argument(
        "--fault",
        default="none",
        help="none | " + " | ".join(f"{k}@K" for k in FAULT_KINDS[1:]),
    )
    parser.add_argument(
        "--fault-pod", type=int, default=FAULT_POD, help="pod the fault hits (default 1)"
    )
    parser.add_argument(
        "--replacement-delay",
        type=float,
        default=REPLACEMENT_DELAY_S,
        help="preempt-node: seconds until the replacement pod starts (default 10)",
    )
    parser.add_argument(
        "--etcd-down",
        type=float,
        default=ETCD_DOWN_S,
        help="restart-etcd/lose-etcd: seconds etcd stays stopped (default 1)",
    )
    parser.add_argument("--out", type=Path, default=Path("runs/local"), help="output folder")
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="--FLAG=VALUE",
        dest="overrides",
        help="replace one training flag, e.g. --set=--max_train_step=20 (repeatable)",
    )
    parser.add_argument("--generation", type=int, help="job generation (new rendezvous id)")
    parser.add_argument("--etcd-endpoint", help="use a running etcd host:port")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds before giving up")
    parser.add_argument(
        "--prometheus",
        action="store_true",
        help="start a local Prometheus scraping the pods' training metrics (same rules as the cluster)",
    )
    args = parser.parse_args(argv)
    if args.workers is not None and args.workers < 1:
        raise LocalRunError(f"--workers: {args.workers} must be >= 1")
    if args.min_workers is not None and args.min_workers < 1:
        raise LocalRunError(f"--min-workers: {args.min_workers} must be >= 1")
    if args.fault_pod < 0:
        raise LocalRunError(f"--fault-pod: {args.fault_pod} must be >= 0")
    if args.replacement_delay < 0:
        raise LocalRunError(f"--replacement-delay: {args.replacement_delay} must be >= 0")
    if args.etcd_down < 0:
        raise LocalRunError(f"--etcd-down: {args.etcd_down} must be >= 0")
    return LocalOptions(
        stack=args.stack or (None if args.file else "dev"),
        out=args.out,
        workers=args.workers,
        min_workers=args.min_workers,
        backend=args.backend,
        fault=Fault.parse(args.fault),
        train_overrides=tuple(args.overrides),
        generation=args.generation,
        etcd_endpoint=args.etcd_endpoint,
        timeout_s=args.timeout,
        prometheus=args.prometheus,
        fault_pod=args.fault_pod,
        replacement_delay_s=args.replacement_delay,
        etcd_down_s=args.etcd_down,
    ), args.file


def main(argv: Sequence[str] | None = None) -> int:
    """Run, print the summary; 0 succeeded, 1 failed, 2 bad input, 130 interrupted."""
    from jobs.build import load_example

    try:
        opts, file = parse_options(argv)
        spec, w = load_example(opts.stack, job=file, generation=opts.generation or 1)
        opts = dataclasses.replace(opts, stack=spec.stack)
        runner = Runner(opts)
        # Ctrl-C and SIGTERM both stop the pods and etcd (also when started with SIGINT ignored).
        previous = {
            sig: signal.signal(sig, _raise_interrupt) for sig in (signal.SIGINT, signal.SIGTERM)
        }
        try:
            result = runner.run(w.job, w.device)
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
    except JobFileError as err:
        return fail("local", err)
    except (LocalRunError, EtcdError, ValueError, KeyError, FileNotFoundError) as err:
        return fail("local", err.args[0] if err.args else str(err))
    print(summary(result), flush=True)
    if result.interrupted:
        return 130
    return 0 if result.succeeded else 1


def _raise_interrupt(signum: int, frame: object) -> None:
    # Once: a second Ctrl-C or SIGTERM must not interrupt the cleanup it started.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    raise KeyboardInterrupt


if __name__ == "__main__":
    sys.exit(main())
