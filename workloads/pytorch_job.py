"""``PyTorchJob``: the fine-tuning job as a Kubeflow custom resource (wraps
``workloads.specs.pytorchjob``), plus the Secret carrying the Hugging Face token.

The token comes from the stack's secret config (``hfToken``) and reaches the pods only through
the Secret and a ``secretKeyRef``; it never appears in the job object. The job is replaced
(deleted, then created) when its spec changes: a PyTorchJob does not restart on update, and the
rendezvous id changes with the spec so the new workers never meet the old rendezvous.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from workloads.k8s_objects import apply_object
from workloads.specs import pytorchjob as spec
from workloads.specs.observability import ObservabilitySettings
from workloads.specs.settings import HF_TOKEN_KEY, JobSettings

TYPE_TOKEN = "eks-fsdp:workloads:PyTorchJob"


@dataclass(frozen=True, kw_only=True)
class PyTorchJobArgs:
    """Arguments of ``PyTorchJob``."""

    settings: JobSettings
    """The job; ``settings.image`` is replaced by ``image`` once it is known."""
    image: pulumi.Input[str]
    """Training image reference (the built image's Output, or the stack's pinned image)."""
    etcd_host: str
    """Cluster DNS name of the etcd Service (rdzvHost for the etcd backends)."""
    hf_token: pulumi.Input[str] | None = None
    """Hugging Face token (a secret Output); None = no Secret is created."""
    depends_on: list[pulumi.Resource] = field(default_factory=list)
    """Resources the job waits for (the operator's CRDs, etcd)."""

    def __post_init__(self) -> None:
        if not isinstance(self.settings, JobSettings):
            raise ValueError("PyTorchJobArgs.settings: expected a JobSettings")
        if not self.etcd_host and self.settings.uses_etcd and not self.settings.rdzv_host:
            raise ValueError("PyTorchJobArgs.etcd_host: required for the etcd backends")


class PyTorchJob(pulumi.ComponentResource):
    """The PyTorchJob custom resource (and its token Secret)."""

    job_name: pulumi.Output[str]
    """PyTorchJob name."""
    rdzv_id: pulumi.Output[str]
    """Rendezvous id of this generation of the job."""

    def __init__(self, name: str, args: PyTorchJobArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__(TYPE_TOKEN, name, {}, opts)
        s = args.settings
        self.secret: k8s.core.v1.Secret | None = None
        if args.hf_token is not None and s.hf_token_secret:
            self.secret = k8s.core.v1.Secret(
                f"{name}-hf-token",
                metadata={"name": s.hf_token_secret, "namespace": s.namespace},
                type="Opaque",
                string_data={HF_TOKEN_KEY: pulumi.Output.secret(args.hf_token)},
                opts=pulumi.ResourceOptions(parent=self),
            )
        job = pulumi.Output.from_input(args.image).apply(
            lambda ref: spec.pytorchjob(s.replace(image=ref), args.etcd_host)
        )

        def part(key: str) -> pulumi.Output[Any]:
            return job.apply(lambda j: j[key])

        depends = [*args.depends_on, *([self.secret] if self.secret else [])]
        self.job = k8s.apiextensions.CustomResource(
            f"{name}-job",
            api_version=spec.API_VERSION,
            kind=spec.KIND,
            metadata=part("metadata"),
            spec=part("spec"),
            opts=pulumi.ResourceOptions(
                parent=self,
                depends_on=depends,
                replace_on_changes=["spec"],
                delete_before_replace=True,
            ),
        )
        # Ingress to the workers only from the job's own pods (and the metrics scraper).
        metrics_namespace = ObservabilitySettings().namespace if s.metrics_port else None
        self.network_policy = apply_object(
            name,
            spec.network_policy(s, metrics_namespace),
            pulumi.ResourceOptions(parent=self),
        )
        self.job_name = pulumi.Output.from_input(s.name)
        self.rdzv_id = job.apply(lambda j: j["spec"]["elasticPolicy"]["rdzvId"])
        self.register_outputs({"job_name": self.job_name, "rdzv_id": self.rdzv_id})
