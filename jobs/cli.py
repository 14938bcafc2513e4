"""``python -m jobs``: submit, list, status, logs, suspend, unsuspend, cancel and resume
fine-tuning jobs, on a cluster (a PyTorchJob through the Kubernetes API) or on this machine
(``--local``).

Tables for people, ``--json`` for scripts; exit status 0 on success, 1 when the request
failed (or, for ``submit --follow``, the job did), 2 on bad input; every error is one line
saying what is wrong and what to do.
"""

from __future__ import annotations

import argparse
import signal
import sys
import time
from collections.abc import Sequence
from typing import Any

from eks_fsdp_cli.errors import Parser, fail
from jobs.types import FINISHED, JobsError

FINISH_WAIT_S = 30.0
"""``--follow`` on a cluster: seconds to wait, once pod 0's log has ended, for the operator
to mark the job finished (it does so after the pod's exit, on its next reconcile)."""

EXAMPLES = {
    "submit": (
        "examples:\n"
        "  python -m jobs submit --local jobs/examples/dev.yaml --replace --follow   (make demo)\n"
        "  python -m jobs submit --local jobs/examples/dev.yaml --name try-2 --set maxTrainStep=20"
        " --set args.lr=3.0e-4\n"
        "  python -m jobs submit jobs/examples/p5-16.yaml --stack p5-16\n"
        "  python -m jobs submit jobs/examples/dev.yaml --kubeconfig ./kubeconfig"
        " --set image=<registry>/<repository>:<tag>\n"
        "  python -m jobs submit jobs/examples/p5-16.yaml --stack p5-16"
        " --from s3://my-bucket/training/checkpoints   (a new cluster)\n\n"
        "job file keys (--set KEY=VALUE; a training flag: --set args.FLAG=VALUE):\n"
    ),
    "list": "example:\n  python -m jobs list --local\n  python -m jobs list --stack dev --json",
    "status": "example:\n  python -m jobs status --local llama-finetune-dev",
    "logs": (
        "examples:\n  python -m jobs logs --local llama-finetune-dev --follow\n"
        "  python -m jobs logs --local llama-finetune-dev --rank 1 --tail 20\n"
        "  python -m jobs logs --stack p5-16 llama2-7b-samsum-128gpu --rank 3"
    ),
    "cancel": (
        "examples:\n  python -m jobs cancel --local llama-finetune-dev   (checkpoints kept)\n"
        "  python -m jobs cancel --local llama-finetune-dev --purge   (and removed)"
    ),
    "suspend": (
        "examples:\n  python -m jobs suspend --stack p5-16 llama2-7b-samsum-128gpu\n"
        "  python -m jobs suspend --local llama-finetune-dev\n"
        "(a queued job: its Kueue Workload is deactivated; else runPolicy.suspend)"
    ),
    "unsuspend": (
        "examples:\n  python -m jobs unsuspend --stack p5-16 llama2-7b-samsum-128gpu\n"
        "  python -m jobs unsuspend --local llama-finetune-dev"
    ),
    "resume": (
        "examples:\n  python -m jobs resume --local llama-finetune-dev --follow\n"
        "  python -m jobs resume --stack p5-16 llama2-7b-samsum-128gpu"
        " --from s3://my-bucket/checkpoints\n"
        "  python -m jobs resume --local llama-finetune-dev --from ./saved-checkpoints\n"
        "(--from: the checkpoint root; the job's checkpoints are ROOT/NAME/step-N)"
    ),
}


