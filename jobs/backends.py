"""The one place a backend is chosen: ``--local`` runs jobs on this machine (``jobs.local.backend``),
anything else talks to a cluster's API (``jobs.cluster.backend``) through ``--kubeconfig``,
``--stack`` (its kubeconfig output) or the default kubeconfig, in ``-n NAMESPACE``, else the
stack's ``jobsNamespace`` output (with ``--stack``), else ``default``."""

from __future__ import annotations

import shlex

from jobs.types import Backend, JobsError


def choose(
    *,
    local: bool,
    kubeconfig: str | None = None,
    stack: str | None = None,
    namespace: str | None = None,
) -> Backend:
    """The backend the flags ask for."""
    if local:
        if kubeconfig:
            raise JobsError("--local runs jobs on this machine: drop --kubeconfig", status=2)
        from jobs.local.backend import LocalBackend

        return LocalBackend()
    from jobs.cluster.backend import ClusterBackend
    from jobs.cluster.kube import api_client, jobs_namespace

    api = api_client(kubeconfig, stack)
    if not namespace:  # -n, else the stack's jobsNamespace output, else "default"
        namespace = jobs_namespace(stack) if stack else "default"
    connection = (
        f"--kubeconfig {shlex.quote(kubeconfig)}"
        if kubeconfig
        else f"--stack {stack}"
        if stack
        else ""
    )
    return ClusterBackend(api, namespace=namespace, stack=stack, connection=connection)
