"""The published plan: scoped plans move exactly the optimum on a join or a leave.

Unit tests of :class:`PublishedPlan` against a moto lease table (what is read, written and
adopted), then fleets of scoped coordinators (tests/coordinator_fleet.py, FakeClock, moto)
whose moves are counted against the optimum and against what ``stable_assignment`` alone
would have moved for the same fleet (so each test fails without the published plan).
"""

from __future__ import annotations

import itertools
import logging
import random
from collections import Counter
from typing import Any

import pytest

from hashring import Assignment, chore_owners, plan_assignment, stable_assignment
from kinesis.lease_loop.coordinator import LeaseCoordinator
from kinesis.lease_loop.leases import LeaseTable
from kinesis.lease_loop.manifest_store import ManifestCorruptError, ManifestStore
from kinesis.lease_loop.published_plan import (
    DOCUMENT,
    PLAN_CHORE,
    Baseline,
    PublishedPlan,
    decode,
    encode,
)
from kinesis.testing import LocalAWS
from tests.coordinator_fleet import Fleet

TICK = 1.0


class Counted:
    """A lease table whose DynamoDB calls are counted by operation."""

    def __init__(self, aws: LocalAWS, name: str):
        self.calls: Counter[str] = Counter()
        client = aws.client("dynamodb")

        def count(model: Any, **_: Any) -> None:
            self.calls[model.name] += 1

        client.meta.events.register("before-call.dynamodb", count)
        self.table = LeaseTable.open(client, name)

    def member(self, me: str) -> PublishedPlan:
        return PublishedPlan(ManifestStore(self.table, DOCUMENT), me)


def members_with_publisher(n: int) -> tuple[list[str], str]:
    members = [f"m{i}" for i in range(n)]
    return members, chore_owners(PLAN_CHORE, members)[0]


def plan_of(p: PublishedPlan, members: list[str], keys: list[str]) -> Assignment:
    return p.plan(tuple(sorted(members)), tuple(keys), None)


def test_payload_round_trip_and_corrupt_payloads_are_named() -> None:
    plan = stable_assignment(["a", "b", "c"], [f"k{i}" for i in range(7)])
    assert decode(encode(plan), "x") == {k: o[0] for k, o in plan.owners.items()}
    assert encode(plan) == encode(stable_assignment(["c", "a", "b"], [f"k{i}" for i in reversed(range(7))]))
    for bad in (b"not json", b'{"format": 2, "members": [], "keys": [], "owners": []}',
                b'{"format": 1, "members": ["a"], "keys": ["k"], "owners": [3]}'):
        with pytest.raises(ManifestCorruptError, match="plan unreadable"):
            decode(bad, "__manifest__#plan")


def test_a_plan_fed_back_as_the_baseline_comes_back_unchanged_weighted_or_not() -> None:
    # what makes members converge: once a plan is published, planning from it changes nothing
    # weights 1, 3, 2 over 15 keys: exact shares 2.5, 7.5 and 5, so the one extra key is a tie
    # that the planner breaks by holdings (landed keys first, then the baseline's)
    cases: list[tuple[list[str], int, dict[str, float] | None]] = [
        (["m-705570", "m-713844", "m-744115"], 15, {"m-705570": 1.0, "m-713844": 3.0, "m-744115": 2.0})]
    rng = random.Random(2)
    for i in range(300):
        members = sorted({f"m-{rng.randrange(10**6)}" for _ in range(rng.randint(1, 30))})
        weights = {m: rng.choice([0.5, 1.0, 2.0, 3.0]) for m in members} if i % 3 else None
        cases.append((members, rng.randint(0, 10 * len(members)), weights))
    for members, n_keys, weights in cases:
        keys = [f"k{i}" for i in range(n_keys)]
        p = PublishedPlan(None, members[0])
        first = p.plan(tuple(members), tuple(keys), weights)
        p.baseline = Baseline(1, "x", {k: o[0] for k, o in first.owners.items()})
        assert p.plan(tuple(members), tuple(keys), weights).owners == first.owners, (members, weights, len(keys))


def test_only_the_chore_owner_publishes_and_the_others_adopt_without_reading_chunks(aws: LocalAWS) -> None:
    t = Counted(aws, "plan-adopt")
    members, publisher = members_with_publisher(4)
    keys = [f"k{i}" for i in range(10)]
    others = [m for m in members if m != publisher]
    fleet = {m: t.member(m) for m in members}
    for m in others:  # before anything is published: the head is read, nothing written
        fleet[m].follow(plan_of(fleet[m], members, keys), members, 0.0, full=True, tick_interval=TICK)
    assert t.calls["PutItem"] == 0 and all(fleet[m].baseline is None for m in others)
    first = plan_of(fleet[publisher], members, keys)
    fleet[publisher].follow(first, members, 0.0, full=True, tick_interval=TICK)
    baseline = fleet[publisher].baseline
    assert baseline is not None and baseline.version == 1
    assert baseline.owners == {k: o[0] for k, o in stable_assignment(members, keys).owners.items()}
    t.calls.clear()
    for m in others:  # the head names their own plan: adopted from the head alone
        fleet[m].follow(plan_of(fleet[m], members, keys), members, 1.0, full=True, tick_interval=TICK)
        assert fleet[m].baseline == baseline
    assert t.calls == Counter({"GetItem": len(others)})
    t.calls.clear()
    for m in members:  # steady state: the plan is the baseline; nothing is read
        fleet[m].follow(plan_of(fleet[m], members, keys), members, 2.0, full=True, tick_interval=TICK)
    assert sum(t.calls.values()) == 0


