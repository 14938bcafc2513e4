"""The PyTorchJob (``kubeflow.org/v1``), built with the kubeflow-training SDK's typed models.

Invariants the builder keeps (and the tests assert):
- the command is ``python -m training.launch [--rdzv-backend=etcd-ft|etcd-v2-ft] -m
  training.finetune <flags>`` (torchrun with the project's store-tolerant rendezvous handlers,
  ``training/launch.py``) with **no** ``--nnodes`` or ``--nproc_per_node``: the operator injects
  PET_NNODES=min:max and PET_NPROC_PER_NODE, and an explicit flag would silently override the
  elastic range. ``--rdzv-backend`` is the one explicit rendezvous flag: ``elasticPolicy.rdzvBackend``
  stays the operator's ``etcd``/``etcd-v2`` (training-operator v1.9 ``ElasticPolicy.RDZVBackend``
  is a plain string the operator copies into PET_RDZV_BACKEND, ``pkg/controller.v1/pytorch/
  elastic.go``, ``generateEnvBackend``), and torchrun reads PET_RDZV_BACKEND only when the flag
  is absent (``torch/distributed/argparse_util.py``, ``env``), so the flag selects the handler
  that survives an etcd restart (docs/adr/0005-rendezvous-backend.md);
- ``rdzvId`` is unique per job generation: ``<name>-g<generation>-<hash of the settings>``, so
  a resubmitted job never meets the closed rendezvous of its predecessor (a closed id stays
  closed: for good on ``etcd-ft``, whose run directory has no TTL; two hours on ``etcd-v2-ft``);
- GPUs and EFA devices come from the instance catalog, FI_* only where the type needs them,
  NCCL_NET=OFI on every EFA type (a broken OFI plugin fails the job instead of falling back);
- the Hugging Face token reaches the pod only through a ``secretKeyRef``, required (not
  ``optional``) when the model comes from the hub: a missing Secret then keeps the pod in
  ``CreateContainerConfigError`` instead of crash-looping through ``backoffLimit``;
- preemption (docs/adr/0004-preemption-semantics.md): ``terminationGracePeriodSeconds``,
  ``TORCH_ELASTIC_SHUTDOWN_TIMEOUT`` and the checkpoint flags come from ONE function,
  ``workloads.specs.preemption.preemption_budget``; a worker exits 0 only when training is
  complete (the operator v1.9 marks an elastic job Succeeded as soon as one worker succeeds:
  ``pkg/controller.v1/pytorch/pytorchjob_controller.go``, "If ElasticPolicy is not nil and any
  worker has completed");
- ``cleanPodPolicy: Running`` (no GPU pod outlives a finished job) and
  ``ttlSecondsAfterFinished``; cpu and memory requested from the instance catalog (Burstable
  QoS, not the first pods the kubelet OOM-kills) and a size limit on the memory-backed
  ``/dev/shm``;
- the pods are confined: no service-account token (the job calls no Kubernetes API), the
  RuntimeDefault seccomp profile, no privilege escalation, every capability dropped except
  ``IPC_LOCK`` on EFA instance types (libfabric's EFA provider pins the memory it registers
  with the device; ``IPC_LOCK`` lifts RLIMIT_MEMLOCK for that). What stays deliberate is listed
  in ``SECURITY_SKIPS`` and carried as checkov skip annotations on the pod template;
- the command carries ``--resume`` whenever the checkpoints are shared (a claim, or a single
  worker): a restarted worker continues from the newest complete checkpoint. With an emptyDir
  per pod and several workers it is left out (each pod would hold only its own rank's shards).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from kubeflow.training import models as kf
from kubeflow.training.api_client import ApiClient
from kubernetes.client import models as k8s

from infra.instances import lookup
from workloads.specs import capacity, efa
from workloads.specs.common import K8sObject, labels, stable_hash, tolerations
from workloads.specs.preemption import PreemptionBudget, backoff_limit, preemption_budget
from workloads.specs.prometheus_files import training_pod_annotations
from workloads.specs.settings import (
    C10D_PORT,
    ETCD_CLIENT_PORT,
    HF_TOKEN_KEY,
    LAUNCHER,
    TOLERANT_RDZV_BACKENDS,
    JobSettings,
)

API_VERSION = "kubeflow.org/v1"
KIND = "PyTorchJob"
CONTAINER = "pytorch"
"""The operator finds the training container by this name."""
OPERATOR_PORT_NAME = "pytorchjob-port"
OPERATOR_PORT = 23456
COMPONENT = "training"
NODE_NAME_ENV = "NODE_NAME"
"""The node a worker runs on (downward API ``spec.nodeName``, Kubernetes docs "Expose Pod
Information to Containers Through Environment Variables"), for the preflight gate's line."""
NCCL_NET_EFA = "OFI"
"""NCCL_NET on EFA instance types: the aws-ofi-nccl network, or NCCL refuses to start."""
EFA_CAPABILITIES = ("IPC_LOCK",)
"""Capabilities the container keeps on EFA instance types (memory registration for RDMA)."""
SECURITY_SKIPS: dict[str, str] = {
    "CKV_K8S_23": "the training image runs as root: it writes the model cache under /root and "
    "checkpoints into the FSx for Lustre root directory (root-owned; Lustre ignores fsGroup); "
    "no capabilities but IPC_LOCK on EFA, no privilege escalation",
    "CKV_K8S_40": "runs as root (see CKV_K8S_23), so no high UID",
    "CKV_K8S_22": "the job writes the Hugging Face and torch caches (tens of GB of weights) "
    "inside the container",
    "CKV_K8S_8": "no liveness probe: a restarted worker breaks the NCCL collective of every "
    "other worker; torchrun's elastic agent and the operator's restart policy handle failures",
    "CKV_K8S_9": "no readiness probe: the workers serve no traffic; the rendezvous is the "
    "readiness",
    "CKV_K8S_35": "the Hugging Face token reaches huggingface_hub as HF_TOKEN from a "
    "secretKeyRef (never rendered); the pod mounts no service-account token",
    "CKV_K8S_11": "no CPU limit (worker_requests: Burstable QoS): one worker owns its node, and "
    "CFS throttling of a data-loader or NCCL proxy thread would stall every rank; 85% of the "
    "vCPUs are requested",
    "CKV_K8S_13": "no memory limit (worker_requests: Burstable QoS): one worker owns its node, "
    "and a limit would OOM-kill a rank mid-collective; 85% of the memory is requested and "
    "/dev/shm is size-limited",
}
"""checkov checks the worker pods fail on purpose, with the reason (pod-template annotations)."""
EFA_SECURITY_SKIPS: dict[str, str] = {
    "CKV_K8S_25": "IPC_LOCK on EFA instance types: libfabric's EFA provider registers (pins) "
    "the training buffers with the device",
    "CKV_K8S_37": "the only capability kept is IPC_LOCK on EFA instance types (see CKV_K8S_25)",
}
"""The same for pods on EFA instance types."""
SERVICE_ACCOUNT = "jobs"
"""The ServiceAccount job pods run as, in the stack's jobs namespace and in each team's
(``workloads.specs.teams``): EKS Pod Identity gives it the data bucket's role
(``infra.pod_identity``); no API token mounted."""


def service_account(namespace: str) -> K8sObject:
    """The ServiceAccount job pods run as (``SERVICE_ACCOUNT``), in ``namespace``. The API
    server refuses a pod whose ServiceAccount does not exist (kubernetes
    plugin/pkg/admission/serviceaccount/admission.go: "error looking up service account"), so the
    platform creates it before any job: ``infra.pod_identity`` on EKS, the rendered platform
    objects for ``kubectl apply``, ``workloads.specs.teams`` in every team's namespace."""
    return {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": {
            "name": SERVICE_ACCOUNT,
            "namespace": namespace,
            "labels": labels(SERVICE_ACCOUNT, "jobs"),
        },
        "automountServiceAccountToken": False,
    }


