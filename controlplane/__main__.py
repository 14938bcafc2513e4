"""``eks-fsdp controlplane {build,up}``: build the binaries; run the control plane.

eks-fsdp controlplane build                 # what is missing, into the cache
eks-fsdp controlplane up                    # every stack's node groups as fake nodes
eks-fsdp controlplane up --stack dev --no-kueue
"""

from __future__ import annotations

import argparse
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path

from controlplane import build as build_mod
from controlplane import nodes
from controlplane.cluster import ControlPlane
from eks_fsdp_cli.errors import Parser, fail
from eks_fsdp_cli.paths import REPO_ROOT

COMMAND = "controlplane"
"""``eks-fsdp controlplane``: the name its errors carry."""


def all_stacks() -> list[str]:
    """Every ``Pulumi.<stack>.yaml`` of the repository, sorted."""
    return sorted(p.name[len("Pulumi.") : -len(".yaml")] for p in REPO_ROOT.glob("Pulumi.*.yaml"))


def finish_state(state: Path, *, created: bool, keep: bool, clean: bool) -> str | None:
    """After a stop: remove ``state`` (certificates and private keys, etcd data, logs: ~75 MB)
    when this command created it, the stop was clean and nobody asked to keep it; otherwise
    leave it and return the line that says where it is. A folder named with ``--state`` is
    the user's and is never removed."""
    if created and clean and not keep:
        shutil.rmtree(state, ignore_errors=True)
        if not state.exists():
            return None
        return f"{COMMAND}: could not remove {state} (certificates, private keys, logs): remove it"
    why = (
        "--state named it"
        if not created
        else "--keep-state"
        if keep
        else "the stop was not clean: its logs say why"
    )
    return f"{COMMAND}: state kept in {state} ({why}; certificates, private keys, logs)"


def _up(args: argparse.Namespace) -> int:
    try:
        build = build_mod.ensure()
    except build_mod.BuildError as err:
        return fail(COMMAND, err)
    created = not args.state
    state = Path(args.state) if args.state else Path(tempfile.mkdtemp(prefix="eks-fsdp-cluster-"))
    stop: list[int] = []
    # Handlers of our own: SIGINT may have been started as ignored (a background job), and
    # Python then installs no KeyboardInterrupt handler. The handler only appends: a
    # threading.Event's set() takes the lock its wait() holds around the wait itself, so a
    # signal landing there would deadlock the main thread in its own handler.
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda signum, _frame: stop.append(signum))
    shapes = nodes.stack_shapes(args.stack or all_stacks())
    plane = ControlPlane(
        build=build,
        state=state,
        shapes=shapes,
        kueue=not args.no_kueue,
        operator=not args.no_operator,
    )
    t0 = time.monotonic()
    clean = False
    try:
        plane.start()
        print(plane.summary(), flush=True)
        print(f"started in {time.monotonic() - t0:.1f} s; Ctrl-C stops it", flush=True)
        print(f"export KUBECONFIG={plane.kubeconfig}", flush=True)
        while not stop:
            time.sleep(0.2)  # a signal ends the sleep; its handler has run by then
            if stop:
                break
            dead = [p.name for p in plane.procs if not p.alive()]
            if dead:
                print(f"controlplane: {', '.join(dead)} exited; stopping", file=sys.stderr)
                return 1
        clean = True
        return 0
    finally:
        codes = plane.stop()
        print(f"stopped: {codes}", file=sys.stderr, flush=True)
        clean = clean and not any(p.alive() for p in plane.procs)
        said = finish_state(state, created=created, keep=args.keep_state, clean=clean)
        if said:
            print(said, file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["build"]:
        return build_mod.main(argv[1:])
    parser = Parser(
        prog="eks-fsdp controlplane",
        description="Build the binaries of a local Kubernetes control plane, or run it until\n"
        "Ctrl-C: etcd, kube-apiserver, fake GPU nodes (kwok), the training operator, Kueue.",
        epilog="examples:\n" + "\n".join(f"  {ln}" for ln in __doc__.split("\n\n")[1].splitlines()),
        formatter_class=argparse.RawDescriptionHelpFormatter,
        command=COMMAND,
    )
    sub = parser.add_subparsers(dest="verb", required=True)
    sub.add_parser("build", help="build the binaries (see: eks-fsdp controlplane build --help)")
    up = sub.add_parser(
        "up",
        help="start the control plane until Ctrl-C",
        description="example: eks-fsdp controlplane up --stack dev",
    )
    up.add_argument(
        "--stack",
        action="append",
        help="a stack whose node groups become fake nodes "
        "(repeatable; default: every Pulumi.<stack>.yaml)",
    )
    up.add_argument(
        "--state",
        help="folder for certificates, data, logs, kept after the stop (default: a new temp "
        "dir, removed after a clean stop)",
    )
    up.add_argument(
        "--keep-state",
        action="store_true",
        help="keep the temp state folder after the stop (its path is printed)",
    )
    up.add_argument("--no-kueue", action="store_true", help="do not run Kueue")
    up.add_argument("--no-operator", action="store_true", help="do not run the training operator")
    args = parser.parse_args(argv)
    return _up(args)


if __name__ == "__main__":
    sys.exit(main())
