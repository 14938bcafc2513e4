"""The local control plane as a session fixture (``controlplane.cluster.ControlPlane``).

``control_plane`` starts etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kwok
(fake nodes of every stack's node groups), the training operator and Kueue once per test
session, from the binaries ``make controlplane`` built (a cold build outlasts any per-test
timeout, so the fixture never builds: it skips, naming the command, unless
``EKS_FSDP_REQUIRE_CONTROLPLANE=1``, which ``make test`` sets, turns that into a failure).

At teardown it stops every component and asserts that none is left running and that no
component process held a connection to an address outside 127.0.0.0/8 during the session
(``controlplane.procs.LoopbackWatch``). The state folder (certificates, etcd data, one log per
component) is removed when every test passed and kept, with its path printed, otherwise.

If this file breaks, every test under tests/controlplane errors at setup or teardown.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator

import pytest

from controlplane import build, nodes, procs
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
    try:
        plane.start()
        reporter = request.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            reporter.write_line(f"controlplane: ready after (s) {plane.timings}")
        yield plane
    finally:
        violations = watch.stop()
        codes = plane.stop()
        left = [p.name for p in plane.procs if p.alive()]
        failed = request.session.testsfailed > failed_before or violations or left
        reporter = request.config.pluginmanager.get_plugin("terminalreporter")
        if failed:
            if reporter is not None:
                reporter.write_line(f"controlplane: logs kept in {plane.logs} (exit codes {codes})")
        else:
            shutil.rmtree(state, ignore_errors=True)
    assert not left, f"still running after stop: {left}"
    assert watch.samples > 0
    assert not violations, "connections outside 127.0.0.0/8:\n" + "\n".join(violations)