HF_HOME_DIR = "hf-home"
"""Folder of the shared checkpoint volume that is the workers' ``HF_HOME`` (hub downloads and
the ``s3://`` weights cache, ``training/s3``): one download serves every node and restart."""
CAPACITY_ENDS_AT_ENV = "EKS_FSDP_CAPACITY_ENDS_AT"
"""Variable the workers read the capacity end from (``training.deadline.ENV``; a test checks)."""
CAPACITY_KEY = "scaleDownAt"
"""Key of the capacity-block ConfigMap it comes from (``workloads.specs.capacity.KEYS``): the
time the stack scales the group to zero, which drains the job's nodes."""


def security_skips(s: JobSettings) -> dict[str, str]:
    """checkov skips of the worker pods of ``s`` (check id -> reason)."""
    efa = lookup(s.instance_type).efa_supported
    return {**SECURITY_SKIPS, **(EFA_SECURITY_SKIPS if efa else {})}


def skip_annotations(skips: dict[str, str]) -> dict[str, str]:
    """``checkov.io/skipN: CHECK=reason`` annotations (checkov's in-manifest suppression)."""
    return {
        f"checkov.io/skip{i}": f"{check}={reason}"
        for i, (check, reason) in enumerate(sorted(skips.items()), start=1)
    }


