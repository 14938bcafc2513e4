"""Render every Kubernetes object of a stack as YAML, for kubectl/GitOps users and validation.

    python -m workloads.render --stack dev --out out/dev

writes one file per component (``etcd.yaml``, ``pytorchjob.yaml``, ``debug-tools.yaml``) and
``training-operator/kustomization.yaml`` (the operator install, pinned). Each object is
validated before anything is written (strict schemas for the stack's Kubernetes version; the
PyTorchJob against the operator's SDK types). Secrets are referenced, never rendered: the
PyTorchJob reads the Hugging Face token through a ``secretKeyRef``.
A bad stack name or an invalid config prints one line and exits with status 2.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import yaml

from workloads.specs.common import dump_all_yaml
from workloads.specs.operator import KUSTOMIZATION_FILE
from workloads.specs.stack import load, objects_by_component, operator_kustomization
from workloads.specs.validate import ValidationError, validate

OPERATOR_DIR = "training-operator"


def render(
    stack: str, out: Path, *, image: str | None = None, generation: int | None = None
) -> list[Path]:
    """Write the stack's objects under ``out``; return the files written."""
    from infra.config import load_stack_file

    kubernetes_version = load_stack_file(stack).kubernetes_version
    w = load(stack, image=image, generation=generation)
    components = objects_by_component(w)
    for objs in components.values():
        for obj in objs:
            validate(obj, kubernetes_version)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for component, objs in components.items():
        path = out / f"{component}.yaml"
        path.write_text(dump_all_yaml(objs))
        written.append(path)
    op_dir = out / OPERATOR_DIR
    op_dir.mkdir(exist_ok=True)
    kust = op_dir / KUSTOMIZATION_FILE
    kust.write_text(yaml.safe_dump(operator_kustomization(w), sort_keys=False))
    written.append(kust)
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m workloads.render", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--stack", required=True, help="stack name (Pulumi.<stack>.yaml)")
    parser.add_argument("--out", required=True, type=Path, help="output directory")
    parser.add_argument("--image", help="training image (default: job.image or the content tag)")
    parser.add_argument(
        "--generation",
        type=int,
        help="job generation (bump to resubmit; default job.generation or 1)",
    )
    args = parser.parse_args(argv)
    try:
        files = render(args.stack, args.out, image=args.image, generation=args.generation)
    except (ValueError, KeyError, FileNotFoundError, ValidationError) as err:
        message = err.args[0] if err.args else str(err)
        print(f"render: {message}", file=sys.stderr)
        return 2
    for path in files:
        print(path)
    print(f"apply: kubectl apply --server-side -k {args.out / OPERATOR_DIR}")
    print(f"       kubectl apply -f {args.out}  (after the operator's CRDs are established)")
    print(
        "secret: kubectl create secret generic <job.hfTokenSecretName> "
        "--from-literal=token=$HF_TOKEN  (never rendered)"
    )
    job = load(args.stack, image=args.image, generation=args.generation).job
    if not job.resumes:
        print(
            f"note: no shared checkpoint claim: each of the {job.workers} pods keeps its own "
            "shards in an emptyDir, so --resume is left out (restarts start over)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
