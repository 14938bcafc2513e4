"""The etcd server of the rendezvous: Deployment, Service, NetworkPolicy and an optional PVC.

etcd is pinned to 3.5.x and started with ``--enable-v2=true``: torch's ``etcd``/``etcd-v2``
rendezvous backends speak the v2 API (python-etcd), which 3.6 removed and 3.5 serves only when
asked. One member, ``Recreate`` strategy (a ReadWriteOnce claim cannot be shared by two pods).
The pod is confined: it runs as nobody (65534, which also owns the data volume through
``fsGroup``), read-only root file system, no capabilities, no privilege escalation,
RuntimeDefault seccomp and no service-account token (etcd calls no Kubernetes API).

The job's rendezvous handlers (``etcd-ft``/``etcd-v2-ft``, docs/adr/0005-rendezvous-backend.md)
carry a running job through an etcd outage up to their ``store_outage_timeout`` (300 s); longer
ones cost every pod a restart. So while a job uses it the pod is still protected from voluntary
disruption: a PodDisruptionBudget with ``minAvailable: 1`` makes ``kubectl drain`` and managed
node-group upgrades wait instead of evicting it, and a PriorityClass above the default keeps the
scheduler from preempting it for other pods.
"""

from __future__ import annotations

from workloads.specs.common import K8sObject, labels
from workloads.specs.settings import EtcdSettings

COMPONENT = "rendezvous"
PRIORITY_CLASS = "eks-fsdp-rendezvous"
PRIORITY = 1_000_000
"""Above every default (0) workload, well below system-cluster-critical (2,000,000,000)."""
DATA_DIR = "/var/run/etcd"
NOBODY = 65534
"""UID/GID etcd runs as."""
SKIPS: dict[str, str] = {
    "CKV_K8S_116": "rendezvous store, not a cluster's etcd: plain HTTP for torch's python-etcd"
    " client; only the job's pods reach it (NetworkPolicy, enforced by the VPC CNI); it holds"
    " membership and ranks, no secrets, and dies with the job",
    "CKV_K8S_117": "no TLS at all (see CKV_K8S_116), so no auto-TLS either",
    "CKV_K8S_119": "a single member whose peer URL is 127.0.0.1: no peer traffic leaves the pod",
    "CKV_K8S_11": "no CPU limit: CFS throttling of the only etcd member stalls every worker's"
    " rendezvous keep-alive; the request reserves its CPU",
}
"""checkov checks the etcd Deployment fails on purpose (annotations on it, with the reason)."""
JOB_NAME_LABEL = "training.kubeflow.org/job-name"
"""Label the training operator puts on every pod of a job."""


def _selector(s: EtcdSettings) -> dict[str, str]:
    return {"app.kubernetes.io/name": s.name, "app.kubernetes.io/component": COMPONENT}


def command(s: EtcdSettings) -> list[str]:
    """The etcd command line (single member, v2 API on, clients on every interface)."""
    return [
        "etcd",
        f"--name={s.name}",
        f"--data-dir={DATA_DIR}/data",
        "--enable-v2=true",
        f"--listen-client-urls=http://0.0.0.0:{s.client_port}",
        f"--advertise-client-urls=http://{s.host}:{s.client_port}",
        f"--listen-peer-urls=http://127.0.0.1:{s.peer_port}",
        f"--initial-advertise-peer-urls=http://127.0.0.1:{s.peer_port}",
        f"--initial-cluster={s.name}=http://127.0.0.1:{s.peer_port}",
        "--initial-cluster-state=new",
    ]


