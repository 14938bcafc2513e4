"""``Observability``: Prometheus, Grafana and the DCGM exporter, wrapping the pure specs.

Children: the monitoring Namespace, the gp3 StorageClass of Prometheus' claim, the Grafana
admin Secret (password from the ``grafanaAdminPassword`` secret config, kept secret), the
alert receiver's Secret (``alertsSecret``, kept secret; receivers slack, pagerduty, webhook:
Alertmanager mounts it and reads it through ``*_file``), the dashboard ConfigMap (label
``grafana_dashboard: "1"``), and two Helm releases with pinned charts (``infra.versions``):
kube-prometheus-stack (our scrape jobs and alert rules in its values) and dcgm-exporter (GPU nodes
only). Services stay ClusterIP; ``port_forward`` holds the kubectl commands to reach them, which
the program exports as ``observability``. The Kubernetes provider comes in through ``opts``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from infra import versions
from infra.config import StackConfig
from workloads.specs import observability as spec

TYPE_TOKEN = "eks-fsdp:workloads:Observability"
OUTPUT_KEY = "observability"
"""Stack output: ``{"grafana": <port-forward command>, "prometheus": ..., "namespace": ...}``."""
KPS_RELEASE_TIMEOUT_S = 900
"""kube-prometheus-stack installs CRDs, an operator and three StatefulSets: give it 15 min."""


@dataclass(frozen=True, kw_only=True)
class ObservabilityArgs:
    """Arguments of ``Observability``."""

    settings: spec.ObservabilitySettings = field(default_factory=spec.ObservabilitySettings)
    """Namespace, DCGM switch, release name, tolerations, thresholds (see the spec module)."""
    grafana_admin_password: Any = None
    """Grafana admin password: a secret ``Output[str]`` from ``grafanaAdminPassword``."""
    alerts_secret: Any = None
    """The alert receiver's URL or routing key: a secret ``Output[str]`` from ``alertsSecret``
    (receivers slack, pagerduty, webhook; None otherwise)."""
    release_after: tuple[pulumi.Resource, ...] = ()
    """Resources kube-prometheus-stack waits for: the Alertmanager's Pod Identity association
    (receiver sns), which must exist before its pods start for the credentials to be injected."""

    def __post_init__(self) -> None:
        if self.grafana_admin_password is None:
            raise ValueError(
                "grafanaAdminPassword: not set; run "
                "'pulumi config set --secret grafanaAdminPassword <password>'"
            )
        if self.settings.alert_receiver in spec.SECRET_RECEIVERS and self.alerts_secret is None:
            raise ValueError(
                f"alertsSecret: not set but receiver {self.settings.alert_receiver} reads it; run "
                "'pulumi config set --secret alertsSecret <url or key>'"
            )

    @classmethod
    def from_stack(
        cls, cfg: StackConfig, release_after: tuple[pulumi.Resource, ...] = ()
    ) -> ObservabilityArgs:
        """Args from the stack config (settings as ``spec.settings_from_stack``)."""
        settings = spec.settings_from_stack(cfg)
        alerts = (
            cfg.secrets.alerts_secret if settings.alert_receiver in spec.SECRET_RECEIVERS else None
        )
        return cls(
            settings=settings,
            grafana_admin_password=cfg.secrets.grafana_admin_password,
            alerts_secret=alerts,
            release_after=release_after,
        )


def _meta(obj: dict[str, Any]) -> k8s.meta.v1.ObjectMetaArgs:
    m = obj["metadata"]
    return k8s.meta.v1.ObjectMetaArgs(
        name=m["name"], namespace=m.get("namespace"), labels=m.get("labels")
    )


class Observability(pulumi.ComponentResource):
    """Prometheus + Grafana (kube-prometheus-stack), dcgm-exporter and the eks-fsdp dashboard."""

    namespace: k8s.core.v1.Namespace
    """The monitoring namespace."""
    grafana_admin: k8s.core.v1.Secret
    """Grafana admin credentials."""
    alerts_secret: k8s.core.v1.Secret | None
    """The alert receiver's URL or key (None for receivers none and sns)."""
    dashboard: k8s.core.v1.ConfigMap
    """The dashboard ConfigMap the Grafana sidecar loads."""
    storage_class: k8s.storage.v1.StorageClass
    """gp3 StorageClass of Prometheus' PersistentVolumeClaim."""
    prometheus_stack: k8s.helm.v3.Release
    """kube-prometheus-stack release."""
    dcgm_exporter: k8s.helm.v3.Release | None
    """dcgm-exporter release (None when DCGM is off)."""
    port_forward: dict[str, str]
    """kubectl port-forward commands for Grafana and Prometheus, plus the namespace."""

    def __init__(
        self, name: str, args: ObservabilityArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__(TYPE_TOKEN, name, {}, opts)
        s = args.settings
        child = pulumi.ResourceOptions(parent=self)

        ns = spec.namespace(s)
        self.namespace = k8s.core.v1.Namespace(f"{name}-namespace", metadata=_meta(ns), opts=child)
        in_ns = pulumi.ResourceOptions(parent=self, depends_on=[self.namespace])

        secret_opts = pulumi.ResourceOptions.merge(
            in_ns, pulumi.ResourceOptions(additional_secret_outputs=["stringData", "data"])
        )
        secret = spec.grafana_admin_secret(s, pulumi.Output.secret(args.grafana_admin_password))
        self.grafana_admin = k8s.core.v1.Secret(
            f"{name}-grafana-admin",
            metadata=_meta(secret),
            type=secret["type"],
            string_data=secret["stringData"],
            opts=secret_opts,
        )
        self.alerts_secret = None
        if s.alert_receiver in spec.SECRET_RECEIVERS:
            alerts = spec.alerts_secret(s, pulumi.Output.secret(args.alerts_secret))
            self.alerts_secret = k8s.core.v1.Secret(
                f"{name}-alerts-secret",
                metadata=_meta(alerts),
                type=alerts["type"],
                string_data=alerts["stringData"],
                opts=secret_opts,
            )
        sc = spec.storage_class(s)
        self.storage_class = k8s.storage.v1.StorageClass(
            f"{name}-storage-class",
            metadata=k8s.meta.v1.ObjectMetaArgs(name=sc["metadata"]["name"]),
            provisioner=sc["provisioner"],
            parameters=sc["parameters"],
            reclaim_policy=sc["reclaimPolicy"],
            volume_binding_mode=sc["volumeBindingMode"],
            allow_volume_expansion=sc["allowVolumeExpansion"],
            opts=child,
        )
        cm = spec.dashboard_configmap(s)
        self.dashboard = k8s.core.v1.ConfigMap(
            f"{name}-dashboard", metadata=_meta(cm), data=cm["data"], opts=in_ns
        )
        self.prometheus_stack = k8s.helm.v3.Release(
            f"{name}-kube-prometheus-stack",
            name=s.release,
            chart=versions.KUBE_PROMETHEUS_STACK_CHART,
            version=versions.KUBE_PROMETHEUS_STACK_VERSION,
            repository_opts=k8s.helm.v3.RepositoryOptsArgs(
                repo=versions.KUBE_PROMETHEUS_STACK_REPO
            ),
            namespace=s.namespace,
            values=spec.kube_prometheus_stack_values(s),
            timeout=KPS_RELEASE_TIMEOUT_S,
            opts=pulumi.ResourceOptions(
                parent=self,
                depends_on=[
                    self.namespace,
                    self.grafana_admin,
                    self.storage_class,
                    *([self.alerts_secret] if self.alerts_secret is not None else []),
                    *args.release_after,
                ],
            ),
        )
        self.dcgm_exporter = None
        if s.dcgm:
            self.dcgm_exporter = k8s.helm.v3.Release(
                f"{name}-dcgm-exporter",
                name="dcgm-exporter",
                chart=versions.DCGM_EXPORTER_CHART,
                version=versions.DCGM_EXPORTER_VERSION,
                repository_opts=k8s.helm.v3.RepositoryOptsArgs(repo=versions.DCGM_EXPORTER_REPO),
                namespace=s.namespace,
                values=spec.dcgm_exporter_values(s),
                opts=in_ns,
            )
        self.port_forward = {**spec.port_forward_commands(s), "namespace": s.namespace}
        self.register_outputs(
            {
                "namespace": s.namespace,
                "portForward": self.port_forward,
                "prometheusStack": self.prometheus_stack.status,
                "dcgmExporter": self.dcgm_exporter.status if self.dcgm_exporter else None,
            }
        )
