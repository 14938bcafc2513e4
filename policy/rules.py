"""The rules of the eks-fsdp policy pack, as pulumi-policy objects (no ``PolicyPack`` here).

``__main__.py`` hands ``POLICIES`` to ``PolicyPack``, which the Pulumi engine runs for
``pulumi preview/up --policy-pack policy``; the tests call each policy's ``validate`` offline on
the resources the program registers under mocks, and on broken inputs. The pack runs in its own
virtualenv (this folder's requirements.txt), so this module imports nothing of the project:
the few facts it shares with ``infra`` (the EKS support calendar, the control-plane log types)
are repeated here and a test keeps them equal.

Property names are the engine's (camelCase inputs); integers may arrive as floats.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from addon_versions import addon_version_problem
from pulumi_policy import (
    EnforcementLevel,
    ReportViolation,
    ResourceValidationArgs,
    ResourceValidationPolicy,
    StackValidationArgs,
    StackValidationPolicy,
)

LAUNCH_TEMPLATE = "aws:ec2/launchTemplate:LaunchTemplate"
INSTANCE = "aws:ec2/instance:Instance"
SUBNET = "aws:ec2/subnet:Subnet"
SECURITY_GROUP = "aws:ec2/securityGroup:SecurityGroup"
INGRESS_RULE = "aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule"
EGRESS_RULE = "aws:vpc/securityGroupEgressRule:SecurityGroupEgressRule"
SG_RULE = "aws:ec2/securityGroupRule:SecurityGroupRule"
NODE_GROUP = "aws:eks/nodeGroup:NodeGroup"
EKS_CLUSTER = "eks:index:Cluster"
"""pulumi-eks's component. No rule reads it: pulumi-eks builds it as a Node.js
``ComponentResource`` (``super(type, name, args, opts)`` in ``nodejs/eks/cluster/cluster.ts``),
which registers its args only when remote or adopted (``remote || opts?.urn ? args : {}``), so
the analyzer sees it with props ``{}``. The rules read what it creates: the
``aws:eks/cluster:Cluster`` control plane and the ``vpc-cni``/``kube-proxy`` ``Addon``s."""
AWS_EKS_CLUSTER = "aws:eks/cluster:Cluster"
ADDON = "aws:eks/addon:Addon"
ROLE = "aws:iam/role:Role"
IAM_POLICY = "aws:iam/policy:Policy"
ROLE_POLICY = "aws:iam/rolePolicy:RolePolicy"
ATTACHMENT = "aws:iam/rolePolicyAttachment:RolePolicyAttachment"
EBS_VOLUME = "aws:ebs/volume:Volume"
LUSTRE = "aws:fsx/lustreFileSystem:LustreFileSystem"
S3_BUCKET = "aws:s3/bucket:Bucket"
S3_ENCRYPTION = (
    "aws:s3/bucketServerSideEncryptionConfiguration:BucketServerSideEncryptionConfiguration"
)
S3_PUBLIC_ACCESS_BLOCK = "aws:s3/bucketPublicAccessBlock:BucketPublicAccessBlock"
S3_BUCKET_POLICY = "aws:s3/bucketPolicy:BucketPolicy"
"""pulumi-aws 7 S3 types: the bucket (the former ``BucketV2``) and its settings as separate
resources that name it in their ``bucket`` input."""
S3_PUBLIC_ACCESS_FLAGS = (
    "blockPublicAcls",
    "blockPublicPolicy",
    "ignorePublicAcls",
    "restrictPublicBuckets",
)
HELM_RELEASE = "kubernetes:helm.sh/v3:Release"
HELM_CHART_V4 = "kubernetes:helm.sh/v4:Chart"
NETWORK_POLICY = "kubernetes:networking.k8s.io/v1:NetworkPolicy"
PYTORCH_JOB = "kubernetes:kubeflow.org/v1:PyTorchJob"
TRAIN_JOB = "kubernetes:trainer.kubeflow.org/v1alpha1:TrainJob"
NODE_POOL = "kubernetes:karpenter.sh/v1:NodePool"
EC2_NODE_CLASS = "kubernetes:karpenter.k8s.aws/v1:EC2NodeClass"
"""Karpenter's objects (``provisioner: karpenter`` pools; aws/karpenter-provider-aws v1.14
CRDs): their fields live under ``spec``."""
"""pulumi-kubernetes names a custom resource ``kubernetes:<group>/<version>:<Kind>``."""
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
"""Kueue's ``QueueLabel`` (sigs.k8s.io/kueue ``pkg/controller/constants/constants.go``, v0.17.0);
``workloads.specs.kueue.QUEUE_LABEL`` (a test keeps them equal)."""
GPU_RESOURCE = "nvidia.com/gpu"

IMDS_HOP_LIMIT = 1
"""Pods (one network hop further than the node) cannot get an IMDSv2 token at hop limit 1.
Nothing on this project's nodes needs IMDS from a pod network namespace (the VPC CNI,
kube-proxy, the EFA device plugin and the CloudWatch agent use host networking)."""
STORAGE_ADMIN_POLICIES = frozenset(
    {
        "arn:aws:iam::aws:policy/AmazonFSxFullAccess",
        "arn:aws:iam::aws:policy/service-role/AmazonEBSCSIDriverPolicy",
        "arn:aws:iam::aws:policy/AmazonEC2FullAccess",
        "arn:aws:iam::aws:policy/AdministratorAccess",
    }
)
"""Managed policies that let whoever holds them delete volumes or file systems."""
CONTROL_PLANE_LOG_TYPES = ("api", "audit", "authenticator", "controllerManager", "scheduler")
EKS_STANDARD_SUPPORT_END: dict[str, dt.date] = {
    "1.33": dt.date(2026, 7, 29),
    "1.34": dt.date(2026, 12, 2),
    "1.35": dt.date(2027, 3, 27),
}
"""End of EKS standard support per minor version (EKS user guide, Kubernetes version
lifecycle); equal to ``infra.versions.EKS_STANDARD_SUPPORT_END`` (a test checks)."""

clock: Callable[[], dt.date] = dt.date.today
"""The day standard support is judged on: the day of the preview under the engine; the offline
harness sets it (``--today``) so the tests do not depend on the day they run."""

Props = Mapping[str, Any]
Check = Callable[[Props], Iterable[str]]


def _get(props: Any, *path: str) -> Any:
    for key in path:
        if not isinstance(props, Mapping):
            return None
        props = props.get(key)
    return props


def _truthy(value: Any) -> bool:
    return value is True or (isinstance(value, str) and value.lower() == "true")


# --- resource checks: (props) -> violation messages -------------------------------------------


def imds(props: Props) -> Iterable[str]:
    """IMDSv2 required, endpoint on, hop limit 1 (launch templates and instances)."""
    meta = props.get("metadataOptions") or {}
    if meta.get("httpEndpoint") == "disabled":
        return
    if meta.get("httpTokens") != "required":
        yield "IMDSv2 is not required (metadataOptions.httpTokens must be 'required')"
    hops = meta.get("httpPutResponseHopLimit")
    if hops is None or float(hops) != IMDS_HOP_LIMIT:
        yield (
            f"IMDS hop limit is {'unset' if hops is None else f'{float(hops):g}'};"
            f" {IMDS_HOP_LIMIT} keeps the node role's credentials"
            " away from pods"
        )


def launch_template_public_ip(props: Props) -> Iterable[str]:
    """No network interface of a node asks for a public IP."""
    for i, nic in enumerate(props.get("networkInterfaces") or []):
        if _truthy(nic.get("associatePublicIpAddress")):
            yield f"networkInterfaces[{i}] associates a public IP address"


def _statements(document: Any) -> list[Mapping[str, Any]]:
    if isinstance(document, str):
        try:
            document = json.loads(document)
        except json.JSONDecodeError:
            return []
    if not isinstance(document, Mapping):
        return []
    statements = document.get("Statement") or []
    return [statements] if isinstance(statements, Mapping) else list(statements)


def _wildcards(document: Any) -> list[str]:
    found = []
    for stmt in _statements(document):
        if stmt.get("Effect") != "Allow":
            continue
        actions = stmt.get("Action") or []
        for action in [actions] if isinstance(actions, str) else actions:
            if action == "*" or action.endswith(":*"):
                found.append(action)
    return found


def iam_wildcards(props: Props) -> Iterable[str]:
    """No Allow of ``*`` or ``service:*`` in an IAM policy document."""
    documents = [props.get("policy")]
    documents += [p.get("policy") for p in props.get("inlinePolicies") or []]
    for document in documents:
        for action in _wildcards(document):
            yield f"allows the wildcard action {action!r}"


def block_devices_encrypted(props: Props) -> Iterable[str]:
    """Every EBS block device of a launch template is encrypted."""
    for i, mapping in enumerate(props.get("blockDeviceMappings") or []):
        ebs = mapping.get("ebs")
        if ebs is not None and not _truthy(ebs.get("encrypted")):
            yield f"blockDeviceMappings[{i}] ({mapping.get('deviceName')}) is not encrypted"


def ebs_volume_encrypted(props: Props) -> Iterable[str]:
    if not _truthy(props.get("encrypted")):
        yield "the EBS volume is not encrypted"


def lustre_encrypted(props: Props) -> Iterable[str]:
    """FSx for Lustre: SCRATCH is always encrypted (AWS-owned key); PERSISTENT needs a KMS key."""
    if str(props.get("deploymentType", "")).startswith("PERSISTENT") and not props.get("kmsKeyId"):
        yield "a PERSISTENT file system without kmsKeyId (use a customer-managed KMS key)"


def eks_secrets_kms(props: Props) -> Iterable[str]:
    """Kubernetes Secrets envelope-encrypted with KMS (``encryptionConfig`` of
    ``aws:eks/cluster:Cluster``: ``provider.keyArn`` and ``resources: ["secrets"]``, which
    pulumi-eks fills from its ``encryptionConfigKeyArn``)."""
    config = props.get("encryptionConfig")
    if _get(config, "provider", "keyArn") and "secrets" in (_get(config, "resources") or []):
        return
    yield "Secrets are not envelope-encrypted (encryptionConfig with a KMS keyArn for 'secrets')"


def control_plane_logging(props: Props) -> Iterable[str]:
    enabled = set(props.get("enabledClusterLogTypes") or [])
    missing = [t for t in CONTROL_PLANE_LOG_TYPES if t not in enabled]
    if missing:
        yield f"control-plane log types off: {', '.join(missing)}"


def api_endpoint(props: Props) -> Iterable[str]:
    """A public API endpoint admits named CIDRs only. ``vpcConfig.endpointPublicAccess``
    defaults to true and ``publicAccessCidrs`` to ``0.0.0.0/0`` (pulumi-aws 7 schema)."""
    vpc = props.get("vpcConfig") or {}
    if vpc.get("endpointPublicAccess") is False:
        return
    cidrs = vpc.get("publicAccessCidrs") or []
    if not cidrs:
        yield "the public API endpoint is open to 0.0.0.0/0 (no vpcConfig.publicAccessCidrs)"
    for cidr in cidrs:
        if str(cidr).endswith("/0"):
            yield f"the public API endpoint admits {cidr}"


def kubernetes_version(props: Props, today: dt.date | None = None) -> Iterable[str]:
    """The control plane's version is in EKS standard support on ``today`` (the date of the
    preview; injectable so tests pin it)."""
    version = props.get("version")
    if version is None:
        yield "no Kubernetes version pinned (EKS would pick its default)"
        return
    end = EKS_STANDARD_SUPPORT_END.get(str(version))
    if end is None:
        yield f"Kubernetes {version} has no known EKS standard-support window"
    elif (today or clock()) > end:
        yield f"Kubernetes {version} left EKS standard support on {end.isoformat()}"


def addon_pinned(props: Props) -> Iterable[str]:
    if not props.get("addonVersion"):
        yield f"EKS add-on {props.get('addonName')} has no addonVersion (latest at creation)"


def chart_pinned(props: Props) -> Iterable[str]:
    version = str(props.get("version") or "")
    if not version or version in ("latest", "*") or version.startswith(("^", "~", ">")):
        yield f"Helm chart {props.get('chart')} is not pinned to a version ({version or 'none'})"


def placement_with_capacity_block(props: Props) -> Iterable[str]:
    """A Capacity Block is already co-located; a placement group makes launches fail."""
    market = _get(props, "instanceMarketOptions", "marketType")
    group = _get(props, "placement", "groupName")
    if market == "capacity-block" and group:
        yield f"placement group {group} with a capacity block (its instances are co-located)"


def nodeclass_imds(props: Props) -> Iterable[str]:
    """An EC2NodeClass states IMDSv2 with hop limit 1, as the managed GPU groups' templates."""
    yield from imds(props.get("spec") or {})


