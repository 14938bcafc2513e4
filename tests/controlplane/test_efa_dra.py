"""An ``efa: dra`` job's objects meet a real Kubernetes 1.35 API server: the EFA DRA driver's
DeviceClass (as eks-charts stable/aws-dranet 1.0.0 ``templates/deviceclass.yaml`` writes it,
CEL selector included), the job's ResourceClaimTemplate and a worker pod that references it.

If this fails, a job on an ``efa: dra`` node group would be refused by the API server, or its
pods would never get a ResourceClaim (the controller-manager makes one per pod from the
template), so they could not be scheduled onto EFA devices. No DRA driver runs here (no
ResourceSlices): the pod is expected to stay Pending, with its generated claim naming the
DeviceClass.

A member of a team (a client certificate in the team's group, as an EKS access entry's
``kubernetesGroups`` names it: ``tests.controlplane.helpers.member_access``) creates, reads and
deletes a job's template in the team's namespace under the Role the stack renders
(``workloads.specs.teams.role``; without its ``resource.k8s.io`` rule ``jobs submit`` on an
``efa: dra`` pool gets 403), and is refused in a namespace that is not the team's.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from controlplane.client import ApiError, wait_for
from controlplane.cluster import ControlPlane
from infra.efa import DEVICE_CLASS, DRA_DRIVER
from jobs.cluster.efa_claim import template
from tests.controlplane.helpers import member_access
from workloads.specs import pytorchjob as pj
from workloads.specs.settings import JobSettings

pytestmark = pytest.mark.controlplane
NAMESPACE = "efa-dra-test"


def _device_class() -> dict[str, Any]:
    expression = (
        f'device.driver == "{DRA_DRIVER}" &&\n'
        "device.attributes[\"dra.net\"].pciDevice == 'Elastic Fabric Adapter (EFA)'\n"
    )
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": DEVICE_CLASS},
        "spec": {"selectors": [{"cel": {"expression": expression}}]},
    }


def test_the_claim_template_and_a_worker_referencing_it_are_accepted(
    control_plane: ControlPlane,
) -> None:
    client = control_plane.client
    s = JobSettings(
        name="dra-job",
        namespace=NAMESPACE,
        image="example.com/train:1",
        instance_type="p5.48xlarge",
        workers=1,
        min_workers=1,
        efa_dra=True,
    )
    job = pj.pytorchjob(s, "etcd")
    spec = job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "dra-job-worker-0", "namespace": NAMESPACE},
        "spec": {**spec, "serviceAccountName": "default", "nodeSelector": {"none": "none"}},
    }
    namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}
    created = [namespace, _device_class()]
    try:
        for obj in created:
            client.create(obj)
        client.create(template(s))
        client.create(pod)
        statuses = wait_for(
            "the pod's generated ResourceClaim",
            lambda: (client.read(pod).get("status") or {}).get("resourceClaimStatuses"),
            timeout=60,
        )
        (status,) = statuses
        assert status["name"] == "efa"
        claim = client.find(
            "resource.k8s.io/v1", "ResourceClaim", status["resourceClaimName"], NAMESPACE
        )
        (request,) = claim["spec"]["devices"]["requests"]
        assert request["exactly"]["deviceClassName"] == DEVICE_CLASS
        assert request["exactly"]["count"] == 32
        assert client.read(pod)["status"].get("phase") == "Pending"  # no driver, no devices
    finally:
        client.delete(_device_class())
        client.delete(namespace)


def test_a_team_member_may_manage_its_jobs_claim_templates(
    control_plane: ControlPlane, tmp_path: Path
) -> None:
    from infra.config import parse, project_defaults, stack_file_values
    from workloads.specs import teams

    admin = control_plane.client
    raw = {
        **project_defaults(),
        **stack_file_values("p5-16"),
        "teams": [{"name": "efa-team", "principalArns": ["arn:aws:iam::123456789012:role/t"]}],
    }
    (team,) = parse(raw, stack="p5-16").teams
    rbac = [
        o
        for o in teams.objects(team, parse(raw, stack="p5-16"))
        if o["kind"] in ("Namespace", "Role", "RoleBinding")
    ]
    other = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "efa-other"}}
    member, _ = member_access(
        control_plane, tmp_path / "pki", user="efa-member", group=teams.group_name(team.name)
    )

    def settings(namespace: str) -> JobSettings:
        return JobSettings(
            name="member-job",
            namespace=namespace,
            image="example.com/train:1",
            instance_type="p5.48xlarge",
            workers=1,
            min_workers=1,
            efa_dra=True,
        )

    try:
        for obj in [*rbac, other]:
            admin.create(obj)
        mine = template(settings(team.namespace))
        # RBAC caches settle within a moment of the Role's creation
        wait_for("the member's create", lambda: _created(member, mine), timeout=30)
        assert member.read(mine)["metadata"]["name"] == "member-job-efa"
        member.delete(mine, missing_ok=False)
        with pytest.raises(ApiError) as err:
            member.create(template(settings("efa-other")))
        assert err.value.status == 403
    finally:
        for obj in (other, *[o for o in rbac if o["kind"] == "Namespace"]):
            admin.delete(obj)


def _created(client: Any, obj: dict[str, Any]) -> bool:
    """True once ``client`` created ``obj``; False on 403 (a Role not yet in effect)."""
    try:
        client.create(obj)
    except ApiError as err:
        if err.status != 403:
            raise
        return False
    return True
