"""``Team``: one team's share of the cluster, its namespace, queues and people.

The Kubernetes objects are ``workloads.specs.teams.objects`` (Namespace, ServiceAccount,
NetworkPolicies, Role and RoleBinding, capacity-block ConfigMaps, a LocalQueue per GPU pool)
and what a job's pods mount from the stack's Outputs: on fsx stacks the team's checkpoint claim
on a PersistentVolume of its own of the file system (``workloads.specs.teams.
checkpoint_volume``), on stacks with ``hfToken`` the Secret ``hf-token`` with the same token
(``workloads.specs.teams.hf_token_secret``). Each principal of the team
gets an EKS access entry (``aws.eks.AccessEntry``, type ``STANDARD``) carrying the team's
Kubernetes group, which the RoleBinding names, and ``AmazonEKSViewPolicy`` associated with
``accessScope`` type ``namespace`` on the team's namespace only (EKS user guide, "Associate
access policies with access entries": a namespace-scoped association grants its rules in the
listed namespaces). The cluster must use the ``API`` authentication mode (``infra.cluster``
sets it). Give the component the Kubernetes provider through ``ResourceOptions(providers=...)``
and ``depends_on`` the ``Kueue`` component (the LocalQueues need its CRDs).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_aws as aws
import pulumi_kubernetes as k8s

from infra.config.teams import TeamConfig
from workloads.kueue import apply_object, resource_name
from workloads.specs import kueue, storage
from workloads.specs import teams as spec
from workloads.specs.common import K8sObject
from workloads.specs.storage import CheckpointVolumeSettings
from workloads.specs.validate import validate as validate_builtin

TYPE_TOKEN = "eks-fsdp:workloads:Team"


def _apply(prefix: str, obj: K8sObject, opts: pulumi.ResourceOptions) -> pulumi.Resource:
    """``workloads.kueue.apply_object``, and the capacity-block ConfigMaps (plain data)."""
    if (obj["apiVersion"], obj["kind"]) == ("v1", "ConfigMap"):
        return k8s.core.v1.ConfigMap(
            resource_name(prefix, obj), metadata=obj["metadata"], data=obj["data"], opts=opts
        )
    return apply_object(prefix, obj, opts)


@dataclass(frozen=True, kw_only=True)
class TeamArgs:
    """Arguments of ``Team``."""

    team: TeamConfig
    """The team (``infra.config.teams``)."""
    objects: tuple[K8sObject, ...]
    """Its Kubernetes objects (``workloads.specs.teams.objects``), the Namespace first."""
    cluster_name: pulumi.Input[str]
    """The EKS cluster the access entries belong to."""
    kubernetes_version: str
    """The cluster's version, for validating the built-in objects."""
    metrics_objects: tuple[K8sObject, ...] = ()
    """Its read access to the cluster's Prometheus (``workloads.specs.teams.metrics_objects``:
    a Role and RoleBinding in the metrics namespace), for ``jobs status`` progress."""
    metrics_after: tuple[pulumi.Resource, ...] = ()
    """What creates the metrics namespace (the observability component): the metrics objects
    wait for it."""
    checkpoint_volume: CheckpointVolumeSettings | None = None
    """The team's checkpoint claim (``workloads.specs.teams.checkpoint_volume``); None without
    shared storage."""
    shared_storage: Any | None = None
    """The file system (``file_system_id``, ``dns_name``, ``mount_name`` Outputs of
    ``infra.shared_storage.SharedStorage``); required with ``checkpoint_volume``."""
    hf_token: pulumi.Input[str] | None = None
    """The stack's Hugging Face token (``hfToken``), copied into the namespace; None: none."""

    def __post_init__(self) -> None:
        if not self.team.principal_arns:
            raise ValueError(f"TeamArgs.team: {self.team.name} has no principal")
        if not self.objects or self.objects[0]["kind"] != "Namespace":
            raise ValueError("TeamArgs.objects: the team's Namespace must come first")
        if self.objects[0]["metadata"]["name"] != self.team.namespace:
            raise ValueError("TeamArgs.objects: the Namespace is not the team's")
        if self.checkpoint_volume is not None:
            if self.checkpoint_volume.namespace != self.team.namespace:
                raise ValueError("TeamArgs.checkpoint_volume: the claim is not in the team's")
            if self.shared_storage is None:
                raise ValueError("TeamArgs.shared_storage: required with checkpoint_volume")
        for obj in self.metrics_objects:
            validate_builtin(obj, self.kubernetes_version)
        for obj in self.objects:
            if kueue.is_kueue(obj):
                kueue.validate(obj)
            else:
                validate_builtin(obj, self.kubernetes_version)

    @classmethod
    def from_stack(
        cls,
        team: TeamConfig,
        stack_cfg: Any,
        cluster_name: Any,
        metrics_after: tuple[pulumi.Resource, ...] = (),
        shared_storage: Any | None = None,
    ) -> TeamArgs:
        """The team's arguments on ``stack_cfg``; ``shared_storage`` is the stack's
        ``SharedStorage`` (required on fsx stacks)."""
        return cls(
            team=team,
            objects=tuple(spec.objects(team, stack_cfg)),
            cluster_name=cluster_name,
            kubernetes_version=stack_cfg.kubernetes_version,
            metrics_objects=tuple(spec.metrics_objects(team, stack_cfg)),
            metrics_after=metrics_after,
            checkpoint_volume=spec.checkpoint_volume(team, stack_cfg),
            shared_storage=shared_storage,
            hf_token=stack_cfg.secrets.hf_token,
        )


