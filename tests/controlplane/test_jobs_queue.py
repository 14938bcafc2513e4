"""``eks-fsdp jobs submit --team`` through the real Kueue on the local control plane.

The p4de-odcr stack (a pool of two fake p4de.24xlarge, 16 GPUs) with two teams: ``jq-nlp``
owns one node, ``jq-vision`` the other. Its Kueue and team objects are applied (cluster-scoped
names prefixed ``jq-``, the flavor's Topology too: EFA jobs ask for one network-node-layer-3
block, which ``test_kueue_quota.py`` checks), Kueue running with the stack's own Configuration
(``waitForPodsReady``, ``blockAdmission``: ``controlplane.operators.kueue_configuration``).
Then, with the CLI only:

- ``submit --team jq-nlp`` of a two-worker job (16 GPUs: the team's 8 and the other team's 8,
  borrowed) is admitted (Kueue unsuspends it; the operator makes its pods);
- a second one-worker job of the same team waits: ``status`` and ``list`` show it queued with
  Kueue's reason, ``waiting for 8 GPUs in jq-p4de-odcr, 0 free``;
- ``suspend`` of the first deactivates its Workload: Kueue evicts it (the job suspended, its
  pods deleted by the operator) and admits the second; ``unsuspend`` queues the first again.

If this fails, the CLI's jobs do not reach the team's LocalQueue, the labels or namespace do
not match what Kueue reads, ``status`` cannot find the Workload Kueue owns for a job or
misreads its conditions, or ``suspend`` does not free the queue for the next job.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from controlplane import operators
from controlplane.client import wait_for
from controlplane.cluster import ControlPlane
from infra.config import load_stack_file, sources
from jobs import cli
from tests.controlplane.helpers import IMAGE, delete_and_wait, prefix_queues
from workloads.specs import kueue, storage, teams

pytestmark = pytest.mark.controlplane
REPO = Path(__file__).resolve().parents[2]
STACK = "p4de-odcr"
P4DE = str(REPO / "jobs" / "examples" / "p4de-odcr.yaml")
PREFIX = "jq-"
NLP, VISION = f"{PREFIX}nlp", f"{PREFIX}vision"
TIMEOUT_S = 120.0


FS = storage.FileSystemRef(
    file_system_id="fs-0123456789abcdef0",
    dns_name="fs-0123456789abcdef0.fsx.us-east-2.amazonaws.com",
    mount_name="abcdefgh",
)
"""A file system as the stack's outputs name it (nothing mounts it on kwok's nodes)."""


def _prefixed(obj: dict[str, Any]) -> dict[str, Any]:
    return prefix_queues(obj, PREFIX)


def _team_storage(cfg: Any) -> list[dict[str, Any]]:
    """What each team's namespace gets from the stack (``workloads.team``): its checkpoint
    volume of the file system bound to the claim the job mounts, and the ``hf-token`` Secret
    (``submit --team`` refuses a namespace without them, ``jobs.cluster.team_check``)."""
    return [
        o
        for t in cfg.teams
        for o in (*teams.storage_objects(t, cfg, FS), teams.hf_token_secret(t, "hf_test"))
    ]


def test_the_local_kueue_runs_the_stacks_configuration() -> None:
    cfg = operators.kueue_configuration(webhook_port=1, health_port=2, cert_dir=Path("/c"))
    stack = kueue.configuration()
    assert cfg["waitForPodsReady"] == stack["waitForPodsReady"]
    assert set(stack["integrations"]["frameworks"]) <= set(cfg["integrations"]["frameworks"])
    assert cfg["webhook"]["host"] == "127.0.0.1" and cfg["metrics"]["bindAddress"] == "0"


def test_a_second_job_waits_in_the_teams_queue_with_kueues_reason(
    control_plane: ControlPlane,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    root = tmp_path / "root"
    root.mkdir()
    shutil.copy(REPO / "Pulumi.yaml", root / "Pulumi.yaml")
    data = yaml.safe_load((REPO / f"Pulumi.{STACK}.yaml").read_text())
    data["config"]["eks-fsdp:teams"] = [
        {"name": NLP, "principalArns": ["arn:aws:iam::123456789012:role/n"], "quota": {STACK: 8}},
        {"name": VISION, "principalArns": ["arn:aws:iam::123456789012:role/v"]},
    ]
    (root / f"Pulumi.{STACK}.yaml").write_text(yaml.safe_dump(data))
    monkeypatch.setattr(sources, "REPO_ROOT", root)
    # The stack exports metrics: ``status`` would ask the cluster's Prometheus (none here), then
    # a worker's exporter through the API server's pod proxy, which dials the pod's IP; kwok's
    # pods have fake IPs that nothing serves (and dialling them leaves loopback), so progress
    # is left out here (jobs.cluster.metrics has its own tests against the fake API).
    from jobs.cluster import metrics as cluster_metrics

    monkeypatch.setattr(cluster_metrics, "prometheus_values", lambda *a, **kw: None)
    monkeypatch.setattr(cluster_metrics, "pod_values", lambda *a, **kw: {})
    cfg = load_stack_file(STACK, root)
    client = control_plane.client
    kubeconfig = str(control_plane.kubeconfig)
    team_objs = [
        _prefixed(o)
        for t in cfg.teams
        for o in teams.objects(t, cfg)
        if o["metadata"].get("namespace") != kueue.JOBS_NAMESPACE
    ]
    queues = [
        _prefixed(o)
        for o in kueue.cluster_objects(cfg)
        if o["metadata"].get("namespace") != kueue.JOBS_NAMESPACE
    ]
    local_queues = [o for o in team_objs if o["kind"] == "LocalQueue"]
    namespaced = [o for o in team_objs if o["kind"] != "LocalQueue"]

    def run(*argv: str) -> tuple[int, str, str]:
        code = cli.main([*argv, "--kubeconfig", kubeconfig, "-n", NLP])
        out, err = capsys.readouterr()
        return code, out, err

    def status(name: str) -> dict[str, Any]:
        code, out, err = run("status", name, "--json")
        assert code == 0, err
        return json.loads(out)  # type: ignore[no-any-return]

    def suspended(name: str) -> bool:
        job = client.find("kubeflow.org/v1", "PyTorchJob", name, NLP)
        return bool(job["spec"].get("runPolicy", {}).get("suspend"))

    storage_objs = _team_storage(cfg)
    try:
        control_plane.apply_all([*namespaced, *storage_objs, *queues, *local_queues])

        def active() -> bool:
            return all(
                any(
                    c["type"] == "Active" and c["status"] == "True"
                    for c in client.read(q).get("status", {}).get("conditions", [])
                )
                for q in [*queues, *local_queues]
                if q["kind"] in ("ClusterQueue", "LocalQueue")
            )

        wait_for("ClusterQueues and LocalQueues Active", active, timeout=TIMEOUT_S)
        submit = ("submit", P4DE, "--image", IMAGE, "--team", NLP)
        code, out, err = run(*submit, "--name", "jq-a")
        assert code == 0 and "namespace jq-nlp" in out, err
        wait_for("jq-a admitted", lambda: not suspended("jq-a"), timeout=TIMEOUT_S)
        wait_for(
            "jq-a's two pods running",
            lambda: status("jq-a")["ready"] == 2,
            timeout=TIMEOUT_S,
        )
        assert status("jq-a")["admission"] == "admitted"

        code, _, err = run(*submit, "--name", "jq-b", "--set", "workers=1")
        assert code == 0, err
        waiting = f"waiting for 8 GPUs in {PREFIX}{STACK}, 0 free"
        seen: list[dict[str, Any]] = []

        def queued() -> dict[str, Any] | None:
            seen.append(status("jq-b"))
            return seen[-1] if seen[-1]["admission_reason"] == waiting else None

        try:
            info = wait_for("jq-b queued with Kueue's reason", queued, timeout=TIMEOUT_S)
        except TimeoutError as err:
            last = {k: seen[-1][k] for k in ("phase", "queue", "admission", "admission_reason")}
            raise AssertionError(f"{err}; last status: {last}") from None
        assert info["admission"] == "queued" and info["queue"] == f"{STACK} (experiment)"
        assert suspended("jq-b")
        code, out, _ = run("list")
        rows = {line.split()[0]: line for line in out.splitlines()[1:]}
        assert out.splitlines()[0].split()[-1] == "QUEUE"
        assert rows["jq-a"].endswith("admitted") and rows["jq-b"].endswith(f"queued: {waiting}")

        code, out, err = run("suspend", "jq-a")
        assert code == 0 and "deactivated" in out, err
        wait_for("jq-a suspended", lambda: suspended("jq-a"), timeout=TIMEOUT_S)
        wait_for("jq-b admitted", lambda: not suspended("jq-b"), timeout=TIMEOUT_S)
        assert status("jq-a")["admission"] == "inactive"
        assert run("unsuspend", "jq-a")[0] == 0
        wait_for(
            "jq-a queued again",
            lambda: status("jq-a")["admission"] == "queued",
            timeout=TIMEOUT_S,
        )
    finally:
        for name in ("jq-a", "jq-b"):
            run("cancel", name, "--purge")
        delete_and_wait(client, [*namespaced, *storage_objs])
        for obj in reversed(queues):
            client.delete(obj)
