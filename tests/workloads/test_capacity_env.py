"""A job on a capacity-block group reads the block's scale-down time; other jobs read nothing.

If these fail, the workers of a job on a capacity block no longer get
``EKS_FSDP_CAPACITY_ENDS_AT`` from the ConfigMap the stack writes (``capacity-block-<group>``,
key ``scaleDownAt``), so they train until the scale-down drains their nodes instead of
stopping before it (``training.deadline``); or the variable becomes required and a pod whose
stack has no window yet fails with CreateContainerConfigError; or jobs elsewhere get it.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from tests.workloads.conftest import STACKS, job_stack, stack_workloads
from training.deadline import ENV, parse_ends_at
from workloads.specs import capacity, pytorchjob
from workloads.specs.validate import validate_pytorchjob


def _env(w: Any) -> dict[str, dict[str, Any]]:
    job = pytorchjob.pytorchjob(w.job, w.etcd.host)
    validate_pytorchjob(job)  # the operator's types accept the env source
    container = job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
    return {e["name"]: e for e in container["env"]}


def test_the_variable_is_the_one_training_reads() -> None:
    assert pytorchjob.CAPACITY_ENDS_AT_ENV == ENV
    assert pytorchjob.CAPACITY_KEY in capacity.KEYS


@pytest.mark.parametrize("stack", STACKS)
def test_capacity_block_jobs_read_the_scale_down_time(stack: str) -> None:
    spec = job_stack(stack)
    group = spec.group
    env = _env(stack_workloads(stack))
    if group.capacity_type != "capacity-block":
        assert ENV not in env
        return
    assert env[ENV] == {
        "name": ENV,
        "valueFrom": {
            "configMapKeyRef": {
                "name": capacity.configmap_name(group.name),
                "key": "scaleDownAt",
                "optional": True,
            }
        },
    }
    # the ConfigMap the stack writes for that group carries the key, in the form training parses
    start = dt.datetime(2026, 12, 10, 11, 30, tzinfo=dt.UTC)
    window = {
        "start": "2026-12-10T11:30:00Z",
        "end": "2026-12-17T11:30:00Z",
        "scaleDownAt": "2026-12-17T10:30:00Z",
    }
    cm = capacity.capacity_block_configmap(group.name, window, spec.namespace)
    ref = env[ENV]["valueFrom"]["configMapKeyRef"]
    assert cm["metadata"]["name"] == ref["name"]
    ends_at = parse_ends_at(cm["data"][ref["key"]])
    assert ends_at - start.timestamp() == 7 * 24 * 3600 - 3600


def test_some_shipped_stack_is_a_capacity_block() -> None:
    """The parametrised test above checks the env on at least one stack."""
    kinds = {job_stack(s).group.capacity_type for s in STACKS}
    assert "capacity-block" in kinds
