"""The ``teams`` stack key: parsing, default shares, and one line for every bad input.

If this fails, a stack shared by teams would get quotas that do not add up to its GPU pools
(two teams promised the same nodes, or nodes nobody can use), a team without a way in, or a
typo in a team (a priority that does not exist, a pool that does not exist) would surface at
``pulumi up`` as a Kueue or EKS error instead of one line naming the key before any work; a
team could take a namespace the platform installs into (Trainer v2's ``kubeflow-system``, the
CloudWatch add-on's), or two (pool, team) pairs could share one ClusterQueue name, the second
overwriting the first's quota.
"""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from infra.config import (
    REPO_ROOT,
    ConfigError,
    StackConfig,
    load_stack_file,
    parse,
    pool_gpus,
    project_defaults,
    stack_file_values,
)

ARN = "arn:aws:iam::123456789012:role/{}"
TWO_TEAMS: list[dict[str, Any]] = [
    {"name": "nlp", "principalArns": [ARN.format("nlp")], "quota": {"p5-block": 48}},
    {
        "name": "vision",
        "principalArns": [ARN.format("vision"), "arn:aws:iam::123456789012:user/alice"],
        "defaultPriority": "production",
    },
]


def p5(**overrides: Any) -> StackConfig:
    """The 16-node p5 stack with ``overrides`` (top-level keys)."""
    raw = {**project_defaults(), **stack_file_values("p5-16"), **overrides}
    return parse(raw, stack="p5-16")


def test_two_teams_share_the_pool() -> None:
    cfg = p5(teams=TWO_TEAMS)
    nlp, vision = cfg.teams
    assert (nlp.name, nlp.namespace, nlp.default_priority) == ("nlp", "nlp", "experiment")
    assert vision.default_priority == "production"
    assert vision.principal_arns == tuple(TWO_TEAMS[1]["principalArns"])
    (group,) = cfg.gpu_node_groups
    assert pool_gpus(group) == 16 * 8
    # nlp asked for 6 nodes; vision, giving no quota, gets the other 10.
    assert dict(nlp.quota) == {"p5-block": 48}
    assert dict(vision.quota) == {"p5-block": 80}


def test_default_shares_are_whole_nodes_and_the_rest_stays_in_the_pool() -> None:
    teams = [{"name": n, "principalArns": [ARN.format(n)]} for n in ("a", "b", "c")]
    cfg = p5(teams=teams)
    shares = [t.quota["p5-block"] for t in cfg.teams]
    assert shares == [40, 40, 40]  # 16 nodes // 3 = 5 nodes each; 1 node left shared
    assert all(s % 8 == 0 for s in shares)
    assert pool_gpus(cfg.gpu_node_groups[0]) - sum(shares) == 8


def test_no_teams_by_default_and_declared_in_the_project() -> None:
    assert all(load_stack_file(s).teams == () for s in ("dev", "p4de-odcr", "p5-16"))
    decl = yaml.safe_load((REPO_ROOT / "Pulumi.yaml").read_text())["config"]["teams"]
    assert decl["default"] == []
    for key in ("name", "principalArns", "quota", "defaultPriority"):
        assert key in decl["description"]


def _team(**fields: Any) -> dict[str, Any]:
    return {"name": "nlp", "principalArns": [ARN.format("nlp")], **fields}


