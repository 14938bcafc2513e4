"""NCCL logs at WARN unless a job asks for INFO, and the preflight still knows the network.

If these fail, every job again writes NCCL's INFO lines (init, topology, every channel of every
communicator, on every rank) into its logs and CloudWatch Logs; or ``ncclDebug: INFO`` no
longer reaches the workers; or a bad level is not refused in one line; or — the catch of a
quiet default — the preflight gate (``training.preflight``) of an EFA job can no longer tell
which network NCCL uses: with WARN there is no INFO log to read, so it must get the answer
from ``NCCL_NET`` (NCCL fails to initialise when the named network cannot be used, rather
than falling back: NCCL docs, "Environment Variables", NCCL_NET), which the spec sets on EFA
types.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from jobs.build import build
from jobs.schema import JobFileError, load
from tests.workloads.conftest import STACKS
from training.preflight.transport import detect_transport
from training.preflight.verdict import failures, parse_expect
from workloads.specs import pytorchjob

EXAMPLES = Path(__file__).resolve().parents[2] / "jobs" / "examples"


def _pod_env(job_file: Any) -> tuple[dict[str, str], Any]:
    """The literal env of a worker (what the container sees from ``value`` entries)."""
    w = build(job_file, image="123456789012.dkr.ecr.us-east-1.amazonaws.com/t:sha-1")
    job = pytorchjob.pytorchjob(w.job, w.etcd.host)
    container = job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
    return {e["name"]: e["value"] for e in container["env"] if "value" in e}, w.job


def _report(transport: dict[str, Any]) -> dict[str, Any]:
    """Two nodes, healthy, fast: only the transport can fail the verdict."""
    return {
        "backend": "cpu:gloo,cuda:nccl",
        "nodes": [{"name": "a", "ranks": [0]}, {"name": "b", "ranks": [1]}],
        "transport": transport,
        "collectives": [],
        "devices": [],
        "health": {"a": {"gpus": [], "xids": []}, "b": {"gpus": [], "xids": []}},
    }


@pytest.mark.parametrize("stack", STACKS)
def test_warn_by_default_and_the_preflight_still_finds_the_network(stack: str) -> None:
    env, job = _pod_env(load(EXAMPLES / f"{stack}.yaml"))
    assert env["NCCL_DEBUG"] == "WARN"
    assert "NCCL_DEBUG_FILE" not in env  # no INFO log for the preflight to read
    if job.preflight_expect is None or "net=" not in job.preflight_expect:
        return  # no EFA, no network to insist on
    found = detect_transport("cpu:gloo,cuda:nccl", env)
    assert found == {"transport": "OFI", "source": "NCCL_NET", "provider": None}
    expect = parse_expect(job.preflight_expect)
    assert expect.net == "OFI"
    assert [f for f in failures(_report(found), expect) if "transport" in f] == []
    # and a pod that lost NCCL_NET would be caught, not passed
    lost = detect_transport("cpu:gloo,cuda:nccl", {k: v for k, v in env.items() if k != "NCCL_NET"})
    assert any("unknown network" in f for f in failures(_report(lost), expect))


def test_some_stack_has_an_efa_preflight() -> None:
    """The test above checks the network on at least one stack."""
    jobs = [_pod_env(load(EXAMPLES / f"{s}.yaml"))[1] for s in STACKS]
    assert any(j.preflight_expect and "net=OFI" in j.preflight_expect for j in jobs)


def test_info_on_request() -> None:
    env, _ = _pod_env(load(EXAMPLES / "p5-16.yaml", sets=["ncclDebug=INFO"]))
    assert env["NCCL_DEBUG"] == "INFO"


def test_a_bad_level_is_one_line() -> None:
    with pytest.raises(JobFileError) as err:
        load(EXAMPLES / "p5-16.yaml", sets=["ncclDebug=LOUD"])
    message = str(err.value)
    assert "\n" not in message
    assert "ncclDebug" in message and "LOUD" in message and "WARN" in message
