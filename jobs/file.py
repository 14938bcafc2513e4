"""Job files: one fine-tuning job per YAML file, checked before anything is sent or started.

A job file carries what a stack's ``job:`` block carried (model, dataset, workers, batch,
context, sharding, rendezvous backend, restarts, checkpoint interval, node group, image, ...)
plus the training flags (``args``), and names the cluster stack it runs on (``stack``): the
platform's GPU nodegroups, shared storage and observability come from ``Pulumi.<stack>.yaml``
(read, never changed). ``jobs/examples/`` holds one per stack.

Strict: an unknown key, a wrong type, a missing ``model`` or a nodegroup the stack lacks raise
``JobFileError`` with one line ``FILE:LINE: KEY: what is wrong``; no object is built before the
whole file is valid. The manifest itself comes from the pure builders of ``workloads.specs``
(``workloads.specs.stack.job_workloads``), the same ones the local runner renders.
"""

from __future__ import annotations

import dataclasses
import difflib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from infra.config import DEFAULT_CHECKPOINT_CLAIM, ConfigError, JobConfig, StackConfig
from infra.config.job import parse_job
from jobs.queue import Queue, QueueError
from jobs.queue import resolve as resolve_queue

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
"""Every key of a job file, with its one-line meaning (``python -m jobs submit --help``)."""

_TO_CONFIG = {
    "name": "name",
    "nodeGroup": "nodeGroup",
    "workers": "workers",
    "minWorkers": "minWorkers",
    "maxRestarts": "maxRestarts",
    "rdzvBackend": "rdzvBackend",
    "model": "model",
    "dataset": "dataset",
    "numEpochs": "numEpochs",
    "batchSize": "batchSize",
    "contextLength": "contextLength",
    "shardingStrategy": "shardingStrategy",
    "maxTrainStep": "maxTrainStep",
    "checkpointEvery": "checkpointEvery",
    "image": "image",
    "hfTokenSecretName": "hfTokenSecretName",
    "device": "device",
    "checkpointClaim": "checkpointClaim",
    "namespace": "namespace",
    "preflight": "preflight",
    "ncclDebug": "ncclDebug",
}
"""Job-file keys handed to ``infra.config.job.parse_job`` (the schema both share)."""

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

_FLAG_MESSAGE = re.compile(r"^.*?: --(?P<flag>[a-z0-9_]+): (?P<msg>.*)$")
_CONFIG_PATH = re.compile(r"^eks-fsdp:job\.(?P<key>[A-Za-z]+)(?P<rest>\S*): (?P<msg>.*)$")


class JobFileError(ValueError):
    """A job file (or a ``--set``) is invalid; the message is one line naming the key."""


@dataclass(frozen=True)
class JobFile:
    """A valid job file bound to the stack it runs on."""

    source: str
    """Where it came from (a path, or ``record <name>``), for messages."""
    values: dict[str, Any]
    """The job's keys after ``--set`` and ``--name``: what a job's record keeps (plain YAML)."""
    config: JobConfig
    """The job, checked against the stack's nodegroups."""
    platform: StackConfig
    """The stack it runs on (``Pulumi.<stack>.yaml``), with ``job`` set to ``config``."""
    lines: Mapping[str, int] = dataclasses.field(default_factory=dict)
    """Line of each key in the file (``args.<flag>`` too), for messages."""
    queue: Queue | None = None
    """The Kueue queue the job names (``jobs.queue``); None = none (a CPU job without team)."""
    api: str = "v1"
    """``v1``: the PyTorchJob; ``v2``: Trainer v2's TrainJob (``workloads.specs.trainjob``)."""

    @property
    def name(self) -> str:
        return self.config.name

    @property
    def stack(self) -> str:
        return self.platform.stack

    @property
    def device(self) -> str:
        return self.config.device

    def locate(self, message: str) -> str:
        """A builder's or ``training.config``'s one-line error, placed in the file: a training
        flag's error names the key that set it (``FILE:LINE: KEY: ...``)."""
        flag = _FLAG_MESSAGE.match(message)
        if flag is not None:
            name = flag["flag"]
            key = FLAG_KEYS.get(name) or next(
                (k for k in self.lines if k.startswith("args.") and _flag(k[5:]) == name),
                f"args.{name}",
            )
            message = f"{_where(self.source, self.lines, key)}: {key}: {flag['msg']}"
        return message if message.startswith(self.source) else f"{self.source}: {message}"

    def dump(self) -> str:
        """The resolved job file as YAML (what ``submit`` records for ``resume``)."""
        return yaml.safe_dump(self.values, sort_keys=False)


