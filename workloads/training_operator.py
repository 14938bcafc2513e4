"""``TrainingOperator``: the Kubeflow training operator, from its upstream overlay at a pinned tag.

The component applies ``workloads/manifests/training-operator`` (a kustomization whose only
resource is the upstream standalone overlay ``?ref=<tag>``, with the operator image pinned; the
file is written from ``workloads.specs.operator`` and a test keeps the two equal) through
pulumi-kubernetes' kustomize support, which fetches the remote base at ``pulumi up``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pulumi
import pulumi_kubernetes as k8s

from workloads.specs.settings import OperatorSettings

TYPE_TOKEN = "eks-fsdp:workloads:TrainingOperator"
MANIFEST_DIR = Path(__file__).resolve().parent / "manifests" / "training-operator"


@dataclass(frozen=True, kw_only=True)
class TrainingOperatorArgs:
    """Arguments of ``TrainingOperator``."""

    settings: OperatorSettings
    """Release, overlay URL and image pin (the defaults come from ``infra.versions``)."""
    directory: Path = MANIFEST_DIR
    """Kustomization directory applied (must hold a kustomization.yaml)."""

    def __post_init__(self) -> None:
        if not (self.directory / "kustomization.yaml").is_file():
            raise ValueError(
                f"TrainingOperatorArgs.directory: no kustomization.yaml in {self.directory}"
            )


class TrainingOperator(pulumi.ComponentResource):
    """CRDs (PyTorchJob, ...), RBAC and the operator Deployment in namespace ``kubeflow``."""

    version: pulumi.Output[str]
    """Operator release installed."""

    def __init__(
        self, name: str, args: TrainingOperatorArgs, opts: pulumi.ResourceOptions | None = None
    ):
        super().__init__(TYPE_TOKEN, name, {}, opts)
        self.install = k8s.kustomize.v2.Directory(
            f"{name}-install",
            directory=str(args.directory),
            opts=pulumi.ResourceOptions(parent=self),
        )
        self.version = pulumi.Output.from_input(args.settings.version)
        self.register_outputs({"version": self.version})
