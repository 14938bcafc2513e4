"""``eks-fsdp jobs data put|get``: a dataset onto the cluster's claim and results off it.

If this fails: the copy pod is no longer a valid Kubernetes 1.35 Pod (strict schema,
kubernetes-validate), stops mounting the claim where the jobs mount it, runs with a
service-account token or privilege escalation, is left behind after a failed copy, copies to a
path outside the claim, or a missing local file no longer stops with one line before any
request. What is replaced and why: ``kubectl`` itself is replaced by a recorder of its argv
(``copy``'s ``run``), because copying needs a kubelet running the pod's container, which no
control plane here has; the argv are the ones kubectl documents (``kubectl cp
NAMESPACE/POD:PATH``, ``kubectl wait --for=condition=Ready``).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import pytest

from infra.versions import KUBERNETES_VERSION
from jobs.cli import main
from jobs.cluster.data import DATA_DIR, MOUNT, cluster_path, copy, pod
from jobs.types import JobsError
from workloads.specs.validate import validate


class Recorder:
    """Records kubectl's argv; ``fail_on`` makes that verb fail as kubectl would."""

    def __init__(self, fail_on: str | None = None) -> None:
        self.calls: list[list[str]] = []
        self.manifests: list[dict] = []
        self.fail_on = fail_on

    def __call__(self, argv: Sequence[str], stdin: str | None) -> str:
        self.calls.append(list(argv))
        if stdin is not None:
            self.manifests.append(json.loads(stdin))
        if argv[0] == self.fail_on:
            raise JobsError(f"kubectl {argv[0]}: error: simulated")
        return ""


def test_copy_pod_is_valid_and_mounts_the_claim_where_jobs_do() -> None:
    obj = pod("eks-fsdp-data-test", "default", "fsx-checkpoints")
    validate(obj, KUBERNETES_VERSION)
    spec = obj["spec"]
    (container,) = spec["containers"]
    assert container["volumeMounts"] == [{"name": "claim", "mountPath": "/checkpoints"}]
    assert spec["volumes"][0]["persistentVolumeClaim"] == {"claimName": "fsx-checkpoints"}
    assert spec["automountServiceAccountToken"] is False
    assert container["securityContext"]["allowPrivilegeEscalation"] is False


def test_put_copies_into_the_claim_and_deletes_the_pod(tmp_path: Path) -> None:
    data = tmp_path / "train.jsonl"
    data.write_text('{"text": "hello"}\n')
    rec = Recorder()
    remote = copy(
        "put",
        str(data),
        str(DATA_DIR / "train.jsonl"),
        namespace="default",
        claim="fsx-checkpoints",
        run=rec,
        suffix="t1",
    )
    assert remote == "/checkpoints/data/train.jsonl"
    verbs = [c[0] for c in rec.calls]
    assert verbs == ["apply", "wait", "exec", "cp", "delete"]
    assert rec.calls[3] == [
        "cp",
        str(data),
        "default/eks-fsdp-data-t1:/checkpoints/data/train.jsonl",
        "-c",
        "copy",
    ]
    assert rec.manifests[0]["metadata"]["name"] == "eks-fsdp-data-t1"


def test_a_failed_copy_still_deletes_the_pod(tmp_path: Path) -> None:
    rec = Recorder(fail_on="cp")
    with pytest.raises(JobsError, match="kubectl cp: error: simulated"):
        copy(
            "get",
            "/checkpoints/job/export",
            str(tmp_path / "export"),
            namespace="team-a",
            claim="fsx-checkpoints",
            run=rec,
        )
    assert rec.calls[-1][:2] == ["delete", "pod"] and "team-a" in rec.calls[-1]


@pytest.mark.parametrize(
    "path", ["data/train.jsonl", "/tmp/x", "/checkpoints/../etc", "/checkpoints"]
)
def test_paths_outside_the_claim_are_refused(path: str) -> None:
    with pytest.raises(JobsError, match=f"not a path on the claim \\(under {MOUNT}/\\)"):
        cluster_path(path)


def test_a_missing_local_file_stops_before_any_request(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["data", "put", "no-such-file.jsonl", "--kubeconfig", "unused"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no-such-file.jsonl: no such file or folder here" in err[0]