def _flag(text: str) -> str:
    return str(text).lstrip("-").replace("-", "_")


def _where(source: str, lines: Mapping[str, int], key: str) -> str:
    line = lines.get(key)
    return f"{source}:{line}" if line else source


def _suggest(word: str, known: Sequence[str]) -> str:
    hits = difflib.get_close_matches(word, known, n=1, cutoff=0.6)
    return f" (did you mean {hits[0]}?)" if hits else ""


def _key_lines(text: str, source: str) -> tuple[dict[str, Any], dict[str, int]]:
    """The top-level mapping of ``text`` and the line of each key (``args.<flag>`` too);
    duplicate keys, YAML errors and a non-mapping raise ``JobFileError``."""
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
        data = yaml.safe_load(text)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f"{source}:{mark.line + 1}" if mark is not None else source
        problem = getattr(err, "problem", None) or str(err).splitlines()[0]
        raise JobFileError(f"{where}: not valid YAML: {problem}") from None
    if data is None:
        raise JobFileError(f"{source}: empty job file (needs at least {', '.join(REQUIRED)})")
    if not isinstance(data, dict) or not isinstance(node, yaml.MappingNode):
        raise JobFileError(f"{source}: expected a mapping of job keys, got {type(data).__name__}")
    lines: dict[str, int] = {}

    def walk(mapping: yaml.MappingNode, prefix: str) -> None:
        for key_node, value_node in mapping.value:
            key = f"{prefix}{key_node.value}"
            if key in lines:
                raise JobFileError(
                    f"{source}:{key_node.start_mark.line + 1}: {key}: given twice "
                    f"(first on line {lines[key]})"
                )
            lines[key] = key_node.start_mark.line + 1
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


def apply_sets(values: dict[str, Any], sets: Sequence[str]) -> dict[str, Any]:
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
            raise JobFileError(f"--set {item}: {key}: unknown key{_suggest(key, list(KEYS))}")
        out[key] = _scalar(raw)
    return out


def _train_args(args: Any, source: str, lines: Mapping[str, int]) -> tuple[str, ...]:
    """``args`` (flag: value) as ``--flag=value``; unknown flags and the ones a key or the
    manifest sets are refused here, the values by ``training.config`` later."""
    from training import cookbook
    from training.config import TrainConfig

    if args is None:
        return ()
    if not isinstance(args, Mapping):
        raise JobFileError(
            f"{_where(source, lines, 'args')}: args: expected a mapping flag: value, got {args!r}"
        )
    known = [f.name for f in dataclasses.fields(TrainConfig)]
    out = []
    for raw_flag, value in args.items():
        spelled = flag = _flag(raw_flag)
        where = _where(source, lines, f"args.{raw_flag}")
        if flag not in known:  # llama-cookbook's spellings (`fsdp_config.pure_bf16`) resolve here
            try:
                hit = cookbook.resolve(flag, known.__contains__)
            except cookbook.CookbookError as err:
                raise JobFileError(f"{where}: args.{raw_flag}: {err}") from None
            if hit is not None and hit.field:
                flag = hit.field
            elif hit is not None:
                spelled = flag = hit.spelled
                known.append(flag)
        if flag in FLAG_KEYS:
            raise JobFileError(f"{where}: args.{raw_flag}: set by the key {FLAG_KEYS[flag]}")
        if flag in SPEC_FLAGS:
            raise JobFileError(
                f"{where}: args.{raw_flag}: set by the manifest (checkpoint volume, resume, "
                "metrics, preflight keys)"
            )
        if flag not in known:
            raise JobFileError(
                f"{where}: args.{raw_flag}: unknown training flag{_suggest(flag, known)}"
            )
        if value is None or isinstance(value, Mapping | list):
            raise JobFileError(f"{where}: args.{raw_flag}: expected a single value, got {value!r}")
        out.append(f"--{spelled}={value}")
    return tuple(out)


