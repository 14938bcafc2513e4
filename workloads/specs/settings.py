"""Typed settings of the workloads: what every spec builder takes.

Each dataclass is frozen and keyword-only and checks itself in ``__post_init__``: a bad value
raises ``ValueError`` naming the field before any object is built. A job's settings are computed
from its typed job spec by ``jobs.build.job_settings`` (specs never import ``jobs``); the
platform's by ``workloads.specs.stack.platform``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from infra import versions
from infra.instances import lookup
from workloads.specs.common import check_dns_label
from workloads.specs.preemption import LOCAL_DISK_MB_PER_S
from workloads.specs.storage import CheckpointVolumeSettings

RDZV_BACKENDS = ("etcd", "etcd-v2", "c10d")
"""Rendezvous backends the training operator and torchrun accept."""
TOLERANT_RDZV_BACKENDS = {"etcd": "etcd-ft", "etcd-v2": "etcd-v2-ft"}
"""The operator's etcd backend -> the handler the command selects instead (``--rdzv-backend``):
the same rendezvous, surviving an etcd outage (``training.rendezvous``, docs/adr/0005). Equal to
``training.rendezvous.TOLERANT_BACKENDS`` (a test checks; specs import no torch)."""
STORE_OUTAGE_TIMEOUT_S = 300
"""Default etcd outage budget (``training.rendezvous.DEFAULT_STORE_OUTAGE_TIMEOUT_S``)."""
LAUNCHER = ("python", "-m", "training.launch")
"""torchrun with the project's rendezvous handlers registered (``training/launch.py``)."""
ETCD_CLIENT_PORT = 2379
C10D_PORT = 29400
CHECKPOINT_MOUNT = "/checkpoints"
NODEGROUP_LABEL = "eks-fsdp/nodegroup"
"""Node label naming the GPU node group (``infra.config.nodegroups.NODEGROUP_LABEL``; a test checks)."""
HF_TOKEN_KEY = "token"
"""Key of the Hugging Face token inside its Secret."""


@dataclass(frozen=True, kw_only=True)
class EtcdSettings:
    """The etcd server the workers rendezvous through."""

    name: str = "etcd"
    """Name of the Deployment, Service, NetworkPolicy (and PVC) of the etcd server."""
    namespace: str = "default"
    """Namespace of the etcd objects (the job's namespace)."""
    image: str = versions.ETCD_IMAGE
    """etcd image; must be 3.5.x (3.6 has no v2 API)."""
    client_port: int = ETCD_CLIENT_PORT
    """Client port of the Service and the container."""
    peer_port: int = 2380
    """Peer port (single member; listened on loopback only)."""
    storage_size: str | None = None
    """Size of a PersistentVolumeClaim for the data dir, e.g. ``1Gi``; None = emptyDir."""
    storage_class: str | None = None
    """StorageClass of that claim; None = the cluster default."""
    cpu_request: str = "100m"
    """CPU request of the etcd container."""
    memory_request: str = "256Mi"
    """Memory request (and limit) of the etcd container."""
    client_job_names: tuple[str, ...] = ()
    """PyTorchJob names whose pods the NetworkPolicy lets in; empty = no pod at all."""

    def __post_init__(self) -> None:
        check_dns_label(self.name, "etcd.name")
        check_dns_label(self.namespace, "etcd.namespace")
        tag = self.image.rpartition(":")[2]
        if ":" not in self.image or not tag.lstrip("v").startswith("3.5."):
            raise ValueError(f"etcd.image: {self.image!r} must be pinned to a 3.5.x tag")
        for port_field in ("client_port", "peer_port"):
            port = getattr(self, port_field)
            if not 1 <= port <= 65535:
                raise ValueError(f"etcd.{port_field}: {port} is not a TCP port")
        for job in self.client_job_names:
            check_dns_label(job, "etcd.client_job_names")

    @property
    def host(self) -> str:
        """DNS name of the client Service inside the cluster."""
        return f"{self.name}.{self.namespace}.svc.cluster.local"