def nodeclass_block_devices_encrypted(props: Props) -> Iterable[str]:
    """Every EBS device of an EC2NodeClass is encrypted (``spec.blockDeviceMappings``)."""
    for i, mapping in enumerate(_get(props, "spec", "blockDeviceMappings") or []):
        if not _truthy((mapping.get("ebs") or {}).get("encrypted")):
            yield f"EC2NodeClass blockDeviceMappings[{i}] is not encrypted"


def nodeclass_ami_pinned(props: Props) -> Iterable[str]:
    """An EC2NodeClass alias names an AMI release: ``@latest`` drifts (replaces) every node on
    each release (Karpenter docs v1.14, concepts/nodeclasses.md, amiSelectorTerms warning)."""
    for term in _get(props, "spec", "amiSelectorTerms") or []:
        alias = str(term.get("alias") or "")
        if alias.endswith("@latest"):
            yield f"EC2NodeClass AMI alias {alias} is not pinned to a release"


def nodepool_keeps_busy_nodes(props: Props) -> Iterable[str]:
    """A GPU NodePool (or one that may launch into a reservation) consolidates only empty nodes
    and never expires them: ``WhenEmptyOrUnderutilized`` (the default) or ``Balanced`` drain a
    node whose job still runs, and expiry ignores disruption budgets (Karpenter docs v1.14,
    concepts/disruption.md)."""
    template = _get(props, "spec", "template") or {}
    labels = _get(template, "metadata", "labels") or {}
    reqs = _get(template, "spec", "requirements") or []
    reserved = any(
        r.get("key") == "karpenter.sh/capacity-type" and "reserved" in (r.get("values") or [])
        for r in reqs
    )
    if not reserved and labels.get("nvidia.com/gpu.present") != "true":
        return
    policy = _get(props, "spec", "disruption", "consolidationPolicy") or "WhenEmptyOrUnderutilized"
    if policy != "WhenEmpty":
        yield f"NodePool consolidates with {policy}: a node running a job can be drained"
    expire = _get(template, "spec", "expireAfter") or "720h"
    if expire != "Never":
        yield f"NodePool nodes expire after {expire} (expiry is not held back by budgets)"


