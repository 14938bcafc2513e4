"""Run a preflight and act on it: ``check`` (measure, judge, publish), ``gate`` for
``finetune --preflight``, and ``eks-fsdp preflight``."""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from training.preflight.measurement import (
    Census,
    Options,
    census,
    default_sizes,
    measure,
    node_report,
    parse_size,
)
from training.preflight.verdict import (
    Expect,
    Problem,
    failures,
    parse_expect,
    problems,
    summary,
    table,
)

if TYPE_CHECKING:
    import torch

FAILED_EXIT = 3
"""Exit status when the nodes are below expectation (2 stays 'bad input')."""
DESCRIPTION = "Preflight: check the nodes a job actually got, before step 1, and stop on a bad one."
"""``--help``'s description: the first line of the package's docstring."""


def check(
    opts: Options, expect: Expect, device: torch.device, layout: Census | None = None
) -> tuple[dict[str, Any], list[str]]:
    """Measure, judge, and record the verdict in the report (and for the Prometheus exporter).

    ``layout``: a ``census()`` already gathered (``measure`` gathers one when None).
    """
    from training import prometheus

    report = measure(opts, device, layout)
    report["expect"] = asdict(expect)
    report["summary"] = summary(report)
    problems = failures(report, expect)
    report["passed"] = not problems
    report["failures"] = problems
    prometheus.set_preflight(report)
    if device.type == "cuda":
        import torch

        torch.cuda.empty_cache()  # hand the test buffers back before the model is built
    return report, problems


def _one_line(problems: list[str]) -> str:
    more = len(problems) - 1
    return problems[0] + (f" (+{more} more in the report)" if more else "")


TERMINATION_LOG_ENV = "EKS_FSDP_TERMINATION_LOG"
"""Where the gate writes its failure line; unset: Kubernetes' ``terminationMessagePath``
default, ``/dev/termination-log``, when the kubelet created it (Kubernetes docs, "Determine the
Reason for Pod Failure": the container's termination message is that file's content, shown in
``status.containerStatuses[].state.terminated.message``)."""
DEFAULT_TERMINATION_LOG = "/dev/termination-log"


def termination_log() -> Path | None:
    """The file this container's termination message is read from; None outside a pod."""
    given = os.environ.get(TERMINATION_LOG_ENV)
    if given:
        return Path(given)
    default = Path(DEFAULT_TERMINATION_LOG)
    return default if default.is_file() else None


def gate_line(found: list[Problem]) -> str:
    """The gate's one line: the first failed check, where, and how many more."""
    more = len(found) - 1
    return found[0].line() + (f" (+{more} more in preflight.json)" if more else "")


GATE_LINK_TIMEOUT_S = 300.0
"""Collective timeout of the gate's link groups: a hung EFA link fails the attempt after 5
minutes instead of the default group's 30 (``training.dist.INIT_TIMEOUT_S``). The gate's
largest collective (256 MiB) takes well under a second on a healthy link."""


def gate(expect_text: str, out_dir: str | Path, device: torch.device) -> int:
    """``finetune --preflight``: check, write ``preflight.json``, 0 or FAILED_EXIT.

    Called on every rank after the process group forms and before the trainer is built. The
    node-local checks (``gpus``, ``efa``) go first, exchanged over gloo: a node without its EFA
    devices would otherwise die in the first NCCL communicator (``NCCL_NET=OFI`` has no network
    to open) with a traceback instead of a line. Only then are the links and devices measured.
    On a failure rank 0 prints one line naming the node and the check (``preflight failed on
    node ip-10-1-2-3: EFA devices 0/32``) and each node's first rank writes it as its
    container's termination message, which ``eks-fsdp jobs status`` shows; training never
    starts. A passing gate empties that file, so a line from an earlier attempt in the same
    container does not outlive it.
    """
    import torch.distributed as dist

    expect = parse_expect(expect_text)
    layout = census()
    report = node_report(layout, str(dist.get_backend()))
    found = problems(report, Expect(gpus=expect.gpus, efa=expect.efa))
    if found:  # the same on every rank: the census is gathered
        report["expect"] = asdict(expect)
        report["passed"] = False
        report["failures"] = [str(p) for p in found]
        return _verdict(report, found, out_dir)
    opts = Options(sizes=default_sizes(device.type == "cuda"), link_timeout_s=GATE_LINK_TIMEOUT_S)
    report, _ = check(opts, expect, device, layout)
    return _verdict(report, problems(report, expect), out_dir)


