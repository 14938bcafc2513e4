"""What a cloud sweep checks before its first ``up``: the stack's plan (nodegroup, the job file
it submits, price, ECR repository, deployed or not) and every prerequisite, reported in one
line; the cost estimate."""

from __future__ import annotations

import math
import shutil
import subprocess
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from eks_fsdp_cli.paths import REPO_ROOT
from sweeps.aws import image_in_ecr
from sweeps.common import PROJECT, PrerequisiteError

TOOLS = ("pulumi", "kubectl", "aws")
"""Command-line tools the cloud mode runs (the Automation API shells out to ``pulumi``)."""


@dataclass
class Plan:
    """What the prerequisites found: the sweep's inputs."""

    stack_file: Path
    group_index: int
    group_name: str
    min_size: int
    max_size: int
    base_job: str
    namespace: str
    usd_per_node_hour: float
    deployed: bool
    problems: list[str] = field(default_factory=list)
    repository: str | None = None
    """The stack's ECR repository (``TrainingImage``; every stack builds the image)."""
    region: str | None = None
    """``aws:region`` of the stack."""
    job_file: Path | None = None
    """The job file each count submits (``eks-fsdp jobs``), with its size and steps set."""
    image: str | None = None
    """The image the job file pins (None: the stack's ``trainingImage`` output)."""


def stack_plan(stack: Any, stack_name: str, work_dir: Path, job: str | Path | None = None) -> Plan:
    """The sweep's inputs from the stack file, the job file it measures (``job``, default
    the stack's example ``jobs/examples/<stack>.yaml`` in ``work_dir``) and the stack's
    outputs (deployed or not); a config that cannot be swept raises
    :class:`PrerequisiteError`, other gaps are collected."""
    from infra.config import ConfigError, load_stack_file
    from jobs.schema import load
    from workloads.specs.image import repository_name

    path = work_dir / f"Pulumi.{stack_name}.yaml"
    problems: list[str] = []
    try:
        load_stack_file(stack_name, root=work_dir)
    except (ConfigError, ValueError) as err:
        raise PrerequisiteError(f"{path.name}: {err}") from None
    job_file = (
        Path(job) if job is not None else work_dir / "jobs" / "examples" / f"{stack_name}.yaml"
    )
    if not job_file.is_file():
        raise PrerequisiteError(
            f"stack {stack_name}: no job to measure: {job_file} does not exist (job=FILE)"
        )
    try:
        spec = load(job_file, stack=stack_name, root=work_dir)
    except (ConfigError, ValueError) as err:
        raise PrerequisiteError(str(err)) from None
    cfg = spec.platform
    if not cfg.observability.enabled:
        problems.append(
            f"stack {stack_name} has observability off (the sweep reads throughput from the "
            "cluster's Prometheus): set eks-fsdp:observability.enabled: true"
        )
    group = spec.group
    index = [g.name for g in cfg.gpu_node_groups].index(group.name)
    if group.instance.efa_supported:
        from jobs.build import job_settings, training_image
        from workloads.specs import pytorchjob

        settings = job_settings(spec, image=training_image(spec))
        env = {e.name: e.value for e in pytorchjob.container_env(settings)}
        if env.get("NCCL_NET") != pytorchjob.NCCL_NET_EFA:
            problems.append(
                f"{group.instance_type} has EFA but the job does not set NCCL_NET="
                f"{pytorchjob.NCCL_NET_EFA}: a broken plugin would fall back to TCP"
            )
    try:
        deployed = bool(stack.outputs())
    except Exception as err:  # the backend is unreachable, the stack unreadable
        raise PrerequisiteError(f"stack {stack_name}: cannot read its outputs: {err}") from None
    return Plan(
        stack_file=path,
        group_index=index,
        group_name=group.name,
        min_size=group.min_size,
        max_size=group.max_size,
        base_job=spec.name,
        namespace=spec.namespace,
        usd_per_node_hour=group.usd_per_hour,
        deployed=deployed,
        problems=problems,
        repository=repository_name(PROJECT, stack_name),
        region=cfg.region,
        job_file=job_file,
        image=spec.image,
    )


