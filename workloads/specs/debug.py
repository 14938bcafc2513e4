"""Debug DaemonSets on the GPU nodes: ``htop`` and ``nvtop``.

Both run the training image (which ships the two tools) idle, with the host PID namespace so the
tools see the training processes of the node: ``kubectl exec -it ds/nvtop -- nvtop``. They
request no GPU (the job keeps every device); ``NVIDIA_VISIBLE_DEVICES=all`` lets the NVIDIA
container runtime expose the devices for monitoring anyway.
"""

from __future__ import annotations

from typing import Any

from workloads.specs.common import K8sObject, labels, tolerations
from workloads.specs.settings import DebugSettings

COMPONENT = "debug"
TOOLS = ("htop", "nvtop")


def daemonset(s: DebugSettings, tool: str) -> K8sObject:
    """One DaemonSet running ``tool``'s image idle on every GPU node."""
    if tool not in TOOLS:
        raise ValueError(f"tool: {tool!r} is not one of {', '.join(TOOLS)}")
    env: list[dict[str, str]] = [{"name": "TERM", "value": "xterm-256color"}]
    if tool == "nvtop":
        env += [
            {"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"},
            {"name": "NVIDIA_DRIVER_CAPABILITIES", "value": "utility,compute"},
        ]
    pod_spec: dict[str, Any] = {
        "hostPID": True,
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
                "resources": {
                    "requests": {"cpu": "10m", "memory": "32Mi"},
                    "limits": {"memory": "256Mi"},
                },
            }
        ],
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
        "metadata": {"name": tool, "namespace": s.namespace, "labels": labels(tool, COMPONENT)},
        "spec": {
            "selector": {"matchLabels": selector},
            "template": {"metadata": {"labels": labels(tool, COMPONENT)}, "spec": pod_spec},
        },
    }


def objects(s: DebugSettings) -> list[K8sObject]:
    """The htop and nvtop DaemonSets."""
    return [daemonset(s, tool) for tool in TOOLS]