class Team(pulumi.ComponentResource):
    """A team's namespace, queues, RBAC, network isolation and EKS access entries."""

    namespace: pulumi.Output[str]
    """The team's namespace."""
    access_entries: list[aws.eks.AccessEntry]
    """One per principal."""

    def __init__(self, name: str, args: TeamArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__(TYPE_TOKEN, name, {}, opts)
        child = pulumi.ResourceOptions(parent=self)
        ns, *rest = args.objects
        self.ns = apply_object(name, ns, child)
        in_ns = pulumi.ResourceOptions(parent=self, depends_on=[self.ns])
        self.objects = [_apply(name, obj, in_ns) for obj in rest]
        after = pulumi.ResourceOptions(parent=self, depends_on=[self.ns, *args.metrics_after])
        self.objects += [apply_object(name, obj, after) for obj in args.metrics_objects]
        self.volume = self.claim = None
        if args.checkpoint_volume is not None:
            self.volume, self.claim = self._checkpoint_volume(name, args, in_ns)
        self.hf_token = None
        if args.hf_token is not None:
            secret = spec.hf_token_secret(args.team, pulumi.Output.secret(args.hf_token))
            self.hf_token = k8s.core.v1.Secret(
                f"{name}-hf-token",
                metadata=secret["metadata"],
                type=secret["type"],
                string_data=secret["stringData"],
                opts=in_ns,
            )
        self.access_entries = []
        self.policy_associations = []
        for i, arn in enumerate(args.team.principal_arns):
            entry = aws.eks.AccessEntry(
                f"{name}-access-{i}",
                cluster_name=args.cluster_name,
                principal_arn=arn,
                type="STANDARD",
                kubernetes_groups=[spec.group_name(args.team.name)],
                opts=child,
            )
            self.access_entries.append(entry)
            self.policy_associations.append(
                aws.eks.AccessPolicyAssociation(
                    f"{name}-view-{i}",
                    cluster_name=args.cluster_name,
                    principal_arn=entry.principal_arn,
                    policy_arn=spec.VIEW_POLICY_ARN,
                    access_scope=aws.eks.AccessPolicyAssociationAccessScopeArgs(
                        type="namespace", namespaces=[args.team.namespace]
                    ),
                    opts=child,
                )
            )
        self.namespace = pulumi.Output.from_input(args.team.namespace)
        self.register_outputs({"namespace": self.namespace})

    def _checkpoint_volume(
        self, name: str, args: TeamArgs, in_ns: pulumi.ResourceOptions
    ) -> tuple[k8s.core.v1.PersistentVolume, k8s.core.v1.PersistentVolumeClaim]:
        """The team's volume of the file system (its spec waits for the file system's
        Outputs; no resource is created inside ``apply``) and its claim, made once the
        namespace and the volume exist (a component's ``depends_on`` does not reach its
        children, hence no ``CheckpointVolume`` component here)."""
        s, fs = args.checkpoint_volume, args.shared_storage
        assert s is not None and fs is not None  # TeamArgs checks
        pv = pulumi.Output.all(fs.file_system_id, fs.dns_name, fs.mount_name).apply(
            lambda v: storage.persistent_volume(
                s, storage.FileSystemRef(file_system_id=v[0], dns_name=v[1], mount_name=v[2])
            )
        )
        volume = k8s.core.v1.PersistentVolume(
            resource_name(name, {"kind": "PersistentVolume", "metadata": {"name": s.volume_name}}),
            metadata=pv.apply(lambda o: o["metadata"]),
            spec=pv.apply(lambda o: o["spec"]),
            opts=pulumi.ResourceOptions(parent=self),
        )
        claim = storage.persistent_volume_claim(s)
        return volume, k8s.core.v1.PersistentVolumeClaim(
            resource_name(name, claim),
            metadata=claim["metadata"],
            spec=claim["spec"],
            opts=pulumi.ResourceOptions.merge(in_ns, pulumi.ResourceOptions(depends_on=[volume])),
        )
