"""The sweep's only source of figures: the training job's counters in Prometheus' HTTP API.

:func:`steady_throughput` takes the ``eksfsdp_tokens_total`` / ``eksfsdp_steps_total`` counters
of global rank 0, drops the warm-up steps, and evaluates ``rate()`` over the window from the
first scrape after the warm-up to the last scrape of the job, refusing a window with too few
steps or scrapes for a steady-state figure.
"""

from __future__ import annotations

import json
import math
import urllib.parse
import urllib.request
from typing import Any

from sweeps.common import Measurement, SweepError

R0 = 'rank="0"'


def _api(url: str, path: str, params: dict[str, Any], timeout: float = 30.0) -> Any:
    q = urllib.parse.urlencode(params)
    with urllib.request.urlopen(f"{url}{path}?{q}", timeout=timeout) as resp:
        body = json.loads(resp.read().decode())
    if body.get("status") != "success":
        raise RuntimeError(f"Prometheus {path} {params}: {body}")
    return body["data"]


def prom_query(
    url: str, promql: str, at: float | None = None
) -> dict[tuple[tuple[str, str], ...], float]:
    """Instant query (at ``at``, default now): ``{sorted labels: value}``."""
    params: dict[str, Any] = {"query": promql}
    if at is not None:
        params["time"] = f"{at:.3f}"
    data = _api(url, "/api/v1/query", params)
    return {tuple(sorted(r["metric"].items())): float(r["value"][1]) for r in data["result"]}


def prom_samples(url: str, selector: str, lookback_s: float) -> list[tuple[float, float]]:
    """The raw samples (scrape time, value) of the one series ``selector`` names, over the last
    ``lookback_s`` seconds (a range-vector selector: real scrape timestamps, no interpolation)."""
    data = _api(url, "/api/v1/query", {"query": f"{selector}[{max(1, math.ceil(lookback_s))}s]"})
    series = data["result"]
    if len(series) > 1:
        raise SweepError(f"{selector}: {len(series)} series, expected one (rank 0 of one job)")
    return [(float(t), float(v)) for t, v in series[0]["values"]] if series else []


def last_logged_step(url: str, job: str, lookback_s: float = 6 * 3600) -> int | None:
    """The step counter of ``job``'s rank 0 at its last scrape, as Prometheus holds it."""
    samples = prom_samples(url, f'eksfsdp_steps_total{{training_job="{job}",{R0}}}', lookback_s)
    return int(samples[-1][1]) if samples else None


def steady_throughput(
    url: str,
    job: str,
    *,
    warmup_steps: int,
    min_steps: int,
    min_scrapes: int = 3,
    lookback_s: float = 6 * 3600,
) -> dict[str, float]:
    """Steady-state tokens/s of ``job`` from its counters, with ``rate()``.

    The window runs from the first scrape whose step counter is past ``warmup_steps`` to the last
    scrape before the counter's final value (the job trained throughout); Prometheus evaluates ``rate(eksfsdp_tokens_total[window])`` at the window's
    end (a range selector is left-open, so the window is widened by a millisecond to include the
    first sample; both ends are real samples, so ``rate`` does not extrapolate). Refuses a window
    with fewer than ``min_steps`` steps or ``min_scrapes`` scrapes: raise the steps (or lower the
    scrape interval) rather than trust 3 samples.
    """
    sel = f'training_job="{job}",{R0}'
    steps = prom_samples(url, f"eksfsdp_steps_total{{{sel}}}", lookback_s)
    if not steps:
        raise SweepError(f"job {job}: no eksfsdp_steps_total in Prometheus")
    start = next(((t, v) for t, v in steps if v >= warmup_steps), None)
    # The last scrape before the counter reached its final value: the job trained during the
    # whole window. Scrapes from then on (the last steps' remainder, a final save, a pod waiting
    # to be reaped) add time but no tokens, which would bias the rate low by up to an interval.
    final = next(i for i, s in enumerate(steps) if s[1] == steps[-1][1])
    end = steps[max(final - 1, 0)]
    in_window = [s for s in steps if start is not None and start[0] <= s[0] <= end[0]]
    n_steps = int(end[1] - start[1]) if start is not None else 0
    if start is None or n_steps < min_steps or len(in_window) < min_scrapes:
        raise SweepError(
            f"job {job}: {n_steps} step(s) in {len(in_window)} scrape(s) after {warmup_steps} "
            f"warm-up steps (last step {int(end[1])}); need >= {min_steps} steps and >= "
            f"{min_scrapes} scrapes for a steady-state rate: raise the steps"
        )
    window_ms = round((end[0] - start[0]) * 1000) + 1
    rng = f"[{window_ms}ms]"
    tokens_per_s = prom_query(url, f"rate(eksfsdp_tokens_total{{{sel}}}{rng})", at=end[0])
    tokens = prom_query(url, f"increase(eksfsdp_tokens_total{{{sel}}}{rng})", at=end[0])
    if not tokens_per_s:
        raise SweepError(f"job {job}: no eksfsdp_tokens_total in Prometheus")
    window_s = end[0] - start[0]
    return {
        "tokens_per_s": next(iter(tokens_per_s.values())),
        "tokens": next(iter(tokens.values())) * (window_s / (window_ms / 1000)),
        "window_s": window_s,
        "first_step": int(start[1]),
        "end_step": int(end[1]),
        "last_step": int(steps[-1][1]),
        "steps": n_steps,
        "scrapes": len(in_window),
    }


def to_measurement(nodes: int, job: str, wall_s: float, fig: dict[str, float]) -> Measurement:
    """``steady_throughput``'s figures of one run as a :class:`Measurement`."""
    return Measurement(
        nodes=nodes,
        tokens_per_s=fig["tokens_per_s"],
        source="prometheus",
        job=job,
        steps=int(fig["last_step"]),
        wall_s=wall_s,
        window_s=fig["window_s"],
        first_step=int(fig["first_step"]),
        end_step=int(fig["end_step"]),
        steps_measured=int(fig["steps"]),
        tokens_measured=fig["tokens"],
        scrapes=int(fig["scrapes"]),
    )
