"""Shared fixtures of the workloads tests: every stack's objects, built once."""

from __future__ import annotations

from typing import Any

import pytest

from jobs.build import build, example_job
from jobs.schema import JobSpec
from workloads.specs.settings import Workloads
from workloads.specs.stack import objects_by_component

STACKS = ("dev", "p4de-odcr", "p5-16")


def job_stack(stack: str) -> JobSpec:
    """The example job of a stack (``jobs/examples/<stack>.yaml``) on ``Pulumi.<stack>.yaml``
    (``.platform``): the stack files carry no job (``eks-fsdp jobs`` submits the example)."""
    from jobs.schema import load

    return load(example_job(stack), stack=stack)


def stack_workloads(stack: str, **kwargs: Any) -> Workloads:
    """Settings of a stack's workloads running its example job (``jobs.build.build``: the
    training flags checked, and in their own test too)."""
    return build(job_stack(stack), **kwargs)


@pytest.fixture(scope="session", params=STACKS)
def stack_objects(request: pytest.FixtureRequest) -> tuple[str, Workloads, list[dict[str, Any]]]:
    """(stack, settings, every Kubernetes object) for each stack."""
    w = stack_workloads(request.param)
    objs = [o for group in objects_by_component(w).values() for o in group]
    return request.param, w, objs
