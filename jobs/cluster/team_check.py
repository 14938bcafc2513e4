"""Before a team's job is created: does the team's namespace hold what its pods use?

A pod whose claim, ServiceAccount or required Secret is missing is never scheduled or never
starts, and Kueue would have admitted the job and held its quota meanwhile. The stack creates
them in every team's namespace (``workloads.team``): the ServiceAccount ``jobs``, on fsx
stacks the checkpoint claim, on stacks with ``hfToken`` the Secret ``hf-token``. A claim a job
file names itself (``checkpointClaim`` on a stack without shared storage) is the team's to
create. So ``eks-fsdp jobs submit --team T`` reads them first and refuses in one line naming
each missing object and its fix, before it creates anything.

Only what the pods cannot start without is checked: the claim (mounted), the ServiceAccount
(the API server refuses a pod naming a missing one), the token Secret when the model comes
from the hub (``workloads.specs.pytorchjob``: a required ``secretKeyRef`` then); the
capacity-block ConfigMap is ``optional``. A read the caller may not make (403: a member has no
access to Secrets, by design) or a resource the server does not serve is not a finding: the
object may exist.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from jobs.cluster.kube import api_errors, object_not_found
from jobs.cluster.kube import raw as _raw
from jobs.schema import JobSpec
from jobs.types import JobsError
from workloads.specs import pytorchjob as pj
from workloads.specs.settings import JobSettings
from workloads.specs.teams import HF_TOKEN_SECRET, SERVICE_ACCOUNT


@dataclass(frozen=True)
class Missing:
    """An object the job's pods need that the namespace lacks."""

    what: str
    """``ServiceAccount 'jobs'``."""
    fix: str
    """What creates it."""
    why: str = ""
    """Which key of the job names it (``checkpointClaim``), if one does."""

    def __str__(self) -> str:
        return f"{self.what} ({self.why})" if self.why else self.what


def _exists(api: Any, read: Any, what: str, name: str, namespace: str) -> bool | None:
    """True or False; None when it cannot be told: the caller may not read it (403), or the
    server does not serve the resource (a plain 404, not a ``NotFound`` Status)."""
    from kubernetes.client.exceptions import ApiException

    with api_errors(api, f"get {what} {name} in {namespace}"):
        try:
            _raw(read, name, namespace)
        except ApiException as err:
            if object_not_found(err):
                return False
            if err.status in (403, 404):
                return None
            raise
    return True


def missing(backend: Any, job: JobSpec, s: JobSettings) -> list[Missing]:
    """What the team's namespace lacks for ``job`` built as ``s`` (the settings its objects are
    made from; empty for a job without a team)."""
    if job.queue is None or job.queue.team is None:
        return []
    ns, stack = s.namespace, job.stack
    up = f"`pulumi up` of stack {stack} creates it in every team's namespace"
    api, core = backend.api, backend.core
    out: list[Missing] = []
    sa = SERVICE_ACCOUNT
    if _exists(api, core.read_namespaced_service_account, "serviceaccount", sa, ns) is False:
        out.append(Missing(f"ServiceAccount {sa!r}", up))
    claim = s.checkpoint_claim
    pvc = core.read_namespaced_persistent_volume_claim
    if claim and _exists(api, pvc, "persistentvolumeclaim", claim, ns) is False:
        from infra.config import DEFAULT_CHECKPOINT_CLAIM

        stack_made = job.platform.shared_storage.is_fsx and claim == DEFAULT_CHECKPOINT_CLAIM
        fix = up if stack_made else f"create it in {ns}, or drop checkpointClaim"
        out.append(Missing(f"claim {claim!r}", fix, "checkpointClaim"))
    secret = s.hf_token_secret
    if (
        secret
        and pj.needs_token(pj.model_name(s))
        and _exists(api, core.read_namespaced_secret, "secret", secret, ns) is False
    ):
        fix = (
            f"set the stack's hfToken (`pulumi config set --secret hfToken ...`) and {up}"
            if secret == HF_TOKEN_SECRET
            else f"create it in {ns} with key token"
        )
        out.append(Missing(f"Secret {secret!r}", fix, "the hub model's token"))
    return out


def check(backend: Any, job: JobSpec, settings: JobSettings) -> None:
    """Refuse ``job`` (``JobsError``, one line) when its team's namespace lacks what its pods
    need (``missing``)."""
    found = missing(backend, job, settings)
    if not found:
        return
    team = job.queue.team if job.queue is not None else None
    what = ", ".join(map(str, found))
    fixes = "; ".join(dict.fromkeys(f"{m.what}: {m.fix}" for m in found))
    raise JobsError(
        f"team {team}: namespace {job.namespace} has no {what}, which the job's pods need: {fixes}",
        status=2,
    )
