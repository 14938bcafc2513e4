"""Render every Kubernetes object of a stack running a job as YAML, for kubectl/GitOps users
and validation.

    eks-fsdp render --stack dev --out out/dev [--job jobs/examples/dev.yaml]

writes one file per component (``etcd.yaml``, ``pytorchjob.yaml``, ``workers-network-policy.yaml``
(ingress to the workers only from their own job and the metrics scraper), ``debug-tools.yaml``
when the stack sets ``debugTools``),
``training-operator/kustomization.yaml`` (the operator install, pinned), on stacks with
``sharedStorage.type: fsx`` ``checkpoint-volume.yaml`` (the FSx PersistentVolume and the claim
the job mounts; ``--fsx-id``/``--fsx-mount-name`` fill in the file system, placeholders
otherwise), with ``--kueue`` ``kueue/`` (the pinned Kueue chart's values, ``queues.yaml``:
flavors, ClusterQueues, LocalQueues, priorities; ``teams.yaml``: each team's namespace, queues,
RBAC and policies) and, when the stack enables observability, ``observability.yaml`` (namespace, dashboard ConfigMap) with the pinned
Helm charts' values under ``observability/``. Each object is
validated before anything is written (strict schemas for the stack's Kubernetes version; the
PyTorchJob against the operator's SDK types). Secrets are referenced, never rendered: the
PyTorchJob reads the Hugging Face token through a ``secretKeyRef``, Grafana its admin password
from a Secret the user creates.
The job is ``--job FILE`` (a job file, ``jobs.schema``), by default the stack's example
``jobs/examples/<stack>.yaml`` (``eks-fsdp jobs submit`` creates the same PyTorchJob and
NetworkPolicy on a cluster). The image comes from ``--image``, else the job file's ``image``,
else the stack output ``trainingImage``;
a job on GPU nodes refuses an image without a registry (it would be pulled from Docker Hub),
the CPU dev job may use the local build's name.
A bad stack name, an invalid config or an ``--out`` that cannot be written (a file, a
read-only place) prints one line and exits with status 2. ``pip install -r requirements.txt``
is all it needs (kubernetes-validate included).
The job's objects are what ``eks-fsdp jobs submit`` creates (``jobs.cluster.trainjob.as_submitted``):
the PyTorchJob with the job's Kueue labels (``jobs.queue``), or for ``api: v2`` a Trainer v2
TrainJob in ``trainjob.yaml`` (validated against Trainer's CRD at the pin); a stack with
``trainerV2: true`` also gets ``trainer-v2/`` (Trainer v2's install and the torch runtime);
one with a ``provisioner: karpenter`` pool gets ``karpenter.yaml`` (each such pool's
EC2NodeClass and NodePool, validated against Karpenter's CRDs at the pin).
"""

from __future__ import annotations

import dataclasses
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

from eks_fsdp_cli.errors import Parser, fail
from eks_fsdp_cli.paths import REPO_ROOT
from infra import versions
from workloads.specs import observability as obs
from workloads.specs import storage
from workloads.specs.common import dump_all_yaml
from workloads.specs.image import has_registry, local_reference
from workloads.specs.operator import KUSTOMIZATION_FILE
from workloads.specs.pytorchjob import model_name, needs_token
from workloads.specs.stack import objects_by_component, operator_kustomization
from workloads.specs.validate import ValidationError, validate

OUTPUT_TRAINING_IMAGE = "trainingImage"
"""Stack output holding the pushed image (``workloads.program.OUTPUT_TRAINING_IMAGE``)."""

COMMAND = "render"
"""``eks-fsdp render``: the name its errors carry."""

OPERATOR_DIR = "training-operator"
OBSERVABILITY_DIR = "observability"
KUEUE_DIR = "kueue"


def load_job(stack: str, job: Path | str | None = None) -> Any:
    """The job ``job`` (default: ``jobs/examples/<stack>.yaml``) on ``stack``, read once
    (``jobs.schema.JobSpec``); a missing or invalid stack file is named first."""
    from infra.config import load_stack_file
    from jobs.build import example_job
    from jobs.schema import load

    load_stack_file(stack)
    return load(job if job is not None else example_job(stack), stack=stack)


