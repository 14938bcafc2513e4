"""``eks-fsdp plan``: will it fit, how fast, how well it scales, what an epoch costs.

    eks-fsdp plan --model llama2-70b --instance p4de.24xlarge --nodes 1,2,4,8,16
    eks-fsdp plan --stack p5-16 --json
    eks-fsdp plan --job jobs/examples/p5-16.yaml      # a job file on its stack
    eks-fsdp new-stack NAME --instance p5.48xlarge --nodes 16 --reservation cr-... \
        --region us-east-2                                # Pulumi.NAME.yaml + jobs/NAME.yaml
    eks-fsdp plan --model path/to/config.json --instance p5.48xlarge --nodes 2 \
        --sharding HYBRID_SHARD --hsdp-group 8 --no-ac --batch 2 --plot plan.png

Imports no torch and no Pulumi. Flags: ``planner.args``; formulas and assumptions:
docs/planner.md.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from eks_fsdp_cli.errors import fail
from planner.args import UsageError, calibrate_parser, parser, read_reports, resolve_args
from planner.calibrate import (
    CalibrationError,
    apply,
    calibrate,
    load,
    run_figures,
    with_preflight,
)
from planner.catalog import lookup
from planner.plan import plan
from planner.predict import PlanInput
from planner.report import table


def calibrate_main(argv: list[str]) -> int:
    """``eks-fsdp plan calibrate ...``: print (and write) the fitted calibration."""
    try:
        args = calibrate_parser().parse_args(argv)
        if not args.preflight:
            raise UsageError("--preflight is required (the run's preflight JSON)")
        reports = read_reports(args.preflight)
        if args.nodes is None and args.instance is not None:
            world = run_figures(args.run, args.step_stat)["world_size"]
            gpus = lookup(args.instance).gpus
            args.nodes = str(max(1, world // gpus))
        if args.dataset is None and args.dataset_tokens is None:
            args.dataset = "none"
        resolved = resolve_args(args, preset=_preset(args))
        cal = calibrate(resolved.inp, reports, args.run, args.step_stat)
    except (UsageError, CalibrationError, KeyError) as e:
        message = e.args[0] if isinstance(e, KeyError) else str(e)
        return fail("plan", message)
    text = json.dumps(cal.to_json(), indent=2)
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n")
    print(text)
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["calibrate"]:
        return calibrate_main(argv[1:])
    if argv[:1] == ["new-stack"]:
        from planner.newstack import main as new_stack

        return new_stack(argv[1:])
    try:
        args = parser().parse_args(argv)
        resolved = resolve_args(args, preset=_preset(args))
        if args.calibration is not None:
            try:
                cal = load(args.calibration)
                if args.preflight:
                    cal = with_preflight(cal, resolved.inp, read_reports(args.preflight))
                resolved.inp = apply(resolved.inp, cal)
            except CalibrationError as e:
                raise UsageError(str(e)) from None
        elif args.preflight:
            raise UsageError("--preflight needs --calibration (or the calibrate command)")
    except UsageError as e:
        return fail("plan", e)
    rows = plan(resolved.inp, resolved.nodes, resolved.min_nodes)
    if args.json:
        print(json.dumps(rows, indent=2))
    else:
        # a device: cpu job's estimate: the table's GPU figures are not the job's (it says so);
        # the table stays for node counts asked for (--nodes 1,2,4)
        estimated = resolved.limits is not None and len(resolved.nodes) == 1
        gpu = resolved.device == "cuda"
        if gpu or not estimated:
            print(table(rows))
        if estimated:
            from planner.estimate import describe, estimate_input

            est = estimate_input(
                resolved.inp, resolved.nodes[0], device=resolved.device, **resolved.limits
            )
            source = str(args.job) if args.job is not None else f"jobs/examples/{args.stack}.yaml"
            print("\n".join(["", *describe(est, source)] if gpu else describe(est, source)))
    if args.plot is not None:
        from planner.plot import plot

        plot(rows, args.plot)
        if not args.json:
            print(f"plot written to {args.plot}")
    return _fit_status(resolved.inp, rows)


def _fit_status(inp: PlanInput, rows: list[dict[str, Any]]) -> int:
    """Exit status of a plan: 1, with one error line saying what would fit, when the plan fits
    at none of its node counts; 0 when it fits at one at least (a scaling table whose smaller
    counts do not fit is an answer, and the table says which)."""
    if any(r["fits"] for r in rows):
        return 0
    from planner.fit import what_fits

    r = rows[0]
    gib = 1024**3
    return fail(
        "plan",
        f"does not fit: {r['mem_per_gpu_bytes'] / gib:,.1f} of {r['gpu_memory_bytes'] / gib:.1f} "
        f"GiB per GPU at {r['nodes']} node(s); {what_fits(inp, r['nodes'])}",
        status=NO_FIT_EXIT,
    )


NO_FIT_EXIT = 1
"""Exit status of a plan that does not fit (a failed check; 2 stays bad input)."""


def _preset(args: Any) -> dict[str, Any] | None:
    """The plan's inputs from ``--job`` / ``--stack`` (None: the flags alone)."""
    return job_preset(args.stack, args.job) if args.stack or args.job else None


def job_preset(stack: str | None, job_file: Path | None = None) -> dict[str, Any]:
    """The plan's inputs from a job file on its stack: ``job_file`` (its ``stack`` unless
    ``--stack`` names one), else the stack's job (``jobs.build.example_job``: ``jobs/<stack>.yaml``,
    else ``jobs/examples/<stack>.yaml``)."""
    from infra.config import ConfigError, load_stack_file
    from jobs.build import example_job
    from jobs.schema import load
    from planner.args import job_values

    path = job_file or example_job(str(stack))
    flag = f"--job {job_file}" if job_file else f"--stack {stack}"
    if stack is not None:
        try:
            load_stack_file(stack)  # a missing or invalid stack file is named first
        except (ConfigError, ValueError, OSError) as e:
            raise UsageError(f"--stack {stack}: {e}") from None
    if job_file is None and not path.is_file():
        raise UsageError(
            f"--stack {stack}: no job file jobs/{path.name} or jobs/examples/{path.name} "
            "(--job FILE)"
        )
    try:
        job_file = load(path, stack=stack)
    except (ConfigError, KeyError, ValueError, OSError) as e:
        raise UsageError(f"{flag}: {e}") from None
    return job_values(job_file, flag)


if __name__ == "__main__":
    sys.exit(main())
