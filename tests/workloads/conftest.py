"""Shared fixtures of the workloads tests: every stack's objects, built once."""

from __future__ import annotations

from typing import Any

import pytest

from infra.config import load_stack_file
from workloads.specs.settings import Workloads, from_stack
from workloads.specs.stack import objects_by_component, training_image

STACKS = ("dev", "p4de-odcr", "p5-16")


def stack_workloads(stack: str, **kwargs: Any) -> Workloads:
    """Settings of a stack's workloads (training flags are checked in their own test)."""
    cfg = load_stack_file(stack)
    return from_stack(cfg, image=training_image(cfg), stack=stack, **kwargs)


@pytest.fixture(scope="session", params=STACKS)
def stack_objects(request: pytest.FixtureRequest) -> tuple[str, Workloads, list[dict[str, Any]]]:
    """(stack, settings, every Kubernetes object) for each stack."""
    w = stack_workloads(request.param)
    objs = [o for group in objects_by_component(w).values() for o in group]
    return request.param, w, objs
