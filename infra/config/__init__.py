"""The stack configuration, read in one place into frozen, typed objects.

Three ways in, one parser:

- ``from_pulumi()`` inside a Pulumi program (imports ``pulumi`` lazily; secrets stay Outputs),
- ``load_stack_file(stack)`` anywhere else (``Pulumi.<stack>.yaml`` + the defaults declared in
  ``Pulumi.yaml``; no Pulumi engine, no CLI) for the renderer, the local runner and the planner,
- ``parse(raw)`` for both, and for tests.

Bad input raises ``ConfigError`` with one line naming the key, e.g.
``eks-fsdp:gpuNodeGroups[0].desiredSize: 5 is outside [minSize 0, maxSize 2]``.
This package imports no Pulumi at module level.

One module per section, each with its dataclass, its constants and its parser; imports run one
way, ``fields`` <- sections <- ``stack`` <- ``sources``:

- ``fields``: ``ConfigError``, ``NAMESPACE`` and the field readers every section uses,
- ``network``: availability zones, VPC and service CIDRs, NAT gateways,
- ``cluster``: cluster name, Kubernetes version, API endpoint CIDRs, access entries,
- ``nodegroups``: the system nodegroup and the GPU nodegroups (capacity, EFA, taints),
- ``storage``: shared checkpoint storage (FSx for Lustre) and the data bucket (S3),
- ``observability``: the observability switches,
- ``teams``: the teams sharing the cluster (namespaces, principals, GPU quotas, priorities),
- ``stack``: ``StackConfig``, the top-level and secret keys, ``parse``,
- ``sources``: ``project_defaults``, ``stack_file_values``, ``load_stack_file``, ``from_pulumi``.
"""

from infra.config.fields import NAMESPACE, ConfigError
from infra.config.network import DEFAULT_SERVICE_CIDR, NAT_MODES
from infra.config.nodegroups import (
    CAPACITY_TYPES,
    DEFAULT_GPU_TAINT,
    DEFAULT_ROOT_VOLUME_GIB,
    PLACEMENT_CREATE,
    PLACEMENT_NONE,
    TAINT_EFFECTS,
    GpuNodeGroupConfig,
    SystemNodeGroupConfig,
    Taint,
    parse_taint,
)
from infra.config.observability import ObservabilityConfig
from infra.config.sources import (
    REPO_ROOT,
    from_pulumi,
    load_stack_file,
    project_defaults,
    stack_file_values,
)
from infra.config.stack import (
    SECRET_KEYS,
    STRUCTURED_KEYS,
    TOP_LEVEL_KEYS,
    Secrets,
    StackConfig,
    parse,
)
from infra.config.storage import (
    DEFAULT_CHECKPOINT_CLAIM,
    FSX_CAPACITY_STEP_GIB,
    FSX_DEPLOYMENT_TYPES,
    FSX_MIN_CAPACITY_GIB,
    FSX_THROUGHPUTS,
    SHARED_STORAGE_TYPES,
    DataBucketConfig,
    SharedStorageConfig,
    bucket_name_problem,
)
from infra.config.teams import DEFAULT_PRIORITY, PRIORITIES, TeamConfig, pool_gpus

__all__ = [
    "CAPACITY_TYPES",
    "DEFAULT_CHECKPOINT_CLAIM",
    "DEFAULT_GPU_TAINT",
    "DEFAULT_PRIORITY",
    "DEFAULT_ROOT_VOLUME_GIB",
    "DEFAULT_SERVICE_CIDR",
    "FSX_CAPACITY_STEP_GIB",
    "FSX_DEPLOYMENT_TYPES",
    "FSX_MIN_CAPACITY_GIB",
    "FSX_THROUGHPUTS",
    "NAMESPACE",
    "NAT_MODES",
    "PLACEMENT_CREATE",
    "PLACEMENT_NONE",
    "PRIORITIES",
    "REPO_ROOT",
    "SECRET_KEYS",
    "SHARED_STORAGE_TYPES",
    "STRUCTURED_KEYS",
    "TAINT_EFFECTS",
    "TOP_LEVEL_KEYS",
    "ConfigError",
    "DataBucketConfig",
    "GpuNodeGroupConfig",
    "ObservabilityConfig",
    "Secrets",
    "SharedStorageConfig",
    "StackConfig",
    "SystemNodeGroupConfig",
    "Taint",
    "TeamConfig",
    "bucket_name_problem",
    "from_pulumi",
    "load_stack_file",
    "parse",
    "parse_taint",
    "pool_gpus",
    "project_defaults",
    "stack_file_values",
]
