"""The store-tolerant rendezvous handlers (``training.rendezvous``) against a real etcd 3.5.

If these fail, an etcd pod rescheduled under a running job (seconds to a minute down, data kept
or lost) ends the job again: torch's own handlers let the agent's monitor poll raise, the
launcher closes the rendezvous, and restarted pods meet ``RendezvousClosedError``
(docs/adr/0005-rendezvous-backend.md). Checked here on the handlers themselves, one agent per
handler object, no torchrun: torch's ``etcd`` handler raises on the first poll of an outage while
``etcd-ft`` answers 0 and closes nothing, then raises past ``store_outage_timeout``; ``etcd-v2-ft``
waits an outage out; the run directory cannot expire under a running job (etcd 3.5 cannot
refresh a directory's TTL); after a wiped data dir a new round is announced to the running
agent and both join it; etcd-v2-ft members outlive an outage longer than torch's heartbeat
window (else a second world forms beside the running one); a bad budget stops the launcher in
one line; torch's own lease thread dies on etcd 3.5 (asserted, not left as a warning). Nothing is
mocked; waits are lower bounds, never asserted durations.
"""

from __future__ import annotations

import shutil
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from types import SimpleNamespace
from typing import cast

import etcd
import pytest
from torch.distributed.elastic.rendezvous import (
    RendezvousConnectionError,
    RendezvousHandler,
    RendezvousInfo,
    RendezvousParameters,
    rendezvous_handler_registry,
)
from torch.distributed.elastic.rendezvous import etcd_rendezvous as torch_etcd

from localrun.etcd_server import LocalEtcd
from training import launch
from training import rendezvous as rz
from workloads.specs.settings import STORE_OUTAGE_TIMEOUT_S, TOLERANT_RDZV_BACKENDS

pytestmark = [pytest.mark.slow, pytest.mark.integration]

BUDGET_S = 1.0
"""store_outage_timeout of these tests (seconds)."""


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalEtcd]:
    root = tmp_path_factory.mktemp("etcd")
    with LocalEtcd(root / "data", root / "etcd.log") as server:
        yield server


@pytest.fixture
def thread_deaths(monkeypatch: pytest.MonkeyPatch) -> list[BaseException | None]:
    """Exceptions that end threads during the test, collected instead of reported as warnings:
    torch's own ``etcd`` handler starts a ``lease_worker`` thread that refreshes the run
    directory's TTL at once, which etcd 3.5 refuses ("Not a file"), so the thread dies; the tests
    that build torch's handler assert that death rather than let it surface as a warning."""
    died: list[BaseException | None] = []
    monkeypatch.setattr(threading, "excepthook", lambda args: died.append(args.exc_value))
    return died


def _lease_worker_died_on_the_run_directory(died: list[BaseException | None]) -> None:
    _wait_for(lambda: bool(died), "torch's lease_worker ending")
    assert any(isinstance(e, etcd.EtcdException) and "Not a file" in str(e) for e in died), died


@pytest.fixture
def up(store: LocalEtcd) -> Iterator[LocalEtcd]:
    """The module's etcd, started again if a test left it stopped."""
    if not store.healthy():
        store.start()
    yield store
    if not store.healthy():
        store.start()


def _params(endpoint: str, backend: str, nodes: int = 1, run_id: str = "") -> RendezvousParameters:
    return RendezvousParameters(
        backend=backend,
        endpoint=endpoint,
        run_id=run_id or uuid.uuid4().hex[:8],
        min_nodes=nodes,
        max_nodes=nodes,
        local_addr="127.0.0.1",
        timeout=60,
        join_timeout=60,
        last_call_timeout=1,
        store_outage_timeout=BUDGET_S,
    )


def _handler(params: RendezvousParameters) -> rz.TolerantEtcdHandler:
    rz.register()  # what `python -m training.launch` does before torchrun's main
    handler = rendezvous_handler_registry.create_handler(params)
    assert isinstance(handler, rz.TolerantEtcdHandler)
    return handler


