"""``eks-fsdp new-stack NAME`` (also ``eks-fsdp new-stack NAME``): a cluster stack and
its job from one sentence.

    eks-fsdp new-stack p5-demo --instance p5.48xlarge --nodes 16 \\
        --reservation cr-0123456789abcdef0 --region us-east-2 --capacity-type capacity-block

writes ``Pulumi.NAME.yaml`` (one GPU nodegroup on the reservation, FSx for Lustre sized by
``planner.storage.fsx_capacity_for`` to write a checkpoint within ``CHECKPOINT_WRITE_S``,
observability on) and ``jobs/NAME.yaml`` (the planner's recommended layout, a checkpoint
interval that fires ``CHECKPOINTS_PER_JOB`` times, comments with the cost per hour and per
epoch). Both are checked the way ``pulumi up`` and ``jobs submit`` check them
(``infra.config.load_stack_file``, ``jobs.schema.load``) before the command returns; a failing
check removes what was written. Existing files are kept unless ``--force``.

The shipped job examples ``jobs/examples/p4de-odcr.yaml`` and ``p5-16.yaml`` are this
command's job files (``job_text``), renamed; tests/planner/test_new_stack.py checks them.
"""

from __future__ import annotations

import argparse
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

from eks_fsdp_cli.errors import Parser, fail
from planner.args import UsageError, builtin_for_hub_id, parser, resolve_args
from planner.assumptions import HF_DATASETS
from planner.estimate import JobEstimate, estimate_input, with_layout
from planner.predict import BLOCK_PRICE_UNKNOWN, ON_DEMAND, PlanInput, checkpoint_size
from planner.recommend import recommend
from planner.storage import Storage, fsx_capacity_for

CHECKPOINTS_PER_JOB = 3
"""Interval checkpoints a generated job writes (steps // checkpointEvery): at least a few, so
a preemption or a bad node costs at most a third of the job, not the whole of it."""
CHECKPOINT_WRITE_S = 300.0
"""FSx sizing: one checkpoint written in at most 5 minutes (a preempted pod's grace period is
of that order, docs/deploy.md "Costs")."""
DEFAULT_MODEL = "meta-llama/Llama-2-7b-chat-hf"
DEFAULT_DATASET = ("HuggingFaceH4/ultrachat_200k", "train_sft", "test_sft")
"""A chat model (its tokenizer carries the chat template chat rows need, ``training.data.chat``) and
a dataset whose size the planner knows without a download (``planner.assumptions``)."""
_RESERVATION = re.compile(r"^cr-[0-9a-f]{17}$")
_REGION = re.compile(r"^[a-z]{2}(-[a-z]+)+-\d$")
_NAME = re.compile(r"^[a-z0-9]([a-z0-9-]{0,30}[a-z0-9])?$")


COMMAND = "new-stack"
"""Its name under ``eks-fsdp`` (eks_fsdp_cli.main) and in its error lines."""


class _Parser(Parser):
    def error(self, message: str) -> NoReturn:
        raise UsageError(self.explain(message))  # "did you mean --instance?" (eks_fsdp_cli.errors)


def new_stack_parser() -> argparse.ArgumentParser:
    p = _Parser(
        command=COMMAND,
        prog="eks-fsdp new-stack",  # also eks-fsdp new-stack
        description="Write Pulumi.NAME.yaml and jobs/NAME.yaml at the planner's recommended "
        "layout, with their cost per hour and per epoch.",
    )
    p.add_argument("name", metavar="NAME", help="stack name (lower case, digits, -)")
    p.add_argument("--instance", required=True, help="EC2 instance type (infra/instances.py)")
    p.add_argument("--nodes", type=int, required=True, help="GPU nodes (the reservation's count)")
    p.add_argument("--reservation", help="capacity reservation id cr-... (none: on demand)")
    p.add_argument(
        "--capacity-type",
        choices=("on-demand", "capacity-block"),
        default="on-demand",
        help="on-demand (an ODCR, or none) or capacity-block (EC2 Capacity Block for ML)",
    )
    p.add_argument(
        "--block-start",
        metavar="UTC",
        help="capacity-block: the block's start, e.g. 2026-12-10T11:30:00Z (aws ec2 "
        "describe-capacity-reservations shows it): the group scales up then",
    )
    p.add_argument(
        "--block-end",
        metavar="UTC",
        help="capacity-block: the block's end; the group scales to zero and jobs checkpoint "
        "before it (docs/capacity.md)",
    )
    p.add_argument(
        "--price",
        type=float,
        metavar="USD",
        help="price per node-hour (a capacity block's is set when it is bought; default: the "
        "on-demand list price, labelled as such)",
    )
    p.add_argument("--region", required=True, help="AWS region, e.g. us-east-2")
    p.add_argument("--zone", help="the reservation's zone (default: <region>a)")
    p.add_argument("--model", default=DEFAULT_MODEL, help=f"model (default {DEFAULT_MODEL})")
    p.add_argument("--context", type=int, default=4096, help="tokens per sample (default 4096)")
    p.add_argument("--epochs", type=int, default=1, help="epochs (default 1)")
    p.add_argument(
        "--dir", type=Path, default=Path("."), help="where Pulumi.NAME.yaml goes (default .)"
    )
    p.add_argument("--job-out", type=Path, help="the job file (default DIR/jobs/NAME.yaml)")
    p.add_argument("--force", action="store_true", help="overwrite existing files")
    return p


