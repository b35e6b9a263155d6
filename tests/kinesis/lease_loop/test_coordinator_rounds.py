"""LeaseCoordinator scheduling: light rounds, hand-offs written between rounds, concurrent
writes, and stops that do not wait for a tick.

The started coordinators here use long intervals (a tick every 20 s), so anything the test
sees within a few seconds was done by the mechanism under test, not by a regular round; the
``ticks`` / ``refreshes`` counters prove no round ran in between.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from hashring import StaticMembership
from kinesis.lease_loop.coordinator import LeaseCoordinator
from kinesis.lease_loop.table.leases import LeaseTable
from kinesis.lease_loop.table.model import Lease, TableSnapshot
from kinesis.lease_loop.timing import FakeClock
from kinesis.testing import LocalAWS
from tests.coordinator_fleet import Fleet, shared_client
from tests.support.waiting import eventually

SLOW = {"lease_duration": 60.0, "tick_interval": 20.0, "scan_interval": 20.0}


@pytest.fixture
def table(aws: LocalAWS) -> LeaseTable:
    return LeaseTable.open(shared_client(aws), "rounds-test")


class ManualListener:
    """Hand-offs complete when the test sets their event."""

    def __init__(self) -> None:
        self.acquired: list[str] = []
        self.requested: dict[str, threading.Event] = {}

    def on_lease_acquired(self, lease: Lease) -> None:
        self.acquired.append(lease.key)

    def on_lease_lost(self, lease: Lease) -> None:
        pass

    def on_handoff_requested(self, lease: Lease) -> threading.Event:
        self.requested[lease.key] = threading.Event()
        return self.requested[lease.key]


def owners(table: LeaseTable) -> dict[str, str | None]:
    return {k: v.owner for k, v in table.scan().leases.items()}


def test_a_light_round_adopts_a_handed_off_lease_without_renewing(table: LeaseTable) -> None:
    fleet = Fleet(table, ["k1", "k2"], ["a"])
    fleet.round()
    b = fleet.add("b")
    b._holder.renew_session()  # b runs (a session row), no round yet
    fleet.round(["a"])  # a hands one key to b (its listener finishes at once)
    (key,) = [k for k, o in owners(table).items() if o == "b"]
    b.refresh()
    assert b.holds(key) and fleet.listeners["b"].acquired == [key]
    assert b.counters["adopted"] == 1 and b.counters["refreshes"] == 1
    assert b.counters["renewals"] == 0 and b.counters["ticks"] == 0


def test_a_light_round_takes_over_an_expired_lease_at_expiry(table: LeaseTable) -> None:
    fleet = Fleet(table, ["k1"], ["a", "b"], replicas=1)
    fleet.round()
    (holder,) = [m for m, c in fleet.coordinators.items() if c.held_keys()]
    other = fleet.coordinators["b" if holder == "a" else "a"]
    fleet.crash(holder)
    crashed_at = fleet.clock()
    other.tick()  # has seen the holder's last counter by now
    ticks, step = other.counters["ticks"], fleet.lease_duration / 30
    while not other.held_keys():
        fleet.clock.advance(step)
        other.refresh()  # light rounds only: no tick is due in this test
        assert fleet.clock() - crashed_at <= fleet.lease_duration + step, "not taken at expiry"
    assert fleet.clock() - crashed_at >= fleet.lease_duration - other.tick_interval
    assert other.counters["takeovers"] == 1 and other.counters["ticks"] == ticks


def pending_handoff(table: LeaseTable) -> tuple[LeaseCoordinator, ManualListener, str]:
    """A started coordinator (slow rounds) whose listener was asked to hand one key to b."""
    membership = StaticMembership(["a"], "a")
    listener = ManualListener()
    a = LeaseCoordinator(table, membership, ["k1", "k2"], listener, **SLOW).start()
    eventually(lambda: len(a.held_keys()) == 2, what="a to create both leases")
    table.renew_session("b", "b-session", None)  # b runs: hand-offs may go to it
    membership.set_members(["a", "b"])
    a.tick()  # plans b in and asks the listener to hand one key off
    (key,) = listener.requested
    return a, listener, key


def test_a_finished_handoff_is_written_at_once_not_on_the_next_round(table: LeaseTable) -> None:
    a, listener, key = pending_handoff(table)
    try:
        rounds = (a.counters["ticks"], a.counters["refreshes"])
        listener.requested[key].set()
        eventually(lambda: owners(table)[key] == "b", what="the hand-off write")
        assert (a.counters["ticks"], a.counters["refreshes"]) == rounds  # the loop wrote it
        assert table.get(key).handed_off_by == "a"  # type: ignore[union-attr]
    finally:
        a.stop(graceful=False)


def test_graceful_stop_hands_off_as_each_listener_finishes_without_a_tick(table: LeaseTable) -> None:
    membership = StaticMembership(["a", "b"], "a")
    listener = ManualListener()
    a = LeaseCoordinator(table, membership, ["k1", "k2"], listener, warmup_ticks=0, **SLOW)
    b = LeaseCoordinator(table, StaticMembership(["a", "b"], "b"), ["k1", "k2"], ManualListener(), **SLOW)
    b._holder.renew_session()  # b runs (a session row) but holds back its rounds
    a.tick()  # b is listed but silent: a creates only its own share
    mine = set(a.held_keys())
    assert mine
    ticks = a.counters["ticks"]  # read before start(): its first tick may end at once
    a.start()
    result: list[bool] = []
    stopper = threading.Thread(target=lambda: result.append(a.stop(graceful=True, timeout=30)))
    stopper.start()
    eventually(lambda: set(listener.requested) == mine, what="hand-off requests for every lease")
    for done in listener.requested.values():
        done.set()
    deadline = time.monotonic() + 30
    while stopper.is_alive() and time.monotonic() < deadline:  # a sees its offers adopted: b
        b.tick()  # reads them in its session row (the key its own plan gives a, too)
        stopper.join(0.05)
    assert result == [True]
    assert {k for k, o in owners(table).items() if o == "b"} >= mine
    assert a.counters["handoffs"] == len(mine)
    assert a.counters["ticks"] == ticks + 1  # only the first, scheduled tick at start()


class BarrierTable(LeaseTable):
    """Renewals and row creations wait for each other: they succeed only when concurrent."""

    def __init__(self, client: Any, name: str, parties: int):
        super().__init__(client, name)
        self.barrier = threading.Barrier(parties, timeout=10)
        self.armed = False

    def renew(self, lease: Lease, **kwargs: Any) -> Lease:
        if self.armed:
            self.barrier.wait()
        return super().renew(lease, **kwargs)

    def create_lease_if_absent(self, key: str, **kwargs: Any) -> Lease | None:
        if self.armed:
            self.barrier.wait()
        return super().create_lease_if_absent(key, **kwargs)


def test_renewals_and_takes_of_one_round_are_sent_concurrently(aws: LocalAWS) -> None:
    table = BarrierTable(shared_client(aws), "barrier-test", parties=3).ensure_table()
    clock = FakeClock()
    # a tick of half the lease: the session chain never carries a lease to the next tick, so
    # each tick renews every lease row (as while session renewals fail)
    a = LeaseCoordinator(table, StaticMembership(["a"], "a"), ["k1", "k2", "k3"], lease_duration=3,
                         tick_interval=1.5, clock=clock)
    table.armed = True
    a.tick()  # three creations, each waiting for the other two
    assert a.counters["created"] == 3 and a.counters["lease_loop_errors"] == 0
    clock.advance(a.tick_interval)
    table.barrier.reset()
    a.tick()
    assert a.counters["renewals"] == 3 and a.counters["lease_loop_errors"] == 0
    a.stop(graceful=False)


class BlockingScanTable(LeaseTable):
    """A scan that waits for the test while ``hold`` is set."""

    def __init__(self, client: Any, name: str):
        super().__init__(client, name)
        self.hold = threading.Event()
        self.entered = threading.Event()
        self.release = threading.Event()

    def scan(self, *, page_size: int | None = None, consistent: bool = True) -> TableSnapshot:
        if self.hold.is_set():
            self.entered.set()
            self.release.wait(10)
        return super().scan(page_size=page_size, consistent=consistent)


def test_a_crash_stop_during_a_round_does_not_hand_anything_off(aws: LocalAWS) -> None:
    table = BlockingScanTable(shared_client(aws), "crash-stop-test").ensure_table()
    a = LeaseCoordinator(table, StaticMembership(["a"], "a"), ["k1", "k2"], NoHandoff(),
                         lease_duration=3, tick_interval=1, scan_interval=0.2)
    a.start()
    eventually(lambda: len(a.held_keys()) == 2, what="a to hold both leases")
    table.hold.set()
    assert table.entered.wait(10)  # a round is now inside its scan
    stopper = threading.Thread(target=a.stop, kwargs={"graceful": False})
    stopper.start()
    eventually(lambda: a.status().stopping, what="the stop to be requested")
    table.release.set()  # the round goes on: it must not plan this member out
    stopper.join(10)
    assert not stopper.is_alive()
    assert owners(table) == {"k1": "a", "k2": "a"}  # left to expire, as a crash would
    assert a.counters["handoffs_requested"] == 0 and a.counters["listener_errors"] == 0
    assert a.counters["handoffs"] == 0 and a.counters["releases"] == 0


class NoHandoff(ManualListener):
    """Fails the test if a hand-off is ever requested."""

    def on_handoff_requested(self, lease: Lease) -> threading.Event:
        raise AssertionError(f"hand-off of {lease.key} requested during a crash stop")


class AcquireStamps(ManualListener):
    """Records the coordinator's round counters at each acquisition."""

    def __init__(self) -> None:
        super().__init__()
        self.coordinator: LeaseCoordinator | None = None
        self.stamps: list[tuple[int, int]] = []

    def on_lease_acquired(self, lease: Lease) -> None:
        assert self.coordinator is not None
        counters = self.coordinator.counters
        self.stamps.append((counters["ticks"], counters["refreshes"]))
        super().on_lease_acquired(lease)


