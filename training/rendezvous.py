"""Rendezvous handlers that outlive their etcd store being away: ``etcd-ft`` and ``etcd-v2-ft``.

Why (torch 2.13, python-etcd 0.4.5, etcd 3.5; docs/adr/0005-rendezvous-backend.md): while the
workers run, torchrun's agent calls ``rdzv_handler.num_nodes_waiting()`` every monitor interval
(``elastic/agent/server/api.py``, ``_invoke_run``). torch's own etcd handlers let a connection
error escape from there; the agent dies, and on that path the launcher *closes* the rendezvous
(``launcher/api.py``, ``launch_agent``: ``finally: spec.rdzv_handler.shutdown()``), so every
restarted pod meets ``RendezvousClosedError``. An etcd pod rescheduled by a node drain is down
for seconds to a minute; training itself never touches etcd (the workers talk over their own
TCP store and NCCL/gloo), so nothing needs to stop.

What these handlers do differently, within an outage budget (``rdzv_conf``
``store_outage_timeout``, seconds, default ``DEFAULT_STORE_OUTAGE_TIMEOUT_S``):

- ``etcd-ft`` (torch's legacy ``etcd`` rendezvous, same keys under ``/torchelastic/p2p``):
  ``num_nodes_waiting`` answers "no change" (0) while etcd is unreachable, probing at most once a
  second with a short read timeout; past the budget it raises. The rank keep-alive threads retry
  instead of dying on the first connection error. The run directory is created without a TTL:
  etcd 3.5's v2 store refuses every TTL update of a directory ("Raft Internal Error ... Not a
  file", with or without ``dir``/``refresh``; a plain key refreshes fine), so torch's 7,200 s TTL
  on ``run_<id>`` was never refreshed and the whole state expired two hours into a run. A lost
  store (data dir wiped, or the state expired) is rebuilt before the next round, and a new round
  forming without this agent counts as nodes waiting, so running agents join it.
- ``etcd-v2-ft`` (torch's dynamic rendezvous on ``EtcdRendezvousBackend``): the backend retries
  ``RendezvousConnectionError`` every second within the budget, for every caller (the monitor
  loop, the keep-alive heartbeats, joins, the close); past it, it raises at once until etcd
  answers again. The monitor loop therefore blocks while etcd is away: the agent notices a
  worker's exit (failure or success) only once etcd answers or the budget runs out. For one
  heartbeat window (``keep_alive_interval x keep_alive_max_attempt``) after etcd answers again
  no node is taken for dead (``TolerantStateHolder``: torch would drop every member after an
  outage longer than that window), and an agent whose own membership lapsed anyway reports a
  change, so it rejoins instead of training on beside a new world. A wiped store reads as no
  state, which the dynamic rendezvous already handles.
- Both: an agent that gave up on its store, or dies of a store error outside these paths (the
  rank keys written on the rendezvous ``EtcdStore`` right after a round), does not close the
  rendezvous on its way out (the launcher's ``shutdown()``), so the pod restarted by
  ``restartPolicy: OnFailure`` can rejoin the same rendezvous once etcd is back, instead of
  meeting ``RendezvousClosedError``; and an agent started while etcd is away waits for it
  (same budget) instead of failing at once.

torch refuses to register a second creator under ``etcd`` (``RendezvousHandlerRegistry.register``),
hence the new names; ``training.launch`` registers them and runs torchrun.

Built on torch 2.13 internals, by name: ``EtcdRendezvous`` (``create_path_if_not_exists``,
``setup_lease_renewal``, ``init_phase``, ``set_closed``, ``get_path``, ``client``, ``_prefix``,
``_run_id``), ``_create_etcd_client``, ``DynamicRendezvousHandler`` (its constructor,
``_node_desc_generator``, ``_this_node``, ``_state_holder``, ``_stop_heartbeats``) and
``_BackendRendezvousStateHolder._sanitize``; a torch upgrade must rerun
``tests/training/test_rendezvous.py``.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import sys
import threading
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any, TypeVar

import etcd  # type: ignore[import-untyped]
import urllib3.exceptions
from torch.distributed import Store
from torch.distributed.elastic.rendezvous import (
    RendezvousConnectionError,
    RendezvousHandler,
    RendezvousParameters,
)
from torch.distributed.elastic.rendezvous.dynamic_rendezvous import (
    DynamicRendezvousHandler,
    RendezvousBackend,
    RendezvousSettings,
    RendezvousTimeout,
    Token,
    _BackendRendezvousStateHolder,
)
from torch.distributed.elastic.rendezvous.etcd_rendezvous import (
    _DEFAULT_LAST_CALL_TIMEOUT,
    _DEFAULT_TIMEOUT,
    EtcdRendezvous,
    EtcdRendezvousHandler,
    _create_etcd_client,
)
from torch.distributed.elastic.rendezvous.etcd_rendezvous_backend import (
    create_backend as create_etcd_v2_backend,
)

log = logging.getLogger(__name__)

ETCD_FT = "etcd-ft"
"""Backend name of the tolerant legacy etcd rendezvous (the operator's ``etcd``)."""
ETCD_V2_FT = "etcd-v2-ft"
"""Backend name of the tolerant dynamic rendezvous on etcd (the operator's ``etcd-v2``)."""
TOLERANT_BACKENDS = {"etcd": ETCD_FT, "etcd-v2": ETCD_V2_FT}
"""The training operator's backend name -> the store-tolerant handler registered for it."""
OUTAGE_KEY = "store_outage_timeout"
"""``rdzv_conf`` key: seconds the store may be unreachable before the agent gives up."""
DEFAULT_STORE_OUTAGE_TIMEOUT_S = 300.0
"""Five minutes: an etcd pod rescheduled onto another node (image cached, volume re-attached)
is back well within it; past it the agent fails and its pod restarts, which costs one unit of
``backoffLimit`` but no longer closes the rendezvous."""
PROBE_INTERVAL_S = 1.0
"""While the store is away, seconds between two attempts to reach it."""
READ_TIMEOUT_S = 5
"""Read timeout of the monitor loop's poll (python-etcd's default is 60 s; the agent watches
its workers in the same loop)."""

STORE_ERRORS: tuple[type[BaseException], ...] = (
    etcd.EtcdConnectionFailed,  # refused, reset, timed out (python-etcd wraps urllib3's errors)
    etcd.EtcdClusterIdChanged,  # a re-created member answers with a new cluster id, once
    etcd.EtcdLeaderElectionInProgress,
    etcd.EtcdWatcherCleared,
    urllib3.exceptions.HTTPError,
    OSError,
)
"""Errors that mean "the store is not there right now", not "the rendezvous is broken"."""

T = TypeVar("T")


def outage_budget(params: RendezvousParameters) -> float:
    """``store_outage_timeout`` from the rendezvous config, in seconds (> 0)."""
    raw = params.get(OUTAGE_KEY, DEFAULT_STORE_OUTAGE_TIMEOUT_S)
    try:
        value = float(raw)
    except (TypeError, ValueError):
        value = math.nan
    if not value > 0 or math.isinf(value):
        raise ValueError(f"rdzv_conf {OUTAGE_KEY}={raw!r}: must be a number of seconds > 0")
    return value


class StoreOutage:
    """One store's availability as seen by one agent: since when it is away, and the budget."""

    def __init__(
        self, budget_s: float, where: str, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.budget_s = budget_s
        self.where = where
        self._clock = clock
        self._lock = threading.Lock()
        self.since: float | None = None
        """Clock time of the first failure of the current outage; None while the store answers."""
        self.gave_up = False
        """The budget ran out once: the agent is on its way out, and its shutdown must not close
        the rendezvous even if the store answers meanwhile (sticky)."""
        self._exhausted = False
        """The current outage outlasted the budget: fail at once until the store answers."""
        self.outages = 0
        """Outages seen and survived or not (for logs and tests)."""
        self.back_at: float | None = None
        """Clock time the store answered again after the last outage; None before any."""

    @property
    def down(self) -> bool:
        return self.since is not None

    def ok(self) -> None:
        """The store answered."""
        with self._lock:
            if self.since is not None:
                log.warning(
                    "rendezvous store %s is back after %.1f s",
                    self.where,
                    self._clock() - self.since,
                )
                self.back_at = self._clock()
            self.since, self._exhausted = None, False

    def within(self, window_s: float) -> bool:
        """The store is away, or answered again less than ``window_s`` seconds ago."""
        with self._lock:
            if self.since is not None:
                return True
            return self.back_at is not None and self._clock() - self.back_at < window_s

    def failed(self, err: BaseException) -> None:
        """The store did not answer: return while within the budget, else raise
        ``RendezvousConnectionError``."""
        with self._lock:
            now = self._clock()
            if self.since is None:
                self.since = now
                self.outages += 1
                log.warning(
                    "rendezvous store %s unreachable (%s: %s); carrying on for up to %.0f s "
                    "(rdzv_conf %s)",
                    self.where,
                    type(err).__name__,
                    err,
                    self.budget_s,
                    OUTAGE_KEY,
                )
            down_s = now - self.since
            if self._exhausted or down_s > self.budget_s:
                self.gave_up = self._exhausted = True
                raise RendezvousConnectionError(
                    f"rendezvous store {self.where} unreachable for {down_s:.0f} s, longer than "
                    f"{OUTAGE_KEY}={self.budget_s:.0f} s"
                ) from err


# -- etcd-ft: the legacy etcd rendezvous ----------------------------------------------------------


class TolerantEtcdRendezvous(EtcdRendezvous):
    """torch's ``EtcdRendezvous`` with a run directory that cannot expire under a running job,
    keep-alive threads that survive an outage, and a layout rebuilt after the store lost it."""

    def create_path_if_not_exists(self, full_path: str, ttl: int | None = None) -> None:
        if full_path.rstrip("/") == self.get_path("").rstrip("/"):
            ttl = None  # etcd 3.5 cannot refresh a directory's TTL: see the module docstring
        super().create_path_if_not_exists(full_path, ttl=ttl)

    def setup_lease_renewal(self, full_path: str, ttl: int) -> threading.Event:
        stop = threading.Event()
        if full_path.rstrip("/") == self.get_path("").rstrip("/"):
            return stop  # the run directory has no TTL to renew
        thread = threading.Thread(
            target=_renew_key, args=(self.client, full_path, ttl, stop), daemon=True
        )
        thread.start()
        return stop

    def ensure_layout(self) -> None:
        """Create the run directory, ``rdzv/`` and the version counter when the store lost them
        (a wiped data dir); one read when nothing is missing."""
        counter = self.get_path("/rdzv/version_counter")
        try:
            self.client.get(counter)
            return
        except etcd.EtcdKeyNotFound:
            pass
        log.warning("rendezvous state of run %s missing in etcd: creating it again", self._run_id)
        if self._prefix != "/":
            self.create_path_if_not_exists(self._prefix)
        self.create_path_if_not_exists(self.get_path(""))
        self.create_path_if_not_exists(self.get_path("/rdzv"))
        with contextlib.suppress(etcd.EtcdAlreadyExist):
            self.client.write(key=counter, value="0", prevExist=False)

    def init_phase(self) -> Any:
        self.ensure_layout()  # a connection error here is retried by rendezvous_barrier
        return super().init_phase()

    def set_closed(self) -> None:
        """Close the run, also when the store lost its state (torch's ``set_closed`` then fails
        with ``EtcdKeyNotFound`` and a finished job would leave the id open)."""
        try:
            super().set_closed()
        except etcd.EtcdKeyNotFound:
            self.ensure_layout()
            with contextlib.suppress(etcd.EtcdAlreadyExist):
                self.client.write(
                    key=self.get_path("/rdzv/active_version"),
                    value=json.dumps({"status": "closed"}),
                    prevExist=False,
                )
                return
            super().set_closed()  # a round appeared meanwhile: close it


def _renew_key(client: Any, path: str, ttl: int, stop: threading.Event) -> None:
    """Refresh a keep-alive key every ttl/2 until stopped or gone; a store outage is waited out
    (torch's worker thread dies on the first connection error and the key then expires)."""
    while True:
        try:
            client.refresh(path, ttl=ttl)
        except etcd.EtcdKeyNotFound:
            return
        except STORE_ERRORS as err:
            log.debug("keep-alive of %s failed (%s); retrying", path, err)
            if stop.wait(timeout=PROBE_INTERVAL_S):
                return
            continue
        if stop.wait(timeout=ttl / 2):
            return


class TolerantEtcdHandler(EtcdRendezvousHandler):
    """The legacy etcd handler whose monitoring answers "no change" while etcd is away."""

    def __init__(
        self, rdzv_impl: TolerantEtcdRendezvous, local_addr: str | None, outage: StoreOutage
    ) -> None:
        super().__init__(rdzv_impl, local_addr)
        self._impl = rdzv_impl
        self.outage = outage
        self._last_probe = -math.inf

    def get_backend(self) -> str:
        return ETCD_FT

    def num_nodes_waiting(self) -> int:
        """Agents waiting to join: the waiting counter of the final round, or the members of a
        round forming without this agent (an agent that is running its workers belongs to the
        final round, so a joinable or frozen one lacks it: after a lost store, or a round torch
        destroyed for a lapsed keep-alive). 0 while etcd is away, within the budget; past it,
        ``RendezvousConnectionError``."""
        now = time.monotonic()
        if self.outage.down and now - self._last_probe < PROBE_INTERVAL_S:
            return 0
        self._last_probe = now
        try:
            node = self._impl.client.read(
                self._impl.get_path("/rdzv/active_version"), timeout=READ_TIMEOUT_S
            )
        except etcd.EtcdKeyNotFound:
            self.outage.ok()
            return 0  # no state (a wiped store): nobody is waiting yet
        except STORE_ERRORS as err:
            self.outage.failed(err)
            return 0
        self.outage.ok()
        state = json.loads(node.value)
        if state["status"] == "final":
            return int(state["num_workers_waiting"])
        if state["status"] in ("joinable", "frozen"):
            return len(state["participants"])
        return 0

    def shutdown(self) -> bool:
        if _keep_open(self.get_run_id(), self.outage):
            return False
        return bool(super().shutdown())


def _store_failure() -> BaseException | None:
    """The store error behind the exception being raised right now, if any. The launcher calls
    ``shutdown()`` from a ``finally`` (torch ``launcher/api.py``, ``launch_agent``), so an agent
    dying of an etcd error outside the tolerant paths (the rank assignment and bootstrap keys on
    the rendezvous ``EtcdStore`` right after a round, for instance) shows up here."""
    err = sys.exc_info()[1]
    for _ in range(8):  # the cause chain, bounded
        if err is None:
            return None
        if isinstance(err, (*STORE_ERRORS, etcd.EtcdException, RendezvousConnectionError)):
            return err
        err = err.__cause__ or err.__context__
    return None


def _keep_open(run_id: str, outage: StoreOutage | None) -> bool:
    """Whether ``shutdown()`` must leave the rendezvous open: the agent gave up on its store, or
    is dying of a store error. Closing would turn every restarted pod away
    (``RendezvousClosedError``) once etcd answers; left open, they rejoin."""
    failure = _store_failure()
    if outage is not None and outage.gave_up:
        reason = f"its store was unreachable past {OUTAGE_KEY}"
    elif failure is not None:
        reason = f"the agent is failing on its store ({type(failure).__name__}: {failure})"
    else:
        return False
    log.warning("not closing rendezvous %s: %s; a restarted pod rejoins it", run_id, reason)
    return True


def _reach_store(outage: StoreOutage, connect: Callable[[], T]) -> T:
    """``connect()``, retried every second while the store is unreachable, within the budget: a
    pod restarted during an outage waits for etcd instead of crash-looping through
    ``backoffLimit`` (python-etcd's client asks the server for its members when it is built,
    and fails with a plain ``EtcdException`` when nobody answers)."""
    while True:
        try:
            result = connect()
        except (etcd.EtcdException, RendezvousConnectionError, *STORE_ERRORS) as err:
            outage.failed(err)
            time.sleep(PROBE_INTERVAL_S)
            continue
        outage.ok()
        return result


def create_etcd_ft_handler(params: RendezvousParameters) -> RendezvousHandler:
    """``etcd-ft``: the parameters of torch's ``etcd`` backend plus ``store_outage_timeout``."""
    outage = StoreOutage(outage_budget(params), params.endpoint)

    def connect() -> TolerantEtcdRendezvous:
        return TolerantEtcdRendezvous(
            client=_create_etcd_client(params),
            prefix=params.get("etcd_prefix", "/torchelastic/p2p"),
            run_id=params.run_id,
            num_min_workers=params.min_nodes,
            num_max_workers=params.max_nodes,
            timeout=params.get_as_int("timeout", _DEFAULT_TIMEOUT),
            last_call_timeout=params.get_as_int("last_call_timeout", _DEFAULT_LAST_CALL_TIMEOUT),
        )

    return TolerantEtcdHandler(_reach_store(outage, connect), params.local_addr, outage)


# -- etcd-v2-ft: the dynamic rendezvous on etcd ---------------------------------------------------


class TolerantBackend(RendezvousBackend):
    """A rendezvous backend whose connection errors are retried within the outage budget."""

    def __init__(self, inner: RendezvousBackend, name: str, outage: StoreOutage) -> None:
        self._inner = inner
        self._name = name
        self.outage = outage

    @property
    def name(self) -> str:
        return self._name

    def get_state(self) -> tuple[bytes, Token] | None:
        return self._retry(self._inner.get_state)

    def set_state(
        self, state: bytes, token: Token | None = None
    ) -> tuple[bytes, Token, bool] | None:
        # A write whose answer was lost is retried with the same token: it then fails its
        # compare-and-swap and returns the current state, which the caller re-reads (torch's
        # contract for set_state).
        return self._retry(lambda: self._inner.set_state(state, token))

    def _retry(self, call: Callable[[], T]) -> T:
        while True:
            try:
                result = call()
            except RendezvousConnectionError as err:
                self.outage.failed(err)
                time.sleep(PROBE_INTERVAL_S)
                continue
            self.outage.ok()
            return result


class TolerantStateHolder(_BackendRendezvousStateHolder):
    """torch's state holder that does not take the heartbeats an outage held back for deaths.

    torch drops every node whose last heartbeat is older than ``keep_alive_interval x
    keep_alive_max_attempt`` (15 s by default) at each read of the state (``_sanitize``). Nobody
    can write a heartbeat while etcd is away, so after a longer outage the first read dropped
    *every* participant, this node included: its heartbeats stopped (``_should_keep_alive``
    finds no entry), and the next node to join saw an empty round and formed a world of its
    own beside the running one. Within that window after the store answers again, nobody is
    dropped: each live agent's heartbeat (every ``keep_alive_interval``) lands in it; a node
    that really died goes at the first read after it.
    """

    def __init__(self, backend: TolerantBackend, settings: RendezvousSettings) -> None:
        super().__init__(backend, settings)
        self.outage = backend.outage
        self.window_s = (
            settings.keep_alive_interval * settings.keep_alive_max_attempt
        ).total_seconds()

    def _sanitize(self) -> None:
        if self.outage.within(self.window_s):
            self._dead_nodes = []
            return
        super()._sanitize()


class TolerantDynamicHandler(DynamicRendezvousHandler):
    """The dynamic handler that does not close its rendezvous after giving up on the store, and
    restarts its group when its own membership lapsed."""

    outage: StoreOutage | None = None

    def num_nodes_waiting(self) -> int:
        """torch's count of nodes waiting, or at least 1 when this node is no longer a
        participant of the round it runs in (its heartbeats lapsed past the outage window, or
        a node that took them for dead rewrote the round): the agent then restarts its workers
        and rejoins instead of training on in a world the rendezvous no longer knows, next to
        a new one."""
        waiting = super().num_nodes_waiting()
        if self._this_node in self._state_holder.state.participants:
            return waiting
        log.warning(
            "node %s is no longer a participant of rendezvous %s (its heartbeats lapsed): "
            "restarting the worker group to rejoin",
            self._this_node,
            self.get_run_id(),
        )
        return max(waiting, 1)

    def shutdown(self) -> bool:
        if _keep_open(self.get_run_id(), self.outage):
            self._stop_heartbeats()
            return False
        return super().shutdown()


def _seconds(params: RendezvousParameters, key: str) -> timedelta | None:
    value = params.get_as_int(key)
    return None if value is None else timedelta(seconds=value)


def create_etcd_v2_ft_handler(params: RendezvousParameters) -> RendezvousHandler:
    """``etcd-v2-ft``: torch's ``etcd-v2`` (``registry._create_etcd_v2_handler`` and
    ``dynamic_rendezvous.create_handler``, same keys and defaults) on a tolerant backend."""
    outage = StoreOutage(outage_budget(params), params.endpoint)
    inner, store = _reach_store(outage, lambda: create_etcd_v2_backend(params))
    backend = TolerantBackend(inner, ETCD_V2_FT, outage)
    return _dynamic_handler(store, backend, params)


def _dynamic_handler(
    store: Store, backend: TolerantBackend, params: RendezvousParameters
) -> TolerantDynamicHandler:
    """torch's ``DynamicRendezvousHandler.from_backend``, with ``TolerantStateHolder`` in place
    of ``_BackendRendezvousStateHolder`` (same settings and defaults)."""
    timeout = RendezvousTimeout(
        _seconds(params, "join_timeout"),
        _seconds(params, "last_call_timeout"),
        _seconds(params, "close_timeout"),
        _seconds(params, "heartbeat_timeout"),
    )
    settings = RendezvousSettings(
        params.run_id,
        params.min_nodes,
        params.max_nodes,
        timeout,
        keep_alive_interval=timedelta(seconds=params.get_as_int("keep_alive_interval", 5) or 5),
        keep_alive_max_attempt=params.get_as_int("keep_alive_max_attempt", 3) or 3,
    )
    node = TolerantDynamicHandler._node_desc_generator.generate(params.local_addr)
    handler = TolerantDynamicHandler(
        node, settings, backend.name, store, TolerantStateHolder(backend, settings)
    )
    handler.outage = backend.outage
    return handler


HANDLERS: dict[str, Callable[[RendezvousParameters], RendezvousHandler]] = {
    ETCD_FT: create_etcd_ft_handler,
    ETCD_V2_FT: create_etcd_v2_ft_handler,
}
"""Backend name -> handler creator, for ``rendezvous_handler_registry.register``."""


def register() -> None:
    """Register the handlers with torchrun's registry (idempotent)."""
    from torch.distributed.elastic.rendezvous import rendezvous_handler_registry

    for name, creator in HANDLERS.items():
        rendezvous_handler_registry.register(name, creator)
