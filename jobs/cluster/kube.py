"""The Kubernetes API client of the cluster backend (the official ``kubernetes`` package) and
what can go wrong reaching it, each as one line with the fix.

The kubeconfig comes from ``--kubeconfig PATH``, from a cluster stack's ``kubeconfig`` output
(``--stack STACK``: ``pulumi stack output kubeconfig --show-secrets``, the Pulumi CLI in a
child process, so this package imports no Pulumi), or from ``$KUBECONFIG`` /
``~/.kube/config`` as kubectl reads it. No retries: an unreachable API server is reported
after one connection timeout, not after urllib3's three.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import subprocess
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from eks_fsdp_cli.paths import REPO_ROOT
from jobs.types import JobsError

TIMEOUT = (5.0, 60.0)
"""(connect, read) seconds of one API request (``_request_timeout``)."""
KUBECONFIG_OUTPUT = "kubeconfig"
"""The cluster stack's kubeconfig output (``infra.outputs.KUBECONFIG``; a test checks)."""
JOBS_NAMESPACE_OUTPUT = "jobsNamespace"
"""The stack's output naming the jobs' namespace (``workloads.program.OUTPUT_JOBS_NAMESPACE``;
a test checks)."""


INSTEAD = {
    KUBECONFIG_OUTPUT: "pass --kubeconfig PATH (pulumi stack output kubeconfig --show-secrets > "
    "kubeconfig where the CLI is)",
    JOBS_NAMESPACE_OUTPUT: "pass --namespace NS (the stack's jobsNamespace output: "
    "pulumi stack output jobsNamespace where the CLI is; default for the shipped stacks)",
    "trainingImage": "pass --image IMAGE (pulumi stack output trainingImage where the CLI is)",
}
"""The flag that replaces each stack output when no pulumi CLI can read it: with both
``--stack`` and ``--kubeconfig`` the namespace is the output still read."""