def test_a_dead_holders_lease_is_taken_the_moment_it_expires(table: LeaseTable) -> None:
    # ticks every 2 s, no regular light rounds (scan_interval = tick_interval): the lease of
    # a silent holder, first seen at a tick, expires 5 s later, half-way between the ticks at
    # 4 s and 6 s. The 1 s either side is what a loaded machine may delay a round by without
    # a tick doing the take (with 3 s / 1.2 s it was 0.6 s, minus the first scan's duration).
    listener = AcquireStamps()
    b = LeaseCoordinator(table, StaticMembership(["b", "ghost"], "b"), ["k1"], listener,
                         lease_duration=5, tick_interval=2, scan_interval=2, replicas=1)
    listener.coordinator = b
    table.create_lease_if_absent("k1", owner="ghost")  # a holder that never renews
    b.start()
    try:
        eventually(lambda: b.held_keys() == ("k1",), timeout=30,
                   what="b to take the dead holder's lease")
        ticks, refreshes = listener.stamps[0]
        # the round that took it ends: a tick would count a tick, a light round a refresh
        eventually(lambda: (b.counters["ticks"], b.counters["refreshes"]) != (ticks, refreshes),
                   what="the round to end")
        # taken by a round at the expiry, not by a tick
        assert (b.counters["ticks"], b.counters["refreshes"]) == (ticks, refreshes + 1)
        assert b.counters["takeovers"] == 1
    finally:
        b.stop(graceful=False)