def test_names_are_the_ones_the_spec_selects() -> None:
    assert rz.TOLERANT_BACKENDS == TOLERANT_RDZV_BACKENDS
    assert rz.DEFAULT_STORE_OUTAGE_TIMEOUT_S == STORE_OUTAGE_TIMEOUT_S  # what the job renders
    with pytest.raises(ValueError, match="store_outage_timeout='soon'"):
        rz.outage_budget(
            RendezvousParameters("etcd-ft", "h:1", "r", 1, 1, store_outage_timeout="soon")
        )


def test_launcher_refuses_a_bad_budget_in_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A bad budget in PET_RDZV_CONF (where the operator puts rdzvConf) stops the launcher with
    one line and status 2 before any rendezvous; torchrun alone printed the handler's traceback."""
    monkeypatch.setenv("PET_RDZV_CONF", "last_call_timeout=5,store_outage_timeout=soon")
    argv = ["--rdzv-backend=etcd-ft", "--rdzv-endpoint=127.0.0.1:1", "-m", "training.finetune"]
    with pytest.raises(SystemExit) as stop:
        launch.main(argv)
    assert stop.value.code == launch.BAD_INPUT
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "store_outage_timeout='soon'" in err
    assert launch.check_rdzv_conf(["--rdzv-backend=c10d", "-m", "x"]) is None  # not ours


def test_etcd_ft_carries_on_through_an_outage_and_gives_up_past_the_budget(
    up: LocalEtcd, thread_deaths: list[BaseException | None]
) -> None:
    params = _params(up.endpoint, rz.ETCD_FT)
    ours = _handler(params)
    info = ours.next_rendezvous()
    assert (info.rank, info.world_size) == (0, 1)
    stock = torch_etcd.create_rdzv_handler(params)  # torch's `etcd` on the same run
    _lease_worker_died_on_the_run_directory(thread_deaths)
    assert ours.num_nodes_waiting() == 0 == stock.num_nodes_waiting()

    up.stop()
    with pytest.raises(etcd.EtcdConnectionFailed):
        stock.num_nodes_waiting()  # what kills torch's agent on its first poll
    assert [ours.num_nodes_waiting() for _ in range(3)] == [0, 0, 0]
    assert ours.outage.down and not ours.outage.gave_up
    up.start()
    time.sleep(rz.PROBE_INTERVAL_S)  # the next poll probes the store again
    assert ours.num_nodes_waiting() == 0
    assert not ours.outage.down and ours.outage.outages == 1
    assert not ours.is_closed()

    up.stop()
    assert ours.num_nodes_waiting() == 0
    time.sleep(BUDGET_S + rz.PROBE_INTERVAL_S)
    with pytest.raises(RendezvousConnectionError, match="store_outage_timeout=1"):
        ours.num_nodes_waiting()
    assert ours.outage.gave_up
    up.start()
    assert ours.shutdown() is False  # the launcher's `finally`: nothing is closed
    assert not ours.is_closed()
    # The agent is gone (its keep-alive with it); its restarted pod joins the same rendezvous.
    ours._impl._lease_this_rank_stop.set()
    _, state = ours._impl.get_rdzv_state()
    for key in state["keep_alives"]:
        ours._impl.client.delete(key)
    again = _handler(params)
    assert again.next_rendezvous().world_size == 1
    assert again.shutdown() is True and again.is_closed()  # a finished job still closes it


def test_run_directory_cannot_expire_under_a_running_job(
    up: LocalEtcd, thread_deaths: list[BaseException | None]
) -> None:
    """torch gives ``run_<id>`` a 7,200 s TTL and refreshes it in a thread, but etcd 3.5's v2
    store refuses any TTL update of a directory: the refresh fails at once (torch 2.13's
    ``setup_lease_renewal`` catches only ``EtcdKeyNotFound`` and ``ConnectionRefusedError``, so
    the thread dies) and the whole state would vanish two hours into a run. etcd-ft creates the
    directory without a TTL."""
    stock = torch_etcd.create_rdzv_handler(_params(up.endpoint, "etcd"))
    assert isinstance(stock, torch_etcd.EtcdRendezvousHandler)
    _lease_worker_died_on_the_run_directory(thread_deaths)
    path = stock._rdzv_impl.get_path("")
    client = stock._rdzv_impl.client
    assert 0 < client.read(path).ttl <= torch_etcd.CONST_RUNID_SUBROOT_TTL
    for kwargs in ({}, {"dir": True}):
        with pytest.raises(etcd.EtcdException, match="Not a file"):
            client.refresh(path, ttl=torch_etcd.CONST_RUNID_SUBROOT_TTL, **kwargs)
    ours = _handler(_params(up.endpoint, rz.ETCD_FT))
    run_dir = client.read(ours._impl.get_path(""))
    assert run_dir.dir and run_dir.ttl is None and run_dir.expiration is None