def _gpus(resources: Any) -> float:
    """``nvidia.com/gpu`` of a container's ``resources`` (limits, else requests)."""
    for kind in ("limits", "requests"):
        value = _get(resources, kind, GPU_RESOURCE)
        if value is not None:
            try:
                return float(value)
            except (TypeError, ValueError):
                return 1.0  # a quantity we cannot read still asks for GPUs
    return 0.0


def _job_gpus(props: Props) -> float:
    """GPUs a PyTorchJob (every replica's containers) or a TrainJob (``spec.trainer.
    resourcesPerNode``, Trainer v2 ``trainjob_types.go``) asks for, per pod."""
    total = 0.0
    replicas = _get(props, "spec", "pytorchReplicaSpecs")
    if isinstance(replicas, Mapping):
        for replica in replicas.values():
            for container in _get(replica, "template", "spec", "containers") or []:
                total += _gpus(_get(container, "resources"))
    total += _gpus(_get(props, "spec", "trainer", "resourcesPerNode"))
    return total


def gpu_job_names_queue(props: Props) -> Iterable[str]:
    """A job that asks for GPUs carries Kueue's queue label: without it Kueue ignores the job
    (``manageJobsWithoutQueueName`` is off), which then competes for the GPUs outside every
    quota and may half-start (docs/adr/0016)."""
    labels = _get(props, "metadata", "labels")
    queue = labels.get(QUEUE_LABEL) if isinstance(labels, Mapping) else None
    if _job_gpus(props) > 0 and not queue:
        name = _get(props, "metadata", "name") or "job"
        yield f"{props.get('kind', 'job')} {name} asks for GPUs but names no Kueue queue ({QUEUE_LABEL})"