@dataclass(frozen=True, kw_only=True)
class JobSettings:
    """One PyTorchJob: who runs, where, with which command."""

    name: str
    """PyTorchJob name (DNS-1123 label; pods are ``<name>-worker-<i>``)."""
    image: str
    """Training image, pinned (tag or digest; never ``latest``)."""
    instance_type: str
    """EC2 instance type of the worker nodes (row of ``infra.instances.CATALOG``)."""
    workers: int
    """Worker pods at most (= elastic maxReplicas = the replica count)."""
    min_workers: int
    """Worker pods at least (elastic minReplicas)."""
    max_restarts: int = 3
    """Restarts of the worker group torchrun allows (elastic maxRestarts)."""
    rdzv_backend: str = "etcd"
    """Rendezvous backend: etcd | etcd-v2 | c10d."""
    rdzv_host: str = ""
    """Rendezvous host; empty = the etcd Service (etcd*) or worker 0 (c10d)."""
    rdzv_port: int = 0
    """Rendezvous port; 0 = 2379 (etcd*) or 29400 (c10d)."""
    rdzv_conf: tuple[tuple[str, str], ...] = (("last_call_timeout", "5"),)
    """Extra rendezvous options (PET_RDZV_CONF); last_call_timeout=5 re-forms faster. Not
    ``store_outage_timeout``: that one is ``store_outage_timeout_s``."""
    store_outage_timeout_s: int = STORE_OUTAGE_TIMEOUT_S
    """etcd backends: seconds etcd may be unreachable before the agents give up (rendered as
    ``store_outage_timeout`` in rdzvConf, read by ``training.rendezvous``)."""
    generation: int = 1
    """Submission counter; bump it to resubmit an unchanged job (fresh rendezvous id)."""
    train_args: tuple[str, ...] = ()
    """``training.finetune`` flags (``--flag=value``); checkpoint flags are added by the spec."""
    namespace: str = "default"
    """Namespace of the PyTorchJob."""
    node_selector: Mapping[str, str] = field(default_factory=dict)
    """Node labels the workers must match (the GPU node group)."""
    extra_taints: tuple[Any, ...] = ()
    """Node-group taints to tolerate besides ``nvidia.com/gpu``."""
    hf_token_secret: str | None = None
    """Secret holding the Hugging Face token under key ``token``; None = no token."""
    checkpoint_claim: str | None = None
    """Shared PVC (FSx/EFS) for checkpoints; None = emptyDir (dev: lost with the pod)."""
    checkpoint_mount: str = CHECKPOINT_MOUNT
    """Where the checkpoint volume is mounted in the container."""
    log_level: str = "INFO"
    """LOGLEVEL of torchrun and the training package."""
    nccl_debug: str = "WARN"
    """NCCL_DEBUG of the workers: WARN (NCCL's errors) unless the job asks for INFO
    (``ncclDebug``): INFO prints init, topology and every channel of every communicator, on
    every rank, into the job's logs (and CloudWatch Logs) for each run."""
    shm_size: str | None = None
    """sizeLimit of the memory-backed /dev/shm; None = 10% of host memory, at most 64Gi."""
    termination_grace_s: int | None = None
    """Seconds between SIGTERM and SIGKILL of a worker pod; None = derived with torchrun's
    shutdown timeout and the checkpoint budget (``workloads.specs.preemption``)."""
    checkpoint_mb_per_s: float = LOCAL_DISK_MB_PER_S
    """Write throughput of the checkpoint volume, MB/s (the stack's FSx, else the local disk)."""
    ttl_after_finished_s: int | None = 7 * 24 * 3600
    """ttlSecondsAfterFinished: the operator deletes the finished job (and its pods) after it;
    None = kept until deleted."""
    nproc_per_node: int | None = None
    """Processes per worker; None = GPUs of the instance type."""
    rdzv_id: str = ""
    """Rendezvous id; empty = ``<name>-g<generation>-<hash of these settings>``."""
    metrics_port: int = 0
    """Port of the training Prometheus exporter (``--metrics_port``, pod annotations); 0 = off."""
    resume: bool | None = None
    """Pass ``--resume``; None = when every worker sees the same checkpoints (a shared claim, or
    one worker): DCP writes each rank's shard on its own pod, so an emptyDir per pod holds
    checkpoints no pod can load."""
    preflight_expect: str | None = None
    """``--preflight`` with these ``--preflight_expect`` thresholds (``planner.expect``; empty:
    measure and report only); None = no preflight."""
    efa: bool = True
    """The node group attaches EFA interfaces (its ``efa`` key): without them a worker asks for
    no ``vpc.amazonaws.com/efa`` (a p5 group with ``efa: false`` has no EFA device to give)."""
    efa_dra: bool = False
    """The node group hands out EFA through the EFA DRA driver (``efa: dra``): the workers
    reference a ResourceClaimTemplate instead of requesting ``vpc.amazonaws.com/efa``
    (``workloads.specs.efa``)."""
    capacity_block_group: str | None = None
    """The job's node group when it is a capacity block: the workers read its ConfigMap's
    ``scaleDownAt`` (``workloads.specs.capacity``) as ``EKS_FSDP_CAPACITY_ENDS_AT`` and stop
    before it (``training.deadline``); None = no capacity end."""

    def __post_init__(self) -> None:
        check_dns_label(self.name, "job.name", max_len=50)
        if self.capacity_block_group is not None:
            check_dns_label(self.capacity_block_group, "job.capacity_block_group")
        check_dns_label(self.namespace, "job.namespace")
        if not 0 <= self.metrics_port <= 65535:
            raise ValueError(f"job.metrics_port: {self.metrics_port} is not a TCP port (0 = off)")
        image_tag = self.image.rpartition("/")[2]
        if "@sha256:" not in self.image and (":" not in image_tag or image_tag.endswith(":latest")):
            raise ValueError(f"job.image: {self.image!r} must be pinned to a tag or digest")
        try:
            lookup(self.instance_type)
        except KeyError as err:
            raise ValueError(f"job.instance_type: {err.args[0]}") from None
        if self.workers < 1:
            raise ValueError(f"job.workers: {self.workers} must be at least 1")
        if not 1 <= self.min_workers <= self.workers:
            raise ValueError(
                f"job.min_workers: {self.min_workers} must be between 1 and workers "
                f"({self.workers})"
            )
        if self.max_restarts < 0:
            raise ValueError(f"job.max_restarts: {self.max_restarts} must be >= 0")
        if self.rdzv_backend not in RDZV_BACKENDS:
            raise ValueError(
                f"job.rdzv_backend: {self.rdzv_backend!r} is not one of {', '.join(RDZV_BACKENDS)}"
            )
        if self.generation < 1:
            raise ValueError(f"job.generation: {self.generation} must be >= 1")
        if self.store_outage_timeout_s < 1:
            raise ValueError(
                f"job.store_outage_timeout_s: {self.store_outage_timeout_s} must be >= 1"
            )
        for key, value in self.rdzv_conf:
            # The operator joins the entries as k=v,k=v (PET_RDZV_CONF, training-operator v1.9
            # elastic.go generateEnvRDZVConf); torchrun splits on "," then on the first "="
            # (torch/distributed/elastic/rendezvous/utils.py, _parse_rendezvous_config).
            if not key or any(c in key for c in ",= ") or "," in value:
                raise ValueError(f"job.rdzv_conf: {key}={value!r} cannot be passed as k=v,k=v")
            if key == "store_outage_timeout":
                raise ValueError(
                    "job.rdzv_conf: store_outage_timeout is set by job.store_outage_timeout_s"
                )
        if self.nproc_per_node is not None and self.nproc_per_node < 1:
            raise ValueError(f"job.nproc_per_node: {self.nproc_per_node} must be >= 1")
        for arg in self.train_args:
            if not arg.startswith("--"):
                raise ValueError(f"job.extra_args: {arg!r} is not a --flag[=value]")
            if arg.split("=", 1)[0] in ("--nnodes", "--nproc_per_node", "--nproc-per-node"):
                raise ValueError(
                    f"job.extra_args: {arg!r} is torchrun's; the operator sets it (PET_NNODES)"
                )
        if not self.checkpoint_mount.startswith("/"):
            raise ValueError(f"job.checkpoint_mount: {self.checkpoint_mount!r} is not absolute")
        if self.termination_grace_s is not None and self.termination_grace_s < 1:
            raise ValueError(f"job.termination_grace_s: {self.termination_grace_s} must be >= 1")
        if not self.checkpoint_mb_per_s > 0:
            raise ValueError(f"job.checkpoint_mb_per_s: {self.checkpoint_mb_per_s} must be > 0")
        if self.ttl_after_finished_s is not None and self.ttl_after_finished_s < 0:
            raise ValueError(f"job.ttl_after_finished_s: {self.ttl_after_finished_s} must be >= 0")

    def replace(self, **changes: Any) -> JobSettings:
        """A copy with ``changes`` applied (validated again)."""
        return dataclasses.replace(self, **changes)

    @property
    def resumes(self) -> bool:
        """Whether the command carries ``--resume``."""
        if self.resume is not None:
            return self.resume
        return bool(self.checkpoint_claim) or self.workers == 1

    @property
    def uses_etcd(self) -> bool:
        """True for the etcd and etcd-v2 backends."""
        return self.rdzv_backend.startswith("etcd")


