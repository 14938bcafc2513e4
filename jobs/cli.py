"""``eks-fsdp jobs``: submit, list, status, logs, suspend, unsuspend, cancel and resume
fine-tuning jobs, on a cluster (a PyTorchJob or TrainJob through the Kubernetes API) or on this
machine (``--local``), and copy data to and from a cluster (``data``).

One function per verb, registered in ``VERBS`` with its help, its example and its flags (as
kubectl's and kueuectl's commands have one constructor each); the backend (``jobs.backends``)
answers every verb the same way on a cluster and here. Tables for people, ``--json`` for
scripts; exit status 0 on success, 1 when the request failed (or, for ``--follow``, the job
did), 2 on bad input; every error is one line saying what is wrong and what to do.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from eks_fsdp_cli.errors import Parser, fail
from jobs.types import Backend, JobsError

if TYPE_CHECKING:
    from jobs.schema import JobSpec

PROG = "eks-fsdp jobs"


@dataclass(frozen=True)
class Verb:
    """One verb: its one-line help, the examples its ``--help`` ends with, its own flags and
    the function that runs it (0/1/130 as the verb's result)."""

    help: str
    example: str
    flags: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]
    backend_flags: bool = True
    """Whether the verb takes the common flags (--local, --stack, --kubeconfig, -n, --json)."""


def _write(text: str) -> None:
    sys.stdout.write(text)
    sys.stdout.flush()


def _print(args: argparse.Namespace, data: Any, text: str) -> None:
    from jobs.output import as_json

    print(as_json(data) if args.json else text, flush=True)


def _backend(args: argparse.Namespace, namespace: str | None = None) -> Backend:
    from jobs.backends import choose

    return choose(
        local=args.local,
        kubeconfig=args.kubeconfig,
        stack=args.stack,
        namespace=namespace or args.namespace,
    )


def _name(p: argparse.ArgumentParser) -> None:
    p.add_argument("name", metavar="NAME")


def _wait_flag(p: argparse.ArgumentParser) -> None:
    from jobs.cluster.logs import WAIT_TIMEOUT_S

    p.add_argument(
        "--wait-timeout",
        type=float,
        default=WAIT_TIMEOUT_S,
        metavar="SECONDS",
        help="cluster, with --follow: how long to wait for the worker pod to start "
        f"(default {WAIT_TIMEOUT_S:g})",
    )


def _wait_timeout(args: argparse.Namespace) -> float:
    if args.wait_timeout <= 0:
        raise JobsError(f"--wait-timeout {args.wait_timeout:g}: must be > 0 seconds", status=2)
    return float(args.wait_timeout)


# -- submit --------------------------------------------------------------------------------


def _submit_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("file", metavar="FILE", help="job file (YAML; see jobs/examples/)")
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        dest="sets",
        help="override a key of the file (repeatable)",
    )
    p.add_argument("--name", help="job name instead of the file's")
    p.add_argument("--team", help="submit to this team's queue and namespace (the stack's teams)")
    p.add_argument(
        "--priority", help="Kueue priority class: production | experiment (default: the team's)"
    )
    p.add_argument(
        "--replace",
        action="store_true",
        help="replace a finished job of the same name (its record; local: logs, checkpoints)",
    )
    p.add_argument(
        "--image", help="training image (cluster; default: the file's, else the stack's)"
    )
    p.add_argument(
        "-f",
        "--follow",
        action="store_true",
        help="follow until the job ends (local: the runner's progress; Ctrl-C cancels it; "
        "cluster: worker pod 0's log, once it has started)",
    )
    p.add_argument(
        "--from",
        dest="from_uri",
        metavar="URI",
        help="a new job continuing from its checkpoints under this root (ROOT/NAME/step-N: a "
        "path, cluster: on the job's checkpoint claim, or s3://BUCKET/PREFIX), e.g. on a new "
        "cluster; kept for later resumes",
    )
    p.add_argument(
        "--dry-run",
        action="store_true",
        help="check the file, print the objects (YAML) and the plan; create and start nothing",
    )
    from localrun.options import FAULT_KINDS

    p.add_argument(
        "--fault",
        metavar="KIND@STEP",
        help="local: inject a fault to rehearse recovery: "
        + " | ".join(f"{k}@K" for k in FAULT_KINDS[1:])
        + " (docs/jobs.md)",
    )
    _wait_flag(p)


