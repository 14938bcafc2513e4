"""A job on an ``efa: dra`` node group asks for EFA through a ResourceClaimTemplate.

If these fail, workers on DRA nodes would request ``vpc.amazonaws.com/efa``, which no device
plugin advertises there (the pods never schedule), or reference a claim the API server rejects.
The ResourceClaimTemplate and the worker pod are validated strictly against the Kubernetes
1.34 and 1.35 schemas (kubernetes-validate; DRA's ``resource.k8s.io/v1`` is GA from 1.34); the
DeviceClass is the one the EKS user guide names for the EFA DRA driver
(``efa.networking.k8s.aws``, device-management-efa). Also: a worker is told to use NCCL's OFI
network only where its group attaches EFA (else NCCL stops at start: NCCL docs, "Environment
Variables", NCCL_NET), and a DRA pool's Kueue quota names no ``vpc.amazonaws.com/efa`` its pods
never request. Nothing is mocked.
"""

from __future__ import annotations

from typing import Any

import pytest

from infra.instances import lookup
from workloads.specs import efa
from workloads.specs import pytorchjob as pj
from workloads.specs import trainjob as tj
from workloads.specs.settings import JobSettings
from workloads.specs.validate import validate_builtin

TYPE = "p5.48xlarge"


def _job(dra: bool) -> JobSettings:
    return JobSettings(
        name="llama-dra",
        namespace="jobs",
        image="example.com/train:1",
        instance_type=TYPE,
        workers=2,
        min_workers=2,
        efa_dra=dra,
        preflight_expect="efa=32",
    )


