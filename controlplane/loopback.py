"""Timing-independent checks that the control plane dials nothing outside 127.0.0.0/8.

``procs.LoopbackWatch`` samples sockets, so a connect that fails within a sampling interval,
or a DNS query, can slip between two samples. These checks do not depend on timing:

- ``service_references``: every place where the API server would dial a Service's cluster
  IP names none. Admission webhooks (``Validating``/``MutatingWebhookConfiguration``
  ``webhooks[].clientConfig``), CRD conversion webhooks
  (``spec.conversion.webhook.clientConfig``) and aggregated APIs (``apiregistration.k8s.io/v1``
  ``APIService``: ``spec.service`` is null for the API server's own groups) are the three
  kinds of object the API server dials by ``clientConfig.service``/``spec.service``;
- ``node_address_problems``: the API server reaches a node's kubelet (pods/log, exec,
  port-forward) at its ``InternalIP`` only (``cluster.KUBELET_ADDRESS_TYPES``), which must
  be ``nodes.NODE_IP``, 127.0.0.1; an ``ExternalIP`` or ``InternalDNS``/``ExternalDNS``
  address is refused too. A ``Hostname`` address is allowed: the API server never uses one;
- ``log_violations``: the components' logs name every dial that failed (Go's
  ``dial tcp <addr>: …``) and every name lookup (``lookup <name> on <server>: …``); a dial to a
  non-loopback address, or a lookup of any name but ``localhost``, fails the check, naming
  the line.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from controlplane.client import Client
from controlplane.nodes import NODE_IP

_DIAL = re.compile(r"\bdial (?:tcp|udp)[46]? (\[[0-9A-Fa-f:.%\w]+\]|[^\s\[\]:\"\\]+):\d+")
"""Go's ``net.OpError`` text for a dial: ``dial tcp 10.96.0.1:443: i/o timeout``."""
_LOOKUP = re.compile(r"\blookup ([^\s:\"\\]+)(?: on [^\s\"\\]+)?: ")
"""Go's ``net.DNSError`` text: ``lookup p5-block-3 on 10.0.0.2:53: no such host``."""
_LOOPBACK_NAMES = frozenset({"localhost"})
"""Names resolved from ``/etc/hosts`` (no DNS query); any other lookup counts."""


def _is_loopback_host(host: str) -> bool:
    host = host.strip("[]").split("%")[0]
    if host.lower() in _LOOPBACK_NAMES:
        return True
    try:
        addr = ipaddress.ip_address(host)
    except ValueError:
        return False
    if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped is not None:
        addr = addr.ipv4_mapped
    return addr.is_loopback


def log_line_violations(line: str) -> list[str]:
    """The dials and lookups ``line`` reports that leave loopback (empty: none)."""
    out = [f"dial {m.group(1)}" for m in _DIAL.finditer(line) if not _is_loopback_host(m.group(1))]
    out += [
        f"lookup {m.group(1)}"
        for m in _LOOKUP.finditer(line)
        if m.group(1).lower() not in _LOOPBACK_NAMES and not _is_loopback_host(m.group(1))
    ]
    return out


def log_violations(logs: Iterable[Path], *, limit: int = 20) -> list[str]:
    """``<log>:<line number>: <what> | <the line>`` for each offending line of ``logs`` (at most
    ``limit``)."""
    out: list[str] = []
    for log in logs:
        try:
            text = log.read_text(errors="replace")
        except OSError:
            continue
        for number, line in enumerate(text.splitlines(), 1):
            found = log_line_violations(line)
            if found:
                out.append(f"{log.name}:{number}: {', '.join(found)} | {line.strip()[:300]}")
                if len(out) >= limit:
                    return out
    return out


def _client_config_problem(where: str, client_config: dict[str, Any] | None) -> str | None:
    if not client_config:
        return None
    if client_config.get("service") is not None:
        return f"{where}: clientConfig.service {client_config['service']}"
    url = str(client_config.get("url", ""))
    host = re.sub(r"^https?://", "", url).split("/")[0].rsplit(":", 1)[0]
    if not _is_loopback_host(host):
        return f"{where}: clientConfig.url {url}"
    return None


def service_references(client: Client) -> list[str]:
    """Every webhook, conversion webhook or APIService that the API server would dial
    anywhere but 127.0.0.1 (a ``service`` reference, or a URL off loopback)."""
    out = []
    for kind in ("ValidatingWebhookConfiguration", "MutatingWebhookConfiguration"):
        for obj in client.items("admissionregistration.k8s.io/v1", kind):
            for hook in obj.get("webhooks") or []:
                where = f"{kind} {obj['metadata']['name']} webhook {hook.get('name')}"
                problem = _client_config_problem(where, hook.get("clientConfig"))
                if problem:
                    out.append(problem)
    for crd in client.items("apiextensions.k8s.io/v1", "CustomResourceDefinition"):
        conversion = crd.get("spec", {}).get("conversion") or {}
        where = f"CustomResourceDefinition {crd['metadata']['name']} conversion webhook"
        problem = _client_config_problem(
            where, (conversion.get("webhook") or {}).get("clientConfig")
        )
        if problem:
            out.append(problem)
    for api in client.items("apiregistration.k8s.io/v1", "APIService"):
        service = (api.get("spec") or {}).get("service")
        if service is not None:
            out.append(f"APIService {api['metadata']['name']}: spec.service {service}")
    return out


def node_address_problems(client: Client) -> list[str]:
    """Node addresses the API server could dial off loopback (see the module's docstring)."""
    out = []
    for node in client.items("v1", "Node"):
        name = node["metadata"]["name"]
        addresses = node.get("status", {}).get("addresses") or []
        if not any(a.get("type") == "InternalIP" for a in addresses):
            out.append(f"Node {name}: no InternalIP address")
        for a in addresses:
            kind, value = a.get("type"), a.get("address", "")
            if kind == "Hostname":
                continue
            if kind != "InternalIP" or value != NODE_IP:
                out.append(f"Node {name}: {kind} {value}")
    return out


def api_violations(client: Client) -> list[str]:
    """``service_references`` and ``node_address_problems`` together."""
    return service_references(client) + node_address_problems(client)
