"""What a :class:`~kinesis.lease_loop.coordinator.LeaseCoordinator` tells its user, and its status.

* :class:`LeaseListener`: start / stop processing a lease. **Every callback runs on the
  coordinator's tick thread**, one at a time; keep them short (start a reader thread,
  set a flag) and never call ``coordinator.stop()`` from one.
* ``on_handoff_requested`` returns a :data:`Completion`: a :class:`threading.Event` or a
  :class:`concurrent.futures.Future` that the listener completes once processing has
  stopped and the last checkpoint is written (``None`` means "already done"). Until then
  the coordinator keeps renewing the lease; only afterwards does it hand the lease on.

``RoundRecord``: what a coordinator's rounds leave for ``status()`` to report.

The number of ticks and when the last one ended, when the table was last read and the
last error (a round that failed, or a member list that could not be read; cleared by the
next table read). The round writes these plain values under the round lock, replacing
each whole, so any thread may read them. A failed round is counted
(``lease_loop_errors``) and logged: a table error (a :class:`~kinesis.errors.KinesisHashRingError`)
as a warning, anything else with its traceback.
"""

from __future__ import annotations

import concurrent.futures
import logging
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from kinesis.errors import KinesisHashRingError
from kinesis.lease_loop.table.model import Lease, TableSnapshot
from kinesis.lease_loop.timing import Clock

log = logging.getLogger(__name__)

Completion = threading.Event | concurrent.futures.Future[Any] | None
"""What ``on_handoff_requested`` returns: done when the listener has stopped processing."""

ResourceProvider = Callable[[TableSnapshot], Iterable[str]]
"""Called once per tick with the fresh table snapshot: the keys that may be planned now."""


@runtime_checkable
class LeaseListener(Protocol):
    """What the coordinator tells its user (the worker). All calls come from the tick thread."""

    def on_lease_acquired(self, lease: Lease) -> None:
        """Start processing ``lease`` from ``lease.checkpoint`` (taken, created or adopted)."""
        ...

    def on_lease_lost(self, lease: Lease) -> None:
        """Stop processing now: another member holds the lease (do not checkpoint)."""
        ...

    def on_handoff_requested(self, lease: Lease) -> Completion:
        """Stop processing and checkpoint; complete the returned Event/Future when done."""
        ...


class NullListener:
    """A listener for resources that need no start/stop work (hand-offs complete at once)."""

    def on_lease_acquired(self, lease: Lease) -> None:
        pass

    def on_lease_lost(self, lease: Lease) -> None:
        pass

    def on_handoff_requested(self, lease: Lease) -> Completion:
        return None


class GuardedListener:
    """Calls a listener for one member: an exception is logged and counted, never raised
    into the lease loop."""

    def __init__(self, listener: LeaseListener, member_id: str, count: Callable[[str], None]):
        self.listener = listener
        self._me = member_id
        self._count = count

    def call(self, method: str, lease: Lease) -> bool:
        """``listener.<method>(lease)``; False if it raised."""
        try:
            getattr(self.listener, method)(lease)
            return True
        except Exception:
            self._count("listener_errors")
            log.exception("%s: listener.%s(%s) failed", self._me, method, lease.key)
            return False

    def request_handoff(self, lease: Lease) -> Completion:
        """``listener.on_handoff_requested(lease)``; None ("done") if it raised."""
        try:
            return self.listener.on_handoff_requested(lease)
        except Exception:
            self._count("listener_errors")
            log.exception("%s: on_handoff_requested(%s) failed", self._me, lease.key)
            return None


def completion_done(completion: Completion) -> bool:
    """True once ``completion`` (Event, Future or None) is done."""
    if completion is None:
        return True
    if isinstance(completion, threading.Event):
        return completion.is_set()
    return completion.done()


@dataclass(frozen=True)
class CoordinatorStatus:
    """A snapshot of a coordinator's state, for health checks, logs and metrics."""

    member_id: str
    running: bool
    stopping: bool
    held: tuple[str, ...]
    pending_handoffs: Mapping[str, str | None]
    """Key -> planned new owner (None: the lease will be released)."""
    suspects: tuple[str, ...]
    ticks: int
    last_tick_at: float | None
    """The coordinator clock at the end of the last tick (None before the first)."""
    counters: Mapping[str, int]
    last_table_read_at: float | None = None
    """The coordinator clock at the last successful read of the lease table."""
    last_membership_at: float | None = None
    """The coordinator clock at the last successful read of the member list."""
    last_error: str | None = None
    """The last lease-loop error (table or membership), cleared by the next success."""


COUNTER_NAMES = (
    "ticks",
    "refreshes",
    "created",
    "acquired",
    "adopted",
    "takeovers",
    "orphans_taken",
    "offers_withdrawn",
    "recovered",
    "take_conflicts",
    "handoffs_requested",
    "handoffs",
    "handoffs_resumed",
    "offers_retold",
    "handoff_timeouts",
    "releases",
    "renewals",
    "renew_failures",
    "leases_lost",
    "checkpoints",
    "checkpoints_prepared",
    "lease_loop_errors",
    "listener_errors",
    "membership_errors",
    "plans_published",
    "plan_errors",
)
"""The counters in :attr:`CoordinatorStatus.counters` (all start at 0)."""


class RoundRecord:
    """The rounds of ``member_id`` so far (see the module docs)."""

    def __init__(self, member_id: str, count: Callable[[str], None], clock: Clock):
        self._me = member_id
        self._count = count
        self._clock = clock
        self.ticks = 0
        self.last_tick_at: float | None = None
        self.last_table_read_at: float | None = None
        self.last_error: str | None = None

    def table_read(self) -> None:
        """The table was read now: no error stands."""
        self.last_table_read_at = self._clock()
        self.last_error = None

    def failed(self, exc: Exception) -> None:
        """A round raised ``exc`` (call from the ``except`` block: the log has the traceback)."""
        self._count("lease_loop_errors")
        self.last_error = f"{type(exc).__name__}: {exc}"
        if isinstance(exc, KinesisHashRingError):
            log.warning("%s: lease loop round failed: %s", self._me, exc)
        else:
            log.exception("%s: lease loop round failed", self._me)

    def finished(self, *, full: bool) -> None:
        """A round ended (``full``: a tick, else a light round), failed or not."""
        if full:
            self.ticks += 1
            self._count("ticks")
            self.last_tick_at = self._clock()
        else:
            self._count("refreshes")
