"""The shared checkpoint volume as Kubernetes objects: a static FSx for Lustre PersistentVolume
and the PersistentVolumeClaim the PyTorchJob mounts (pure functions, plain dicts, no pulumi).

The file system already exists (``infra.shared_storage`` creates it), so the volume is
provisioned statically: the PersistentVolume names the file system through the FSx CSI driver
(``volumeHandle`` = file system id, ``volumeAttributes`` = DNS name and Lustre mount name) and
is reserved for exactly one claim (``claimRef``); the claim binds to it by ``volumeName`` with
``storageClassName: ""`` so no dynamic provisioner ever answers it. Both are ReadWriteMany:
every worker pod mounts the same folder, which is what makes a DCP checkpoint loadable.

A volume binds to one claim ("a PVC to PV binding is a one-to-one mapping, using a
ClaimRef": Kubernetes docs, "Persistent Volumes", Binding) and a claim lives in one
namespace, so each
namespace jobs run in (the jobs namespace, every team's: ``in_namespace``) gets its own
volume of the same file system, named ``<namespace>-<claim>``. Several volumes may name one
file system: the FSx CSI driver has no stage step (``NodeStageVolume`` is unimplemented, no
node capability is advertised) and ``NodePublishVolume`` mounts ``<dnsname>@tcp:/<mountname>``
at each pod's own target path, the volume handle serving only to key operations in flight
(kubernetes-sigs/aws-fsx-csi-driver ``pkg/driver/node.go`` at v1.9.0, the add-on version
``infra.versions.FSX_CSI_ADDON_VERSION`` pins; the static-provisioning example,
``examples/kubernetes/static_provisioning``, is one such volume). Every team's volume thus
shows the whole file system: the teams' checkpoint folders (``<root>/<job name>``) are kept
apart by job names, not by the file system.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass

from workloads.specs.common import K8sObject, check_dns_label, labels

CSI_DRIVER = "fsx.csi.aws.com"
"""The FSx for Lustre CSI driver (EKS add-on ``aws-fsx-csi-driver``)."""
COMPONENT = "checkpoints"
MOUNT_OPTIONS = ("flock",)
"""Lustre mount options: ``flock`` gives coherent file locks across clients."""
PLACEHOLDER_FILE_SYSTEM_ID = "FSX_FILE_SYSTEM_ID"
"""Stands in for the file system id when rendering without one (replace before applying)."""
PLACEHOLDER_MOUNT_NAME = "FSX_MOUNT_NAME"
"""Stands in for the Lustre mount name when rendering without one."""

_DNS1123_SUBDOMAIN = re.compile(
    r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
)


def _check_subdomain(value: str, field: str) -> None:
    if not value or len(value) > 253 or not _DNS1123_SUBDOMAIN.match(value):
        raise ValueError(f"{field}: {value!r} is not a DNS-1123 name (a-z, 0-9, '-', '.')")


@dataclass(frozen=True, kw_only=True)
class CheckpointVolumeSettings:
    """The claim the job mounts and the static volume behind it."""

    claim_name: str
    """PersistentVolumeClaim name (the job's ``checkpoint_claim``)."""
    namespace: str = "default"
    """Namespace of the claim (the job's namespace)."""
    capacity_gib: int
    """Capacity of the file system, GiB (the volume's capacity and the claim's request)."""

    def __post_init__(self) -> None:
        _check_subdomain(self.claim_name, "checkpoint_volume.claim_name")
        check_dns_label(self.namespace, "checkpoint_volume.namespace")
        if self.capacity_gib < 1:
            raise ValueError(f"checkpoint_volume.capacity_gib: {self.capacity_gib} must be >= 1")
        _check_subdomain(self.volume_name, "checkpoint_volume.volume_name")

    @property
    def volume_name(self) -> str:
        """Name of the (cluster-scoped) PersistentVolume: ``<namespace>-<claim>``."""
        return f"{self.namespace}-{self.claim_name}"

    @property
    def capacity(self) -> str:
        """Kubernetes quantity of the capacity, e.g. ``1200Gi``."""
        return f"{self.capacity_gib}Gi"


@dataclass(frozen=True, kw_only=True)
class FileSystemRef:
    """Where the FSx for Lustre file system is (the ``SharedStorage`` outputs)."""

    file_system_id: str
    """``fs-...``: the volume handle."""
    dns_name: str
    """DNS name clients mount."""
    mount_name: str
    """Lustre mount name."""

    def __post_init__(self) -> None:
        for name in ("file_system_id", "dns_name", "mount_name"):
            if not getattr(self, name):
                raise ValueError(f"file_system.{name}: must not be empty")


def in_namespace(s: CheckpointVolumeSettings, namespace: str) -> CheckpointVolumeSettings:
    """The same claim (name, capacity) in ``namespace``, on a volume of its own
    (``<namespace>-<claim>``) of the same file system: a team's checkpoint claim."""
    return dataclasses.replace(s, namespace=namespace)


def placeholder_file_system(region: str | None) -> FileSystemRef:
    """A ``FileSystemRef`` of placeholders, for rendering before the file system exists."""
    return file_system_ref(PLACEHOLDER_FILE_SYSTEM_ID, PLACEHOLDER_MOUNT_NAME, region)


def file_system_ref(file_system_id: str, mount_name: str, region: str | None) -> FileSystemRef:
    """The reference of a file system by id and mount name (its DNS name follows from the id)."""
    return FileSystemRef(
        file_system_id=file_system_id,
        dns_name=f"{file_system_id}.fsx.{region or 'REGION'}.amazonaws.com",
        mount_name=mount_name,
    )


def persistent_volume(s: CheckpointVolumeSettings, fs: FileSystemRef) -> K8sObject:
    """The static PersistentVolume of the file system, reserved for the claim."""
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": s.volume_name, "labels": labels(s.volume_name, COMPONENT)},
        "spec": {
            "capacity": {"storage": s.capacity},
            "volumeMode": "Filesystem",
            "accessModes": ["ReadWriteMany"],
            "persistentVolumeReclaimPolicy": "Retain",
            "storageClassName": "",
            "mountOptions": list(MOUNT_OPTIONS),
            "claimRef": {"namespace": s.namespace, "name": s.claim_name},
            "csi": {
                "driver": CSI_DRIVER,
                "volumeHandle": fs.file_system_id,
                "volumeAttributes": {"dnsname": fs.dns_name, "mountname": fs.mount_name},
            },
        },
    }


def persistent_volume_claim(s: CheckpointVolumeSettings) -> K8sObject:
    """The claim the PyTorchJob mounts, bound to the static volume by name."""
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {
            "name": s.claim_name,
            "namespace": s.namespace,
            "labels": labels(s.claim_name, COMPONENT),
        },
        "spec": {
            "accessModes": ["ReadWriteMany"],
            "storageClassName": "",
            "volumeName": s.volume_name,
            "resources": {"requests": {"storage": s.capacity}},
        },
    }


def objects(s: CheckpointVolumeSettings, fs: FileSystemRef) -> list[K8sObject]:
    """The volume, then its claim."""
    return [persistent_volume(s, fs), persistent_volume_claim(s)]