def _load_once(args: argparse.Namespace) -> tuple[JobSpec, list[str]]:
    """The job file read once, with ``--set``, ``--name``, ``--team``, ``--priority``, ``-n``
    and the Hub revisions pinned to commits (``jobs.revisions.pin_values``) applied before it
    is checked, once; with ``--stack`` on a cluster and no namespace or team in the file, the
    namespace the stack prepared for jobs (its output, read only once the file is known to be
    valid). Returns the job and the pinning's notes."""
    from jobs import schema
    from jobs.revisions import pin_values

    source, values, lines = schema.read(args.file)
    sets = list(args.sets) + ([f"namespace={args.namespace}"] if args.namespace else [])
    sets += [f"{k}={v}" for k, v in (("team", args.team), ("priority", args.priority)) if v]
    values = schema.apply_sets(values, sets)
    if args.name is not None:
        values["name"] = args.name
    if args.stack:
        values["stack"] = args.stack
    if not args.dry_run:  # the Hub revisions as commits, recorded with the job
        pinned = pin_values(
            values,
            default_dataset=schema.default("dataset"),
            source=source,
            from_uri=args.from_uri,
            local=args.local,
        )
        values, notes = schema.apply_sets(values, pinned.sets), pinned.notes
    else:
        notes = []
    job = schema.parse(values, source=source, lines=lines)
    if not args.local and args.stack and not {"namespace", "team"} & set(values):
        from jobs.cluster.kube import jobs_namespace  # the namespace the stack prepared for jobs

        namespace = jobs_namespace(args.stack)
        if namespace != job.namespace:
            job = schema.with_values(job, [f"namespace={namespace}"])
    return job, notes


def submit(args: argparse.Namespace) -> int:
    from jobs import output
    from planner.estimate import lines as estimate

    if args.from_uri is not None:
        from jobs.resume_from import parse

        parse(args.from_uri, local=args.local, claim_mount="/")  # its form, before any request
    _wait_timeout(args)
    job, notes = _load_once(args)  # (--from: the revisions its checkpoint was made with)
    if args.dry_run:
        return _dry_run(args, job)
    backend = _backend(args, job.namespace)
    planned = notes + estimate(job)  # computed before anything is sent
    done = backend.submit(
        job, image=args.image, replace=args.replace, from_uri=args.from_uri, fault=args.fault
    )
    if args.from_uri is not None:  # ROOT/NAME/job.json: `resume NAME --from ROOT` anywhere
        _keep_record(args, job)
    for line in planned:  # printed once the job exists: a refusal stays one line
        print(line, file=sys.stderr, flush=True)
    _print(args, done.as_dict(), output.submitted_text(done))
    if args.follow:
        return backend.follow(done.name, _write, wait_timeout_s=args.wait_timeout)
    return 0


SUBMITTED = ("pytorchjob", "trainjob", "workers-network-policy")
"""The components ``submit`` creates (the stack creates the etcd, the claim, the
ServiceAccount); ``submit`` adds the job's record, a ConfigMap of the file it read."""


