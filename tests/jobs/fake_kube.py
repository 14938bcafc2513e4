"""A stand-in Kubernetes API server on loopback for the job CLI's client layer.

Not a cluster: it stores objects and answers the few REST calls ``jobs.cluster.backend`` makes with the
response shapes of the real API (upstream OpenAPI and API conventions): objects get ``uid``,
``resourceVersion`` and ``creationTimestamp``; errors are ``Status`` objects (``NotFound`` with
``details.kind``, ``AlreadyExists``, ``Forbidden``); a group it does not serve answers the
plain-text "404 page not found" of an unregistered API; lists honour ``labelSelector``
(``k=v``, ``k``, comma-joined); PATCH is a JSON merge patch; deleting an object
deletes what names it in ``ownerReferences`` (the garbage collector), and an object with
``metadata.finalizers`` only gets a ``deletionTimestamp`` (it stays until they are removed,
as the API server keeps it); pod logs and the pod proxy's ``/metrics`` return the texts a
test put there, and a log in ``broken_logs`` is cut off mid-body (the connection closes before
its announced length, as when a node or a proxy drops it). The PyTorchJob's ``status`` is what the
test writes, in the operator's shape (``conditions``, ``replicaStatuses``); a TrainJob's
likewise (Trainer v2's ``Complete``/``Failed``/``Suspended`` conditions): no controller runs.

With ``deferred_gc`` the garbage collector runs only when the test calls ``collect()``: the API
server answers a background-propagation DELETE once the owner is gone and the controller
manager's garbage collector removes the dependents asynchronously later
(``DeletePropagationBackground``, k8s.io/apimachinery ``pkg/apis/meta/v1/types.go``).

The service proxy (``services/<svc>:<port>/proxy/api/v1/query``) plays the cluster's
Prometheus when ``prometheus`` holds series (labels with ``__name__``, value): it answers the
one query shape ``jobs.cluster.metrics.promql`` sends, ``max by (__name__) ({matchers})`` with
``=`` and ``=~`` matchers, in the HTTP API's instant-vector format (``{"status": "success",
"data": {"resultType": "vector", "result": [{"metric": ..., "value": [t, "v"]}]}}``,
prometheus.io/docs/prometheus/latest/querying/api/); with ``prometheus`` None the Service does
not exist (404 NotFound, as the API server answers). Nothing here reaches beyond 127.0.0.1.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import re
import threading
import time
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlparse

import yaml

ROUTES = {
    ("apis/kubeflow.org/v1", "pytorchjobs"): ("kubeflow.org", "PyTorchJob"),
    ("api/v1", "configmaps"): ("", "ConfigMap"),
    ("api/v1", "pods"): ("", "Pod"),
    ("api/v1", "services"): ("", "Service"),
    ("apis/networking.k8s.io/v1", "networkpolicies"): ("networking.k8s.io", "NetworkPolicy"),
    ("apis/kueue.x-k8s.io/v1beta2", "workloads"): ("kueue.x-k8s.io", "Workload"),
    ("apis/trainer.kubeflow.org/v1alpha1", "trainjobs"): ("trainer.kubeflow.org", "TrainJob"),
    ("apis/resource.k8s.io/v1", "resourceclaimtemplates"): (
        "resource.k8s.io",
        "ResourceClaimTemplate",
    ),
}


def _matches(labels: dict[str, str], selector: str) -> bool:
    for term in filter(None, selector.split(",")):
        key, eq, value = term.partition("=")
        if eq and labels.get(key) != value:
            return False
        if not eq and key not in labels:
            return False
    return True


def _merge(target: Any, patch: Any) -> Any:
    """A JSON merge patch (RFC 7386, what ``application/merge-patch+json`` does): mappings
    merge recursively, ``null`` removes a key, anything else replaces."""
    if not isinstance(patch, dict):
        return patch
    out = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = _merge(out.get(key), value)
    return out


class FakeKube:
    """The server, its objects and the requests it saw."""

    def __init__(self) -> None:
        self.objects: dict[tuple[str, str, str], dict[str, Any]] = {}
        """(plural, namespace, name) -> object."""
        self.namespaces = {"default"}
        self.serve_kubeflow = True
        self.serve_trainer = True
        """Serve Trainer v2's TrainJob API (False: a cluster without ``trainerV2``)."""
        self.forbidden: set[str] = set()
        """Methods answered 403 (GET, POST, ...)."""
        self.logs: dict[str, str] = {}
        self.metrics: dict[str, str] = {}
        self.requests: list[tuple[str, str]] = []
        self.broken_logs: set[str] = set()
        """Pods whose log answer breaks off after its first half."""
        self.on_request: Any = None
        """Called with (method, path) before each request is answered (a test's clock)."""
        self.deferred_gc = False
        """Leave an owner's dependents in place until ``collect()`` (the asynchronous GC)."""
        self._garbage: list[str] = []
        """The uids of deleted owners whose dependents ``collect()`` removes."""
        self.prometheus: list[tuple[dict[str, str], float]] | None = None
        """The cluster Prometheus' series (None: no Prometheus Service)."""
        self.broken: dict[str, int] = {}
        """Resource (plural) -> the status every request on it gets (an InternalError ``Status``:
        an apiserver or a webhook failing)."""
        self._version = itertools.count(1)
        self._lock = threading.Lock()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                fake._handle(self, "GET")

            def do_POST(self) -> None:
                fake._handle(self, "POST")

            def do_DELETE(self) -> None:
                fake._handle(self, "DELETE")

            def do_PATCH(self) -> None:
                fake._handle(self, "PATCH")

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def start(self) -> FakeKube:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def kubeconfig(self, path: Path) -> Path:
        path.write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "clusters": [{"name": "fake", "cluster": {"server": self.url}}],
                    "users": [{"name": "fake", "user": {"token": "t"}}],
                    "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "fake"}}],
                    "current-context": "fake",
                }
            )
        )
        return path

    # -- state ----------------------------------------------------------------------------------
    def get(self, plural: str, name: str, namespace: str = "default") -> dict[str, Any] | None:
        return self.objects.get((plural, namespace, name))

    def of(self, plural: str, namespace: str = "default") -> list[dict[str, Any]]:
        return [o for (p, ns, _), o in self.objects.items() if p == plural and ns == namespace]

    def put(self, plural: str, obj: dict[str, Any]) -> dict[str, Any]:
        meta = obj.setdefault("metadata", {})
        meta.setdefault("namespace", "default")
        meta.setdefault("uid", str(uuid.uuid4()))
        meta.setdefault("creationTimestamp", time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
        meta["resourceVersion"] = str(next(self._version))
        self.objects[(plural, meta["namespace"], meta["name"])] = obj
        return obj

    def _delete(self, plural: str, namespace: str, name: str) -> dict[str, Any] | None:
        gone = self.objects.pop((plural, namespace, name), None)
        if gone is not None:  # the garbage collector: dependents go with their owner
            self._garbage.append(gone["metadata"]["uid"])
            if not self.deferred_gc:
                self.collect()
        return gone

    def collect(self) -> None:
        """One pass of the garbage collector: the dependents of every deleted owner."""
        while self._garbage:
            uid = self._garbage.pop()
            for key, obj in list(self.objects.items()):
                owners = obj["metadata"].get("ownerReferences") or []
                if any(o.get("uid") == uid for o in owners):
                    self._delete(*key)

    def _query(self, query: str) -> tuple[int, dict[str, Any]]:
        """Prometheus' answer to ``query`` (the one shape the job CLI sends)."""
        m = re.fullmatch(r"max by \(__name__\) \(\{(.*)\}\)", query)
        if m is None:
            return 400, {
                "status": "error",
                "errorType": "bad_data",
                "error": f"unsupported: {query}",
            }
        matchers = re.findall(r'(\w+)(=~|=)"([^"]*)"', m.group(1))
        best: dict[str, float] = {}
        for labels, value in self.prometheus or []:
            if all(
                re.fullmatch(want, labels.get(key, ""))
                if op == "=~"
                else labels.get(key, "") == want
                for key, op, want in matchers
            ):
                metric = labels["__name__"]
                best[metric] = max(value, best.get(metric, value))
        now = time.time()
        result = [{"metric": {"__name__": k}, "value": [now, repr(v)]} for k, v in best.items()]
        return 200, {"status": "success", "data": {"resultType": "vector", "result": result}}

    # -- HTTP -----------------------------------------------------------------------------------
    @staticmethod
    def _status(code: int, reason: str, message: str, **details: Any) -> dict[str, Any]:
        return {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": message,
            "reason": reason,
            "details": details,
            "code": code,
        }

    def _send(
        self, h: BaseHTTPRequestHandler, code: int, body: Any, ctype: str = "application/json"
    ) -> None:
        data = (
            body
            if isinstance(body, bytes)
            else (body.encode() if isinstance(body, str) else json.dumps(body).encode())
        )
        h.send_response(code)
        h.send_header("Content-Type", ctype)
        h.send_header("Content-Length", str(len(data)))
        h.end_headers()
        h.wfile.write(data)

    def _handle(self, h: BaseHTTPRequestHandler, method: str) -> None:
        url = urlparse(h.path)
        query = parse_qs(url.query)
        self.requests.append((method, url.path))
        if self.on_request is not None:
            with self._lock:
                self.on_request(method, url.path)
        length = int(h.headers.get("Content-Length") or 0)
        body = json.loads(h.rfile.read(length) or b"null") if length else None
        parts = [unquote(p) for p in url.path.strip("/").split("/")]
        if method in self.forbidden:
            resource = parts[5] if len(parts) > 5 else "resource"
            self._send(
                h,
                403,
                self._status(
                    403,
                    "Forbidden",
                    f'{resource} is forbidden: User "alice" cannot {method.lower()} resource '
                    f'"{resource}" in API group "" in the namespace "{parts[4] if len(parts) > 4 else ""}"',
                ),
            )
            return
        prefix = "/".join(parts[:2]) if parts[0] == "api" else "/".join(parts[:3])
        rest = parts[2:] if parts[0] == "api" else parts[3:]
        if (prefix == "apis/kubeflow.org/v1" and not self.serve_kubeflow) or (
            prefix == "apis/trainer.kubeflow.org/v1alpha1" and not self.serve_trainer
        ):
            self._send(h, 404, "404 page not found\n", "text/plain; charset=utf-8")
            return
        if len(rest) < 3 or rest[0] != "namespaces" or (prefix, rest[2]) not in ROUTES:
            self._send(h, 404, "404 page not found\n", "text/plain; charset=utf-8")
            return
        ns, plural = rest[1], rest[2]
        if plural in self.broken:
            code = self.broken[plural]
            self._send(h, code, self._status(code, "InternalError", f"{plural}: internal error"))
            return
        group, kind = ROUTES[(prefix, plural)]
        name = rest[3] if len(rest) > 3 else None
        sub = rest[4] if len(rest) > 4 else None
        with self._lock:
            if plural == "services" and name and sub == "proxy":  # the cluster's Prometheus
                if self.prometheus is None:
                    svc = name.split(":")[0]
                    self._send(
                        h,
                        404,
                        self._status(
                            404,
                            "NotFound",
                            f'services "{svc}" not found',
                            name=svc,
                            kind="services",
                        ),
                    )
                    return
                if rest[5:] != ["api", "v1", "query"]:
                    self._send(h, 404, "404 page not found\n", "text/plain; charset=utf-8")
                    return
                code, answer = self._query((query.get("query") or [""])[0])
                self._send(h, code, answer)
                return
            if name and ":" in name and sub == "proxy":  # pods/<pod>:<port>/proxy/metrics
                pod = name.split(":")[0]
                self._send(h, 200, self.metrics.get(pod, ""), "text/plain; version=0.0.4")
                return
            if sub == "log":
                if (plural, ns, name) not in self.objects:
                    self._send(
                        h,
                        404,
                        self._status(
                            404, "NotFound", f'pods "{name}" not found', name=name, kind="pods"
                        ),
                    )
                    return
                text = self.logs.get(str(name), "")
                tail = query.get("tailLines")
                if tail:
                    text = "".join(text.splitlines(keepends=True)[-int(tail[0]) :])
                if name in self.broken_logs:
                    data = text.encode()
                    h.send_response(200)
                    h.send_header("Content-Type", "text/plain")
                    h.send_header("Content-Length", str(len(data)))
                    h.end_headers()
                    h.wfile.write(data[: len(data) // 2])
                    h.wfile.flush()
                    h.close_connection = True
                    return
                self._send(h, 200, text, "text/plain")
                return
            if method == "POST":
                assert body is not None
                if ns not in self.namespaces:
                    self._send(
                        h,
                        404,
                        self._status(
                            404,
                            "NotFound",
                            f'namespaces "{ns}" not found',
                            name=ns,
                            kind="namespaces",
                        ),
                    )
                    return
                obj_name = body["metadata"]["name"]
                if (plural, ns, obj_name) in self.objects:
                    self._send(
                        h,
                        409,
                        self._status(
                            409,
                            "AlreadyExists",
                            f'{plural}.{group} "{obj_name}" already exists',
                            name=obj_name,
                            group=group,
                            kind=plural,
                        ),
                    )
                    return
                body["metadata"]["namespace"] = ns
                self._send(h, 201, self.put(plural, body))
                return
            if name is None:
                selector = (query.get("labelSelector") or [""])[0]
                items = [
                    o
                    for o in self.of(plural, ns)
                    if _matches(o["metadata"].get("labels") or {}, selector)
                ]
                api_version = f"{group}/v1" if group else "v1"
                self._send(
                    h,
                    200,
                    {
                        "apiVersion": api_version,
                        "kind": f"{kind}List",
                        "metadata": {"resourceVersion": "1"},
                        "items": items,
                    },
                )
                return
            found = self.objects.get((plural, ns, name))
            if found is None:
                self._send(
                    h,
                    404,
                    self._status(
                        404,
                        "NotFound",
                        f'{plural}{"." + group if group else ""} "{name}" not found',
                        name=name,
                        group=group,
                        kind=plural,
                    ),
                )
                return
            if method == "GET":
                self._send(h, 200, found)
            elif method == "DELETE":
                if found["metadata"].get("finalizers"):
                    found["metadata"].setdefault(
                        "deletionTimestamp", time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
                    )
                else:
                    self._delete(plural, ns, name)
                self._send(
                    h,
                    200,
                    {
                        "kind": "Status",
                        "apiVersion": "v1",
                        "metadata": {},
                        "status": "Success",
                        "details": {
                            "name": name,
                            "group": group,
                            "kind": plural,
                            "uid": found["metadata"]["uid"],
                        },
                    },
                )
            elif method == "PATCH":
                self._send(h, 200, self.put(plural, _merge(found, body or {})))


def run_cli(capsys: Any, *argv: str) -> tuple[int, str, str]:
    """``eks-fsdp jobs ARGV`` in this process: exit status, stdout, stderr (``capsys``)."""
    from jobs import cli

    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@contextlib.contextmanager
def served(tmp_path: Path) -> Iterator[tuple[FakeKube, str]]:
    """A started ``FakeKube`` and the path of a kubeconfig naming it; stopped afterwards."""
    fake = FakeKube().start()
    try:
        yield fake, str(fake.kubeconfig(tmp_path / "kubeconfig"))
    finally:
        fake.stop()
