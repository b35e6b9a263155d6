"""LeaseCoordinator with ``reads="scoped"``: no scan in steady state, same safety.

The plan is ``stable_assignment(members, keys)``; a round reads only the rows planned for the
member and not held, and its backup keys every ``backup_check_interval``. Driven tick by tick
on a FakeClock against moto (tests/coordinator_fleet.py), with ``Fleet.check()`` after every
tick: no key held by two members at once, no two listeners processing one key.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from hashring import StaticMembership, stable_assignment
from kinesis.errors import ConfigurationError
from kinesis.lease_loop.coordinator import LeaseCoordinator
from kinesis.lease_loop.membership import DynamoDBMembership
from kinesis.lease_loop.table.leases import LeaseTable
from kinesis.testing import LocalAWS
from tests.coordinator_fleet import Fleet

KEYS = [f"queue-{i:02d}" for i in range(24)]


class CountedFleet(Fleet):
    """A fleet whose members' DynamoDB calls are counted by operation."""

    def __init__(self, aws: LocalAWS, keys: list[str], members: list[str], **kwargs: Any):
        self.calls: Counter[str] = Counter()
        client = aws.client("dynamodb")

        def count(model: Any, **_: Any) -> None:
            self.calls[model.name] += 1

        client.meta.events.register("before-call.dynamodb", count)
        super().__init__(LeaseTable.open(client, "scoped-test"), keys, members, reads="scoped", **kwargs)


def spread(counts: dict[str, int]) -> int:
    return max(counts.values()) - min(counts.values())


def test_balanced_by_the_stable_plan_and_no_scan_in_steady_state(aws: LocalAWS) -> None:
    fleet = CountedFleet(aws, KEYS, ["a", "b", "c"])
    fleet.round()  # the start-up sweep (one scan each) and the first takes
    fleet.round()
    assert fleet.counts() == {"a": 8, "b": 8, "c": 8}
    plan = stable_assignment(["a", "b", "c"], KEYS, replicas=1)
    assert fleet.table_owners() == {k: plan.owner(k) for k in KEYS}
    scans = fleet.calls["Scan"]
    for _ in range(int(5 * fleet.lease_duration / fleet.tick_interval)):  # 5 lease durations
        fleet.round()
    assert fleet.calls["Scan"] == scans  # steady state: no scan (the sweep is every 10 D)
    assert fleet.counter("handoffs") == 0 and fleet.counter("takeovers") == 0


def test_a_slow_sweep_runs_on_two_members_only(aws: LocalAWS) -> None:
    members = ["a", "b", "c", "d", "e"]
    fleet = CountedFleet(aws, KEYS[:10], members, sweep_interval=6.0)
    fleet.round()
    assert fleet.calls["Scan"] == 5  # every member reads the table once at start
    for _ in range(int(12.0 / fleet.tick_interval)):
        fleet.round()
    assert fleet.calls["Scan"] == 5 + 2 * 2  # two sweeps per interval, by the chore's two owners


def test_scale_out_hands_off_to_the_newcomer_without_overlap(aws: LocalAWS) -> None:
    fleet = CountedFleet(aws, KEYS, ["a", "b", "c"])
    fleet.round()
    fleet.round()
    fleet.add("d")
    rounds = 0
    while spread(fleet.counts()) > 1 or sum(fleet.counts().values()) != len(KEYS):
        fleet.round()
        rounds += 1
        assert rounds <= 10, fleet.counts()
    assert fleet.counts() == {"a": 6, "b": 6, "c": 6, "d": 6}
    assert fleet.counter("takeovers") == 0  # every move was a graceful hand-off
    # moves within 1.5x the optimum (the newcomer's quota)
    assert fleet.counter("handoffs") <= 1.5 * 6


@pytest.mark.parametrize("check_ticks", [1, 2])
def test_a_crashed_member_is_taken_over_by_its_watcher_after_one_lease_duration(
    aws: LocalAWS, check_ticks: int
) -> None:
    # the watcher samples b's session row every backup_check_interval (default
    # lease_duration / 2: here, with ticks only, every second tick) and times all of b's
    # leases from the first sight of its last session renewal: every one of them is taken
    # within a lease duration plus that interval of b's last renewal, in one round
    fleet = CountedFleet(aws, KEYS, ["a", "b", "c"], replicas=1, backup_check_interval=float(check_ticks))
    for _ in range(int(2 * fleet.lease_duration / fleet.tick_interval) + 2):
        fleet.round()  # past the settling window (samples every tick while a new plan settles)
    victim_keys = set(fleet.coordinators["b"].held_keys())
    fleet.crash("b")  # still listed: only its watcher's reads can notice
    crashed_at = fleet.clock()
    last_renewal = crashed_at - fleet.tick_interval  # b's last round
    first_taken: float | None = None
    while any(fleet.table_owners()[k] == "b" for k in victim_keys):
        taken_at = fleet.clock()
        fleet.round()
        if first_taken is None and any(fleet.table_owners()[k] != "b" for k in victim_keys):
            first_taken = taken_at
        assert taken_at - last_renewal <= fleet.lease_duration + check_ticks * fleet.tick_interval
    assert first_taken is not None and first_taken - last_renewal >= fleet.lease_duration
    assert taken_at == first_taken  # all of b's leases in the same round
    assert fleet.counter("takeovers") == len(victim_keys)
    # b's successor in the sorted member list (c) backs up all of b's keys: it alone noticed,
    # took them all, and suspects b; every member still makes the same plan (b listed)
    assert {k for k, o in fleet.table_owners().items() if o == "c"} >= victim_keys
    assert fleet.coordinators["c"].status().suspects == ("b",)
    assert fleet.coordinators["a"].status().suspects == ()
    for _ in range(3):  # no hand-off goes to the suspect while it stays listed
        fleet.round()
        assert "b" not in fleet.table_owners().values()
    # once the member list drops b, a and c even out by graceful hand-offs
    fleet.sync_membership(["a", "c"])
    takeovers = fleet.counter("takeovers")
    for _ in range(6):
        if spread(fleet.counts(["a", "c"])) <= 1 and sum(fleet.counts(["a", "c"]).values()) == len(KEYS):
            break
        fleet.round(["a", "c"])
    assert fleet.counts(["a", "c"]) == {"a": 12, "c": 12}
    assert fleet.counter("takeovers") == takeovers