BAD: list[tuple[str, dict[str, Any], str]] = [
    (
        "no principals",
        {"teams": [{"name": "nlp"}]},
        "eks-fsdp:teams[0].principalArns: a team needs at least one IAM role or user ARN"
        " (none given)",
    ),
    (
        "empty principals",
        {"teams": [_team(principalArns=[])]},
        "eks-fsdp:teams[0].principalArns: a team needs at least one IAM role or user ARN"
        " (none given)",
    ),
    (
        "duplicate team",
        {"teams": [_team(), _team(principalArns=[ARN.format("other")])]},
        "eks-fsdp:teams[1].name: 'nlp' is used twice",
    ),
    (
        "quota larger than the pool",
        {"teams": [_team(quota={"p5-block": 136})]},
        "eks-fsdp:teams[0].quota.p5-block: 136 GPUs is more than the pool's 128 (16 x p5.48xlarge)",
    ),
    (
        "quotas adding up past the pool",
        {
            "teams": [
                _team(quota={"p5-block": 64}),
                {"name": "cv", "principalArns": [ARN.format("cv")], "quota": {"p5-block": 72}},
            ]
        },
        "eks-fsdp:teams[1].quota.p5-block: the teams' quotas add up to 136 GPUs, more than"
        " the pool's 128 (16 x p5.48xlarge)",
    ),
    (
        "quota not whole nodes",
        {"teams": [_team(quota={"p5-block": 12})]},
        "eks-fsdp:teams[0].quota.p5-block: 12 GPUs is not whole p5.48xlarge nodes (a multiple"
        " of 8): a worker takes a whole node",
    ),
    (
        "unknown pool",
        {"teams": [_team(quota={"p4-block": 8})]},
        "eks-fsdp:teams[0].quota.p4-block: no GPU nodegroup named 'p4-block'"
        " (gpuNodeGroups: p5-block)",
    ),
    (
        "unknown priority",
        {"teams": [_team(defaultPriority="urgent")]},
        "eks-fsdp:teams[0].defaultPriority: 'urgent' is not one of production, experiment",
    ),
    (
        "unknown key",
        {"teams": [_team(share=0.5)]},
        "eks-fsdp:teams[0].share: unknown key (known: name, principalArns, quota, defaultPriority)",
    ),
    (
        "not an ARN",
        {"teams": [_team(principalArns=["alice"])]},
        "eks-fsdp:teams[0].principalArns[0]: 'alice' is not an IAM role or user ARN",
    ),
    (
        "principal also a cluster admin",
        {"teams": [_team()], "accessEntries": [ARN.format("nlp")]},
        f"eks-fsdp:teams[0].principalArns[0]: {ARN.format('nlp')} is also in accessEntries"
        " (cluster admin); EKS keeps one access entry per principal: remove it from one of them",
    ),
    (
        "principal in two teams",
        {"teams": [_team(), {"name": "cv", "principalArns": [ARN.format("nlp")]}]},
        f"eks-fsdp:teams[1].principalArns[0]: {ARN.format('nlp')} is already a member of"
        " team 'nlp'",
    ),
    (
        "a system namespace",
        {"teams": [_team(name="kube-public")]},
        "eks-fsdp:teams[0].name: team 'kube-public': namespace kube-public is the platform's"
        " (Kubernetes); pick another name",
    ),
    (
        "Trainer v2's namespace",
        {"teams": [_team(name="kubeflow-system")]},
        "eks-fsdp:teams[0].name: team 'kubeflow-system': namespace kubeflow-system is the"
        " platform's (Kubeflow Trainer v2 and JobSet); pick another name",
    ),
    (
        "the CloudWatch add-on's namespace",
        {"teams": [_team(name="amazon-cloudwatch")]},
        "eks-fsdp:teams[0].name: team 'amazon-cloudwatch': namespace amazon-cloudwatch is the"
        " platform's (the amazon-cloudwatch-observability add-on); pick another name",
    ),
    (
        "not a list",
        {"teams": {"name": "nlp"}},
        "eks-fsdp:teams: expected a list, got {'name': 'nlp'}",
    ),
]


@pytest.mark.parametrize(("case", "overrides", "message"), BAD, ids=[b[0] for b in BAD])
def test_bad_teams_stop_with_one_line(case: str, overrides: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError) as err:
        p5(**overrides)
    assert str(err.value) == message
    assert "\n" not in str(err.value)


