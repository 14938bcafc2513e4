"""A job on an ``efa: dra`` pool gets its ``<job>-efa`` ResourceClaimTemplate on every
generation: ``resume`` and ``submit --replace`` meet the previous generation's template.

If this fails, ``resume`` of a DRA job (or ``submit --replace``) would stop with 409
AlreadyExists whenever the garbage collector had not yet removed the old job's template (it
does so asynchronously after a background-propagation delete: ``DeletePropagationBackground``,
k8s.io/apimachinery ``pkg/apis/meta/v1/types.go``), or the new workers would keep a template
owned by the deleted job, which the collector then removes under them; or a template that is
not a leftover of this job would be deleted.

No API server runs in this lane: the requests go over real HTTP to ``FakeKube``
(``tests/jobs/fake_kube.py``), taught here to serve ``resource.k8s.io/v1``
``resourceclaimtemplates`` like its other resources, with its garbage collector deferred
(``deferred_gc``) as the controller manager's is. The job file is the p4de-odcr example on a
copy of that stack whose GPU group says ``efa: dra``.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.jobs.fake_kube import FakeKube, run_cli

REPO = Path(__file__).resolve().parents[2]
STACK = "p4de-odcr"
JOB_FILE = str(REPO / "jobs" / "examples" / f"{STACK}.yaml")
NAME = "llama2-13b-samsum"
IMAGE = "123456789012.dkr.ecr.us-east-1.amazonaws.com/eks-fsdp-p4de-odcr-training:sha-1"
TEMPLATES = "resourceclaimtemplates"
TEMPLATE = f"{NAME}-efa"  # workloads.specs.efa.claim_template_name


@pytest.fixture
def kube(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[FakeKube, str]]:
    from infra.config import sources

    root = tmp_path / "root"
    root.mkdir()
    shutil.copy(REPO / "Pulumi.yaml", root / "Pulumi.yaml")
    data = yaml.safe_load((REPO / f"Pulumi.{STACK}.yaml").read_text())
    for group in data["config"]["eks-fsdp:gpuNodeGroups"]:
        group["efa"] = "dra"
    (root / f"Pulumi.{STACK}.yaml").write_text(yaml.safe_dump(data))
    monkeypatch.setattr(sources, "REPO_ROOT", root)  # job files and records bind to it
    fake = FakeKube().start()
    fake.deferred_gc = True
    try:
        yield fake, str(fake.kubeconfig(tmp_path / "kubeconfig"))
    finally:
        fake.stop()


def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    return run_cli(capsys, *argv)


def _owner_uid(obj: dict[str, Any]) -> list[str]:
    return [o["uid"] for o in obj["metadata"].get("ownerReferences") or []]


def test_resume_and_replace_take_over_the_old_jobs_template(
    kube: tuple[FakeKube, str], capsys: pytest.CaptureFixture[str]
) -> None:
    fake, kubeconfig = kube
    submit = ("submit", JOB_FILE, "--kubeconfig", kubeconfig, "--image", IMAGE)
    code, _, err = _cli(capsys, *submit)
    assert code == 0, err
    first = fake.get("pytorchjobs", NAME)
    template = fake.get(TEMPLATES, TEMPLATE)
    assert first is not None and template is not None
    assert _owner_uid(template) == [first["metadata"]["uid"]]
    assert template["spec"]["spec"]["devices"]["requests"][0]["exactly"]["count"] == 4  # p4de

    code, _, err = _cli(capsys, "cancel", NAME, "--kubeconfig", kubeconfig)
    assert code == 0, err
    assert fake.get("pytorchjobs", NAME) is None
    assert fake.get(TEMPLATES, TEMPLATE) is not None  # not collected yet

    code, out, err = _cli(capsys, "resume", NAME, "--kubeconfig", kubeconfig)
    assert code == 0, err
    assert "generation 2" in out
    second = fake.get("pytorchjobs", NAME)
    assert second is not None and second["metadata"]["uid"] != first["metadata"]["uid"]
    (template,) = fake.of(TEMPLATES)
    assert _owner_uid(template) == [second["metadata"]["uid"]]
    fake.collect()  # the collector's late pass over the first job takes nothing of the second
    assert fake.get(TEMPLATES, TEMPLATE) is not None

    second["status"] = {  # the operator's shape: the job failed (only then is it replaced)
        "conditions": [
            {
                "type": "Failed",
                "status": "True",
                "reason": "PyTorchJobFailed",
                "message": f"PyTorchJob default/{NAME} has failed because 1 Worker replica(s) "
                "failed.",
            }
        ]
    }
    code, _, err = _cli(capsys, *submit, "--replace")
    assert code == 0, err
    third = fake.get("pytorchjobs", NAME)
    assert third is not None and third["metadata"]["uid"] != second["metadata"]["uid"]
    (template,) = fake.of(TEMPLATES)
    assert _owner_uid(template) == [third["metadata"]["uid"]]


def test_a_template_that_is_not_a_leftover_is_left_alone(
    kube: tuple[FakeKube, str], capsys: pytest.CaptureFixture[str]
) -> None:
    fake, kubeconfig = kube
    mine = fake.put(
        TEMPLATES,
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaimTemplate",
            "metadata": {"name": TEMPLATE},
            "spec": {"spec": {"devices": {"requests": []}}},
        },
    )
    code, _, err = _cli(capsys, "submit", JOB_FILE, "--kubeconfig", kubeconfig, "--image", IMAGE)
    assert code == 1 and err.count("\n") == 1
    assert f"create resourceclaimtemplate {TEMPLATE}: one of that name exists in default" in err
    assert fake.get(TEMPLATES, TEMPLATE) is mine  # untouched
    assert fake.get("pytorchjobs", NAME) is None  # nothing half-made is left behind
