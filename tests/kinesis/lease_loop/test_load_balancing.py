"""Balancing by load through the published plan (``LoadBalancing``): fleets of scoped
coordinators on moto (tests/coordinator_fleet.py, FakeClock) whose members report what each
held lease costs on their session rows. The chore owner plans with those loads from the
baseline and publishes; the others adopt; hand-offs stay graceful; a balanced plan stays put.
"""

from __future__ import annotations

import random
import time
import zlib
from collections.abc import Callable
from typing import Any

import pytest

from hashring import Assignment, balance_loads, chore_owners, load_report, plan_assignment
from kinesis.errors import ConfigurationError, LeaseTableUnavailableError
from kinesis.lease_loop.coordinator import LeaseCoordinator
from kinesis.lease_loop.holder import LOAD_FAILURES_TOLERATED, LeaseHolder
from kinesis.lease_loop.plan import DOCUMENT, PLAN_CHORE, PublishedPlan
from kinesis.lease_loop.settings import LoadBalancing
from kinesis.lease_loop.table.leases import LeaseTable
from kinesis.lease_loop.table.manifests import ManifestStore
from kinesis.lease_loop.table.model import MAX_LOADS_BYTES, decode_loads, encode_loads
from kinesis.lease_loop.timing import LeaseTiming
from kinesis.testing import LocalAWS
from tests.coordinator_fleet import Fleet, memory_table

INTERVAL = 5.0


def loaded_fleet(aws: LocalAWS, name: str, members: list[str], keys: list[str], loads: dict[str, float],
                 *, reporting: set[str] | None = None) -> Fleet:
    """Members that report ``loads`` of the leases they hold (only ``reporting`` ones, if given)."""

    def kwargs(member: str, fleet: Fleet) -> dict[str, Any]:
        if reporting is not None and member not in reporting:
            return {}

        def source() -> dict[str, float]:
            return {k: loads[k] for k in fleet.coordinators[member].held_keys()}

        return {"load_balancing": LoadBalancing(source, interval=INTERVAL)}

    table = LeaseTable.open(aws.client("dynamodb"), name)
    return Fleet(table, keys, members, reads="scoped", member_kwargs=kwargs)


def busiest_over_mean(owners: dict[str, str | None], loads: dict[str, float], members: list[str]) -> float:
    per = dict.fromkeys(members, 0.0)
    for key, owner in owners.items():
        assert owner is not None
        per[owner] += loads[key]
    return max(per.values()) / (sum(per.values()) / len(per))


def run(fleet: Fleet, rounds: int) -> list[dict[str, str | None]]:
    seen = []
    for _ in range(rounds):
        fleet.round()
        fleet.check()  # never two holders of one key
        seen.append(fleet.table_owners())
    return seen


def skew() -> tuple[list[str], list[str], dict[str, float]]:
    members = [f"pod-{i}" for i in range(4)]
    keys = [f"orders/shard-{i:03d}" for i in range(16)]
    counted = plan_assignment(members, keys)  # pile the hot shards onto one member of the count plan
    hot = counted.keys_of(members[0])[:3] + counted.keys_of(members[1])[:1]
    return members, keys, {k: 8.0 if k in hot else 1.0 for k in keys}


def test_a_skewed_fleet_is_balanced_by_load_and_then_nothing_moves(aws: LocalAWS) -> None:
    members, keys, loads = skew()
    fleet = loaded_fleet(aws, "load-skew", members, keys, loads)
    history = run(fleet, 12)
    assert busiest_over_mean(history[2], loads, members) > 1.5  # the count plan first
    history += run(fleet, int(3 * INTERVAL))
    settled = history[-1]
    assert all(settled[k] is not None for k in keys)
    assert busiest_over_mean(settled, loads, members) <= 1.25
    assert fleet.counter("takeovers") == 0  # every move a graceful hand-off
    published = fleet.counter("plans_published")
    history += run(fleet, int(4 * INTERVAL))  # several load intervals more: the plan stays put
    assert history[-1] == settled
    assert fleet.counter("plans_published") == published
    bases = [fleet.coordinators[m]._reads._planner.published.baseline for m in members]
    assert len({(b.version, b.digest) for b in bases if b is not None}) == 1
    base = bases[0]
    assert base is not None and base.loads is not None  # the plan carries its loads
    assert fleet.counter("plan_errors") == 0
    report = load_report(balance_loads(members, keys, base.owners, base.loads), loads)
    assert report is not None and report.busiest() <= 1.25


