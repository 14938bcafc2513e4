"""The training operator's image pin names an image the upstream overlay really uses.

Nothing is mocked. kustomize's ``images:`` entry rewrites only images whose name equals its
``name``; the v1.9.4 base Deployment (kubeflow/trainer manifests/base/deployment.yaml) runs
``ghcr.io/kubeflow/training-v1/training-operator`` and the standalone overlay pins it to
``v1-93c5489``, so the old override ``kubeflow/training-operator`` matched nothing. Building the
kustomization offline over a checkout of kubeflow/trainer at v1.9.4 (``kubectl kustomize``
v5.5.0 and ``workloads.specs.operator.build_objects`` agree) gives exactly
``ghcr.io/kubeflow/training-v1/training-operator:v1-93c5489``; with the old name it gives the
same image with the override ignored.

The tests build a miniature of that layout (base Deployment, overlay with its own ``images:``,
ours on top) with the project's resolver and, where ``kubectl`` is installed, with
``kubectl kustomize`` too, so the resolver is held to kustomize's behaviour; with
``TRAINING_OPERATOR_CHECKOUT`` pointing at a kubeflow/trainer checkout of the pinned tag they
also build the real thing. If they fail, the install would ship an image nobody pinned.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from infra import versions
from workloads.specs import operator
from workloads.specs.settings import OperatorSettings

BASE_IMAGE = versions.TRAINING_OPERATOR_IMAGE_NAME


def _tree(root: Path, our_name: str, our_tag: str) -> Path:
    """base/ (Deployment), overlay/ (pins its own tag), ours/ (our override on the overlay)."""
    (root / "base").mkdir(parents=True)
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "training-operator"},
        "spec": {
            "selector": {"matchLabels": {"app": "op"}},
            "template": {
                "metadata": {"labels": {"app": "op"}},
                "spec": {"containers": [{"name": "op", "image": BASE_IMAGE}]},
            },
        },
    }
    (root / "base" / "deployment.yaml").write_text(yaml.safe_dump(deployment))
    (root / "base" / "kustomization.yaml").write_text(
        yaml.safe_dump({"resources": ["deployment.yaml"]})
    )
    (root / "overlay").mkdir()
    (root / "overlay" / "kustomization.yaml").write_text(
        yaml.safe_dump(
            {"resources": ["../base"], "images": [{"name": BASE_IMAGE, "newTag": "overlay-tag"}]}
        )
    )
    (root / "ours").mkdir()
    (root / "ours" / "kustomization.yaml").write_text(
        yaml.safe_dump(
            {"resources": ["../overlay"], "images": [{"name": our_name, "newTag": our_tag}]}
        )
    )
    return root / "ours"


def _kubectl_images(directory: Path) -> set[str]:
    out = subprocess.run(
        ["kubectl", "kustomize", str(directory)], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    return operator.workload_images(list(yaml.safe_load_all(out.stdout)))


@pytest.mark.parametrize(
    ("our_name", "expected"),
    [
        (BASE_IMAGE, f"{BASE_IMAGE}:ours"),  # the name the base uses: our tag ships
        ("kubeflow/training-operator", f"{BASE_IMAGE}:overlay-tag"),  # matches nothing
    ],
)
def test_an_override_applies_only_under_the_base_image_name(
    tmp_path: Path, our_name: str, expected: str
) -> None:
    ours = _tree(tmp_path, our_name, "ours")
    assert operator.workload_images(operator.build_objects(ours)) == {expected}
    if shutil.which("kubectl"):
        assert _kubectl_images(ours) == {expected}


def test_the_pin_is_the_image_the_release_ships() -> None:
    s = OperatorSettings()
    (entry,) = operator.kustomization(s)["images"]
    assert entry == {"name": BASE_IMAGE, "newTag": versions.TRAINING_OPERATOR_IMAGE_TAG}
    assert f"{BASE_IMAGE}:v1-93c5489" == versions.TRAINING_OPERATOR_IMAGE
    assert s.kustomize_url.endswith(f"?ref={versions.TRAINING_OPERATOR_VERSION}")


@pytest.mark.skipif(
    not os.environ.get("TRAINING_OPERATOR_CHECKOUT"),
    reason="set TRAINING_OPERATOR_CHECKOUT to a kubeflow/trainer checkout of the pinned tag",
)
def test_the_committed_kustomization_over_the_real_overlay() -> None:
    checkout = Path(os.environ["TRAINING_OPERATOR_CHECKOUT"])
    s = OperatorSettings()
    remotes = {s.kustomize_url: checkout / "manifests" / "overlays" / "standalone"}
    ours = Path(__file__).resolve().parents[2] / "workloads" / "manifests" / "training-operator"
    images = operator.workload_images(operator.build_objects(ours, remotes))
    assert images == {versions.TRAINING_OPERATOR_IMAGE}
