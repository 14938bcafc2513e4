"""The command lines of ``workloads.render`` and of the local runner, ``localrun``.

Nothing is mocked (no process is started: bad input must stop before any work). If these fail,
``make render`` would write objects that differ from what the stack applies or write nothing
useful, and a typo in a flag, a fault or a stack name would start etcd and workers (or print a
stack trace) instead of one line naming the culprit with exit status 2.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from localrun import cli
from localrun.job import local_job_settings
from localrun.options import LocalOptions
from tests.workloads.conftest import stack_workloads
from workloads import render
from workloads.specs.stack import objects_by_component, operator_kustomization


def test_render_writes_one_file_per_component(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert render.main(["--stack", "dev", "--out", str(tmp_path)]) == 0
    files = sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*.yaml"))
    assert files == [
        "etcd.yaml",
        "jobs-service-account.yaml",
        "pytorchjob.yaml",
        "training-operator/kustomization.yaml",
        "workers-network-policy.yaml",
    ]
    from jobs.build import example_job
    from jobs.cluster import trainjob
    from jobs.schema import load as load_job

    w = stack_workloads("dev")
    # the job's objects as submit creates them (its queue's labels: jobs.queue)
    job_file = load_job(example_job("dev"), stack="dev")
    for component, objs in trainjob.as_submitted(objects_by_component(w), job_file, w.job).items():
        assert list(yaml.safe_load_all((tmp_path / f"{component}.yaml").read_text())) == objs
    kust = yaml.safe_load((tmp_path / "training-operator/kustomization.yaml").read_text())
    assert kust == operator_kustomization(w)
    assert "kubectl apply --server-side -k" in capsys.readouterr().out


def test_render_observability_objects_and_pinned_chart_values(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A stack with observability on also renders its namespace, the gp3 StorageClass of
    Prometheus' claim, dashboard and chart values (what the Observability component applies),
    never the Grafana password."""
    from infra import versions
    from infra.config import load_stack_file
    from workloads.specs import observability as obs

    image = "123456789012.dkr.ecr.us-east-1.amazonaws.com/eks-fsdp-p4de-odcr-training:sha-1"
    assert render.main(["--stack", "p4de-odcr", "--out", str(tmp_path), "--image", image]) == 0
    s = obs.settings_from_stack(load_stack_file("p4de-odcr"))
    objs = list(yaml.safe_load_all((tmp_path / "observability.yaml").read_text()))
    assert objs == [obs.namespace(s), obs.storage_class(s), obs.dashboard_configmap(s)]
    values = {p.name: yaml.safe_load(p.read_text()) for p in (tmp_path / "observability").iterdir()}
    assert values == {
        "kube-prometheus-stack-values.yaml": obs.kube_prometheus_stack_values(s),
        "dcgm-exporter-values.yaml": obs.dcgm_exporter_values(s),
    }
    assert all(
        o["kind"] != "Secret"
        for p in tmp_path.rglob("*.yaml")
        for o in yaml.safe_load_all(p.read_text())
        if isinstance(o, dict) and "kind" in o
    )
    out = capsys.readouterr().out
    assert f"--version {versions.KUBE_PROMETHEUS_STACK_VERSION}" in out
    assert f"--version {versions.DCGM_EXPORTER_VERSION}" in out
    assert "<password>  (never rendered)" in out


def test_render_generation_changes_only_the_rendezvous(tmp_path: Path) -> None:
    assert render.main(["--stack", "dev", "--out", str(tmp_path / "a")]) == 0
    assert render.main(["--stack", "dev", "--out", str(tmp_path / "b"), "--generation", "2"]) == 0
    a = yaml.safe_load((tmp_path / "a/pytorchjob.yaml").read_text())
    b = yaml.safe_load((tmp_path / "b/pytorchjob.yaml").read_text())
    assert a["spec"]["elasticPolicy"]["rdzvId"] != b["spec"]["elasticPolicy"]["rdzvId"]
    a["spec"]["elasticPolicy"].pop("rdzvId")
    b["spec"]["elasticPolicy"].pop("rdzvId")
    assert a["spec"] == b["spec"]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--stack", "nope"], "Pulumi.nope.yaml"),
        (["--stack", "dev", "--image", "repo/train:latest"], "job.image"),
        # a GPU job refuses a registry-less image (it would be ImagePullBackOff on the nodes)
        (["--stack", "p5-16"], "runs on GPU nodes and needs a registry image"),
        (["--stack", "p4de-odcr", "--image", "eks-fsdp-training:sha-1"], "names no registry"),
    ],
)
def test_render_bad_input_is_one_line_and_status_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    assert render.main([*argv, "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and message in err
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--stack", "nope"], "Pulumi.nope.yaml"),
        (["--fault", "kill@x"], "--fault"),
        (["--fault", "kill-worker@0"], "--fault"),
        (["--set=--bogus=1"], "unknown flag --bogus"),
        (["--set=--context_length=0"], "--context_length"),
        (["--backend", "zookeeper"], "--backend"),
        (["--workers", "1", "--fault", "kill-node@3"], "--workers >= 2"),
        (["--workers", "0"], "--workers"),
        (["--etcd-down", "-1"], "--etcd-down"),
        (["--etcd-endpoint", "nowhere"], "--etcd-endpoint"),
    ],
)
def test_local_bad_input_is_one_line_and_status_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    assert cli.main([*argv, "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and message in err, err
    assert not (tmp_path / "out" / "logs").exists() or not any(
        (tmp_path / "out" / "logs").iterdir()
    )


def test_local_cpu_run_logs_every_step_while_the_cluster_job_logs_every_ten(
    tmp_path: Path,
) -> None:
    """The dev stack's job (device cpu): its cluster command fetches metrics every 10 steps
    (pytorchjob.CLUSTER_LOG_EVERY, torchtitan's log_freq: a GPU step must not sync on the
    host for metrics), while the local CPU runner keeps a row written per step (its progress
    lines and fault timings read them), unless --set chooses."""
    from jobs.build import load_example
    from workloads.specs import pytorchjob

    _, w = load_example("dev")
    cluster = pytorchjob.train_command(w.job)
    assert [a for a in cluster if a.startswith("--log_every")] == ["--log_every=10"]
    # the demo's tiny model trains without activation checkpointing (Pulumi.dev.yaml says why)
    assert "--fsdp_activation_checkpointing=False" in cluster
    opts = LocalOptions(stack="dev", out=tmp_path)
    assert w.device == "cpu"
    job = local_job_settings(opts, tmp_path / "shared", w.job, w.device)
    cmd = pytorchjob.train_command(job)
    assert [a for a in cmd if a.startswith("--log_every")] == ["--log_every=1"]
    opts = LocalOptions(stack="dev", out=tmp_path, train_overrides=("--log_every=5",))
    cmd = pytorchjob.train_command(local_job_settings(opts, tmp_path / "shared", w.job, w.device))
    assert [a for a in cmd if a.startswith("--log_every")] == ["--log_every=5"]
