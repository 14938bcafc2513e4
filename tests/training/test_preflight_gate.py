"""The preflight as a gate: a failing check stops the worker before training with one line
naming the node and the check, written as the container's termination message; a passing gate
changes nothing in training.

If these fail, a job on a node without its EFA devices would train (slowly, over TCP, or crash
mid-run) or die in its first NCCL communicator with a traceback, instead of stopping at start
with the node named; or ``eks-fsdp jobs status`` would have no line to show (or an earlier
attempt's stale one); or a hung link would hold every attempt for the default group's 30
minutes; or the gate would perturb the training it guards. Real runs of
``python -m training.finetune`` on CPU (gloo), in a world of one in this process or as two
torchrun agents ("nodes", static rendezvous on loopback); the EFA check fails for real here
because this machine has no ``/dev/infiniband/uverbs*``, and ``EKS_FSDP_EFA_DEVICE_GLOB`` points
a "node" at a folder of empty stand-in files instead. The termination-message path is
Kubernetes' ``terminationMessagePath`` (default ``/dev/termination-log``), redirected by
``EKS_FSDP_TERMINATION_LOG`` so the test writes into its own folder. Nothing is mocked; one
test wraps ``torch.distributed.new_group`` to read the timeout it is given, and gives the
in-process gate one link (a world of one has none).
"""

from __future__ import annotations

import json
import re
import socket
import subprocess
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from tests.training.helpers import PYTHON, REPO, TINY, child_env, free_port, merge, run, run_dirs
from training.preflight import (
    EFA_DEVICE_GLOB_ENV,
    FAILED_EXIT,
    GATE_LINK_TIMEOUT_S,
    TERMINATION_LOG_ENV,
    Expect,
    Link,
    gate_line,
    merge_expect,
    problems,
)


def _report(efa: int | None) -> dict:
    return {
        "nodes": [{"name": "ip-10-1-2-3", "ranks": [0]}],
        "collectives": [],
        "devices": [],
        "backend": "gloo",
        "transport": {"transport": None, "source": None, "provider": None},
        "health": {"ip-10-1-2-3": {"gpus": [], "xids": None, "efa_devices": efa}},
    }


def test_the_efa_check_names_the_node_and_the_count() -> None:
    found = problems(_report(0), Expect(efa=32))
    assert gate_line(found) == "preflight failed on node ip-10-1-2-3: EFA devices 0/32"
    assert problems(_report(32), Expect(efa=32)) == []
    assert problems(_report(None), Expect()) == []  # not asked: not checked


def test_a_job_files_thresholds_replace_the_catalogs() -> None:
    assert merge_expect("gpus=8,tflops=445", "efa=32", "tflops=1") == "gpus=8,efa=32,tflops=1"
    with pytest.raises(ValueError, match="efa"):
        merge_expect("efa=-1")


def _loss(out: Path) -> list[float]:
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines() if x]
    return [r["loss"] for r in rows if "loss" in r]


@pytest.mark.slow
def test_a_failing_gate_stops_before_training_and_a_passing_one_changes_nothing(
    tmp_path: Path,
) -> None:
    base = merge(TINY, ["--max_train_step=2", "--batch_size_training=2"])
    log = tmp_path / "termination-log"
    bad = run(
        [
            PYTHON,
            "-m",
            "training.finetune",
            *merge(base, run_dirs(tmp_path, "bad")),
            "--preflight",
            "--preflight_expect=efa=1",
        ],
        EKS_FSDP_TERMINATION_LOG=str(log),
    )
    assert bad.returncode == 3, bad.stderr[-3000:]
    out_bad = Path(run_dirs(tmp_path, "bad")[0].split("=", 1)[1])
    assert not (out_bad / "metrics.jsonl").exists(), "training started after a failed gate"
    want = f"preflight failed on node {socket.gethostname()}: EFA devices 0/1"
    lines = [ln for ln in bad.stderr.splitlines() if ln.startswith("preflight failed")]
    assert lines == [want]
    assert log.read_text() == want + "\n"

    results = {}
    for name, flags in (("plain", []), ("gated", ["--preflight"])):
        proc = run(
            [PYTHON, "-m", "training.finetune", *merge(base, run_dirs(tmp_path, name)), *flags]
        )
        assert proc.returncode == 0, proc.stderr[-3000:]
        results[name] = _loss(Path(run_dirs(tmp_path, name)[0].split("=", 1)[1]))
    assert len(results["plain"]) == 2
    assert results["gated"] == results["plain"]  # bit-identical: the gate leaves no trace


def _devices(folder: Path, n: int) -> str:
    """A glob over ``n`` stand-in verbs devices (``uverbs0``...) in ``folder``."""
    folder.mkdir(parents=True)
    for i in range(n):
        (folder / f"uverbs{i}").touch()
    return str(folder / "uverbs*")


@pytest.fixture
def world_of_one(monkeypatch: pytest.MonkeyPatch) -> Any:
    """A real gloo process group of one rank in this process (``training.dist.distributed``)."""
    for var in ("MASTER_ADDR", "RANK", "WORLD_SIZE", "LOCAL_RANK", "GROUP_RANK"):
        monkeypatch.delenv(var, raising=False)
    from training.dist import distributed

    with distributed() as env:
        yield env


