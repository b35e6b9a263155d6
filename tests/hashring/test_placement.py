"""Stateless strategies: owners, backups, movement, weights and errors."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hashring import (
    InvalidMembersError,
    InvalidReplicasError,
    InvalidWeightsError,
    UnknownStrategyError,
    chore_owners,
    key_hash,
    owners_of,
)
from hashring.placement import JumpPlacement, RangePlacement, RendezvousPlacement, make_strategy
from hashring.validation import check_members

members_st = st.lists(
    st.text(alphabet="abcdefghij", min_size=1, max_size=6), min_size=1, max_size=12, unique=True
)


@pytest.mark.parametrize("strategy", ["range", "rendezvous"])
@given(members=members_st, replicas=st.integers(0, 11), shard=st.text(max_size=10))
def test_owners_are_distinct_members(
    strategy: str, members: list[str], replicas: int, shard: str
) -> None:
    replicas = min(replicas, len(members) - 1)
    got = owners_of("orders", shard, members, strategy=strategy, replicas=replicas)
    assert len(got) == replicas + 1
    assert len(set(got)) == len(got)
    assert set(got) <= set(members)


@given(members=members_st, shard=st.text(max_size=10))
def test_result_is_independent_of_member_order(members: list[str], shard: str) -> None:
    for strategy in ("range", "rendezvous"):
        a = owners_of("c", shard, members, strategy=strategy)
        b = owners_of("c", shard, list(reversed(members)), strategy=strategy)
        assert a == b


def test_range_is_the_knock_split() -> None:
    members = check_members([f"pod-{i}" for i in range(4)])
    placement = RangePlacement(members)
    for shard in map(str, range(200)):
        h = key_hash("orders", shard)
        i = h * 4 >> 64
        assert placement.owners(h, 1) == [members[i], members[(i + 1) % 4]]


def test_rendezvous_moves_only_keys_of_the_changed_member() -> None:
    before = check_members([f"pod-{i}" for i in range(10)])
    after = check_members([*before, "pod-new"])
    a, b = RendezvousPlacement(before), RendezvousPlacement(after)
    moved = 0
    for shard in map(str, range(3000)):
        h = key_hash("orders", shard)
        x, y = a.owners(h, 0)[0], b.owners(h, 0)[0]
        if x != y:
            assert y == "pod-new"
            moved += 1
    assert 3000 / 11 * 0.8 < moved < 3000 / 11 * 1.2


def test_rendezvous_weights_give_proportional_shares() -> None:
    members = check_members(["a", "b", "c"])
    placement = RendezvousPlacement(members, {"a": 1.0, "b": 2.0, "c": 1.0})
    counts = Counter(placement.owners(key_hash("c", str(i)), 0)[0] for i in range(20000))
    assert 0.45 < counts["b"] / 20000 < 0.55
    assert 0.2 < counts["a"] / 20000 < 0.3


def test_jump_uses_ordinals_and_skips_missing_ones() -> None:
    full = check_members([f"consumer-{i}" for i in range(5)])
    sparse = check_members([m for m in full if m != "consumer-2"])
    jf, js = JumpPlacement(full), JumpPlacement(sparse)
    for shard in map(str, range(500)):
        h = key_hash("orders", shard)
        f, s = jf.owners(h, 2), js.owners(h, 2)
        assert len(set(s)) == 3 and "consumer-2" not in s
        if f[0] != "consumer-2":
            assert s[0] == f[0]  # keys of live ordinals stay put


def test_jump_scale_in_moves_only_the_last_ordinal() -> None:
    five = JumpPlacement(check_members([f"c-{i}" for i in range(5)]))
    four = JumpPlacement(check_members([f"c-{i}" for i in range(4)]))
    for shard in map(str, range(500)):
        h = key_hash("orders", shard)
        if five.owners(h, 0)[0] != "c-4":
            assert four.owners(h, 0) == five.owners(h, 0)


def test_errors_say_what_to_fix() -> None:
    with pytest.raises(InvalidMembersError, match="empty"):
        owners_of("c", "s", [])
    with pytest.raises(InvalidMembersError, match="duplicate"):
        owners_of("c", "s", ["a", "a"])
    with pytest.raises(InvalidReplicasError, match="at least 3 members"):
        owners_of("c", "s", ["a", "b"], replicas=2)
    with pytest.raises(InvalidReplicasError, match=">= 0"):
        owners_of("c", "s", ["a", "b"], replicas=-1)
    with pytest.raises(InvalidReplicasError, match="must be an int"):
        owners_of("c", "s", ["a", "b"], replicas=1.5)  # type: ignore[arg-type]
    with pytest.raises(UnknownStrategyError, match="rendezvous"):
        owners_of("c", "s", ["a"], strategy="ketama")
    with pytest.raises(InvalidWeightsError, match="> 0"):
        owners_of("c", "s", ["a", "b"], weights={"a": 1, "b": 0})
    with pytest.raises(InvalidWeightsError, match="no weight"):
        owners_of("c", "s", ["a", "b"], weights={"a": 1})
    with pytest.raises(InvalidWeightsError, match="rendezvous"):
        make_strategy("range", ["a"], {"a": 1.0})
    with pytest.raises(InvalidMembersError, match="StatefulSet-style"):
        owners_of("c", "s", ["alpha", "beta"], strategy="jump")


@settings(max_examples=50)
@given(st.integers(1, 40), st.integers(0, 3))
def test_jump_owners_distinct(n: int, replicas: int) -> None:
    replicas = min(replicas, n - 1)
    members = [f"c-{i}" for i in range(n)]
    got = owners_of("c", "x", members, strategy="jump", replicas=replicas)
    assert len(set(got)) == replicas + 1


def test_chore_owners_are_the_owners_of_the_reserved_key_with_replicas_clamped() -> None:
    members = [f"pod-{i}" for i in range(5)]
    assert chore_owners("sweep", members, replicas=1) == owners_of("__chore__", "sweep", members, replicas=1)
    assert chore_owners("sweep", list(reversed(members))) == chore_owners("sweep", members)[:1]
    assert chore_owners("sweep", ["solo"], replicas=3) == ["solo"]  # fewer members than replicas + 1
    assert chore_owners("sweep", [], replicas=1) == []
    # different chores land on different members often enough to spread the work
    assert len({chore_owners(f"shards/app{i}/s", members)[0] for i in range(20)}) > 1
