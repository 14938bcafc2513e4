"""The local runner's worker pods against the real training operator's, for every stack.

``localrun`` runs a PyTorchJob without a cluster: it starts each worker with the container's
command and env plus the variables it believes the operator injects
(``localrun.operator_env``: PET_*, PYTHONUNBUFFERED), names each pod
(``localrun.pods.pod_name``) and restarts a failed one by the restart policy it applies
(``localrun.pods.restart_policy``). Here the real operator reconciles the same rendered
PyTorchJob, and for each of the operator's worker pods, matched to the local one by its
``training.kubeflow.org/replica-index`` label, the test compares:

- the pod name with ``pod_name(<job>, <index>)``;
- the ``pytorch`` container's env with ``localrun.pods.pod_env``'s, every name and value.
  Exceptions: a ``secretKeyRef`` variable is compared by name only (the local run takes its
  value from the developer's ``HF_TOKEN``); ``HOSTNAME`` is compared with what the container
  runtime sets in a real pod (``spec.hostname``, else the pod name), as the pod spec does not
  carry it; the ``LOCAL_ONLY`` variables are local-only by design (each with its reason
  below), so the operator's pods must not have them and the local run's are not compared;
- the command (the local run's interpreter stands for the image's ``python``) and that the
  container has no ``args`` (the local run passes none);
- the pod's ``restartPolicy`` with ``restart_policy(<job>)``.

Not compared: the image, resources, volumes, node selection (the local run has no image or
node). If this fails, the local run no longer matches the cluster (a variable added, dropped
or changed on either side, a pod renamed, a restart rule changed): fix ``localrun`` (or the
spec) so they agree again.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from controlplane.__main__ import all_stacks
from controlplane.client import wait_for
from controlplane.cluster import ControlPlane
from localrun import pods as local_pods
from tests.controlplane.helpers import delete_and_wait, namespaces_of, relocate, rendered_objects

pytestmark = pytest.mark.controlplane
JOB_LABEL = "training.kubeflow.org/job-name"
INDEX_LABEL = "training.kubeflow.org/replica-index"
TYPE_LABEL = "training.kubeflow.org/replica-type"
SECRET = "<from the secret>"
LOCAL_ONLY = {
    "OMP_NUM_THREADS": "the local runner's processes share the machine's cores",
    "PYTHONPATH": "the local runner runs the checkout, not the image's installed packages",
    "CUDA_VISIBLE_DEVICES": "CPU jobs: no GPU may be picked up on the developer's machine",
    "EKS_FSDP_METRICS_ADDR": "local pods share the machine's interfaces: the exporter listens on "
    "loopback (a pod's listens on its own network namespace, behind the NetworkPolicy)",
}
"""Variables only the local runner sets, by design, each with its reason."""


def _operator_env(pod: dict[str, Any]) -> dict[str, str]:
    (c,) = [c for c in pod["spec"]["containers"] if c["name"] == "pytorch"]
    # an optional ConfigMap reference (a capacity block's end, workloads.specs.capacity) is
    # resolved by the kubelet on a cluster with a block; a local run has no such ConfigMap, so
    # the variable is absent there, as on a cluster without one
    # NODE_NAME (the preflight gate's node) comes from the downward API, filled by the kubelet;
    # a local run names the machine's hostname instead (training.preflight)
    return {
        e["name"]: e.get("value", SECRET)
        for e in c.get("env", [])
        if not (e.get("valueFrom", {}).get("configMapKeyRef") or {}).get("optional")
        and "fieldRef" not in e.get("valueFrom", {})
    }


def local_env(job: dict[str, Any], pod: str, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """What ``localrun.pods.pod_env`` gives the pod in an empty environment (no host
    variables to tell apart), the Hugging Face token set so its secret reference resolves."""
    device = job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
    cpu = "nvidia.com/gpu" not in device["resources"].get("limits", {})
    with monkeypatch.context() as m:
        m.setattr(local_pods.os, "environ", {"HF_TOKEN": "token"})
        env = local_pods.pod_env(job, "cpu" if cpu else "cuda", pod)
    return {k: SECRET if k == "HF_TOKEN" else v for k, v in env.items()}


def mismatch(
    job: dict[str, Any], pod: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> list[str]:
    """How the local runner's env for the operator's ``pod`` (the local pod of the same
    replica index) differs from the operator's (empty: equal)."""
    index = int(pod["metadata"]["labels"][INDEX_LABEL])
    real = _operator_env(pod)
    local = local_env(job, local_pods.pod_name(job["metadata"]["name"], index), monkeypatch)
    runtime_hostname = pod["spec"].get("hostname") or pod["metadata"]["name"]
    hostname = local.pop("HOSTNAME", None)
    out = (
        []
        if hostname == runtime_hostname
        else [f"HOSTNAME: local {hostname!r}, pod's {runtime_hostname!r}"]
    )
    for var in LOCAL_ONLY:  # set by the operator's pod too: reported as "only operator"
        local.pop(var, None)
    out += [f"only local: {k}" for k in sorted(local.keys() - real.keys())]
    out += [f"only operator: {k}" for k in sorted(real.keys() - local.keys())]
    out += [
        f"{k}: local {local[k]!r}, operator {real[k]!r}"
        for k in sorted(local.keys() & real.keys())
        if local[k] != real[k]
    ]
    return out


@pytest.mark.parametrize("stack", all_stacks())
def test_local_runner_matches_the_operator(
    control_plane: ControlPlane, stack: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    client = control_plane.client
    objs = relocate(rendered_objects(stack, tmp_path / "render"), f"diff-{stack}")
    objs = namespaces_of(objs) + objs
    (job,) = [o for o in objs if o["kind"] == "PyTorchJob"]
    ns, name = job["metadata"]["namespace"], job["metadata"]["name"]
    replicas = job["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"]
    try:
        control_plane.apply_all(objs)
        pods = wait_for(
            f"{stack}: worker pods",
            lambda: (
                (p := client.items("v1", "Pod", ns, labelSelector=f"{JOB_LABEL}={name}"))
                and len(p) == replicas
                and p
            ),
            timeout=90,
        )
        by_index = {int(p["metadata"]["labels"][INDEX_LABEL]): p for p in pods}
        assert sorted(by_index) == list(range(replicas))
        command = local_pods.pod_command(job)
        for index, pod in sorted(by_index.items()):
            assert pod["metadata"]["labels"][TYPE_LABEL] == "worker"
            assert pod["metadata"]["name"] == local_pods.pod_name(name, index)
            problems = mismatch(job, pod, monkeypatch)
            assert not problems, f"{stack} {pod['metadata']['name']}: {problems}"
            (c,) = [c for c in pod["spec"]["containers"] if c["name"] == "pytorch"]
            assert command[0] == sys.executable and c["command"][0] == "python"
            assert command[1:] == c["command"][1:]
            assert not c.get("args"), c["args"]
            assert pod["spec"]["restartPolicy"] == local_pods.restart_policy(job)
        # The diff is strict: one variable of the emulation changed makes it fail.
        emulated = local_pods.operator_env

        def changed(j: dict[str, Any]) -> dict[str, str]:
            return {**emulated(j), "PYTHONUNBUFFERED": "0"}

        monkeypatch.setattr(local_pods, "operator_env", changed)
        assert mismatch(job, by_index[0], monkeypatch) == [
            "PYTHONUNBUFFERED: local '0', operator '1'"
        ]
    finally:
        delete_and_wait(client, objs)
