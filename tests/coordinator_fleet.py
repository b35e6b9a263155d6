"""Test harness: several LeaseCoordinators over one moto lease table, driven tick by tick.

Time is a shared :class:`FakeClock`; nothing sleeps. ``Fleet.round()`` ticks every live
member once (in a chosen order) and then advances the clock by one tick interval.
``Fleet.check()`` asserts the safety invariant after every tick: no key is held (in the
sense of ``coordinator.holds(key)``, i.e. "may process now") by two members at once, and
no two listeners process one key at once.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from typing import Any

from hashring import StaticMembership
from kinesis.lease_loop.coordinator import Completion, LeaseCoordinator
from kinesis.lease_loop.table.leases import LeaseTable
from kinesis.lease_loop.table.model import Lease
from kinesis.lease_loop.timing import FakeClock
from kinesis.testing import LocalAWS
from tests.support.memory_dynamodb import MemoryDynamoDB

_clients: dict[tuple[str, str], Any] = {}


def shared_client(aws: LocalAWS, name: str = "default", **kwargs: Any) -> Any:
    """A DynamoDB client reused across tests (creating one costs ~0.2 s). Never register
    event hooks on it: tests that inject faults build their own client."""
    key = (aws.endpoint_url, name)
    if key not in _clients:
        _clients[key] = aws.client("dynamodb", **kwargs)
    return _clients[key]


class Processing:
    """Which member processes which key, shared by every listener of a fleet.

    A member processes a key from ``on_lease_acquired`` until ``on_lease_lost`` or until
    it completes the hand-off, and only while its coordinator ``holds()`` the key: like
    the worker, it checks ``holds()`` before each batch, so a member whose tick thread
    stalled past the lease's validity stops before the callback that tells it so.
    """

    def __init__(self, holds: Callable[[str, str], bool] = lambda member, key: True) -> None:
        self.by_key: dict[str, str] = {}
        self.violations: list[str] = []
        self.starts: list[tuple[str, str, Any]] = []  # (member, key, checkpoint at start)
        self.holds = holds

    def start(self, member: str, lease: Lease) -> None:
        other = self.by_key.get(lease.key)
        if other is not None and other != member and self.holds(other, lease.key):
            self.violations.append(f"{member} started {lease.key} while {other} processes it")
        self.by_key[lease.key] = member
        self.starts.append((member, lease.key, lease.checkpoint))

    def stop(self, member: str, key: str) -> None:
        if self.by_key.get(key) == member:
            del self.by_key[key]

    def start_session(self, member: str) -> None:
        """``member`` runs (its session row is written) before its first round: hand-offs go
        only to members with a session row."""
        self.coordinators[member]._holder.renew_session()

    def crash(self, member: str) -> None:
        for key in [k for k, m in self.by_key.items() if m == member]:
            del self.by_key[key]


class FleetListener:
    """Records callbacks; completes hand-offs at once unless ``manual`` (then call ``finish``)."""

    def __init__(self, member: str, processing: Processing, *, manual: bool = False):
        self.member = member
        self.processing = processing
        self.manual = manual
        self.acquired: list[str] = []
        self.lost: list[str] = []
        self.handoffs: dict[str, threading.Event] = {}
        self.before_finish: Callable[[str], None] | None = None

    def on_lease_acquired(self, lease: Lease) -> None:
        self.acquired.append(lease.key)
        self.processing.start(self.member, lease)

    def on_lease_lost(self, lease: Lease) -> None:
        self.lost.append(lease.key)
        self.processing.stop(self.member, lease.key)

    def on_handoff_requested(self, lease: Lease) -> Completion:
        done = threading.Event()
        self.handoffs[lease.key] = done
        if not self.manual:
            self.finish(lease.key)
        return done

    def finish(self, key: str) -> None:
        if self.before_finish is not None:
            self.before_finish(key)
        self.processing.stop(self.member, key)
        self.handoffs[key].set()


class Fleet:
    """N coordinators (StaticMembership views kept in sync) over one table."""

    def __init__(
        self,
        table: LeaseTable,
        keys: Iterable[str] | Callable[[Any], Iterable[str]],
        members: Iterable[str],
        *,
        lease_duration: float = 3.0,
        manual_handoffs: bool = False,
        member_kwargs: Callable[[str, Fleet], dict[str, Any]] | None = None,
        **coordinator_kwargs: Any,
    ):
        self.table = table
        self.keys = keys
        self.clock = FakeClock(1000.0)
        self.lease_duration = lease_duration
        self.manual = manual_handoffs
        self.kwargs = coordinator_kwargs
        self.member_kwargs = member_kwargs  # each member's own coordinator arguments
        self.processing = Processing(self._holds)
        self.coordinators: dict[str, LeaseCoordinator] = {}
        self.listeners: dict[str, FleetListener] = {}
        self.memberships: dict[str, StaticMembership] = {}
        self.crashed: set[str] = set()
        self.member_list: list[str] = []
        for member in members:
            self.add(member)

    def _holds(self, member: str, key: str) -> bool:
        coordinator = self.coordinators.get(member)
        return coordinator is not None and member not in self.crashed and coordinator.holds(key)

    @property
    def tick_interval(self) -> float:
        return next(iter(self.coordinators.values())).tick_interval

    def add(self, member: str, *, visible: bool = True) -> LeaseCoordinator:
        if visible:
            self.member_list = sorted({*self.member_list, member})
        membership = StaticMembership(self.member_list or [member], member)
        listener = FleetListener(member, self.processing, manual=self.manual)
        coordinator = LeaseCoordinator(
            self.table,
            membership,
            self.keys,
            listener,
            lease_duration=self.lease_duration,
            clock=self.clock,
            **self.kwargs,
            **(self.member_kwargs(member, self) if self.member_kwargs is not None else {}),
        )
        self.coordinators[member] = coordinator
        self.listeners[member] = listener
        self.memberships[member] = membership
        self.sync_membership()
        return coordinator

    def sync_membership(self, members: Iterable[str] | None = None) -> None:
        if members is not None:
            self.member_list = sorted(members)
        for membership in self.memberships.values():
            membership.set_members(self.member_list)

    def live(self) -> list[str]:
        return [m for m, c in self.coordinators.items() if m not in self.crashed and not c.status().stopping]

    def tick(self, member: str) -> None:
        self.coordinators[member].tick()
        self.check()

    def round(self, order: Iterable[str] | None = None, *, advance: bool = True) -> None:
        for member in order if order is not None else sorted(self.live()):
            self.tick(member)
        if advance:
            self.clock.advance(self.tick_interval)

    def start_session(self, member: str) -> None:
        """``member`` runs (its session row is written) before its first round: hand-offs go
        only to members with a session row."""
        self.coordinators[member]._holder.renew_session()

    def crash(self, member: str) -> None:
        """The process dies: it stops ticking and its processing stops (nothing graceful)."""
        self.crashed.add(member)
        self.processing.crash(member)

    def holders(self) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {}
        for member, coordinator in self.coordinators.items():
            if member in self.crashed:
                continue
            for key in coordinator.held_keys():
                if coordinator.holds(key):
                    out.setdefault(key, []).append(member)
        return out

    def check(self) -> None:
        doubled = {k: v for k, v in self.holders().items() if len(v) > 1}
        assert not doubled, f"keys held by two members at once: {doubled}"
        assert not self.processing.violations, self.processing.violations

    def counts(self, members: Iterable[str] | None = None) -> dict[str, int]:
        names = list(members) if members is not None else self.live()
        return {m: len(self.coordinators[m].held_keys()) for m in names}

    def table_owners(self) -> dict[str, str | None]:
        return {k: lease.owner for k, lease in self.table.scan().leases.items()}

    def counter(self, name: str) -> int:
        return sum(c.counters[name] for c in self.coordinators.values())


def memory_table(memory: MemoryDynamoDB | None = None, name: str = "liveness") -> LeaseTable:
    """A lease table over an in-memory DynamoDB (no retry sleeps)."""
    return LeaseTable(memory or MemoryDynamoDB(), name, retry_attempts=2, sleep=lambda s: None).ensure_table()


def settle(fleet: Fleet, rounds: int | None = None) -> None:
    """Run rounds past the start-up and a new plan's settling window (two lease durations)."""
    for _ in range(rounds if rounds is not None else int(3 * fleet.lease_duration / fleet.tick_interval) + 2):
        fleet.round()