def render(
    stack: str,
    out: Path,
    *,
    job: Path | str | None = None,
    image: str | None = None,
    generation: int | None = None,
    fsx_id: str | None = None,
    fsx_mount_name: str | None = None,
    debug_tools: bool = False,
    kueue: bool = False,
    spec: Any = None,
    built: Any = None,
) -> list[Path]:
    """Write the objects of the stack running ``job`` (default: the stack's example job)
    under ``out``; return the files written. ``debug_tools`` renders the opt-in debug
    DaemonSets even when the stack leaves ``debugTools`` off; ``kueue`` the queues and teams
    the cluster stack installs (``kueue/``). ``spec``: the job, already loaded; ``built``: its
    workloads, already built (``jobs.build.build``, the image resolved)."""
    from jobs.build import build

    spec = spec if spec is not None else load_job(stack, job)
    stack_cfg = spec.platform
    kubernetes_version = stack_cfg.kubernetes_version
    if built is None:
        built = build(spec, image=resolve_image(stack, spec, image), generation=generation or 1)
    w = built
    if debug_tools:
        w = dataclasses.replace(w, debug_tools=True)
    file_system = storage.file_system_ref(
        fsx_id or storage.PLACEHOLDER_FILE_SYSTEM_ID,
        fsx_mount_name or storage.PLACEHOLDER_MOUNT_NAME,
        stack_cfg.region,
    )
    from jobs.cluster import trainjob  # the job's objects as `eks-fsdp jobs submit` creates them

    components = trainjob.as_submitted(objects_by_component(w, file_system), spec, w.job)
    for objs in components.values():
        for obj in objs:
            trainjob.validate_object(obj, kubernetes_version)
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
    if stack_cfg.observability.enabled:
        written += _render_observability(
            obs.settings_from_stack(stack_cfg), out, kubernetes_version
        )
    if kueue and stack_cfg.gpu_node_groups:
        written += _render_kueue(stack_cfg, out / KUEUE_DIR, kubernetes_version)
    if stack_cfg.trainer_v2:
        from workloads.specs.trainjob import write_install

        written += write_install(out)
    if any(g.uses_karpenter for g in stack_cfg.gpu_node_groups):
        from workloads.specs.karpenter import stack_objects as karpenter_objects

        path = out / "karpenter.yaml"  # each pool's EC2NodeClass + NodePool, validated
        path.write_text(dump_all_yaml(karpenter_objects(stack_cfg)))
        written.append(path)
    return written


def _render_kueue(stack_cfg: Any, out: Path, k8s_version: str) -> list[Path]:
    """Kueue's chart values, the queues (``queues.yaml``) and each team's objects
    (``teams.yaml``), validated: Kueue's kinds against its CRDs at the pin, the rest strictly.
    A folder of its own: applied after Kueue's CRDs are established."""
    from workloads.specs import kueue, teams

    queues = kueue.cluster_objects(stack_cfg)
    team_objs = [o for t in stack_cfg.teams for o in teams.objects(t, stack_cfg)]
    for obj in (*queues, *team_objs):
        if kueue.is_kueue(obj):
            kueue.validate(obj)
        else:
            validate(obj, k8s_version)
    out.mkdir(exist_ok=True)
    values = out / "values.yaml"
    values.write_text(
        yaml.safe_dump(kueue.chart_values(kueue.stack_settings(stack_cfg)), sort_keys=False)
    )
    written = [values, out / "queues.yaml"]
    written[-1].write_text(dump_all_yaml(queues))
    if team_objs:
        written.append(out / "teams.yaml")
        written[-1].write_text(dump_all_yaml(team_objs))
    return written


