"""A job file's schema: its keys, their types and defaults, and the one typed ``JobSpec`` every
part of ``jobs`` takes (docs/adr/0010: a job is submitted apart from the cluster's stack).

A job file names the stack it runs on (``stack``: the platform's GPU node groups, shared storage,
teams and observability come from ``Pulumi.<stack>.yaml``, read, never changed) and carries the
job (model, dataset, workers, batch, context, sharding, rendezvous, restarts, checkpoints, node
group, image, team, ...) plus the training flags (``args``). ``jobs/examples/`` holds one per
stack.

Strict: an unknown key, a wrong type, a missing ``model`` or a node group the stack lacks raise
``JobFileError``, whose fields (source, line, key, message, hint) are formatted once, as one
line ``FILE:LINE: KEY: what is wrong``; nothing is built before the whole file is valid. The
file is read once (``load``): ``--set`` overrides and pinned Hub revisions are applied to its
values before they are checked.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from eks_fsdp_cli.errors import read_text, suggest
from infra.config import DEFAULT_CHECKPOINT_CLAIM, ConfigError, GpuNodeGroupConfig, StackConfig
from infra.config.fields import DNS_LABEL as _DNS_LABEL
from infra.config.fields import read_bool as _bool
from infra.config.fields import read_choice as _choice
from infra.config.fields import read_int as _int
from infra.config.fields import read_opt_int as _opt_int
from infra.config.fields import read_opt_str as _opt_str
from infra.config.fields import read_str as _str
from jobs.queue import Queue, QueueError
from jobs.queue import resolve as resolve_queue
from jobs.revisions import repo_problem

MAX_JOB_NAME = 50
"""A job name's longest: its pods and their Services are ``<name>-worker-<index>``, DNS
labels of at most 63 characters."""
_JOB_NAME = re.compile(r"^[a-z]([-a-z0-9]{0,48}[a-z0-9])?$")
"""A DNS-1035 label (starts with a letter): the training operator's webhook refuses any other
PyTorchJob name (``apimachineryvalidation.NameIsDNS1035Label`` in
``pkg/webhooks/pytorch/pytorchjob_webhook.go``, kubeflow/trainer v1.9.4)."""
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
RDZV_BACKENDS = ("etcd", "c10d")
SHARDING_STRATEGIES = ("FULL_SHARD", "SHARD_GRAD_OP", "HYBRID_SHARD", "NO_SHARD")
DEVICES = ("cuda", "cpu")
APIS = ("v1", "v2")
"""``v1``: a PyTorchJob (training operator v1.9, elastic); ``v2``: a Trainer v2 TrainJob."""
NCCL_DEBUG_LEVELS = ("VERSION", "WARN", "INFO", "TRACE")
"""``NCCL_DEBUG`` values NCCL reads (NCCL docs, "Environment Variables", NCCL_DEBUG: VERSION,
WARN, INFO, TRACE; src/debug.cc ``ncclDebugInit``)."""
PREFLIGHT_KEYS = ("expect",)
"""Keys of the ``preflight`` mapping form."""

REQUIRED = ("name", "stack", "model")
"""Keys a job file must give (``name`` and ``stack`` may come from ``--name`` / ``--stack``)."""

KEYS: dict[str, str] = {
    "name": "job name (DNS label, at most 50 characters); pods are <name>-worker-<i>",
    "stack": "cluster stack the job runs on (Pulumi.<stack>.yaml: nodegroups, storage)",
    "model": "Hugging Face model name or a preset of training (tiny-llama, ...)",
    "dataset": "dataset name understood by training (samsum_dataset, samsum_sample, ...)",
    "nodeGroup": "GPU nodegroup of the stack the workers run on (default: its first)",
    "workers": "worker pods, one per node (elastic max; default: the nodegroup's desiredSize)",
    "minWorkers": "fewest workers the job keeps running with (elastic min; default workers)",
    "maxRestarts": "torchrun --max_restarts (default 3)",
    "rdzvBackend": "rendezvous backend: etcd (the stack's etcd) | c10d (worker 0)",
    "numEpochs": "training epochs (default 1)",
    "batchSize": "per-GPU batch size (default 1)",
    "contextLength": "tokens per sample (default 4096)",
    "shardingStrategy": "FULL_SHARD | SHARD_GRAD_OP | HYBRID_SHARD | NO_SHARD",
    "maxTrainStep": "stop after this many optimizer steps (default: all epochs)",
    "checkpointEvery": "checkpoint every N steps (default: from the preemption budget)",
    "image": "training image with its registry (default: the stack's trainingImage output)",
    "hfTokenSecretName": "Secret holding the Hugging Face token under key token (hf-token)",
    "device": "cuda on the cluster; cpu for a job that runs on CPUs (the local demo)",
    "checkpointClaim": "PVC every worker mounts for checkpoints (fsx stacks: fsx-checkpoints)",
    "namespace": "namespace of the job (the stack's jobs namespace, default)",
    "preflight": "check the nodes before step 1: true | false | {expect: 'efa=32,gpus=8'} "
    "(default: on EFA nodes; a failure names the node, docs/node-health.md)",
    "ncclDebug": "NCCL_DEBUG of the workers: WARN (default) | INFO (init, network) | VERSION | TRACE",
    "team": "team of the stack whose queue, namespace and ServiceAccount the job uses",
    "priority": "Kueue priority class: production | experiment (default: the team's)",
    "api": "v1: a PyTorchJob (elastic; default) | v2: a Trainer v2 TrainJob (fixed world size)",
    "modelRevision": "Hub branch, tag or commit of model (default: its default branch); "
    "submit pins it to its commit (jobs.revisions)",
    "datasetRevision": "Hub branch, tag or commit of the dataset (hf_dataset's, samsum's); "
    "submit pins it to its commit",
    "requireRevisions": "true: submit stops unless the Hub resolves each revision to a commit "
    "(default false: a warning, the revision as given)",
    "args": "more training.finetune flags, as a mapping flag: value (lr: 3.0e-4)",
}
"""Every key of a job file, with its one-line meaning (``eks-fsdp jobs submit --help``)."""

FLAG_KEYS = {
    "model_name": "model",
    "dataset": "dataset",
    "num_epochs": "numEpochs",
    "batch_size_training": "batchSize",
    "context_length": "contextLength",
    "sharding_strategy": "shardingStrategy",
    "max_train_step": "maxTrainStep",
    "checkpoint_every": "checkpointEvery",
    "model_revision": "modelRevision",
    "dataset_revision": "datasetRevision",
    "enable_fsdp": "(always on)",
}
"""Training flags a key of the file sets: refused under ``args`` (one place for each)."""
SPEC_FLAGS = (
    "dist_checkpoint_root_folder",
    "dist_checkpoint_folder",
    "output_dir",
    "resume",
    "metrics_port",
    "preflight_expect",
)
"""Training flags the manifest builder sets (checkpoint volume, resume, metrics, preflight)."""

PLANNER_HUB_IDS = {
    "llama2-7b": "meta-llama/Llama-2-7b-hf",
    "llama2-13b": "meta-llama/Llama-2-13b-hf",
    "llama2-70b": "meta-llama/Llama-2-70b-hf",
    "llama3-8b": "meta-llama/Meta-Llama-3-8B",
    "llama3-70b": "meta-llama/Meta-Llama-3-70B",
    "llama3.1-8b": "meta-llama/Llama-3.1-8B",
    "llama3.1-70b": "meta-llama/Llama-3.1-70B",
    "llama3.2-1b": "meta-llama/Llama-3.2-1B",
    "llama3.2-3b": "meta-llama/Llama-3.2-3B",
    "qwen2.5-7b": "Qwen/Qwen2.5-7B",
    "qwen2.5-72b": "Qwen/Qwen2.5-72B",
    "qwen3-8b": "Qwen/Qwen3-8B",
    "qwen3-32b": "Qwen/Qwen3-32B",
}
"""The planner's model names (``planner.shapes.BUILTIN``) and the Hub repository each one's
shape is read from (that table's comment): training loads a preset or a Hub id, and
``AutoConfig.from_pretrained("llama2-7b")`` fails in the pods, so a job file naming one is
refused with the id to write instead."""

_REVISION = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/-]{0,199}$")
"""A branch, tag or commit name as a Hub revision (a git ref name's common characters)."""


class JobFileError(ValueError):
    """A job file (or a ``--set``) is invalid. Its parts are fields, formatted once by
    ``__str__`` as ``SOURCE[:LINE]: [KEY: ]MESSAGE[ (HINT)]``."""

    def __init__(
        self,
        message: str,
        *,
        source: str = "",
        key: str | None = None,
        line: int | None = None,
        hint: str | None = None,
    ) -> None:
        self.message, self.source, self.key, self.line, self.hint = message, source, key, line, hint
        super().__init__(self._format())  # args[0] and str() say the same, place included

    def _format(self) -> str:
        where = f"{self.source}:{self.line}" if self.source and self.line else self.source
        text = f"{self.key}: {self.message}" if self.key else self.message
        if self.hint:
            text += f" ({self.hint})"
        return f"{where}: {text}" if where else text

    def __str__(self) -> str:
        return self._format()


@dataclass(frozen=True)
class _Place:
    """Where a file's keys are (``source`` and each key's line), to make errors there."""

    source: str
    lines: Mapping[str, int]

    def error(
        self, key: str | None, message: str, *, hint: str | None = None, at: str | None = None
    ) -> JobFileError:
        """An error on ``key`` (placed on the line of ``at``, default ``key``)."""
        place = at or key
        line = self.lines.get(place) if place else None
        return JobFileError(message, source=self.source, key=key, line=line, hint=hint)

    def read(self, key: str, reader: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """``reader(*args, path, **kwargs)`` (an ``infra.config.fields`` reader, ``path`` the
        key), its ``ConfigError`` placed on the key's line."""
        try:
            return reader(*args, key, **kwargs)
        except ConfigError as err:
            raise self.error(err.path or key, err.problem, at=key) from None


def _did_you_mean(word: str, known: Sequence[str]) -> str | None:
    """The hint field of an unknown key or flag (``training.errors.suggest``'s words)."""
    return suggest(word, known).strip(" ()") or None


@dataclass(frozen=True, kw_only=True)
class JobSpec:
    """One job, checked against the stack it runs on: what every part of ``jobs`` (and the
    renderer, the planner, doctor) takes. Defaults live here and only here (``parse`` uses
    them; a node-group-dependent default is said on its field)."""

    name: str
    """Job name (DNS-1035 label; pods are ``<name>-worker-<i>``)."""
    node_group: str
    """The GPU node group of the stack the workers run on (default: its first)."""
    workers: int
    """Worker pods (one per node) the job asks for (elastic max; default: the group's
    desiredSize)."""
    min_workers: int
    """Fewest workers the job keeps running with (elastic min; default: ``workers``)."""
    max_restarts: int = 3
    """torchrun ``--max_restarts``."""
    rdzv_backend: str = "etcd"
    """Rendezvous backend: ``etcd`` (legacy, recovers from lost workers) | ``c10d``."""
    model: str
    """Hugging Face model name or a preset name of ``training``."""
    dataset: str = "samsum_dataset"
    """Dataset name understood by ``training``."""
    num_epochs: int = 1
    batch_size: int = 1
    """Per-GPU batch size."""
    context_length: int = 4096
    """Tokens per sample."""
    sharding_strategy: str = "FULL_SHARD"
    max_train_step: int | None = None
    """Stop after this many optimizer steps (None: run all epochs)."""
    checkpoint_every: int | None = None
    """Checkpoint every N steps (None: the training package's default)."""
    extra_args: tuple[str, ...] = ()
    """The file's ``args`` and revisions as ``--flag=value`` for ``training.finetune``."""
    image: str | None = None
    """Training image; None = the stack's build (its ``trainingImage`` output)."""
    hf_token_secret_name: str = "hf-token"
    """Kubernetes Secret holding the Hugging Face token."""
    device: str = "cuda"
    """``cuda`` on the cluster; ``cpu`` for a job that runs on CPUs (the local demo)."""
    checkpoint_claim: str | None = None
    """PVC every worker mounts at the checkpoint folder; on an FSx stack
    ``DEFAULT_CHECKPOINT_CLAIM`` unless the file names one; None = an emptyDir per pod."""
    namespace: str = "default"
    """Namespace of the job (a team's job: the team's)."""
    preflight: bool = False
    """Run ``training.preflight`` before step 1 of every (re)start (default: on when the node
    group attaches EFA)."""
    preflight_expect: str = ""
    """More preflight thresholds (``efa=32,gpus=8``) over the catalog's."""
    nccl_debug: str = "WARN"
    """``NCCL_DEBUG`` of the workers (INFO on request, for a job whose network is in question)."""
    api: str = "v1"
    """``v1``: a PyTorchJob; ``v2``: a Trainer v2 TrainJob (``jobs.cluster.trainjob``)."""
    queue: Queue | None = None
    """The Kueue queue the job names (``jobs.queue``); None = none (a CPU job without team)."""
    platform: StackConfig
    """The stack it runs on (``Pulumi.<stack>.yaml``)."""
    source: str
    """Where it came from (a path, or ``record <name>``), for messages."""
    values: Mapping[str, Any]
    """The file's keys after ``--set``, ``--name`` and pinned revisions: what a job's record
    keeps (plain YAML)."""
    lines: Mapping[str, int] = dataclasses.field(default_factory=dict)
    """Line of each key in the file (``args.<flag>`` too), for messages."""
    root: Path | None = None
    """The folder of the stack files (None: this checkout's)."""

    @property
    def stack(self) -> str:
        return self.platform.stack

    @property
    def group(self) -> GpuNodeGroupConfig:
        """The node group the workers run on."""
        return self.platform.node_group(self.node_group)

    def error(self, key: str | None, message: str, *, hint: str | None = None) -> JobFileError:
        """An error placed on ``key``'s line of the file."""
        return _Place(self.source, self.lines).error(key, message, hint=hint)

    def flag_error(self, flag: str | None, message: str) -> JobFileError:
        """A ``training.config`` error on ``--flag``, placed on the key that set the flag."""
        if flag is None:
            return JobFileError(message, source=self.source)
        key = FLAG_KEYS.get(flag) or next(
            (k for k in self.lines if k.startswith("args.") and _flag(k[5:]) == flag),
            f"args.{flag}",
        )
        return self.error(key, message)

    def dump(self) -> str:
        """The resolved job file as YAML (what ``submit`` records for ``resume``)."""
        return yaml.safe_dump(dict(self.values), sort_keys=False)


_KEY_FIELDS = {
    "name": "name",
    "nodeGroup": "node_group",
    "workers": "workers",
    "minWorkers": "min_workers",
    "maxRestarts": "max_restarts",
    "rdzvBackend": "rdzv_backend",
    "model": "model",
    "dataset": "dataset",
    "numEpochs": "num_epochs",
    "batchSize": "batch_size",
    "contextLength": "context_length",
    "shardingStrategy": "sharding_strategy",
    "maxTrainStep": "max_train_step",
    "checkpointEvery": "checkpoint_every",
    "image": "image",
    "hfTokenSecretName": "hf_token_secret_name",
    "device": "device",
    "checkpointClaim": "checkpoint_claim",
    "namespace": "namespace",
    "ncclDebug": "nccl_debug",
    "api": "api",
}
"""Job-file keys that are ``JobSpec`` fields of the same meaning (camelCase -> snake_case)."""
_DEFAULTS = {f.name: f.default for f in dataclasses.fields(JobSpec)}


def default(key: str) -> Any:
    """The default of a job-file key (``dataset`` -> ``samsum_dataset``): ``JobSpec``'s."""
    return _DEFAULTS[_KEY_FIELDS[key]]


def _flag(text: str) -> str:
    return str(text).lstrip("-").replace("-", "_")


def _key_lines(text: str, source: str) -> tuple[dict[str, Any], dict[str, int]]:
    """The top-level mapping of ``text`` and the line of each key (``args.<flag>`` too);
    duplicate keys, YAML errors and a non-mapping raise ``JobFileError``."""
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
        data = yaml.safe_load(text)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        problem = getattr(err, "problem", None) or str(err).splitlines()[0]
        line = mark.line + 1 if mark is not None else None
        raise JobFileError(f"not valid YAML: {problem}", source=source, line=line) from None
    if data is None:
        raise JobFileError(f"empty job file (needs at least {', '.join(REQUIRED)})", source=source)
    if not isinstance(data, dict) or not isinstance(node, yaml.MappingNode):
        raise JobFileError(
            f"expected a mapping of job keys, got {type(data).__name__}", source=source
        )
    lines: dict[str, int] = {}

    def walk(mapping: yaml.MappingNode, prefix: str) -> None:
        for key_node, value_node in mapping.value:
            key = f"{prefix}{key_node.value}"
            line = key_node.start_mark.line + 1
            if key in lines:
                message = f"given twice (first on line {lines[key]})"
                raise JobFileError(message, source=source, key=key, line=line)
            lines[key] = line
            if not prefix and key_node.value == "args" and isinstance(value_node, yaml.MappingNode):
                walk(value_node, "args.")

    walk(node, "")
    return data, lines


def _scalar(value: str) -> Any:
    """A ``--set`` value as YAML reads it (``4`` -> 4, ``false`` -> False, ``a`` -> 'a')."""
    try:
        return yaml.safe_load(value) if value != "" else ""
    except yaml.YAMLError:
        return value


def apply_sets(values: Mapping[str, Any], sets: Sequence[str]) -> dict[str, Any]:
    """``values`` with each ``key=value`` (``args.<flag>=value`` for a training flag) applied."""
    out = dict(values)
    for item in sets:
        key, sep, raw = item.partition("=")
        if not sep or not key:
            raise JobFileError(f"--set {item}: expected key=value (e.g. --set workers=4)")
        if key.startswith("args."):
            flag = key.removeprefix("args.").lstrip("-").replace("-", "_")
            args = out.get("args")
            args = dict(args) if isinstance(args, Mapping) else {}
            args[flag] = _scalar(raw)
            out["args"] = args
            continue
        if key not in KEYS:
            hint = _did_you_mean(key, list(KEYS))
            raise JobFileError("unknown key", source=f"--set {item}", key=key, hint=hint)
        out[key] = _scalar(raw)
    return out


def _train_args(args: Any, at: _Place) -> tuple[str, ...]:
    """``args`` (flag: value) as ``--flag=value``; unknown flags and the ones a key or the
    manifest sets are refused here, the values by ``training.config`` later."""
    from training import cookbook
    from training.config import TrainConfig

    if args is None:
        return ()
    if not isinstance(args, Mapping):
        raise at.error("args", f"expected a mapping flag: value, got {args!r}")
    known = [f.name for f in dataclasses.fields(TrainConfig)]
    out = []
    for raw_flag, value in args.items():
        spelled = flag = _flag(raw_flag)
        key = f"args.{raw_flag}"
        if flag not in known:  # llama-cookbook's spellings (`fsdp_config.pure_bf16`) resolve here
            try:
                hit = cookbook.resolve(flag, known.__contains__)
            except cookbook.CookbookError as err:
                raise at.error(key, str(err)) from None
            if hit is not None and hit.field:
                flag = hit.field
            elif hit is not None:
                spelled = flag = hit.spelled
                known.append(flag)
        if flag in FLAG_KEYS:
            raise at.error(key, f"set by the key {FLAG_KEYS[flag]}")
        if flag in SPEC_FLAGS:
            raise at.error(
                key, "set by the manifest (checkpoint volume, resume, metrics, preflight keys)"
            )
        if flag not in known:
            raise at.error(key, "unknown training flag", hint=_did_you_mean(flag, known))
        if value is None or isinstance(value, Mapping | list):
            raise at.error(key, f"expected a single value, got {value!r}")
        out.append(f"--{spelled}={value}")
    return tuple(out)


def _revision_args(values: Mapping[str, Any], at: _Place) -> tuple[str, ...]:
    """``modelRevision`` / ``datasetRevision`` as training's ``--model_revision`` /
    ``--dataset_revision`` (``submit`` writes the commit there, ``jobs.revisions``)."""
    out = []
    for key, flag in (("modelRevision", "model_revision"), ("datasetRevision", "dataset_revision")):
        value = values.get(key)
        if value is None:
            continue
        if not isinstance(value, str) or not _REVISION.match(value):
            raise at.error(
                key,
                f"{value!r} is not a branch, tag or commit (letters, digits, . _ - /; quote a "
                "commit of digits only)",
            )
        out.append(f"--{flag}={value}")
    if not isinstance(values.get("requireRevisions", False), bool):
        raise at.error(
            "requireRevisions", f"expected true or false, got {values['requireRevisions']!r}"
        )
    return tuple(out)


def _preflight(value: Any, at: _Place) -> tuple[bool, str]:
    """The ``preflight`` key: ``true`` / ``false``, or a mapping that turns the gate on with
    more thresholds (``{expect: "efa=32,gpus=8"}``); the gate is ``training.finetune
    --preflight`` (``training.preflight.gate``). Node tainting is deliberately not a key
    (docs/node-health.md)."""
    if not isinstance(value, Mapping):
        return at.read("preflight", _bool, value), ""
    unknown = sorted(str(k) for k in value if k not in PREFLIGHT_KEYS)
    if unknown:
        hint = "tainting a failed node is not supported: docs/node-health.md"
        raise at.error(
            f"preflight.{unknown[0]}",
            f"unknown key; the mapping takes {', '.join(PREFLIGHT_KEYS)}",
            hint=hint if "taint" in unknown else None,
            at="preflight",
        )
    if "expect" not in value:
        return True, ""
    expect = str(at.read("preflight.expect", _str, value["expect"]))
    # stdlib only at import (training.preflight imports torch inside functions)
    from training.preflight.verdict import parse_expect

    try:
        parse_expect(expect)
    except ValueError as err:
        raise at.error("preflight.expect", str(err), at="preflight") from None
    return True, expect


def _fields(values: Mapping[str, Any], group: GpuNodeGroupConfig, at: _Place) -> dict[str, Any]:
    """The ``JobSpec`` fields the file's keys give, each checked; defaults from ``JobSpec``."""

    def get(key: str) -> Any:
        return values.get(key, default(key))

    workers = at.read("workers", _int, values.get("workers", group.desired_size), minimum=1)
    if workers > group.max_size:
        raise at.error(
            "workers",
            f"{workers} is greater than maxSize {group.max_size} of nodegroup {group.name}",
        )
    min_workers = at.read("minWorkers", _int, values.get("minWorkers", workers), minimum=1)
    if min_workers > workers:
        raise at.error("minWorkers", f"{min_workers} is greater than workers {workers}")
    name = at.read("name", _str, values.get("name"))
    if len(name) > MAX_JOB_NAME:
        raise at.error(
            "name",
            f"{name!r} is {len(name)} characters: at most {MAX_JOB_NAME} (pods are "
            "<name>-worker-<i>, 63 at most)",
        )
    if not _JOB_NAME.match(name):
        raise at.error(
            "name",
            f"{name!r} is not a DNS-1035 label (a-z, 0-9, '-'; starts with a letter, ends with a "
            "letter or digit)",
        )
    namespace = at.read("namespace", _str, get("namespace"))
    if not _DNS_LABEL.match(namespace):
        raise at.error("namespace", f"{namespace!r} is not a DNS label (a-z, 0-9, '-')")
    claim = at.read("checkpointClaim", _opt_str, values.get("checkpointClaim"))
    if claim is not None and (len(claim) > 253 or not _DNS_SUBDOMAIN.match(claim)):
        raise at.error(
            "checkpointClaim",
            f"{claim!r} is not a DNS-1123 name (a-z, 0-9, '-', '.'; at most 253 characters)",
        )
    model = at.read("model", _str, values.get("model"))
    if (problem := repo_problem(model)) is not None:
        raise at.error("model", f"{model!r} {problem}")
    preflight, expect = _preflight(values.get("preflight", group.efa), at)
    return {
        "name": name,
        "node_group": group.name,
        "workers": workers,
        "min_workers": min_workers,
        "max_restarts": at.read("maxRestarts", _int, get("maxRestarts"), minimum=0),
        "rdzv_backend": at.read("rdzvBackend", _choice, get("rdzvBackend"), RDZV_BACKENDS),
        "model": model,
        "dataset": at.read("dataset", _str, get("dataset")),
        "num_epochs": at.read("numEpochs", _int, get("numEpochs"), minimum=1),
        "batch_size": at.read("batchSize", _int, get("batchSize"), minimum=1),
        "context_length": at.read("contextLength", _int, get("contextLength"), minimum=8),
        "sharding_strategy": at.read(
            "shardingStrategy", _choice, get("shardingStrategy"), SHARDING_STRATEGIES
        ),
        "max_train_step": at.read("maxTrainStep", _opt_int, get("maxTrainStep"), minimum=1),
        "checkpoint_every": at.read("checkpointEvery", _opt_int, get("checkpointEvery"), minimum=1),
        "image": at.read("image", _opt_str, get("image")),
        "hf_token_secret_name": at.read("hfTokenSecretName", _str, get("hfTokenSecretName")),
        "device": at.read("device", _choice, get("device"), DEVICES),
        "checkpoint_claim": claim,
        "namespace": namespace,
        "preflight": preflight,
        "preflight_expect": expect,
        "nccl_debug": at.read("ncclDebug", _choice, get("ncclDebug"), NCCL_DEBUG_LEVELS),
    }


def _check_inputs(fields: Mapping[str, Any], values: Mapping[str, Any], at: _Place) -> None:
    """A planner-only model name, or a revision on an input that is not on the Hub: one line."""
    from jobs.revisions import KEYS as REVISION_KEYS
    from jobs.revisions import hub_inputs
    from planner.shapes import BUILTIN

    model, dataset = fields["model"], fields["dataset"]
    if model in BUILTIN:
        hub = PLANNER_HUB_IDS.get(model, "its Hugging Face id (namespace/name)")
        raise at.error("model", f"{model} is the planner's name; use {hub}")
    on_hub = {i.kind for i in hub_inputs(model, dataset, fields["extra_args"], values)}
    for kind, key in REVISION_KEYS.items():
        if values.get(key) not in (None, "") and kind not in on_hub:
            what = model if kind == "model" else dataset
            raise at.error(
                key,
                f"{kind} {what} is not on the Hugging Face Hub (a preset, a path, a URI or a "
                f"local file): it has no revision; remove {key}",
            )


def _platform(values: Mapping[str, Any], at: _Place, root: Path | None) -> StackConfig:
    """The stack the file names, read from ``Pulumi.<stack>.yaml`` under ``root``."""
    from infra.config import load_stack_file
    from infra.config.sources import REPO_ROOT  # read when called (tests move it)

    stack_name = values["stack"]
    if not isinstance(stack_name, str) or not re.fullmatch(
        r"[A-Za-z0-9][A-Za-z0-9_.-]*", stack_name
    ):
        raise at.error("stack", f"{stack_name!r} is not a stack name")
    root = root or REPO_ROOT
    if not (root / f"Pulumi.{stack_name}.yaml").is_file():
        stacks = sorted(p.name[len("Pulumi.") : -len(".yaml")] for p in root.glob("Pulumi.*.yaml"))
        raise at.error(
            "stack", f"no stack file Pulumi.{stack_name}.yaml (stacks: {', '.join(stacks)})"
        )
    try:
        return load_stack_file(stack_name, root)
    except ConfigError as err:
        raise JobFileError(
            f"stack {stack_name}: {err}", source=at.source, line=at.lines.get("stack")
        ) from None


def parse(
    values: Mapping[str, Any],
    *,
    source: str,
    lines: Mapping[str, int] | None = None,
    stack: str | None = None,
    root: Path | None = None,
) -> JobSpec:
    """A job file's mapping, checked key by key, bound to its stack (``--stack`` wins)."""
    at = _Place(source, dict(lines or {}))
    values = dict(values)
    if stack:
        values["stack"] = stack
    for key in values:
        if key not in KEYS:
            raise at.error(key, "unknown key", hint=_did_you_mean(key, list(KEYS)))
    for key in REQUIRED:
        if values.get(key) in (None, ""):
            hint = {"name": " (or pass --name)", "stack": " (or pass --stack)"}.get(key, "")
            raise JobFileError(f"required{hint}: {KEYS[key]}", source=source, key=key)
    platform = _platform(values, at, root)
    extra_args = _train_args(values.get("args"), at) + _revision_args(values, at)
    groups = {g.name: g for g in platform.gpu_node_groups}
    if not groups:
        raise at.error(
            "nodeGroup", f"there is no GPU nodegroup to run the job on of stack {platform.stack}"
        )
    group_name = at.read("nodeGroup", _str, values.get("nodeGroup", next(iter(groups))))
    if group_name not in groups:
        raise at.error(
            "nodeGroup",
            f"{group_name!r} is not a GPU nodegroup ({', '.join(groups)}) of stack "
            f"{platform.stack}",
        )
    group = groups[group_name]
    fields = _fields(values, group, at)
    fields["extra_args"] = extra_args
    _check_inputs(fields, values, at)
    _check_fit(fields, group, values, at)
    if platform.shared_storage.is_fsx and fields["checkpoint_claim"] is None:
        fields["checkpoint_claim"] = DEFAULT_CHECKPOINT_CLAIM
    try:
        queue = resolve_queue(values, platform, gpu_job=group.instance.gpus > 0)
    except QueueError as err:
        raise at.error(err.key, err.problem) from None
    if queue is not None and queue.team is not None:
        fields["namespace"] = queue.team
    api = values.get("api", default("api"))
    if api not in APIS:
        raise at.error("api", f"{api!r} is not v1 or v2")
    if api == "v2" and fields["min_workers"] < fields["workers"]:
        raise at.error(
            "api",
            f"v2 (Trainer v2) has no elastic policy: minWorkers {fields['min_workers']} < "
            f"workers {fields['workers']} needs api: v1",
        )
    return JobSpec(
        **fields,
        api=str(api),
        queue=queue,
        platform=platform,
        source=source,
        values=values,
        lines=dict(lines or {}),
        root=root,
    )


def read(path: Path | str) -> tuple[str, dict[str, Any], dict[str, int]]:
    """A job file's text read once: (source, its keys, the line of each key)."""
    source = str(path)
    try:
        text = read_text(Path(path))
    except FileNotFoundError:
        raise JobFileError(
            "no such job file (examples: jobs/examples/*.yaml)", source=source
        ) from None
    except (OSError, ValueError) as err:
        raise JobFileError(str(err), source=source) from None
    values, lines = _key_lines(text, source)
    return source, values, lines


def load(
    path: Path | str,
    *,
    sets: Sequence[str] = (),
    name: str | None = None,
    stack: str | None = None,
    root: Path | None = None,
) -> JobSpec:
    """Read, override (``--set``, ``--name``, ``--stack``) and check the job file ``path``."""
    source, values, lines = read(path)
    values = apply_sets(values, sets)
    if name is not None:
        values["name"] = name
    return parse(values, source=source, lines=lines, stack=stack, root=root)


def loads(text: str, *, source: str, root: Path | None = None) -> JobSpec:
    """A job file from its text (a job's record)."""
    values, lines = _key_lines(text, source)
    return parse(values, source=source, lines=lines, root=root)


def with_values(job: JobSpec, sets: Sequence[str]) -> JobSpec:
    """``job`` with ``key=value`` overrides applied to its values and checked again (pinned
    revisions, a resumed job's generation): no file is read."""
    values = apply_sets(job.values, sets)
    return parse(values, source=job.source, lines=job.lines, root=job.root)


def _check_fit(
    fields: Mapping[str, Any], group: GpuNodeGroupConfig, values: Mapping[str, Any], at: _Place
) -> None:
    """The planner's "fits in GPU memory" (``planner.fit``), as an error on the key that sized
    the job."""
    from planner.fit import FitInput, fit_problem

    problem = fit_problem(FitInput(**{k: fields[k] for k in FitInput.__dataclass_fields__}), group)
    if problem is not None:
        raise at.error("batchSize" if "batchSize" in values else "contextLength", problem)