def test_a_member_that_reports_no_loads_keeps_the_fleet_on_counts(aws: LocalAWS) -> None:
    """An older build (or a member without load balancing) reports nothing: counts balance."""
    members, keys, loads = skew()
    fleet = loaded_fleet(aws, "load-mixed", members, keys, loads, reporting=set(members[1:]))
    history = run(fleet, int(4 * INTERVAL))
    counts = fleet.counts()
    assert max(counts.values()) - min(counts.values()) <= 1
    assert busiest_over_mean(history[-1], loads, members) > 1.5
    rows = fleet.table.read_rows((), members)[1]  # the others do report: the chore chose counts
    assert all(rows[m] is not None and rows[m].loads is not None for m in members[1:])
    assert rows[members[0]] is not None and rows[members[0]].loads is None
    base = fleet.coordinators[members[0]]._reads._planner.published.baseline
    assert base is not None and base.loads is None


def test_a_listed_member_that_never_runs_does_not_keep_the_fleet_on_counts(aws: LocalAWS) -> None:
    """A dead pod still listed has no session row: it reports nothing and runs nothing, so
    the others still balance by load (a running member without loads would stop it)."""
    members, keys, loads = skew()
    fleet = loaded_fleet(aws, "load-ghost", members, keys, loads)
    fleet.sync_membership([*members, "ghost"])
    run(fleet, int(4 * INTERVAL))
    base = fleet.coordinators[members[0]]._reads._planner.published.baseline
    assert base is not None and base.loads is not None
    assert set(base.loads) <= set(keys)


def test_loads_ride_on_the_session_row_compactly_and_a_bad_one_reads_as_none() -> None:
    loads = {f"app/stream/shardId-{i:012d}": i * 0.125 for i in range(300)}
    blob = encode_loads(loads)
    back = decode_loads({"B": blob})
    assert back is not None and back == pytest.approx(loads, rel=1e-3)
    assert len(blob) < 2048  # about 6 bytes a lease
    many = {f"app/stream/shardId-{i:012d}": float(i) for i in range(20_000)}
    capped = decode_loads({"B": encode_loads(many)})
    assert len(encode_loads(many)) <= MAX_LOADS_BYTES and capped is not None
    assert min(capped.values()) > 0.5 * max(many.values())  # the hottest kept
    for bad in ({"B": b"not zlib"}, {"S": "x"}, None, {"B": __import__("zlib").compress(b'{"k": -1}')}):
        assert decode_loads(bad) is None


def test_load_balancing_is_refused_without_scoped_reads_and_checks_its_arguments(aws: LocalAWS) -> None:
    from hashring import StaticMembership

    table = LeaseTable.open(aws.client("dynamodb"), "load-config")
    with pytest.raises(ConfigurationError, match="reads='scoped'"):
        LeaseCoordinator(table, StaticMembership(["a"], "a"), ["k"], reads="scan",
                         load_balancing=LoadBalancing(dict))
    with pytest.raises(ConfigurationError, match="tolerance must be a number between 0 and 1"):
        LoadBalancing(dict, tolerance=1.5)
    with pytest.raises(ConfigurationError, match="must be callable"):
        LoadBalancing({"k": 1.0})  # type: ignore[arg-type]


# --- what the review of the first version found --------------------------------------------------


def chore_owner_plan() -> tuple[PublishedPlan, ManifestStore, tuple[str, ...],
                                                                    tuple[str, ...], Callable[..., Assignment]]:
    members = tuple(f"m{i}" for i in range(4))
    keys = tuple(f"k{i:02d}" for i in range(16))
    store = ManifestStore(memory_table(), DOCUMENT)
    p = PublishedPlan(store, chore_owners(PLAN_CHORE, list(members))[0])

    def tick(now: float, measured: dict[str, float] | None) -> Assignment:
        plan = p.plan(members, keys, None)
        p.follow(plan, list(members), now, full=True, ready=True, tick_interval=1.0, recheck_interval=1000.0)
        p.rebalance(list(members), now, ready=True, interval=10.0, read_loads=lambda _: measured)
        return plan

    return p, store, members, keys, tick


def test_a_publish_that_fails_leaves_the_plan_in_hand_with_its_own_loads() -> None:
    """A throttled publish of a load plan must not leave this member's plan pending (it
    would then publish the same owners without loads, and followers would undo the balance)."""
    p, store, members, keys, tick = chore_owner_plan()
    hot = {k: 8.0 if i < 4 else 1.0 for i, k in enumerate(keys)}
    for t in range(3):
        tick(float(t), hot)
    assert p.baseline is not None and p.baseline.loads is not None
    mine = [k for k, o in p.baseline.owners.items() if o == members[0]]
    shifted = {k: 8.0 if k in mine else 1.0 for k in keys}
    version = p.version

    def throttled(*_: object, **__: object) -> None:
        raise LeaseTableUnavailableError("throttled")

    real, store.publish = store.publish, throttled  # type: ignore[method-assign]
    tick(40.0, shifted)
    store.publish = real  # type: ignore[method-assign]
    assert p.version == version and not p.pending(p.plan(members, keys, None))
    tick(51.0, shifted)  # the next interval publishes it, with its loads
    assert p.version == version + 1 and p.baseline.loads is not None


