"""``efa: dra | device-plugin`` per GPU node group: where the EFA DRA driver may be chosen, the
labels that keep it and the EFA device plugin off each other's nodes, and the driver's chart.

If these fail, a stack could install the EFA DRA driver where EKS does not support it (a
Kubernetes minor below 1.34, a Karpenter pool, a type without EFA) and its pods would wait for
devices nobody advertises, or the device plugin and the DRA driver would both manage one
node's EFA devices, which the EKS user guide ("Manage EFA devices on Amazon EKS",
device-management-efa: "cannot coexist on the same node") says oversubscribes them silently.
Nothing is mocked: the config parser and the chart values are pure; the chart's value keys
(``nodeSelector``, ``tolerations``) are those of eks-charts stable/aws-dranet 1.0.0.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from infra import versions
from infra.config import ConfigError, parse
from infra.config.nodegroups import EFA_DRA_LABEL, EFA_PRESENT_LABEL, node_labels
from infra.device_plugins import efa_values
from infra.efa import DEVICE_CLASS, dra_version_problem
from infra.efa_dra import EfaDraDriverArgs, dra_values

GROUP: dict[str, Any] = {
    "name": "gpu",
    "instanceType": "p5.48xlarge",
    "minSize": 0,
    "desiredSize": 2,
    "maxSize": 2,
    "availabilityZone": "us-east-1a",
    "efa": "dra",
}
BASE: dict[str, Any] = {
    "aws:region": "us-east-1",
    "availabilityZones": ["us-east-1a", "us-east-1b"],
    "kubernetesVersion": "1.35",
    "gpuNodeGroups": [GROUP],
}


def _raw(top: dict[str, Any] | None = None, **group: Any) -> dict[str, Any]:
    raw = copy.deepcopy(BASE)
    raw.update(top or {})
    raw["gpuNodeGroups"][0].update(group)
    return raw


def test_dra_and_the_device_plugin_are_parsed_per_group() -> None:
    dra = parse(_raw()).gpu_node_groups[0]
    assert (dra.efa, dra.efa_driver) == (True, "dra")
    plugin = parse(_raw(efa="device-plugin")).gpu_node_groups[0]
    assert (plugin.efa, plugin.efa_driver) == (True, "device-plugin")
    off = parse(_raw(efa=False)).gpu_node_groups[0]
    assert off.efa is False


def _raw_without_efa_key() -> dict[str, Any]:
    raw = _raw()
    del raw["gpuNodeGroups"][0]["efa"]
    return raw


def test_the_default_stays_the_device_plugin() -> None:
    group = parse(_raw_without_efa_key()).gpu_node_groups[0]
    assert (group.efa, group.efa_driver) == (True, "device-plugin")


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (
            _raw({"kubernetesVersion": "1.33"}),
            "eks-fsdp:gpuNodeGroups[0].efa: dra needs Kubernetes >= 1.34 (resource.k8s.io/v1); "
            "the cluster is 1.33",
        ),
        (
            _raw(instanceType="g5.12xlarge"),
            "eks-fsdp:gpuNodeGroups[0].efa: g5.12xlarge has no EFA interfaces",
        ),
        (
            _raw(efa="dra-typo"),
            "eks-fsdp:gpuNodeGroups[0].efa: 'dra-typo': expected true, false, dra or device-plugin",
        ),
    ],
    ids=["k8s-1.33", "no-efa-type", "bad-value"],
)
def test_dra_where_eks_does_not_support_it_stops_in_one_line(
    raw: dict[str, Any], expected: str
) -> None:
    with pytest.raises(ConfigError) as err:
        parse(raw)
    assert str(err.value) == expected
    assert "\n" not in str(err.value)


def test_dra_on_a_karpenter_pool_is_refused() -> None:
    with pytest.raises(ConfigError) as err:
        parse(_raw(provisioner="karpenter", minSize=0, desiredSize=0))
    assert str(err.value) == (
        "eks-fsdp:gpuNodeGroups[0].efa: dra is for managed node groups (Karpenter: DRA only on"
        " static NodePools): use efa: device-plugin"
    )


def test_versions_below_and_from_1_34() -> None:
    assert dra_version_problem("1.34") is None and dra_version_problem("1.35") is None
    assert "1.33" in (dra_version_problem("1.33") or "")


def test_dra_nodes_are_labelled_for_the_driver_and_never_for_the_plugin() -> None:
    dra = node_labels(parse(_raw()).gpu_node_groups[0])
    plugin = node_labels(parse(_raw(efa="device-plugin")).gpu_node_groups[0])
    assert dra[EFA_DRA_LABEL] == "true" and EFA_PRESENT_LABEL not in dra
    assert plugin[EFA_PRESENT_LABEL] == "true" and EFA_DRA_LABEL not in plugin
    taints = (parse(_raw()).gpu_node_groups[0].taint,)
    driver_selector = dra_values(taints)["nodeSelector"]
    plugin_selector = efa_values(taints)["nodeSelector"]
    # each DaemonSet selects only its own nodes: no node matches both selectors
    assert driver_selector.items() <= dra.items() and not plugin_selector.items() <= dra.items()
    assert (
        plugin_selector.items() <= plugin.items() and not driver_selector.items() <= plugin.items()
    )


def test_the_driver_tolerates_the_gpu_taint_and_is_pinned() -> None:
    group = parse(_raw()).gpu_node_groups[0]
    values = dra_values((group.taint,))
    assert group.taint.toleration() in values["tolerations"]
    # the chart's template adds CriticalAddonsOnly itself (templates/daemonset.yaml)
    assert all(t.get("key") != "CriticalAddonsOnly" for t in values["tolerations"])
    assert (versions.EFA_DRA_DRIVER_CHART, versions.EFA_DRA_DRIVER_VERSION) == (
        "aws-dranet",
        "1.0.0",
    )
    assert DEVICE_CLASS == "efa.networking.k8s.aws"
    with pytest.raises(ValueError, match=r"EfaDraDriverArgs\.gpu_taints"):
        EfaDraDriverArgs(gpu_taints=())


def test_a_dra_stack_installs_the_driver_instead_of_the_device_plugin() -> None:
    """Under Pulumi's mocks (the engine and AWS cannot run here; tests.pulumi_mocks): the p5
    stack with its group switched to ``efa: dra`` gets the aws-dranet release, pinned and on the
    cluster's provider, no EFA device plugin, and GPU nodes labelled for the driver."""
    from tests.pulumi_mocks import run_program

    group = {
        "name": "p5-dra",
        "instanceType": "p5.48xlarge",
        "minSize": 0,
        "desiredSize": 2,
        "maxSize": 2,
        "availabilityZone": "us-east-2a",
        "efa": "dra",
    }
    run = run_program(
        "p5-16",
        overrides={"gpuNodeGroups": [group], "job": {}},
        secrets={"hfToken": "hf_mock", "grafanaAdminPassword": "mock-password"},
    )
    releases = {
        r.inputs["chart"]: r
        for r in run.of_type("kubernetes:helm.sh/v3:Release")
        if "eks-fsdp:infra:" in r.urn
    }
    assert versions.EFA_DEVICE_PLUGIN_CHART not in releases
    dra = releases[versions.EFA_DRA_DRIVER_CHART]
    assert dra.inputs["version"] == versions.EFA_DRA_DRIVER_VERSION
    assert dra.inputs["repositoryOpts"] == {"repo": versions.EFA_DRA_DRIVER_REPO}
    assert dra.inputs["namespace"] == "kube-system"
    assert dra.inputs["values"]["nodeSelector"] == {EFA_DRA_LABEL: "true"}
    provider = run.one("pulumi:providers:kubernetes", "cluster-k8s")
    assert dra.provider.startswith(provider.urn + "::")
    ng = next(r for r in run.of_type("aws:eks/nodeGroup:NodeGroup") if "p5-dra" in r.urn)
    labels = ng.inputs["labels"]
    assert labels[EFA_DRA_LABEL] == "true" and EFA_PRESENT_LABEL not in labels