def test_etcd_ft_after_a_wiped_store_announces_the_new_round_and_both_join(
    up: LocalEtcd,
) -> None:
    params = _params(up.endpoint, rz.ETCD_FT, nodes=2)
    a, b = _handler(params), _handler(params)
    first = _join_together(a, b)
    assert len(first) == 2
    assert sorted(r.rank for r in first) == [0, 1]

    up.stop()
    shutil.rmtree(up.data_dir)
    up.start()  # same member, empty store: the run's directory and counter are gone
    assert a.num_nodes_waiting() == 0  # no state: nobody waiting, the workers run on

    results: dict[str, RendezvousInfo] = {}
    joiner = threading.Thread(target=lambda: results.update(b=b.next_rendezvous()))
    joiner.start()  # b's pod restarted: it rebuilds the layout and opens a new round
    deadline = time.monotonic() + 60
    while a.num_nodes_waiting() == 0 and time.monotonic() < deadline:
        time.sleep(0.2)
    assert a.num_nodes_waiting() == 1  # the running agent sees it and restarts its group
    info_a = a.next_rendezvous()
    joiner.join(timeout=60)
    info_b = results["b"]
    assert {info_a.rank, info_b.rank} == {0, 1}
    assert info_a.world_size == info_b.world_size == 2
    assert a.num_nodes_waiting() == 0

    up.stop()
    shutil.rmtree(up.data_dir)
    up.start()
    assert a.shutdown() is True and a.is_closed()  # a finished job closes even a wiped run


