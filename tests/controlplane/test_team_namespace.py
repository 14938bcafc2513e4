"""A team's namespace runs its members' jobs, and its members reach nothing else.

On the local control plane (etcd, kube-apiserver with RBAC, controller-manager, scheduler,
kwok's fake p4de nodes, the training operator, Kueue), the p4de-odcr stack (FSx for Lustre,
``hfToken``) with two teams, ``tn-nlp`` and ``tn-vision``:

- ``tn-nlp``'s objects are applied as the stack renders them, with nothing made by hand:
  ``workloads.specs.teams.objects`` (Namespace, ServiceAccount, Role, RoleBinding,
  NetworkPolicy, LocalQueue), ``storage_objects`` (the team's PersistentVolume of the file
  system and its claim) and ``hf_token_secret``; the queues are the stack's
  (``kueue.cluster_objects``, cluster-scoped names prefixed ``tn-``);
- a member of ``tn-nlp`` (a client certificate in group ``eks-fsdp-team-tn-nlp``, as an EKS
  access entry's ``kubernetesGroups`` names it: ``tests.controlplane.helpers.member_access``)
  submits a job with ``eks-fsdp jobs submit --team tn-nlp``: the controller-manager binds the
  claim to the team's volume, Kueue admits the job, the scheduler places its pod on a p4de
  node with the claim mounted; the member reads its pods, its Workload and events, watches and
  suspends the job (a patch), and deletes it (``cancel --purge``);
- the member is refused (403) on ``tn-vision``'s jobs and pods and on cluster-scoped objects
  (nodes, namespaces, PersistentVolumes, ClusterQueues); TrainJob verbs, whose CRD the local
  control plane does not serve (Trainer v2 is not run here), are asked of the API server's
  authorizer with SelfSubjectAccessReviews as the member (RBAC matches ``apiGroups`` and
  ``resources`` by name, served or not: Kubernetes docs, "Using RBAC Authorization");
- the namespace's admission policies (``workloads.specs.team_admission``), evaluated by the
  API server: a member's PyTorchJob without the ``kueue.x-k8s.io/queue-name`` label (or with
  an empty one) is refused with the policy's message, and so is taking the label off the
  submitted job; the labelled job is accepted and Kueue still admits and unsuspends it (its
  own writes pass). The pod the training operator made for the job passes the pod policy
  (``IPC_LOCK`` on p4de's EFA included), and the same pod with host networking, a host PID
  namespace, a ``hostPath`` volume, a privileged container, an added ``SYS_ADMIN``, another
  ServiceAccount or ``automountServiceAccountToken: true`` is refused, each with its message
  (server-side dry runs: admission runs, nothing is stored). The member may patch the job's
  Workload's ``spec.active`` but not its ``spec.priority`` (refused with the workload
  policy's message) or ``spec.queueName``, which an admin, outside the team's group as Kueue's
  controller is, may (dry runs too);
- ``tn-vision``'s namespace holds its team objects but not the claim and token Secret (a stack
  applied before teams got them): ``submit --team tn-vision`` refuses in one line naming both
  and creates nothing; on a stack without shared storage, a job file naming a claim the
  team's namespace lacks is refused the same way.

If this fails, a team's job would hang Pending on a claim its namespace lacks (holding quota
Kueue gave it), the Role would not let members run the jobs CLI in their namespace, or it
would let them into another team's namespace or the cluster's own objects; a member could
run a job outside every quota or a pod with the node's privileges or its ServiceAccount's
token, or raise its job's priority to preempt other teams; or the policies would refuse our
own jobs and pods.
"""

from __future__ import annotations

import copy
import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from controlplane.client import ApiError, Client, wait_for
from controlplane.cluster import ControlPlane
from infra.config import DEFAULT_CHECKPOINT_CLAIM, load_stack_file, sources
from jobs import cli, manifest
from tests.controlplane.helpers import (
    IMAGE,
    condition,
    delete_and_wait,
    member_access,
    prefix_queues,
)
from workloads.specs import kueue, storage, team_admission, teams

