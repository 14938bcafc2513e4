"""A team's objects on the cluster, as plain data: its namespace and what may happen in it.

For each ``teams[]`` entry (``infra.config.teams``):

- the **Namespace** named for the team, and a **ServiceAccount** ``jobs`` its jobs' pods run
  as (no API token mounted: the training program never calls the Kubernetes API);
- a **NetworkPolicy** that denies traffic across namespaces, both ways: pods of the namespace
  reach each other (the workers' rendezvous and NCCL bootstrap), Prometheus in ``monitoring``
  scrapes them, and they reach DNS, the shared etcd (``default``, the job's rendezvous) and
  addresses outside the VPC and the service range (model hubs, S3); nothing else in the
  cluster. EFA traffic bypasses the kernel's network stack and is not subject to it. A second
  policy in the jobs namespace lets the team's training pods into etcd (policies add up; the
  stack's ``etcd-jobs`` admits only pods of its own namespace);
- a **Role** ``job-submitter`` and its **RoleBinding** to the Kubernetes group the team's EKS
  access entries carry (``group_name``): create, watch, patch (suspend) and delete PyTorchJobs
  and TrainJobs, the NetworkPolicy and record ConfigMap ``eks-fsdp jobs submit`` makes with
  each job, read pods, logs, events, claims, ServiceAccounts and the queue's state (Kueue
  Workloads, LocalQueues), in this namespace only; no Secret. The access entries
  (``workloads.team``) also associate ``AmazonEKSViewPolicy`` scoped to the namespace. EKS
  answers a member with the union of both: the access policies, evaluated by EKS's own
  authorizer, and the Roles bound to the entry's ``kubernetesGroups``, evaluated by RBAC (EKS
  API reference, ``CreateAccessEntry`` ``kubernetesGroups``). Why a Role of our own: an
  access policy is a fixed list of rules "similar to the Kubernetes user-facing cluster
  roles" (EKS user guide, "Review access policy permissions"), so no CRD's aggregated
  ClusterRole ever extends ``AmazonEKSEditPolicy``; the operators' CRDs do not aggregate to
  ``edit`` anyway (the training operator's v1.9.4 ``standalone`` overlay, which the stack
  installs, and Trainer v2.3.0's ``manager`` overlay ship no aggregated ClusterRole; their
  ``kubeflow``/``kubeflow-platform`` overlays aggregate to Kubeflow's own ``kubeflow-edit``);
  and ``edit`` would let a member create bare pods on the GPUs outside any queue. So members
  get ``view`` (read) from EKS and the job verbs from this Role
  (``tests/controlplane/test_team_namespace.py`` acts as a member on a real API server);
- on stacks with observability, a **Role** ``job-metrics-<team>`` and its RoleBinding in the
  metrics namespace (``metrics_objects``, applied after the observability stack): ``get`` on Prometheus' ``services/proxy`` only, which ``eks-fsdp jobs
  status`` and ``list`` use to read the team's jobs' progress;
- what a job's pods read in the namespace they run in, as the jobs namespace has it: on stacks
  with capacity blocks the **ConfigMaps** of the blocks' end (``workloads.specs.capacity``);
  on ``sharedStorage.type: fsx`` stacks the **checkpoint claim** on a volume of its own of
  the same file system (``checkpoint_volume``, ``storage_objects``: a claim cannot name a
  volume of another namespace); on stacks with ``hfToken`` the **Secret** ``hf-token``
  (``hf_token_secret``), the same token. ``workloads.team`` creates the last two (they need
  the file system's and the token's Outputs); ``eks-fsdp jobs submit --team`` checks the
  ones a job needs before it creates anything (``jobs.cluster.team_check``);
- a **LocalQueue** per GPU pool (``workloads.specs.kueue.team_local_queues``);
- three **ValidatingAdmissionPolicies** and their bindings (``workloads.specs.team_admission``):
  every job in the namespace names a queue, its pods stay unprivileged, and a member's
  Workloads keep their priority and queue.
"""

