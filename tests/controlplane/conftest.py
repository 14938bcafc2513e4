"""The local control plane as a session fixture (``controlplane.cluster.ControlPlane``).

``control_plane`` starts etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kwok
(fake nodes of every stack's node groups), the training operator and Kueue once per test
session, from the binaries ``make controlplane`` built (a cold build outlasts any per-test
timeout, so the fixture never builds: it skips, naming the command, unless
``EKS_FSDP_REQUIRE_CONTROLPLANE=1``, which ``make test`` sets, turns that into a failure).

At teardown it asserts that nothing was dialled outside 127.0.0.0/8, in two ways:

- by the sockets each component process held (``controlplane.procs.LoopbackWatch``, sampling
  from before the first component starts until after the last one stopped);
- without depending on timing (``controlplane.loopback``), before stopping: no webhook,
  conversion webhook or APIService names a Service, every Node's ``InternalIP`` is 127.0.0.1;
  after stopping: no component's log reports a dial or a name lookup off loopback.

It also asserts that no component is left running. The state folder (certificates, etcd data,
one log per component) is removed when every test passed and kept, with its path printed,
otherwise.

If this file breaks, every test under tests/controlplane errors at setup or teardown.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator

import pytest

from controlplane import build, loopback, nodes, procs
from controlplane.__main__ import all_stacks
from controlplane.cluster import ControlPlane

REQUIRE_ENV = "EKS_FSDP_REQUIRE_CONTROLPLANE"


@pytest.fixture(scope="session")
def built() -> build.Build:
    """The binaries and manifests ``make controlplane`` built (skip, or fail, without them)."""
    try:
        return build.ensure(build=False)
    except build.BuildError as err:
        if os.environ.get(REQUIRE_ENV) == "1":
            pytest.fail(f"controlplane: {err}")
        pytest.skip(f"controlplane: {err}")


@pytest.fixture(scope="session")
def control_plane(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, built: build.Build
) -> Iterator[ControlPlane]:
    state = tmp_path_factory.mktemp("controlplane")
    plane = ControlPlane(build=built, state=state, shapes=nodes.stack_shapes(all_stacks()))
    failed_before = request.session.testsfailed
    watch = procs.LoopbackWatch(plane.procs).start()  # the list the components join
    api: list[str] = []
    try:
        plane.start()
        reporter = request.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            reporter.write_line(f"controlplane: ready after (s) {plane.timings}")
        yield plane
        api = loopback.api_violations(plane.client)
    finally:
        codes = plane.stop()
        violations = watch.stop()  # after the stop: it watched the components shut down
        logs = loopback.log_violations(sorted(plane.logs.glob("*.log")))
        left = [p.name for p in plane.procs if p.alive()]
        failed = request.session.testsfailed > failed_before or violations or api or logs or left
        reporter = request.config.pluginmanager.get_plugin("terminalreporter")
        if failed:
            if reporter is not None:
                reporter.write_line(f"controlplane: logs kept in {plane.logs} (exit codes {codes})")
        else:
            shutil.rmtree(state, ignore_errors=True)
    assert not left, f"still running after stop: {left}"
    assert watch.samples > 0
    assert not violations, "connections outside 127.0.0.0/8:\n" + "\n".join(violations)
    assert not api, "the API server could dial outside 127.0.0.0/8:\n" + "\n".join(api)
    assert not logs, "the logs report dials or lookups off loopback:\n" + "\n".join(logs)