def container_security_context(s: JobSettings) -> k8s.V1SecurityContext:
    """No privilege escalation, no capabilities (but IPC_LOCK on EFA), RuntimeDefault seccomp."""
    efa = lookup(s.instance_type).efa_supported
    return k8s.V1SecurityContext(
        allow_privilege_escalation=False,
        privileged=False,
        capabilities=k8s.V1Capabilities(drop=["ALL"], add=list(EFA_CAPABILITIES) if efa else None),
        seccomp_profile=k8s.V1SeccompProfile(type="RuntimeDefault"),
    )


def nproc_per_node(s: JobSettings) -> int:
    """Processes per worker pod: the instance type's GPUs unless set explicitly."""
    return s.nproc_per_node or lookup(s.instance_type).gpus


def rdzv_endpoint(s: JobSettings, etcd_host: str) -> tuple[str, int]:
    """(host, port) the workers rendezvous at."""
    if s.rdzv_host:
        host = s.rdzv_host
    elif s.uses_etcd:
        host = etcd_host
    else:
        host = f"{s.name}-worker-0"
    port = s.rdzv_port or (ETCD_CLIENT_PORT if s.uses_etcd else C10D_PORT)
    return host, port


def rdzv_conf(s: JobSettings) -> list[tuple[str, str]]:
    """rdzvConf (PET_RDZV_CONF): the job's options, plus the etcd outage budget on an etcd
    backend (``store_outage_timeout``, ``training.rendezvous``; c10d has no such key)."""
    conf = list(s.rdzv_conf)
    if s.uses_etcd:
        conf.append(("store_outage_timeout", str(s.store_outage_timeout_s)))
    return conf


def rdzv_id(s: JobSettings) -> str:
    """``<name>-g<generation>-<8 hex>``: changes with the generation and with any setting."""
    if s.rdzv_id:
        return s.rdzv_id
    fields = dataclasses.asdict(s)
    fields.pop("generation")
    fields.pop("rdzv_id")
    return f"{s.name}-g{s.generation}-{stable_hash(fields)}"


JOBS_NAMESPACE = "default"
"""The stack's jobs namespace (``workloads.specs.stack.JOBS_NAMESPACE``)."""


def folder_of(name: str, namespace: str | None) -> str:
    """A job's folder under the checkpoint root (``--dist_checkpoint_folder``): its name in
    the jobs namespace (the folders jobs always had) and for local jobs (None),
    ``<namespace>/<name>`` in a team's. Every team's claim mounts the root of the same file
    system (and an ``s3://`` root is shared too), so two teams' jobs of the same name would
    otherwise resume, prune and overwrite each other's checkpoints."""
    return name if namespace in (None, JOBS_NAMESPACE) else f"{namespace}/{name}"