# --- stack checks: (resources) -> (urn, message) --------------------------------------------


def _deps(resource: Any, prop: str) -> list[Any]:
    return list((getattr(resource, "property_dependencies", None) or {}).get(prop, []))


def _trusts_ec2(role: Any) -> bool:
    return any(
        "ec2.amazonaws.com" in json.dumps(stmt.get("Principal", {}))
        for stmt in _statements(role.props.get("assumeRolePolicy"))
    )


def node_role_storage_admin(resources: list[Any]) -> Iterable[tuple[str, str]]:
    """No FSx/EBS admin (or broader) managed policy on a role EC2 instances assume."""
    node_roles = {r.urn for r in resources if r.resource_type == ROLE and _trusts_ec2(r)}
    for res in resources:
        if res.resource_type != ATTACHMENT:
            continue
        roles = {d.urn for d in _deps(res, "role")}
        arn = res.props.get("policyArn")
        if roles & node_roles and arn in STORAGE_ADMIN_POLICIES:
            yield res.urn, f"{arn} attached to a node role (give it to the CSI controller by IRSA)"


def _full_access(arn: Any) -> bool:
    """An AWS managed ``...FullAccess`` policy (``arn:<partition>:iam::aws:policy/...``)."""
    return (
        isinstance(arn, str)
        and ":iam::aws:policy/" in arn
        and arn.rsplit("/", 1)[-1].endswith("FullAccess")
    )


