"""The ``teams`` section: who shares the cluster, and how much of each GPU pool is theirs.

    teams:
      - name: nlp
        principalArns: [arn:aws:iam::123456789012:role/nlp-researchers]
        quota: {p5-block: 64}          # GPUs of pool p5-block (whole nodes); optional
        defaultPriority: experiment    # production | experiment; optional

Only ``name`` and ``principalArns`` are required. A pool a team gives no ``quota`` for is
shared equally, in whole nodes, among the teams that give none for it, out of what the
explicit quotas leave; nodes that do not divide evenly stay in the pool's own queue, which
every team borrows from (``workloads.specs.kueue``). A pool's capacity is its group's
``maxSize`` nodes times the instance's GPUs (``infra.instances``).

Refused with one line: a team without principals, a duplicate team or principal, a principal
that is also a cluster admin (``accessEntries``: EKS keeps one access entry per principal and
cluster), a quota for an unknown pool, a quota that is not whole nodes, quotas larger than
the pool, an unknown priority, a name that is a namespace the platform owns
(``RESERVED_NAMESPACES``, ``kube-*``), two (pool, team) pairs whose ClusterQueues would share a
name (``cluster_queue_name``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from infra.config.cluster import _IAM_ARN
from infra.config.fields import _DNS_LABEL, _check_keys, _choice, _fail, _int, _mapping, _str
from infra.config.nodegroups import GpuNodeGroupConfig

TEAM_KEYS = ("name", "principalArns", "quota", "defaultPriority")
PRIORITIES: dict[str, int] = {"production": 1000, "experiment": 100}
"""Kueue WorkloadPriorityClass names and values: a production job preempts an experiment job
of its own team's queue (``withinClusterQueue: LowerPriority``)."""
DEFAULT_PRIORITY = "experiment"
RESERVED_NAMESPACES: dict[str, str] = {
    "default": "the stack's jobs namespace",
    "kubeflow": "the training operator",
    "kubeflow-system": "Kubeflow Trainer v2 and JobSet",
    "kueue-system": "Kueue",
    "monitoring": "the observability stack",
    "amazon-cloudwatch": "the amazon-cloudwatch-observability add-on",
}
"""Namespaces the platform owns (and what owns them); ``kube-*`` is refused too. The
training operator's ``standalone`` overlay (``infra.versions.TRAINING_OPERATOR_NAMESPACE``),
Trainer v2's ``manager`` overlay at v2.3.0 (``infra.versions.TRAINER_V2_KUSTOMIZE_URL``:
``namespace: kubeflow-system``, JobSet included), Kueue (``infra.versions.KUEUE_NAMESPACE``),
``workloads.specs.observability.ObservabilitySettings.namespace``, and the CloudWatch add-on's
own namespace (EKS user guide, "Install the CloudWatch agent with the Amazon CloudWatch
Observability EKS add-on": its resources go to ``amazon-cloudwatch``). A test checks the list
against those modules."""
MAX_NAME = 40
"""A team's name is its namespace and prefixes its ClusterQueues (``<team>-<pool>``)."""


@dataclass(frozen=True, kw_only=True)
class TeamConfig:
    """One team (``teams[i]``)."""

    name: str
    """Team name: its namespace, its ServiceAccount and the prefix of its ClusterQueues."""
    principal_arns: tuple[str, ...]
    """IAM roles/users given access to the team's namespace (EKS access entries)."""
    quota: Mapping[str, int] = field(default_factory=dict)
    """Nominal GPUs per GPU pool (nodegroup name), every pool present once parsed."""
    default_priority: str = DEFAULT_PRIORITY
    """The WorkloadPriorityClass of the team's jobs unless a job names another."""

    @property
    def namespace(self) -> str:
        """The team's namespace (its name)."""
        return self.name


def cluster_queue_name(pool: str, team: str | None = None) -> str:
    """``<team>-<pool>``, or ``<pool>`` for the pool's own queue: the name of a Kueue
    ClusterQueue (``workloads.specs.kueue`` names its queues with this function)."""
    return f"{team}-{pool}" if team else pool


def _check_queue_names(teams: list[TeamConfig], pools: tuple[str, ...]) -> None:
    """Every (pool, team) pair gets a ClusterQueue name of its own: ``<team>-<pool>`` joins
    with a dash that names hold too (team ``a`` on pool ``b-c`` and team ``a-b`` on pool ``c``
    both give ``a-b-c``; team ``a`` on pool ``b`` is pool ``a-b``'s own queue). Refused rather
    than renamed: renaming a ClusterQueue replaces it (and evicts what it admitted), so the
    names of every existing stack stay as they are."""
    owner: dict[str, tuple[str, str | None]] = {pool: (pool, None) for pool in pools}
    for i, team in enumerate(teams):
        for pool in pools:
            name = cluster_queue_name(pool, team.name)
            other = owner.get(name)
            if other is not None:
                was = f"pool {other[0]!r}" + (f" of team {other[1]!r}" if other[1] else "")
                raise _fail(
                    f"teams[{i}].name",
                    f"team {team.name!r} on pool {pool!r} would get ClusterQueue {name!r},"
                    f" already the queue of {was}: rename the team",
                )
            owner[name] = (pool, team.name)