from __future__ import annotations

from typing import Any

from infra.config.teams import TeamConfig
from workloads.specs import capacity, etcd, kueue, pytorchjob, storage, team_admission
from workloads.specs.common import PART_OF, K8sObject
from workloads.specs.settings import ETCD_CLIENT_PORT, HF_TOKEN_KEY

TEAM_LABEL = team_admission.TEAM_LABEL
"""Label on a team's namespace (and objects) naming the team; the admission policies select
the namespace by it."""
SERVICE_ACCOUNT = pytorchjob.SERVICE_ACCOUNT
"""The ServiceAccount a team's job pods run as (``spec.serviceAccountName``)."""
ROLE = "job-submitter"
METRICS_ROLE = "job-metrics"
"""Prefix of the Role (``<prefix>-<team>``) in the metrics namespace that lets members query
Prometheus for their jobs' progress."""
PROMETHEUS_PORT = 9090
"""Prometheus' Service port (``jobs.cluster.metrics.PROMETHEUS_PORT``; a test checks)."""
NETWORK_POLICY = "deny-other-namespaces"
VIEW_POLICY_ARN = "arn:aws:eks::aws:cluster-access-policy/AmazonEKSViewPolicy"
"""The EKS access policy a member's access entry gets, scoped to the team's namespace."""
MONITORING_NAMESPACE = "monitoring"
"""Where Prometheus runs (``workloads.specs.observability.ObservabilitySettings.namespace``)."""
DNS_PORT = 53
ETCD_COMPONENT = etcd.COMPONENT
"""The label of the shared etcd's pods."""
TRAINING_COMPONENT = pytorchjob.COMPONENT
"""The label of every training pod."""

HF_TOKEN_SECRET = "hf-token"
"""The Secret holding the Hugging Face token, in the jobs namespace and each team's: the
default ``hfTokenSecretName`` of a job file (``jobs.schema``)."""

JOB_VERBS = ("get", "list", "watch", "create", "delete", "patch")
"""``patch``: ``eks-fsdp jobs suspend``/``unsuspend`` (``runPolicy.suspend``)."""


def group_name(team: str) -> str:
    """The Kubernetes group a team member's access entry carries (``kind: Group`` subject)."""
    return team_admission.member_group(team)


def _meta(name: str, team: TeamConfig, namespace: str | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "name": name,
        "labels": {
            "app.kubernetes.io/component": "team",
            "app.kubernetes.io/part-of": PART_OF,
            TEAM_LABEL: team.name,
        },
    }
    if namespace is not None:
        meta["namespace"] = namespace
    return meta


def namespace(team: TeamConfig) -> K8sObject:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": _meta(team.namespace, team)}


def service_account(team: TeamConfig) -> K8sObject:
    return {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": _meta(SERVICE_ACCOUNT, team, team.namespace),
        "automountServiceAccountToken": False,
    }


def _ns_selector(name: str) -> dict[str, Any]:
    return {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": name}}}


def network_policy(
    team: TeamConfig,
    *,
    private_cidrs: tuple[str, ...],
    jobs_namespace: str = kueue.JOBS_NAMESPACE,
    etcd_port: int = ETCD_CLIENT_PORT,
) -> K8sObject:
    """Default deny across namespaces for every pod of the team (see the module text);
    ``private_cidrs`` (the VPC and the service range) are cut out of the internet rule."""
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": _meta(NETWORK_POLICY, team, team.namespace),
        "spec": {
            "podSelector": {},
            "policyTypes": ["Ingress", "Egress"],
            "ingress": [
                {"from": [{"podSelector": {}}]},
                {"from": [_ns_selector(MONITORING_NAMESPACE)]},
            ],
            "egress": [
                {"to": [{"podSelector": {}}]},
                {
                    "to": [
                        {
                            **_ns_selector("kube-system"),
                            "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}},
                        }
                    ],
                    "ports": [
                        {"protocol": "UDP", "port": DNS_PORT},
                        {"protocol": "TCP", "port": DNS_PORT},
                    ],
                },
                {
                    "to": [
                        {
                            **_ns_selector(jobs_namespace),
                            "podSelector": {
                                "matchLabels": {"app.kubernetes.io/component": ETCD_COMPONENT}
                            },
                        }
                    ],
                    "ports": [{"protocol": "TCP", "port": etcd_port}],
                },
                {"to": [{"ipBlock": {"cidr": "0.0.0.0/0", "except": list(private_cidrs)}}]},
            ],
        },
    }


