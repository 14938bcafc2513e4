"""``Etcd``: the rendezvous server of the training jobs (wraps ``workloads.specs.etcd``)."""

from __future__ import annotations

from dataclasses import dataclass

import pulumi

from workloads.k8s_objects import apply_object
from workloads.specs import etcd as spec
from workloads.specs.settings import EtcdSettings

TYPE_TOKEN = "eks-fsdp:workloads:Etcd"


@dataclass(frozen=True, kw_only=True)
class EtcdArgs:
    """Arguments of ``Etcd``."""

    settings: EtcdSettings
    """The etcd settings (image pinned to 3.5.x, ports, storage, allowed jobs)."""

    def __post_init__(self) -> None:
        if not isinstance(self.settings, EtcdSettings):
            raise ValueError("EtcdArgs.settings: expected an EtcdSettings")


class Etcd(pulumi.ComponentResource):
    """etcd Deployment, client Service, NetworkPolicy (and PVC) in the job's namespace."""

    host: pulumi.Output[str]
    """Cluster DNS name of the client Service."""
    port: pulumi.Output[int]
    """Client port."""

    def __init__(self, name: str, args: EtcdArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__(TYPE_TOKEN, name, {}, opts)
        child = pulumi.ResourceOptions(parent=self)
        self.resources = [apply_object(name, obj, child) for obj in spec.objects(args.settings)]
        self.host = pulumi.Output.from_input(args.settings.host)
        self.port = pulumi.Output.from_input(args.settings.client_port)
        self.register_outputs({"host": self.host, "port": self.port})