def check_prerequisites(
    plan: Plan,
    *,
    nodes: Sequence[int],
    steps: int,
    warmup_steps: int,
    destroy: bool,
    destroy_existing: bool = False,
    step_time_s: Mapping[int, float] | None = None,
    min_scrapes: int = 8,
    scrape_interval_s: float | None = None,
    image_tag: str | None = None,
    which: Callable[[str], str | None] = shutil.which,
    run: Callable[..., subprocess.CompletedProcess[str]] = subprocess.run,
) -> None:
    """Everything the sweep needs, checked before the first ``up``: one line naming every gap.

    ``step_time_s`` ({nodes: seconds}, the planner's): the measured steps of each count must
    span ``min_scrapes`` scrapes of the cluster's Prometheus (``scrape_interval_s``, default
    the observability settings'). ``image_tag``: the content tag the program would push; when
    the stack's repository does not hold it, ``pulumi up`` builds it with Docker Buildx."""
    problems = list(plan.problems)
    missing = [t for t in TOOLS if which(t) is None]
    if missing:
        problems.append(f"not on PATH: {', '.join(missing)}")
    credentials = False
    if which("aws") is not None:
        out = run(
            ["aws", "sts", "get-caller-identity", "--output", "json"],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        credentials = out.returncode == 0
        if not credentials:
            problems.append(
                "no AWS credentials (aws sts get-caller-identity: "
                f"{(out.stderr or '').strip().splitlines()[-1:] or out.returncode})"
            )
    if not plan.deployed and not destroy:
        problems.append(
            "stack is not deployed: the sweep would create it and leave it running; deploy it "
            "first (pulumi up), or pass destroy=True to tear it down after the sweep"
        )
    if plan.deployed and destroy and not destroy_existing:
        problems.append(
            "destroy=True on a stack that is already deployed (the sweep did not create it): "
            "it would tear down its cluster, VPC and storage; pass destroy_existing=True too "
            "to mean it, or leave destroy off to scale it back"
        )
    if steps < warmup_steps + 10:
        problems.append(
            f"steps {steps}: need >= warmup_steps + 10 = {warmup_steps + 10} for a steady state"
        )
    if step_time_s:
        scrape = scrape_interval_s if scrape_interval_s is not None else cluster_scrape_interval_s()
        need = min_scrapes * scrape
        short = {n: t for n, t in step_time_s.items() if (steps - warmup_steps) * t < need}
        if short:
            n, t = min(short.items(), key=lambda kv: kv[1])
            problems.append(
                f"steps {steps}: {steps - warmup_steps} measured steps x {t:.2f} s (the "
                f"planner's step time at {n} node(s)) = {(steps - warmup_steps) * t:.0f} s, "
                f"under {min_scrapes} scrapes x {scrape:.0f} s = {need:.0f} s; use steps >= "
                f"{warmup_steps + math.ceil(need / t)}"
            )
    if (
        plan.repository
        and image_tag
        and credentials
        and not image_in_ecr(run, plan.repository, plan.region, image_tag)
    ):
        buildx = (
            run(
                ["docker", "buildx", "version"],
                capture_output=True,
                text=True,
                timeout=60,
                check=False,
            )
            if which("docker") is not None
            else None
        )
        if buildx is None or buildx.returncode != 0:
            why = "docker is not on PATH" if buildx is None else "docker buildx version failed"
            problems.append(
                f"{plan.repository}:{image_tag} is not in ECR, so pulumi up builds it, but "
                f"{why} (install Docker with the Buildx plugin, or push the image first)"
            )
    if problems:
        raise PrerequisiteError("; ".join(problems))


def cluster_scrape_interval_s() -> float:
    """The cluster's Prometheus scrape interval (``ObservabilitySettings.scrape_interval``)."""
    from workloads.specs.observability import ObservabilitySettings

    value = ObservabilitySettings().scrape_interval
    return float(value[:-1]) * {"s": 1, "m": 60, "h": 3600}[value[-1]]


def program_image_tag(work: Path) -> str:
    """The tag the program at ``work`` would push (``TrainingImage``: the content tag of the
    build context, the repository root)."""
    from workloads.specs.image import DOCKERFILE, content_tag

    # A work dir holding only stack files (no build context) is the repository's own program.
    return content_tag(work if (work / DOCKERFILE).is_file() else REPO_ROOT)


def estimated_cost_usd(
    nodes: Sequence[int], usd_per_node_hour: float, minutes_per_count: float
) -> float:
    """Node-hours the sweep pays for, priced: every count holds its nodes for the ``up``, the
    warm-up and the measured steps (``minutes_per_count``)."""
    return sum(nodes) * usd_per_node_hour * minutes_per_count / 60
