"""Cloud mode: the sweep over node counts with Pulumi's Automation API.

Before the first ``up`` it checks the prerequisites (:mod:`sweeps.prerequisites`) and prints the
cost estimate. For each node count it sets the nodegroup's config (size, maxSize), runs ``up``
(its output streamed), sets the nodegroup's size through the EKS API (the nodegroup leaves
``desiredSize`` to the operator after creation), submits the stack's job file sized to the
count under a name derived from the original (``eks-fsdp jobs``' cluster backend: the stack
declares no job), watches the PyTorchJob and its pods (a Failed job, an image pull error or a
crash loop stops the sweep at once) and the port-forward to the cluster's Prometheus (a dead
one stops it too), measures, saves the result at once and deletes the job. Whatever happens (success, an error, an interrupt),
``Pulumi.<stack>.yaml`` is restored byte for byte and the stack is scaled back to its original
size (the nodegroup's live scaling config as it was, then one more ``up``) (or destroyed, only
with ``destroy=True``); each is retried, and the exact recovery commands are printed before the
clean-up starts (again if it fails or is interrupted). Each ``up``/``destroy`` runs in a worker
thread (:mod:`sweeps.pulumi_ops`): on an interrupt the ``pulumi`` child gets SIGINT and the
clean-up waits until it has exited; a lock is cancelled only when that interrupted update left
it (never another holder's).
"""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from eks_fsdp_cli.paths import REPO_ROOT
from sweeps.aws import (
    NODES_TIMEOUT_S,
    Nodegroup,
    empty_repository,
    empty_repository_command,
    live_scaling,
    nodegroup_of,
    scale_nodegroup,
    wait_for_nodes,
)
from sweeps.cluster import (
    UNSCHEDULABLE_S,
    JobWatch,
    PortForward,
    kubectl_port_forward,
    kubectl_watch,
    wait_for_job,
)
from sweeps.common import PROJECT, Measurement, save_results
from sweeps.prediction import planner_step_times
from sweeps.prerequisites import (
    check_prerequisites,
    estimated_cost_usd,
    program_image_tag,
    stack_plan,
)
from sweeps.prometheus import steady_throughput, to_measurement
from sweeps.pulumi_ops import PulumiOps, cleanup, interrupt_pulumi_children
from sweeps.stackfile import StackFile


class JobSubmitter(Protocol):
    """Submits and deletes the sweep's jobs on the stack's cluster."""

    def submit(self, name: str, workers: int, steps: int) -> None: ...

    def delete(self, name: str) -> None: ...


@dataclass
class ClusterJobs:
    """The job file of the plan, sized per count, through ``eks-fsdp jobs``' cluster backend
    (the stack's kubeconfig output; its ``trainingImage`` unless the job file pins one)."""

    outputs: dict[str, Any]
    plan: Any
    stack_name: str

    def _backend(self) -> Any:
        import json

        from jobs.cluster.backend import ClusterBackend
        from jobs.cluster.kube import api_client

        kubeconfig = self.outputs["kubeconfig"]
        if isinstance(kubeconfig, str):
            kubeconfig = json.loads(kubeconfig)
        return ClusterBackend(api_client(config_dict=kubeconfig), namespace=self.plan.namespace)

    def submit(self, name: str, workers: int, steps: int) -> None:
        from jobs.schema import load

        sets = [f"workers={workers}", f"minWorkers={workers}", f"maxTrainStep={steps}"]
        job = load(
            self.plan.job_file,
            sets=sets,
            name=name,
            stack=self.stack_name,
            root=self.plan.stack_file.parent,
        )
        image = self.plan.image or self.outputs.get("trainingImage")
        self._backend().submit(job, image=image)

    def delete(self, name: str) -> None:
        self._backend().cancel(name, purge=True)


def cluster_jobs(outputs: dict[str, Any], plan: Any) -> JobSubmitter:
    """The default :class:`JobSubmitter`."""
    return ClusterJobs(outputs, plan, plan.stack_file.name[len("Pulumi.") : -len(".yaml")])


def job_name_for(base: str, nodes: int, sweep_id: str) -> str:
    """``<original job name>-<n>n-<sweep id>``, cut to the job-name limit: derived from the
    original each time (never from the last count's), new per sweep (a rendezvous id stays
    closed for 2 h, and Prometheus keeps the series of an earlier sweep)."""
    suffix = f"-{nodes}n-{sweep_id}"
    return f"{base[: 50 - len(suffix)].rstrip('-')}{suffix}"


