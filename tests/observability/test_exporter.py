"""The training exporter serves what the loop logged.

If this fails, Prometheus (and the dashboard, the alerts, the scaling notebook) would read wrong or
missing training numbers: the scrape of PrometheusSink's real HTTP endpoint must return exactly the
values passed to ``log``. No mocks: a real server on a free loopback port, scraped over HTTP.
"""

from __future__ import annotations

import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from training.prometheus import METRIC_NAMES, PrometheusSink, prometheus_sink_for_rank

ENV = {"RANK": "3", "LOCAL_RANK": "0", "WORLD_SIZE": "8", "TORCHELASTIC_RESTART_COUNT": "2"}


def scrape(url: str) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
    with urllib.request.urlopen(url, timeout=5) as resp:
        text = resp.read().decode()
    out: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out.setdefault(sample.name, {})[tuple(sorted(sample.labels.items()))] = sample.value
    return out


def value(samples: dict, name: str) -> float:
    series = samples[name]
    assert list(series) == [(("rank", "3"),)], series
    return series[(("rank", "3"),)]


def test_scrape_returns_logged_values() -> None:
    sink = PrometheusSink(0, addr="127.0.0.1", env=ENV)
    try:
        before = scrape(sink.url)
        assert value(before, "eksfsdp_elastic_restarts") == 2.0
        assert value(before, "eksfsdp_world_size") == 8.0
        assert "eksfsdp_loss" not in before  # nothing logged yet: no stale zero
        base = {"epoch": 0, "lr": 3e-4, "grad_norm": 1.25, "world_size": 8}
        sink.log(
            {
                **base,
                "step": 1,
                "loss": 2.5,
                "tokens": 4096,
                "tokens_per_s": 1234.5,
                "step_time_s": 3.3179,
                "peak_mem_bytes": 7_516_192_768,
                "mfu": 0.41,
            },
            step=1,
        )
        sink.log(
            {
                **base,
                "step": 2,
                "loss": 2.25,
                "tokens": 4096,
                "tokens_per_s": 1500.0,
                "step_time_s": 2.7307,
                "peak_mem_bytes": 7_600_000_000,
                "mfu": 0.5,
                "goodput": 0.875,
                "ckpt_stall_s": 0.25,
                "restarts": 1,
                "steps_redone": 3,
            },
            step=2,
        )
        after = scrape(sink.url)
    finally:
        sink.close()
    assert value(after, "eksfsdp_tokens_per_second") == 1500.0
    assert value(after, "eksfsdp_step_time_seconds") == pytest.approx(2.7307)
    assert value(after, "eksfsdp_loss") == 2.25
    assert value(after, "eksfsdp_mfu_ratio") == 0.5
    assert value(after, "eksfsdp_peak_memory_bytes") == 7_600_000_000.0
    assert value(after, "eksfsdp_step") == 2.0
    assert value(after, "eksfsdp_learning_rate") == pytest.approx(3e-4)
    assert value(after, "eksfsdp_grad_norm") == 1.25
    assert value(after, "eksfsdp_tokens_total") == 8192.0
    assert value(after, "eksfsdp_steps_total") == 2.0
    assert value(after, "eksfsdp_last_step_timestamp_seconds") > 1.7e9
    assert value(after, "eksfsdp_goodput_ratio") == 0.875
    assert value(after, "eksfsdp_checkpoint_stall_seconds") == 0.25
    assert value(after, "eksfsdp_job_restarts") == 1.0
    assert value(after, "eksfsdp_steps_redone") == 3.0
    assert set(METRIC_NAMES) <= set(after)


def test_missing_mfu_is_not_exported_and_close_frees_port() -> None:
    sink = PrometheusSink(0, addr="127.0.0.1", env={})
    sink.log({"loss": 1.0, "tokens": 10, "tokens_per_s": 5.0}, step=7)
    got = scrape(sink.url)
    assert "eksfsdp_mfu_ratio" not in got
    assert got["eksfsdp_step"][(("rank", "0"),)] == 7.0
    port = sink.port
    sink.close()
    sink.close()
    again = PrometheusSink(port, addr="127.0.0.1", env={})  # the port is free again
    again.close()


def test_only_local_rank_zero_serves() -> None:
    assert prometheus_sink_for_rank(0, env=ENV) is None  # port 0 = metrics off
    assert prometheus_sink_for_rank(9102, env={**ENV, "LOCAL_RANK": "1"}) is None


def test_busy_port_is_one_clear_error() -> None:
    sink = PrometheusSink(0, addr="127.0.0.1", env={})
    try:
        with pytest.raises(OSError, match=rf"^metrics_port {sink.port}: cannot listen"):
            PrometheusSink(sink.port, addr="127.0.0.1", env={})
    finally:
        sink.close()
    with pytest.raises(ValueError, match="metrics_port 70000"):
        PrometheusSink(70000, env={})