def _pod(s: JobSettings) -> dict:
    template = pj.pytorchjob(s, "etcd")["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "w"}, "spec": template["spec"]}


@pytest.mark.parametrize("version", ["1.34", "1.35"])
def test_the_claim_template_and_the_pod_that_references_it_are_valid(version: str) -> None:
    s = _job(dra=True)
    count = lookup(TYPE).efa_interfaces
    template = efa.resource_claim_template(s.name, s.namespace, count)
    validate_builtin(template, version)
    request = template["spec"]["spec"]["devices"]["requests"][0]
    assert request["exactly"] == {"deviceClassName": "efa.networking.k8s.aws", "count": 32}
    pod = _pod(s)
    validate_builtin(pod, version)
    (container,) = pod["spec"]["containers"]
    assert efa.EFA_RESOURCE not in container["resources"]["limits"]
    assert efa.EFA_RESOURCE not in container["resources"]["requests"]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == "8"
    assert container["resources"]["claims"] == [{"name": "efa"}]
    assert pod["spec"]["resourceClaims"] == [
        {"name": "efa", "resourceClaimTemplateName": template["metadata"]["name"]}
    ]


def test_a_device_plugin_job_is_unchanged_by_the_option() -> None:
    pod = _pod(_job(dra=False))
    validate_builtin(pod, "1.35")
    (container,) = pod["spec"]["containers"]
    assert container["resources"]["limits"][efa.EFA_RESOURCE] == "32"
    assert "claims" not in container["resources"] and "resourceClaims" not in pod["spec"]


def test_the_gate_names_its_node_from_the_downward_api() -> None:
    (container,) = _pod(_job(dra=False))["spec"]["containers"]
    (node,) = [e for e in container["env"] if e["name"] == "NODE_NAME"]
    assert node["valueFrom"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}
    plain = _job(dra=False).replace(preflight_expect=None)
    (c,) = _pod(plain)["spec"]["containers"]
    assert not [e for e in c["env"] if e["name"] == "NODE_NAME"]


def test_a_trainjob_on_a_dra_group_is_refused_in_one_line() -> None:
    with pytest.raises(ValueError) as err:
        tj.trainjob(_job(dra=True))
    assert "use api: v1" in str(err.value) and "\n" not in str(err.value)


def test_a_bad_count_is_refused() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        efa.resource_claim_template("j", "ns", 0)


def test_a_group_without_efa_asks_for_no_efa_device() -> None:
    """A p5 group with ``efa: false`` attaches no EFA interface, so no device plugin
    advertises ``vpc.amazonaws.com/efa`` there: a worker asking for 32 would never schedule.
    The flag follows the job's group (``jobs.build.job_settings``)."""
    import dataclasses
    from pathlib import Path

    from jobs import schema as jobfile
    from jobs.build import build

    pod = _pod(dataclasses.replace(_job(dra=False), efa=False))
    validate_builtin(pod, "1.35")
    (container,) = pod["spec"]["containers"]
    for side in ("limits", "requests"):
        assert efa.EFA_RESOURCE not in container["resources"][side]
        assert container["resources"][side]["nvidia.com/gpu"] == "8"
    example = Path(__file__).resolve().parents[2] / "jobs" / "examples" / "p5-16.yaml"
    job = jobfile.load(example)
    (group,) = [g for g in job.platform.gpu_node_groups if g.name == job.node_group]
    assert group is job.group
    assert build(job, image="example.com/train:1").job.efa is group.efa is True


def test_rendered_files_of_a_dra_job_carry_its_claim_template() -> None:
    """``workloads.render`` writes the job's objects as ``submit`` creates them
    (``jobs.cluster.trainjob.as_submitted``): on an ``efa: dra`` group that includes the
    ResourceClaimTemplate the workers name, else ``kubectl apply`` of the files leaves every
    pod Pending (Kubernetes docs, "Dynamic Resource Allocation": a pod's claim is made from a
    template that must exist in its namespace)."""
    import dataclasses
    from pathlib import Path

    from jobs import schema as jobfile
    from jobs.build import build
    from jobs.cluster.trainjob import as_submitted, validate_object
    from workloads.specs.stack import objects_by_component

    example = Path(__file__).resolve().parents[2] / "jobs" / "examples" / "p5-16.yaml"
    job = jobfile.load(example)
    w = build(job, image="example.com/train:1")
    for dra in (False, True):
        wd = dataclasses.replace(w, job=dataclasses.replace(w.job, efa_dra=dra))
        components = as_submitted(objects_by_component(wd), job, wd.job)
        assert ("efa-claim-template" in components) is dra
    (template,) = components["efa-claim-template"]
    validate_object(template, "1.35")
    (pj_obj,) = components["pytorchjob"]
    pod = pj_obj["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]
    names = [c["resourceClaimTemplateName"] for c in pod["resourceClaims"]]
    assert names == [template["metadata"]["name"]]
    assert template["metadata"]["namespace"] == pj_obj["metadata"].get("namespace", "default")


def _env(s: JobSettings) -> dict[str, str]:
    (container,) = _pod(s)["spec"]["containers"]
    return {e["name"]: e.get("value") for e in container["env"]}


def test_nccl_is_sent_to_ofi_only_where_the_group_has_efa() -> None:
    import dataclasses

    assert _env(_job(dra=False))["NCCL_NET"] == pj.NCCL_NET_EFA == "OFI"
    assert _env(_job(dra=True))["NCCL_NET"] == "OFI"
    no_efa = dataclasses.replace(_job(dra=False), efa=False, preflight_expect=None)
    env = _env(no_efa)
    assert "NCCL_NET" not in env
    assert not [k for k in env if k.startswith("FI_")]


def test_a_dra_pool_has_no_quota_on_the_device_plugin_resource() -> None:
    """Kueue's quota for whole nodes of the pool: GPUs, cpu and memory on a DRA pool, plus
    ``vpc.amazonaws.com/efa`` on a device-plugin pool; both flavors keep the nodes' labels
    (``eks-fsdp/efa-dra`` on the DRA pool) so a job lands on the pool it was queued for."""
    from infra.config import parse
    from infra.config.nodegroups import EFA_DRA_LABEL
    from workloads.specs import kueue

    def group(driver: str) -> Any:
        raw = {
            "aws:region": "us-east-1",
            "availabilityZones": ["us-east-1a", "us-east-1b"],
            "kubernetesVersion": "1.35",
            "gpuNodeGroups": [
                {
                    "name": "gpu",
                    "instanceType": TYPE,
                    "minSize": 0,
                    "desiredSize": 2,
                    "maxSize": 2,
                    "availabilityZone": "us-east-1a",
                    "efa": driver,
                }
            ],
        }
        return parse(raw).gpu_node_groups[0]

    dra, plugin = group("dra"), group("device-plugin")
    with_plugin = kueue.node_resources(plugin, 2)
    assert with_plugin[kueue.EFA] == "64"  # 32 per p5.48xlarge
    without = kueue.node_resources(dra, 2)
    assert kueue.EFA not in without
    assert without == {k: v for k, v in with_plugin.items() if k != kueue.EFA}
    assert kueue.resource_flavor(dra)["spec"]["nodeLabels"][EFA_DRA_LABEL] == "true"


def test_a_team_member_may_manage_the_claim_templates_of_its_jobs() -> None:
    """``jobs submit``/``resume`` as a team member create the job's ``<job>-efa`` template
    and read and delete an earlier generation's (``jobs.cluster.efa_claim``); the team's Role must
    allow that in its namespace (403 otherwise), and nothing on the claims the scheduler's
    controller makes from it."""
    from infra.config import parse, project_defaults, stack_file_values
    from workloads.specs import teams

    team = [{"name": "nlp", "principalArns": ["arn:aws:iam::123456789012:role/nlp"]}]
    raw = {**project_defaults(), **stack_file_values("p5-16"), "teams": team}
    (nlp,) = parse(raw, stack="p5-16").teams
    role = teams.role(nlp)
    assert role["metadata"]["namespace"] == nlp.namespace

    def allowed(resource: str) -> set[str]:
        return {
            v
            for rule in role["rules"]
            if "resource.k8s.io" in rule["apiGroups"] and resource in rule["resources"]
            for v in rule["verbs"]
        }

    assert allowed("resourceclaimtemplates") == {"get", "list", "create", "delete"}
    assert allowed("resourceclaims") == set()