def pool_gpus(group: GpuNodeGroupConfig) -> int:
    """A pool's GPUs: ``maxSize`` nodes x the instance's GPUs."""
    return group.max_size * group.instance.gpus


def _parse_team(value: Any, index: int, groups: dict[str, GpuNodeGroupConfig]) -> TeamConfig:
    path = f"teams[{index}]"
    obj = _mapping(value, path)
    _check_keys(obj, TEAM_KEYS, path)
    name = _str(obj.get("name"), f"{path}.name")
    if len(name) > MAX_NAME or not _DNS_LABEL.match(name):
        raise _fail(f"{path}.name", f"{name!r} is not a DNS label of at most {MAX_NAME} characters")
    if name in RESERVED_NAMESPACES or name.startswith("kube-"):
        owner = RESERVED_NAMESPACES.get(name, "Kubernetes")
        raise _fail(
            f"{path}.name",
            f"team {name!r}: namespace {name} is the platform's ({owner}); pick another name",
        )
    arns = obj.get("principalArns")
    if not isinstance(arns, list | tuple) or not arns:
        raise _fail(
            f"{path}.principalArns", "a team needs at least one IAM role or user ARN (none given)"
        )
    for i, arn in enumerate(arns):
        if not isinstance(arn, str) or not _IAM_ARN.match(arn):
            raise _fail(f"{path}.principalArns[{i}]", f"{arn!r} is not an IAM role or user ARN")
    quota_raw = _mapping(obj.get("quota", {}), f"{path}.quota")
    quota: dict[str, int] = {}
    for pool, gpus in quota_raw.items():
        where = f"{path}.quota.{pool}"
        group = groups.get(pool)
        if group is None:
            known = ", ".join(groups) or "none"
            raise _fail(where, f"no GPU nodegroup named {pool!r} (gpuNodeGroups: {known})")
        n = _int(gpus, where, minimum=0)
        per_node = group.instance.gpus
        if n % per_node:
            raise _fail(
                where,
                f"{n} GPUs is not whole {group.instance_type} nodes (a multiple of {per_node}):"
                " a worker takes a whole node",
            )
        if n > pool_gpus(group):
            raise _fail(
                where,
                f"{n} GPUs is more than the pool's {pool_gpus(group)}"
                f" ({group.max_size} x {group.instance_type})",
            )
        quota[pool] = n
    priority = _choice(
        obj.get("defaultPriority", DEFAULT_PRIORITY), tuple(PRIORITIES), f"{path}.defaultPriority"
    )
    return TeamConfig(name=name, principal_arns=tuple(arns), quota=quota, default_priority=priority)


def _fill_shares(
    teams: list[TeamConfig], groups: dict[str, GpuNodeGroupConfig]
) -> tuple[TeamConfig, ...]:
    """Every team's quota for every pool: explicit ones checked against the pool, the rest
    shared equally in whole nodes."""
    quotas = [dict(t.quota) for t in teams]
    for pool, group in groups.items():
        explicit = [(i, q[pool]) for i, q in enumerate(quotas) if pool in q]
        total = sum(n for _, n in explicit)
        if total > pool_gpus(group):
            last = explicit[-1][0]
            raise _fail(
                f"teams[{last}].quota.{pool}",
                f"the teams' quotas add up to {total} GPUs, more than the pool's"
                f" {pool_gpus(group)} ({group.max_size} x {group.instance_type})",
            )
        sharing = [i for i, q in enumerate(quotas) if pool not in q]
        if sharing:
            free_nodes = (pool_gpus(group) - total) // group.instance.gpus
            each = free_nodes // len(sharing) * group.instance.gpus
            for i in sharing:
                quotas[i][pool] = each
    return tuple(
        TeamConfig(
            name=t.name,
            principal_arns=t.principal_arns,
            quota={pool: q[pool] for pool in groups},
            default_priority=t.default_priority,
        )
        for t, q in zip(teams, quotas, strict=True)
    )


def _parse_teams(
    value: Any, groups: tuple[GpuNodeGroupConfig, ...], admins: tuple[str, ...]
) -> tuple[TeamConfig, ...]:
    """``teams``: each team parsed, names and principals unique, quotas filled in."""
    if value in (None, ""):
        return ()
    if not isinstance(value, list | tuple):
        raise _fail("teams", f"expected a list, got {value!r}")
    by_name = {g.name: g for g in groups}
    if value and not groups:
        raise _fail("teams", "teams share GPU pools, and the stack has no gpuNodeGroups")
    teams = [_parse_team(t, i, by_name) for i, t in enumerate(value)]
    names: set[str] = set()
    owner: dict[str, str] = {}
    for i, team in enumerate(teams):
        if team.name in names:
            raise _fail(f"teams[{i}].name", f"{team.name!r} is used twice")
        names.add(team.name)
        for j, arn in enumerate(team.principal_arns):
            where = f"teams[{i}].principalArns[{j}]"
            if arn in admins:
                raise _fail(
                    where,
                    f"{arn} is also in accessEntries (cluster admin); EKS keeps one access"
                    " entry per principal: remove it from one of them",
                )
            if arn in owner:
                raise _fail(where, f"{arn} is already a member of team {owner[arn]!r}")
            owner[arn] = team.name
    _check_queue_names(teams, tuple(by_name))
    return _fill_shares(teams, by_name)
