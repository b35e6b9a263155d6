"""What a :class:`~kinesis.lease_loop.coordinator.LeaseCoordinator` tells its user, and its status.

* :class:`LeaseListener`: start / stop processing a lease. **Every callback runs on the
  coordinator's tick thread**, one at a time; keep them short (start a reader thread,
  set a flag) and never call ``coordinator.stop()`` from one.
* ``on_handoff_requested`` returns a :data:`Completion`: a :class:`threading.Event` or a
  :class:`concurrent.futures.Future` that the listener completes once processing has
  stopped and the last checkpoint is written (``None`` means "already done"). Until then
  the coordinator keeps renewing the lease; only afterwards does it hand the lease on.
"""

from __future__ import annotations

import concurrent.futures
import logging
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from kinesis.lease_loop.lease_model import Lease, TableSnapshot

log = logging.getLogger("kinesis.lease_loop.coordinator")  # the lease loop logs as the coordinator

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

