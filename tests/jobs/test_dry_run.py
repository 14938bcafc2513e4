"""``jobs submit --dry-run`` and the local memory check: nothing is created or started.

``--dry-run`` prints the objects submit would create (the builders' own, as the renderer writes
them) and the plan, without asking a cluster (no kubeconfig exists here) or starting a runner; a
local job whose planned memory exceeds what this machine has available is refused in one line
naming the key, before any worker starts. If this fails, a user previewing a job would create it,
or a local job with a micro-batch of a million would start its workers and swap the machine.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from jobs import schema
from jobs.build import build
from jobs.local.backend import memory_problem
from tests.jobs.fake_kube import run_cli
from workloads.specs import pytorchjob as pj

EXAMPLES = Path(__file__).resolve().parents[2] / "jobs" / "examples"
IMAGE = "123456789012.dkr.ecr.us-east-1.amazonaws.com/eks-fsdp-p4de-odcr-training:sha-1"


def test_a_cluster_dry_run_prints_the_job_as_built_and_asks_no_cluster(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "no-such-kubeconfig"))
    path = EXAMPLES / "p4de-odcr.yaml"
    code, out, err = run_cli(capsys, "submit", str(path), "--dry-run", "--image", IMAGE)
    assert code == 0, err
    objects = list(yaml.safe_load_all(out))
    assert [o["kind"] for o in objects] == ["PyTorchJob", "NetworkPolicy"]
    job = schema.load(path)
    built = build(job, image=IMAGE).job
    want = pj.pytorchjob(built, "etcd.default.svc.cluster.local")
    assert objects[0]["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] == job.workers == 2
    assert (
        objects[0]["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0][
            "command"
        ]
        == (
            want["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0][
                "command"
            ]
        )
    )
    assert err.strip().endswith(
        "dry run: nothing created (PyTorchJob/llama2-13b-samsum, "
        "NetworkPolicy/llama2-13b-samsum-workers)"
    )


def test_a_local_dry_run_starts_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("EKS_FSDP_JOBS_DIR", str(tmp_path / "jobs"))
    code, out, err = run_cli(capsys, "submit", "--local", str(EXAMPLES / "dev.yaml"), "--dry-run")
    assert code == 0, err
    assert [o["kind"] for o in yaml.safe_load_all(out)] == ["PyTorchJob", "NetworkPolicy"]
    assert not (tmp_path / "jobs").exists()


def test_a_local_job_larger_than_the_machine_is_refused_before_it_starts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("EKS_FSDP_JOBS_DIR", str(tmp_path / "jobs"))
    dev = EXAMPLES / "dev.yaml"
    code, _out, err = run_cli(
        capsys, "submit", "--local", str(dev), "--set", "batchSize=1000000", "--name", "huge"
    )
    assert code == 2
    (line,) = err.strip().splitlines()
    at = 1 + dev.read_text().splitlines().index("batchSize: 2")
    assert line.startswith(f"eks-fsdp jobs: error: {dev}:{at}: batchSize: the 2 local worker(s)")
    assert not (tmp_path / "jobs" / "huge").exists()


def test_the_memory_check_compares_the_planners_bytes_with_what_is_available() -> None:
    job = schema.load(EXAMPLES / "dev.yaml")
    assert memory_problem(job, available=1 << 50) is None  # a petabyte: fits
    refused = memory_problem(job, available=1 << 20)  # a mebibyte: the planner needs more
    assert refused is not None and "this machine has 0.0 GiB available" in refused