def _dry_run(args: argparse.Namespace, job: JobSpec) -> int:
    """``submit --dry-run``: the job's objects as submit would create them (``jobs.build``,
    ``jobs.cluster.trainjob.as_submitted``: the renderer's path) on stdout, the plan on stderr;
    no cluster is asked and nothing is started (the Hub revisions are not pinned)."""
    import yaml

    from jobs.build import build
    from jobs.cluster.trainjob import as_submitted
    from planner.estimate import lines as estimate
    from workloads.specs.stack import objects_by_component

    w = build(job, image=args.image, local_paths=args.local)
    made = as_submitted(objects_by_component(w), job, w.job)  # the stack's pieces too
    objects = [o for c in SUBMITTED for o in made.get(c, [])]
    print(yaml.safe_dump_all(objects, sort_keys=False), end="", flush=True)
    for line in estimate(job):
        print(line, file=sys.stderr)
    if args.local:
        from jobs.local.backend import memory_problem

        if (problem := memory_problem(job)) is not None:
            print(f"warning: {problem}", file=sys.stderr)
    kinds = ", ".join(f"{o['kind']}/{o['metadata']['name']}" for o in objects)
    print(f"dry run: nothing created ({kinds})", file=sys.stderr, flush=True)
    return 0


def _keep_record(args: argparse.Namespace, job: JobSpec) -> None:
    """``submit --from ROOT``: the job's record to ``ROOT/<folder>/job.json`` (an s3:// root,
    or a local job's folder); a failure is one warning line, the job runs anyway."""
    from jobs.resume_from import job_folder, keep_record, parse

    root = parse(args.from_uri, local=args.local, claim_mount="/")
    if not (root.startswith("s3://") or args.local):
        return  # a path in the pods: not reachable from here
    folder = job_folder(job.name, None if args.local else job.namespace)
    try:
        keep_record(root, folder, dict(job.values), None if args.local else args.image)
    except Exception as e:  # any failure: the job itself is submitted
        first = (str(e).strip().splitlines() or [type(e).__name__])[0]
        print(f"warning: job record not written under {root}: {first}", file=sys.stderr)


# -- the other verbs -------------------------------------------------------------------------


def list_jobs(args: argparse.Namespace) -> int:
    from jobs import output

    jobs = _backend(args).list()
    _print(args, [j.as_dict() for j in jobs], output.list_table(jobs))
    return 0


def status(args: argparse.Namespace) -> int:
    from jobs import output

    info = _backend(args).status(args.name)
    _print(args, info.as_dict(), output.status_page(info))
    return 0


def _logs_flags(p: argparse.ArgumentParser) -> None:
    _name(p)
    p.add_argument(
        "--rank",
        type=int,
        default=0,
        metavar="N",
        help="the worker pod's replica index: pod NAME-worker-N (default 0), not torch's RANK",
    )
    p.add_argument(
        "-f",
        "--follow",
        action="store_true",
        help="wait for the pod to start, then stream until it ends",
    )
    _wait_flag(p)
    p.add_argument("--tail", type=int, metavar="N", help="only the last N lines")
    p.add_argument(
        "--runner", action="store_true", help="local: the runner's log (progress, summary)"
    )


def logs(args: argparse.Namespace) -> int:
    wait = _wait_timeout(args)
    if args.tail is not None and args.tail < 0:
        raise JobsError(f"--tail {args.tail}: must be >= 0", status=2)
    backend = _backend(args)
    try:
        backend.logs(
            args.name,
            rank=args.rank,
            follow=args.follow,
            tail=args.tail,
            write=_write,
            runner=args.runner,
            wait_timeout_s=wait,
        )
    except KeyboardInterrupt:
        return 130
    return 0


def _cancel_flags(p: argparse.ArgumentParser) -> None:
    _name(p)
    p.add_argument(
        "--purge", action="store_true", help="also remove its record (local: logs, checkpoints)"
    )


def cancel(args: argparse.Namespace) -> int:
    message = _backend(args).cancel(args.name, purge=args.purge)
    _print(args, {"name": args.name, "cancelled": True, "message": message}, message)
    return 0


def _suspend(on: bool) -> Callable[[argparse.Namespace], int]:
    verb = "suspend" if on else "unsuspend"

    def run(args: argparse.Namespace) -> int:
        message = _backend(args).suspend(args.name, on=on)
        _print(args, {"name": args.name, verb + "ed": True, "message": message}, message)
        return 0

    run.__name__ = verb
    return run


