"""``TrainerV2``: Kubeflow Trainer v2 (controller, CRDs, JobSet) and the project's torch
``ClusterTrainingRuntime``, from the upstream manager overlay at the pinned tag.

The component applies ``workloads/manifests/trainer`` (a kustomization of the overlay
``?ref=TRAINER_V2_VERSION`` and ``runtime.yaml``; both written from
``workloads.specs.trainjob`` and kept equal by a test) through pulumi-kubernetes' kustomize
support, which fetches the remote base at ``pulumi up``, as ``TrainingOperator`` does for v1.
Opt-in per stack: only ``api: v2`` job files need it, and it brings CRDs, a second controller
and JobSet the stack otherwise lacks. The runtime is a custom resource of the CRDs the overlay
installs: on a first ``up`` it may need a second run if the API server has not served the
CRDs yet (pulumi-kubernetes applies a kustomization's objects without ordering CRDs first).
"""

from __future__ import annotations

from pathlib import Path

import pulumi
import pulumi_kubernetes as k8s

from infra import versions
from workloads.specs import trainjob

TYPE_TOKEN = "eks-fsdp:workloads:TrainerV2"


class TrainerV2(pulumi.ComponentResource):
    """Trainer v2 in ``kubeflow-system`` and the ``eks-fsdp-torch`` runtime."""

    version: pulumi.Output[str]
    runtime: pulumi.Output[str]

    def __init__(
        self,
        name: str,
        directory: Path = trainjob.MANIFEST_DIR,
        opts: pulumi.ResourceOptions | None = None,
    ):
        super().__init__(TYPE_TOKEN, name, {}, opts)
        if not (directory / "kustomization.yaml").is_file():
            raise ValueError(f"TrainerV2: no kustomization.yaml in {directory}")
        self.install = k8s.kustomize.v2.Directory(
            f"{name}-install", directory=str(directory), opts=pulumi.ResourceOptions(parent=self)
        )
        self.version = pulumi.Output.from_input(versions.TRAINER_V2_VERSION)
        self.runtime = pulumi.Output.from_input(trainjob.RUNTIME)
        self.register_outputs({"version": self.version, "runtime": self.runtime})