def attachment_full_access(props: Props) -> Iterable[str]:
    arn = props.get("policyArn")
    if _full_access(arn):
        yield f"{arn} attached to a role (grant the few actions it needs instead)"


def role_full_access(props: Props) -> Iterable[str]:
    for arn in props.get("managedPolicyArns") or []:
        if _full_access(arn):
            yield f"the role carries {arn} (grant the few actions it needs instead)"


def node_subnets_private(resources: list[Any]) -> Iterable[tuple[str, str]]:
    """Nodegroups launch only into subnets that do not map public IPs."""
    for res in resources:
        if res.resource_type != NODE_GROUP:
            continue
        for subnet in _deps(res, "subnetIds"):
            if subnet.resource_type == SUBNET and _truthy(subnet.props.get("mapPublicIpOnLaunch")):
                yield res.urn, f"subnet {subnet.name} maps public IPs on launch"


_INLINE_OPENINGS = ("cidrBlocks", "ipv6CidrBlocks", "prefixListIds", "securityGroups")


def efa_security_group_self_only(resources: list[Any]) -> Iterable[tuple[str, str]]:
    """The security group of EFA interfaces admits and sends traffic only to its members: its
    standalone rules (``aws:vpc`` ingress/egress rules, ``aws:ec2/securityGroupRule``) and
    the inline ``ingress``/``egress`` of the ``aws:ec2/securityGroup`` itself."""
    efa_groups: set[str] = set()
    for res in resources:
        if res.resource_type != LAUNCH_TEMPLATE:
            continue
        nics = res.props.get("networkInterfaces") or []
        if any(str(n.get("interfaceType", "")).startswith("efa") for n in nics):
            efa_groups |= {
                d.urn for d in _deps(res, "networkInterfaces") if d.resource_type == SECURITY_GROUP
            }
    for res in resources:
        if res.resource_type == SECURITY_GROUP and res.urn in efa_groups:
            # Inline rules (pulumi-aws ``SecurityGroupIngress``/``Egress``): ``self`` only.
            for direction in ("ingress", "egress"):
                for i, rule in enumerate(res.props.get(direction) or []):
                    opens = [k for k in _INLINE_OPENINGS if rule.get(k)]
                    if opens or not _truthy(rule.get("self")):
                        yield (
                            res.urn,
                            f"EFA security group {res.name} {direction}[{i}] reaches beyond"
                            " its members",
                        )
            continue
        if res.resource_type not in (INGRESS_RULE, EGRESS_RULE, SG_RULE):
            continue
        owner = {d.urn for d in _deps(res, "securityGroupId")} & efa_groups
        if not owner:
            continue
        if res.resource_type == SG_RULE:
            peer = {d.urn for d in _deps(res, "sourceSecurityGroupId")}
            opens = [
                k for k in ("cidrBlocks", "ipv6CidrBlocks", "prefixListIds") if res.props.get(k)
            ]
            self_only = (_truthy(res.props.get("self")) and not peer) or peer == owner
        else:
            peer = {d.urn for d in _deps(res, "referencedSecurityGroupId")}
            opens = [k for k in ("cidrIpv4", "cidrIpv6", "prefixListId") if res.props.get(k)]
            self_only = peer == owner
        if opens or not self_only:
            yield res.urn, f"EFA security group rule {res.name} reaches beyond its members"