def test_a_join_is_planned_from_the_baseline_before_it_is_published(aws: LocalAWS) -> None:
    t = Counted(aws, "plan-join")
    members, publisher = members_with_publisher(5)
    keys = [f"k{i}" for i in range(12)]
    pub = t.member(publisher)
    pub.follow(plan_of(pub, members, keys), members, 0.0, full=True, tick_interval=TICK)
    old = pub.baseline
    assert old is not None
    joined = [*members, "new"]
    plan = plan_of(pub, joined, keys)  # nobody waits for the publisher: planned at once
    assert plan == plan_assignment(sorted(joined), keys, current_owners=old.owners)
    assert plan.moves_from(old.owners) == len(plan.keys_of("new")) == 2  # the optimum: 12 // 6
    assert stable_assignment(joined, keys).moves_from(old.owners) > 2  # what planning alone moves
    pub.follow(plan, joined, 1.0, full=True, tick_interval=TICK)
    assert pub.baseline is not None and pub.baseline.version == 2
    assert plan_of(pub, joined, keys) == plan and not pub.pending(plan_of(pub, joined, keys))


def test_a_member_with_another_plan_reads_the_published_one_once(aws: LocalAWS) -> None:
    t = Counted(aws, "plan-other")
    members, publisher = members_with_publisher(5)
    keys = [f"k{i}" for i in range(12)]
    pub = t.member(publisher)
    pub.follow(plan_of(pub, members, keys), members, 0.0, full=True, tick_interval=TICK)
    late = next(m for m in members if m != publisher)
    lagging = t.member(late)  # it never saw version 1, and sees a member list with a newcomer
    seen = plan_of(lagging, [*members, "new"], keys)
    t.calls.clear()
    lagging.follow(seen, [*members, "new"], 0.0, full=True, tick_interval=TICK)
    assert lagging.baseline == pub.baseline  # read from the chunks (digest-checked)
    assert t.calls["BatchGetItem"] == 1 and t.calls["PutItem"] == 0
    replanned = plan_of(lagging, [*members, "new"], keys)
    assert replanned.moves_from(pub.baseline.owners) == 2  # planned from the published baseline


def test_the_poll_backs_off_while_nothing_is_published(aws: LocalAWS) -> None:
    t = Counted(aws, "plan-backoff")
    members, publisher = members_with_publisher(3)
    me = next(m for m in members if m != publisher)
    p = t.member(me)
    plan = plan_of(p, members, ["k0", "k1"])
    polls = []
    for tick in range(40):
        before = t.calls["GetItem"]
        p.follow(plan, members, float(tick), full=True, tick_interval=TICK)
        if t.calls["GetItem"] > before:
            polls.append(tick)
    assert polls[:4] == [0, 1, 2, 4] and all(b - a <= 8 for a, b in itertools.pairwise(polls))
    assert len(polls) < 10
    before = t.calls["GetItem"]
    p.follow(plan, members, 40.5, full=False, tick_interval=TICK)  # light rounds never read
    assert t.calls["GetItem"] == before


def test_a_corrupt_plan_is_logged_and_planning_goes_on(aws: LocalAWS, caplog: pytest.LogCaptureFixture) -> None:
    t = Counted(aws, "plan-corrupt")
    members, publisher = members_with_publisher(3)
    keys = [f"k{i}" for i in range(6)]
    pub = t.member(publisher)
    pub.follow(plan_of(pub, members, keys), members, 0.0, full=True, tick_interval=TICK)
    store = ManifestStore(t.table, DOCUMENT)
    head = store.head(consistent=True)
    assert head is not None
    t.table.call("put_item", Item={"leaseKey": {"S": f"{store.head_key}#1#0"}, "data": {"B": b"garbage"}})
    me = next(m for m in members if m != publisher)
    p = t.member(me)
    with caplog.at_level(logging.WARNING, logger="kinesis.lease_loop.coordinator"):
        p.follow(plan_of(p, [*members, "x"], keys), [*members, "x"], 0.0, full=True, tick_interval=TICK)
    assert p.baseline is None and "could not be followed" in caplog.text and "do not decompress" in caplog.text
    assert plan_of(p, [*members, "x"], keys) == stable_assignment([*members, "x"], keys)


