"""Debug DaemonSets on the GPU nodes: ``htop`` and ``nvtop`` (opt-in: stack key ``debugTools``).

Both run the training image (which ships the two tools) idle, with the host PID namespace so the
tools see the training processes of the node: ``kubectl exec -it ds/nvtop -- nvtop``. They
request no GPU (the job keeps every device); ``NVIDIA_VISIBLE_DEVICES=all`` lets the NVIDIA
container runtime expose the devices for monitoring anyway.

Hardened: the host PID namespace is the one privilege they keep (it is what they are for, and
why they are off unless a stack asks). They run as nobody (UID/GID 65534) without privilege
escalation, with every capability dropped, the RuntimeDefault seccomp profile, a read-only root
file system and no service-account token; CPU and memory are limited. Unprivileged, htop and
nvtop still list every process of the node with its CPU, memory and GPU use (procfs and NVML
report them to any user).
"""

from __future__ import annotations

from typing import Any

from workloads.specs.common import K8sObject, labels, tolerations
from workloads.specs.settings import DebugSettings

COMPONENT = "debug"
TOOLS = ("htop", "nvtop")
NOBODY = 65534
"""UID/GID the tools run as."""
HOST_PID_REASON = (
    "htop/nvtop exist to show the node's training processes: they need the host PID namespace;"
    " the DaemonSets are opt-in (debugTools) and otherwise unprivileged"
)
"""Why the DaemonSets keep ``hostPID`` (also the checkov skip reason on the object)."""
SKIPS: dict[str, str] = {
    "CKV_K8S_17": HOST_PID_REASON,
    "CKV_K8S_8": "an idle shell for kubectl exec: nothing to probe for liveness",
    "CKV_K8S_9": "an idle shell for kubectl exec: it serves no traffic to be ready for",
}
"""checkov checks the DaemonSets fail on purpose (annotations on each, with the reason)."""


def container_security_context() -> dict[str, Any]:
    """The container securityContext of both tools."""
    return {
        "runAsNonRoot": True,
        "runAsUser": NOBODY,
        "runAsGroup": NOBODY,
        "allowPrivilegeEscalation": False,
        "privileged": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"]},
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def daemonset(s: DebugSettings, tool: str) -> K8sObject:
    """One DaemonSet running ``tool``'s image idle on every GPU node."""
    if tool not in TOOLS:
        raise ValueError(f"tool: {tool!r} is not one of {', '.join(TOOLS)}")
    env: list[dict[str, str]] = [
        {"name": "TERM", "value": "xterm-256color"},
        # htop writes its settings under $HOME: an emptyDir, the root file system is read-only.
        {"name": "HOME", "value": "/home/nobody"},
    ]
    if tool == "nvtop":
        env += [
            {"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"},
            {"name": "NVIDIA_DRIVER_CAPABILITIES", "value": "utility,compute"},
        ]
    pod_spec: dict[str, Any] = {
        "hostPID": True,
        "automountServiceAccountToken": False,
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": NOBODY,
            "runAsGroup": NOBODY,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "tolerations": tolerations(s.extra_taints),
        "terminationGracePeriodSeconds": 1,
        "containers": [
            {
                "name": tool,
                "image": s.image,
                "imagePullPolicy": "IfNotPresent",
                "command": ["sleep", "infinity"],
                "env": env,
                "stdin": True,
                "tty": True,
                "securityContext": container_security_context(),
                "resources": {
                    "requests": {"cpu": "10m", "memory": "32Mi"},
                    "limits": {"cpu": "500m", "memory": "256Mi"},
                },
                "volumeMounts": [{"name": "home", "mountPath": "/home/nobody"}],
            }
        ],
        "volumes": [{"name": "home", "emptyDir": {"sizeLimit": "16Mi"}}],
    }
    if s.instance_types:
        pod_spec["affinity"] = {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {
                            "matchExpressions": [
                                {
                                    "key": "node.kubernetes.io/instance-type",
                                    "operator": "In",
                                    "values": list(s.instance_types),
                                }
                            ]
                        }
                    ]
                }
            }
        }
    selector = {"app.kubernetes.io/name": tool, "app.kubernetes.io/component": COMPONENT}
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {
            "name": tool,
            "namespace": s.namespace,
            "labels": labels(tool, COMPONENT),
            "annotations": {
                f"checkov.io/skip{i}": f"{check}={reason}"
                for i, (check, reason) in enumerate(sorted(SKIPS.items()), start=1)
            },
        },
        "spec": {
            "selector": {"matchLabels": selector},
            "template": {"metadata": {"labels": labels(tool, COMPONENT)}, "spec": pod_spec},
        },
    }


def network_policy(s: DebugSettings) -> K8sObject:
    """The tools take no traffic and send none: deny both ways."""
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {
            "name": "debug-tools",
            "namespace": s.namespace,
            "labels": labels("debug-tools", COMPONENT),
        },
        "spec": {
            "podSelector": {"matchLabels": {"app.kubernetes.io/component": COMPONENT}},
            "policyTypes": ["Ingress", "Egress"],
        },
    }


def objects(s: DebugSettings) -> list[K8sObject]:
    """The htop and nvtop DaemonSets and their deny-all NetworkPolicy."""
    return [*(daemonset(s, tool) for tool in TOOLS), network_policy(s)]