def etcd_policy(
    team: TeamConfig,
    *,
    jobs_namespace: str = kueue.JOBS_NAMESPACE,
    etcd_port: int = ETCD_CLIENT_PORT,
) -> K8sObject:
    """Ingress to the shared etcd from the team's training pods (in the jobs namespace)."""
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": _meta(f"etcd-team-{team.name}", team, jobs_namespace),
        "spec": {
            "podSelector": {"matchLabels": {"app.kubernetes.io/component": ETCD_COMPONENT}},
            "policyTypes": ["Ingress"],
            "ingress": [
                {
                    "from": [
                        {
                            **_ns_selector(team.namespace),
                            "podSelector": {
                                "matchLabels": {
                                    "app.kubernetes.io/component": TRAINING_COMPONENT,
                                    "app.kubernetes.io/part-of": PART_OF,
                                }
                            },
                        }
                    ],
                    "ports": [{"protocol": "TCP", "port": etcd_port}],
                }
            ],
        },
    }


def role(team: TeamConfig) -> K8sObject:
    """What a member may do in the team's namespace (and nowhere else)."""
    read = ["get", "list", "watch"]
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": _meta(ROLE, team, team.namespace),
        "rules": [
            {"apiGroups": ["kubeflow.org"], "resources": ["pytorchjobs"], "verbs": list(JOB_VERBS)},
            {
                "apiGroups": ["trainer.kubeflow.org"],
                "resources": ["trainjobs"],
                "verbs": list(JOB_VERBS),
            },
            {
                "apiGroups": ["networking.k8s.io"],
                "resources": ["networkpolicies"],
                "verbs": ["get", "list", "create", "delete"],
            },
            # a job on an efa: dra pool: its workers' EFA claim template (jobs.cluster.efa_claim
            # creates it, and reads and deletes an earlier generation's leftover)
            {
                "apiGroups": ["resource.k8s.io"],
                "resources": ["resourceclaimtemplates"],
                "verbs": ["get", "list", "create", "delete"],
            },
            {
                "apiGroups": [""],
                "resources": ["configmaps"],
                "verbs": list(JOB_VERBS),
            },
            {"apiGroups": [""], "resources": ["pods", "pods/log", "events"], "verbs": read},
            # what `jobs submit --team` checks before it creates a job (jobs.cluster.team_check): the
            # claim and the ServiceAccount its pods use (AmazonEKSViewPolicy grants the same
            # on EKS; no Secret: a member never reads the token through the API)
            {
                "apiGroups": [""],
                "resources": ["persistentvolumeclaims", "serviceaccounts"],
                "verbs": read,
            },
            {"apiGroups": ["kueue.x-k8s.io"], "resources": ["localqueues"], "verbs": read},
            # patch: suspend/unsuspend of a queued job sets its Workload's spec.active (the
            # workload policy refuses a member's change of its priority or queue)
            {
                "apiGroups": ["kueue.x-k8s.io"],
                "resources": ["workloads"],
                "verbs": [*read, "patch"],
            },
        ],
    }


