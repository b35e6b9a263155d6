"""HashRing: decisions, roles, caching per membership version, readiness."""

from __future__ import annotations

import logging
from collections import Counter

import pytest

from hashring import (
    HashRing,
    InvalidWeightsError,
    Role,
    StaticMembership,
    UnknownStrategyError,
    owners_of,
)

PODS = [f"pod-{i}" for i in range(5)]


def test_exactly_one_member_may_acquire_each_lease() -> None:
    rings = [HashRing(StaticMembership(PODS, p), replicas=2) for p in PODS]
    per_pod: Counter[str] = Counter()
    for shard in (f"shardId-{i:012d}" for i in range(200)):
        winners = [r.membership.self_id for r in rings if r.can_acquire_lease("orders", shard)]
        assert len(winners) == 1
        per_pod[winners[0]] += 1
        assert winners == owners_of("orders", shard, PODS)[:1]
        roles = Counter(r.role("orders", shard) for r in rings)
        assert roles == {Role.PRIMARY: 1, Role.BACKUP: 2, Role.NONE: 2}
    assert set(per_pod) == set(PODS)


def test_backup_rank_follows_owner_order() -> None:
    rings = {p: HashRing(StaticMembership(PODS, p), replicas=2) for p in PODS}
    owners = rings["pod-0"].owners("orders", "s1")
    assert [rings[o].backup_rank("orders", "s1") for o in owners] == [0, 1, 2]


def test_cache_is_invalidated_when_membership_version_changes() -> None:
    membership = StaticMembership(PODS, "pod-0")
    ring = HashRing(membership)
    before = {s: ring.owners("c", str(s))[0] for s in range(300)}
    membership.set_members(PODS[:4])
    after = {s: ring.owners("c", str(s))[0] for s in range(300)}
    assert "pod-4" in before.values() and "pod-4" not in after.values()
    assert all(after[s] == owners_of("c", str(s), PODS[:4])[0] for s in after)


def test_not_ready_member_never_acquires_and_logs_once(caplog: pytest.LogCaptureFixture) -> None:
    membership = StaticMembership(PODS, "pod-new")
    ring = HashRing(membership)
    with caplog.at_level(logging.WARNING, logger="hashring.ring"):
        assert not any(ring.can_acquire_lease("c", str(s)) for s in range(100))
        assert ring.role("c", "1") is Role.NOT_READY
    assert sum("not in the member list" in r.message for r in caplog.records) == 1
    membership.set_members([*PODS, "pod-new"])
    assert any(ring.can_acquire_lease("c", str(s)) for s in range(100))
    assert ring.ready


def test_fewer_members_than_replicas_degrades_instead_of_failing() -> None:
    membership = StaticMembership(["a", "b"], "a")
    ring = HashRing(membership, replicas=3)
    assert sorted(ring.owners("c", "s")) == ["a", "b"]


@pytest.mark.parametrize("strategy", ["range", "rendezvous", "jump"])
def test_every_strategy_through_the_ring(strategy: str) -> None:
    pods = [f"consumer-{i}" for i in range(4)]
    rings = [HashRing(StaticMembership(pods, p), strategy=strategy, replicas=1) for p in pods]
    for shard in map(str, range(100)):
        assert sum(r.can_acquire_lease("c", shard) for r in rings) == 1


def test_weights_reach_the_strategy() -> None:
    ring = HashRing(StaticMembership(["a", "b"], "a"), weights={"a": 9.0, "b": 1.0})
    share = sum(ring.can_acquire_lease("c", str(s)) for s in range(2000)) / 2000
    assert share > 0.8


def test_bad_configuration_fails_at_construction() -> None:
    membership = StaticMembership(PODS, "pod-0")
    with pytest.raises(UnknownStrategyError):
        HashRing(membership, strategy="ketama")
    with pytest.raises(InvalidWeightsError):
        HashRing(membership, strategy="range", weights={"pod-0": 1.0})
    with pytest.raises(TypeError, match="Membership protocol"):
        HashRing(PODS)  # type: ignore[arg-type]