def job_folder(s: JobSettings) -> str:
    """The folder of the job ``s`` describes (``folder_of``)."""
    return folder_of(s.name, s.namespace)


def output_dir(s: JobSettings) -> str:
    """Where metrics.jsonl and summary.json go (on the shared volume, in the job's folder)."""
    return f"{s.checkpoint_mount}/{job_folder(s)}/output"


def model_name(s: JobSettings) -> str:
    """The ``--model_name`` of the job's training flags (training.config's default otherwise)."""
    for arg in s.train_args:
        if arg.startswith("--model_name="):
            return arg.split("=", 1)[1]
    return "tiny-llama"


def budget(s: JobSettings) -> PreemptionBudget:
    """The job's preemption budget (grace period, shutdown timeout, checkpoint cadence)."""
    return preemption_budget(s.instance_type, model_name(s), s.checkpoint_mb_per_s, s.workers)


def needs_token(model: str) -> bool:
    """Whether the model is fetched from the Hugging Face hub (``org/name``), where Llama
    weights are gated: a preset or a path in the image needs no token."""
    return "/" in model and not model.startswith(("/", ".", "~"))


def grace_period_s(s: JobSettings) -> int:
    """terminationGracePeriodSeconds: the job's own, or the budget's."""
    return s.termination_grace_s if s.termination_grace_s is not None else budget(s).grace_period_s


def worker_requests(instance_type: str) -> dict[str, str]:
    """cpu and memory one worker pod (one per node) requests: 85% of the instance's vCPUs and
    memory, leaving the rest to the kubelet's reservations and the node's DaemonSets (CNI, EFA
    and NVIDIA device plugins, DCGM exporter). Requests without limits: Burstable QoS."""
    it = lookup(instance_type)
    return {
        "cpu": str(max(1, math.floor(0.85 * it.vcpus))),
        "memory": f"{max(1, math.floor(0.85 * it.memory_gib))}Gi",
    }


def shm_size(s: JobSettings) -> str:
    """sizeLimit of the memory-backed /dev/shm: the job's own, or 10% of host memory (at
    most 64 GiB): enough for NCCL and data loader workers, bounded so one pod cannot fill the
    node's memory through it."""
    if s.shm_size:
        return s.shm_size
    return f"{max(1, min(64, lookup(s.instance_type).memory_gib // 10))}Gi"


CLUSTER_LOG_EVERY = 10
"""``--log_every`` of a cluster job (GPU nodes): a quiet step makes no host sync, and a logging
step fetches the held loss / grad-norm figures in one copy, so metrics every step would stall
each GPU step on the host. 10 is torchtitan's default (``torchtitan/config/job_config.py``,
``Metrics.log_freq = 10``); metrics.jsonl still gets a row per step. The local runner on CPU
sets it back to 1 (its progress lines and fault timings read every row as it is written)."""


def _budget_flags(s: JobSettings) -> list[str]:
    """Checkpoint cadence flags from the budget and the metrics cadence, unless the job's flags
    set them."""
    b = budget(s)
    given = {a.split("=", 1)[0] for a in s.train_args}
    flags = {
        "--checkpoint_every_s": str(b.checkpoint_every_s),
        "--checkpoint_write_estimate_s": str(b.write_s),
        "--log_every": str(CLUSTER_LOG_EVERY),
    }
    return [f"{k}={v}" for k, v in flags.items() if k not in given]


