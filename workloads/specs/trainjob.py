"""Kubeflow Trainer v2: the project's ``ClusterTrainingRuntime`` for torch and a job's
``TrainJob`` (``trainer.kubeflow.org/v1alpha1`` at ``TRAINER_V2_VERSION``), as plain data.

What a job file with ``api: v2`` renders instead of the v1 PyTorchJob. Names and fields are
Trainer's at the tag (github.com/kubeflow/trainer ``pkg/apis/trainer/v1alpha1/
trainjob_types.go`` and ``trainingruntime_types.go``; its own ``manifests/base/runtimes/
torch_distributed.yaml`` is the model of the runtime):

- the **runtime** (``eks-fsdp-torch``) is a JobSet of one replicated job ``node`` whose pods
  carry the ancestor label ``trainer.kubeflow.org/trainjob-ancestor-step: trainer`` and one
  container ``node`` (``constants.AncestorTrainer``, ``constants.Node``), with ``mlPolicy.torch``:
  Trainer's torch plugin (``pkg/runtime/framework/plugins/torch/torch.go``) then injects
  ``PET_NNODES`` (= ``numNodes``, fixed), ``PET_NPROC_PER_NODE``, ``PET_NODE_RANK`` (the Job
  completion index), ``PET_MASTER_ADDR`` (``<job>-node-0-0.<job>``) and ``PET_MASTER_PORT``
  (29500), and refuses those names in the TrainJob's own env (``TorchRunReservedEnvNames``);
- the **TrainJob** names the runtime and sets, per job, what the v1 PyTorchJob's pod template
  holds: the same image, the same command (``python -m training.launch -m training.finetune
  <flags>``, torchrun reading the ``PET_*`` variables: with a master address and no rendezvous
  backend torchrun uses its ``static`` rendezvous, so ``--rdzv-backend`` is left out), the same
  env (``workloads.specs.pytorchjob.container_env``: the same variables the training package
  reads), ``numNodes`` = workers, ``numProcPerNode``, ``resourcesPerNode`` (GPUs, EFA devices,
  cpu and memory); the node selector, tolerations, volumes (checkpoint claim, ``/dev/shm``),
  security contexts and pod labels and annotations go in a ``runtimePatches`` entry.

**Kueue round-trips the TrainJob through older types.** Kueue ``KUEUE_VERSION`` is built against
Trainer ``KUEUE_TRAINER_VERSION`` (sigs.k8s.io/kueue ``go.mod`` at v0.17.0:
``github.com/kubeflow/trainer/v2 v2.2.0``) and admits a TrainJob by writing the whole object
back with a full ``Update`` of those types (``pkg/controller/jobs/trainjob/
trainjob_controller.go``, ``RunWithPodSetsInfo``): a field the v2.2.0 ``PodSpecPatch``
(``pkg/apis/trainer/v1alpha1/trainjob_types.go`` at v2.2.0) lacks is dropped there, silently.
v2.3.0 added ``terminationGracePeriodSeconds`` to that type; v2.2.0 has only
``serviceAccountName``, ``volumes``, ``initContainers``, ``containers``, ``imagePullSecrets``,
``securityContext``, ``nodeSelector``, ``affinity``, ``tolerations`` and ``schedulingGates``.
The stricter of the two wins: the patch carries only v2.2.0's fields (``validate`` checks both
objects against the v2.2.0 CRDs too, vendored in ``workloads/manifests/trainer/crds-kueue``:
Kueue also reads the runtime through those types to count the job's pods),
and the grace period lives in the runtime's pod template: ``RUNTIME_GRACE_S``, the longest
grace any job's preemption budget asks for (``workloads.specs.preemption.MAX_GRACE_S``). A
grace period is an upper bound: the pod is gone as soon as torchrun has stopped its workers
(``TORCH_ELASTIC_SHUTDOWN_TIMEOUT``, per job in the env) and exited; only a hung agent waits
it out. A job asking for more than the runtime gives is refused in one line.

Trainer v2 has no elastic policy (v2.2 removed ``ElasticPolicy``): a job whose ``minWorkers`` is
below ``workers`` stays on v1 (``jobs.schema`` refuses it with ``api: v2``). ``validate`` checks an
object against the vendored CRD's ``v1alpha1`` schema, strictly (unknown fields fail); the CEL
rules are the API server's. ``kustomization`` is the cluster install (``workloads.trainer``,
opt-in): the upstream manager overlay at the tag and the runtime. The Trainer v2 controller (and
JobSet) is not run on the local control plane: building it from its Go module was left out.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import yaml

from workloads.specs import pytorchjob as pj
from workloads.specs.common import K8sObject, labels
from workloads.specs.preemption import MAX_GRACE_S
from workloads.specs.settings import JobSettings

API_VERSION = "trainer.kubeflow.org/v1alpha1"
GROUP = "trainer.kubeflow.org"
RUNTIME = "eks-fsdp-torch"
"""The ClusterTrainingRuntime every ``api: v2`` job names."""
NODE = "node"
"""The replicated job and its container (Trainer's ``constants.Node``)."""
ANCESTOR_LABEL = "trainer.kubeflow.org/trainjob-ancestor-step"
ANCESTOR_TRAINER = "trainer"
FRAMEWORK_LABEL = "trainer.kubeflow.org/framework"
MANAGER = "eks-fsdp.io/jobs"
"""``runtimePatches[].manager``: who wrote the patch (required, 1..253 characters)."""
RESERVED_ENV = frozenset(
    {"PET_NNODES", "PET_NPROC_PER_NODE", "PET_NODE_RANK", "PET_MASTER_ADDR", "PET_MASTER_PORT"}
)
"""The torch plugin's ``TorchRunReservedEnvNames`` (``pkg/constants/constants.go``)."""
CRD_DIR = Path(__file__).resolve().parents[1] / "manifests" / "trainer" / "crds"
KINDS = {"TrainJob": "trainjobs", "ClusterTrainingRuntime": "clustertrainingruntimes"}
KUEUE_TRAINER_VERSION = "v2.2.0"
"""The Trainer API Kueue ``KUEUE_VERSION`` is built against (its ``go.mod``)."""
KUEUE_CRD_DIR = CRD_DIR.parent / "crds-kueue"
"""The TrainJob CRD at ``KUEUE_TRAINER_VERSION`` (``manifests/base/crds`` of the module)."""
RUNTIME_GRACE_S = MAX_GRACE_S
"""``terminationGracePeriodSeconds`` of the runtime's pods: the longest any job asks for."""
PATCH_POD_FIELDS = ("nodeSelector", "tolerations", "volumes", "securityContext")
"""The pod fields of a job's runtime patch (all in v2.2.0's ``PodSpecPatch``)."""


def cluster_training_runtime() -> K8sObject:
    """The runtime the cluster stack installs: JobSet ``node`` x ``numNodes``, torch policy,
    the grace period ``RUNTIME_GRACE_S``; everything else per job comes from the TrainJob."""
    return {
        "apiVersion": API_VERSION,
        "kind": "ClusterTrainingRuntime",
        "metadata": {
            "name": RUNTIME,
            "labels": {FRAMEWORK_LABEL: "torch", "app.kubernetes.io/part-of": "eks-fsdp"},
        },
        "spec": {
            "mlPolicy": {"numNodes": 1, "torch": {}},
            "template": {
                "spec": {
                    "replicatedJobs": [
                        {
                            "name": NODE,
                            "template": {
                                "metadata": {"labels": {ANCESTOR_LABEL: ANCESTOR_TRAINER}},
                                "spec": {
                                    "template": {
                                        "spec": {
                                            "terminationGracePeriodSeconds": RUNTIME_GRACE_S,
                                            "automountServiceAccountToken": False,
                                            "containers": [{"name": NODE}],
                                        }
                                    }
                                },
                            },
                        }
                    ]
                }
            },
        },
    }


MANIFEST_DIR = Path(__file__).resolve().parents[1] / "manifests" / "trainer"
"""``kustomization.yaml`` (the upstream overlay and the runtime) and ``runtime.yaml``."""


def kustomization() -> dict[str, Any]:
    """The ``kustomization.yaml`` of the Trainer v2 install (not a Kubernetes object): the
    upstream manager overlay at the tag (controller, CRDs, JobSet) and the project's runtime."""
    from infra import versions

    return {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "resources": [versions.TRAINER_V2_KUSTOMIZE_URL, "runtime.yaml"],
        "labels": [{"pairs": {"app.kubernetes.io/part-of": "eks-fsdp"}, "includeSelectors": False}],
    }


def manifest_files() -> dict[str, str]:
    """What ``workloads/manifests/trainer`` holds besides the CRDs (a test keeps them equal)."""
    head = "# Written from workloads.specs.trainjob.{}(); a test keeps the two equal.\n"
    return {
        "kustomization.yaml": head.format("kustomization")
        + yaml.safe_dump(kustomization(), sort_keys=False),
        "runtime.yaml": head.format("cluster_training_runtime")
        + yaml.safe_dump(cluster_training_runtime(), sort_keys=False),
    }


def trainjob(s: JobSettings) -> K8sObject:
    """A job's TrainJob (fixed world size: ``s.workers`` nodes)."""
    if s.min_workers < s.workers:
        raise ValueError(
            f"job.minWorkers: {s.min_workers} < workers {s.workers}: Trainer v2 has no elastic "
            "policy (api: v1)"
        )
    if s.efa_dra:
        # Trainer v2.2's PodSpecPatch (the vendored CRD) has no resourceClaims
        raise ValueError(
            "job.api: v2 on an efa: dra node group: a TrainJob's pod patch cannot reference "
            "the EFA ResourceClaimTemplate (Trainer v2.2 PodSpecPatch): use api: v1"
        )
    static = s.replace(rdzv_backend="c10d")  # no --rdzv-backend flag: torchrun's static one
    template = pj.to_dict(pj._pod_template(static))
    pod, meta = template["spec"], template.get("metadata") or {}
    if pod["terminationGracePeriodSeconds"] > RUNTIME_GRACE_S:
        raise ValueError(
            f"job.termination_grace_s: {pod['terminationGracePeriodSeconds']} s is more than the "
            f"{RUNTIME_GRACE_S} s of ClusterTrainingRuntime {RUNTIME} (a TrainJob cannot set it "
            "through Kueue): use api: v1"
        )
    (container,) = pod.pop("containers")
    env = [e for e in container.get("env") or [] if e["name"] not in RESERVED_ENV]
    patch_pod = {k: pod[k] for k in PATCH_POD_FIELDS if pod.get(k) is not None}
    patch_pod["containers"] = [
        {
            "name": NODE,
            "volumeMounts": container["volumeMounts"],
            "securityContext": container["securityContext"],
        }
    ]
    return {
        "apiVersion": API_VERSION,
        "kind": "TrainJob",
        "metadata": {
            "name": s.name,
            "namespace": s.namespace,
            "labels": labels(s.name, pj.COMPONENT, {"eks-fsdp/generation": str(s.generation)}),
        },
        "spec": {
            "runtimeRef": {"name": RUNTIME, "apiGroup": GROUP, "kind": "ClusterTrainingRuntime"},
            "trainer": {
                "image": s.image,
                "command": container["command"],
                "env": env,
                "numNodes": s.workers,
                "numProcPerNode": pj.nproc_per_node(s),
                "resourcesPerNode": container["resources"],
            },
            "runtimePatches": [
                {
                    "manager": MANAGER,
                    "trainingRuntimeSpec": {
                        "template": {
                            "spec": {
                                "replicatedJobs": [
                                    {
                                        "name": NODE,
                                        "template": {
                                            "spec": {
                                                "template": {
                                                    "metadata": {
                                                        k: v
                                                        for k, v in meta.items()
                                                        if k in ("labels", "annotations")
                                                    },
                                                    "spec": patch_pod,
                                                }
                                            }
                                        },
                                    }
                                ]
                            }
                        }
                    },
                }
            ],
        },
    }


def pod_spec_patch(job: K8sObject) -> dict[str, Any]:
    """The pod-spec patch of a TrainJob this module built (its node selector, volumes...)."""
    patch = job["spec"]["runtimePatches"][0]["trainingRuntimeSpec"]["template"]["spec"]
    return patch["replicatedJobs"][0]["template"]["spec"]["template"]  # type: ignore[no-any-return]


# --- validation against the vendored CRDs ------------------------------------------------------


@functools.cache
def crd(kind: str) -> dict[str, Any]:
    path = CRD_DIR / f"{GROUP}_{KINDS[kind]}.yaml"
    return yaml.safe_load(path.read_text())  # type: ignore[no-any-return]


@functools.cache
def _validator(kind: str) -> Any:
    from workloads.specs.validate import crd_validator

    return crd_validator(crd(kind), "v1alpha1")


@functools.cache
def kueue_crd(kind: str) -> dict[str, Any]:
    """The CRD of ``kind`` at ``KUEUE_TRAINER_VERSION``."""
    path = KUEUE_CRD_DIR / f"{GROUP}_{KINDS[kind]}.yaml"
    return yaml.safe_load(path.read_text())  # type: ignore[no-any-return]


@functools.cache
def _kueue_validator(kind: str) -> Any:
    from workloads.specs.validate import crd_validator

    return crd_validator(kueue_crd(kind), "v1alpha1")


KUEUE_READS = {
    "TrainJob": "Kueue writes it back without the field",
    "ClusterTrainingRuntime": "Kueue computes the job's pod sets without the field",
}
"""What Kueue does with each kind through ``KUEUE_TRAINER_VERSION``'s types: a TrainJob is
updated whole (``RunWithPodSetsInfo``), a runtime read to build the JobSet whose pods Kueue
counts against the quota (``getChildJobSet``: Trainer v2.2.0's own runtime code)."""


def validate(obj: K8sObject) -> None:
    """Check a TrainJob or ClusterTrainingRuntime against its CRD at the pin, then against the
    CRD of ``KUEUE_TRAINER_VERSION``, the types Kueue reads and writes it with."""
    from workloads.specs.validate import ValidationError, validate_custom

    validate_custom(obj, api_version=API_VERSION, kinds=KINDS, crd=crd, validator=_validator)
    try:
        validate_custom(
            obj, api_version=API_VERSION, kinds=KINDS, crd=kueue_crd, validator=_kueue_validator
        )
    except ValidationError as err:
        why = KUEUE_READS[str(obj["kind"])]
        raise ValidationError(f"{err} (Trainer {KUEUE_TRAINER_VERSION}: {why})") from None


INSTALL_DIR = "trainer-v2"
"""``eks-fsdp render``'s folder for the install (stacks with ``trainerV2: true``)."""


def write_install(out: Path) -> list[Path]:
    """Write the Trainer v2 install (``manifest_files``: the upstream overlay at the pin and the
    runtime, validated) under ``out/trainer-v2``; ``kubectl apply --server-side -k`` applies it."""
    validate(cluster_training_runtime())
    folder = out / INSTALL_DIR
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for name, text in manifest_files().items():
        written.append(folder / name)
        written[-1].write_text(text)
    return written