def _join_together(*handlers: RendezvousHandler) -> list[RendezvousInfo]:
    out: list[RendezvousInfo | None] = [None] * len(handlers)

    def join(i: int) -> None:
        out[i] = handlers[i].next_rendezvous()

    threads = [threading.Thread(target=join, args=(i,)) for i in range(len(handlers))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    return [o for o in out if o is not None]


def test_etcd_v2_ft_waits_an_outage_out_and_gives_up_past_the_budget(
    up: LocalEtcd, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TORCH_DISABLE_SHARE_RDZV_TCP_STORE", "1")  # as the spec sets it
    rz.register()
    handler = rendezvous_handler_registry.create_handler(_params(up.endpoint, rz.ETCD_V2_FT))
    assert isinstance(handler, rz.TolerantDynamicHandler) and handler.outage is not None
    assert handler.get_backend() == rz.ETCD_V2_FT
    assert handler.next_rendezvous().world_size == 1

    handler.outage.budget_s = 60.0  # first an outage shorter than the budget
    up.stop()
    time.sleep(1.1)  # past the state holder's 1 s cache: the next poll reads the store
    answers: list[int] = []
    poll = threading.Thread(target=lambda: answers.append(handler.num_nodes_waiting()))
    poll.start()
    deadline = time.monotonic() + 30
    while not handler.outage.down and time.monotonic() < deadline:
        time.sleep(0.05)
    assert handler.outage.down and poll.is_alive()  # the poll waits while etcd is away
    up.start()
    poll.join(timeout=60)
    assert answers == [0]  # then answers "no change"; torch's handler raised at once
    assert handler.outage.outages == 1 and not handler.outage.down

    handler.outage.budget_s = BUDGET_S
    up.stop()
    time.sleep(1.1)
    with pytest.raises(RendezvousConnectionError, match="store_outage_timeout=1"):
        handler.num_nodes_waiting()
    up.start()
    assert not handler.is_closed()  # the store answers again (a heartbeat may do the same)
    assert handler.shutdown() is False  # still: an agent that gave up never closes the run
    assert not handler.is_closed()


def test_etcd_v2_ft_members_outlive_an_outage_longer_than_the_heartbeat_window(
    up: LocalEtcd, monkeypatch: pytest.MonkeyPatch
) -> None:
    """torch drops every node whose heartbeat is older than keep_alive_interval x
    keep_alive_max_attempt (4 s here, 15 s by default) at each read of the state; nobody can
    heartbeat while etcd is away, so after a longer outage the running agents dropped
    themselves, stopped heartbeating and never noticed a node arriving next (with min_nodes 1
    it formed a world of size 1 beside the running one of size 2, measured). Here the two
    members stay members, the newcomer waits and is announced (num_nodes_waiting 1), and all
    three form one world of 3; a member whose own heartbeats do lapse reports a change, so its
    agent rejoins. min_nodes 2 keeps the first round from completing with one node on a slow
    machine."""
    monkeypatch.setenv("TORCH_DISABLE_SHARE_RDZV_TCP_STORE", "1")  # as the spec sets it
    rz.register()
    params = _params(up.endpoint, rz.ETCD_V2_FT)
    params.min_nodes, params.max_nodes = 2, 3
    params.config.update(keep_alive_interval=1, keep_alive_max_attempt=4, store_outage_timeout=60)
    window_s = 4.0
    a, b = (rendezvous_handler_registry.create_handler(params) for _ in range(2))
    assert isinstance(a, rz.TolerantDynamicHandler) and isinstance(b, rz.TolerantDynamicHandler)
    assert sorted(i.world_size for i in _join_together(a, b)) == [2, 2]

    up.stop()
    time.sleep(window_s + 2)  # every heartbeat in the store is now older than the window
    up.start()
    assert a.num_nodes_waiting() == 0 == b.num_nodes_waiting()  # nobody dropped
    time.sleep(window_s)  # past the window: the heartbeats sent since keep both
    assert a.num_nodes_waiting() == 0 == b.num_nodes_waiting()

    c = rendezvous_handler_registry.create_handler(params)
    results: dict[str, RendezvousInfo] = {}
    joiner = threading.Thread(target=lambda: results.update(c=c.next_rendezvous()))
    joiner.start()
    deadline = time.monotonic() + 60
    while a.num_nodes_waiting() == 0 and time.monotonic() < deadline:
        time.sleep(0.2)
    assert a.num_nodes_waiting() == 1 and "c" not in results  # c waits for the running pair
    infos = _join_together(a, b)  # what both agents do on seeing it: restart and rejoin
    joiner.join(timeout=60)
    assert sorted(i.world_size for i in [*infos, results["c"]]) == [3, 3, 3]
    assert sorted(i.rank for i in [*infos, results["c"]]) == [0, 1, 2]

    a._stop_heartbeats()  # a's heartbeats lapse with the store up (a stalled agent)
    time.sleep(window_s + 1.5)
    assert a.num_nodes_waiting() >= 1  # torch's handler answered 0 and trained on
    assert b.num_nodes_waiting() == 0
    for handler in (a, b, c):
        handler.shutdown()


@pytest.mark.parametrize("backend", [rz.ETCD_FT, rz.ETCD_V2_FT])
def test_an_agent_dying_of_a_store_error_leaves_the_rendezvous_open(
    up: LocalEtcd, backend: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Right after a round the agent writes and reads its rank keys on the rendezvous EtcdStore
    (``_assign_worker_ranks``), outside any tolerant path: an outage there raises out of
    ``agent.run()`` and the launcher's ``finally`` calls ``shutdown()``, which closed the run
    once etcd answered (etcd-v2-ft's close even waited for it). The restarted pod then met
    ``RendezvousClosedError``. Here the run stays open, and a shutdown without an error still
    closes it."""
    monkeypatch.setenv("TORCH_DISABLE_SHARE_RDZV_TCP_STORE", "1")  # as the spec sets it
    rz.register()
    params = _params(up.endpoint, backend)
    params.config["store_outage_timeout"] = "60"
    handler = rendezvous_handler_registry.create_handler(params)
    store = handler.next_rendezvous().store
    up.stop()
    closed = None
    with pytest.raises(etcd.EtcdException):
        try:  # launch_agent's shape: the agent's exception, shutdown() in the finally
            store.set("rank_info", "x")
        finally:
            up.start()  # etcd answers again by the time the launcher shuts down
            closed = handler.shutdown()
    assert closed is False and not handler.is_closed()  # the restarted pod can rejoin
    assert handler.shutdown() is True and handler.is_closed()  # no error: a finished job


@pytest.mark.parametrize("backend", [rz.ETCD_FT, rz.ETCD_V2_FT])
def test_an_agent_started_during_an_outage_waits_for_the_store(up: LocalEtcd, backend: str) -> None:
    """A pod restarted while etcd is away: torch's handlers fail at construction (python-etcd
    asks the server for its members), the pod crash-loops through backoffLimit; ours wait."""
    params = _params(up.endpoint, backend)
    params.config["store_outage_timeout"] = "60"
    up.stop()
    with pytest.raises(etcd.EtcdException):
        torch_etcd.create_rdzv_handler(params)
    restart = threading.Timer(1.5, up.start)
    restart.start()
    handler = rendezvous_handler_registry.create_handler(params)  # waits for the start
    restart.join()
    assert handler.get_backend() == backend
    assert isinstance(handler, rz.TolerantEtcdHandler | rz.TolerantDynamicHandler)
    outage = handler.outage
    assert outage is not None and outage.outages == 1 and not outage.down


class _CountingClient(etcd.Client):
    """A real python-etcd client that counts its refreshes which met the outage."""

    failed = 0

    def refresh(self, key: str, ttl: int, **kwdargs: object) -> object:
        try:
            return super().refresh(key, ttl, **kwdargs)
        except rz.STORE_ERRORS:
            self.failed += 1
            raise


def _wait_for(condition: Callable[[], bool], what: str, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"{what} not seen within {timeout_s:.0f} s"
        time.sleep(0.1)


def test_keep_alive_key_survives_an_outage(
    up: LocalEtcd, thread_deaths: list[BaseException | None]
) -> None:
    """A member's keep-alive thread that meets a store outage: torch's (``setup_lease_renewal``'s
    ``lease_worker``, torch 2.13) catches ``EtcdKeyNotFound`` and ``ConnectionRefusedError`` only,
    so python-etcd's ``EtcdConnectionFailed`` kills it and the key expires a TTL later;
    ``_renew_key`` retries and renews the key once etcd is back.

    Both threads start while etcd is down, so both certainly meet the outage, whatever the load;
    the key's TTL (60 s) outlasts any etcd restart, so only the threads are under test."""
    ttl = 60
    key = f"/test/keepalive-{uuid.uuid4().hex[:6]}"
    before = etcd.Client("127.0.0.1", up.client_port).set(key, "x", ttl=ttl).modifiedIndex
    ours = _CountingClient("127.0.0.1", up.client_port)
    theirs = _CountingClient("127.0.0.1", up.client_port)
    died = thread_deaths
    up.stop()
    stop = threading.Event()
    worker = threading.Thread(target=rz._renew_key, args=(ours, key, ttl, stop), daemon=True)
    worker.start()
    # torch's method reads only self.client: a stand-in, not a rendezvous joined to etcd
    their_rdzv = cast(torch_etcd.EtcdRendezvous, SimpleNamespace(client=theirs))
    their_stop = torch_etcd.EtcdRendezvous.setup_lease_renewal(their_rdzv, key, ttl)
    _wait_for(lambda: ours.failed >= 2 and theirs.failed >= 1, "refreshes during the outage")
    assert theirs.failed == 1 and len(died) == 1
    assert isinstance(died[0], etcd.EtcdConnectionFailed)  # torch's thread is gone
    up.start()
    client = etcd.Client("127.0.0.1", up.client_port)
    _wait_for(lambda: client.read(key).modifiedIndex > before, "a renewal after the outage")
    assert worker.is_alive()
    stop.set()
    their_stop.set()
    worker.join(timeout=10)
    assert not worker.is_alive()