@dataclass(frozen=True, kw_only=True)
class DebugSettings:
    """The htop and nvtop DaemonSets on the GPU nodes."""

    image: str
    """Image carrying htop and nvtop (the training image)."""
    namespace: str = "default"
    """Namespace of the DaemonSets."""
    instance_types: tuple[str, ...] = ()
    """Instance types of the GPU node groups to run on; empty = every node tolerated."""
    extra_taints: tuple[Any, ...] = ()
    """Node-group taints to tolerate besides ``nvidia.com/gpu``."""

    def __post_init__(self) -> None:
        check_dns_label(self.namespace, "debug.namespace")
        if ":" not in self.image.rpartition("/")[2] or self.image.endswith(":latest"):
            raise ValueError(f"debug.image: {self.image!r} must be pinned to a tag or digest")


@dataclass(frozen=True, kw_only=True)
class OperatorSettings:
    """The Kubeflow training operator install."""

    version: str = versions.TRAINING_OPERATOR_VERSION
    """Release tag of the upstream standalone overlay."""
    kustomize_url: str = versions.TRAINING_OPERATOR_KUSTOMIZE_URL
    """Remote kustomize directory, pinned with ``?ref=<tag>``."""
    image_name: str = versions.TRAINING_OPERATOR_IMAGE_NAME
    """Operator image name the overlay uses."""
    image_tag: str = versions.TRAINING_OPERATOR_IMAGE_TAG
    """Operator image tag the overlay is pinned to (the one the release's overlay ships)."""
    namespace: str = versions.TRAINING_OPERATOR_NAMESPACE
    """Namespace the overlay installs into."""

    def __post_init__(self) -> None:
        if "?ref=" not in self.kustomize_url or self.kustomize_url.endswith(
            ("?ref=master", "?ref=main")
        ):
            raise ValueError(f"operator.kustomize_url: {self.kustomize_url!r} must pin ?ref=<tag>")
        if not self.image_tag or self.image_tag == "latest":
            raise ValueError(f"operator.image_tag: {self.image_tag!r} must be a pinned tag")


@dataclass(frozen=True, kw_only=True)
class Workloads:
    """Every workload setting of one stack."""

    stack: str
    """Stack name (dev, p4de-odcr, ...)."""
    job: JobSettings
    """The PyTorchJob."""
    etcd: EtcdSettings
    """Its etcd server."""
    operator: OperatorSettings
    """The training operator install."""
    debug: DebugSettings
    """The debug DaemonSets."""
    debug_tools: bool = False
    """Whether the stack deploys the debug DaemonSets (stack key ``debugTools``, opt-in)."""
    device: str = "cuda"
    """cuda on the cluster; cpu makes the local runner use one process per worker."""
    checkpoint_volume: CheckpointVolumeSettings | None = None
    """The FSx PersistentVolume/Claim the stack creates (``sharedStorage.type: fsx``), else None."""


def node_selector_for(group: Any) -> dict[str, str]:
    """Labels that select the nodes of a GPU node group (the labels the infra gives them)."""
    return {
        NODEGROUP_LABEL: group.name,
        "node.kubernetes.io/instance-type": group.instance_type,
    }
