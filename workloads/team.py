"""``Team``: one team's share of the cluster, its namespace, queues and people.

The Kubernetes objects are ``workloads.specs.teams.objects`` (Namespace, ServiceAccount,
NetworkPolicies, Role and RoleBinding, a LocalQueue per GPU pool). Each principal of the team
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

from infra.config.teams import TeamConfig
from workloads.kueue import apply_object
from workloads.specs import kueue
from workloads.specs import teams as spec
from workloads.specs.common import K8sObject
from workloads.specs.validate import validate as validate_builtin

TYPE_TOKEN = "eks-fsdp:workloads:Team"


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

    def __post_init__(self) -> None:
        if not self.team.principal_arns:
            raise ValueError(f"TeamArgs.team: {self.team.name} has no principal")
        if not self.objects or self.objects[0]["kind"] != "Namespace":
            raise ValueError("TeamArgs.objects: the team's Namespace must come first")
        if self.objects[0]["metadata"]["name"] != self.team.namespace:
            raise ValueError("TeamArgs.objects: the Namespace is not the team's")
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
    ) -> TeamArgs:
        return cls(
            team=team,
            objects=tuple(spec.objects(team, stack_cfg)),
            cluster_name=cluster_name,
            kubernetes_version=stack_cfg.kubernetes_version,
            metrics_objects=tuple(spec.metrics_objects(team, stack_cfg)),
            metrics_after=metrics_after,
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
        self.objects = [apply_object(name, obj, in_ns) for obj in rest]
        after = pulumi.ResourceOptions(parent=self, depends_on=[self.ns, *args.metrics_after])
        self.objects += [apply_object(name, obj, after) for obj in args.metrics_objects]
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
