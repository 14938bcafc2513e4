"""``eks-fsdp jobs submit --local FILE --fault KIND@STEP``: the one local runner injects the fault.

The fault reaches the detached runner through the job's record, the runner kills worker 1's
training process at the step named (torchrun restarts it from the newest checkpoint, as on a
cluster), and the job still ends Succeeded with every step logged; the runner's summary names
the fault and the recovery. If this fails, faults could be rehearsed only through ``eks-fsdp
local`` (a second runner with other inputs) or would be silently dropped by ``submit``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from jobs.local.backend import RECORD, RUNNER_LOG, STATE_ENV
from tests.jobs.fake_kube import run_cli

DEV = str(Path(__file__).resolve().parents[2] / "jobs" / "examples" / "dev.yaml")
TINY = (
    "model=tiny-llama-2l",
    "contextLength=128",
    "maxTrainStep=8",
    "checkpointEvery=2",
    "args.max_train_samples=256",
    "args.mixed_precision=false",  # fp32: bf16 is ~10x slower on most CPUs
    "args.run_validation=false",
    "args.save_model=false",
    "args.plot_metrics=false",
)


@pytest.mark.slow
def test_a_fault_given_to_submit_is_injected_and_the_job_recovers(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(STATE_ENV, str(tmp_path / "jobs"))
    sets = [f"--set={s}" for s in TINY]
    code, _out, err = run_cli(
        capsys, "submit", "--local", DEV, "--name", "drill", *sets, "--fault", "kill-worker@4", "-f"
    )
    assert code == 0, err
    folder = tmp_path / "jobs" / "drill"
    assert json.loads((folder / RECORD).read_text())["fault"] == "kill-worker@4"
    log = (folder / RUNNER_LOG).read_text()
    assert "fault          kill-worker@4" in log, log[-2000:]
    assert "recovery       next step logged" in log, log[-2000:]
    rows = [
        json.loads(line)
        for line in (folder / "shared" / "drill" / "output" / "metrics.jsonl")
        .read_text()
        .splitlines()
    ]
    assert sorted({r["step"] for r in rows if "step" in r}) == list(range(1, 9))


def test_a_fault_on_a_cluster_job_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from tests.jobs.fake_kube import served

    with served(tmp_path) as (_fake, kubeconfig):
        code, _out, err = run_cli(
            capsys, "submit", DEV, "--kubeconfig", kubeconfig, "--fault", "kill-worker@4"
        )
    assert code == 2
    assert "--fault kill-worker@4: faults are injected by the local runner (--local)" in err
