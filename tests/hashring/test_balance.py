"""Property tests of the balanced, sticky planner (DESIGN.md 'Balanced planner')."""

from __future__ import annotations

import random

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from hashring import (
    InvalidKeyError,
    InvalidMembersError,
    InvalidReplicasError,
    InvalidWeightsError,
    plan_assignment,
)

members_st = st.lists(st.from_regex(r"pod-[a-z0-9]{1,5}", fullmatch=True), min_size=1,
                      max_size=15, unique=True)
keys_st = st.lists(st.from_regex(r"orders/shard-[0-9]{1,4}", fullmatch=True), max_size=120,
                   unique=True)


def spread(counts: dict[str, int]) -> int:
    return max(counts.values()) - min(counts.values())


@given(members_st, keys_st, st.randoms(use_true_random=False))
def test_deterministic_and_order_independent(
    members: list[str], keys: list[str], rnd: random.Random
) -> None:
    a = plan_assignment(members, keys)
    m2, k2 = members[:], keys[:]
    rnd.shuffle(m2)
    rnd.shuffle(k2)
    b = plan_assignment(m2, k2)
    assert a.owners == b.owners
    current = {k: rnd.choice([*members, "gone"]) for k in keys}
    items = list(current.items())
    rnd.shuffle(items)
    assert plan_assignment(members, keys, current).owners == plan_assignment(
        m2, k2, dict(items)
    ).owners


@given(members_st, keys_st)
def test_balanced_without_current_owners(members: list[str], keys: list[str]) -> None:
    plan = plan_assignment(members, keys)
    assert set(plan.owners) == set(keys)
    assert spread(plan.counts()) <= 1
    assert sum(plan.counts().values()) == len(keys)


@given(members_st, keys_st, st.randoms(use_true_random=False))
def test_balanced_and_minimal_moves_from_any_start(
    members: list[str], keys: list[str], rnd: random.Random
) -> None:
    current = {k: rnd.choice([*members, "dead-1", "dead-2"]) for k in keys}
    plan = plan_assignment(members, keys, current)
    counts = plan.counts()
    assert spread(counts) <= 1
    # A key moves only if its owner is gone or was over its quota, and exactly as
    # many keys leave each over-quota member as its excess.
    held = {m: sum(1 for o in current.values() if o == m) for m in members}
    for key, owners in plan.owners.items():
        if owners[0] != current[key] and current[key] in held:
            assert held[current[key]] > plan.quotas[current[key]]
    dead = sum(1 for o in current.values() if o not in held)
    excess = sum(max(0, held[m] - plan.quotas[m]) for m in members)
    assert plan.moves_from(current) == dead + excess


@given(members_st, keys_st, st.from_regex(r"new-[a-z]{1,4}", fullmatch=True))
def test_one_join_moves_exactly_the_newcomers_quota(
    members: list[str], keys: list[str], newcomer: str
) -> None:
    start = plan_assignment(members, keys)
    current = {k: start.owner(k) for k in keys}
    after = plan_assignment([*members, newcomer], keys, current)
    assert after.moves_from(current) == after.quotas[newcomer] == len(keys) // (len(members) + 1)
    assert spread(after.counts()) <= 1
    for key, owners in after.owners.items():
        assert owners[0] in (current[key], newcomer)  # keys only move to the newcomer


@given(members_st, keys_st, st.data())
def test_one_leave_moves_exactly_the_leavers_keys(
    members: list[str], keys: list[str], data: st.DataObject
) -> None:
    assume(len(members) >= 2)
    start = plan_assignment(members, keys)
    current = {k: start.owner(k) for k in keys}
    leaver = data.draw(st.sampled_from(members))
    rest = [m for m in members if m != leaver]
    after = plan_assignment(rest, keys, current)
    assert after.moves_from(current) == sum(1 for o in current.values() if o == leaver)
    assert spread(after.counts()) <= 1


@given(members_st, keys_st, st.integers(0, 3))
def test_backups_are_distinct_from_the_primary(
    members: list[str], keys: list[str], replicas: int
) -> None:
    replicas = min(replicas, len(members) - 1)
    plan = plan_assignment(members, keys, replicas=replicas)
    for owners in plan.owners.values():
        assert len(owners) == replicas + 1
        assert len(set(owners)) == len(owners)
        assert set(owners) <= set(members)


@settings(max_examples=50)
@given(
    st.dictionaries(st.from_regex(r"m[0-9]{1,3}", fullmatch=True),
                    st.integers(1, 5), min_size=1, max_size=8),
    st.integers(0, 200),
)
def test_weighted_quotas_follow_the_weights(weights: dict[str, int], n_keys: int) -> None:
    keys = [f"k{i}" for i in range(n_keys)]
    plan = plan_assignment(list(weights), keys, weights=weights)
    total = sum(weights.values())
    for m, count in plan.counts().items():
        exact = n_keys * weights[m] / total
        assert abs(count - exact) < 1  # largest remainder: floor or ceil of the share


def test_empty_keys_give_an_empty_plan() -> None:
    plan = plan_assignment(["a", "b"], [])
    assert plan.owners == {} and plan.counts() == {"a": 0, "b": 0}


def test_stickiness_prefers_existing_holders_for_the_larger_quota() -> None:
    keys = [f"k{i}" for i in range(7)]
    current = dict.fromkeys(keys[:4], "b") | dict.fromkeys(keys[4:], "a")
    plan = plan_assignment(["a", "b"], keys, current)
    assert plan.quotas == {"a": 3, "b": 4}
    assert plan.moves_from(current) == 0


def test_invalid_input_is_rejected_with_a_fix() -> None:
    with pytest.raises(InvalidMembersError, match="empty"):
        plan_assignment([], ["k"])
    with pytest.raises(InvalidMembersError, match="duplicate"):
        plan_assignment(["a", "a"], ["k"])
    with pytest.raises(InvalidKeyError, match="must be strings"):
        plan_assignment(["a"], [1, 2])  # type: ignore[list-item]
    with pytest.raises(InvalidKeyError, match="duplicate keys"):
        plan_assignment(["a"], ["k", "k"])
    with pytest.raises(InvalidReplicasError):
        plan_assignment(["a"], ["k"], replicas=1)
    with pytest.raises(InvalidWeightsError):
        plan_assignment(["a", "b"], ["k"], weights={"a": 1.0, "b": -1.0})