def _settings_of(resources: list[Any], type_: str) -> dict[str, list[Any]]:
    """{bucket URN: [its settings of ``type_``]}, linked by the ``bucket`` input's dependency."""
    found: dict[str, list[Any]] = {}
    for res in resources:
        if res.resource_type == type_:
            for dep in _deps(res, "bucket"):
                found.setdefault(dep.urn, []).append(res)
    return found


def s3_bucket_encrypted_kms(resources: list[Any]) -> Iterable[tuple[str, str]]:
    """Every S3 bucket has a default encryption of SSE-KMS with a named key."""
    settings = _settings_of(resources, S3_ENCRYPTION)
    for res in resources:
        if res.resource_type != S3_BUCKET:
            continue
        ok = False
        for config in settings.get(res.urn, []):
            for rule in config.props.get("rules") or []:
                default = rule.get("applyServerSideEncryptionByDefault") or {}
                if default.get("sseAlgorithm") in ("aws:kms", "aws:kms:dsse") and default.get(
                    "kmsMasterKeyId"
                ):
                    ok = True
        if not ok:
            yield res.urn, f"bucket {res.name} has no SSE-KMS default encryption with a KMS key"


def s3_bucket_private(resources: list[Any]) -> Iterable[tuple[str, str]]:
    """Every S3 bucket blocks public access (all four flags) and denies requests without TLS
    (a bucket policy statement denying on ``aws:SecureTransport`` false)."""
    blocks = _settings_of(resources, S3_PUBLIC_ACCESS_BLOCK)
    policies = _settings_of(resources, S3_BUCKET_POLICY)
    for res in resources:
        if res.resource_type != S3_BUCKET:
            continue
        if not any(
            all(_truthy(b.props.get(flag)) for flag in S3_PUBLIC_ACCESS_FLAGS)
            for b in blocks.get(res.urn, [])
        ):
            yield res.urn, f"bucket {res.name} does not block all public access"
        tls = any(
            _denies_plain_http(stmt)
            for p in policies.get(res.urn, [])
            for stmt in _statements(p.props.get("policy"))
        )
        if not tls:
            why = "no Deny of s3:* to every principal on the bucket and its objects"
            yield res.urn, f"bucket {res.name} accepts requests without TLS: {why}"


def _as_list(value: Any) -> list[Any]:
    return [value] if isinstance(value, (str, Mapping)) else list(value or [])


def _denies_plain_http(stmt: Mapping[str, Any]) -> bool:
    """A TLS-only statement as the S3 user guide writes it ("Security best practices for
    Amazon S3", "Enforce encryption of data in transit"; the AWS Config rule
    s3-bucket-ssl-requests-only): Deny, Principal ``*``, Action ``s3:*``, Resource the bucket
    ARN and ``ARN/*``, Condition ``Bool`` ``aws:SecureTransport`` false. A deny of some
    actions, of some principals, or of the bucket without its objects leaves plain HTTP open."""
    if stmt.get("Effect") != "Deny":
        return False
    if str(_get(stmt, "Condition", "Bool", "aws:SecureTransport")).lower() != "false":
        return False
    if stmt.get("Principal") not in ("*", {"AWS": "*"}) or "s3:*" not in _as_list(
        stmt.get("Action")
    ):
        return False
    resources = [r for r in _as_list(stmt.get("Resource")) if isinstance(r, str)]
    return any(f"{r}/*" in resources for r in resources if ":s3:::" in r and "/" not in r)