def resolve_image(stack: str, job: Any, image: str | None) -> str:
    """The image the rendered objects run: ``--image``, else ``job.image``, else the stack output
    ``trainingImage`` (with a Pulumi CLI and the stack's backend at hand).

    A job on GPU nodes (``job.device: cuda``) is pulled by the cluster, so a reference without a
    registry (which Docker resolves to Docker Hub) is refused with one line. A CPU job (the dev
    stack's demo) may use the local build's name.
    """
    chosen = image or job.image or _stack_output_image(stack)
    if chosen and has_registry(chosen):
        return chosen
    if job.device == "cpu":
        return chosen or local_reference()
    if chosen:
        raise ValueError(
            f"image: {chosen!r} names no registry (the nodes would pull it from Docker Hub); "
            "pass --image <account>.dkr.ecr.<region>.amazonaws.com/<repository>:<tag>"
        )
    raise ValueError(
        f"image: stack {stack!r} runs on GPU nodes and needs a registry image: pass --image "
        f"$(pulumi stack output {OUTPUT_TRAINING_IMAGE} --stack {stack}) after pulumi up"
    )


def _stack_output_image(stack: str) -> str | None:
    """``pulumi stack output trainingImage`` of ``stack``, or None (no CLI, no stack, no output)."""
    if shutil.which("pulumi") is None:
        return None
    try:
        out = subprocess.run(
            ["pulumi", "stack", "output", OUTPUT_TRAINING_IMAGE, "--stack", stack],
            cwd=REPO_ROOT,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    ref = out.stdout.strip()
    return ref if out.returncode == 0 and ref else None


def _render_observability(s: obs.ObservabilitySettings, out: Path, k8s_version: str) -> list[Path]:
    """The observability objects we own, and the values of the two pinned charts."""
    objs = [obs.namespace(s), obs.storage_class(s), obs.dashboard_configmap(s)]
    for obj in objs:
        validate(obj, k8s_version)
    path = out / "observability.yaml"
    path.write_text(dump_all_yaml(objs))
    values_dir = out / OBSERVABILITY_DIR
    values_dir.mkdir(exist_ok=True)
    values = {
        versions.KUBE_PROMETHEUS_STACK_CHART: obs.kube_prometheus_stack_values(s),
        versions.DCGM_EXPORTER_CHART: obs.dcgm_exporter_values(s) if s.dcgm else None,
    }
    written = [path]
    for chart, chart_values in values.items():
        if chart_values is not None:
            written.append(values_dir / f"{chart}-values.yaml")
            written[-1].write_text(yaml.safe_dump(chart_values, sort_keys=False))
    return written


def helm_commands(s: obs.ObservabilitySettings, out: Path) -> list[str]:
    """The helm installs matching the rendered values (charts pinned in infra.versions)."""
    values_dir = out / OBSERVABILITY_DIR
    kps = versions.KUBE_PROMETHEUS_STACK_CHART
    cmds = [
        f"kubectl create secret generic {s.grafana_admin_secret} -n {s.namespace} "
        f"--from-literal={obs.GRAFANA_USER_KEY}={s.grafana_admin_user} "
        f"--from-literal={obs.GRAFANA_PASSWORD_KEY}=<password>  (never rendered)",
        f"helm upgrade --install {s.release} {kps} --repo {versions.KUBE_PROMETHEUS_STACK_REPO} "
        f"--version {versions.KUBE_PROMETHEUS_STACK_VERSION} -n {s.namespace} "
        f"-f {values_dir / f'{kps}-values.yaml'}",
    ]
    if s.dcgm:
        dcgm = versions.DCGM_EXPORTER_CHART
        cmds.append(
            f"helm upgrade --install {dcgm} {dcgm} --repo {versions.DCGM_EXPORTER_REPO} "
            f"--version {versions.DCGM_EXPORTER_VERSION} -n {s.namespace} "
            f"-f {values_dir / f'{dcgm}-values.yaml'}"
        )
    return cmds


def main(argv: list[str] | None = None) -> int:
    parser = Parser(prog="eks-fsdp render", description=__doc__.split("\n")[0], command=COMMAND)
    parser.add_argument("--stack", required=True, help="stack name (Pulumi.<stack>.yaml)")
    parser.add_argument(
        "--job",
        type=Path,
        help="job file (default: jobs/examples/<stack>.yaml; eks-fsdp jobs submits one)",
    )
    parser.add_argument("--out", required=True, type=Path, help="output directory")
    parser.add_argument(
        "--image",
        help="training image with its registry (default: job.image, else the stack output "
        "trainingImage; a CPU job may use the local build's name)",
    )
    parser.add_argument(
        "--generation",
        type=int,
        help="job generation (bump to resubmit; default job.generation or 1)",
    )
    parser.add_argument(
        "--fsx-id",
        help="FSx file system id for checkpoint-volume.yaml (stack output "
        "sharedFileSystemId; default a placeholder)",
    )
    parser.add_argument(
        "--fsx-mount-name", help="its Lustre mount name (stack output sharedFileSystemMountName)"
    )
    parser.add_argument(
        "--debug-tools",
        action="store_true",
        help="also render the htop/nvtop DaemonSets (opt-in: stack key debugTools)",
    )
    parser.add_argument(
        "--kueue",
        action="store_true",
        help="also render Kueue's chart values, the queues and the stack's teams (kueue/)",
    )
    args = parser.parse_args(argv)
    from jobs.build import build

    try:
        spec = load_job(args.stack, args.job)
        image = resolve_image(args.stack, spec, args.image)
        w = build(spec, image=image, generation=args.generation or 1)  # once, for files and notes
        files = render(
            args.stack,
            args.out,
            job=args.job,
            image=args.image,
            generation=args.generation,
            fsx_id=args.fsx_id,
            fsx_mount_name=args.fsx_mount_name,
            debug_tools=args.debug_tools,
            kueue=args.kueue,
            spec=spec,
            built=w,
        )
    except OSError as err:
        where = err.filename if err.filename is not None else args.out
        return fail(COMMAND, f"--out {args.out}: cannot write {where}: {err.strerror}")
    except (ValueError, KeyError, ValidationError) as err:
        return fail(COMMAND, err.args[0] if err.args else str(err))
    for path in files:
        print(path)
    print(f"apply: kubectl apply --server-side -k {args.out / OPERATOR_DIR}")
    print(f"       kubectl apply -f {args.out}  (after the operator's CRDs are established)")
    stack_cfg = spec.platform
    if stack_cfg.trainer_v2:
        print(f"trainer-v2: kubectl apply --server-side -k {args.out / 'trainer-v2'}")
    if args.kueue and stack_cfg.gpu_node_groups:
        from workloads.specs.kueue import helm_command

        kueue_dir = args.out / KUEUE_DIR
        print(f"kueue: {helm_command(kueue_dir / 'values.yaml')}")
        print(f"       kubectl apply -f {kueue_dir / 'queues.yaml'}  (after Kueue's CRDs)")
        if stack_cfg.teams:
            print(f"       kubectl apply -f {kueue_dir / 'teams.yaml'}")
    if stack_cfg.observability.enabled:
        for cmd in helm_commands(obs.settings_from_stack(stack_cfg), args.out):
            print(f"observability: {cmd}")
    job = w.job
    if job.hf_token_secret and needs_token(model_name(job)):  # a hub model: gated for Llama
        print(
            f"secret: kubectl create secret generic {job.hf_token_secret} -n {job.namespace} "
            "--from-literal=token=$HF_TOKEN  (never rendered)"
        )
    if not has_registry(job.image):
        print(
            f"note: image {job.image} names no registry: the local runner builds and uses it; "
            "a cluster needs --image <registry>/<repository>:<tag>"
        )
    if w.checkpoint_volume is not None and not (args.fsx_id and args.fsx_mount_name):
        print(
            "note: checkpoint-volume.yaml names the file system by placeholders; after pulumi up "
            "render again with --fsx-id $(pulumi stack output sharedFileSystemId) "
            "--fsx-mount-name $(pulumi stack output sharedFileSystemMountName)"
        )
    if not job.resumes:
        print(
            f"note: no shared checkpoint claim: each of the {job.workers} pods keeps its own "
            "shards in an emptyDir, so --resume is left out (restarts start over)"
        )
    _print_estimate(spec)
    return 0


def _print_estimate(spec: Any) -> None:
    """The planner's estimate of the job (``planner.estimate``), on stderr: stdout stays the
    list of files and commands."""
    from planner.estimate import lines

    for line in lines(spec):
        print(line, file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
