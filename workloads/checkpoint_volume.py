"""``CheckpointVolume``: the FSx PersistentVolume and the claim the PyTorchJob mounts (wraps
``workloads.specs.storage``).

The file system's id, DNS name and mount name are Outputs of ``infra.shared_storage``; the
volume is built from them once they resolve (no resource is created inside ``apply``: only
the volume's spec waits for them). The claim binds to the volume by name.
"""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_kubernetes as k8s

from workloads.k8s_objects import apply_object, resource_name
from workloads.specs import storage as spec
from workloads.specs.storage import CheckpointVolumeSettings

TYPE_TOKEN = "eks-fsdp:workloads:CheckpointVolume"


@dataclass(frozen=True, kw_only=True)
class CheckpointVolumeArgs:
    """Arguments of ``CheckpointVolume``."""

    settings: CheckpointVolumeSettings
    """Claim name, namespace and capacity."""
    file_system_id: pulumi.Input[str]
    """FSx for Lustre file system id (the volume handle)."""
    dns_name: pulumi.Input[str]
    """Its DNS name."""
    mount_name: pulumi.Input[str]
    """Its Lustre mount name."""

    def __post_init__(self) -> None:
        if not isinstance(self.settings, CheckpointVolumeSettings):
            raise ValueError("CheckpointVolumeArgs.settings: expected a CheckpointVolumeSettings")
        for name in ("file_system_id", "dns_name", "mount_name"):
            if getattr(self, name) is None:
                raise ValueError(f"CheckpointVolumeArgs.{name}: required")


class CheckpointVolume(pulumi.ComponentResource):
    """A static FSx PersistentVolume and its PersistentVolumeClaim in the job's namespace."""

    claim_name: pulumi.Output[str]
    """Name of the claim (the job's ``checkpoint_claim``)."""
    volume_name: pulumi.Output[str]
    """Name of the PersistentVolume."""

    def __init__(
        self, name: str, args: CheckpointVolumeArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__(TYPE_TOKEN, name, {}, opts)
        s = args.settings
        pv = pulumi.Output.all(args.file_system_id, args.dns_name, args.mount_name).apply(
            lambda v: spec.persistent_volume(
                s, spec.FileSystemRef(file_system_id=v[0], dns_name=v[1], mount_name=v[2])
            )
        )
        claim = spec.persistent_volume_claim(s)
        self.volume = k8s.core.v1.PersistentVolume(
            resource_name(name, {"kind": "PersistentVolume", "metadata": {"name": s.volume_name}}),
            metadata=pv.apply(lambda o: o["metadata"]),
            spec=pv.apply(lambda o: o["spec"]),
            opts=pulumi.ResourceOptions(parent=self),
        )
        self.claim = apply_object(
            name, claim, pulumi.ResourceOptions(parent=self, depends_on=[self.volume])
        )
        self.claim_name = pulumi.Output.from_input(s.claim_name)
        self.volume_name = pulumi.Output.from_input(s.volume_name)
        self.register_outputs({"claimName": self.claim_name, "volumeName": self.volume_name})