@dataclass(frozen=True)
class Generated:
    """What ``new-stack`` decided: the layout, the job's figures, the storage."""

    inp: PlanInput
    estimate: JobEstimate
    storage: Storage
    checkpoint_every: int


def _zones(region: str, zone: str) -> list[str]:
    """The reservation's zone first, then the region's next letters up to three zones."""
    letters = [zone[-1]] + [c for c in "abc" if c != zone[-1]]
    return [f"{region}{c}" for c in letters[:3]]


def generate(
    *,
    instance: str,
    nodes: int,
    model: str = DEFAULT_MODEL,
    seq: int = 4096,
    epochs: int = 1,
    dataset: str = "ultrachat_200k",
    storage: Storage | None = None,
    min_nodes: int | None = None,
    price: float | None = None,
    basis: str = ON_DEMAND,
) -> Generated:
    """The recommended layout of ``model`` on ``nodes`` x ``instance`` and its checkpoint
    interval (``min_nodes``: an elastic job's minimum, which its HSDP group must divide too);
    ``UsageError`` when nothing fits or the planner does not know the dataset."""
    args = parser().parse_args([])
    preset = {
        "model": builtin_for_hub_id(model),
        "instance": instance,
        "nodes": str(nodes),
        "seq": seq,
        "epochs": epochs,
        "dataset": dataset,
    }
    inp = resolve_args(args, preset=preset).inp
    if inp.dataset_tokens <= 0:
        raise UsageError(f"dataset {dataset}: its size is unknown to the planner")
    rec = recommend(inp, nodes, min_nodes=min_nodes)
    if rec is None:
        raise UsageError(
            f"--model {model}: does not fit {nodes} x {instance} in any layout "
            "(more nodes, a shorter --context, or LoRA)"
        )
    inp = with_layout(inp, rec)
    if storage is None:
        storage = fsx_capacity_for(checkpoint_size(inp), write_s=CHECKPOINT_WRITE_S, nodes=nodes)
    from dataclasses import replace

    inp = replace(inp, storage=storage, usd_per_hour=price, price_basis=basis)
    bare = estimate_input(inp, nodes, max_steps=None, checkpoint_every=None)
    steps = bare.steps or 0
    every = max(1, steps // CHECKPOINTS_PER_JOB)
    est = estimate_input(inp, nodes, max_steps=None, checkpoint_every=every)
    return Generated(inp=inp, estimate=est, storage=storage, checkpoint_every=every)


def _comment(paragraphs: list[str]) -> list[str]:
    """``# `` lines of at most 99 characters."""
    import textwrap

    return [f"# {ln}" for p in paragraphs for ln in textwrap.wrap(p, 97)]


def cost_comment(gen: Generated) -> list[str]:
    """The comment lines of figures both files carry."""
    est, inp = gen.estimate, gen.inp
    gib = 1024**3
    rec = est.recommendation or {}
    group = f" (group {inp.hsdp_group})" if inp.hsdp_group else ""
    eta = (est.eta_s or 0.0) / 3600
    return [
        f"Planner: {inp.strategy}{group}, AC {'on' if inp.ac > 0 else 'off'}, micro-batch "
        f"{inp.batch} x {inp.seq} tokens ({inp.precision.name}): {est.tokens_per_s_per_gpu:,.0f} "
        f"tok/s/GPU, {est.mem_per_gpu_bytes / gib:.1f} of {est.gpu_memory_bytes / gib:.1f} GiB "
        f"per GPU, step {est.step_s:.2f} s{'' if rec else ' (no recommendation)'}.",
        f"{est.steps} optimizer steps over {inp.epochs} epoch(s) of "
        f"{inp.dataset_tokens / 1e6:,.0f} M tokens; a checkpoint every {gen.checkpoint_every} "
        f"steps ({est.checkpoints} in all).",
        f"Cost: ${est.usd_per_hour:,.2f}/h for the {est.nodes} nodes ({inp.price_basis}); "
        f"~${est.cost_per_epoch_usd or 0:,.0f} per epoch, ~${est.cost_usd or 0:,.0f} and "
        f"{eta:.1f} h for the job.",
    ]


def job_text(
    gen: Generated,
    *,
    name: str,
    stack: str,
    model: str,
    dataset: tuple[str, str, str] = DEFAULT_DATASET,
    header: tuple[str, ...] = (),
    extra: dict[str, Any] | None = None,
) -> str:
    """The job file at the generated layout (``header``: comment lines above the figures;
    ``extra``: more top-level keys, e.g. ``minWorkers``)."""
    inp, nodes = gen.inp, gen.estimate.nodes
    lines = [f"# {h}" if h else "#" for h in header]
    lines += _comment(cost_comment(gen))
    if not header:
        lines.append(f"#   eks-fsdp jobs submit <this file> --stack {stack}")
    body: list[str] = [
        f"name: {name}",
        f"stack: {stack}",
        f"model: {model}",
        "dataset: hf_dataset",
        f"workers: {nodes}",
    ]
    for key, value in (extra or {}).items():
        body.append(f"{key}: {value}")
    body += [
        f"numEpochs: {inp.epochs}",
        f"batchSize: {inp.batch}",
        f"contextLength: {inp.seq}",
        f"shardingStrategy: {inp.strategy}",
        "# c10d: the store lives in worker 0's agent, no etcd to lose (docs/adr/0005)",
        "rdzvBackend: c10d",
        "maxRestarts: 3",
        f"checkpointEvery: {gen.checkpoint_every}",
        "args:",
        f"  hf_dataset: {dataset[0]}",
        f"  hf_split: {dataset[1]}",
        f"  hf_eval_split: {dataset[2]}",
        f"  fsdp_activation_checkpointing: {'true' if inp.ac > 0 else 'false'}",
    ]
    if inp.precision.name == "pure_bf16":
        body.append("  pure_bf16: true")
    if inp.hsdp_group and inp.hsdp_group != inp.instance.gpus:
        body += ["  hsdp: true", f"  sharding_group_size: {inp.hsdp_group}"]
    return "\n".join(lines + body) + "\n"


def stack_text(gen: Generated, *, name: str, args: argparse.Namespace) -> str:
    """``Pulumi.NAME.yaml``: one GPU nodegroup on the reservation, FSx, observability."""
    zone = args.zone or f"{args.region}a"
    inst = gen.inp.instance
    efa = inst.efa_interfaces > 0
    command = (
        f"eks-fsdp new-stack {name} --instance {inst.name} --nodes {args.nodes}"
        + (f" --reservation {args.reservation}" if args.reservation else "")
        + f" --capacity-type {args.capacity_type} --region {args.region} --zone {zone}"
        + (
            f" --block-start {args.block_start} --block-end {args.block_end}"
            if args.block_start
            else ""
        )
        + (f" --price {args.price:g}" if args.price is not None else "")
    )
    out = [
        f"# {args.nodes} x {inst.name} ({args.nodes * inst.gpus} x {inst.gpu_model}), written by",
        f"#   {command}",
        *_comment(cost_comment(gen)),
        "# Before `pulumi up`: pulumi config set --path 'apiPublicAccessCidrs[0]' <your IP>/32,",
        "# then `eks-fsdp doctor --stack " + name + "` (docs/deploy.md).",
        "config:",
        f"  aws:region: {args.region}",
        f"  eks-fsdp:clusterName: eks-fsdp-{name}",
        "  eks-fsdp:availabilityZones:",
        *(f"    - {z}" for z in _zones(args.region, zone)),
        "  eks-fsdp:natGateways: single",
        "  eks-fsdp:gpuNodeGroups:",
        f"    - name: {name}-gpu",
        f"      instanceType: {inst.name}",
        "      minSize: 0",
        f"      desiredSize: {args.nodes}",
        f"      maxSize: {args.nodes}",
        f"      availabilityZone: {zone}",
        f"      efa: {'true' if efa else 'false'}",
    ]
    if args.reservation:
        out += [
            f"      capacityType: {args.capacity_type}",
            f"      capacityReservationId: {args.reservation}",
            "      # No placement group: the reservation fixes where the instances land.",
            "      placementGroup: none",
        ]
    if args.price is not None:
        out.append(f"      pricePerHour: {args.price:g}")
    if args.block_start is not None:
        out += [
            "      # The block's window: scaled up at its start, to zero before its end, and",
            "      # jobs checkpoint before that (docs/capacity.md).",
            "      capacityBlock:",
            f"        start: {args.block_start}",
            f"        end: {args.block_end}",
        ]
    elif args.capacity_type == "capacity-block":
        import textwrap

        out += [f"      # {ln}" for ln in textwrap.wrap(NO_WINDOW, 91)]
        out.append(
            "      # capacityBlock: {start: <UTC>, end: <UTC>}  (eks-fsdp doctor shows them)"
        )
    out += [
        f"  # Checkpoints: {gen.storage.describe()}, sized to write one in "
        f"{CHECKPOINT_WRITE_S / 60:.0f} min or less.",
        "  eks-fsdp:sharedStorage:",
        "    type: fsx",
        f"    storageCapacityGiB: {gen.storage.capacity_gib}",
        f"    deploymentType: {gen.storage.deployment_type}",
        "  eks-fsdp:observability:",
        "    enabled: true",
        "    dcgm: true",
    ]
    return "\n".join(out) + "\n"


def _check(args: argparse.Namespace) -> None:
    if not _NAME.match(args.name):
        raise UsageError(f"NAME {args.name}: lower-case letters, digits and -, at most 32")
    if args.reservation is not None and not _RESERVATION.match(args.reservation):
        raise UsageError(f"--reservation {args.reservation}: expected cr- and 17 hex digits")
    if args.capacity_type == "capacity-block" and args.reservation is None:
        raise UsageError("--capacity-type capacity-block: needs --reservation (the block's id)")
    if (args.block_start is None) != (args.block_end is None):
        given = "--block-start" if args.block_start is not None else "--block-end"
        other = "--block-end" if args.block_start is not None else "--block-start"
        raise UsageError(f"{given}: needs {other} too (the block's start and end, UTC)")
    if args.block_start is not None:
        if args.capacity_type != "capacity-block":
            raise UsageError("--block-start: only with --capacity-type capacity-block")
        args.block_start, args.block_end = (
            _utc_flag(args.block_start, "--block-start"),
            _utc_flag(args.block_end, "--block-end"),
        )
        if args.block_end <= args.block_start:
            raise UsageError(f"--block-end {args.block_end}: not after --block-start")
    if args.price is not None and args.price <= 0:
        raise UsageError(f"--price {args.price:g}: must be > 0 (USD per node-hour)")
    if not _REGION.match(args.region):
        raise UsageError(f"--region {args.region}: not a region name (e.g. us-east-2)")
    if args.zone is not None and not (
        args.zone.startswith(args.region) and re.fullmatch(r"[a-z]", args.zone[len(args.region) :])
    ):
        raise UsageError(f"--zone {args.zone}: not a zone of {args.region} (e.g. {args.region}a)")
    if args.nodes < 1:
        raise UsageError(f"--nodes {args.nodes}: must be >= 1")


NO_WINDOW = (
    "No capacityBlock window: the group is never scaled down before the block ends and "
    "jobs get no end time to checkpoint before; set its start and end (UTC)."
)
"""What ``new-stack`` writes and prints for a capacity block without ``--block-start/-end``."""


def _utc_flag(value: str, flag: str) -> str:
    """``value`` as the stack file writes a block's time (``2026-12-10T11:30:00Z``); an
    instant without a UTC offset is refused (capacity blocks run in UTC, docs/capacity.md)."""
    import datetime as dt

    from infra.config.nodegroups import iso_utc

    try:
        moment = dt.datetime.fromisoformat(value.strip())
    except ValueError:
        raise UsageError(f"{flag} {value}: not a time like 2026-12-10T11:30:00Z") from None
    if moment.tzinfo is None or moment.utcoffset() != dt.timedelta(0):
        raise UsageError(f"{flag} {value}: not in UTC (end it with Z)")
    return iso_utc(moment)


SECRETS_METADATA = ("secretsprovider", "encryptedkey", "encryptionsalt")
"""A stack file's top-level keys that say how its ``secure:`` values are encrypted."""


def _kept_settings(path: Path) -> list[str]:
    """The lines of an existing stack file that ``--force`` must not lose: its secrets
    metadata (``secretsprovider``, ``encryptedkey``, ``encryptionsalt``: Pulumi docs, "Stack
    settings file reference", pulumi.com/docs/iac/concepts/projects/stack-settings-file) and
    each ``config:`` value set with ``pulumi config set --secret`` (a ``secure:`` ciphertext
    that cannot be made again without the plaintext). Kept as the file holds them, so the
    secrets still decrypt; a file that is not a Pulumi stack mapping is refused in one line."""
    import yaml

    if not path.is_file():
        return []
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as err:
        raise UsageError(f"{path}: --force: not YAML ({str(err).splitlines()[0]})") from None
    if not isinstance(data, dict) or not isinstance(data.get("config") or {}, dict):
        raise UsageError(f"{path}: --force: not a Pulumi stack file (no config: mapping)")
    meta = {k: v for k, v in data.items() if k in SECRETS_METADATA}
    out = yaml.safe_dump(meta, sort_keys=False, width=10**6).splitlines() if meta else []
    secure = {
        k: v for k, v in (data.get("config") or {}).items() if isinstance(v, dict) and "secure" in v
    }
    if secure:
        dumped = yaml.safe_dump({"config": secure}, sort_keys=False, width=10**6)
        out += dumped.splitlines()[1:]  # indented under config: as dumped
    return out


def _with_kept(text: str, kept: list[str]) -> str:
    """``text`` (a generated stack file) with ``kept`` (``_kept_settings``): top-level keys
    first, the secure config values at the end of ``config:``."""
    if not kept:
        return text
    top = [line for line in kept if not line.startswith(" ")]
    config = [line for line in kept if line.startswith(" ")]
    lines = text.rstrip("\n").split("\n")
    at = lines.index("config:")
    lines[at:at] = top
    lines += ["  # kept from the file --force replaced (pulumi config set --secret)", *config]
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    """Write the two files and print their paths and figures; 2 on bad input."""
    if list(argv) == ["--examples"]:
        return write_examples()
    try:
        args = new_stack_parser().parse_args(argv)
        _check(args)
        hub, split, _ = DEFAULT_DATASET
        basis = ON_DEMAND
        if args.price is not None:
            basis = "--price"
        elif args.capacity_type == "capacity-block":
            basis = BLOCK_PRICE_UNKNOWN.replace("set pricePerHour", "pass --price")
        gen = generate(
            instance=args.instance,
            nodes=args.nodes,
            model=args.model,
            seq=args.context,
            epochs=args.epochs,
            dataset=HF_DATASETS[(hub, split)],
            price=args.price,
            basis=basis,
        )
        stack_path = args.dir / f"Pulumi.{args.name}.yaml"
        job_path = args.job_out or args.dir / "jobs" / f"{args.name}.yaml"
        for path in (stack_path, job_path):
            if path.exists() and not args.force:
                raise UsageError(f"{path}: exists (pass --force to overwrite)")
        kept = _kept_settings(stack_path) if args.force else []
        header = (
            f"{args.name}: {args.model} on {args.nodes} x {args.instance}, written by",
            f"`eks-fsdp new-stack {args.name}` (docs/planner.md).",
            f"  eks-fsdp jobs submit {job_path} --stack {args.name}",
        )
        job_name = f"{args.name}-finetune"[:50].rstrip("-")
        job = job_text(gen, name=job_name, stack=args.name, model=args.model, header=header)
        stack = _with_kept(stack_text(gen, name=args.name, args=args), kept)
        stack_path.parent.mkdir(parents=True, exist_ok=True)
        job_path.parent.mkdir(parents=True, exist_ok=True)
        # --force over a stack file: its secrets' ciphertexts and salt exist nowhere else, so a
        # file that fails the check gives back the bytes that were there.
        before = {p: p.read_bytes() if p.is_file() else None for p in (stack_path, job_path)}
        stack_path.write_text(stack)
        job_path.write_text(job)
        try:
            _verify(args.name, stack_path.parent, job_path)
        except UsageError:
            for path, old in before.items():
                if old is None:
                    path.unlink()
                else:
                    path.write_bytes(old)
            raise
    except UsageError as e:
        return fail(COMMAND, e)  # the project's one error format
    print(f"wrote {stack_path}")
    print(f"wrote {job_path}")
    for line in cost_comment(gen):
        print(f"  {line}")
    if args.capacity_type == "capacity-block" and args.block_start is None:
        print(
            f"warning: {NO_WINDOW} Pass --block-start/--block-end, or set capacityBlock in "
            f"{stack_path} (eks-fsdp doctor --stack {args.name} reads them from the block)",
            file=sys.stderr,
        )
    return 0


def _verify(name: str, root: Path, job_path: Path) -> None:
    """Both files load as ``pulumi up`` and ``jobs submit`` would read them."""
    import shutil
    import tempfile

    from infra.config import ConfigError, load_stack_file
    from infra.config.sources import REPO_ROOT
    from jobs.schema import JobFileError, load

    with tempfile.TemporaryDirectory() as tmp:
        if not (root / "Pulumi.yaml").is_file():  # outside a checkout: this project's
            shutil.copy(REPO_ROOT / "Pulumi.yaml", Path(tmp) / "Pulumi.yaml")
            shutil.copy(root / f"Pulumi.{name}.yaml", Path(tmp) / f"Pulumi.{name}.yaml")
            root = Path(tmp)
        try:
            load_stack_file(name, root)
            load(job_path, root=root)
        except (ConfigError, JobFileError, ValueError) as e:
            raise UsageError(f"the written files do not load: {e}") from None


EXAMPLES: dict[str, dict[str, Any]] = {
    "p5-16": {
        "instance": "p5.48xlarge",
        "nodes": 16,
        "model": "meta-llama/Llama-2-7b-chat-hf",
        "name": "llama2-7b-samsum-128gpu",
        "extra": {"minWorkers": 14},
        "header": (
            "Llama 2 7B chat on ultrachat_200k over the p5-16 stack's sixteen p5.48xlarge (128",
            "H100): the scaling run, written by `eks-fsdp new-stack --examples` (the job",
            "file of `eks-fsdp new-stack`). Elastic from 14 to 16 workers; checkpoints",
            "on the stack's FSx claim. (The name is kept from its samsum days: commands name it.)",
            "  eks-fsdp jobs submit jobs/examples/p5-16.yaml --stack p5-16",
        ),
    },
    "p4de-odcr": {
        "instance": "p4de.24xlarge",
        "nodes": 2,
        "model": "meta-llama/Llama-2-13b-chat-hf",
        "name": "llama2-13b-samsum",
        "extra": {},
        "header": (
            "Llama 2 13B chat on ultrachat_200k over the p4de-odcr stack's two p4de.24xlarge",
            "(16 A100 80GB), written by `eks-fsdp new-stack --examples` (the job file of",
            "`eks-fsdp new-stack`); 70B does not fit two p4de nodes. Checkpoints on the",
            "stack's FSx claim, so the job resumes after a restart. (The name is kept from its",
            "samsum days: commands name it.)",
            "  eks-fsdp jobs submit jobs/examples/p4de-odcr.yaml --stack p4de-odcr",
        ),
    },
}
"""The shipped job examples new-stack regenerates (the stacks themselves are kept as they are:
their fleet and storage are what the examples are planned on)."""


def example_text(stack: str, root: Path | None = None) -> str:
    """The job example of a shipped stack, generated on that stack's fleet and storage."""
    from infra.config import load_stack_file
    from infra.config.sources import REPO_ROOT
    from planner.storage import from_stack_config

    spec = EXAMPLES[stack]
    cfg = load_stack_file(stack, root or REPO_ROOT)
    storage = from_stack_config(cfg.shared_storage)
    gen = generate(
        instance=spec["instance"],
        nodes=spec["nodes"],
        model=spec["model"],
        storage=storage,
        min_nodes=spec["extra"].get("minWorkers"),
    )
    return job_text(
        gen,
        name=spec["name"],
        stack=stack,
        model=spec["model"],
        header=spec["header"],
        extra=spec["extra"],
    )


def write_examples() -> int:
    """``eks-fsdp new-stack --examples``: rewrite the shipped job examples (for maintainers,
    after a change of the planner's figures)."""
    from eks_fsdp_cli.paths import REPO_ROOT

    for name in EXAMPLES:
        path = REPO_ROOT / "jobs" / "examples" / f"{name}.yaml"
        path.write_text(example_text(name))
        print(f"wrote {path.relative_to(REPO_ROOT)}")
    return 0


if __name__ == "__main__":
    import sys

    sys.exit(main(sys.argv[1:]))