def test_a_pool_named_default_is_refused() -> None:
    """Its LocalQueue would be ``default``, the queue Kueue v0.17.0 puts every job without a
    queue label in (LocalQueueDefaulting, GA: ``pkg/controller/constants``
    ``DefaultLocalQueueName``): unlabelled jobs would be captured by that pool."""
    (group,) = stack_file_values("p5-16")["gpuNodeGroups"]
    with pytest.raises(ConfigError) as err:
        p5(gpuNodeGroups=[{**group, "name": "default"}])
    assert str(err.value) == (
        "eks-fsdp:gpuNodeGroups[0].name: 'default' is reserved (Kueue's default LocalQueue):"
        " rename it"
    )


def test_teams_need_a_gpu_pool() -> None:
    raw = {**project_defaults(), **stack_file_values("dev"), "gpuNodeGroups": []}
    with pytest.raises(ConfigError, match=r"^eks-fsdp:teams: teams share GPU pools"):
        parse({**raw, "teams": [_team()]}, stack="dev")


def test_reserved_namespaces_hold_every_namespace_the_platform_uses() -> None:
    """The namespaces the stack's own modules install into are refused as team names."""
    from infra import versions
    from infra.config.teams import RESERVED_NAMESPACES
    from workloads.specs import kueue, stack
    from workloads.specs.observability import ObservabilitySettings

    used = {
        versions.TRAINING_OPERATOR_NAMESPACE,
        versions.KUEUE_NAMESPACE,
        kueue.JOBS_NAMESPACE,
        stack.JOBS_NAMESPACE,
        ObservabilitySettings().namespace,
    }
    assert used <= set(RESERVED_NAMESPACES)
    for name in RESERVED_NAMESPACES:
        with pytest.raises(ConfigError, match=rf"namespace {name} is the platform's"):
            p5(teams=[_team(name=name)])


def _two_pools(*names: str) -> list[dict[str, Any]]:
    """p5-16's GPU group under each of ``names`` (8 nodes each)."""
    (group,) = stack_file_values("p5-16")["gpuNodeGroups"]
    return [{**group, "name": n, "maxSize": 8, "desiredSize": 8} for n in names]


@pytest.mark.parametrize(
    ("pools", "teams", "message"),
    [
        (
            ("p5", "x-p5"),
            ("a", "a-x"),
            "eks-fsdp:teams[1].name: team 'a-x' on pool 'p5' would get ClusterQueue 'a-x-p5',"
            " already the queue of pool 'x-p5' of team 'a': rename the team",
        ),
        (
            ("p5", "x-p5"),
            ("x",),
            "eks-fsdp:teams[0].name: team 'x' on pool 'p5' would get ClusterQueue 'x-p5',"
            " already the queue of pool 'x-p5': rename the team",
        ),
    ],
    ids=["two teams", "a pool's own queue"],
)
def test_cluster_queue_names_never_clash(
    pools: tuple[str, ...], teams: tuple[str, ...], message: str
) -> None:
    """``<team>-<pool>`` joins with a dash names hold too: a pair that would share a
    ClusterQueue with another is refused in one line (renaming would replace live queues)."""
    raw_teams = [{"name": t, "principalArns": [ARN.format(t)]} for t in teams]
    with pytest.raises(ConfigError) as err:
        p5(gpuNodeGroups=_two_pools(*pools), teams=raw_teams)
    assert str(err.value) == message


def test_queue_names_are_distinct_for_valid_stacks() -> None:
    from workloads.specs import kueue

    cfg = p5(
        gpuNodeGroups=_two_pools("p5", "p4"),
        teams=[{"name": t, "principalArns": [ARN.format(t)]} for t in ("nlp", "nlp-x", "cv")],
    )
    names = [
        q["metadata"]["name"] for q in kueue.cluster_objects(cfg) if q["kind"] == "ClusterQueue"
    ]
    assert len(names) == len(set(names)) == 2 * (1 + 3)
