"""``DebugTools``: htop and nvtop DaemonSets on the GPU nodes (wraps ``workloads.specs.debug``)."""

from __future__ import annotations

from dataclasses import dataclass

import pulumi

from workloads.k8s_objects import apply_object
from workloads.specs import debug as spec
from workloads.specs.settings import DebugSettings

TYPE_TOKEN = "eks-fsdp:workloads:DebugTools"


@dataclass(frozen=True, kw_only=True)
class DebugToolsArgs:
    """Arguments of ``DebugTools``."""

    settings: DebugSettings
    """Namespace, instance types and taints; ``settings.image`` is replaced by ``image``."""
    image: pulumi.Input[str]
    """Image carrying htop and nvtop (the training image, possibly an Output)."""


class DebugTools(pulumi.ComponentResource):
    """One DaemonSet per tool."""

    def __init__(self, name: str, args: DebugToolsArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__(TYPE_TOKEN, name, {}, opts)
        child = pulumi.ResourceOptions(parent=self)
        image = pulumi.Output.from_input(args.image)
        self.daemonsets = []
        for tool in spec.TOOLS:
            # The object's shape is known now; only the image waits for the build.
            obj = spec.daemonset(args.settings, tool)
            pod = obj["spec"]["template"]["spec"]
            container = {**pod["containers"][0], "image": image}
            obj["spec"]["template"]["spec"] = {**pod, "containers": [container]}
            self.daemonsets.append(apply_object(name, obj, child))
        self.network_policy = apply_object(name, spec.network_policy(args.settings), child)
        self.register_outputs({})
