"""``eks-fsdp jobs data put|get``: a dataset onto the cluster's shared claim, results off it.

    eks-fsdp jobs data put train.jsonl --kubeconfig ./kubeconfig   # -> /checkpoints/data/train.jsonl
    eks-fsdp jobs data get /checkpoints/NAME/export ./export --kubeconfig ./kubeconfig

The pods see the stack's FSx for Lustre claim (``fsx-checkpoints``) at ``/checkpoints``; so does
a short-lived pod this module starts in the jobs' namespace (busybox, nobody, no service-account
token, the claim mounted), which ``kubectl cp`` copies through (kubectl cp runs ``tar`` in the
container: kubectl's ``cp`` command, k8s.io/kubectl pkg/cmd/cp/cp.go). The pod is deleted
afterwards, also after a failure. This works on every fsx stack, SCRATCH_2 included (no data
repository, no bucket needed); a PERSISTENT_2 stack linked to the data bucket
(docs/durable-data.md) can instead take ``aws s3 cp FILE s3://<bucket>/<prefix>/fsx/data/``,
which FSx imports under ``/checkpoints/data/``.

A job then names the path the pods see (``args: {dataset: custom, data_path:
/checkpoints/data/train.jsonl}``), never a path of the submitting machine.
"""

from __future__ import annotations

import re
import secrets
import shutil
import subprocess
from collections.abc import Callable, Sequence
from pathlib import Path, PurePosixPath
from typing import Any

from jobs.types import JobsError

MOUNT = PurePosixPath("/checkpoints")
"""Where the jobs mount the claim (``workloads.specs.pytorchjob``: the checkpoint volume)."""
DATA_DIR = MOUNT / "data"
IMAGE = "public.ecr.aws/docker/library/busybox:1.37.0"
"""Docker's official busybox from ECR Public (no Docker Hub rate limit from the NAT): it has the
``tar`` and ``sleep`` the copy needs and nothing else."""
READY_TIMEOUT_S = 300
Run = Callable[[Sequence[str], str | None], str]


