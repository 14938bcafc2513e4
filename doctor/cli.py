"""``eks-fsdp doctor --stack STACK``: the account and this machine checked before ``pulumi up``.

``main(argv) -> int`` is the whole command (a console script can route ``eks-fsdp doctor`` to
it): 0 when nothing failed, 1 when a check failed, 2 on a usage error (argparse's code).
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from doctor.aws import Clients, account_checks
from doctor.checks import FAIL, SKIP, Result, failed, table, to_json
from doctor.local import (
    check_docker,
    check_model,
    check_pulumi_cli,
    check_secrets,
    is_hub_id,
    known_gated,
)
from doctor.stack import stack_checks
from eks_fsdp_cli.errors import Parser, fail, suggest
from infra.config import ConfigError, StackConfig, load_stack_file
from infra.config.sources import REPO_ROOT

PROG = "eks-fsdp doctor"
EXAMPLE = f"""example:
  {PROG} --stack p5-16            # the account, the secrets, Docker, the model
  {PROG} --stack p5-16 --offline  # no Hub lookup
  {PROG} --stack p5-16 --json     # for scripts: {{"ok": ..., "checks": [...]}}"""


def parser() -> argparse.ArgumentParser:
    p = Parser(
        command="doctor",
        prog=PROG,
        description="Check the AWS account (region, zones, reservations, quotas), the stack's "
        "secrets, Docker buildx and the model before `pulumi up`. Exit 1 if a check fails.",
        epilog=EXAMPLE,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        allow_abbrev=False,
    )
    p.add_argument("--stack", required=True, help="stack name (Pulumi.<stack>.yaml)")
    p.add_argument(
        "--job",
        action="append",
        type=Path,
        default=None,
        help="a job file whose model to check (repeatable; default: the files of jobs/ and jobs/examples/ naming the stack)",
    )
    p.add_argument("--offline", action="store_true", help="skip the Hugging Face Hub lookup")
    p.add_argument("--json", action="store_true", help="print JSON instead of the table")
    return p


def _stack_jobs(stack: str, root: Path) -> list[Path]:
    """The job files whose ``stack`` is ``stack``: those ``new-stack`` writes (``jobs/*.yaml``)
    and the shipped examples (``jobs/examples/*.yaml``)."""
    import yaml

    from eks_fsdp_cli.errors import read_text

    out = []
    folders = (root / "jobs", root / "jobs" / "examples")
    for path in (p for folder in folders for p in sorted(folder.glob("*.yaml"))):
        try:
            data = yaml.safe_load(read_text(path))
        except (OSError, ValueError, yaml.YAMLError):
            continue
        if isinstance(data, dict) and data.get("stack") == stack:
            out.append(path)
    return out


def job_checks(
    cfg: StackConfig, jobs: Sequence[Path], root: Path, *, offline: bool
) -> tuple[list[Result], list[str], list[str]]:
    """Each job file loads (fit included) and its hub model is reachable; the gated models and
    the hub models not looked up."""
    from jobs.schema import JobFileError, load

    results: list[Result] = []
    gated: list[str] = []
    unknown: list[str] = []
    seen: set[tuple[str, str | None]] = set()
    for path in jobs:
        try:
            job = load(path, stack=cfg.stack, root=root)
        except JobFileError as err:
            results.append(
                Result(
                    check=f"job {path.name}",
                    status=FAIL,
                    detail=str(err),
                    fix="fix the job file (eks-fsdp jobs submit --help)",
                )
            )
            continue
        results.append(
            Result(
                check=f"job {path.name}",
                status="ok",
                detail=f"{job.model} fits on {job.node_group}",
            )
        )
        model = job.model
        revision = None  # the default branch, as training loads it (a job file pins none yet)
        if not is_hub_id(model) or (model, revision) in seen:
            continue
        seen.add((model, revision))
        if offline:
            result, is_gated = (
                Result(check=f"model {model}", status=SKIP, detail="skipped (offline: --offline)"),
                False,
            )
        else:
            result, is_gated = check_model(model, revision)
        if result.status == SKIP and known_gated(model):  # not looked up, but known gated
            is_gated = True
            result = replace(
                result, detail=f"{result.detail}; gated ({model.split('/')[0]} models are)"
            )
        elif result.status == SKIP:
            unknown.append(model)
        results.append(result)
        if is_gated:
            gated.append(model)
    return results, gated, unknown


def run(
    stack: str,
    *,
    jobs: Sequence[Path] | None = None,
    offline: bool = False,
    clients: Clients | None = None,
    root: Path = REPO_ROOT,
) -> list[Result]:
    """Every check for ``stack``; ``clients`` default to the environment's AWS session."""
    cfg = load_stack_file(stack, root)
    results = [check_pulumi_cli()]  # first: every later step of docs/deploy.md runs it
    results += stack_checks(cfg)
    results += account_checks(cfg, clients or Clients.for_region(cfg.region or "us-east-1"))
    job_results, gated, unknown = job_checks(
        cfg, _stack_jobs(stack, root) if jobs is None else jobs, root, offline=offline
    )
    results += check_secrets(cfg, gated, root, unknown)
    results.append(check_docker(cfg))
    return results + job_results


def main(
    argv: Sequence[str] | None = None, *, clients: Clients | None = None, root: Path = REPO_ROOT
) -> int:
    """The command; ``clients`` and ``root`` are for tests (the environment's AWS session and
    the project's stack files otherwise)."""
    args = parser().parse_args(argv)
    if not (root / f"Pulumi.{args.stack}.yaml").is_file():
        stacks = sorted(p.name[len("Pulumi.") : -len(".yaml")] for p in root.glob("Pulumi.*.yaml"))
        guess = suggest(args.stack, stacks).strip(" ()?")
        return fail(
            "doctor",
            f"--stack {args.stack}: no stack file Pulumi.{args.stack}.yaml "
            f"({guess + '? ' if guess else ''}stacks: {', '.join(stacks)})",
        )
    for path in args.job or ():
        if not path.is_file():  # bad input, like an unknown stack: before any AWS call
            folders = (root / "jobs", root / "jobs" / "examples")
            known = [p.name for folder in folders for p in sorted(folder.glob("*.yaml"))]
            return fail("doctor", f"--job {path}: no such file{suggest(path.name, known)}")
    try:
        results = run(args.stack, jobs=args.job, offline=args.offline, clients=clients, root=root)
    except ConfigError as err:
        return fail("doctor", f"--stack {args.stack}: {err}")
    print(to_json(results) if args.json else table(results))
    return 1 if failed(results) else 0
