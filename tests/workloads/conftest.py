"""Shared fixtures of the workloads tests: every stack's objects, built once."""

from __future__ import annotations

from typing import Any

import pytest

from infra.config import StackConfig
from workloads.specs.settings import Workloads, from_stack
from workloads.specs.stack import example_job, objects_by_component, training_image

STACKS = ("dev", "p4de-odcr", "p5-16")


def job_stack(stack: str) -> StackConfig:
    """``Pulumi.<stack>.yaml`` with its example job (``jobs/examples/<stack>.yaml``) bound:
    the stack files carry no job (``python -m jobs`` submits the example)."""
    from jobs.schema import load

    return load(example_job(stack), stack=stack).platform


def stack_workloads(stack: str, **kwargs: Any) -> Workloads:
    """Settings of a stack's workloads running its example job (training flags are checked in
    their own test)."""
    cfg = job_stack(stack)
    kwargs.setdefault("image", training_image(cfg))
    return from_stack(cfg, stack=stack, **kwargs)


@pytest.fixture(scope="session", params=STACKS)
def stack_objects(request: pytest.FixtureRequest) -> tuple[str, Workloads, list[dict[str, Any]]]:
    """(stack, settings, every Kubernetes object) for each stack."""
    w = stack_workloads(request.param)
    objs = [o for group in objects_by_component(w).values() for o in group]
    return request.param, w, objs
