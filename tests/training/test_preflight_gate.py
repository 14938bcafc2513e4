"""The preflight as a gate: a failing check stops the worker before training with one line
naming the node and the check, written as the container's termination message; a passing gate
changes nothing in training.

If these fail, a job on a node without its EFA devices would train (slowly, over TCP, or crash
mid-run) instead of stopping at start with the node named, or ``python -m jobs status`` would
have no line to show, or the gate would perturb the training it guards. Real runs of
``python -m training.finetune`` on CPU (gloo); the EFA check fails for real here because this
machine has no ``/dev/infiniband/uverbs*``. The termination-message path is Kubernetes'
``terminationMessagePath`` (default ``/dev/termination-log``), redirected by
``EKS_FSDP_TERMINATION_LOG`` so the test writes into its own folder.
"""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

from tests.training.helpers import PYTHON, TINY, merge, run, run_dirs
from training.preflight import Expect, gate_line, merge_expect, problems


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