def test_a_node_without_efa_fails_before_anything_is_measured(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, world_of_one: Any
) -> None:
    from training.preflight import gate

    monkeypatch.setenv("NODE_NAME", "ip-10-9-8-7")
    monkeypatch.setenv(EFA_DEVICE_GLOB_ENV, _devices(tmp_path / "dev", 1))
    monkeypatch.setenv(TERMINATION_LOG_ENV, str(tmp_path / "log"))
    assert gate("efa=4,gpus=1,tflops=1", tmp_path / "out", world_of_one.device) == FAILED_EXIT
    want = "preflight failed on node ip-10-9-8-7: EFA devices 1/4"
    assert (tmp_path / "log").read_text() == want + "\n"
    report = json.loads((tmp_path / "out" / "preflight.json").read_text())
    assert report["stage"] == "nodes" and report["passed"] is False
    assert report["collectives"] == [] and report["devices"] == []  # measure() never ran
    assert report["failures"] == ["node ip-10-9-8-7: EFA devices 1/4"]
    assert report["expect"]["tflops"] == 1.0  # the whole expectation, for the record


def test_a_passing_gate_clears_a_stale_line_and_bounds_each_link(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, world_of_one: Any
) -> None:
    import torch.distributed as dist

    from training.preflight import gate, measurement

    log = tmp_path / "log"
    log.write_text("preflight failed on node ip-10-9-8-7: EFA devices 0/4\n")  # attempt 1
    monkeypatch.setenv("NODE_NAME", "ip-10-9-8-7")
    monkeypatch.setenv(EFA_DEVICE_GLOB_ENV, _devices(tmp_path / "dev", 4))
    monkeypatch.setenv(TERMINATION_LOG_ENV, str(log))
    timeouts: list[Any] = []
    real_new_group = dist.new_group

    def new_group(ranks: list[int], **kwargs: Any) -> Any:
        timeouts.append(kwargs.get("timeout"))
        return real_new_group(ranks, **kwargs)

    monkeypatch.setattr(dist, "new_group", new_group)
    # A world of one has no link: give it one, a "node" of rank 0, so a group is made.
    monkeypatch.setattr(measurement, "links", lambda nodes: [[Link("intra", nodes[0][0], (0,))]])
    assert gate("efa=4,gpus=1", tmp_path / "out", world_of_one.device) == 0
    assert log.read_text() == ""
    assert timeouts == [timedelta(seconds=GATE_LINK_TIMEOUT_S)]
    assert GATE_LINK_TIMEOUT_S == 300.0
    report = json.loads((tmp_path / "out" / "preflight.json").read_text())
    assert report["passed"] is True
    assert {r["link"] for r in report["collectives"]} == {"ip-10-9-8-7"}
    assert report["health"]["ip-10-9-8-7"]["efa_devices"] == 4


@pytest.mark.slow
def test_two_nodes_one_without_efa_every_rank_exits_3_naming_it(tmp_path: Path) -> None:
    """Two torchrun agents of one process each; node-b's device folder is empty. torchrun's
    error summary (torch/distributed/elastic/multiprocessing/errors/__init__.py,
    ``ChildFailedError.format_msg``) prints each failed worker's ``exitcode``."""
    port = free_port()
    argv = merge(
        TINY,
        run_dirs(tmp_path, "job"),
        [
            "--enable_fsdp",
            "--max_train_step=1",
            "--preflight",
            "--preflight_expect=efa=2,gpus=1,inter_busbw=1",
        ],
    )
    procs = []
    for node, (name, count) in enumerate((("node-a", 2), ("node-b", 0))):
        env = child_env(
            NODE_NAME=name,
            **{
                EFA_DEVICE_GLOB_ENV: _devices(tmp_path / name, count),
                TERMINATION_LOG_ENV: str(tmp_path / f"{name}.log"),
            },
        )
        cmd = [
            PYTHON,
            "-m",
            "torch.distributed.run",
            "--nnodes=2",
            f"--node_rank={node}",
            "--nproc_per_node=1",
            "--master_addr=127.0.0.1",
            f"--master_port={port}",
            "-m",
            "training.finetune",
            *argv,
        ]
        procs.append(
            subprocess.Popen(
                cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
            )
        )
    results = [p.communicate(timeout=300) for p in procs]
    want = "preflight failed on node node-b: EFA devices 0/2"
    for p, (_stdout, stderr) in zip(procs, results, strict=True):
        assert p.returncode != 0, stderr[-3000:]
        assert re.findall(r"^\s*exitcode\s*:\s*(-?\d+)", stderr, re.M) == ["3"], stderr[-3000:]
        # the agent's own ChildFailedError only: no worker died in a collective
        assert stderr.count("Traceback (most recent call last)") == 1, stderr[-3000:]
    for name in ("node-a", "node-b"):
        assert (tmp_path / f"{name}.log").read_text() == want + "\n"
    lines = [ln for _o, err in results for ln in err.splitlines() if ln.startswith("preflight f")]
    assert lines == [want]  # rank 0 prints it once
    out = Path(run_dirs(tmp_path, "job")[0].split("=", 1)[1])
    report = json.loads((out / "preflight.json").read_text())
    assert report["stage"] == "nodes" and report["collectives"] == []  # no link was measured
    assert [n["name"] for n in report["nodes"]] == ["node-a", "node-b"]
    assert not (out / "metrics.jsonl").exists()