pytestmark = pytest.mark.controlplane
REPO = Path(__file__).resolve().parents[2]
STACK = "p4de-odcr"
JOB_FILE = str(REPO / "jobs" / "examples" / "p4de-odcr.yaml")
DEV_JOB_FILE = str(REPO / "jobs" / "examples" / "dev.yaml")
PREFIX = "tn-"
NLP, VISION, DEV_TEAM = f"{PREFIX}nlp", f"{PREFIX}vision", f"{PREFIX}dev"
TIMEOUT_S = 120.0
FS = storage.FileSystemRef(
    file_system_id="fs-0123456789abcdef0",
    dns_name="fs-0123456789abcdef0.fsx.us-east-2.amazonaws.com",
    mount_name="abcdefgh",
)
"""A file system as the stack's outputs name it (nothing mounts it on kwok's nodes)."""
PJ = ("kubeflow.org/v1", "PyTorchJob")


def _root(tmp_path: Path) -> Path:
    """A repository root whose p4de-odcr and dev stack files declare the teams."""
    root = tmp_path / "root"
    root.mkdir()
    shutil.copy(REPO / "Pulumi.yaml", root / "Pulumi.yaml")
    for stack, names in ((STACK, (NLP, VISION)), ("dev", (DEV_TEAM,))):
        data = yaml.safe_load((REPO / f"Pulumi.{stack}.yaml").read_text())
        data["config"]["eks-fsdp:teams"] = [
            {"name": n, "principalArns": [f"arn:aws:iam::123456789012:role/{n}"]} for n in names
        ]
        (root / f"Pulumi.{stack}.yaml").write_text(yaml.safe_dump(data))
    return root


def _review(client: Client, namespace: str, group: str, resource: str, verb: str) -> bool:
    """Whether the caller may ``verb`` ``resource`` in ``namespace`` (SelfSubjectAccessReview:
    the API server's authorizer answers for the authenticated user)."""
    review = {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SelfSubjectAccessReview",
        "spec": {
            "resourceAttributes": {
                "namespace": namespace,
                "group": group,
                "resource": resource,
                "verb": verb,
            }
        },
    }
    out = client.request("POST", "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", review)
    return bool(out["status"].get("allowed"))


def _refusal(call: Any) -> str:
    """The message of the API server's refusal of ``call()`` ("" when it succeeds)."""
    try:
        call()
    except ApiError as err:
        return str(err)
    return ""


def _dry_run(client: Client, obj: dict[str, Any]) -> Any:
    """Create ``obj`` with ``dryRun=All``: every admission step runs, nothing is stored."""
    path = client.collection_path(obj["apiVersion"], obj["kind"], obj["metadata"]["namespace"])
    return client.request("POST", path, obj, query={"dryRun": "All"})


def _status(call: Any) -> int:
    """The HTTP status of ``call()`` (200 when it succeeds)."""
    try:
        call()
    except ApiError as err:
        return err.status
    return 200


