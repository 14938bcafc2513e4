"""``eks-fsdp render``'s next steps name real objects: the Hugging Face token Secret only for a
job whose model comes from the hub (``workloads.specs.pytorchjob.needs_token``), by the job's
Secret name and namespace; never a ``<placeholder>``.

If this fails, render asks ``dev`` users (a preset model, no token) for a token again, or prints
``<job.hfTokenSecretName>`` for them to fill in.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from jobs.build import load_example
from workloads.render import main
from workloads.specs.pytorchjob import model_name, needs_token

IMAGE = "123456789012.dkr.ecr.us-east-2.amazonaws.com/eks-fsdp-training:v1"


def _render(capsys: pytest.CaptureFixture[str], stack: str, out: Path) -> list[str]:
    assert main(["--stack", stack, "--out", str(out), "--image", IMAGE]) == 0
    return capsys.readouterr().out.splitlines()


def test_dev_asks_for_no_token(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert not needs_token(model_name(load_example("dev")[1].job))  # a preset: nothing gated
    lines = _render(capsys, "dev", tmp_path)
    assert lines and not [ln for ln in lines if ln.startswith("secret:") or "<job." in ln]


def test_a_hub_model_names_its_secret(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    job = load_example("p5-16", image=IMAGE)[1].job
    assert needs_token(model_name(job)) and job.hf_token_secret
    lines = _render(capsys, "p5-16", tmp_path)
    assert [ln for ln in lines if ln.startswith("secret:")] == [
        f"secret: kubectl create secret generic {job.hf_token_secret} -n {job.namespace} "
        "--from-literal=token=$HF_TOKEN  (never rendered)"
    ]
    assert not [ln for ln in lines if "<job." in ln]
