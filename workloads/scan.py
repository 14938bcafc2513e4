"""checkov over every Kubernetes object a stack deploys, the gate ``make test`` runs.

    eks-fsdp scan                 # every stack
    eks-fsdp scan --stack p5-16   # one

For each stack it writes, into a scratch folder, the objects ``workloads.render`` writes (the
checkpoint volume, etcd, the PyTorchJob, the observability namespace and dashboard), the debug
DaemonSets (opt-in on a stack, scanned on every stack so their hardening is checked), the
objects of each team (``workloads.specs.teams``: namespace, ServiceAccount, NetworkPolicies,
Role; on a stack without teams, those of an example team) and Kueue's queues, and, for
each replica of the PyTorchJob, its pod template as a ``Pod``: checkov does not know the
PyTorchJob custom resource, so without that the pods that run the training would go unscanned.
It then runs checkov 3.3.30 (from the tools virtualenv, ``.venv-tools``) with ``.checkov.yaml``
and prints ``<stack>: passed N, failed N, suppressed N`` with every failure; the exit status is
1 when any check failed unsuppressed. Suppressions are either global skips in ``.checkov.yaml``
(each with its reason) or ``checkov.io/skipN: CHECK=reason`` annotations on the object.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from eks_fsdp_cli.errors import Parser, fail
from eks_fsdp_cli.paths import REPO_ROOT
from workloads.specs import kueue, observability, storage, teams
from workloads.specs.common import K8sObject, dump_all_yaml
from workloads.specs.stack import objects_by_component

CHECKOV = REPO_ROOT / ".venv-tools" / "bin" / "checkov"
CONFIG = REPO_ROOT / ".checkov.yaml"
STACKS = ("dev", "p4de-odcr", "p5-16")


@dataclass
class ScanResult:
    """checkov's verdict on one stack."""

    stack: str
    passed: int
    failed: int
    suppressed: int
    failures: list[tuple[str, str, str]] = field(default_factory=list)
    """(check id, resource, file) of each unsuppressed failure."""
    suppressions: list[tuple[str, str, str]] = field(default_factory=list)
    """(check id, resource, reason) of each suppressed check."""


def pods_from_pytorchjob(job: K8sObject) -> list[K8sObject]:
    """Each replica's pod template as the Pod the operator creates from it."""
    pods = []
    for replica, spec in job["spec"]["pytorchReplicaSpecs"].items():
        template = spec["template"]
        meta = template.get("metadata") or {}
        pods.append(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    **meta,
                    "name": f"{job['metadata']['name']}-{replica.lower()}-0",
                    "namespace": job["metadata"].get("namespace", "default"),
                },
                "spec": template["spec"],
            }
        )
    return pods


def stack_objects(stack: str) -> dict[str, list[K8sObject]]:
    """Every object a stack can deploy, by file name (see the module docstring)."""
    from jobs.build import load_example

    spec, w = load_example(stack)
    cfg = spec.platform
    fs = storage.placeholder_file_system(cfg.region)
    files = objects_by_component(dataclasses.replace(w, debug_tools=True), fs)
    if "pytorchjob" in files:
        jobs = [o for o in files["pytorchjob"] if o["kind"] == "PyTorchJob"]
        files["pytorchjob-pods"] = [p for j in jobs for p in pods_from_pytorchjob(j)]
    if cfg.observability.enabled:
        s = observability.settings_from_stack(cfg)
        files["observability"] = [observability.namespace(s), observability.dashboard_configmap(s)]
    files["teams"] = [o for t in cfg.teams or (example_team(cfg),) for o in teams.objects(t, cfg)]
    files["kueue"] = kueue.cluster_objects(cfg)
    return files


def example_team(cfg: Any) -> Any:
    """A team with a placeholder principal, for a stack that declares none: its objects (a
    namespace, a ServiceAccount, NetworkPolicies, a Role) are scanned on every stack, as the
    opt-in debug DaemonSets are."""
    from infra.config.teams import TeamConfig

    return TeamConfig(
        name="example",
        principal_arns=("arn:aws:iam::123456789012:role/example",),
        quota={g.name: 0 for g in cfg.gpu_node_groups},
    )


def run_checkov(folder: Path) -> dict[str, Any]:
    """checkov's JSON report of ``folder`` (its exit status says only whether a check failed)."""
    if not CHECKOV.is_file():
        raise FileNotFoundError(f"{CHECKOV} is missing: run `make setup`")
    out = subprocess.run(
        [
            str(CHECKOV),
            "--directory",
            str(folder),
            "--config-file",
            str(CONFIG),
            "--output",
            "json",
        ],
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    if out.returncode not in (0, 1):
        raise RuntimeError(f"checkov exited {out.returncode}: {out.stderr.strip()[-500:]}")
    report = json.loads(out.stdout)
    if isinstance(report, list):  # one report per framework
        (report,) = [r for r in report if r.get("check_type") == "kubernetes"]
    return report  # type: ignore[no-any-return]


def scan(stack: str, folder: Path) -> ScanResult:
    """Write the stack's objects under ``folder`` and scan them."""
    folder.mkdir(parents=True, exist_ok=True)
    for name, objs in stack_objects(stack).items():
        (folder / f"{name}.yaml").write_text(dump_all_yaml(objs))
    report = run_checkov(folder)
    summary = report["summary"]
    results = report.get("results", {})
    failures = [
        (c["check_id"], c["resource"], Path(c["file_path"]).name)
        for c in results.get("failed_checks", [])
    ]
    suppressions = [
        (c["check_id"], c["resource"], (c.get("check_result") or {}).get("suppress_comment", ""))
        for c in results.get("skipped_checks", [])
    ]
    return ScanResult(
        stack=stack,
        passed=int(summary["passed"]),
        failed=int(summary["failed"]),
        suppressed=int(summary["skipped"]),
        failures=failures,
        suppressions=suppressions,
    )


def main(argv: list[str] | None = None) -> int:
    parser = Parser(prog="eks-fsdp scan", description=__doc__, command="scan")
    parser.add_argument("--stack", action="append", help="stack to scan (default: every stack)")
    args = parser.parse_args(argv)
    failed = False
    with tempfile.TemporaryDirectory(prefix="eks-fsdp-scan-") as tmp:
        for stack in args.stack or STACKS:
            try:
                result = scan(stack, Path(tmp) / stack)
            except (ValueError, KeyError, FileNotFoundError, RuntimeError) as err:
                return fail("scan", err.args[0] if err.args else err)
            print(
                f"{stack}: passed {result.passed}, failed {result.failed},"
                f" suppressed {result.suppressed}"
            )
            for check, resource, file in result.failures:
                print(f"  FAILED {check} {resource} ({file})")
            failed |= result.failed > 0
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