def test_a_members_job_runs_in_the_team_namespace_and_nowhere_else(
    control_plane: ControlPlane,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    root = _root(tmp_path)
    monkeypatch.setattr(sources, "REPO_ROOT", root)
    # ``status`` would read progress from the cluster's Prometheus (none here), then from a
    # worker's exporter through the pod proxy, which dials kwok's fake pod IPs: left out, as
    # in test_jobs_queue (jobs.cluster.metrics has its own tests)
    from jobs.cluster import metrics as cluster_metrics

    monkeypatch.setattr(cluster_metrics, "prometheus_values", lambda *a, **kw: None)
    monkeypatch.setattr(cluster_metrics, "pod_values", lambda *a, **kw: {})
    cfg = load_stack_file(STACK, root)
    nlp, vision = cfg.teams
    admin = control_plane.client
    member, member_kubeconfig = member_access(
        control_plane, tmp_path / "pki", user="alice", group=teams.group_name(NLP)
    )

    def own(team: Any) -> list[dict[str, Any]]:
        return [
            prefix_queues(o, PREFIX)
            for o in teams.objects(team, cfg)
            if o["metadata"].get("namespace") != kueue.JOBS_NAMESPACE
        ]

    nlp_objs = [
        *own(nlp),
        *teams.storage_objects(nlp, cfg, FS),
        teams.hf_token_secret(nlp, "hf_test"),
    ]
    vision_objs = own(vision)  # no claim, no token Secret
    queues = [
        prefix_queues(o, PREFIX)
        for o in kueue.cluster_objects(cfg)
        if o["metadata"].get("namespace") != kueue.JOBS_NAMESPACE
    ]
    objs = [*nlp_objs, *vision_objs]
    local_queues = [o for o in objs if o["kind"] == "LocalQueue"]
    namespaced = [o for o in objs if o["kind"] != "LocalQueue"]
    kinds = ("Namespace", "PersistentVolume")
    namespaced.sort(key=lambda o: kinds.index(o["kind"]) if o["kind"] in kinds else len(kinds))

    def run(kubeconfig: Path | str, *argv: str) -> tuple[int, str, str]:
        code = cli.main([*argv, "--kubeconfig", str(kubeconfig)])
        out, err = capsys.readouterr()
        return code, out, err

    def as_member(*argv: str) -> tuple[int, str, str]:
        return run(member_kubeconfig, *argv, "-n", NLP)

    def pods(client: Client, ns: str) -> list[dict[str, Any]]:
        return client.items("v1", "Pod", ns)

    try:
        control_plane.apply_all([*namespaced, *queues, *local_queues])

        def active() -> bool:
            return all(
                any(
                    c["type"] == "Active" and c["status"] == "True"
                    for c in admin.read(q).get("status", {}).get("conditions", [])
                )
                for q in [*queues, *local_queues]
                if q["kind"] in ("ClusterQueue", "LocalQueue")
            )

        wait_for("ClusterQueues and LocalQueues Active", active, timeout=TIMEOUT_S)

        # --- a member's job without a queue is refused (the API server loads a policy
        # asynchronously: wait until it is in force) ------------------------------------
        unqueued = {
            "apiVersion": PJ[0],
            "kind": PJ[1],
            "metadata": {"name": "tn-unqueued", "namespace": NLP},
            "spec": {
                "pytorchReplicaSpecs": {
                    "Worker": {
                        "replicas": 1,
                        "restartPolicy": "OnFailure",
                        "template": {
                            "spec": {
                                "serviceAccountName": teams.SERVICE_ACCOUNT,
                                "containers": [{"name": "pytorch", "image": IMAGE}],
                            }
                        },
                    }
                }
            },
        }

        def refused(obj: dict[str, Any]) -> str | None:
            message = _refusal(lambda: _dry_run(member, obj))
            return message if team_admission.QUEUE_MESSAGE in message else None

        wait_for("the queue policy in force", lambda: refused(unqueued), timeout=TIMEOUT_S)
        empty = copy.deepcopy(unqueued)
        empty["metadata"]["labels"] = {team_admission.QUEUE_LABEL: ""}
        assert refused(empty)
        labelled = copy.deepcopy(unqueued)
        labelled["metadata"]["labels"] = {team_admission.QUEUE_LABEL: STACK}
        assert _refusal(lambda: _dry_run(member, labelled)) == ""

        # --- the member submits: the claim the stack made binds, the pod is scheduled -----
        submit = ("submit", JOB_FILE, "--image", IMAGE, "--set", "workers=1")
        code, out, err = run(member_kubeconfig, *submit, "--team", NLP, "--name", "tn-a")
        assert code == 0 and f"namespace {NLP}" in out, err
        claim = wait_for(
            "the team's claim bound to the team's volume",
            lambda: (
                c
                if (c := admin.find("v1", "PersistentVolumeClaim", DEFAULT_CHECKPOINT_CLAIM, NLP))
                and c.get("status", {}).get("phase") == "Bound"
                else None
            ),
            timeout=TIMEOUT_S,
        )
        assert claim["spec"]["volumeName"] == f"{NLP}-{DEFAULT_CHECKPOINT_CLAIM}"

        def running() -> list[dict[str, Any]]:
            found = [p for p in pods(member, NLP) if p["status"].get("phase") == "Running"]
            return found if len(found) == 1 else []

        try:
            (pod,) = wait_for("the job's pod scheduled and running", running, timeout=TIMEOUT_S)
        except TimeoutError as err:
            seen = [
                (p["metadata"]["name"], p["status"].get("phase"), p["status"].get("conditions"))
                for p in pods(admin, NLP)
            ]
            states = [w.get("status") for w in admin.items(kueue.API_VERSION, "Workload", NLP)]
            raise AssertionError(f"{err}; pods: {seen}; workloads: {states}") from None
        assert pod["spec"]["nodeName"]
        node = admin.find("v1", "Node", pod["spec"]["nodeName"])
        assert node["metadata"]["labels"]["eks.amazonaws.com/nodegroup"] == STACK
        assert {
            "name": "checkpoints",
            "persistentVolumeClaim": {"claimName": DEFAULT_CHECKPOINT_CLAIM},
        } in pod["spec"]["volumes"]
        assert pod["spec"]["serviceAccountName"] == teams.SERVICE_ACCOUNT

        # --- our own pod passes the pod policy; each privilege it refuses, refused --------
        (container,) = pod["spec"]["containers"]
        assert container["securityContext"]["capabilities"]["add"] == ["IPC_LOCK"]  # EFA
        spec = {k: v for k, v in pod["spec"].items() if k not in ("nodeName", "priority")}
        again = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "tn-pod-check", "namespace": NLP},
            "spec": spec,
        }
        assert _refusal(lambda: _dry_run(admin, again)) == ""

        def variant(change: Any) -> dict[str, Any]:
            obj = copy.deepcopy(again)
            change(obj["spec"], obj["spec"]["containers"][0]["securityContext"])
            return obj

        def privileged(_: Any, sc: dict[str, Any]) -> None:
            sc.pop("allowPrivilegeEscalation", None)  # false with privileged is invalid
            sc["privileged"] = True

        variants = {
            "hostNetwork is not allowed": lambda p, _: p.update(hostNetwork=True),
            "hostPID is not allowed": lambda p, _: p.update(hostPID=True),
            "hostPath volumes are not allowed": lambda p, c: p["volumes"].append(
                {"name": "host", "hostPath": {"path": "/"}}
            ),
            "privileged containers are not allowed": privileged,
            "no capability may be added but IPC_LOCK": lambda _, c: c["capabilities"].update(
                add=["IPC_LOCK", "SYS_ADMIN"]
            ),
            "run as the ServiceAccount jobs": lambda p, _: p.update(serviceAccountName="default"),
            "may not mount the token of the ServiceAccount jobs": lambda p, _: p.update(
                automountServiceAccountToken=True
            ),
        }
        for message, change in variants.items():
            got = _refusal(lambda c=change: _dry_run(admin, variant(c)))
            assert message in got and "ValidatingAdmissionPolicy" in got, (message, got)

        # --- what the member may do in the team's namespace ------------------------------
        code, out, err = as_member("status", "tn-a", "--json")
        assert code == 0, err
        assert json.loads(out)["admission"] == "admitted"
        workloads = member.items(kueue.API_VERSION, "Workload", NLP)
        assert len(workloads) == 1
        # the Workload: spec.active (suspend) is the member's; priority and queue are not
        wl_path = member.path(workloads[0])

        def wl_patch(client: Client, body: dict[str, Any]) -> Any:
            return client.request(
                "PATCH",
                wl_path,
                body,
                query={"dryRun": "All"},
                content_type="application/merge-patch+json",
            )

        assert wl_patch(member, {"spec": {"active": False}})["spec"]["active"] is False
        raised = {"spec": {"priority": 2147483647}}
        wait_for(
            "the workload policy in force",
            lambda: (
                team_admission.workload_message("priority")
                in _refusal(lambda: wl_patch(member, raised))
            ),
            timeout=TIMEOUT_S,
        )
        # queueName: on an admitted Workload the CRD's own rule refuses first (schema
        # validation runs before admission policies); the policy covers a pending one
        got = _refusal(lambda: wl_patch(member, {"spec": {"queueName": "elsewhere"}}))
        assert "queueName" in got and ("is immutable" in got or "may not change" in got), got
        # outside the team's group (as Kueue's controller is) the policy does not apply
        assert wl_patch(admin, raised)["spec"]["priority"] == 2147483647
        assert admin.read(workloads[0])["spec"].get("priority") != 2147483647
        assert member.items("v1", "Event", NLP)
        watch = member.collection_path(*PJ, NLP)
        member.request("GET", watch, query={"watch": "true", "timeoutSeconds": "1"})
        job_path = f"{watch}/tn-a"
        patch = {"metadata": {"annotations": {"eks-fsdp.io/checked-by": "alice"}}}
        member.request("PATCH", job_path, patch, content_type="application/merge-patch+json")
        assert admin.find(*PJ, "tn-a", NLP)["metadata"]["annotations"]["eks-fsdp.io/checked-by"]
        # the queue label stays: taking it off (or emptying it) is refused
        for value in (None, ""):
            unlabel = {"metadata": {"labels": {team_admission.QUEUE_LABEL: value}}}
            got = _refusal(
                lambda u=unlabel: member.request(
                    "PATCH", job_path, u, content_type="application/merge-patch+json"
                )
            )
            assert team_admission.QUEUE_MESSAGE in got, got
        assert admin.find(*PJ, "tn-a", NLP)["metadata"]["labels"][team_admission.QUEUE_LABEL]
        for verb in ("get", "list", "watch", "create", "patch", "delete"):
            assert _review(member, NLP, "kubeflow.org", "pytorchjobs", verb), verb
            assert _review(member, NLP, "trainer.kubeflow.org", "trainjobs", verb), verb
        assert _review(member, NLP, "", "pods/log", "get")
        assert not _review(member, NLP, "", "pods", "create")  # no bare pods outside a queue
        assert not _review(member, NLP, "", "secrets", "get")
        code, out, err = as_member("suspend", "tn-a")
        assert code == 0, err
        wait_for(
            "tn-a suspended",
            lambda: admin.find(*PJ, "tn-a", NLP)["spec"]["runPolicy"].get("suspend"),
            timeout=TIMEOUT_S,
        )
        code, out, err = as_member("cancel", "tn-a", "--purge")
        assert code == 0, err
        wait_for("tn-a deleted", lambda: admin.find(*PJ, "tn-a", NLP) is None, timeout=TIMEOUT_S)

        # --- and where the member may not go ---------------------------------------------
        for verb in ("get", "list", "create", "patch", "delete"):
            assert not _review(member, VISION, "kubeflow.org", "pytorchjobs", verb), verb
            assert not _review(member, VISION, "trainer.kubeflow.org", "trainjobs", verb), verb
        assert _status(lambda: member.items(*PJ, VISION)) == 403
        assert _status(lambda: pods(member, VISION)) == 403
        assert _status(lambda: member.items(kueue.API_VERSION, "Workload", VISION)) == 403
        for api_version, kind in (
            ("v1", "Node"),
            ("v1", "Namespace"),
            ("v1", "PersistentVolume"),
            (kueue.API_VERSION, "ClusterQueue"),
        ):
            assert _status(lambda a=api_version, k=kind: member.items(a, k)) == 403, kind
        cq = next(q for q in queues if q["kind"] == "ClusterQueue")
        stolen = {**cq, "metadata": {"name": f"{PREFIX}mine"}}
        assert _status(lambda: member.create(stolen)) == 403
        code, _, err = run(member_kubeconfig, *submit, "--team", VISION, "--name", "tn-b")
        assert code == 1 and "forbidden" in err and len(err.strip().splitlines()) == 1, err
        assert admin.find(*PJ, "tn-b", VISION) is None

        # --- a namespace without what the pods need: one line, nothing created -----------
        code, _, err = run(control_plane.kubeconfig, *submit, "--team", VISION, "--name", "tn-c")
        (line,) = err.strip().splitlines()
        assert code == 2 and line == (
            f"eks-fsdp jobs: error: team {VISION}: namespace {VISION} has no claim"
            f" '{DEFAULT_CHECKPOINT_CLAIM}' (checkpointClaim), Secret 'hf-token' (the hub"
            " model's token), which the job's pods need: claim"
            f" '{DEFAULT_CHECKPOINT_CLAIM}': `pulumi up` of stack {STACK} creates it in every"
            " team's namespace; Secret 'hf-token': set the stack's hfToken (`pulumi config set"
            f" --secret hfToken ...`) and `pulumi up` of stack {STACK} creates it in every"
            " team's namespace"
        ), line
        assert admin.find(*PJ, "tn-c", VISION) is None
        made = {c["metadata"]["name"] for c in admin.items("v1", "ConfigMap", VISION)}
        assert manifest.record_name("tn-c") not in made
        # a stack without shared storage: the claim a job file names is the team's to make
        code, _, err = run(
            control_plane.kubeconfig,
            "submit",
            DEV_JOB_FILE,
            "--team",
            DEV_TEAM,
            "--name",
            "tn-d",
            "--set",
            "checkpointClaim=team-scratch",
        )
        (line,) = err.strip().splitlines()
        assert code == 2 and line == (
            f"eks-fsdp jobs: error: team {DEV_TEAM}: namespace {DEV_TEAM} has no ServiceAccount"
            " 'jobs', claim 'team-scratch' (checkpointClaim), which the job's pods need:"
            " ServiceAccount 'jobs': `pulumi up` of stack dev creates it in every team's"
            f" namespace; claim 'team-scratch': create it in {DEV_TEAM}, or drop checkpointClaim"
        ), line
    finally:
        if admin.find(*PJ, "tn-a", NLP) is not None:
            run(control_plane.kubeconfig, "cancel", "tn-a", "--purge", "-n", NLP)
        delete_and_wait(admin, namespaced)
        for obj in reversed(queues):
            if obj["kind"] != "WorkloadPriorityClass":  # unprefixed: every test's
                admin.delete(obj)