def _network_policy_flag(addon: Any) -> Any:
    values = addon.props.get("configurationValues")
    if isinstance(values, str):
        try:
            values = json.loads(values)
        except json.JSONDecodeError:
            return None
    return _get(values, "enableNetworkPolicy")


def network_policies_enforced(resources: list[Any]) -> Iterable[tuple[str, str]]:
    """NetworkPolicies are deployed only where the VPC CNI enforces them.

    pulumi-eks creates the ``vpc-cni`` add-on as an ``aws:eks/addon:Addon`` whose
    ``configurationValues`` JSON carries ``"enableNetworkPolicy": "true"`` when its
    ``vpcCniOptions.enableNetworkPolicy`` is on (pulumi-eks ``nodejs/eks/addons/cni-addon.ts``,
    ``mergeConfigurationValues``). Only add-ons present are judged."""
    if not any(r.resource_type == NETWORK_POLICY for r in resources):
        return
    for res in resources:
        if (
            res.resource_type == ADDON
            and res.props.get("addonName") == "vpc-cni"
            and not _truthy(_network_policy_flag(res))
        ):
            yield (
                res.urn,
                "NetworkPolicies are deployed but the VPC CNI does not enforce them"
                " (vpc-cni configurationValues enableNetworkPolicy)",
            )


def addon_versions_fit_cluster(resources: list[Any]) -> Iterable[tuple[str, str]]:
    """Each EKS add-on's version is a build for the control plane's Kubernetes minor (the table
    in ``addon_versions.py``; ``CreateAddon`` refuses a build for another minor, and a newer
    kube-proxy than the control plane breaks the version-skew policy). With one
    ``aws:eks/cluster:Cluster`` every add-on is judged against it; with several, an add-on is
    judged against the cluster whose ``name`` its ``clusterName`` equals. An add-on without a
    version is ``pinned-versions``'s to report, not this rule's."""
    clusters = [r for r in resources if r.resource_type == AWS_EKS_CLUSTER]
    if not clusters:
        return
    for res in resources:
        if res.resource_type != ADDON or not res.props.get("addonVersion"):
            continue
        if len(clusters) == 1:
            cluster = clusters[0]
        else:
            name = res.props.get("clusterName")
            cluster = next((c for c in clusters if c.props.get("name") == name), None)
            if cluster is None:
                continue
        version = cluster.props.get("version")
        if version is None:
            continue  # no pinned version: ``eks-standard-support`` reports it
        problem = addon_version_problem(
            str(res.props.get("addonName")), str(res.props["addonVersion"]), str(version)
        )
        if problem is not None:
            yield res.urn, f"EKS add-on {problem}"


# --- the policies -------------------------------------------------------------------------


def _resource_policy(
    name: str, description: str, checks: Mapping[str, Check]
) -> ResourceValidationPolicy:
    def validate(args: ResourceValidationArgs, report: ReportViolation) -> None:
        check = checks.get(args.resource_type)
        if check is None:
            return
        for message in check(args.props):
            report(message, None)

    return ResourceValidationPolicy(
        name=name,
        description=description,
        enforcement_level=EnforcementLevel.MANDATORY,
        validate=validate,
    )


def _stack_policy(
    name: str, description: str, check: Callable[[list[Any]], Iterable[tuple[str, str]]]
) -> StackValidationPolicy:
    def validate(args: StackValidationArgs, report: ReportViolation) -> None:
        for urn, message in check(list(args.resources)):
            report(message, urn)

    return StackValidationPolicy(
        name=name,
        description=description,
        enforcement_level=EnforcementLevel.MANDATORY,
        validate=validate,
    )


def _all(*checks: Check) -> Check:
    def run(props: Props) -> Iterable[str]:
        for check in checks:
            yield from check(props)

    return run