def _resume_flags(p: argparse.ArgumentParser) -> None:
    _name(p)
    p.add_argument("-f", "--follow", action="store_true", help="follow until it ends")
    p.add_argument(
        "--from",
        dest="from_uri",
        metavar="URI",
        help="continue from the checkpoints under this root: a path (cluster: on the job's "
        "checkpoint claim) or s3://BUCKET/PREFIX; kept for later resumes; with no record "
        "of the job here, the job is rebuilt from ROOT/NAME/job.json (written by submit --from)",
    )
    p.add_argument(
        "--image",
        help="training image (cluster; default: the one the job was submitted with); kept for "
        "later resumes",
    )
    _wait_flag(p)


def resume(args: argparse.Namespace) -> int:
    from jobs import output
    from jobs.resume_from import NoRecord, job_folder, parse, resubmit

    if args.from_uri is not None:
        parse(args.from_uri, local=args.local, claim_mount="/")  # its form, before any request
    _wait_timeout(args)
    backend = _backend(args)
    try:
        done = backend.resume(args.name, from_uri=args.from_uri, image=args.image)
    except NoRecord as e:  # a new cluster: the job's record beside its checkpoints
        if args.from_uri is None:
            raise
        ns = backend.namespace or None
        root = parse(args.from_uri, local=args.local, claim_mount="/")
        done = resubmit(backend, e, root, job_folder(args.name, ns), args.image, local=args.local)
    _print(args, done.as_dict(), output.submitted_text(done, "resumed"))
    if args.follow:
        return backend.follow(done.name, _write, wait_timeout_s=args.wait_timeout)
    return 0


def _data_flags(p: argparse.ArgumentParser) -> None:
    from jobs.cluster.data import add_flags

    add_flags(p)


def data(args: argparse.Namespace) -> int:
    from jobs.cluster.data import main as data_main

    return data_main(args)


def _none(p: argparse.ArgumentParser) -> None:
    return None


