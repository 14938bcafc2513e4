"""A cluster job's progress gauges (``eksfsdp_*``): from the cluster's Prometheus through the
API server's service proxy, else from a worker's exporter through the pod proxy.

Why Prometheus first: the cluster stack enforces NetworkPolicies (``infra/cluster.py``: the
VPC CNI add-on with ``enable_network_policy``), and the workers' policy (``<name>-workers``)
admits only the job's own pods and the metrics namespace. A pod-proxy request comes from the
API server, on EKS from the control plane's ENIs, which no pod or namespace selector matches
(aws/aws-network-policy-agent#281), so it never reaches the worker. Prometheus scrapes the
workers from the metrics namespace, which the policy admits, and its own Service is reachable
through the service proxy (``/api/v1/namespaces/<ns>/services/<svc>:<port>/proxy/<path>``).

The request is built with ``ApiClient.call_api`` and the fixed path ``.../proxy/api/v1/query``:
``CoreV1Api.connect_get_namespaced_service_proxy_with_path`` (kubernetes client 35.0.0)
percent-encodes its ``path`` argument whole (``safe_chars_for_path_param = ''``), so a query
string cannot be passed through it (its ``path2`` is the proxy's ``?path=`` parameter; the same
trap in kubernetes-client/javascript#550).

The pod proxy stays the fallback where no Prometheus answers (a cluster without the
observability stack, or a control plane whose network enforces no policy, as the local one in
``tests/controlplane``).
"""

from __future__ import annotations

import json
from typing import Any

from jobs.progress import GAUGES, exporter_values

PROMETHEUS_PORT = 9090
"""kube-prometheus-stack's Prometheus Service port (chart values ``prometheus.service.port``;
the stack's docs port-forward ``svc/kps-prometheus 9090:9090``)."""
TIMEOUT = (5.0, 5.0)
"""(connect, read) seconds of a metrics request: progress is a nicety, ``status`` must not
hang on it."""
QUERY_PATH = "/api/v1/namespaces/{namespace}/services/{name}/proxy/api/v1/query"
"""Prometheus' instant query (HTTP API ``GET /api/v1/query?query=``) through the service
proxy."""


def promql(job: str, namespace: str) -> str:
    """One instant query for every gauge of job ``job``: the series of all its pods (the scrape
    job's ``training_job`` and ``namespace`` labels, ``workloads.specs.prometheus_files``)
    folded per gauge by ``max`` (the values are the job's, the same on each pod)."""
    names = "|".join(g.removeprefix("eksfsdp_") for g in GAUGES)
    selector = f'__name__=~"eksfsdp_({names})",training_job="{job}",namespace="{namespace}"'
    return f"max by (__name__) ({{{selector}}})"


def prometheus_values(
    api: Any, job: str, namespace: str, *, metrics_namespace: str, service: str
) -> dict[str, float] | None:
    """The job's gauges from the cluster's Prometheus; ``None`` when no Prometheus answers
    (no such Service or no endpoints, forbidden, unreachable, not Prometheus' answer), ``{}``
    when it answers without the job's series (not scraped yet)."""
    try:
        resp = api.call_api(
            QUERY_PATH,
            "GET",
            path_params={"namespace": metrics_namespace, "name": f"{service}:{PROMETHEUS_PORT}"},
            query_params=[("query", promql(job, namespace))],
            header_params={"Accept": "application/json"},
            auth_settings=["BearerToken"],
            _return_http_data_only=True,
            _preload_content=False,
            _request_timeout=TIMEOUT,
        )
        body = json.loads(resp.data or b"{}")
        if body.get("status") != "success":
            return None
        values: dict[str, float] = {}
        for series in body["data"]["result"]:
            values[series["metric"]["__name__"]] = float(series["value"][1])
        return values
    except Exception:  # any failure means: ask the exporter instead
        return None


def pod_values(
    api: Any, pods: list[dict[str, Any]], port: int | None, namespace: str
) -> dict[str, float]:
    """The gauges a running worker's exporter serves, through the pod proxy (``{}`` if none
    answers). Any running pod will do: each serves the job's values."""
    from kubernetes import client

    running = [p for p in pods if (p.get("status") or {}).get("phase") == "Running"]
    if port is None or not running:
        return {}
    try:
        resp = client.CoreV1Api(api).connect_get_namespaced_pod_proxy_with_path(
            f"{running[0]['metadata']['name']}:{port}",
            namespace,
            "metrics",
            _preload_content=False,
            _request_timeout=TIMEOUT,
        )
        return exporter_values(resp.data.decode() if resp.data else "")
    except Exception:
        return {}
