"""The ``aws`` CLI calls of a cloud sweep: the job's EKS managed nodegroup (its live scaling
config, scaling it through the EKS API, its health issues, the wait for Ready nodes) and the
stack's ECR repository (whether a tag is pushed; emptying it before ``destroy``)."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sweeps.cluster import JobWatch
from sweeps.common import PrerequisiteError, SweepError

NODES_TIMEOUT_S = 1800.0
"""How long the sweep waits for the nodegroup's nodes to be Ready after scaling."""


@dataclass(frozen=True)
class Nodegroup:
    """The job's EKS managed nodegroup, as the stack outputs name it."""

    cluster: str
    name: str
    region: str | None

    def args(self) -> list[str]:
        return [
            "--cluster-name",
            self.cluster,
            "--nodegroup-name",
            self.name,
            *(["--region", self.region] if self.region else []),
        ]

    def scale_command(self, scaling: dict[str, int]) -> list[str]:
        """``aws eks update-nodegroup-config`` to ``scaling`` (minSize/maxSize/desiredSize)."""
        cfg = ",".join(f"{k}={scaling[k]}" for k in ("minSize", "maxSize", "desiredSize"))
        return ["aws", "eks", "update-nodegroup-config", *self.args(), "--scaling-config", cfg]


def nodegroup_of(outputs: dict[str, Any], index: int) -> Nodegroup:
    """The ``index``-th GPU nodegroup of the stack (outputs ``clusterName``, ``region``,
    ``gpuNodeGroupNames`` in config order; ``infra/outputs.py``)."""
    from infra import outputs as keys

    names = outputs.get(keys.GPU_NODE_GROUP_NAMES) or []
    if index >= len(names) or not outputs.get(keys.CLUSTER_NAME):
        raise SweepError(
            f"stack outputs: no {keys.CLUSTER_NAME} or {keys.GPU_NODE_GROUP_NAMES}[{index}]"
        )
    return Nodegroup(outputs[keys.CLUSTER_NAME], names[index], outputs.get(keys.REGION))


def _aws(run: Callable[..., Any], cmd: list[str], timeout: float = 120) -> dict[str, Any]:
    out = run(
        [*cmd, "--output", "json"], capture_output=True, text=True, timeout=timeout, check=False
    )
    if out.returncode != 0:
        last = (out.stderr or "").strip().splitlines()[-1:] or [f"status {out.returncode}"]
        raise SweepError(f"{' '.join(cmd[:3])}: {last[0]}")
    result: dict[str, Any] = json.loads(out.stdout) if (out.stdout or "").strip() else {}
    return result


def _region_args(region: str | None) -> list[str]:
    return ["--region", region] if region else []


def live_scaling(run: Callable[..., Any], group: Nodegroup) -> dict[str, int]:
    """The nodegroup's scaling config as EKS has it now (the operator's, not the stack file's:
    the nodegroup ignores ``desiredSize`` changes after creation, ``infra/gpu_nodegroup.py``)."""
    got = _aws(run, ["aws", "eks", "describe-nodegroup", *group.args()])
    cfg = got["nodegroup"]["scalingConfig"]
    return {k: int(cfg[k]) for k in ("minSize", "maxSize", "desiredSize")}


def scale_nodegroup(
    run: Callable[..., Any], group: Nodegroup, scaling: dict[str, int], log: Callable[[str], None]
) -> None:
    """Set the nodegroup's scaling config through the EKS API and wait until it is ACTIVE."""
    log(f"  nodegroup {group.name}: {scaling}")
    _aws(run, group.scale_command(scaling))
    _aws(run, ["aws", "eks", "wait", "nodegroup-active", *group.args()], timeout=3600)


def nodegroup_health(run: Callable[..., Any], group: Nodegroup) -> list[str]:
    """The nodegroup's health issues (``describe-nodegroup``: ``nodegroup.health.issues``, for
    example ``AsgInstanceLaunchFailures`` when EC2 has no capacity), as ``code: message``."""
    got = _aws(run, ["aws", "eks", "describe-nodegroup", *group.args()])
    issues = got.get("nodegroup", {}).get("health", {}).get("issues", [])
    return [f"{i.get('code', '?')}: {i.get('message', '')}" for i in issues]