VERBS: dict[str, Verb] = {
    "submit": Verb(
        "check a job file and start the job",
        "examples:\n"
        "  eks-fsdp jobs submit --local jobs/examples/dev.yaml --replace --follow   (make demo)\n"
        "  eks-fsdp jobs submit --local jobs/examples/dev.yaml --name try-2 --set maxTrainStep=20"
        " --set args.lr=3.0e-4\n"
        "  eks-fsdp jobs submit --local jobs/examples/dev.yaml --name drill --fault kill-worker@20\n"
        "  eks-fsdp jobs submit jobs/examples/p5-16.yaml --stack p5-16\n"
        "  eks-fsdp jobs submit jobs/examples/dev.yaml --kubeconfig ./kubeconfig"
        " --set image=<registry>/<repository>:<tag>\n"
        "  eks-fsdp jobs submit jobs/examples/p5-16.yaml --stack p5-16"
        " --from s3://my-bucket/training/checkpoints   (a new cluster)\n\n"
        "job file keys (--set KEY=VALUE; a training flag: --set args.FLAG=VALUE):\n",
        _submit_flags,
        submit,
    ),
    "list": Verb(
        "jobs with phase, workers, restarts, step and age",
        "example:\n  eks-fsdp jobs list --local\n  eks-fsdp jobs list --stack dev --json",
        _none,
        list_jobs,
    ),
    "status": Verb(
        "one job: conditions, replicas, step, loss, tokens/s, ETA, goodput",
        "example:\n  eks-fsdp jobs status --local llama-finetune-dev",
        _name,
        status,
    ),
    "logs": Verb(
        "a worker pod's log (pod 0 unless --rank)",
        "examples:\n  eks-fsdp jobs logs --local llama-finetune-dev --follow\n"
        "  eks-fsdp jobs logs --local llama-finetune-dev --rank 1 --tail 20\n"
        "  eks-fsdp jobs logs --stack p5-16 llama2-7b-samsum-128gpu --rank 3",
        _logs_flags,
        logs,
    ),
    "cancel": Verb(
        "delete a job, keeping its checkpoints",
        "examples:\n  eks-fsdp jobs cancel --local llama-finetune-dev   (checkpoints kept)\n"
        "  eks-fsdp jobs cancel --local llama-finetune-dev --purge   (and removed)",
        _cancel_flags,
        cancel,
    ),
    "suspend": Verb(
        "stop a job's pods with SIGTERM (a checkpoint), keeping the job",
        "examples:\n  eks-fsdp jobs suspend --stack p5-16 llama2-7b-samsum-128gpu\n"
        "  eks-fsdp jobs suspend --local llama-finetune-dev\n"
        "(a queued job: its Kueue Workload is deactivated; else runPolicy.suspend)",
        _name,
        _suspend(True),
    ),
    "unsuspend": Verb(
        "start a suspended job's pods again, from its last checkpoint",
        "examples:\n  eks-fsdp jobs unsuspend --stack p5-16 llama2-7b-samsum-128gpu\n"
        "  eks-fsdp jobs unsuspend --local llama-finetune-dev",
        _name,
        _suspend(False),
    ),
    "resume": Verb(
        "a new job from the last complete checkpoint (new rendezvous id)",
        "examples:\n  eks-fsdp jobs resume --local llama-finetune-dev --follow\n"
        "  eks-fsdp jobs resume --stack p5-16 llama2-7b-samsum-128gpu"
        " --from s3://my-bucket/checkpoints\n"
        "  eks-fsdp jobs resume --local llama-finetune-dev --from ./saved-checkpoints\n"
        "(--from: the checkpoint root; the job's checkpoints are ROOT/NAME/step-N)",
        _resume_flags,
        resume,
    ),
    "data": Verb(
        "copy a dataset onto the cluster's shared claim, or results off it",
        "examples:\n  eks-fsdp jobs data put train.jsonl --kubeconfig ./kubeconfig\n"
        "  eks-fsdp jobs data get /checkpoints/NAME/export ./export --kubeconfig ./kubeconfig",
        _data_flags,
        data,
        backend_flags=False,
    ),
}
"""Every verb, in the order ``--help`` lists them."""


def _parser() -> argparse.ArgumentParser:
    from jobs.schema import KEYS

    common = argparse.ArgumentParser(add_help=False)
    where = common.add_argument_group("where the job runs")
    where.add_argument("--local", action="store_true", help="on this machine (runs/jobs/<name>/)")
    where.add_argument("--kubeconfig", metavar="PATH", help="the cluster of this kubeconfig")
    where.add_argument(
        "--stack",
        metavar="STACK",
        help="the cluster of this stack (its kubeconfig output; for submit also the platform)",
    )
    where.add_argument(
        "-n",
        "--namespace",
        help="cluster namespace (default: the job file's on submit, else with --stack the "
        "stack's jobsNamespace output, else default)",
    )
    common.add_argument("--json", action="store_true", help="JSON output for scripts")

    parser = Parser(
        command="jobs",
        prog=PROG,
        description="Submit, watch, cancel and resume fine-tuning jobs, on a cluster or locally.",
        epilog=f"{PROG} VERB --help shows each verb with an example.",
    )
    verbs = parser.add_subparsers(dest="verb", required=True, metavar="VERB")
    keys = "\n".join(f"  {k:<18} {v}" for k, v in KEYS.items())
    for name, verb in VERBS.items():
        sub = verbs.add_parser(
            name,
            parents=[common] if verb.backend_flags else [],
            help=verb.help,
            description=verb.help,
            epilog=verb.example + (keys if name == "submit" else ""),
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        verb.flags(sub)
        sub.set_defaults(run=verb.run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """0 done, 1 failed, 2 bad input, 130 interrupted; errors are one line on stderr."""
    from jobs.schema import JobFileError

    args = _parser().parse_args(argv)
    try:
        return int(args.run(args))
    except JobFileError as err:
        return fail("jobs", err)
    except JobsError as err:
        return fail("jobs", err, err.status)