def _parser() -> argparse.ArgumentParser:
    from jobs.file import KEYS

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
        prog="python -m jobs",
        description="Submit, watch, cancel and resume fine-tuning jobs, on a cluster or locally.",
        epilog="python -m jobs VERB --help shows each verb with an example.",
    )
    verbs = parser.add_subparsers(dest="verb", required=True, metavar="VERB")

    def verb(name: str, text: str, epilog: str = "") -> argparse.ArgumentParser:
        return verbs.add_parser(
            name,
            parents=[common],
            help=text,
            description=text,
            epilog=epilog or EXAMPLES[name],
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )

    keys = "\n".join(f"  {k:<18} {v}" for k, v in KEYS.items())
    submit = verb("submit", "check a job file and start the job", EXAMPLES["submit"] + keys)
    submit.add_argument("file", metavar="FILE", help="job file (YAML; see jobs/examples/)")
    submit.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        dest="sets",
        help="override a key of the file (repeatable)",
    )
    submit.add_argument("--name", help="job name instead of the file's")
    submit.add_argument(
        "--team", help="submit to this team's queue and namespace (the stack's teams)"
    )
    submit.add_argument(
        "--priority", help="Kueue priority class: production | experiment (default: the team's)"
    )
    submit.add_argument(
        "--replace",
        action="store_true",
        help="replace a finished job of the same name (its record; local: logs, checkpoints)",
    )
    submit.add_argument(
        "--image", help="training image (cluster; default: the file's, else the stack's)"
    )
    submit.add_argument(
        "-f",
        "--follow",
        action="store_true",
        help="follow until the job ends (local: the runner's progress; Ctrl-C cancels it; "
        "cluster: worker pod 0's log, once it has started)",
    )
    submit.add_argument(
        "--from",
        dest="from_uri",
        metavar="URI",
        help="a new job continuing from its checkpoints under this root (ROOT/NAME/step-N: a "
        "path, cluster: on the job's checkpoint claim, or s3://BUCKET/PREFIX), e.g. on a new "
        "cluster; kept for later resumes",
    )
    _wait_flag(submit)
    verb("list", "jobs with phase, workers, restarts, step and age")
    status = verb("status", "one job: conditions, replicas, step, loss, tokens/s, ETA, goodput")
    status.add_argument("name", metavar="NAME")
    logs = verb("logs", "a worker pod's log (pod 0 unless --rank)")
    logs.add_argument("name", metavar="NAME")
    logs.add_argument(
        "--rank",
        type=int,
        default=0,
        metavar="N",
        help="the worker pod's replica index: pod NAME-worker-N (default 0), not torch's RANK",
    )
    logs.add_argument(
        "-f",
        "--follow",
        action="store_true",
        help="wait for the pod to start, then stream until it ends",
    )
    _wait_flag(logs)
    logs.add_argument("--tail", type=int, metavar="N", help="only the last N lines")
    logs.add_argument(
        "--runner", action="store_true", help="local: the runner's log (progress, summary)"
    )
    cancel = verb("cancel", "delete a job, keeping its checkpoints")
    cancel.add_argument("name", metavar="NAME")
    cancel.add_argument(
        "--purge", action="store_true", help="also remove its record (local: logs, checkpoints)"
    )
    for name, text in (
        ("suspend", "stop a job's pods with SIGTERM (a checkpoint), keeping the job"),
        ("unsuspend", "start a suspended job's pods again, from its last checkpoint"),
    ):
        verb(name, text).add_argument("name", metavar="NAME")
    resume = verb("resume", "a new job from the last complete checkpoint (new rendezvous id)")
    resume.add_argument("name", metavar="NAME")
    resume.add_argument("-f", "--follow", action="store_true", help="follow until it ends")
    resume.add_argument(
        "--from",
        dest="from_uri",
        metavar="URI",
        help="continue from the checkpoints under this root: a path (cluster: on the job's "
        "checkpoint claim) or s3://BUCKET/PREFIX; kept for later resumes; with no record "
        "of the job here, the job is rebuilt from ROOT/NAME/job.json (written by submit --from)",
    )
    resume.add_argument(
        "--image",
        help="training image (cluster; default: the one the job was submitted with); kept for "
        "later resumes",
    )
    _wait_flag(resume)
    from jobs.data import add_parser as data_verb

    data_verb(verbs)  # python -m jobs data put|get (jobs.data)
    return parser


