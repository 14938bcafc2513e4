"""The Automation API's operations and their interruption: each ``up``/``destroy`` in a worker
thread, SIGINT to the running ``pulumi`` child on an interrupt, the clean-up that waits for that
child to exit and cancels only the lock it left."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from typing import Any

from sweeps.common import SweepError

CLEANUP_ATTEMPTS = 3
"""Tries of the scale-back ``up`` (or ``destroy``) before printing the recovery commands."""


def interrupt_pulumi_children() -> None:
    """SIGINT to this process's ``pulumi`` children: the Automation API runs the CLI with
    ``subprocess.Popen`` (``pulumi/automation/_cmd.py``) in its own session-less child that a
    notebook kernel's interrupt never reaches. On SIGINT the CLI cancels the update gracefully
    (finishes the resource operations in flight, saves the state, releases the lock).

    Nothing here depends on how this process treats SIGINT: ``os.kill`` sends it whatever that
    is, and the child may inherit an ignored SIGINT (``Popen`` leaves it ignored) without harm,
    since the CLI calls ``signal.Notify`` for ``os.Interrupt`` (``NewScope`` in pulumi/pulumi
    ``pkg/backend/cancellation_scope.go``), which re-enables a SIGINT ignored at start (Go's
    ``os/signal`` package documentation)."""
    out = subprocess.run(
        ["pgrep", "-P", str(os.getpid()), "-x", "pulumi"],
        capture_output=True,
        text=True,
        check=False,
    )
    for pid in out.stdout.split():
        with contextlib.suppress(ProcessLookupError):
            os.kill(int(pid), signal.SIGINT)


class PulumiOps:
    """Runs each Automation API operation (``up``, ``destroy``) in a worker thread, so that a
    KeyboardInterrupt reaches the sweep, not the thread that waits on the ``pulumi`` child.

    On an interrupt the child is sent SIGINT (``interrupt``) and the operation is kept as the
    lock's holder: :meth:`wait_for_holder` waits until it has exited; only then may a lock still
    held be cancelled, and only the one that holder left (``stack.cancel()`` is "very
    dangerous" per its docstring in ``pulumi/automation/_stack.py``)."""

    def __init__(
        self,
        interrupt: Callable[[], None],
        log: Callable[[str], None],
        progress_s: float = 30.0,
    ) -> None:
        self.interrupt = interrupt
        self.log = log
        self.progress_s = progress_s
        self.holder: threading.Event | None = None
        """Set when the interrupted operation has returned (it holds the stack's lock until
        then). An Event, not ``Thread.is_alive``: a ``join`` interrupted by KeyboardInterrupt
        can leave a live thread reported as stopped (seen with CPython 3.11)."""
        self.holder_exited = False
        """The sweep's own interrupted operation has exited: a lock left now is its own."""

    def run(self, action: Callable[[], Any], what: str) -> None:
        error: list[BaseException] = []
        done = threading.Event()

        def target() -> None:
            try:
                action()
            except BaseException as err:
                error.append(err)
            finally:
                done.set()

        threading.Thread(target=target, name=f"pulumi {what}", daemon=True).start()
        try:
            while not done.wait(0.2):
                pass
        except KeyboardInterrupt:
            self.holder = done
            self.log(f"interrupted: SIGINT to the running pulumi {what} (it releases the lock)")
            self.interrupt()
            raise
        if error:
            raise error[0]

    def wait_for_holder(self) -> None:
        """Until the interrupted operation has exited (a second interrupt leaves it running)."""
        if self.holder is None:
            return
        last = time.monotonic()
        while not self.holder.wait(0.2):
            if time.monotonic() - last >= self.progress_s:
                self.log("  waiting for the interrupted pulumi operation to release the lock")
                last = time.monotonic()
        self.holder_exited = True


def cleanup(
    action: Callable[[], Any],
    stack: Any,
    what: str,
    recovery: list[str],
    log: Callable[[str], None],
    ops: PulumiOps,
    attempts: int = CLEANUP_ATTEMPTS,
) -> None:
    """Run ``action`` up to ``attempts`` times, after the interrupted operation (if any) has
    exited. A lock (``ConcurrentUpdateError``: ``[409] Conflict`` on Pulumi Cloud, "currently
    locked by" on a self-managed backend) is cancelled only when the sweep's own interrupted
    operation left it and has exited; another holder's lock is never cancelled. Prints
    ``recovery`` and raises when every try failed."""
    from pulumi.automation import ConcurrentUpdateError

    ops.wait_for_holder()
    last: BaseException | None = None
    for attempt in range(1, attempts + 1):
        try:
            ops.run(action, what)
            return
        except Exception as err:
            last = err
            log(f"{what} failed (try {attempt}/{attempts}): {str(err).strip()[:500]}")
            if isinstance(err, ConcurrentUpdateError):
                if not ops.holder_exited:
                    log("the stack is locked by an update the sweep did not start: not cancelled")
                    break
                with contextlib.suppress(Exception):
                    stack.cancel()
                    log("cancelled the lock the interrupted (and exited) update left")
    log(f"{what} failed. GPU nodes may still be running. Run:")
    for cmd in recovery:
        log(f"    {cmd}")
    raise SweepError(f"{what} failed: {last}") from last