_REVISION = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/-]{0,199}$")
"""A branch, tag or commit name as a Hub revision (a git ref name's common characters)."""


def _revision_args(
    values: Mapping[str, Any], source: str, lines: Mapping[str, int]
) -> tuple[str, ...]:
    """``modelRevision`` / ``datasetRevision`` as training's ``--model_revision`` /
    ``--dataset_revision`` (``submit`` writes the commit there, ``jobs.revisions``)."""
    out = []
    for key, flag in (("modelRevision", "model_revision"), ("datasetRevision", "dataset_revision")):
        value = values.get(key)
        if value is None:
            continue
        if not isinstance(value, str) or not _REVISION.match(value):
            raise JobFileError(
                f"{_where(source, lines, key)}: {key}: {value!r} is not a branch, tag or commit "
                "(letters, digits, . _ - /; quote a commit of digits only)"
            )
        out.append(f"--{flag}={value}")
    if not isinstance(values.get("requireRevisions", False), bool):
        raise JobFileError(
            f"{_where(source, lines, 'requireRevisions')}: requireRevisions: expected true or "
            f"false, got {values['requireRevisions']!r}"
        )
    return tuple(out)


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


def _check_inputs(
    config: JobConfig, values: Mapping[str, Any], source: str, lines: Mapping[str, int]
) -> None:
    """A planner-only model name, or a revision on an input that is not on the Hub: one line."""
    from jobs.revisions import KEYS, hub_inputs
    from planner.shapes import BUILTIN

    if config.model in BUILTIN:
        hub = PLANNER_HUB_IDS.get(config.model, "its Hugging Face id (namespace/name)")
        raise JobFileError(
            f"{_where(source, lines, 'model')}: model: {config.model} is the planner's name; "
            f"use {hub}"
        )
    on_hub = {i.kind for i in hub_inputs(config.model, config.dataset, config.extra_args, values)}
    for kind, key in KEYS.items():
        if values.get(key) not in (None, "") and kind not in on_hub:
            what = config.model if kind == "model" else config.dataset
            raise JobFileError(
                f"{_where(source, lines, key)}: {key}: {kind} {what} is not on the Hugging Face "
                f"Hub (a preset, a path, a URI or a local file): it has no revision; remove {key}"
            )