def wait_for_nodes(
    run: Callable[..., Any],
    watch: JobWatch,
    group: Nodegroup,
    n: int,
    *,
    timeout_s: float,
    poll_s: float,
    log: Callable[[str], None],
) -> None:
    """Until ``n`` nodes of the nodegroup are Ready: the nodegroup turns ACTIVE whether or not
    its instances launched (a capacity block or ODCR short of capacity), so stop on a health
    issue at once, and when ``timeout_s`` passes with fewer nodes Ready."""
    deadline = time.monotonic() + timeout_s
    ready = -1
    while True:
        try:
            now = watch.ready_nodes(group.name)
        except (OSError, subprocess.TimeoutExpired, ValueError):  # an API server blip
            now = ready
        if now != ready:
            log(f"  nodegroup {group.name}: {max(now, 0)}/{n} node(s) Ready")
            ready = now
        if ready >= n:
            return
        issues = nodegroup_health(run, group)
        if issues:
            raise SweepError(
                f"nodegroup {group.name}: {max(ready, 0)}/{n} node(s) Ready, health issues: "
                + "; ".join(issues)
            )
        if time.monotonic() > deadline:
            raise SweepError(
                f"nodegroup {group.name}: {max(ready, 0)}/{n} node(s) Ready after {timeout_s:.0f} s"
            )
        time.sleep(poll_s)


def image_in_ecr(run: Callable[..., Any], repository: str, region: str | None, tag: str) -> bool:
    """Whether ``repository:tag`` exists (``aws ecr describe-images``); a missing repository or
    tag is False, any other failure stops the sweep."""
    out = run(
        [
            "aws",
            "ecr",
            "describe-images",
            "--repository-name",
            repository,
            *_region_args(region),
            "--image-ids",
            f"imageTag={tag}",
            "--output",
            "json",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    if out.returncode == 0:
        return True
    if any(code in (out.stderr or "") for code in ("RepositoryNotFound", "ImageNotFound")):
        return False
    last = (out.stderr or "").strip().splitlines()[-1:] or [f"status {out.returncode}"]
    raise PrerequisiteError(f"aws ecr describe-images {repository}: {last[0]}")


def empty_repository_command(repository: str, region: str | None) -> str:
    """The shell command that deletes every image of ``repository`` (a recovery step)."""
    r = " ".join(_region_args(region))
    r = f" {r}" if r else ""
    return (
        f"aws ecr list-images --repository-name {repository}{r} --query "
        "'imageIds[].imageDigest' --output text | tr '\\t' '\\n' | sort -u | xargs -r -I{} "
        f"aws ecr batch-delete-image --repository-name {repository}{r} --image-ids imageDigest={{}}"
    )


def empty_repository(
    run: Callable[..., Any], repository: str, region: str | None, log: Callable[[str], None]
) -> int:
    """Delete every image of the stack's ECR repository (``list-images``, then
    ``batch-delete-image`` by digest, 100 ids a call, the API's limit), so that ``destroy`` can
    delete it: the repository has ``force_delete=False`` (``workloads/training_image.py``) and
    ECR refuses to delete one holding images (``RepositoryNotEmptyException``). A missing
    repository (``RepositoryNotFoundException``) holds nothing. Returns the digests deleted."""
    base = ["aws", "ecr"]
    where = ["--repository-name", repository, *_region_args(region)]
    out = run(
        [*base, "list-images", *where, "--output", "json"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    if out.returncode != 0:
        if "RepositoryNotFoundException" in (out.stderr or ""):
            return 0
        last = (out.stderr or "").strip().splitlines()[-1:] or [f"status {out.returncode}"]
        raise SweepError(f"aws ecr list-images: {last[0]}")
    ids = json.loads(out.stdout or "{}").get("imageIds", [])
    digests = sorted({i["imageDigest"] for i in ids})
    for start in range(0, len(digests), 100):
        chunk = digests[start : start + 100]
        got = _aws(
            run,
            [*base, "batch-delete-image", *where, "--image-ids"]
            + [f"imageDigest={d}" for d in chunk],
        )
        failures = [f for f in got.get("failures", []) if f.get("failureCode") != "ImageNotFound"]
        if failures:
            raise SweepError(f"aws ecr batch-delete-image {repository}: {failures[0]}")
    log(f"  {repository}: {len(digests)} image(s) deleted")
    return len(digests)