def test_a_v1_job_with_one_worker_running_counts_as_ready_for_kueue(
    control_plane: ControlPlane,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """What docs/sharing.md says of v1 jobs: on a pool without a Topology (dev's g5 pool, no
    EFA) a 2-worker PyTorchJob with one node cordoned is admitted, one worker runs and the
    other stays Pending, and Kueue counts the job as ready (its Workload's ``PodsReady`` is
    True: Kueue reads the operator's ``Running`` condition, which training-operator v1.9.4
    sets once one worker runs), so ``waitForPodsReady`` neither evicts it nor holds back the
    next admission for it."""
    team_name, prefix = "th-half", "th-"
    root = tmp_path / "root"
    root.mkdir()
    shutil.copy(REPO / "Pulumi.yaml", root / "Pulumi.yaml")
    data = yaml.safe_load((REPO / "Pulumi.dev.yaml").read_text())
    data["config"]["eks-fsdp:teams"] = [
        {"name": team_name, "principalArns": [f"arn:aws:iam::123456789012:role/{team_name}"]}
    ]
    (root / "Pulumi.dev.yaml").write_text(yaml.safe_dump(data))
    monkeypatch.setattr(sources, "REPO_ROOT", root)
    cfg = load_stack_file("dev", root)
    (team,) = cfg.teams
    (group,) = cfg.gpu_node_groups
    admin = control_plane.client
    objs = [
        prefix_queues(o, prefix)
        for o in teams.objects(team, cfg)
        if o["metadata"].get("namespace") != kueue.JOBS_NAMESPACE
    ]
    queues = [
        prefix_queues(o, prefix)
        for o in kueue.cluster_objects(cfg)
        if o["metadata"].get("namespace") != kueue.JOBS_NAMESPACE
    ]
    local_queues = [o for o in objs if o["kind"] == "LocalQueue"]
    namespaced = [o for o in objs if o["kind"] != "LocalQueue"]
    namespaced.sort(key=lambda o: o["kind"] != "Namespace")
    nodes = sorted(
        (
            n
            for n in admin.items("v1", "Node")
            if n["metadata"]["labels"].get("eks.amazonaws.com/nodegroup") == group.name
        ),
        key=lambda n: n["metadata"]["name"],
    )
    assert len(nodes) == group.max_size == 2
    cordoned = nodes[1]["metadata"]["name"]

    def cordon(on: bool) -> None:
        admin.request(
            "PATCH",
            f"/api/v1/nodes/{cordoned}",
            {"spec": {"unschedulable": on or None}},
            content_type="application/merge-patch+json",
        )

    def run(*argv: str) -> tuple[int, str, str]:
        code = cli.main([*argv, "--kubeconfig", str(control_plane.kubeconfig)])
        out, err = capsys.readouterr()
        return code, out, err

    try:
        control_plane.apply_all([*namespaced, *queues, *local_queues])
        cordon(True)
        wait_for(
            "the team's LocalQueue Active",
            lambda: all(
                any(
                    c["type"] == "Active" and c["status"] == "True"
                    for c in admin.read(q).get("status", {}).get("conditions", [])
                )
                for q in [*queues, *local_queues]
                if q["kind"] in ("ClusterQueue", "LocalQueue")
            ),
            timeout=TIMEOUT_S,
        )
        code, _, err = run(
            "submit", DEV_JOB_FILE, "--image", IMAGE, "--team", team_name, "--name", "th-a"
        )
        assert code == 0, err

        def half_started() -> tuple[list[str], dict[str, Any]] | None:
            pods = admin.items("v1", "Pod", team_name)
            phases = sorted(p["status"].get("phase", "") for p in pods)
            workloads = admin.items(kueue.API_VERSION, "Workload", team_name)
            if phases != ["Pending", "Running"] or len(workloads) != 1:
                return None
            if condition(workloads[0], "PodsReady") != "True":
                return None
            return phases, workloads[0]

        try:
            _, workload = wait_for(
                "one worker running, one Pending, the Workload PodsReady",
                half_started,
                timeout=TIMEOUT_S,
            )
        except TimeoutError as err:
            seen = [
                (p["metadata"]["name"], p["status"].get("phase"), p["spec"].get("nodeName"))
                for p in admin.items("v1", "Pod", team_name)
            ]
            states = [
                w.get("status") for w in admin.items(kueue.API_VERSION, "Workload", team_name)
            ]
            raise AssertionError(f"{err}; pods: {seen}; workloads: {states}") from None
        assert condition(workload, "Admitted") == "True"
        job = admin.find(*PJ, "th-a", team_name)
        assert condition(job, "Running") == "True"
        (pending,) = [
            p for p in admin.items("v1", "Pod", team_name) if p["status"]["phase"] == "Pending"
        ]
        assert not pending["spec"].get("nodeName")  # nowhere to go: the other node is cordoned
    finally:
        cordon(False)
        if admin.find(*PJ, "th-a", team_name) is not None:
            run("cancel", "th-a", "--purge", "-n", team_name)
        delete_and_wait(admin, namespaced)
        for obj in reversed(queues):
            if obj["kind"] != "WorkloadPriorityClass":
                admin.delete(obj)
