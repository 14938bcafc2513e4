"""Offline limits of the stack config (``infra.config``): each value AWS would reject later.

If this fails, a stack file with a root volume above gp3's 16 TiB or a node group above
EKS's 450 nodes per managed node group renders, previews and runs under mocks, and fails
only when EKS or EC2 sees it (after the VPC and the cluster are billed); or a model id that
the Hub cannot have passes to the pods.
"""

from __future__ import annotations

import pytest

from infra.config import ConfigError, load_stack_file, parse, project_defaults, stack_file_values
from infra.config.job import repo_problem
from infra.config.nodegroups import MAX_NODES_PER_GROUP, MAX_ROOT_VOLUME_GIB


def _p5_with(**group: object) -> dict:
    raw = {**project_defaults(), **stack_file_values("p5-16")}
    raw["gpuNodeGroups"] = [{**raw["gpuNodeGroups"][0], **group}]
    return raw


def test_root_volume_at_and_above_gp3_max() -> None:
    """16,384 GiB (16 TiB, gp3's largest) parses; one GiB more and 10^12 are refused naming
    the key."""
    ok = parse(_p5_with(rootVolumeGiB=MAX_ROOT_VOLUME_GIB), stack="p5-16")
    assert ok.gpu_node_groups[0].root_volume_gib == 16384
    for size in (MAX_ROOT_VOLUME_GIB + 1, 10**12):
        with pytest.raises(ConfigError) as err:
            parse(_p5_with(rootVolumeGiB=size), stack="p5-16")
        assert str(err.value) == (
            f"eks-fsdp:gpuNodeGroups[0].rootVolumeGiB: {size} GiB is above gp3's largest "
            "volume, 16384 GiB (16 TiB)"
        )


def test_node_group_at_and_above_the_eks_quota() -> None:
    """maxSize 450 parses; 451 and 10^12 are refused naming maxSize (GPU and system groups)."""
    assert (
        parse(_p5_with(maxSize=MAX_NODES_PER_GROUP), stack="p5-16").gpu_node_groups[0].max_size
        == 450
    )
    for size in (MAX_NODES_PER_GROUP + 1, 10**12):
        with pytest.raises(ConfigError) as err:
            parse(_p5_with(maxSize=size, desiredSize=16), stack="p5-16")
        assert str(err.value).startswith(
            f"eks-fsdp:gpuNodeGroups[0].maxSize: {size} is above EKS's 450 nodes per managed"
        )
    raw = {**project_defaults(), **stack_file_values("p5-16")}
    raw["systemNodeGroup"] = {
        "instanceType": "c5.2xlarge",
        "minSize": 1,
        "desiredSize": 1,
        "maxSize": 451,
    }
    with pytest.raises(ConfigError, match=r"^eks-fsdp:systemNodeGroup\.maxSize: 451 is above"):
        parse(raw, stack="p5-16")


@pytest.mark.parametrize(
    ("name", "ok"),
    [
        ("meta-llama/Llama-2-7b-hf", True),
        ("Qwen/Qwen2.5-7B-Instruct", True),
        ("tiny-llama", True),
        ("/checkpoints/exports/step-100", True),
        ("üñí", False),
        ("a/b/c", False),
        ("foo--bar", False),
        ("foo..bar", False),
        ("org/model.git", False),
        ("-org/model", False),
        ("org/" + "x" * 97, False),
    ],
)
def test_repo_id_rules_match_huggingface_hub(name: str, ok: bool) -> None:
    """Our rule agrees with huggingface_hub's own ``validate_repo_id`` on every hub-shaped
    name (paths are not repo ids and are left to the loader)."""
    from huggingface_hub.errors import HFValidationError
    from huggingface_hub.utils import validate_repo_id

    assert (repo_problem(name) is None) is ok
    if not name.startswith("/"):
        try:
            validate_repo_id(name)
            theirs = True
        except HFValidationError:
            theirs = False
        assert theirs is ok


def test_shipped_stacks_pass_the_limits() -> None:
    """Every shipped stack file is inside every limit."""
    for stack in ("dev", "p5-16", "p4de-odcr"):
        load_stack_file(stack)


def test_fit_uses_the_jobs_precision_and_the_planners_figure() -> None:
    """``planner.fit`` reads the job's precision flags with training's parser (mixed by default,
    fp32 with --mixed_precision=False, bf16 state with --pure_bf16) and refuses with the
    planner's own peak: the GiB it prints is ``planner.predict``'s for that layout."""
    import dataclasses

    from jobs.file import load
    from planner.fit import _precision, fit_problem
    from planner.memory import PRECISIONS
    from planner.predict import PlanInput, predict
    from planner.shapes import resolve

    assert _precision(()) == "mixed"
    assert _precision(("--mixed_precision=False",)) == "fp32"
    assert _precision(("--pure_bf16=True",)) == "pure_bf16"
    from infra.config.sources import REPO_ROOT

    job = load(REPO_ROOT / "jobs" / "examples" / "p5-16.yaml")
    group = job.platform.node_group(job.config.node_group)
    assert fit_problem(job.config, group) is None
    big = dataclasses.replace(job.config, batch_size=64)
    for flags, name in (((), "mixed"), (("--mixed_precision=False",), "fp32")):
        cfg = dataclasses.replace(big, extra_args=flags)
        inp = PlanInput(
            shape=resolve("llama2-7b"),
            instance=group.instance,
            precision=PRECISIONS[name],
            strategy=cfg.sharding_strategy,
            ac=1.0,
            batch=64,
            seq=cfg.context_length,
        )
        peak = predict(inp, cfg.workers).memory.total / 1024**3
        assert peak > 80
        assert f"the planner puts {peak:.1f} GiB on each GPU" in (fit_problem(cfg, group) or "")


def test_hub_ids_match_the_planners_table() -> None:
    """``planner.fit`` maps hub ids to the planner's shapes with the planner's own table (a copy:
    importing ``planner.args`` from ``jobs.file``'s check would be an import cycle)."""
    from planner.args import _HF_IDS, builtin_for_hub_id
    from planner.fit import HUB_IDS, planner_model

    assert HUB_IDS == _HF_IDS
    for name in ("meta-llama/Llama-2-7b-hf", "meta-llama/Llama-3.1-70B", "tiny-llama", "x/y"):
        assert planner_model(name) == builtin_for_hub_id(name)