def deployment(s: EtcdSettings) -> K8sObject:
    """The etcd Deployment (one replica, readiness and liveness on ``/health``)."""
    probe = {
        "httpGet": {"path": "/health", "port": s.client_port},
        "periodSeconds": 5,
        "timeoutSeconds": 3,
    }
    if s.storage_size:
        data_volume = {"name": "data", "persistentVolumeClaim": {"claimName": f"{s.name}-data"}}
    else:
        data_volume = {"name": "data", "emptyDir": {}}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": s.name,
            "namespace": s.namespace,
            "labels": labels(s.name, COMPONENT),
            "annotations": {
                f"checkov.io/skip{i}": f"{check}={reason}"
                for i, (check, reason) in enumerate(sorted(SKIPS.items()), start=1)
            },
        },
        "spec": {
            "replicas": 1,
            "strategy": {"type": "Recreate"},
            "selector": {"matchLabels": _selector(s)},
            "template": {
                "metadata": {"labels": labels(s.name, COMPONENT)},
                "spec": {
                    "priorityClassName": PRIORITY_CLASS,
                    "automountServiceAccountToken": False,
                    "securityContext": {
                        "runAsNonRoot": True,
                        "runAsUser": NOBODY,
                        "runAsGroup": NOBODY,
                        "fsGroup": NOBODY,
                        "seccompProfile": {"type": "RuntimeDefault"},
                    },
                    "containers": [
                        {
                            "name": "etcd",
                            "image": s.image,
                            "imagePullPolicy": "IfNotPresent",
                            "command": command(s),
                            "ports": [{"name": "client", "containerPort": s.client_port}],
                            "readinessProbe": {**probe, "initialDelaySeconds": 2},
                            "livenessProbe": {**probe, "initialDelaySeconds": 15},
                            "resources": {
                                "requests": {"cpu": s.cpu_request, "memory": s.memory_request},
                                "limits": {"memory": s.memory_request},
                            },
                            "volumeMounts": [{"name": "data", "mountPath": DATA_DIR}],
                            "securityContext": {
                                "allowPrivilegeEscalation": False,
                                "privileged": False,
                                "readOnlyRootFilesystem": True,
                                "capabilities": {"drop": ["ALL"]},
                            },
                        }
                    ],
                    "volumes": [data_volume],
                },
            },
        },
    }


def service(s: EtcdSettings) -> K8sObject:
    """The client Service (``<name>:2379``) the PyTorchJob's rdzvHost points at."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": s.name, "namespace": s.namespace, "labels": labels(s.name, COMPONENT)},
        "spec": {
            "selector": _selector(s),
            "ports": [
                {
                    "name": "client",
                    "port": s.client_port,
                    "targetPort": s.client_port,
                    "protocol": "TCP",
                }
            ],
        },
    }


def network_policy(s: EtcdSettings) -> K8sObject:
    """Only the pods of the listed PyTorchJobs may reach etcd's client port."""
    ingress: list[dict[str, object]] = []
    if s.client_job_names:
        ingress.append(
            {
                "from": [
                    {
                        "podSelector": {
                            "matchExpressions": [
                                {
                                    "key": JOB_NAME_LABEL,
                                    "operator": "In",
                                    "values": sorted(s.client_job_names),
                                }
                            ]
                        }
                    }
                ],
                "ports": [{"protocol": "TCP", "port": s.client_port}],
            }
        )
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": s.name, "namespace": s.namespace, "labels": labels(s.name, COMPONENT)},
        "spec": {
            "podSelector": {"matchLabels": _selector(s)},
            "policyTypes": ["Ingress"],
            "ingress": ingress,
        },
    }


def pod_disruption_budget(s: EtcdSettings) -> K8sObject:
    """No voluntary eviction of the (single) etcd pod: drains wait for it to be moved by hand."""
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": s.name, "namespace": s.namespace, "labels": labels(s.name, COMPONENT)},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": _selector(s)}},
    }


def priority_class(s: EtcdSettings) -> K8sObject:
    """The cluster-wide priority of the rendezvous server (never preempted by training pods)."""
    return {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": {"name": PRIORITY_CLASS, "labels": labels(s.name, COMPONENT)},
        "value": PRIORITY,
        "globalDefault": False,
        "preemptionPolicy": "PreemptLowerPriority",
        "description": "etcd rendezvous of eks-fsdp training jobs: a restart fails the job.",
    }


def pvc(s: EtcdSettings) -> K8sObject | None:
    """The data claim when ``storage_size`` is set, else None."""
    if not s.storage_size:
        return None
    spec: dict[str, object] = {
        "accessModes": ["ReadWriteOnce"],
        "resources": {"requests": {"storage": s.storage_size}},
    }
    if s.storage_class:
        spec["storageClassName"] = s.storage_class
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {
            "name": f"{s.name}-data",
            "namespace": s.namespace,
            "labels": labels(s.name, COMPONENT),
        },
        "spec": spec,
    }


def objects(s: EtcdSettings) -> list[K8sObject]:
    """Every object of the etcd component, in apply order."""
    claim = pvc(s)
    return [
        priority_class(s),
        *([claim] if claim else []),
        deployment(s),
        service(s),
        network_policy(s),
        pod_disruption_budget(s),
    ]