def test_followers_plan_with_the_published_tolerance_not_their_own() -> None:
    """The tolerance travels with the plan: a member configured otherwise (a rollout) plans
    the published plan back, not a plan of its own."""
    p, store, members, keys, tick = chore_owner_plan()
    tick(0.0, None)  # a count plan first
    assert p.baseline is not None
    counted = dict(p.baseline.owners)

    def moved_by_a_tighter_follower(loads: dict[str, float]) -> bool:
        published = balance_loads(members, keys, counted, loads, tolerance=0.2)
        published_owners = {k: o[0] for k, o in published.owners.items()}
        return balance_loads(members, keys, published_owners, loads, tolerance=0.05).moves_from(published_owners) > 0

    draws = (random.Random(seed) for seed in range(200))
    loads = next(d for d in ({k: r.choice([1.0, 1.3, 2.0, 5.0]) for k in keys} for r in draws)
                 if moved_by_a_tighter_follower(d))
    for t in range(1, 4):
        tick(float(t) * 11, loads)
    base = p.baseline
    assert base is not None and base.loads is not None and base.tolerance == 0.2
    tighter = balance_loads(members, keys, base.owners, base.loads, tolerance=0.05)
    assert tighter.moves_from(base.owners) > 0  # a member planning with its own 0.05 would move keys
    follower = PublishedPlan(store, "m-other", tolerance=0.05)
    plan = follower.plan(members, keys, None)
    follower.follow(plan, list(members), 5.0, full=True, ready=False, tick_interval=1.0, recheck_interval=1000.0)
    assert follower.baseline is not None and follower.baseline.tolerance == 0.2
    again = follower.plan(members, keys, None)
    assert not follower.pending(again)  # the published plan back: planned with 0.2, not 0.05


def test_a_restart_without_loads_and_a_failed_measurement_remove_the_rows_loads(aws: LocalAWS) -> None:
    """Loads on a session row are this run's or none: a first renewal without loads removes an
    earlier run's (a restart with balance='count', an older build), and a failed measurement
    removes them too (counts, rather than stale loads)."""
    table = LeaseTable.open(aws.client("dynamodb"), "load-rows")
    row = table.renew_session("m0", "t1", None, loads=encode_loads({"k": 1.0}))
    assert row.loads == {"k": 1.0}
    row = table.renew_session("m0", "t2", None)
    assert row.loads is None  # a new run, without loads
    row = table.renew_session("m0", "t2", row.counter, loads=encode_loads({"k": 2.0}))
    assert row.loads == {"k": 2.0}
    assert table.renew_session("m0", "t2", row.counter, loads=b"").loads is None
    holder = LeaseHolder(table, "m1", LeaseTiming.of(3.0), time.monotonic)

    def broken() -> dict[str, float]:
        raise RuntimeError("no measurement")

    holder.load_source, holder.load_every = broken, 0.0
    assert [holder._loads_due(time.monotonic()) for _ in range(LOAD_FAILURES_TOLERATED)] == \
        [None] * (LOAD_FAILURES_TOLERATED - 1) + [b""]  # the last loads stay a while, then go


def test_a_key_nobody_reports_yet_keeps_its_published_load() -> None:
    """A lease just handed over is not reported until its new owner has measured it a while:
    it keeps the load the plan has for it, rather than weighing the median and pulling more
    keys after it at the next interval."""
    p, _, _, _, tick = chore_owner_plan()
    tick(0.0, None)
    assert p.baseline is not None
    hot = {k: 8.0 if i < 4 else 1.0 for i, k in enumerate(sorted(p.baseline.owners))}
    for t in range(1, 4):
        tick(11.0 * t, hot)
    version = p.version
    assert p.baseline is not None and p.baseline.loads is not None
    moved_hot = [k for k in sorted(hot) if hot[k] == 8.0]
    for t in range(4, 8):  # the hot keys' new owners have not reported them yet
        tick(11.0 * t, {k: v for k, v in hot.items() if k not in moved_hot})
    assert p.version == version


def test_a_deeply_nested_loads_blob_reads_as_none() -> None:
    assert decode_loads({"B": zlib.compress(b"[" * 200_000)}) is None
