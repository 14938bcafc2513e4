"""A job file's ``preflight``: parsed against the stack, rendered into the PyTorchJob's command.

If this fails, an EFA stack's job would start without checking its nodes (or a CPU stack
would be held to GPU thresholds), or the thresholds in the pod would stop being the
catalog's: ``training.preflight`` reads them from ``--preflight_expect`` only (the image
carries no catalog). Pure functions on the real stack files; nothing is mocked.
"""

from __future__ import annotations

import pytest

from infra.instances import lookup
from jobs.schema import JobFileError
from planner.expect import expectations
from tests.workloads.conftest import job_stack, stack_workloads
from training.config import parse_args
from training.preflight import parse_expect
from workloads.specs import pytorchjob


def _flags(stack: str, **job: object) -> list[str]:
    """The example job's command, with ``job`` keys set as ``--set`` would."""
    if not job:
        return pytorchjob.train_command(stack_workloads(stack).job)
    from jobs.build import build, example_job
    from jobs.schema import load

    sets = [f"{k}={str(v).lower() if isinstance(v, bool) else v}" for k, v in job.items()]
    return pytorchjob.train_command(build(load(example_job(stack), sets=sets)).job)


@pytest.mark.parametrize(("stack", "on"), [("dev", False), ("p4de-odcr", True), ("p5-16", True)])
def test_preflight_defaults_to_on_for_efa_stacks(stack: str, on: bool) -> None:
    spec = job_stack(stack)
    assert spec.preflight is on is spec.group.efa
    assert ("--preflight" in _flags(stack)) is on


@pytest.mark.parametrize("stack", ["p4de-odcr", "p5-16"])
def test_rendered_thresholds_are_the_catalog_expectations(stack: str) -> None:
    spec = job_stack(stack)
    flags = _flags(stack)
    (arg,) = [f for f in flags if f.startswith("--preflight_expect=")]
    expect = parse_expect(arg.split("=", 1)[1])
    it = lookup(spec.group.instance_type)
    want = expectations(it, spec.workers)
    assert expect.gpus == it.gpus == want["gpus"]
    assert expect.net == "OFI"  # EFA nodes must never fall back to NET/Socket
    assert (expect.intra_busbw, expect.inter_busbw) == (want["intra_busbw"], want["inter_busbw"])
    assert expect.tflops == want["tflops"] and expect.mem_gbps == want["mem_gbps"]
    # the training CLI accepts the command as rendered
    cfg_train = parse_args(pytorchjob.finetune_flags(flags))
    assert cfg_train.preflight and cfg_train.preflight_expect == arg.split("=", 1)[1]


def test_preflight_can_be_switched_and_cpu_jobs_measure_only() -> None:
    assert "--preflight" not in _flags("p5-16", preflight=False)
    cpu = _flags("dev", preflight=True)
    assert "--preflight" in cpu
    assert not [f for f in cpu if f.startswith("--preflight_expect")]
    with pytest.raises(JobFileError, match=r"p5-16\.yaml: preflight: expected true or false"):
        _flags("p5-16", preflight="sometimes")