# --- fleets of scoped coordinators -----------------------------------------------------


def settled(fleet: Fleet, keys: list[str]) -> bool:
    """Every key held once, loads within one, no hand-off pending, every member's plan its
    baseline, and every baseline the same."""
    live = fleet.live()
    counts = fleet.counts(live)
    if sum(counts.values()) != len(keys) or max(counts.values()) - min(counts.values()) > 1:
        return False
    baselines = set()
    for m in live:
        planner = fleet.coordinators[m]._reads._planner
        base = planner.published.baseline
        if base is None or planner.base is None or planner.published.pending(planner.base):
            return False
        if fleet.coordinators[m].status().pending_handoffs:
            return False
        baselines.add(base.digest)
    return len(baselines) == 1


def settle(fleet: Fleet, keys: list[str], *, limit: int = 40) -> dict[str, str | None]:
    for _ in range(limit):
        if settled(fleet, keys):
            return fleet.table_owners()
        fleet.round()
    raise AssertionError(f"not settled after {limit} rounds: {fleet.counts()}")


def moved(before: dict[str, str | None], after: dict[str, str | None]) -> int:
    return sum(1 for k in after if before.get(k) != after[k])


@pytest.mark.parametrize("n, k", [(5, 12), (8, 20), (4, 9)])
def test_a_join_moves_exactly_the_newcomers_quota(aws: LocalAWS, n: int, k: int) -> None:
    keys = [f"q-{i:03d}" for i in range(k)]
    members = [f"pod-{i}" for i in range(n)]
    fleet = Fleet(LeaseTable.open(aws.client("dynamodb"), f"join-{n}-{k}"), keys, members, reads="scoped")
    before = settle(fleet, keys)
    fleet.add("pod-new")
    after = settle(fleet, keys)
    optimum = len([key for key, owner in after.items() if owner == "pod-new"])
    assert optimum in (k // (n + 1), -(-k // (n + 1)))
    assert moved(before, after) == optimum  # every move went to the newcomer
    stateless = stable_assignment([*members, "pod-new"], keys).moves_from(stable_assignment(members, keys).owners)
    assert stateless > optimum  # planning from (members, keys) alone moves more here
    assert fleet.counter("takeovers") == 0


def test_a_leave_moves_only_the_leavers_keys_and_a_run_of_changes_stays_optimal(aws: LocalAWS) -> None:
    keys = [f"q-{i:03d}" for i in range(14)]
    members = [f"pod-{i}" for i in range(6)]
    fleet = Fleet(LeaseTable.open(aws.client("dynamodb"), "leave-run"), keys, members, reads="scoped")
    owners = settle(fleet, keys)
    total_moved = total_optimum = total_stateless = 0
    listed = list(members)
    for change in ("-pod-2", "+pod-x", "-pod-4", "+pod-y", "+pod-z", "-pod-0"):
        name = change[1:]
        before_list = list(listed)
        if change[0] == "+":
            fleet.add(name)
            listed.append(name)
        else:
            held = sum(1 for o in owners.values() if o == name)
            listed.remove(name)
            fleet.sync_membership(listed)
            assert fleet.coordinators[name].stop(graceful=True, timeout=5) is True
        new_owners = settle(fleet, keys)
        optimum = (sum(1 for o in new_owners.values() if o == name) if change[0] == "+" else held)
        assert moved(owners, new_owners) == optimum, change
        total_moved += moved(owners, new_owners)
        total_optimum += optimum
        total_stateless += stable_assignment(listed, keys).moves_from(stable_assignment(before_list, keys).owners)
        owners = new_owners
    assert total_moved == total_optimum < total_stateless
    assert fleet.counter("takeovers") == 0


def test_a_dead_publisher_leaves_planning_from_the_last_baseline(aws: LocalAWS) -> None:
    keys = [f"q-{i:03d}" for i in range(12)]
    members = [f"pod-{i}" for i in range(5)]
    fleet = Fleet(LeaseTable.open(aws.client("dynamodb"), "dead-publisher"), keys, members,
                  reads="scoped", replicas=1)
    owners = settle(fleet, keys)
    publisher = chore_owners(PLAN_CHORE, fleet.member_list)[0]
    fleet.crash(publisher)  # still listed: the chore stays with it, nothing is published
    for _ in range(int(3 * fleet.lease_duration / fleet.tick_interval)):
        fleet.round()  # its leases are taken over by its watcher
    fleet.add("pod-new")
    for _ in range(20):
        if fleet.counts(["pod-new"])["pod-new"] >= 2:
            break
        fleet.round()
    assert fleet.counts(["pod-new"])["pod-new"] == 2  # balanced without a publish
    coordinator: LeaseCoordinator = fleet.coordinators["pod-new"]
    base = coordinator._reads._planner.published.baseline
    assert base is not None and base.owners == {k: o for k, o in owners.items() if o is not None}