def train_command(s: JobSettings) -> list[str]:
    """The container command: torchrun (configured by PET_* env, with the store-tolerant
    handler for an etcd backend) running the fine-tune. The checkpoint root is the volume's
    mount unless the job's flags name another (``resume --from``: a path or ``s3://``)."""
    tolerant = TOLERANT_RDZV_BACKENDS.get(s.rdzv_backend)
    own_root = any(a.split("=", 1)[0] == "--dist_checkpoint_root_folder" for a in s.train_args)
    return [
        *LAUNCHER,
        *([f"--rdzv-backend={tolerant}"] if tolerant else []),
        "-m",
        "training.finetune",
        *s.train_args,
        *_budget_flags(s),
        *([] if own_root else [f"--dist_checkpoint_root_folder={s.checkpoint_mount}"]),
        f"--dist_checkpoint_folder={job_folder(s)}",
        f"--output_dir={output_dir(s)}",
        *(["--resume"] if s.resumes else []),
        *([f"--metrics_port={s.metrics_port}"] if s.metrics_port else []),
        *(["--preflight"] if s.preflight_expect is not None else []),
        *([f"--preflight_expect={s.preflight_expect}"] if s.preflight_expect else []),
    ]


def finetune_flags(command: list[str]) -> list[str]:
    """The ``training.finetune`` flags of a container command (what follows ``-m
    training.finetune``); none when the command does not run it (a job made elsewhere)."""
    if "training.finetune" not in command:
        return []
    return command[command.index("training.finetune") + 1 :]


def container_env(s: JobSettings) -> list[k8s.V1EnvVar]:
    """The container's own environment (the operator adds the PET_* variables)."""
    env = [
        k8s.V1EnvVar(name="LOGLEVEL", value=s.log_level),
        k8s.V1EnvVar(name="NCCL_DEBUG", value=s.nccl_debug),
        k8s.V1EnvVar(name="TORCH_NCCL_ASYNC_ERROR_HANDLING", value="1"),
        # torchrun SIGKILLs its workers this long after forwarding SIGTERM (launcher/api.py)
        k8s.V1EnvVar(
            name="TORCH_ELASTIC_SHUTDOWN_TIMEOUT", value=str(budget(s).shutdown_timeout_s)
        ),
    ]
    if s.preflight_expect is not None:
        # the preflight gate names the node it fails on (training.preflight.measurement):
        # the downward API's spec.nodeName, since a pod's hostname is the pod's name
        env.append(
            k8s.V1EnvVar(
                name=NODE_NAME_ENV,
                value_from=k8s.V1EnvVarSource(
                    field_ref=k8s.V1ObjectFieldSelector(field_path="spec.nodeName")
                ),
            )
        )
    if s.rdzv_backend in ("etcd-v2", "c10d"):
        # Without it gloo/NCCL reuse the rendezvous TCP store on the dead worker's old port and
        # the group never re-forms after a worker is killed.
        env.append(k8s.V1EnvVar(name="TORCH_DISABLE_SHARE_RDZV_TCP_STORE", value="1"))
    instance = lookup(s.instance_type)
    # No FI_PROVIDER / FI_EFA_USE_DEVICE_RDMA, p4d/p4de included: aws-ofi-nccl's
    # doc/efa-env-var.md gives FI_PROVIDER=efa for plugin <= 1.5.0 only and says of
    # FI_EFA_USE_DEVICE_RDMA "Do not set" for libfabric >= 1.18 and plugin >= 1.7; the plugin
    # selects the efa provider itself when FI_PROVIDER is unset (src/platform-aws.cpp).
    # A group with ``efa: false`` attaches no EFA interface even on an EFA type: NCCL_NET=OFI
    # there would stop NCCL at start instead of using the sockets it has.
    if instance.efa_supported and s.efa:
        # NCCL_NET makes the network a hard requirement: if the image's OFI plugin (loaded
        # through NCCL_NET_PLUGIN=ofi, training/Dockerfile) fails to initialise, NCCL stops
        # instead of falling back to TCP sockets. aws-ofi-nccl answers to "OFI" as well as its
        # old "AWS Libfabric" (src/nccl_ofi_interface_nvidia.c, nvidia_plugin_name_fixup).
        env.append(k8s.V1EnvVar(name="NCCL_NET", value=NCCL_NET_EFA))
    if s.checkpoint_claim:
        # huggingface_hub reads HF_HOME for its cache root (``constants.HF_HOME``); on the
        # shared claim, the first node's download serves every other node and every restart.
        env.append(k8s.V1EnvVar(name="HF_HOME", value=f"{s.checkpoint_mount}/{HF_HOME_DIR}"))
    if s.capacity_block_group:
        # optional: no ConfigMap (no window in the stack yet) leaves the variable unset
        env.append(
            k8s.V1EnvVar(
                name=CAPACITY_ENDS_AT_ENV,
                value_from=k8s.V1EnvVarSource(
                    config_map_key_ref=k8s.V1ConfigMapKeySelector(
                        name=capacity.configmap_name(s.capacity_block_group),
                        key=CAPACITY_KEY,
                        optional=True,
                    )
                ),
            )
        )
    if s.hf_token_secret:
        env.append(
            k8s.V1EnvVar(
                name="HF_TOKEN",
                value_from=k8s.V1EnvVarSource(
                    secret_key_ref=k8s.V1SecretKeySelector(
                        name=s.hf_token_secret,
                        key=HF_TOKEN_KEY,
                        optional=not needs_token(model_name(s)),
                    )
                ),
            )
        )
    return env