def _wait_flag(parser: argparse.ArgumentParser) -> None:
    from jobs.cluster_logs import WAIT_TIMEOUT_S

    parser.add_argument(
        "--wait-timeout",
        type=float,
        default=WAIT_TIMEOUT_S,
        metavar="SECONDS",
        help="cluster, with --follow: how long to wait for the worker pod to start "
        f"(default {WAIT_TIMEOUT_S:g})",
    )


def _write(text: str) -> None:
    sys.stdout.write(text)
    sys.stdout.flush()


def _print(args: argparse.Namespace, data: Any, text: str) -> None:
    from jobs.output import as_json

    print(as_json(data) if args.json else text, flush=True)


def _follow_local(backend: Any, name: str) -> int:
    """Stream a local job's runner log until it ends; Ctrl-C cancels the job."""
    try:
        phase = backend.follow(name, _write)
    except KeyboardInterrupt:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        print(f"\ninterrupted: cancelling {name}", file=sys.stderr, flush=True)
        print(backend.cancel(name), file=sys.stderr, flush=True)
        return 130
    return 0 if phase == "Succeeded" else 1


def run(args: argparse.Namespace) -> int:
    from jobs import output
    from jobs.backends import choose

    if args.verb == "data":
        from jobs.data import main as data_main

        return data_main(args)
    if getattr(args, "wait_timeout", 1.0) <= 0:
        raise JobsError(f"--wait-timeout {args.wait_timeout:g}: must be > 0 seconds", status=2)
    if args.verb in ("resume", "submit") and args.from_uri is not None:
        from jobs.resume_from import parse

        parse(args.from_uri, local=args.local, claim_mount="/")  # its form, before any request

    if args.verb == "submit":
        from jobs.file import load

        sets = list(args.sets) + ([f"namespace={args.namespace}"] if args.namespace else [])
        sets += [f"{k}={v}" for k, v in (("team", args.team), ("priority", args.priority)) if v]
        job = load(args.file, sets=sets, name=args.name, stack=args.stack)
        if args.local and args.image:
            raise JobsError("--image: a local job runs this checkout's training/", status=2)
        if not args.local and args.stack and not {"namespace", "team"} & set(job.values):
            from jobs.kube import jobs_namespace  # the namespace the stack prepared for jobs

            sets.append(f"namespace={jobs_namespace(args.stack)}")
            job = load(args.file, sets=sets, name=args.name, stack=args.stack)
        backend = choose(
            local=args.local,
            kubeconfig=args.kubeconfig,
            stack=args.stack,
            namespace=job.config.namespace,
        )
        from jobs.revisions import pin_job
        from planner.estimate import lines as estimate

        # the Hub revisions as commits, recorded with the job (--from: the checkpoint's)
        pinned = pin_job(job, from_uri=args.from_uri, local=args.local)
        if pinned.sets:
            sets += pinned.sets
            job = load(args.file, sets=sets, name=args.name, stack=args.stack)
        planned = pinned.notes + estimate(job)  # computed before anything is sent
        resumed = {"from_uri": args.from_uri} if args.from_uri is not None else {}
        done = backend.submit(job, image=args.image, replace=args.replace, **resumed)
        if args.from_uri is not None:  # ROOT/NAME/job.json: `resume NAME --from ROOT` anywhere
            _keep_record(args, job)
        for line in planned:  # printed once the job exists: a refusal stays one line
            print(line, file=sys.stderr, flush=True)
        _print(args, done.as_dict(), output.submitted_text(done))
        if args.follow:
            return _follow(args, backend, done.name)
        return 0
    backend = choose(
        local=args.local, kubeconfig=args.kubeconfig, stack=args.stack, namespace=args.namespace
    )
    if args.verb == "list":
        jobs = backend.list()
        _print(args, [j.as_dict() for j in jobs], output.list_table(jobs))
    elif args.verb == "status":
        info = backend.status(args.name)
        _print(args, info.as_dict(), output.status_page(info))
    elif args.verb == "logs":
        if args.tail is not None and args.tail < 0:
            raise JobsError(f"--tail {args.tail}: must be >= 0", status=2)
        try:
            extra = {} if args.local else {"wait_timeout_s": args.wait_timeout}
            backend.logs(
                args.name,
                rank=args.rank,
                follow=args.follow,
                tail=args.tail,
                write=_write,
                runner=args.runner,
                **extra,
            )
        except KeyboardInterrupt:
            return 130
    elif args.verb == "cancel":
        message = backend.cancel(args.name, purge=args.purge)
        _print(args, {"name": args.name, "cancelled": True, "message": message}, message)
    elif args.verb in ("suspend", "unsuspend"):
        message = backend.suspend(args.name, on=args.verb == "suspend")
        _print(args, {"name": args.name, args.verb + "ed": True, "message": message}, message)
    elif args.verb == "resume":
        from jobs.resume_from import NoRecord, job_folder, parse, resubmit

        if args.local and args.image:
            raise JobsError("--image: a local job runs this checkout's training/", status=2)
        image = {} if args.local else {"image": args.image}
        try:
            done = backend.resume(args.name, from_uri=args.from_uri, **image)
        except NoRecord as e:  # a new cluster: the job's record beside its checkpoints
            if args.from_uri is None:
                raise
            ns = None if args.local else backend.namespace
            root = parse(args.from_uri, local=args.local, claim_mount="/")
            done = resubmit(
                backend, e, root, job_folder(args.name, ns), args.image, local=args.local
            )
        _print(args, done.as_dict(), output.submitted_text(done, "resumed"))
        if args.follow:
            return _follow(args, backend, done.name)
    return 0


