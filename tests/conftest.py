"""How ``make test`` spreads the suite over pytest-xdist workers (``-n 4 --dist loadscope``).

Most slow tests wait (on Prometheus scrapes, etcd, restarts, paced fake jobs) as much as they
compute. The rules, all in this file and ``tests/shared.py``:

- **Scopes:** a module is one unit of work (its module fixtures are built once), except the
  modules in :data:`PER_TEST`, whose tests are independent, long runs: each is a unit of its own,
  so they spread over the workers.
- **Longest first:** units start in the order of :data:`LONG_FIRST` (measured: the local runs
  and the notebook take 30-80 s each), then collection order, so no long unit is left for the
  end while the other worker idles.
- **Lanes for waiting:** with three or more workers, the first two run the computing units
  (two cores) and the others are lanes: they run only the :data:`WAITING` units (modules or
  single tests), which sleep far more than they compute, so none waits behind a sleeping one.
  ``make test`` runs four: their ~400 s of waiting, on one lane, outlasted the computing work.
- **Expensive shared fixtures** (the training launches, the local-run baseline, checkov, the
  CLI campaign) are computed once per test run by ``tests.shared.once``, whichever worker asks
  first; the others read its result.

If this file breaks, the suite still passes but takes longer (units unbalanced), or, without
``once``, runs the shared launches once per worker.
"""

from __future__ import annotations

import os
from typing import Any

import pytest

# No test may reach the Hugging Face Hub (nothing leaves loopback): huggingface_hub reads
# HF_HUB_OFFLINE at import (huggingface_hub/constants.py). Tests that exercise the Hub's API
# clear it and point HF_ENDPOINT at a loopback stand-in.
os.environ.setdefault("HF_HUB_OFFLINE", "1")

PER_TEST = (
    "tests/workloads/test_local_run.py",
    "tests/observability/test_scaling_cloud.py",
)
"""Modules whose tests share no module fixture and each last tens of seconds."""

LONG_FIRST = (
    "tests/training/test_rendezvous.py",
    "tests/workloads/test_local_run.py",
    "tests/observability/test_notebook.py",
    "tests/training/test_parity.py",
    "tests/planner/test_calibration.py",
    "tests/jobs/test_local_jobs.py",
    "tests/training/test_finetune_cli.py",
    "tests/planner/test_memory_vs_cpu.py",
    "tests/observability/test_scaling_cloud.py",
    "tests/training/test_preflight.py",
    "tests/training/test_resume.py",
)
"""Modules by measured length, longest first (seconds per unit on a 2-core machine), except:
``test_rendezvous.py`` (a waiting module, 55 s) first, so that a lane starts with it while
the local-run baseline, which the hung-worker run needs, is computed elsewhere (first, that run
waited ~11 s for it), and the lane's short scaling tests come last, for the computing workers to
share once their own work runs out; ``test_resume.py`` late: half its tests read the launches
``test_parity.py`` computes (``tests/training/conftest.py``); started next to it, its worker
idled ~60 s waiting for them."""


WAITING = (
    "tests/workloads/test_local_run.py::test_hung_worker_times_out_and_the_group_restarts",
    "tests/observability/test_scaling_cloud.py",
    "tests/training/test_rendezvous.py",
    "tests/observability/test_local_prometheus.py",
    "tests/observability/test_prometheus_files.py",
)
"""Units that mostly wait (paced fake jobs, Prometheus scrapes, etcd outages and heartbeat
windows, torchrun's fixed 30 s before it SIGKILLs a hung worker): measured,
test_scaling_cloud.py takes 208 s of wall time for 20 s of CPU, the hung-worker run 76 s for
37 s. Modules, or single tests of a PER_TEST module. With three or more workers, the workers
past the first two are their lanes: they run only these, the first two run everything else
first, so the waiting never holds a core."""


REQUIRE_PROMETHEUS = "EKS_FSDP_REQUIRE_PROMETHEUS"
"""Set to 1 (``.ci/run`` does) to fail, not skip, the ``prometheus`` tests without Prometheus."""


def prometheus_missing(path: str | None = None) -> list[str]:
    """The Prometheus binaries (Debian's ``prometheus`` package: the server and promtool) not
    on ``path`` (default: PATH)."""
    import shutil

    return [tool for tool in ("prometheus", "promtool") if shutil.which(tool, path=path) is None]


def pytest_runtest_setup(item: pytest.Item) -> None:
    """A test marked ``prometheus`` without Prometheus on PATH: skipped with one line naming
    what is missing and how to get it, or failed when ``EKS_FSDP_REQUIRE_PROMETHEUS=1``."""
    if item.get_closest_marker("prometheus") is None:
        return
    missing = prometheus_missing()
    if not missing:
        return
    why = f"no {' or '.join(missing)} on PATH: sudo apt-get install -y prometheus"
    if os.environ.get(REQUIRE_PROMETHEUS) == "1":
        pytest.fail(f"{why} ({REQUIRE_PROMETHEUS}=1)", pytrace=False)
    pytest.skip(why)


def _module(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


def _waits(scope: str) -> bool:
    return scope in WAITING or _module(scope) in WAITING


@pytest.hookimpl(trylast=True)  # after pytest's own reordering by fixture scope
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Stable sort: the LONG_FIRST modules first, in that order; a module's tests stay together
    and in their order."""
    rank = {m: i for i, m in enumerate(LONG_FIRST)}
    items.sort(key=lambda item: rank.get(_module(item.nodeid), len(rank)))


@pytest.hookimpl(optionalhook=True)  # pytest-xdist's hook: plain pytest runs without it
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """``--dist loadscope`` with this suite's scopes: a module, or a test of a PER_TEST module;
    units handed out in collection order (longest first), not by test count."""
    if config.getoption("dist") != "loadscope":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class SuiteScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return nodeid if _module(nodeid) in PER_TEST else _module(nodeid)

        def _is_lane(self, node: Any) -> bool:
            return len(self.nodes) >= 3 and node in self.nodes[2:]

        def _assign_work_unit(self, node: Any) -> None:
            """A lane (a worker past the first two) takes waiting units only; the first two
            take the first computing unit, and waiting ones once none is left."""
            lane = self._is_lane(node)
            waiting = [s for s in self.workqueue if _waits(s)]
            if lane:
                if not waiting:
                    return  # ``_reschedule`` shuts it down: a third computing worker slows all
                scope = waiting[0]
            else:
                computing = [s for s in self.workqueue if not _waits(s)]
                scope = (computing or waiting)[0]
            self.workqueue.move_to_end(scope, last=False)
            super()._assign_work_unit(node)

        def _reschedule(self, node: Any) -> None:
            idle_lane = self._is_lane(node) and not any(_waits(s) for s in self.workqueue)
            if self.workqueue and not node.shutting_down and idle_lane:
                # Nothing left for the lane: it finishes what it holds (a worker keeps its last
                # test until more work or a shutdown comes) and leaves.
                node.shutdown()
                return
            super()._reschedule(node)

    config.option.loadscopereorder = False
    return SuiteScheduling(config, log)