def pod(name: str, namespace: str, claim: str) -> dict[str, Any]:
    """The copy pod: the claim at /checkpoints, sleeping until deleted (at most an hour)."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {"app.kubernetes.io/name": "eks-fsdp-data"},
        },
        "spec": {
            "restartPolicy": "Never",
            "automountServiceAccountToken": False,
            "activeDeadlineSeconds": 3600,
            "securityContext": {"seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [
                {
                    "name": "copy",
                    "image": IMAGE,
                    "command": ["sleep", "3600"],
                    "securityContext": {
                        "allowPrivilegeEscalation": False,
                        "capabilities": {"drop": ["ALL"]},
                    },
                    "resources": {
                        "requests": {"cpu": "100m", "memory": "64Mi"},
                        "limits": {"memory": "256Mi"},
                    },
                    "volumeMounts": [{"name": "claim", "mountPath": str(MOUNT)}],
                }
            ],
            "volumes": [{"name": "claim", "persistentVolumeClaim": {"claimName": claim}}],
        },
    }


def cluster_path(path: str) -> PurePosixPath:
    """A path on the claim (``/checkpoints/...``, no ``..``); ``JobsError`` otherwise."""
    p = PurePosixPath(path)
    if not p.is_absolute() or ".." in p.parts or not p.is_relative_to(MOUNT) or p == MOUNT:
        raise JobsError(f"{path}: not a path on the claim (under {MOUNT}/)", status=2)
    return p


def _kubectl(kubeconfig: str | None) -> Run:
    exe = shutil.which("kubectl")
    if exe is None:
        raise JobsError("no kubectl on PATH (the copy runs kubectl cp)", status=2)

    def run(argv: Sequence[str], stdin: str | None) -> str:
        cmd = [exe, *(["--kubeconfig", kubeconfig] if kubeconfig else []), *argv]
        out = subprocess.run(cmd, input=stdin, capture_output=True, text=True, check=False)
        if out.returncode != 0:
            last = (out.stderr.strip().splitlines() or ["no output"])[-1]
            raise JobsError(f"kubectl {argv[0]}: {last}")
        return out.stdout

    return run


def copy(
    direction: str,
    source: str,
    dest: str,
    *,
    namespace: str,
    claim: str,
    run: Run,
    suffix: str | None = None,
) -> str:
    """``put`` (local ``source`` -> claim path ``dest``) or ``get`` (claim -> local) through a
    copy pod; returns the claim path. The pod is deleted whatever happens."""
    import json

    if direction == "put":
        local, remote = Path(source), cluster_path(dest)
        if not local.exists():
            raise JobsError(f"{source}: no such file or folder here", status=2)
    elif direction == "get":
        remote, local = cluster_path(source), Path(dest)
    else:
        raise ValueError(direction)
    name = f"eks-fsdp-data-{suffix or secrets.token_hex(4)}"
    manifest = json.dumps(pod(name, namespace, claim))
    run(["apply", "-f", "-"], manifest)
    try:
        run(
            [
                "wait",
                "--for=condition=Ready",
                f"pod/{name}",
                "-n",
                namespace,
                f"--timeout={READY_TIMEOUT_S}s",
            ],
            None,
        )
        target = f"{namespace}/{name}:{remote}"
        if direction == "put":
            run(["exec", "-n", namespace, name, "--", "mkdir", "-p", str(remote.parent)], None)
            run(["cp", str(local), target, "-c", "copy"], None)
        else:
            run(["cp", target, str(local), "-c", "copy"], None)
    finally:
        run(["delete", "pod", name, "-n", namespace, "--wait=false"], None)
    return str(remote)


_SAFE = re.compile(r"^[A-Za-z0-9._-]+$")


def main(args: Any) -> int:
    """``eks-fsdp jobs data put|get`` (registered by ``jobs.cli``)."""
    from infra.config import DEFAULT_CHECKPOINT_CLAIM

    namespace = args.namespace or "default"
    if args.stack and not args.namespace:
        from jobs.cluster.kube import jobs_namespace

        namespace = jobs_namespace(args.stack)
    kubeconfig = args.kubeconfig
    if kubeconfig is None and args.stack:
        import json
        import tempfile

        from jobs.cluster.kube import KUBECONFIG_OUTPUT, stack_output

        cfg = stack_output(args.stack, KUBECONFIG_OUTPUT, secret=True)
        with tempfile.NamedTemporaryFile("w", suffix=".kubeconfig", delete=False) as handle:
            handle.write(json.dumps(cfg) if not isinstance(cfg, str) else cfg)
        kubeconfig = handle.name
    if args.data_verb == "put":
        name = args.to or str(DATA_DIR / Path(args.source).name)
        if args.to is None and not _SAFE.match(Path(args.source).name):
            raise JobsError(f"{args.source}: name it with --to /checkpoints/data/NAME", status=2)
        remote = copy(
            "put",
            args.source,
            name,
            namespace=namespace,
            claim=args.claim or DEFAULT_CHECKPOINT_CLAIM,
            run=_kubectl(kubeconfig),
        )
        print(f"copied {args.source} -> {remote}; a job names it: data_path: {remote}")
    else:
        copy(
            "get",
            args.source,
            args.dest,
            namespace=namespace,
            claim=args.claim or DEFAULT_CHECKPOINT_CLAIM,
            run=_kubectl(kubeconfig),
        )
        print(f"copied {args.source} -> {args.dest}")
    return 0


def add_flags(data: Any) -> None:
    """The ``put`` and ``get`` of ``eks-fsdp jobs data`` (``jobs.cli.VERBS``)."""
    sub = data.add_subparsers(dest="data_verb", required=True)
    put = sub.add_parser("put", help="a local file or folder -> /checkpoints/data/NAME")
    put.add_argument("source", metavar="FILE")
    put.add_argument("--to", help="the path on the claim (default /checkpoints/data/<name>)")
    get = sub.add_parser("get", help="a path on the claim -> a local path")
    get.add_argument("source", metavar="PATH", help="under /checkpoints/")
    get.add_argument("dest", metavar="DEST")
    for p in (put, get):
        p.add_argument("--stack", help="the cluster of this stack (its kubeconfig output)")
        p.add_argument("--kubeconfig", help="kubeconfig file (default: kubectl's)")
        p.add_argument("--namespace", help="the jobs' namespace (default: the stack's)")
        p.add_argument("--claim", help="the claim (default fsx-checkpoints)")