def metrics_role(team: TeamConfig) -> K8sObject:
    """Read access to the cluster's Prometheus API through the API server's service proxy, in
    the metrics namespace: ``eks-fsdp jobs status``/``list`` read a job's progress there
    (``jobs.cluster.metrics``), since the workers' NetworkPolicy keeps the pod proxy out. RBAC
    names the subresource ``services/proxy``; ``resourceNames`` holds the Service both as
    named and as ``<service>:<port>``, the two forms a proxy request's name takes."""
    from workloads.specs.observability import ObservabilitySettings

    obs = ObservabilitySettings()
    service = obs.prometheus_service
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": _meta(f"{METRICS_ROLE}-{team.name}", team, obs.namespace),
        "rules": [
            {
                "apiGroups": [""],
                "resources": ["services/proxy"],
                "resourceNames": [service, f"{service}:{PROMETHEUS_PORT}"],
                "verbs": ["get"],
            }
        ],
    }


def metrics_role_binding(team: TeamConfig) -> K8sObject:
    role_obj = metrics_role(team)
    name = role_obj["metadata"]["name"]
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": _meta(name, team, role_obj["metadata"]["namespace"]),
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
        "subjects": [
            {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "Group",
                "name": group_name(team.name),
            }
        ],
    }


def role_binding(team: TeamConfig) -> K8sObject:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": _meta(ROLE, team, team.namespace),
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": ROLE},
        "subjects": [
            {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "Group",
                "name": group_name(team.name),
            }
        ],
    }


def private_cidrs(stack_cfg: Any) -> tuple[str, ...]:
    """The stack's VPC and Kubernetes service ranges."""
    return (stack_cfg.vpc_cidr, stack_cfg.kubernetes_service_cidr)


def checkpoint_volume(team: TeamConfig, stack_cfg: Any) -> storage.CheckpointVolumeSettings | None:
    """The team's checkpoint claim on an fsx stack (the jobs namespace's claim, in the team's
    namespace, on a volume of its own), None on a stack without shared storage."""
    from workloads.specs.stack import platform

    volume = platform(stack_cfg, image="")["checkpoint_volume"]
    return None if volume is None else storage.in_namespace(volume, team.namespace)


def storage_objects(team: TeamConfig, stack_cfg: Any, fs: storage.FileSystemRef) -> list[K8sObject]:
    """The team's checkpoint volume and claim on file system ``fs`` (none without shared
    storage): what ``workloads.team`` creates once the file system's Outputs resolve."""
    volume = checkpoint_volume(team, stack_cfg)
    return [] if volume is None else storage.objects(volume, fs)


def hf_token_secret(team: TeamConfig, token: Any) -> K8sObject:
    """The Secret ``hf-token`` in the team's namespace holding ``token`` (the stack's
    ``hfToken``; ``workloads.team`` passes it as a secret Output)."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": _meta(HF_TOKEN_SECRET, team, team.namespace),
        "type": "Opaque",
        "stringData": {HF_TOKEN_KEY: token},
    }


def objects(team: TeamConfig, stack_cfg: Any) -> list[K8sObject]:
    """Every Kubernetes object of ``team`` on ``stack_cfg`` that needs no Output (the
    Namespace first, then the admission policies, the LocalQueues last): ``storage_objects`` and ``hf_token_secret`` are
    apart."""
    return [
        namespace(team),
        *team_admission.objects(team.name),
        service_account(team),
        network_policy(team, private_cidrs=private_cidrs(stack_cfg)),
        etcd_policy(team),
        role(team),
        role_binding(team),
        *capacity.configmaps(stack_cfg.gpu_node_groups, team.namespace),
        *kueue.team_local_queues(team, stack_cfg.gpu_node_groups),
    ]


def metrics_objects(team: TeamConfig, stack_cfg: Any) -> list[K8sObject]:
    """The team's objects in the metrics namespace (``metrics_role`` and its binding) on a
    stack with observability, none otherwise. Apart from ``objects``: they live in a namespace
    the observability stack creates, so whatever applies them must come after it."""
    if not getattr(getattr(stack_cfg, "observability", None), "enabled", False):
        return []
    return [metrics_role(team), metrics_role_binding(team)]
