"""A small Kubernetes REST client on the standard library (``http.client`` + ``ssl``).

Enough for the control plane and its tests: get, list, create, delete, server-side apply (with
dry-run) and the REST path of any object, from API discovery. Mutual TLS with the admin
client certificate; the server is verified against the cluster CA.
"""

from __future__ import annotations

import http.client
import json
import ssl
import time
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")


class ApiError(RuntimeError):
    """A non-2xx answer; ``status`` and the Status object's ``reason`` and ``message``."""

    def __init__(self, status: int, body: dict[str, Any] | str, what: str) -> None:
        self.status = status
        self.body = body
        reason = body.get("reason", "") if isinstance(body, dict) else ""
        message = body.get("message", "") if isinstance(body, dict) else str(body)[:500]
        self.reason = reason
        super().__init__(f"{what}: {status} {reason}: {message}")


@dataclass(frozen=True)
class Resource:
    """One API resource from discovery."""

    group_version: str
    name: str
    """Plural resource name (``pods``)."""
    namespaced: bool


class Client:
    """A client for one API server (``https://127.0.0.1:PORT``)."""

    def __init__(self, server: str, ca: Path, cert: Path, key: Path, *, timeout: float = 30):
        url = urllib.parse.urlsplit(server)
        self.host = url.hostname or "127.0.0.1"
        self.port = url.port or 443
        self.timeout = timeout
        self._ctx = ssl.create_default_context(cafile=str(ca))
        self._ctx.load_cert_chain(str(cert), str(key))
        self._resources: dict[tuple[str, str], Resource] = {}

    # --- raw requests ------------------------------------------------------------------------
    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        query: dict[str, str] | None = None,
        content_type: str = "application/json",
    ) -> Any:
        """One request; the decoded JSON answer (``ApiError`` on a non-2xx status)."""
        if query:
            path = f"{path}?{urllib.parse.urlencode(query)}"
        conn = http.client.HTTPSConnection(
            self.host, self.port, context=self._ctx, timeout=self.timeout
        )
        try:
            data = None if body is None else json.dumps(body).encode()
            headers = {"Accept": "application/json"}
            if data is not None:
                headers["Content-Type"] = content_type
            conn.request(method, path, body=data, headers=headers)
            resp = conn.getresponse()
            raw = resp.read().decode()
        finally:
            conn.close()
        try:
            decoded: Any = json.loads(raw) if raw else {}
        except json.JSONDecodeError:
            decoded = raw
        if not 200 <= resp.status < 300:
            raise ApiError(resp.status, decoded, f"{method} {path}")
        return decoded

    def get(self, path: str, **query: str) -> Any:
        return self.request("GET", path, query=query or None)

    def ready(self) -> bool:
        """``/readyz`` answers ok."""
        try:
            conn = http.client.HTTPSConnection(self.host, self.port, context=self._ctx, timeout=5)
            conn.request("GET", "/readyz")
            resp = conn.getresponse()
            ok = resp.status == 200 and resp.read().strip() == b"ok"
            conn.close()
            return ok
        except OSError:
            return False

    # --- discovery and paths -----------------------------------------------------------------
    def resource(self, api_version: str, kind: str) -> Resource:
        """The resource serving ``kind`` in ``api_version`` (discovery, cached)."""
        key = (api_version, kind)
        if key not in self._resources:
            base = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
            for r in self.get(base).get("resources", []):
                if "/" in r["name"]:
                    continue
                self._resources[(api_version, r["kind"])] = Resource(
                    api_version, r["name"], bool(r["namespaced"])
                )
        try:
            return self._resources[key]
        except KeyError:
            raise ApiError(404, f"no kind {kind} in {api_version}", "discovery") from None

    def forget_discovery(self) -> None:
        """Drop cached discovery (after CRDs were installed)."""
        self._resources.clear()

    def collection_path(self, api_version: str, kind: str, namespace: str | None = None) -> str:
        r = self.resource(api_version, kind)
        base = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
        if r.namespaced:
            return f"{base}/namespaces/{namespace or 'default'}/{r.name}"
        return f"{base}/{r.name}"

    def path(self, obj: dict[str, Any]) -> str:
        """The REST path of ``obj`` (its apiVersion, kind, namespace and name)."""
        meta = obj.get("metadata", {})
        coll = self.collection_path(obj["apiVersion"], obj["kind"], meta.get("namespace"))
        return f"{coll}/{meta['name']}"

    # --- verbs -------------------------------------------------------------------------------
    def read(self, obj: dict[str, Any]) -> Any:
        return self.get(self.path(obj))

    def find(self, api_version: str, kind: str, name: str, namespace: str | None = None) -> Any:
        """The object, or None when it does not exist."""
        try:
            return self.get(f"{self.collection_path(api_version, kind, namespace)}/{name}")
        except ApiError as err:
            if err.status == 404:
                return None
            raise

    def items(
        self, api_version: str, kind: str, namespace: str | None = None, **query: str
    ) -> list[dict[str, Any]]:
        """The objects of a list, each with its ``apiVersion`` and ``kind`` (a list's items
        come without them)."""
        items = self.get(self.collection_path(api_version, kind, namespace), **query)
        out = list(items.get("items") or [])
        for item in out:
            item.setdefault("apiVersion", api_version)
            item.setdefault("kind", kind)
        return out

    def create(self, obj: dict[str, Any]) -> Any:
        meta = obj.get("metadata", {})
        path = self.collection_path(obj["apiVersion"], obj["kind"], meta.get("namespace"))
        return self.request("POST", path, obj)

    def apply(
        self,
        obj: dict[str, Any],
        *,
        field_manager: str = "eks-fsdp",
        dry_run: bool = False,
        force: bool = False,
    ) -> Any:
        """Server-side apply (``PATCH`` with ``application/apply-patch+yaml``; JSON is YAML)."""
        query = {"fieldManager": field_manager}
        if dry_run:
            query["dryRun"] = "All"
        if force:
            query["force"] = "true"
        return self.request(
            "PATCH", self.path(obj), obj, query=query, content_type="application/apply-patch+yaml"
        )

    def replace_status(self, obj: dict[str, Any]) -> Any:
        return self.request("PUT", f"{self.path(obj)}/status", obj)

    def delete(self, obj: dict[str, Any], *, missing_ok: bool = True) -> None:
        try:
            self.request("DELETE", self.path(obj))
        except ApiError as err:
            if not (missing_ok and err.status == 404):
                raise


def wait_for(
    what: str, probe: Callable[[], T | None], *, timeout: float, interval: float = 0.25
) -> T:
    """Poll ``probe`` until it returns something truthy; ``TimeoutError`` naming ``what``."""
    deadline = time.monotonic() + timeout
    last: Exception | None = None
    while True:
        try:
            value = probe()
            if value:
                return value
        except (ApiError, OSError) as err:
            last = err
        if time.monotonic() > deadline:
            detail = f" (last error: {last})" if last else ""
            raise TimeoutError(f"{what}: not after {timeout:.0f} s{detail}")
        time.sleep(interval)
