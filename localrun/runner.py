"""One local run of a PyTorchJob: the rendezvous endpoint, the pods, the monitor loop, the cleanup.

``Runner(opts).run()`` runs the job of stack ``opts.stack`` (``localrun.job``);
``Runner(opts).run_job(job, device)`` runs any job the pure builders render
(``workloads.specs.pytorchjob.pytorchjob``), which is what a job CLI's local backend calls. Both
return a ``RunResult`` and stop every pod and the etcd they started before returning, also on
Ctrl-C (``KeyboardInterrupt``: the result says ``interrupted``).
"""

from __future__ import annotations

import contextlib
import json
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from localrun.etcd_server import LocalEtcd, free_port
from localrun.faults import FaultInjector, fault_figures
from localrun.job import local_job_settings, localize
from localrun.options import LocalOptions, LocalRunError
from localrun.pods import Pods, pod_name
from localrun.prometheus import LocalPrometheusHook
from localrun.result import PodResult, RunResult
from localrun.summary import read_pod_logs
from workloads.specs import pytorchjob as pj
from workloads.specs.settings import JobSettings


class Runner:
    """One local run: etcd, the worker pods, progress, the fault, the cleanup."""

    def __init__(
        self,
        opts: LocalOptions,
        echo: Callable[[str], None] | None = None,
        etcd: LocalEtcd | None = None,
    ) -> None:
        """``etcd``: a running server to use (and leave running) instead of starting one."""
        self.opts = opts
        self.echo = echo or (lambda line: print(line, flush=True))
        self.out = opts.out.resolve()
        self.shared = self.out / "shared"
        self.logs = self.out / "logs"
        self.etcd: LocalEtcd | None = etcd
        self._own_etcd = etcd is None
        self.pods: Pods | None = None
        self.prometheus: LocalPrometheusHook | None = None
        self.faults: FaultInjector | None = None
        self._seen_at: list[float] = []
        """Seconds after the start at which each row of ``RunResult.observed`` was seen."""

    # -- setup ------------------------------------------------------------------------------
    def _prepare_dirs(self, job: JobSettings) -> None:
        self.logs.mkdir(parents=True, exist_ok=True)
        job_dir = self.shared / job.name
        if job_dir.exists() and not self.opts.keep_checkpoints:
            shutil.rmtree(job_dir)
        for log in self.logs.glob("*.log"):
            log.unlink()
        if self._own_etcd:
            shutil.rmtree(self.out / "etcd-data", ignore_errors=True)

    def _endpoint(self, job: JobSettings) -> tuple[str, int]:
        if job.uses_etcd:
            if self.opts.etcd_endpoint:
                host, _, port = self.opts.etcd_endpoint.rpartition(":")
                if not host or not port.isdigit():
                    raise LocalRunError(
                        f"--etcd-endpoint: {self.opts.etcd_endpoint!r} is not host:port"
                    )
                return host, int(port)
            if self.etcd is None:
                self.etcd = LocalEtcd(self.out / "etcd-data", self.logs / "etcd.log").start()
            return "127.0.0.1", self.etcd.client_port
        return "127.0.0.1", free_port()

    # -- run --------------------------------------------------------------------------------
    def run(self, job: JobSettings, device: str) -> RunResult:
        """Run ``job`` (a job file's settings, ``jobs.build``) with the options' overrides."""
        t0 = time.monotonic()
        job = local_job_settings(self.opts, self.shared, job, device)
        return self._run(job, device, t0)

    def run_job(self, job: JobSettings, device: str) -> RunResult:
        """Run ``job`` (its cluster settings, or ``local_job_settings``'s) on ``device``.

        The job is made local (``localrun.job.localize``), rendered with the local rendezvous
        endpoint, and run with the options that say how (``out``, ``fault``, ``timeout_s``,
        ``prometheus``, ...); those that choose a stack's job (``stack``, ``workers``, ...) are
        not read here."""
        try:
            job = localize(job, device, self.shared)
        except ValueError as err:
            raise LocalRunError(str(err)) from None
        return self._run(job, device, time.monotonic())

    def _run(self, job: JobSettings, device: str, t0: float) -> RunResult:
        self._prepare_dirs(job)
        result: RunResult | None = None
        try:
            host, port = self._endpoint(job)
            job = job.replace(rdzv_host=host, rdzv_port=port)
            job_obj = pj.pytorchjob(job, host)
            (self.out / "pytorchjob.local.json").write_text(json.dumps(job_obj, indent=2))
            rdzv = job_obj["spec"]["elasticPolicy"]["rdzvId"]
            metrics_path = Path(pj.output_dir(job)) / "metrics.jsonl"
            ckpt_root = self.shared / job.name
            pods = [
                PodResult(
                    name=pod_name(job.name, i), log=self.logs / f"{pod_name(job.name, i)}.log"
                )
                for i in range(job.workers)
            ]
            result = RunResult(
                job=job_obj,
                rdzv_id=rdzv,
                metrics_path=metrics_path,
                checkpoint_root=ckpt_root,
                pods=pods,
                wall_s=0.0,
                fault=self.opts.fault,
            )
            self._announce(job, job_obj, device)
            if self.opts.prometheus:  # observability hook: a metrics port per pod, scraped
                self.prometheus = LocalPrometheusHook.start(
                    job.name, len(pods), self.out, self.echo
                )
            self.pods = Pods(job_obj, device, pods, self.echo, self.prometheus)
            self.faults = FaultInjector(self.opts, self.pods, self.etcd, self.echo)
            self.pods.start_all()
            self._monitor(result, t0, self._planned_steps(job))
        except KeyboardInterrupt:
            if result is not None:
                result.interrupted = True
            self.echo("interrupted: stopping the pods and etcd")
        finally:
            self.cleanup()
        if result is None:
            raise LocalRunError("interrupted before the pods started")
        result.wall_s = time.monotonic() - t0
        read_pod_logs(result, self.pods.procs if self.pods else [])
        fault_figures(result, self._seen_at)
        return result

    @staticmethod
    def _planned_steps(job: JobSettings) -> int | None:
        for arg in job.train_args:
            if arg.startswith("--max_train_step="):
                return int(arg.split("=", 1)[1]) or None
        return None

    def _announce(self, job: JobSettings, job_obj: dict[str, Any], device: str) -> None:
        elastic = job_obj["spec"]["elasticPolicy"]
        where = (
            f"etcd {self.etcd.version} at {self.etcd.endpoint}"
            if self.etcd
            else f"{job.rdzv_backend} at {elastic['rdzvHost']}:{elastic['rdzvPort']}"
        )
        self.echo(
            f"job {job.name} (stack {self.opts.stack}): {job.workers} worker pods "
            f"(min {job.min_workers}), backend {job.rdzv_backend}, rdzvId {elastic['rdzvId']}, "
            f"device {device}, fault {self.opts.fault}"
        )
        self.echo(f"rendezvous: {where}; logs: {self.logs}")

    def _monitor(self, result: RunResult, t0: float, planned: int | None) -> None:
        assert self.pods is not None and self.faults is not None
        pods, faults = self.pods, self.faults
        seen: set[str] = set()
        last_step = 0
        every = self.opts.progress_every or max(1, (planned or 100) // 20)
        while True:
            now = time.monotonic()
            if now - t0 > self.opts.timeout_s:
                result.timed_out = True
                self.echo(f"timeout after {self.opts.timeout_s:.0f} s: stopping")
                return
            # A resumed run drops the rows logged past its checkpoint and logs those steps again,
            # so new rows are told apart by content, not by position.
            fresh = []
            if result.metrics_path.is_file():
                for line in result.metrics_path.read_text(encoding="utf-8").splitlines():
                    if line not in seen and line.endswith("}"):
                        seen.add(line)
                        with contextlib.suppress(json.JSONDecodeError):
                            fresh.append(json.loads(line))
            result.observed.extend(fresh)
            self._seen_at.extend([now - t0] * len(fresh))
            for m in fresh:
                step = int(m["step"])
                after_fault = faults.fired and result.fault_time_s is not None
                if after_fault and result.recovery_s is None:
                    result.recovery_s = now - t0 - result.fault_time_s  # type: ignore[operator]
                    self.echo(
                        f"  recovered: step {step} logged {result.recovery_s:.1f} s after the fault"
                    )
                if step % every == 0 or step == planned or step <= last_step:
                    total = f"/{planned}" if planned else ""
                    self.echo(
                        f"  step {step}{total}  loss {float(m['loss']):.4f}  "
                        f"world {m.get('world_size', '?')}  "
                        f"{float(m.get('tokens_per_s', 0)):,.0f} tok/s  t={now - t0:.0f}s"
                    )
                last_step = step
            faults.check(result, t0, now, last_step)
            pods.kubelet()
            codes = pods.poll()
            for index, (pod, code) in enumerate(zip(result.pods, codes, strict=True)):
                if pods.leaving(index):
                    continue  # deleted pod: its replacement is on the way
                if code is not None and pod.exit_code is None:
                    if pods.restart_failed(index, code):
                        codes[index] = None
                        continue
                    pod.exit_code = code
                    if not pod.lost:
                        self.echo(f"  {pod.name} exited with {code}")
            if all(c is not None for c in codes):
                return
            faults.pause(result, t0)

    def cleanup(self) -> None:
        """Stop every pod (SIGTERM, a short wait, then SIGKILL to every process) and etcd."""
        try:
            if self.pods is not None:
                self.pods.stop()
            if self.prometheus is not None:  # observability hook: snapshot, then stop
                snap = self.prometheus.stop()
                if snap is not None:
                    self.echo(
                        f"prometheus snapshot: {self.prometheus.prometheus.files.config.parent}"
                    )
        finally:
            if self.faults is not None:
                self.faults.stop()
            if self.pods is not None:
                self.pods.close_logs()
            if self.etcd is not None and self._own_etcd:
                self.etcd.stop(timeout_s=3.0)
