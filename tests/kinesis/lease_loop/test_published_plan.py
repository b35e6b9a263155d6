"""The published plan: scoped plans move exactly the optimum on a join or a leave.

Unit tests of :class:`PublishedPlan` against a moto lease table (what is read, written and
adopted), then fleets of scoped coordinators (tests/coordinator_fleet.py, FakeClock, moto)
whose moves are counted against the optimum and against what ``stable_assignment`` alone
would have moved for the same fleet (so each test fails without the published plan).
"""

from __future__ import annotations

import hashlib
import itertools
import logging
import random
import threading
import time
import zlib
from collections import Counter
from typing import Any, cast

import pytest
from botocore.exceptions import ClientError

from hashring import Assignment, chore_owners, plan_assignment, stable_assignment
from kinesis.errors import LeaseTableUnavailableError
from kinesis.lease_loop.coordinator import LeaseCoordinator
from kinesis.lease_loop.plan import (
    DOCUMENT,
    PLAN_CHORE,
    Baseline,
    PublishedPlan,
    decode,
    encode,
)
from kinesis.lease_loop.table.leases import LeaseTable
from kinesis.lease_loop.table.manifests import (
    ManifestConflictError,
    ManifestCorruptError,
    ManifestHead,
    ManifestStore,
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


def follow(p: PublishedPlan, plan: Assignment, listed: list[str], now: float, *, full: bool = True,
           ready: bool = True, recheck: float = 1000.0) -> None:
    p.follow(plan, listed, now, full=full, ready=ready, tick_interval=TICK, recheck_interval=recheck)


def plan_of(p: PublishedPlan, members: list[str], keys: list[str]) -> Assignment:
    return p.plan(tuple(sorted(members)), tuple(keys), None)


def first_publish(aws: LocalAWS, name: str, n: int, n_keys: int
                  ) -> tuple[Counted, list[str], list[str], str, PublishedPlan]:
    """A table on which the chore owner of ``n`` members published version 1 of ``n_keys`` keys:
    (table, members, keys, the publisher, its PublishedPlan)."""
    t = Counted(aws, name)
    members, publisher = members_with_publisher(n)
    keys = [f"k{i}" for i in range(n_keys)]
    pub = t.member(publisher)
    follow(pub, plan_of(pub, members, keys), members, 0.0)
    return t, members, keys, publisher, pub


def test_payload_round_trip_and_corrupt_payloads_are_named() -> None:
    plan = stable_assignment(["a", "b", "c"], [f"k{i}" for i in range(7)])
    owners = {k: o[0] for k, o in plan.owners.items()}
    assert decode(encode(plan), "x") == (owners, None, 0.2)
    loads = {"k0": 2.5, "k3": 0.0}  # a load plan: its loads and tolerance travel with it (null: not measured)
    assert decode(encode(plan, loads, 0.3), "x") == (owners, loads, 0.3)
    assert encode(plan) == encode(stable_assignment(["c", "a", "b"], [f"k{i}" for i in reversed(range(7))]))
    for bad in (b"not json", b'{"format": 2, "members": [], "keys": [], "owners": []}',
                b'{"format": 1, "members": ["a"], "keys": ["k"], "owners": [3]}',
                b'{"format": 1, "members": ["a"], "keys": ["k"], "owners": [0], "loads": [1, 2]}',
                b'{"format": 1, "members": ["a"], "keys": ["k"], "owners": [0], "loads": [-1]}',
                b'{"format": 1, "members": ["a"], "keys": ["k"], "owners": [0], "loads": [1], "tolerance": 2}'):
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
        follow(fleet[m], plan_of(fleet[m], members, keys), members, 0.0)
    assert t.calls["PutItem"] == 0 and all(fleet[m].baseline is None for m in others)
    first = plan_of(fleet[publisher], members, keys)
    follow(fleet[publisher], first, members, 0.0)
    baseline = fleet[publisher].baseline
    assert baseline is not None and baseline.version == 1
    assert baseline.owners == {k: o[0] for k, o in stable_assignment(members, keys).owners.items()}
    t.calls.clear()
    for m in others:  # the head names their own plan: adopted from the head alone
        follow(fleet[m], plan_of(fleet[m], members, keys), members, 1.0)
        assert fleet[m].baseline == baseline
    assert t.calls == Counter({"GetItem": len(others)})
    t.calls.clear()
    for m in members:  # steady state: the plan is the baseline; nothing is read
        follow(fleet[m], plan_of(fleet[m], members, keys), members, 2.0)
    assert sum(t.calls.values()) == 0


def test_a_join_is_planned_from_the_baseline_before_it_is_published(aws: LocalAWS) -> None:
    _t, members, keys, _publisher, pub = first_publish(aws, "plan-join", 5, 12)
    old = pub.baseline
    assert old is not None
    joined = [*members, "new"]
    plan = plan_of(pub, joined, keys)  # nobody waits for the publisher: planned at once
    assert plan == plan_assignment(sorted(joined), keys, current_owners=old.owners)
    assert plan.moves_from(old.owners) == len(plan.keys_of("new")) == 2  # the optimum: 12 // 6
    assert stable_assignment(joined, keys).moves_from(old.owners) > 2  # what planning alone moves
    follow(pub, plan, joined, 1.0)
    assert pub.baseline is not None and pub.baseline.version == 2
    assert plan_of(pub, joined, keys) is plan and not pub.pending(plan)  # adopted without re-planning


def test_a_member_with_another_plan_reads_the_published_one_once(aws: LocalAWS) -> None:
    t, members, keys, publisher, pub = first_publish(aws, "plan-other", 5, 12)
    late = next(m for m in members if m != publisher)
    lagging = t.member(late)  # it never saw version 1, and sees a member list with a newcomer
    seen = plan_of(lagging, [*members, "new"], keys)
    t.calls.clear()
    follow(lagging, seen, [*members, "new"], 0.0)
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
    polls, published_at = [], None
    for tick in range(40):
        before = t.calls["GetItem"]
        follow(p, plan, members, float(tick))
        if t.calls["GetItem"] > before:
            polls.append(tick)
        if published_at is None and not p.pending(plan):  # p published it (the chore's next owner)
            published_at = tick
    backing_off = [tick for tick in polls if published_at is None or tick <= published_at]
    assert polls[:4] == [0, 1, 2, 4] and all(b - a <= 8 for a, b in itertools.pairwise(backing_off))
    assert len(polls) < 10  # then the publisher reads its head every OWNER_RECHECK_TICKS
    before = t.calls["GetItem"]
    follow(p, plan, members, 40.5, full=False)  # light rounds never read
    assert t.calls["GetItem"] == before


def test_a_corrupt_plan_is_logged_and_planning_goes_on(aws: LocalAWS, caplog: pytest.LogCaptureFixture) -> None:
    t, members, keys, publisher, _ = first_publish(aws, "plan-corrupt", 3, 6)
    store = ManifestStore(t.table, DOCUMENT)
    head = store.head(consistent=True)
    assert head is not None
    chunk = store.chunk_key(head.version, head.chunk_id, 0)
    t.table.call("put_item", Item={"leaseKey": {"S": chunk}, "data": {"B": b"garbage"}})
    me = next(m for m in members if m != publisher)
    p = t.member(me)
    with caplog.at_level(logging.WARNING, logger="kinesis.lease_loop"):
        follow(p, plan_of(p, [*members, "x"], keys), [*members, "x"], 0.0)
    assert p.baseline is None and "could not be followed" in caplog.text and "do not decompress" in caplog.text
    assert plan_of(p, [*members, "x"], keys) == stable_assignment([*members, "x"], keys)
    # the chore owner, restarted (no baseline) and seeing the same newcomer, publishes over it
    joined = [*members, "x"]
    assert chore_owners(PLAN_CHORE, joined)[0] == publisher
    owner = t.member(publisher)
    follow(owner, plan_of(owner, joined, keys), joined, 1.0)
    head = store.head(consistent=True)
    assert head is not None and owner.version == head.version == 2
    assert store.read(head) == encode(plan_of(owner, joined, keys))
    follow(p, plan_of(p, joined, keys), joined, 2.0)  # and the others follow it again
    assert p.baseline == owner.baseline


def test_two_publishers_of_one_version_never_destroy_each_others_chunks(aws: LocalAWS) -> None:
    # two members that both think they own the chore (different member lists) publish the
    # same version: the loser's chunks never overwrite the winner's, and it deletes only its own
    table = LeaseTable.open(aws.client("dynamodb"), "plan-race")
    a, b = ManifestStore(table, DOCUMENT), ManifestStore(table, DOCUMENT)
    first = a.publish(a.claim("a", None), b"one")
    won = a.publish(first, b"two, from a")
    with pytest.raises(ManifestConflictError):
        b.publish(first, b"two, from b")  # it read version 1 too
    head = a.head(consistent=True)
    assert head == won and a.read(head) == b"two, from a"
    third = a.publish(won, b"three")  # and the chunks of version 1 go once version 3 is out
    assert a.read(third) == b"three"
    with pytest.raises(ManifestConflictError, match="are gone"):
        a.read(first)


def test_a_publish_that_fails_leaves_no_chunk_rows_behind(aws: LocalAWS) -> None:
    class Throttled(ManifestStore):
        def _put_head(self, new: ManifestHead, seen: ManifestHead | None) -> ManifestHead:
            if new.version == 2:
                raise LeaseTableUnavailableError("throttled (retries exhausted)")
            return super()._put_head(new, seen)

    table = LeaseTable.open(aws.client("dynamodb"), "plan-throttled")
    store = Throttled(table, DOCUMENT, chunk_bytes=50)
    first = store.publish(store.claim("a", None), b"one" * 40)
    with pytest.raises(LeaseTableUnavailableError):
        store.publish(first, bytes(range(256)) * 4)  # several chunks, then the head write fails
    keys = {i["leaseKey"]["S"] for i in table.call("scan", ConsistentRead=True)["Items"]}
    assert {k for k in keys if k.startswith(f"{store.head_key}#2#")} == set()
    assert store.read(first) == b"one" * 40


def test_a_head_written_without_a_chunk_id_is_read_and_replaced(aws: LocalAWS) -> None:
    table = LeaseTable.open(aws.client("dynamodb"), "plan-legacy")
    store = ManifestStore(table, DOCUMENT)
    payload = b"legacy"
    table.call("put_item", Item={"leaseKey": {"S": f"{store.head_key}#1#0"}, "data": {"B": zlib.compress(payload)}})
    table.call("put_item", Item={
        "leaseKey": {"S": store.head_key}, "version": {"N": "1"}, "chunks": {"N": "1"},
        "digest": {"S": hashlib.sha256(payload).hexdigest()}, "owner": {"S": "a"}, "counter": {"N": "4"}})
    legacy = store.head(consistent=True)
    assert legacy is not None and legacy.chunk_id == "" and store.read(legacy) == payload
    second = store.publish(legacy, b"two")
    third = store.publish(second, b"three")
    assert store.read(third) == b"three" and third.previous_chunk_id == second.chunk_id != ""
    keys = {i["leaseKey"]["S"] for i in table.call("scan", ConsistentRead=True)["Items"]}
    assert f"{store.head_key}#1#0" not in keys  # the legacy chunks went with the next-but-one publish


def test_a_stopping_chore_owner_still_listed_publishes_no_plan_without_itself(aws: LocalAWS) -> None:
    # a graceful stop keeps ticking (real time, on the stopping thread) until its hand-offs
    # complete; its plan leaves it out, and it must not publish that plan while still listed
    keys = [f"q-{i:03d}" for i in range(10)]
    members = [f"pod-{i}" for i in range(4)]
    fleet = Fleet(LeaseTable.open(aws.client("dynamodb"), "stopping-owner"), keys, members, reads="scoped",
                  manual_handoffs=True)
    settle(fleet, keys)
    store = ManifestStore(fleet.table, DOCUMENT)
    before = store.head(consistent=True)
    publisher = chore_owners(PLAN_CHORE, members)[0]
    coordinator, listener = fleet.coordinators[publisher], fleet.listeners[publisher]
    ticks = coordinator.counters["ticks"]
    stopping = threading.Thread(target=coordinator.stop, kwargs={"graceful": True, "timeout": 120})
    stopping.start()
    deadline = time.monotonic() + 60
    while coordinator.counters["ticks"] < ticks + 2 and time.monotonic() < deadline:
        time.sleep(0.01)  # wait for the condition: two ticks while its hand-offs are held open
    assert coordinator.counters["ticks"] >= ticks + 2 and coordinator.status().stopping
    assert store.head(consistent=True) == before
    for key in list(listener.handoffs):
        listener.finish(key)
    deadline = time.monotonic() + 60
    while stopping.is_alive() and time.monotonic() < deadline:  # a graceful stop sees its offers
        for member in fleet.live():  # adopted: the others adopt them in their rounds
            if member != publisher:
                fleet.tick(member)
        fleet.clock.advance(fleet.tick_interval / 3)  # an offer read before its row is told again
        stopping.join(timeout=0.05)
    assert not stopping.is_alive() and fleet.counter("plans_published") == 1


class StaleHeads(ManifestStore):
    """A store whose eventually consistent head reads return ``stale`` (a lagging replica)."""

    stale: ManifestHead | None = None
    stale_reads = 0

    def head(self, *, consistent: bool = False) -> ManifestHead | None:
        if not consistent and self.stale is not None:
            self.stale_reads += 1
            return self.stale
        return super().head(consistent=consistent)


def test_an_older_head_is_confirmed_before_the_baseline_goes_back(aws: LocalAWS) -> None:
    t, members, keys, publisher, pub = first_publish(aws, "plan-older", 3, 9)
    v1 = ManifestStore(t.table, DOCUMENT).head(consistent=True)
    follow(pub, plan_of(pub, [*members, "x"], keys), [*members, "x"], 1.0)
    store = StaleHeads(t.table, DOCUMENT)
    me = PublishedPlan(store, next(m for m in members if m != publisher))
    follow(me, plan_of(me, [*members, "x"], keys), [*members, "x"], 1.0)
    assert me.baseline is not None and me.baseline == pub.baseline and me.version == 2
    store.stale = v1  # a stale replica answers the next read
    me.heard([3])
    t.calls.clear()
    follow(me, plan_of(me, [*members, "x"], keys), [*members, "x"], 2.0)
    assert store.stale_reads == 1 and t.calls == Counter({"GetItem": 1})  # the stale head, then a consistent read
    assert me.version == 2 and me.baseline == pub.baseline  # confirmed by a consistent read: kept
    # the head is rebuilt from version 1 (its rows deleted): a consistent read confirms it
    store.stale = None
    for item in t.table.call("scan", ConsistentRead=True)["Items"]:
        if item["leaseKey"]["S"].startswith(store.head_key):
            t.table.call("delete_item", Key={"leaseKey": item["leaseKey"]})
    fresh = t.member(publisher)
    follow(fresh, plan_of(fresh, members, keys), members, 3.0)
    assert fresh.version == 1
    follow(me, plan_of(me, [*members, "x"], keys), [*members, "x"], 1003.0)  # the backstop read
    assert me.baseline == fresh.baseline


def test_a_member_with_nothing_pending_rereads_the_head_only_when_told_or_rarely(aws: LocalAWS) -> None:
    t, members, keys, _publisher, pub = first_publish(aws, "plan-recheck", 3, 6)
    t.calls.clear()
    for tick in range(1, 10):
        follow(pub, plan_of(pub, members, keys), members, float(tick), recheck=10.0)
    assert t.calls["GetItem"] == 0
    follow(pub, plan_of(pub, members, keys), members, 10.0, recheck=10.0)
    assert t.calls["GetItem"] == 1
    pub.heard([1])  # its own version: nothing to catch up with
    follow(pub, plan_of(pub, members, keys), members, 11.0, recheck=10.0)
    assert t.calls["GetItem"] == 1
    pub.heard([2])
    follow(pub, plan_of(pub, members, keys), members, 12.0, recheck=10.0)
    assert t.calls["GetItem"] == 2


def test_a_stopping_chore_owner_does_not_publish(aws: LocalAWS) -> None:
    t = Counted(aws, "plan-stopping")
    members, publisher = members_with_publisher(3)
    pub = t.member(publisher)
    follow(pub, plan_of(pub, members, ["k0", "k1"]), members, 0.0, ready=False)
    assert t.calls["PutItem"] == 0 and t.calls["UpdateItem"] == 0 and pub.baseline is None


def test_an_aws_error_while_following_is_logged_and_the_round_goes_on(caplog: pytest.LogCaptureFixture) -> None:
    class Denied(ManifestStore):
        def head(self, *, consistent: bool = False) -> ManifestHead | None:
            raise ClientError({"Error": {"Code": "ValidationException", "Message": "no"}}, "GetItem")

    counted: Counter[str] = Counter()
    p = PublishedPlan(Denied(cast(Any, None), DOCUMENT), "a", lambda name: counted.update([name]))
    with caplog.at_level(logging.WARNING, logger="kinesis.lease_loop"):
        follow(p, plan_of(p, ["a", "b"], ["k0"]), ["a", "b"], 0.0)
    assert "could not be followed" in caplog.text and "ValidationException" in caplog.text
    assert counted == Counter({"plan_errors": 1})


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
    assert fleet.counter("plans_published") == 2 and fleet.counter("plan_errors") == 0  # the first, the join


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


@pytest.mark.parametrize("replicas", [1, 0])
def test_a_member_that_missed_a_change_catches_up_through_its_predecessors_session(
    aws: LocalAWS, replicas: int
) -> None:
    # pod-1 never sees pod-2 leave (a lagging watch): the others move to a plan without
    # pod-2, then back with it, so pod-1's baseline is two versions old while its plan still
    # equals it. Its predecessor's session row names the newer version: pod-1 reads the
    # plan and agrees again (without, offers to it would never be adopted)
    keys = [f"q-{i:03d}" for i in range(24)]
    members = [f"pod-{i}" for i in range(5)]
    fleet = Fleet(LeaseTable.open(aws.client("dynamodb"), f"missed-change-{replicas}"), keys, members,
                  reads="scoped", replicas=replicas)  # replicas=0: no backups, the predecessor is still read
    settle(fleet, keys)
    for member, membership in fleet.memberships.items():
        if member != "pod-1":
            membership.set_members([m for m in members if m != "pod-2"])
    for _ in range(12):
        fleet.round()
    fleet.sync_membership(members)
    settle(fleet, keys, limit=30)  # well inside the backstop re-read (the sweep interval, 90 ticks here)
    published = fleet.coordinators["pod-1"]._reads._planner.published
    assert published.version == fleet.coordinators["pod-0"]._reads._planner.published.version >= 3