def _verdict(report: dict[str, Any], found: list[Problem], out_dir: str | Path) -> int:
    """Write the termination message and ``preflight.json``, print, wait for every rank."""
    import torch.distributed as dist

    if int(os.environ.get("LOCAL_RANK", "0")) == 0 and (log := termination_log()):
        try:
            if found:
                log.write_text(gate_line(found) + "\n")
            elif log.is_file() and log.stat().st_size:
                log.write_text("")  # an earlier attempt's line would read as this one's
        except OSError as err:  # the line still goes to stderr
            print(f"preflight: cannot write {log}: {err}", file=sys.stderr, flush=True)
    if dist.get_rank() == 0:
        path = Path(out_dir) / "preflight.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(report, indent=2) + "\n")
        print(table(report), flush=True)
        if found:
            print(gate_line(found), file=sys.stderr, flush=True)
        else:
            print("preflight: passed", flush=True)
    # No rank exits (and makes torchrun stop the others) before rank 0 reported. On a group of
    # "cpu:gloo,cuda:nccl" without a bound device the barrier runs on cpu, i.e. gloo (torch
    # v2.13.0 distributed_c10d.py ``barrier``: ``_get_object_coll_device(group) == "cpu"``), so
    # it opens no NCCL communicator on a node whose network is missing.
    dist.barrier()
    return FAILED_EXIT if found else 0


def _error_line(message: object) -> str:
    """The error line every command prints (``training.errors.line``)."""
    from training.errors import line

    return line("preflight", message)


def _parse(argv: Sequence[str] | None) -> Any:
    import argparse

    from training.errors import suggest_flag

    class Parser(argparse.ArgumentParser):
        def error(self, message: str) -> NoReturn:
            words = message.split() if message.startswith("unrecognized") else []
            flag = next((w for w in words if w.startswith("--")), "")
            flags = [s for a in self._actions for s in a.option_strings if s.startswith("--")]
            hint = suggest_flag(flag.partition("=")[0], flags) if flag else ""
            print(_error_line(message + hint), file=sys.stderr, flush=True)
            sys.exit(2)

    p = Parser(prog="eks-fsdp preflight", description=DESCRIPTION)
    p.add_argument(
        "--expect",
        default="",
        help="thresholds: intra_busbw=,inter_busbw=,tflops=,mem_gbps=,net=,gpus=",
    )
    p.add_argument(
        "--sizes", default="", help="collective sizes, e.g. 1M,16M,256M (default by device)"
    )
    p.add_argument(
        "--iters",
        type=int,
        default=5,
        help="timed iterations per measurement (per round for the device figures)",
    )
    p.add_argument("--warmup", type=int, default=2, help="untimed iterations first")
    p.add_argument(
        "--matmul_n", type=int, default=0, help="matmul size (default 8192 GPU / 512 CPU)"
    )
    p.add_argument("--json", type=Path, help="write the report here (rank 0)")
    p.add_argument("--metrics_port", type=int, default=0, help="serve the report for Prometheus")
    p.add_argument("--hold_s", type=float, default=0.0, help="keep serving metrics this long")
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = _parse(argv)
    try:
        expect = parse_expect(args.expect)
        sizes = tuple(parse_size(s) for s in args.sizes.split(",") if s.strip())
        for flag in ("iters", "warmup", "matmul_n"):
            if getattr(args, flag) < (1 if flag == "iters" else 0):
                raise ValueError(f"--{flag} {getattr(args, flag)}: too small")
    except ValueError as e:
        print(_error_line(f"--expect/--sizes: {e}" if "--" not in str(e) else e), file=sys.stderr)
        return 2
    from training.dist import distributed

    with distributed() as env:
        opts = Options(
            sizes=sizes or default_sizes(env.device.type == "cuda"),
            iters=args.iters,
            warmup=args.warmup,
            matmul_n=args.matmul_n,
        )
        report, problems = check(opts, expect, env.device)
        sink = None
        if args.metrics_port and int(os.environ.get("LOCAL_RANK", "0")) == 0:
            from training.prometheus import PrometheusSink

            sink = PrometheusSink(args.metrics_port)
        if env.is_main:
            print(table(report))
            if args.json:
                args.json.parent.mkdir(parents=True, exist_ok=True)
                args.json.write_text(json.dumps(report, indent=2) + "\n")
            if problems:
                print(f"preflight: FAILED {_one_line(problems)}", file=sys.stderr, flush=True)
            else:
                print("preflight: passed", flush=True)
        if sink is not None:
            time.sleep(args.hold_s)
            sink.close()
        import torch.distributed as dist

        dist.barrier()  # rank 0 reports before any rank exits
    return FAILED_EXIT if problems else 0
