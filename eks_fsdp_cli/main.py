"""``eks-fsdp COMMAND ...``: the project's commands under one name (docs/cli.md).

Each command is its module's ``main(argv) -> int``, imported only when it runs, so that
``eks-fsdp jobs`` never imports torch or Pulumi and ``eks-fsdp --help`` imports nothing. Each
``python -m <module>`` keeps working and prints the same errors: the commands share
``eks_fsdp_cli.errors``. Naming: docs/adr/0018-one-command-line.md.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from eks_fsdp_cli.errors import PROG, USAGE_EXIT, fail, suggest


@dataclass(frozen=True)
class Command:
    """One command: its entry point as ``module:function`` and a one-line summary."""

    target: str
    summary: str
    module: str
    """What ``python -m`` runs for it: the module, then any leading arguments
    (``planner calibrate``)."""

    def load(self) -> Callable[[list[str]], int]:
        module, _, func = self.target.partition(":")
        return getattr(importlib.import_module(module), func)  # type: ignore[no-any-return]


COMMANDS: dict[str, Command] = {
    "plan": Command(
        "planner.cli:main",
        "capacity plan: memory per GPU, step time, scaling, $ per epoch",
        "planner",
    ),
    "new-stack": Command(
        "planner.newstack:main",
        "write Pulumi.NAME.yaml and a job file at the planner's layout, with their costs",
        "planner new-stack",
    ),
    "doctor": Command(
        "doctor.cli:main",
        "check the AWS account, secrets, Docker and the model before pulumi up",
        "doctor",
    ),
    "render": Command(
        "workloads.render:main",
        "write a stack's Kubernetes objects as YAML (validated)",
        "workloads.render",
    ),
    "scan": Command(
        "workloads.scan:main", "checkov on every stack's Kubernetes objects", "workloads.scan"
    ),
    "jobs": Command(
        "jobs.cli:main",
        "submit | status | logs | cancel | resume fine-tuning jobs, on a cluster or --local",
        "jobs",
    ),
    "local": Command(
        "localrun.cli:main",
        "run a stack's PyTorchJob on this machine (real etcd, one torchrun per pod)",
        "localrun",
    ),
    "preflight": Command(
        "training.preflight.cli:main",
        "node checks: collectives, matmul, memory bandwidth (under torchrun)",
        "training.preflight",
    ),
    "train": Command(
        "eks_fsdp_cli.train:main",
        "the FSDP2 fine-tuning loop (what torchrun starts in each pod)",
        "training.finetune",
    ),
    "controlplane": Command(
        "controlplane.__main__:main",
        "build | up: a local Kubernetes control plane (fake GPU nodes, operator, Kueue)",
        "controlplane",
    ),
}


def usage() -> str:
    width = max(map(len, COMMANDS))
    rows = [f"  {name:<{width}}  {c.summary}" for name, c in COMMANDS.items()]
    return "\n".join(
        [
            f"usage: {PROG} COMMAND [ARGS ...]",
            "",
            "commands:",
            *rows,
            "",
            f"{PROG} COMMAND --help shows each command's flags; every command is also "
            "`python -m MODULE` (docs/cli.md).",
        ]
    )


def main(argv: Sequence[str] | None = None) -> int:
    """0/1 as the command returns, 2 on a usage error (one line on stderr)."""
    args = list(sys.argv[1:] if argv is None else argv)
    if not args:
        print(usage(), file=sys.stderr)
        return USAGE_EXIT
    name, rest = args[0], args[1:]
    if name in ("-h", "--help", "help"):
        print(usage())
        return 0
    command = COMMANDS.get(name)
    if command is None:
        kind = "option" if name.startswith("-") else "command"
        return fail(
            None,
            f"unknown {kind} {name!r}{suggest(name, COMMANDS)} (commands: {', '.join(COMMANDS)})",
        )
    try:
        return command.load()(rest)
    except SystemExit as done:  # argparse's --help (0) and errors (2), a sys.exit(...) inside
        if done.code is None or isinstance(done.code, int):
            return done.code or 0
        print(done.code, file=sys.stderr)
        return 1


def entry() -> None:
    """The console script (pyproject.toml ``[project.scripts]``)."""
    sys.exit(main())


if __name__ == "__main__":
    entry()