RESOURCE_POLICIES: list[ResourceValidationPolicy] = [
    _resource_policy(
        "imdsv2-hop-limit-1",
        "IMDSv2 required with hop limit 1 on nodes that run pods",
        {LAUNCH_TEMPLATE: imds, INSTANCE: imds, EC2_NODE_CLASS: nodeclass_imds},
    ),
    _resource_policy(
        "no-wildcard-iam-actions",
        "No IAM policy allows '*' or 'service:*' actions",
        {IAM_POLICY: iam_wildcards, ROLE_POLICY: iam_wildcards, ROLE: iam_wildcards},
    ),
    _resource_policy(
        "no-full-access-managed-policies",
        "No role (node, IRSA or other) carries an AWS managed *FullAccess policy",
        {ATTACHMENT: attachment_full_access, ROLE: role_full_access},
    ),
    _resource_policy(
        "no-public-ip-on-node-interfaces",
        "Node network interfaces take no public IP",
        {LAUNCH_TEMPLATE: launch_template_public_ip},
    ),
    _resource_policy(
        "encryption-at-rest",
        "EBS volumes and FSx file systems are encrypted at rest",
        {
            LAUNCH_TEMPLATE: block_devices_encrypted,
            EBS_VOLUME: ebs_volume_encrypted,
            LUSTRE: lustre_encrypted,
            EC2_NODE_CLASS: nodeclass_block_devices_encrypted,
        },
    ),
    _resource_policy(
        "eks-secrets-kms",
        "Kubernetes Secrets are envelope-encrypted with a KMS key",
        {AWS_EKS_CLUSTER: eks_secrets_kms},
    ),
    _resource_policy(
        "eks-control-plane-logging",
        "Every EKS control-plane log type is on",
        {AWS_EKS_CLUSTER: control_plane_logging},
    ),
    _resource_policy(
        "eks-api-endpoint-restricted",
        "The public API endpoint admits named CIDRs only",
        {AWS_EKS_CLUSTER: api_endpoint},
    ),
    _resource_policy(
        "eks-standard-support",
        "The Kubernetes version is in EKS standard support",
        {AWS_EKS_CLUSTER: kubernetes_version},
    ),
    _resource_policy(
        "pinned-versions",
        "Helm charts and EKS add-ons are pinned to versions",
        {
            HELM_RELEASE: chart_pinned,
            HELM_CHART_V4: chart_pinned,
            ADDON: addon_pinned,
            EC2_NODE_CLASS: nodeclass_ami_pinned,
        },
    ),
    _resource_policy(
        "no-placement-group-with-capacity-block",
        "A capacity block's launch template names no placement group",
        {LAUNCH_TEMPLATE: placement_with_capacity_block},
    ),
    _resource_policy(
        "gpu-jobs-name-a-queue",
        "Jobs that ask for GPUs name a Kueue queue",
        {PYTORCH_JOB: gpu_job_names_queue, TRAIN_JOB: gpu_job_names_queue},
    ),
    _resource_policy(
        "karpenter-keeps-training-nodes",
        "GPU and reserved Karpenter NodePools consolidate only empty nodes and never expire",
        {NODE_POOL: nodepool_keeps_busy_nodes},
    ),
]
STACK_POLICIES: list[StackValidationPolicy] = [
    _stack_policy(
        "no-storage-admin-on-node-roles",
        "Node roles carry no FSx/EBS admin policy (IRSA for the CSI drivers)",
        node_role_storage_admin,
    ),
    _stack_policy(
        "no-public-ips-on-nodes",
        "Nodegroups launch into subnets that map no public IPs",
        node_subnets_private,
    ),
    _stack_policy(
        "efa-security-group-self-only",
        "The EFA security group admits and sends traffic to its members only",
        efa_security_group_self_only,
    ),
    _stack_policy(
        "s3-bucket-encrypted-kms",
        "S3 buckets encrypt by default with SSE-KMS and a named key",
        s3_bucket_encrypted_kms,
    ),
    _stack_policy(
        "s3-bucket-private",
        "S3 buckets block all public access and deny requests without TLS",
        s3_bucket_private,
    ),
    _stack_policy(
        "addon-versions-fit-cluster",
        "Every EKS add-on version is a build for the cluster's Kubernetes minor",
        addon_versions_fit_cluster,
    ),
    _stack_policy(
        "network-policy-enforced",
        "The VPC CNI enforces NetworkPolicies wherever they are deployed",
        network_policies_enforced,
    ),
]
POLICIES: list[ResourceValidationPolicy | StackValidationPolicy] = [
    *RESOURCE_POLICIES,
    *STACK_POLICIES,
]
