"""``python -m jobs.local.worker FOLDER``: one local job's runner, started detached by ``submit
--local`` and ``resume --local`` (``jobs.local.backend``); not a command for users.

It rebuilds the job from ``FOLDER/job.yaml`` and ``record.json`` (generation, rendezvous id),
runs it with ``localrun`` (real etcd on free loopback ports, one torchrun agent per pod, the
operator's environment; ``keep_checkpoints`` from the second generation on, so the pods
resume), writes the pods' states to ``pods.json`` every second, prints what ``eks-fsdp
local`` prints (progress lines and the summary), and ends with ``result.json``. SIGTERM
(``cancel``, ``suspend``) and Ctrl-C stop every pod and etcd before it exits. A job whose
record names a local queue (``jobs.local.queue``) first waits there for its quota.
"""

from __future__ import annotations

import math
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

from jobs.local import queue as local_queue
from jobs.local.backend import (
    CANCEL_MARK,
    JOB_FILE,
    PODS,
    RECORD,
    RESULT,
    SUSPEND_MARK,
    LocalBackend,
    local_settings,
    read_json,
    write_json,
)
from jobs.schema import JobFileError, loads
from localrun.etcd_server import EtcdError
from localrun.options import Fault, LocalOptions, LocalRunError
from localrun.result import RunResult
from localrun.runner import Runner
from localrun.summary import summary

HEARTBEAT_S = 1.0


def _interrupt(signum: int, frame: object) -> None:
    # Once: a second signal must not interrupt the cleanup the first one started.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    raise KeyboardInterrupt


def pod_states(runner: Runner) -> list[dict[str, Any]]:
    """The worker pods as the runner sees them now."""
    pods = runner.pods
    if pods is None:
        return []
    codes = [p.poll() for p in list(pods.procs)]
    out = []
    for index, pod in enumerate(pods.results):
        code = codes[index] if index < len(codes) else None
        if pods.leaving(index):
            state = "Restarting"
        elif index >= len(codes):
            state = "Pending"
        elif code is None:
            state = "Running"
        else:
            state = "Succeeded" if code == 0 else "Failed"
        out.append(
            {
                "name": pod.name,
                "state": state,
                "restarts": pod.restarts + pod.replaced,
                "exit_code": code,
            }
        )
    return out


def _final_pods(result: RunResult) -> list[dict[str, Any]]:
    return [
        {
            "name": p.name,
            "state": "Gone" if p.lost else ("Succeeded" if p.exit_code == 0 else "Failed"),
            "restarts": p.restarts + p.replaced,
            "exit_code": p.exit_code,
        }
        for p in result.pods
    ]


def _outcome(result: RunResult, cancelled: bool, suspended: bool = False) -> tuple[str, str]:
    if result.succeeded:
        return "Succeeded", "Succeeded: every worker exited 0"
    if result.interrupted and suspended:
        return "Suspended", "Suspended: runPolicy.suspend (SIGTERM to every pod; the job is kept)"
    if result.interrupted and cancelled:
        return "Cancelled", "Cancelled: by the user (SIGTERM to every pod)"
    if result.interrupted:
        return "Failed", "Interrupted: the runner was stopped"
    if result.rendezvous_closed:
        return "Failed", "RendezvousClosed: a pod met a closed rendezvous"
    failed = [p for p in result.pods if p.exit_code not in (0, None) and not p.lost]
    if failed:
        return "Failed", f"WorkerFailed: {failed[-1].name} exited with {failed[-1].exit_code}"
    return "Failed", "NoProgress: no optimizer step was logged"


def _admission_end(folder: Path, state: str) -> None:
    """The local queue's record of a run that held (or waited for) quota: it holds none now."""
    if local_queue.read(folder):
        local_queue.write(folder, state)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    folder = Path(args[0]).resolve()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, _interrupt)
    record = read_json(folder / RECORD) or {}
    record["started_at"] = time.time()
    write_json(folder / RECORD, record)
    generation = int(record.get("generation", 1))
    runner: Runner | None = None
    stop = threading.Event()

    def heartbeat() -> None:
        while not stop.wait(HEARTBEAT_S):
            if runner is not None:
                write_json(folder / PODS, pod_states(runner))

    beat = threading.Thread(target=heartbeat, name="pods.json", daemon=True)
    try:
        job_file = loads(
            (folder / JOB_FILE).read_text(encoding="utf-8"), source=str(folder / JOB_FILE)
        )
        # a fault fires in the job's first run only: a resume or unsuspend does not repeat it
        fault = record.get("fault") if generation == 1 else None
        job, device = local_settings(
            job_file,
            generation=generation,
            rdzv_id=record["rdzv_id"],
            checkpoint_root=record.get("checkpoint_root"),
            fault=fault,
        )
        opts = LocalOptions(
            stack=job_file.stack,
            out=folder,
            keep_checkpoints=generation > 1,
            timeout_s=math.inf,
            fault=Fault.parse(fault or "none"),
        )
        local_queue.admit(  # the local stand-in for Kueue, when the record names a queue
            folder,
            alive=LocalBackend(folder.parent).alive,
            note=lambda line: print(f"local: {line}", flush=True),
        )
        runner = Runner(opts)
        beat.start()
        result = runner.run_job(job, device)
    except (JobFileError, LocalRunError, EtcdError, ValueError, KeyError, OSError) as err:
        message = err.args[0] if err.args else str(err)
        print(f"local: {message}", flush=True)
        write_json(
            folder / RESULT,
            {"phase": "Failed", "reason": f"StartFailed: {message}", "finished_at": time.time()},
        )
        return 2
    except KeyboardInterrupt:
        cancelled = (folder / CANCEL_MARK).exists()
        phase = "Cancelled" if cancelled else "Failed"
        if (folder / SUSPEND_MARK).exists():
            phase = "Suspended"
            _admission_end(folder, "suspended")
        write_json(
            folder / RESULT,
            {
                "phase": phase,
                "reason": f"{phase}: stopped before the pods started",
                "finished_at": time.time(),
            },
        )
        return 130
    finally:
        stop.set()
    print(summary(result), flush=True)
    phase, reason = _outcome(
        result, (folder / CANCEL_MARK).exists(), (folder / SUSPEND_MARK).exists()
    )
    _admission_end(folder, phase.lower() if phase == "Suspended" else "finished")
    write_json(
        folder / RESULT,
        {
            "phase": phase,
            "reason": reason,
            "finished_at": time.time(),
            "wall_s": result.wall_s,
            "pods": _final_pods(result),
            "steps_logged": len(result.metrics),
        },
    )
    if result.interrupted:
        return 130
    return 0 if result.succeeded else 1


if __name__ == "__main__":
    sys.exit(main())
