"""The policy pack's ``gpu-jobs-name-a-queue`` rule on the jobs the project makes.

The rule runs in the pack's own virtualenv (``.venv-tools``), so the jobs go through
``policy/offline.py`` as the engine would hand them over (a pulumi-kubernetes custom
resource's props are the object). Flagged: the builders' PyTorchJob of the p5-16 and
p4de-odcr examples (``workloads.specs``: no queue of its own) and a TrainJob asking for GPUs
per node with no label, and the dev example as the CLI sends it to a namespace without
queues (its g5 worker still asks for a GPU). Not flagged: the PyTorchJobs as ``eks-fsdp jobs
submit`` sends them to the jobs namespace (``jobs.queue.queued``: the pool's queue), a queued
TrainJob, and a job whose pods ask for no GPU. The rule's label key is Kueue's, the one the specs use.

If this fails, the rule would let a GPU job bypass every quota, flag what the job CLI submits
(making the pack useless for jobs), or drift from the label Kueue reads.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from jobs import manifest, queue
from jobs import schema as jobfile
from jobs.build import build
from workloads.specs import kueue

REPO = Path(__file__).resolve().parents[2]
TOOLS_PYTHON = REPO / ".venv-tools" / "bin" / "python"
OFFLINE = REPO / "policy" / "offline.py"
IMAGE = "123456789012.dkr.ecr.us-east-1.amazonaws.com/eks-fsdp:sha-1"
RULE = "gpu-jobs-name-a-queue"


def _resource(obj: dict[str, Any]) -> dict[str, Any]:
    group_version = obj["apiVersion"]
    type_ = f"kubernetes:{group_version}:{obj['kind']}"
    name = obj["metadata"]["name"]
    return {
        "type": type_,
        "name": name,
        "urn": f"urn:pulumi:jobs::eks-fsdp::{type_}::{name}",
        "props": obj,
        "propertyDependencies": {},
    }


def _flagged(objs: list[dict[str, Any]], tmp_path: Path) -> list[str]:
    """Names of the objects the rule flags (every other rule's findings must be none)."""
    if not TOOLS_PYTHON.is_file():
        pytest.fail(".venv-tools is missing: run `make setup` (it installs requirements-tools.txt)")
    path = tmp_path / "resources.json"
    path.write_text(json.dumps([_resource(o) for o in objs]))
    out = subprocess.run(
        [str(TOOLS_PYTHON), str(OFFLINE), str(path), "--today", "2026-11-30"],
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
    )
    found = json.loads(out.stdout)
    assert {v["policy"] for v in found} <= {RULE}, found
    return sorted(v["urn"].rsplit("::", 1)[1] for v in found)


def _job(example: str, *sets: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The builders' PyTorchJob of ``jobs/examples/<example>.yaml`` and the one the job CLI
    sends (with its queue)."""
    job = jobfile.load(REPO / "jobs" / "examples" / f"{example}.yaml", sets=list(sets))
    w = build(job, image=IMAGE)
    built = manifest.pytorchjob(w.job, w.etcd.host)
    sent = queue.queued(
        manifest.pytorchjob(w.job, w.etcd.host),
        job.queue,
        pod_template_paths=queue.pytorchjob_templates,
    )
    return built, sent


def _cpu_only(job: dict[str, Any]) -> dict[str, Any]:
    """``job`` with every GPU request taken out (a job on CPU nodes), unqueued."""
    out = json.loads(json.dumps(job))
    out["metadata"]["name"] = "cpu-only"
    for replica in out["spec"]["pytorchReplicaSpecs"].values():
        for c in replica["template"]["spec"]["containers"]:
            for kind in ("limits", "requests"):
                c["resources"].get(kind, {}).pop("nvidia.com/gpu", None)
    return out


def _trainjob(labels: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": "v2-" + ("queued" if labels else "bare"), "labels": labels},
        "spec": {
            "runtimeRef": {"name": "torch-distributed"},
            "trainer": {"numNodes": 2, "resourcesPerNode": {"limits": {"nvidia.com/gpu": "8"}}},
        },
    }


def test_unqueued_gpu_jobs_are_flagged_and_what_the_cli_sends_is_not(tmp_path: Path) -> None:
    p5_built, p5_sent = _job("p5-16")
    p4_built, p4_sent = _job("p4de-odcr", "name=p4de-job")
    dev_built, dev_sent = _job("dev", "namespace=lab")
    p5_pool = jobfile.load(REPO / "jobs" / "examples" / "p5-16.yaml").node_group
    assert p5_sent["metadata"]["labels"][queue.QUEUE_LABEL] == p5_pool
    assert dev_sent == dev_built  # no team, a namespace without queues: no queue
    objs = [
        p5_built,
        {**p4_built, "metadata": {**p4_built["metadata"], "name": "p4de-unqueued"}},
        _trainjob({}),
        {**p5_sent, "metadata": {**p5_sent["metadata"], "name": "p5-sent"}},
        p4_sent,
        {**dev_sent, "metadata": {**dev_sent["metadata"], "name": "dev-lab"}},
        _trainjob({queue.QUEUE_LABEL: "p5-block"}),
        _cpu_only(p4_built),
    ]
    assert _flagged(objs, tmp_path) == sorted(
        [p5_built["metadata"]["name"], "p4de-unqueued", "dev-lab", "v2-bare"]
    )


def test_the_rule_reads_kueues_label() -> None:
    text = (REPO / "policy" / "rules.py").read_text()
    assert f'QUEUE_LABEL = "{kueue.QUEUE_LABEL}"' in text
    assert queue.QUEUE_LABEL == kueue.QUEUE_LABEL and queue.PRIORITY_LABEL == kueue.PRIORITY_LABEL


def test_the_checkov_gate_sees_the_team_and_queue_objects() -> None:
    """``workloads.scan`` writes every team's objects (an example team's on a stack without
    teams) and Kueue's queues next to the rest, so checkov's gate (tests/security) scans the
    Role, ServiceAccount and NetworkPolicies a team gets."""
    from workloads import scan

    files = scan.stack_objects("p5-16")
    kinds = {(o["kind"], o["metadata"]["name"]) for o in files["teams"]}
    assert {
        ("Role", "job-submitter"),
        ("ServiceAccount", "jobs"),
        ("Namespace", "example"),
    } <= kinds
    assert {o["kind"] for o in files["kueue"]} >= {"ClusterQueue", "LocalQueue", "ResourceFlavor"}