def parse(
    values: Mapping[str, Any],
    *,
    source: str,
    lines: Mapping[str, int] | None = None,
    stack: str | None = None,
    root: Path | None = None,
) -> JobFile:
    """A job file's mapping, checked key by key, bound to its stack (``--stack`` wins)."""
    from infra.config import load_stack_file
    from infra.config.sources import REPO_ROOT

    lines = lines or {}
    values = dict(values)
    if stack:
        values["stack"] = stack
    for key in values:
        if key not in KEYS:
            raise JobFileError(
                f"{_where(source, lines, key)}: {key}: unknown key{_suggest(key, list(KEYS))}"
            )
    for key in REQUIRED:
        if values.get(key) in (None, ""):
            hint = {"name": " (or pass --name)", "stack": " (or pass --stack)"}.get(key, "")
            raise JobFileError(f"{source}: {key}: required{hint}: {KEYS[key]}")
    stack_name = values["stack"]
    if not isinstance(stack_name, str) or not re.fullmatch(
        r"[A-Za-z0-9][A-Za-z0-9_.-]*", stack_name
    ):
        raise JobFileError(
            f"{_where(source, lines, 'stack')}: stack: {stack_name!r} is not a stack name"
        )
    root = root or REPO_ROOT
    if not (root / f"Pulumi.{stack_name}.yaml").is_file():
        stacks = sorted(p.name[len("Pulumi.") : -len(".yaml")] for p in root.glob("Pulumi.*.yaml"))
        raise JobFileError(
            f"{_where(source, lines, 'stack')}: stack: no stack file Pulumi.{stack_name}.yaml "
            f"(stacks: {', '.join(stacks)})"
        )
    try:
        platform = load_stack_file(stack_name, root)
    except ConfigError as err:
        raise JobFileError(f"{_where(source, lines, 'stack')}: stack {stack_name}: {err}") from None
    extra = _train_args(values.get("args"), source, lines) + _revision_args(values, source, lines)
    obj = {_TO_CONFIG[k]: v for k, v in values.items() if k in _TO_CONFIG}
    obj["extraArgs"] = list(extra)
    try:
        config = parse_job(obj, platform.gpu_node_groups)
    except ConfigError as err:
        match = _CONFIG_PATH.match(str(err))
        if match is None:
            raise JobFileError(f"{source}: {err}") from None
        key = match["key"]
        raise JobFileError(
            f"{_where(source, lines, key)}: {key}{match['rest']}: {match['msg']}"
            + (f" of stack {stack_name}" if key == "nodeGroup" else "")
        ) from None
    _check_inputs(config, values, source, lines)
    from planner.fit import fit_problem

    problem = fit_problem(config, platform.node_group(config.node_group))
    if problem is not None:
        key = "batchSize" if "batchSize" in values else "contextLength"
        raise JobFileError(f"{_where(source, lines, key)}: {key}: {problem}")
    if platform.shared_storage.is_fsx and config.checkpoint_claim is None:
        config = dataclasses.replace(config, checkpoint_claim=DEFAULT_CHECKPOINT_CLAIM)
    try:
        group = next(g for g in platform.gpu_node_groups if g.name == config.node_group)
        queue = resolve_queue(values, platform, gpu_job=group.instance.gpus > 0)
    except QueueError as err:
        key = str(err).split(":", 1)[0]
        raise JobFileError(f"{_where(source, lines, key)}: {err}") from None
    if queue is not None and queue.team is not None:
        config = dataclasses.replace(config, namespace=queue.team)
    api = values.get("api", "v1")
    if api not in ("v1", "v2"):
        raise JobFileError(f"{_where(source, lines, 'api')}: api: {api!r} is not v1 or v2")
    if api == "v2" and config.min_workers < config.workers:
        raise JobFileError(
            f"{_where(source, lines, 'api')}: api: v2 (Trainer v2) has no elastic policy: "
            f"minWorkers {config.min_workers} < workers {config.workers} needs api: v1"
        )
    return JobFile(
        source=source,
        values=values,
        config=config,
        platform=dataclasses.replace(platform, job=config),
        lines=dict(lines),
        queue=queue,
        api=str(api),
    )


def load(
    path: Path | str,
    *,
    sets: Sequence[str] = (),
    name: str | None = None,
    stack: str | None = None,
    root: Path | None = None,
) -> JobFile:
    """Read, override (``--set``, ``--name``, ``--stack``) and check the job file ``path``."""
    path = Path(path)
    source = str(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise JobFileError(f"{source}: no such job file (examples: jobs/examples/*.yaml)") from None
    except OSError as err:
        raise JobFileError(f"{source}: cannot read: {err.strerror}") from None
    values, lines = _key_lines(text, source)
    values = apply_sets(values, sets)
    if name is not None:
        values["name"] = name
    return parse(values, source=source, lines=lines, stack=stack, root=root)


def loads(text: str, *, source: str, root: Path | None = None) -> JobFile:
    """A job file from its text (a job's record)."""
    values, lines = _key_lines(text, source)
    return parse(values, source=source, lines=lines, root=root)