def test_a_leaving_member_passes_on_a_lease_handed_to_it_without_processing_it(table: LeaseTable) -> None:
    table.create_lease_if_absent("kx", owner="ghost")  # held by a member the fleet never sees
    fleet = Fleet(table, ["k1", "k2", "kx"], ["a", "b"], manual_handoffs=True)
    fleet.round()
    leaver = next(m for m in ("a", "b") if fleet.coordinators[m].held_keys())
    other = "b" if leaver == "a" else "a"
    coordinator = fleet.coordinators[leaver]
    result: list[bool] = []
    stopper = threading.Thread(target=lambda: result.append(coordinator.stop(graceful=True, timeout=30)))
    stopper.start()  # its own keys wait for a listener that the test finishes later
    eventually(lambda: set(fleet.listeners[leaver].handoffs) == set(coordinator.held_keys()),
               what="hand-off requests")
    ghost = table.get("kx")
    assert ghost is not None
    try:
        table.handoff(ghost, leaver)  # someone hands kx to the member that is leaving
        eventually(lambda: (table.get("kx").owner, table.get("kx").handed_off_by) == (other, leaver),  # type: ignore[union-attr]
                   what="kx passed on to the remaining member")
        assert "kx" not in fleet.listeners[leaver].acquired  # never started processing it
        assert "kx" not in fleet.listeners[leaver].handoffs  # nor asked the listener to stop it
    finally:
        for key in list(fleet.listeners[leaver].handoffs):
            fleet.listeners[leaver].finish(key)
        while stopper.is_alive():  # the stop waits for its offers to be adopted: the other member adopts them
            fleet.tick(other)
            stopper.join(0.05)
    assert result == [True]
    assert not fleet.coordinators[leaver].held_keys()


