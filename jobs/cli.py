"""``python -m jobs``: submit, list, status, logs, cancel and resume fine-tuning jobs, on a
cluster (a PyTorchJob through the Kubernetes API) or on this machine (``--local``).

Tables for people, ``--json`` for scripts; exit status 0 on success, 1 when the request
failed (or, for ``submit --follow``, the job did), 2 on bad input; every error is one line
saying what is wrong and what to do.
"""

from __future__ import annotations

import argparse
import signal
import sys
from collections.abc import Sequence
from typing import Any

from jobs.types import JobsError

EXAMPLES = {
    "submit": (
        "examples:\n"
        "  python -m jobs submit --local jobs/examples/dev.yaml --replace --follow   (make demo)\n"
        "  python -m jobs submit --local jobs/examples/dev.yaml --name try-2 --set maxTrainStep=20"
        " --set args.lr=3.0e-4\n"
        "  python -m jobs submit jobs/examples/p5-16.yaml --stack p5-16\n"
        "  python -m jobs submit jobs/examples/dev.yaml --kubeconfig ./kubeconfig"
        " --set image=<registry>/<repository>:<tag>\n\n"
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
    "resume": "example:\n  python -m jobs resume --local llama-finetune-dev --follow",
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
    where.add_argument("-n", "--namespace", help="cluster namespace (default: default)")
    common.add_argument("--json", action="store_true", help="JSON output for scripts")

    parser = argparse.ArgumentParser(
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
        help="follow until the job ends (local: the runner's progress; Ctrl-C cancels it)",
    )
    verb("list", "jobs with phase, workers, restarts, step and age")
    status = verb("status", "one job: conditions, replicas, step, loss, tokens/s, ETA, goodput")
    status.add_argument("name", metavar="NAME")
    logs = verb("logs", "a worker's log (rank 0 unless --rank)")
    logs.add_argument("name", metavar="NAME")
    logs.add_argument("--rank", type=int, default=0, help="worker pod index (default 0)")
    logs.add_argument("-f", "--follow", action="store_true", help="stream until the job ends")
    logs.add_argument("--tail", type=int, metavar="N", help="only the last N lines")
    logs.add_argument(
        "--runner", action="store_true", help="local: the runner's log (progress, summary)"
    )
    cancel = verb("cancel", "delete a job, keeping its checkpoints")
    cancel.add_argument("name", metavar="NAME")
    cancel.add_argument(
        "--purge", action="store_true", help="also remove its record (local: logs, checkpoints)"
    )
    resume = verb("resume", "a new job from the last complete checkpoint (new rendezvous id)")
    resume.add_argument("name", metavar="NAME")
    resume.add_argument("-f", "--follow", action="store_true", help="follow until it ends")
    return parser


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

    if args.verb == "submit":
        from jobs.file import load

        sets = list(args.sets) + ([f"namespace={args.namespace}"] if args.namespace else [])
        job = load(args.file, sets=sets, name=args.name, stack=args.stack)
        if args.local and args.image:
            raise JobsError("--image: a local job runs this checkout's training/", status=2)
        backend = choose(
            local=args.local,
            kubeconfig=args.kubeconfig,
            stack=args.stack,
            namespace=job.config.namespace,
        )
        done = backend.submit(job, image=args.image, replace=args.replace)
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
            backend.logs(
                args.name,
                rank=args.rank,
                follow=args.follow,
                tail=args.tail,
                write=_write,
                runner=args.runner,
            )
        except KeyboardInterrupt:
            return 130
    elif args.verb == "cancel":
        message = backend.cancel(args.name, purge=args.purge)
        _print(args, {"name": args.name, "cancelled": True, "message": message}, message)
    elif args.verb == "resume":
        done = backend.resume(args.name)
        _print(args, done.as_dict(), output.submitted_text(done, "resumed"))
        if args.follow:
            return _follow(args, backend, done.name)
    return 0


def _follow(args: argparse.Namespace, backend: Any, name: str) -> int:
    from jobs.local import LocalBackend

    if isinstance(backend, LocalBackend):
        return _follow_local(backend, name)
    try:
        backend.logs(name, rank=0, follow=True, tail=None, write=_write)
    except KeyboardInterrupt:
        print(f"\nstopped following; {name} keeps running", file=sys.stderr)
        return 130
    return 0 if backend.status(name).phase == "Succeeded" else 1


def main(argv: Sequence[str] | None = None) -> int:
    """0 done, 1 failed, 2 bad input, 130 interrupted; errors are one line on stderr."""
    from jobs.file import JobFileError

    args = _parser().parse_args(argv)
    try:
        return run(args)
    except JobFileError as err:
        print(f"jobs: {err}", file=sys.stderr)
        return 2
    except JobsError as err:
        print(f"jobs: {err}", file=sys.stderr)
        return err.status