def _keep_record(args: argparse.Namespace, job: Any) -> None:
    """``submit --from ROOT``: the job's record to ``ROOT/<folder>/job.json`` (an s3:// root,
    or a local job's folder); a failure is one warning line, the job runs anyway."""
    from jobs.resume_from import job_folder, keep_record, parse

    root = parse(args.from_uri, local=args.local, claim_mount="/")
    if not (root.startswith("s3://") or args.local):
        return  # a path in the pods: not reachable from here
    folder = job_folder(job.name, None if args.local else job.config.namespace)
    try:
        keep_record(root, folder, job.values, None if args.local else args.image)
    except Exception as e:  # any failure: the job itself is submitted
        first = (str(e).strip().splitlines() or [type(e).__name__])[0]
        print(f"warning: job record not written under {root}: {first}", file=sys.stderr)


def _follow(args: argparse.Namespace, backend: Any, name: str) -> int:
    from jobs.local import LocalBackend

    if isinstance(backend, LocalBackend):
        return _follow_local(backend, name)
    try:
        backend.logs(
            name, rank=0, follow=True, tail=None, write=_write, wait_timeout_s=args.wait_timeout
        )
        phase = backend.status(name).phase
        deadline = time.monotonic() + FINISH_WAIT_S
        while phase not in FINISHED and time.monotonic() < deadline:
            time.sleep(1.0)  # pod 0's log ended; the operator's condition follows
            phase = backend.status(name).phase
    except KeyboardInterrupt:
        print(f"\nstopped following; {name} keeps running", file=sys.stderr)
        return 130
    if phase not in FINISHED:
        print(
            f"jobs: the log of {name}'s worker pod 0 ended, the job is {phase}: "
            f"`python -m jobs logs {name} --follow` goes on",
            file=sys.stderr,
        )
    return 0 if phase == "Succeeded" else 1


def main(argv: Sequence[str] | None = None) -> int:
    """0 done, 1 failed, 2 bad input, 130 interrupted; errors are one line on stderr."""
    from jobs.file import JobFileError

    args = _parser().parse_args(argv)
    try:
        return run(args)
    except JobFileError as err:
        return fail("jobs", err)
    except JobsError as err:
        return fail("jobs", err, err.status)
