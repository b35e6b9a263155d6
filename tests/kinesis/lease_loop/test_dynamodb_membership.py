"""DynamoDBMembership: heartbeat rows in the lease table, liveness on the observer's clock."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from hashring import HashRing, Membership, owners_of
from kinesis.errors import ConfigurationError, DuplicateMemberIdError, InvalidLeaseKeyError
from kinesis.lease_loop.coordinator import LeaseCoordinator
from kinesis.lease_loop.membership import HEARTBEAT_CHORE, DynamoDBMembership
from kinesis.lease_loop.table.leases import LeaseTable
from kinesis.lease_loop.table.model import MEMBER_PREFIX
from kinesis.lease_loop.timing import FakeClock
from kinesis.testing import LocalAWS
from tests.coordinator_fleet import shared_client


@pytest.fixture
def table(aws: LocalAWS) -> LeaseTable:
    return LeaseTable.open(shared_client(aws), "membership-test")


def member(table: LeaseTable, name: str, clock: FakeClock, **kwargs: Any) -> DynamoDBMembership:
    return DynamoDBMembership(table, name, member_timeout=6.0, clock=clock, **kwargs)


def test_implements_the_membership_protocol_and_self_joins_on_first_heartbeat(table: LeaseTable) -> None:
    clock = FakeClock()
    a = member(table, "a", clock)
    assert isinstance(a, Membership) and a.self_id == "a"
    assert a.members() == ()  # not a member before its first heartbeat
    v0 = a.version
    a.heartbeat()
    assert a.members() == ("a",) and a.version != v0
    assert HashRing(a).can_acquire_lease("c", "shard-0")


def test_members_see_each_other_and_version_changes_only_with_the_list(table: LeaseTable) -> None:
    clock = FakeClock()
    a, b = member(table, "a", clock), member(table, "b", clock)
    a.heartbeat()
    b.heartbeat()
    assert a.refresh() == ("a", "b") and b.refresh() == ("a", "b")
    version = a.version
    for _ in range(5):  # heartbeats and refreshes that change nothing keep the version
        clock.advance(1)
        a.heartbeat()
        b.heartbeat()
        a.refresh()
        assert a.version == version and a.members() == ("a", "b")


def test_a_silent_member_drops_out_after_member_timeout_on_the_observer_clock(table: LeaseTable) -> None:
    clock = FakeClock()
    a, b = member(table, "a", clock), member(table, "b", clock)
    a.heartbeat()
    b.heartbeat()
    a.refresh()
    for _ in range(5):  # b stops heartbeating; a keeps going
        clock.advance(1.0)
        a.heartbeat()
        assert a.refresh() == ("a", "b")
    clock.advance(1.0)
    a.heartbeat()
    assert a.refresh() == ("a",)  # 6 s without a change
    b.heartbeat()  # b comes back
    assert a.refresh() == ("a", "b")


def test_a_new_observer_counts_an_unknown_row_live_at_once_then_times_it(table: LeaseTable) -> None:
    clock = FakeClock()
    dead = member(table, "dead", clock)
    dead.heartbeat()  # then the process dies, leaving its row behind
    clock.advance(100)
    late = member(table, "late", clock)
    late.heartbeat()
    assert late.refresh() == ("dead", "late")  # first sight: live, and its timer starts now
    clock.advance(5.9)
    late.heartbeat()
    assert late.refresh() == ("dead", "late")
    clock.advance(0.1)
    late.heartbeat()
    assert late.refresh() == ("late",)


def test_self_drops_out_when_its_heartbeats_stop_succeeding(table: LeaseTable) -> None:
    clock = FakeClock()
    a = member(table, "a", clock)
    a.heartbeat()
    clock.advance(6.0)
    assert a.members() == ()  # its last successful heartbeat is too old


def test_leave_deletes_the_row_so_others_drop_the_member_at_once(table: LeaseTable) -> None:
    clock = FakeClock()
    a, b = member(table, "a", clock), member(table, "b", clock)
    a.heartbeat()
    b.heartbeat()
    assert a.refresh() == ("a", "b")
    b.leave()
    assert b.members() == ("a",)  # b no longer counts itself
    assert a.refresh() == ("a",)  # no timeout needed
    assert b.heartbeat() is None  # a member that left stays out


def test_restart_with_the_same_id_takes_over_and_the_old_process_steps_down(table: LeaseTable) -> None:
    clock = FakeClock()
    old = member(table, "pod-0", clock)
    old.heartbeat()
    new = member(table, "pod-0", clock)  # the pod restarted: a new incarnation
    new.heartbeat()
    new.heartbeat()
    with pytest.raises(DuplicateMemberIdError, match="unique id"):
        old.heartbeat()
    assert old.members() == () and new.members() == ("pod-0",)


def test_stale_rows_are_garbage_collected(table: LeaseTable) -> None:
    clock = FakeClock()
    a = member(table, "a", clock, stale_row_timeout=12.0)
    gone = member(table, "gone", clock)
    gone.heartbeat()
    a.heartbeat()
    a.refresh()
    for _ in range(4):
        clock.advance(3.0)
        a.heartbeat()
        a.refresh()
    assert "gone" not in table.scan().members and a.rows_collected == 1
    gone.heartbeat()  # it was only paused: its row is recreated
    assert a.refresh() == ("a", "gone")


def test_one_member_cleans_up_stale_rows_and_the_next_takes_over_when_it_dies(
    table: LeaseTable, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = FakeClock()
    a, b = (member(table, name, clock, stale_row_timeout=12.0) for name in ("a", "b"))
    owner_id = owners_of("__chore__", HEARTBEAT_CHORE, ["a", "b"])[0]  # the reserved ring key
    owner, other = (a, b) if owner_id == "a" else (b, a)
    attempts: list[str] = []
    real_delete = table.delete_member

    def counting_delete(member_id: str, **kwargs: Any) -> bool:
        attempts.append(member_id)
        return real_delete(member_id, **kwargs)

    monkeypatch.setattr(table, "delete_member", counting_delete)
    gone = member(table, "gone", clock)
    gone.heartbeat()
    for _ in range(5):  # 15 s: "gone" is stale after 12
        for m in (a, b):
            m.heartbeat()
            m.refresh()
        clock.advance(3.0)
    assert owner.owns_cleanup() and not other.owns_cleanup()
    assert attempts == ["gone"] and owner.rows_collected == 1 and other.rows_collected == 0

    gone.heartbeat()  # back, then silent again; and the chore owner dies too
    attempts.clear()
    for _ in range(6):  # 18 s: the owner drops out after 6, both rows are stale after 12
        other.heartbeat()
        other.refresh()
        clock.advance(3.0)
    other.refresh()
    assert other.owns_cleanup() and other.members() == (other.self_id,)
    assert sorted(attempts) == sorted(["gone", owner.self_id]) and other.rows_collected == 2
    assert set(table.scan().members) == {other.self_id}


def test_heartbeat_rows_never_mix_with_leases(table: LeaseTable) -> None:
    clock = FakeClock()
    member(table, "a", clock).heartbeat()
    table.create_lease_if_absent("shard-1")
    snapshot = table.scan()
    assert list(snapshot.leases) == ["shard-1"] and list(snapshot.members) == ["a"]
    with pytest.raises(InvalidLeaseKeyError):
        table.create_lease_if_absent(MEMBER_PREFIX + "a")


@pytest.mark.parametrize(
    "kwargs",
    [
        {"member_timeout": 0},
        {"member_timeout": 6, "heartbeat_interval": 4},
        {"member_timeout": 6, "stale_row_timeout": 3},
        {"refresh_interval": -1},
    ],
)
def test_configuration_errors(table: LeaseTable, kwargs: dict[str, Any]) -> None:
    with pytest.raises(ConfigurationError):
        DynamoDBMembership(table, "a", **kwargs)


@pytest.mark.parametrize("bad", ["", "__x"])
def test_bad_member_ids(table: LeaseTable, bad: str) -> None:
    with pytest.raises(ValueError):
        DynamoDBMembership(table, bad)


def test_background_thread_heartbeats_and_refreshes(table: LeaseTable) -> None:
    a = DynamoDBMembership(table, "a", member_timeout=0.6).start()
    b = DynamoDBMembership(table, "b", member_timeout=0.6).start()
    try:
        deadline = time.monotonic() + 10
        while a.members() != ("a", "b") or b.members() != ("a", "b"):
            assert time.monotonic() < deadline, (a.members(), b.members())
            threading.Event().wait(0.05)
        b.stop()  # b's process hangs: its row stays, but stops changing
        deadline = time.monotonic() + 10
        while a.members() != ("a",):
            assert time.monotonic() < deadline, a.members()
            threading.Event().wait(0.05)
    finally:
        a.stop()
        b.stop()


def test_coordinators_drive_the_membership_and_balance(table: LeaseTable) -> None:
    clock = FakeClock()
    keys = [f"partition-{i}" for i in range(9)]
    memberships = {m: member(table, m, clock) for m in ("a", "b", "c")}
    coordinators = {
        m: LeaseCoordinator(table, ms, keys, lease_duration=6.0, clock=clock) for m, ms in memberships.items()
    }
    for _ in range(3):
        for c in coordinators.values():
            c.tick()
        clock.advance(2.0)
    held = {m: len(c.held_keys()) for m, c in coordinators.items()}
    assert held == {"a": 3, "b": 3, "c": 3}
    assert all(ms.members() == ("a", "b", "c") for ms in memberships.values())
    # a crashed member drops out of the membership after member_timeout; leases follow
    del coordinators["c"]
    for _ in range(6):
        for c in coordinators.values():
            c.tick()
        clock.advance(2.0)
    assert memberships["a"].members() == ("a", "b")
    assert {m: len(c.held_keys()) for m, c in coordinators.items()} in ({"a": 5, "b": 4}, {"a": 4, "b": 5})
    # graceful stop leaves the membership first, then hands off: b gets everything at once
    assert coordinators["a"].stop(graceful=True)
    coordinators["b"].tick()
    assert len(coordinators["b"].held_keys()) == 9 and memberships["b"].members() == ("b",)


def test_coordinator_checks_member_timeout_against_its_tick(table: LeaseTable) -> None:
    ms = DynamoDBMembership(table, "a", member_timeout=1.0)
    with pytest.raises(ConfigurationError, match="member_timeout"):
        LeaseCoordinator(table, ms, ["k"], lease_duration=3.0)


def test_reading_the_version_does_not_rebuild_the_member_list(table: LeaseTable) -> None:
    clock = FakeClock()
    a, b = member(table, "a", clock), member(table, "b", clock)
    a.heartbeat()
    b.heartbeat()
    assert a.refresh() == ("a", "b")
    version, rebuilds = a.version, a.rebuilds
    for _ in range(1000):  # the hot path: HashRing reads the version on every lookup
        assert a.version == version
    assert a.rebuilds == rebuilds
    clock.advance(6.0)  # b's (and a's own) liveness ran out: the next read notices
    assert a.version != version and a.members() == ()
    assert a.rebuilds == rebuilds + 1
    b.heartbeat()
    a.heartbeat()
    a.refresh()
    assert a.members() == ("a", "b")