def _pod_template(s: JobSettings) -> k8s.V1PodTemplateSpec:
    devices = {k: str(v) for k, v in lookup(s.instance_type).pod_resources().items()}
    # EFA through the job's ResourceClaimTemplate (efa: dra), or none on a group without EFA.
    if s.efa_dra or not s.efa:
        devices = efa.without_efa(devices)
    if s.checkpoint_claim:
        checkpoints = k8s.V1Volume(
            name="checkpoints",
            persistent_volume_claim=k8s.V1PersistentVolumeClaimVolumeSource(
                claim_name=s.checkpoint_claim
            ),
        )
    else:
        checkpoints = k8s.V1Volume(name="checkpoints", empty_dir=k8s.V1EmptyDirVolumeSource())
    container = k8s.V1Container(
        name=CONTAINER,
        image=s.image,
        image_pull_policy="IfNotPresent",
        command=train_command(s),
        env=container_env(s),
        ports=[
            k8s.V1ContainerPort(name=OPERATOR_PORT_NAME, container_port=OPERATOR_PORT),
            *(
                [k8s.V1ContainerPort(name="metrics", container_port=s.metrics_port)]
                if s.metrics_port
                else []
            ),
        ],
        resources=k8s.V1ResourceRequirements(
            limits=devices,
            requests={**devices, **worker_requests(s.instance_type)},
            claims=[k8s.CoreV1ResourceClaim(**c) for c in efa.container_claims()]
            if s.efa_dra
            else None,
        ),
        security_context=container_security_context(s),
        volume_mounts=[
            k8s.V1VolumeMount(name="dshm", mount_path="/dev/shm"),
            k8s.V1VolumeMount(name="checkpoints", mount_path=s.checkpoint_mount),
        ],
    )
    return k8s.V1PodTemplateSpec(
        metadata=k8s.V1ObjectMeta(
            labels=labels(s.name, COMPONENT),
            # the cluster Prometheus scrapes annotated training pods (workloads.specs.prometheus_files)
            annotations={
                **(training_pod_annotations(s.metrics_port) if s.metrics_port else {}),
                **skip_annotations(security_skips(s)),
            },
        ),
        spec=k8s.V1PodSpec(
            containers=[container],
            service_account_name=SERVICE_ACCOUNT,
            automount_service_account_token=False,
            security_context=k8s.V1PodSecurityContext(
                seccomp_profile=k8s.V1SeccompProfile(type="RuntimeDefault")
            ),
            node_selector=dict(s.node_selector) or None,
            tolerations=[
                k8s.V1Toleration(**t)
                for t in tolerations(s.extra_taints)  # type: ignore[arg-type]
            ],
            termination_grace_period_seconds=grace_period_s(s),
            resource_claims=[
                k8s.V1PodResourceClaim(
                    name=c["name"], resource_claim_template_name=c["resourceClaimTemplateName"]
                )
                for c in efa.pod_claims(s.name)
            ]
            if s.efa_dra
            else None,
            volumes=[
                k8s.V1Volume(
                    name="dshm",
                    empty_dir=k8s.V1EmptyDirVolumeSource(medium="Memory", size_limit=shm_size(s)),
                ),
                checkpoints,
            ],
        ),
    )