class CountingCoordinator(LeaseCoordinator):
    """Counts the loop's passes (each computes the next expiry once)."""

    passes = 0

    def _next_expiry(self) -> float:
        self.passes += 1
        return super()._next_expiry()


def test_the_loop_sleeps_between_rounds_instead_of_spinning(table: LeaseTable) -> None:
    # a light-round slot 0.1 s before each tick is skipped (the tick does the work): the loop
    # must then sleep until the tick, not spin through that gap
    a = CountingCoordinator(table, StaticMembership(["a"], "a"), ["k1"], lease_duration=1.2,
                            tick_interval=0.6, scan_interval=0.25)
    a.start()
    try:
        eventually(lambda: a.counters["ticks"] >= 5, what="five ticks")
    finally:
        a.stop(graceful=False)
    rounds = a.counters["ticks"] + a.counters["refreshes"]
    assert a.passes <= 3 * rounds + 5, f"{a.passes} loop passes for {rounds} rounds"


def _denied(operation: str) -> Exception:
    from botocore.exceptions import ClientError

    return ClientError({"Error": {"Code": "AccessDeniedException", "Message": "denied"}}, operation)


class FlakyTable(LeaseTable):
    """Hand-offs and row creations fail with a non-retryable AWS error while armed."""

    def __init__(self, client: Any, name: str):
        super().__init__(client, name)
        self.fail_handoffs = 0
        self.handoff_calls = 0
        self.fail_create: set[str] = set()

    def handoff(self, lease: Lease, to: str, **kwargs: Any) -> Lease:
        self.handoff_calls += 1
        if self.fail_handoffs:
            self.fail_handoffs -= 1
            raise _denied("UpdateItem")
        return super().handoff(lease, to, **kwargs)

    def create_lease_if_absent(self, key: str, **kwargs: Any) -> Lease | None:
        if key in self.fail_create:
            raise _denied("PutItem")
        return super().create_lease_if_absent(key, **kwargs)


def test_a_failing_handoff_write_between_rounds_neither_kills_the_loop_nor_spins(aws: LocalAWS) -> None:
    table = FlakyTable(shared_client(aws), "flaky-handoff").ensure_table()
    a, listener, key = pending_handoff(table)
    try:
        table.fail_handoffs = 1
        listener.requested[key].set()
        eventually(lambda: a.counters["lease_loop_errors"] == 1, what="the failed write")
        assert a.status().running  # the loop survived an unexpected AWS error
        assert table.handoff_calls == 1  # and waits for a round instead of retrying every poll
        a.refresh()  # the next round retries it
        assert owners(table)[key] == "b" and table.handoff_calls == 2
    finally:
        a.stop(graceful=False)


def test_one_failed_take_does_not_lose_the_others(aws: LocalAWS) -> None:
    table = FlakyTable(shared_client(aws), "flaky-take").ensure_table()
    table.fail_create = {"k2"}
    a = LeaseCoordinator(table, StaticMembership(["a"], "a"), ["k1", "k2", "k3"], lease_duration=3,
                         clock=FakeClock())
    a.tick()
    assert a.held_keys() == ("k1", "k3")  # written and registered despite k2's error
    assert owners(table) == {"k1": "a", "k3": "a"} and a.counters["lease_loop_errors"] == 1
    a.stop(graceful=False)


def test_later_stop_calls_return_the_first_calls_result(table: LeaseTable) -> None:
    a = LeaseCoordinator(table, StaticMembership(["a"], "a"), ["k1"], lease_duration=3, clock=FakeClock())
    a.tick()
    assert a.stop(graceful=False) is False  # a crash leaves the lease to expire
    assert a.stop() is False and a.stop(graceful=True) is False


def test_expiry_rounds_do_not_spin_on_a_frozen_fake_clock(table: LeaseTable) -> None:
    table.create_lease_if_absent("k1", owner="ghost")
    clock = FakeClock()
    a = CountingCoordinator(table, StaticMembership(["a", "ghost"], "a"), ["k1"], lease_duration=1.2,
                            tick_interval=0.6, scan_interval=0.6, clock=clock)
    a.start()  # real-time rounds; the clock never advances, so k1 never expires
    try:
        eventually(lambda: a.counters["ticks"] >= 4, what="four ticks")
    finally:
        a.stop(graceful=False)
    assert a.counters["refreshes"] <= 1, "one expiry round at most, not one every 5 ms"