def test_each_member_samples_only_its_predecessor(aws: LocalAWS) -> None:
    members = [f"m{i}" for i in range(6)]
    fleet = CountedFleet(aws, KEYS, members, replicas=1)
    fleet.round()
    fleet.round()
    before = fleet.calls["BatchGetItem"]
    rounds = 6
    for _ in range(rounds):
        fleet.round()
    # steady state: one BatchGetItem per member per backup check (its predecessor's session row)
    assert fleet.calls["BatchGetItem"] - before <= rounds * len(members)
    for i, m in enumerate(members):
        index = fleet.coordinators[m]._scoped.index(fleet.coordinators[m].last_plan)  # type: ignore[arg-type]
        assert set(index.backed_up) == {members[i - 1]}


def test_graceful_stop_hands_everything_off(aws: LocalAWS) -> None:
    fleet = CountedFleet(aws, KEYS, ["a", "b", "c"])
    fleet.round()
    fleet.round()
    leaving = fleet.coordinators["b"]
    held = set(leaving.held_keys())
    fleet.sync_membership(["a", "c"])
    assert leaving.stop(graceful=True, timeout=5) is True
    for _ in range(3):  # b's leases are adopted at once; a and c may even out by one more hand-off
        fleet.round(["a", "c"])
    assert fleet.counts(["a", "c"]) == {"a": 12, "c": 12}
    assert fleet.counter("takeovers") == 0 and fleet.counter("adopted") >= len(held)


def test_a_handoff_to_a_dead_member_is_withdrawn(aws: LocalAWS) -> None:
    fleet = CountedFleet(aws, KEYS[:12], ["a", "b", "c"], replicas=1)
    fleet.round()
    fleet.round()
    fleet.add("d", visible=False)
    fleet.coordinators["d"].tick()  # it ran once (a session row), then died before it was listed
    fleet.crash("d")
    fleet.sync_membership(["a", "b", "c", "d"])
    stalled = Counter[str]()
    for _ in range(int(4 * fleet.lease_duration / fleet.tick_interval)):
        fleet.round()
        for key, owner in fleet.table_owners().items():
            stalled[key] = stalled[key] + 1 if owner == "d" else 0
            assert stalled[key] <= 2, (key, stalled)
    # the members that offered took their offers back (nobody else reads those rows)
    assert fleet.counter("handoffs") >= 1 and fleet.counter("offers_withdrawn") >= 1


def test_nothing_is_handed_off_to_a_listed_member_that_never_ran(aws: LocalAWS) -> None:
    fleet = CountedFleet(aws, KEYS[:12], ["a", "b", "c"], replicas=1)
    fleet.round()
    fleet.round()
    fleet.add("d")
    fleet.crash("d")  # listed, never runs: it has no session row, so no offer goes to it
    for _ in range(int(4 * fleet.lease_duration / fleet.tick_interval)):
        fleet.round()
        assert "d" not in fleet.table_owners().values()
    assert fleet.counter("handoffs") == 0 and fleet.counter("handoffs_requested") == 0


def test_scoped_reads_refuse_a_membership_fed_by_the_scan(aws: LocalAWS) -> None:
    table = LeaseTable.open(aws.client("dynamodb"), "scoped-test")
    with pytest.raises(ConfigurationError, match="reads='scoped' needs a membership"):
        LeaseCoordinator(table, DynamoDBMembership(table, "a"), KEYS, reads="scoped")
    with pytest.raises(ConfigurationError, match="reads must be 'scan' or 'scoped'"):
        LeaseCoordinator(table, StaticMembership(["a"], "a"), KEYS, reads="index")


def test_a_table_written_by_the_scan_loop_is_used_as_it_is(aws: LocalAWS) -> None:
    # scoped reads need no index and no new attribute: a table the default loop (and 0.1.0)
    # wrote keeps its rows and checkpoints when a fleet switches to reads="scoped" (rolling:
    # the old fleet crashes, the new one takes the rows over once they expire)
    table = LeaseTable.open(aws.client("dynamodb"), "scoped-test")
    old = Fleet(table, KEYS, ["a", "b", "c"])
    old.round()
    old.round()
    key = KEYS[5]
    holder = old.coordinators[old.table.scan().leases[key].owner or ""]
    holder.checkpoint(key, "49590338271490256608559692538361571095921575989136588898")
    for member in ("a", "b", "c"):
        old.crash(member)
    new = CountedFleet(aws, KEYS, ["x", "y", "z"])
    new.clock.advance(old.clock() - new.clock())
    for _ in range(int(3 * new.lease_duration / new.tick_interval)):
        new.round()
    assert sum(new.counts().values()) == len(KEYS) and spread(new.counts()) <= 1
    assert set(new.table_owners().values()) == {"x", "y", "z"}
    assert new.table.scan().leases[key].checkpoint.sequence_number == (
        "49590338271490256608559692538361571095921575989136588898"
    )