def measure_cloud(
    nodes: Sequence[int],
    *,
    stack_name: str,
    work_dir: str | Path = REPO_ROOT,
    steps: int = 200,
    warmup_steps: int = 20,
    min_scrapes: int = 8,
    destroy: bool = False,
    destroy_existing: bool = False,
    results: str | Path | None = None,
    sweep_id: str | None = None,
    minutes_per_count: float = 30.0,
    select_stack: Callable[..., Any] | None = None,
    prometheus: Callable[[dict[str, Any], str], contextlib.AbstractContextManager[PortForward]]
    | None = None,
    job_watch: Callable[[dict[str, Any], str, Path], JobWatch] | None = None,
    which: Callable[[str], str | None] = shutil.which,
    run: Callable[..., subprocess.CompletedProcess[str]] = subprocess.run,
    wait_timeout_s: float = 3600,
    nodes_timeout_s: float = NODES_TIMEOUT_S,
    unschedulable_s: float = UNSCHEDULABLE_S,
    poll_s: float = 30,
    log: Callable[[str], None] = print,
    interrupt: Callable[[], None] = interrupt_pulumi_children,
    step_times: Callable[[Sequence[int], str], Mapping[int, float]] = planner_step_times,
    job: str | Path | None = None,
    jobs: Callable[[dict[str, Any], Any], JobSubmitter] | None = None,
) -> list[Measurement]:
    """For each node count: set the config, ``up``, watch the job, measure, save; then restore.

    ``select_stack`` defaults to ``pulumi.automation.select_stack`` (the Pulumi CLI and the
    stack's backend); ``prometheus(outputs, namespace)`` yields a :class:`PortForward` (default:
    kubectl port-forward to the in-cluster Prometheus); ``job_watch(outputs, namespace, tmpdir)``
    reads the job's state (default: kubectl). ``destroy`` tears the stack down afterwards
    instead of scaling it back (its ECR repository emptied first); only with it may the sweep
    create a stack that is not deployed, and a stack that was deployed before the sweep is
    destroyed only with ``destroy_existing`` as well.
    ``step_times(nodes, stack_name)`` gives the planner's step time per count (the steps must
    span ``min_scrapes`` scrapes). ``interrupt`` stops the running ``pulumi`` child on a KeyboardInterrupt (default: SIGINT
    to it, :func:`interrupt_pulumi_children`); the clean-up waits for it to exit first.
    ``job`` is the job file each count submits (default: the stack's example job in
    ``work_dir``); ``jobs(outputs, plan)`` submits and deletes it (default:
    :func:`cluster_jobs`, the job CLI's cluster backend with the stack's kubeconfig).
    """
    from pulumi.automation import ConfigValue

    if not nodes or any(n < 1 for n in nodes):
        raise ValueError(f"nodes: {list(nodes)} must be positive node counts")
    if select_stack is None:
        from pulumi import automation

        select_stack = automation.select_stack
    prometheus = prometheus or kubectl_port_forward
    work = Path(work_dir)
    out_dir = Path(results).parent if results else Path(tempfile.mkdtemp(prefix="scaling-"))
    results_path = Path(results) if results else out_dir / "measured.json"
    stack = select_stack(stack_name=stack_name, work_dir=str(work))
    plan = stack_plan(stack, stack_name, work, job)
    jobs = jobs or cluster_jobs
    check_prerequisites(
        plan,
        nodes=nodes,
        steps=steps,
        warmup_steps=warmup_steps,
        destroy=destroy,
        destroy_existing=destroy_existing,
        step_time_s=step_times(nodes, stack_name),
        min_scrapes=min_scrapes,
        image_tag=program_image_tag(work) if plan.repository else None,
        which=which,
        run=run,
    )
    original: dict[str, int] | None = None  # the nodegroup's live size before the sweep
    group: Nodegroup | None = None
    if plan.deployed:
        group = nodegroup_of({k: v.value for k, v in stack.outputs().items()}, plan.group_index)
        original = live_scaling(run, group)
    cost = estimated_cost_usd(nodes, plan.usd_per_node_hour, minutes_per_count)
    log(
        f"sweep {list(nodes)} node(s) of stack {stack_name} ({plan.group_name}, "
        f"${plan.usd_per_node_hour:,.2f}/node-hour): about ${cost:,.0f} at "
        f"{minutes_per_count:.0f} min per count; afterwards the stack is "
        + ("destroyed" if destroy else "scaled back to its original size")
    )
    sweep = sweep_id or format(int(time.time()) % 36**4, "x")[-4:]
    stack_file = StackFile(plan.stack_file, out_dir)
    cd = f"cd {work}"
    current: list[str] = []  # the job of the count being measured, until it is deleted
    recovery_up = [
        cd,
        f"cp {stack_file.backup} {plan.stack_file.name}",
        f"pulumi cancel --stack {stack_name} --yes  # only if the stack is locked",
        f"pulumi up --stack {stack_name} --yes",
    ]
    recovery_destroy = [
        *recovery_up[:3],
        *([empty_repository_command(plan.repository, plan.region)] if plan.repository else []),
        f"pulumi destroy --stack {stack_name} --yes --exclude-protected",
    ]
    if group is not None and original is not None:
        recovery_up.insert(1, " ".join(group.scale_command(original)))
    stream = lambda line: log(line.rstrip("\n"))  # noqa: E731  (the CLI's output, as it comes)
    measured: list[Measurement] = []
    ops = PulumiOps(interrupt, log)

    def put(path: str, value: Any) -> None:
        stack.set_config(f"{PROJECT}:{path}", ConfigValue(value=str(value)), path=True)

    try:
        for n in nodes:
            job = job_name_for(plan.base_job, n, sweep)
            t0 = time.monotonic()
            g = f"gpuNodeGroups[{plan.group_index}]"
            put(f"{g}.desiredSize", n)
            put(f"{g}.maxSize", max(n, plan.max_size))
            log(f"{n} node(s): pulumi up")
            ops.run(lambda: stack.up(on_output=stream), "up")
            outputs = {k: v.value for k, v in stack.outputs().items()}
            # The nodegroup leaves desiredSize to the operator after creation: scale it here.
            group = group or nodegroup_of(outputs, plan.group_index)
            min_size = min(n, original["minSize"] if original else plan.min_size)
            max_size = max(n, plan.max_size)
            scale_nodegroup(
                run, group, {"minSize": min_size, "maxSize": max_size, "desiredSize": n}, log
            )
            with tempfile.TemporaryDirectory(prefix="scaling-") as tmp:
                watch = (job_watch or kubectl_watch)(outputs, plan.namespace, Path(tmp))
                wait_for_nodes(
                    run, watch, group, n, timeout_s=nodes_timeout_s, poll_s=poll_s, log=log
                )
                submitter = jobs(outputs, plan)
                log(f"{n} node(s): submit {job} ({n} workers, {steps} steps)")
                submitter.submit(job, n, steps)
                current[:] = [job]
                with prometheus(outputs, plan.namespace) as pf:
                    wait_for_job(
                        pf,
                        watch,
                        job,
                        steps,
                        timeout_s=wait_timeout_s,
                        poll_s=poll_s,
                        log=log,
                        unschedulable_s=unschedulable_s,
                    )
                    pf.check()
                    fig = steady_throughput(
                        pf.url,
                        job,
                        warmup_steps=warmup_steps,
                        min_steps=max(1, (steps - warmup_steps) // 2),
                        min_scrapes=min_scrapes,
                    )
            m = to_measurement(n, job, time.monotonic() - t0, fig)
            measured.append(m)
            save_results(measured, results_path)
            submitter.delete(job)  # frees the nodes; its metrics stay in Prometheus
            current.clear()
            log(
                f"{n} node(s): {m.tokens_per_s:,.0f} tokens/s (rate over steps {m.first_step}-"
                f"{m.end_step}, {m.window_s:.0f} s, {m.scrapes} scrapes); saved to {results_path}"
            )
    finally:
        recovery = recovery_destroy if destroy else recovery_up
        for name in current:  # the job of the count that failed or was interrupted
            recovery.insert(1, f"eks-fsdp jobs cancel {name} --stack {stack_name} --purge")
        log(f"clean-up of {stack_name}; if it fails or is interrupted, run:")
        for cmd in recovery:
            log(f"    {cmd}")
        try:
            for name in current:
                try:
                    jobs({k: v.value for k, v in stack.outputs().items()}, plan).delete(name)
                    log(f"{name}: deleted")
                except Exception as err:  # the stack's clean-up must still run
                    log(f"{name}: could not delete it ({err}); run the first command above")
            restored = stack_file.restore()
            log(f"{plan.stack_file.name}: " + ("restored" if restored else "unchanged"))
            if ops.holder is not None:
                log(
                    "waiting for the interrupted pulumi operation to exit (interrupt again to leave)"
                )
            if destroy:
                log(f"pulumi destroy ({stack_name})")

                def tear_down() -> None:
                    if plan.repository:  # ECR refuses to delete a repository with images
                        empty_repository(run, plan.repository, plan.region, log)
                    stack.destroy(on_output=stream, exclude_protected=True)

                cleanup(
                    tear_down,
                    stack,
                    "destroy",
                    recovery_destroy,
                    log,
                    ops,
                )
            else:
                log(f"scale back ({stack_name}): the nodegroup to {original}, then pulumi up")

                def scale_back() -> None:
                    if group is not None and original is not None:
                        scale_nodegroup(run, group, original, log)  # first: the restored maxSize
                    stack.up(on_output=stream)  # may be below the sweep's largest count

                cleanup(scale_back, stack, "scale-back", recovery_up, log, ops)
        except KeyboardInterrupt:
            log(f"clean-up of {stack_name} interrupted. GPU nodes may still be running. Run:")
            for cmd in recovery:
                log(f"    {cmd}")
            raise
    return measured