def stack_output(stack: str, key: str, *, secret: bool = False) -> Any:
    """``pulumi stack output KEY --stack STACK`` (JSON), or ``JobsError`` saying why not."""
    if shutil.which("pulumi") is None:
        instead = INSTEAD.get(key, "pass the value it stands for")
        raise JobsError(
            f"--stack {stack}: no pulumi CLI here to read its {key} output: {instead}",
            status=2,
        )
    cmd = ["pulumi", "stack", "output", key, "--json", "--stack", stack]
    if secret:
        cmd.append("--show-secrets")
    try:
        out = subprocess.run(
            cmd, cwd=REPO_ROOT, capture_output=True, text=True, timeout=120, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as err:
        raise JobsError(f"--stack {stack}: pulumi stack output {key}: {err}") from None
    if out.returncode != 0:
        last = (out.stderr.strip().splitlines() or ["no output"])[-1]
        raise JobsError(f"--stack {stack}: pulumi stack output {key} failed: {last}")
    try:
        value = json.loads(out.stdout)
    except json.JSONDecodeError:
        value = out.stdout.strip()
    if isinstance(value, str) and key == KUBECONFIG_OUTPUT:
        with contextlib.suppress(json.JSONDecodeError):
            value = json.loads(value)
    return value


def api_client(
    kubeconfig: str | None = None,
    stack: str | None = None,
    config_dict: Mapping[str, Any] | None = None,
) -> Any:
    """A ``kubernetes.client.ApiClient`` for ``--kubeconfig``, ``--stack``, a kubeconfig
    already read (``config_dict``: a stack's output) or the default kubeconfig, with retries
    off."""
    from kubernetes import client, config

    cfg = client.Configuration()
    try:
        if config_dict is not None:
            config.load_kube_config_from_dict(dict(config_dict), client_configuration=cfg)
        elif kubeconfig:
            if not Path(kubeconfig).is_file():
                raise JobsError(f"--kubeconfig {kubeconfig}: no such file", status=2)
            config.load_kube_config(config_file=kubeconfig, client_configuration=cfg)
        elif stack:
            data = stack_output(stack, KUBECONFIG_OUTPUT, secret=True)
            if not isinstance(data, Mapping):
                raise JobsError(f"--stack {stack}: its kubeconfig output is not a kubeconfig")
            config.load_kube_config_from_dict(dict(data), client_configuration=cfg)
        else:
            config.load_kube_config(client_configuration=cfg)
    except config.ConfigException as err:
        where = (
            f"--kubeconfig {kubeconfig}"
            if kubeconfig
            else (f"--stack {stack}" if stack else "no cluster")
        )
        first = str(err).strip().splitlines()[0] if str(err).strip() else "invalid kubeconfig"
        raise JobsError(
            f"{where}: {first}: pass --kubeconfig PATH or --stack STACK, or --local to run on "
            "this machine",
            status=2,
        ) from None
    cfg.retries = False
    return client.ApiClient(cfg)


def jobs_namespace(stack: str) -> str:
    """The namespace a cluster stack prepared for jobs (its ``jobsNamespace`` output)."""
    value = stack_output(stack, JOBS_NAMESPACE_OUTPUT)
    if not isinstance(value, str) or not value:
        raise JobsError(f"--stack {stack}: its {JOBS_NAMESPACE_OUTPUT} output is not a namespace")
    return value


def server(api: Any) -> str:
    return str(api.configuration.host)


def _message(err: Any) -> str:
    try:
        body = json.loads(err.body or "{}")
    except (TypeError, ValueError):
        body = {}
    # an admission webhook's message may span lines (the operator's lists its field errors):
    # the error stays one line
    return " ".join(str(body.get("message") or err.reason or "").split())


def _details(err: Any) -> dict[str, Any]:
    try:
        body = json.loads(err.body or "{}")
    except (TypeError, ValueError):
        return {}
    details = body.get("details") if isinstance(body, dict) else None
    return details if isinstance(details, dict) else {}


@contextlib.contextmanager
def api_errors(
    api: Any, what: str, not_found: str | None = None, *, conflict: str | None = None
) -> Iterator[None]:
    """Turn the client's exceptions into one ``JobsError`` line: ``what`` is the request
    (``create pytorchjob x``), ``not_found`` what a 404 means, ``conflict`` what a 409 does
    (AlreadyExists: on a create, an object of the name that another check did not see, such as
    one whose deletion is still in progress)."""
    import urllib3
    from kubernetes.client.exceptions import ApiException

    try:
        yield
    except ApiException as err:
        message = _message(err)
        if err.status == 401:
            raise JobsError(
                f"{what}: unauthorized at {server(api)}: the kubeconfig's credentials were "
                "refused (expired token? refresh the kubeconfig)"
            ) from None
        if err.status == 403:
            raise JobsError(
                f"{what}: forbidden: {message} (ask for the role, or use another --kubeconfig)"
            ) from None
        details = _details(err)
        if err.status == 404 and details.get("kind") == "namespaces":
            raise JobsError(
                f"{what}: namespace {details.get('name')!r} not found: set the job file's "
                "namespace to the stack's jobsNamespace output (default)"
            ) from None
        if err.status == 404 and not_found:
            raise JobsError(f"{what}: {not_found}") from None
        if err.status == 409 and conflict:
            raise JobsError(f"{what}: {message or err.reason}: {conflict}") from None
        raise JobsError(f"{what}: {err.status} {err.reason}: {message}") from None
    except (urllib3.exceptions.HTTPError, OSError) as err:
        reason = getattr(err, "reason", None) or err
        raise JobsError(
            f"{what}: API server unreachable at {server(api)}: {str(reason).splitlines()[0]} "
            "(is the cluster up? check --kubeconfig / --stack)"
        ) from None


def object_not_found(err: Exception) -> bool:
    """A 404 about an object (a ``Status`` with reason NotFound), not about a missing API
    (the plain-text "404 page not found" of a resource the server does not serve)."""
    if getattr(err, "status", None) != 404:
        return False
    try:
        body = json.loads(getattr(err, "body", None) or "{}")
    except (TypeError, ValueError):
        return False
    return isinstance(body, dict) and body.get("reason") == "NotFound" and "details" in body


STILL_DELETING = (
    "a job of this name is still being deleted (a cancel in progress): wait a few seconds "
    "until `eks-fsdp jobs list` no longer shows it running, then try again"
)
"""What a create that meets a job still being deleted says (PyTorchJobs and TrainJobs)."""


def raw(call: Callable[..., Any], *args: Any, text: bool = False, **kwargs: Any) -> Any:
    """One API call with its JSON answer as plain data (or its text): the typed models of the
    client validate fields client-side and drop the ones they do not know, which would make a
    newer API server's answer fail here."""
    resp = call(*args, _preload_content=False, _request_timeout=TIMEOUT, **kwargs)
    data = resp.data.decode() if resp.data else ""
    if text:
        return data
    return json.loads(data) if data else None


def delete_object(
    api: Any, custom: Any, coordinates: tuple[str, str, str], namespace: str, name: str
) -> bool:
    """Delete custom object ``name`` (``coordinates``: group, version, plural) in the background
    (the garbage collector takes what it owns); False when it was already gone."""
    group, version, plural = coordinates
    with api_errors(api, f"delete {plural.removesuffix('s')} {name}"):
        try:
            raw(
                custom.delete_namespaced_custom_object,
                group,
                version,
                namespace,
                plural,
                name,
                propagation_policy="Background",
            )
        except Exception as err:
            if object_not_found(err):
                return False
            raise
    return True
