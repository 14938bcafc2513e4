"""The scaling notebook's cloud mode drives Pulumi and Prometheus in the right order.

If this fails, the notebook's cloud mode would set the wrong config keys (the stack would not grow
to N nodes, or the job would keep its old name and rendezvous id), read throughput from the wrong
job, or leave a cluster of p5 nodes running after an error (no ``destroy``).
Mocked: the Automation API's stack, because no Pulumi CLI exists here (``pulumi.automation``
shells out to it); the fake records config/up/destroy and plays the cluster by making a real
PrometheusSink serve the throughput a job of N nodes would have. Prometheus is real (Debian's 2.42
on loopback, the cluster's scrape rules); only the port-forward to it is replaced. Where a Pulumi
CLI exists, the config round trip also runs against a real local-backend stack.
"""

from __future__ import annotations

import contextlib
import json
import re
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pulumi.automation import ConfigValue, OutputValue

from infra import config as infra_config
from training.prometheus import PrometheusSink
from workloads.local_prometheus import start_local_prometheus, worker_targets

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "notebooks"))
import scaling

pytestmark = [pytest.mark.slow, pytest.mark.integration]


def efficiency(n: int) -> float:
    return 0.9 ** (n - 1)


class FakeStack:
    """The Automation API ``Stack`` surface measure_cloud uses, over a dict of config."""

    def __init__(self, values: dict[str, Any], sink: PrometheusSink) -> None:
        self.values = json.loads(json.dumps(values))
        self.sink = sink
        self.calls: list[str] = []
        self.ups: list[dict[str, Any]] = []

    def _key(self, key: str) -> str:
        assert key.startswith("eks-fsdp:"), key
        return key.removeprefix("eks-fsdp:")

    def get_config(self, key: str, *, path: bool = False) -> ConfigValue:
        assert not path
        return ConfigValue(value=json.dumps(self.values[self._key(key)]))

    def set_config(self, key: str, value: ConfigValue, *, path: bool = False) -> None:
        assert path
        self.calls.append(f"set {self._key(key)}={value.value}")
        parts = re.findall(r"[^.\[\]]+|\[\d+\]", self._key(key))
        node: Any = self.values
        for part in parts[:-1]:
            node = node[int(part[1:-1])] if part.startswith("[") else node[part]
        last = parts[-1]
        node[int(last[1:-1]) if last.startswith("[") else last] = value.value

    def up(self, on_output: Any = None) -> None:
        cfg = infra_config.parse(self.values, stack="p5-16")  # the program would accept it
        self.calls.append("up")
        self.ups.append(self.values)
        n = cfg.job.workers
        for step in range(1, cfg.job.max_train_step + 1):  # the cluster trains
            self.sink.log(
                {"tokens_per_s": 10_000.0 * n * efficiency(n), "tokens": 1, "loss": 1.0}, step
            )

    def outputs(self) -> dict[str, OutputValue]:
        return {"kubeconfig": OutputValue(value="{}", secret=True)}

    def destroy(self, on_output: Any = None) -> None:
        self.calls.append("destroy")


@pytest.fixture
def sink() -> Iterator[PrometheusSink]:
    s = PrometheusSink(0, addr="127.0.0.1", env={"RANK": "0"})
    yield s
    s.close()


def local_prometheus(tmp_path: Path, sink: PrometheusSink, fail_at: str | None = None):
    @contextlib.contextmanager
    def factory(outputs: dict[str, Any], job: str) -> Iterator[str]:
        assert outputs == {"kubeconfig": "{}"}
        if job == fail_at:
            raise ConnectionError("port-forward failed")
        with start_local_prometheus(worker_targets(job, [sink.port]), tmp_path / job) as prom:
            yield prom.url

    return factory


def test_cloud_mode_sets_config_ups_reads_and_destroys(
    tmp_path: Path, sink: PrometheusSink
) -> None:
    values = {**infra_config.stack_file_values("p5-16"), "aws:region": "us-east-2"}
    stack = FakeStack(values, sink)
    measured = scaling.measure_cloud(
        [1, 2, 4],
        stack_name="p5-16",
        steps=5,
        select_stack=lambda **kw: stack,
        prometheus=local_prometheus(tmp_path, sink),
        poll_s=0.5,
        wait_timeout_s=60,
        log=lambda _line: None,
    )
    assert [m.nodes for m in measured] == [1, 2, 4]
    for m in measured:
        assert m.tokens_per_s == pytest.approx(10_000.0 * m.nodes * efficiency(m.nodes))
        assert m.source == "prometheus" and m.steps == 5
        assert m.job == f"llama2-7b-samsum-128gpu-{m.nodes}n"
    assert stack.calls[-1] == "destroy" and stack.calls.count("up") == 3
    assert stack.calls[:6] == [
        "set gpuNodeGroups[0].desiredSize=1",
        "set gpuNodeGroups[0].maxSize=16",
        "set job.name=llama2-7b-samsum-128gpu-1n",
        "set job.workers=1",
        "set job.minWorkers=1",
        "set job.maxTrainStep=5",
    ]
    rows = scaling.scaling_table(measured)
    assert [round(r["efficiency"], 6) for r in rows] == [1.0, 0.9, round(0.9**3, 6)]


def test_destroy_runs_after_a_failure(tmp_path: Path, sink: PrometheusSink) -> None:
    values = {**infra_config.stack_file_values("p5-16"), "aws:region": "us-east-2"}
    stack = FakeStack(values, sink)
    with pytest.raises(ConnectionError):
        scaling.measure_cloud(
            [1, 2],
            stack_name="p5-16",
            steps=3,
            select_stack=lambda **kw: stack,
            prometheus=local_prometheus(tmp_path, sink, fail_at="llama2-7b-samsum-128gpu-2n"),
            poll_s=0.5,
            log=lambda _line: None,
        )
    assert stack.calls[-1] == "destroy" and stack.calls.count("up") == 2


def test_bad_node_counts_stop_before_pulumi() -> None:
    with pytest.raises(ValueError, match=r"^nodes: \[0\]"):
        scaling.measure_cloud([0], stack_name="x", select_stack=lambda **kw: pytest.fail("called"))


@pytest.mark.skipif(
    shutil.which("pulumi") is None, reason="no Pulumi CLI: the fake stack stands in"
)
def test_config_paths_with_real_automation_api(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pulumi import automation as auto

    monkeypatch.setenv("PULUMI_CONFIG_PASSPHRASE", "test")
    opts = auto.LocalWorkspaceOptions(
        env_vars={"PULUMI_BACKEND_URL": f"file://{tmp_path}", "PULUMI_CONFIG_PASSPHRASE": "test"}
    )
    stack = auto.create_or_select_stack(
        "scaling", project_name="eks-fsdp", program=lambda: None, opts=opts
    )
    values = infra_config.stack_file_values("p5-16")
    for key in ("gpuNodeGroups", "job"):
        stack.set_config(f"eks-fsdp:{key}", auto.ConfigValue(value=json.dumps(values[key])))
    stack.set_config("eks-fsdp:job.workers", auto.ConfigValue(value="4"), path=True)
    assert json.loads(stack.get_config("eks-fsdp:job").value)["workers"] in (4, "4")