def pod_selector(s: JobSettings) -> dict[str, str]:
    """Labels of the job's pod template that select exactly its pods."""
    selected = labels(s.name, COMPONENT)
    return {k: selected[k] for k in ("app.kubernetes.io/name", "app.kubernetes.io/component")}


def network_policy(s: JobSettings, metrics_namespace: str | None = None) -> K8sObject:
    """Ingress to the job's pods only from the job's own pods (torchrun's TCP store, NCCL's
    socket bootstrap) and, when the pods export metrics, from ``metrics_namespace`` on the
    metrics port. EFA traffic bypasses the kernel and is not subject to it; egress stays open
    (model download, etcd, the checkpoint file system)."""
    workers = pod_selector(s)
    ingress: list[dict[str, Any]] = [{"from": [{"podSelector": {"matchLabels": workers}}]}]
    if s.metrics_port and metrics_namespace:
        ingress.append(
            {
                "from": [
                    {
                        "namespaceSelector": {
                            "matchLabels": {"kubernetes.io/metadata.name": metrics_namespace}
                        }
                    }
                ],
                "ports": [{"protocol": "TCP", "port": s.metrics_port}],
            }
        )
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {
            "name": f"{s.name}-workers",
            "namespace": s.namespace,
            "labels": labels(s.name, COMPONENT),
        },
        "spec": {
            "podSelector": {"matchLabels": workers},
            "policyTypes": ["Ingress"],
            "ingress": ingress,
        },
    }


def pytorchjob_model(s: JobSettings, etcd_host: str) -> kf.KubeflowOrgV1PyTorchJob:
    """The PyTorchJob as SDK model objects."""
    host, port = rdzv_endpoint(s, etcd_host)
    elastic = kf.KubeflowOrgV1ElasticPolicy(
        rdzv_backend=s.rdzv_backend,
        rdzv_host=host,
        rdzv_port=port,
        rdzv_id=rdzv_id(s),
        rdzv_conf=[kf.KubeflowOrgV1RDZVConf(key=k, value=v) for k, v in rdzv_conf(s)] or None,
        min_replicas=s.min_workers,
        max_replicas=s.workers,
        max_restarts=s.max_restarts,
    )
    return kf.KubeflowOrgV1PyTorchJob(
        api_version=API_VERSION,
        kind=KIND,
        metadata=k8s.V1ObjectMeta(
            name=s.name,
            namespace=s.namespace,
            labels=labels(s.name, COMPONENT, {"eks-fsdp/generation": str(s.generation)}),
        ),
        spec=kf.KubeflowOrgV1PyTorchJobSpec(
            elastic_policy=elastic,
            nproc_per_node=str(nproc_per_node(s)),
            pytorch_replica_specs={
                "Worker": kf.KubeflowOrgV1ReplicaSpec(
                    replicas=s.workers,
                    restart_policy="OnFailure",
                    template=_pod_template(s),
                )
            },
            run_policy=kf.KubeflowOrgV1RunPolicy(
                # Running: pods still running when the job ends (a survivor waiting for a
                # peer that will never come) are deleted, finished ones kept for their logs.
                clean_pod_policy="Running",
                ttl_seconds_after_finished=s.ttl_after_finished_s,
                backoff_limit=backoff_limit(s.workers, s.max_restarts, s.rdzv_backend),
            ),
        ),
    )


def to_dict(model: Any) -> K8sObject:
    """An SDK model serialised the way the SDK sends it to the API server."""
    return ApiClient().sanitize_for_serialization(model)  # type: ignore[no-any-return]


def pytorchjob(s: JobSettings, etcd_host: str) -> K8sObject:
    """The complete PyTorchJob object."""
    return to_dict(pytorchjob_model(s, etcd_host))
