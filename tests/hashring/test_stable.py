"""Property tests of ``stable_assignment``: balanced from (members, keys) alone."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hashring import (
    Assignment,
    InvalidKeyError,
    InvalidMembersError,
    InvalidReplicasError,
    plan_assignment,
    stable_assignment,
)

members_st = st.lists(st.from_regex(r"pod-[a-z0-9]{1,5}", fullmatch=True), min_size=1,
                      max_size=15, unique=True)
keys_st = st.lists(st.from_regex(r"orders/shard-[0-9]{1,4}", fullmatch=True), max_size=120,
                   unique=True)


def spread(plan: Assignment) -> int:
    counts = plan.counts()
    return max(counts.values()) - min(counts.values())


def moved(a: Assignment, b: Assignment) -> int:
    return sum(1 for k in a.owners if a.owner(k) != b.owner(k))


@given(members_st, keys_st, st.randoms(use_true_random=False), st.integers(0, 2))
def test_deterministic_order_independent_and_balanced(
    members: list[str], keys: list[str], rnd: random.Random, replicas: int
) -> None:
    replicas = min(replicas, len(members) - 1)
    a = stable_assignment(members, keys, replicas=replicas)
    m2, k2 = members[:], keys[:]
    rnd.shuffle(m2)
    rnd.shuffle(k2)
    b = stable_assignment(m2, k2, replicas=replicas)
    assert a.owners == b.owners and a.quotas == b.quotas
    assert set(a.owners) == set(keys)
    assert spread(a) <= 1 and sum(a.counts().values()) == len(keys)
    for m in members:
        assert a.keys_of(m) == sorted(k for k, o in a.owners.items() if o[0] == m)
    for owners in a.owners.values():
        assert len(owners) == replicas + 1 and len(set(owners)) == len(owners)
        assert set(owners) <= set(members)


# Measured envelope (1,500 random fleets, N <= 40): moved <= 4 x optimum + 9; within 1.5 x
# from K/N ~ 1000 (see hashring/stable.py for the figures). Derandomized: a bound, not a flake.
MOVE_FACTOR = 4
MOVE_SLACK = 12


@settings(max_examples=60, derandomize=True, deadline=None)
@given(st.integers(2, 40), st.sampled_from([2, 3, 5, 10, 50, 1000]), st.integers(0, 2**32))
def test_one_join_or_leave_moves_a_bounded_multiple_of_the_optimum(
    n: int, per_member: int, seed: int
) -> None:
    rnd = random.Random(seed)
    if per_member == 1000:
        n = min(n, 6)
    members = [f"pod-{rnd.getrandbits(40):010x}" for _ in range(n + 1)]
    keys = [f"app/stream/shard-{rnd.getrandbits(48):012x}" for _ in range(n * per_member)]
    small, big = stable_assignment(members[:n], keys), stable_assignment(members, keys)
    assert spread(small) <= 1 and spread(big) <= 1
    # A join from `small` to `big` and a leave from `big` to `small` move the same keys;
    # the optimum is the newcomer's (the leaver's) keys, each of which must move.
    optimum = big.counts()[members[n]]
    assert optimum <= moved(small, big) <= MOVE_FACTOR * optimum + MOVE_SLACK
    if per_member >= 1000:
        assert moved(small, big) <= 1.5 * optimum


@given(members_st, keys_st)
def test_the_sticky_planner_keeps_a_stable_assignment_as_it_is(
    members: list[str], keys: list[str]
) -> None:
    stable = stable_assignment(members, keys)
    current = {k: stable.owner(k) for k in keys}
    replanned = plan_assignment(members, keys, current)
    assert replanned.moves_from(current) == 0 and replanned.quotas == stable.quotas


@settings(max_examples=40)
@given(st.dictionaries(st.from_regex(r"m[0-9]{1,3}", fullmatch=True), st.integers(1, 5),
                       min_size=1, max_size=8),
       st.integers(0, 200))
def test_weighted_quotas_follow_the_weights(weights: dict[str, int], n_keys: int) -> None:
    keys = [f"k{i}" for i in range(n_keys)]
    plan = stable_assignment(list(weights), keys, weights=weights)
    total = sum(weights.values())
    for m, count in plan.counts().items():
        assert abs(count - n_keys * weights[m] / total) < 1


def test_same_inputs_return_the_cached_plan_and_changed_inputs_do_not() -> None:
    members = tuple(f"pod-{i}" for i in range(7))
    keys = tuple(f"k{i}" for i in range(100))
    first = stable_assignment(members, keys, replicas=1)
    assert stable_assignment(members, keys, replicas=1) is first
    assert stable_assignment(list(members), list(keys), replicas=1).owners == first.owners
    assert stable_assignment(members, keys[:-1], replicas=1).owners != first.owners
    assert stable_assignment(members, keys, replicas=2) is not first
    from_iterators = stable_assignment(iter(members), (k for k in keys), replicas=1)
    assert from_iterators.owners == first.owners


def test_invalid_input_is_rejected_with_a_fix() -> None:
    with pytest.raises(InvalidMembersError, match="empty"):
        stable_assignment([], ["k"])
    with pytest.raises(InvalidKeyError, match="duplicate keys"):
        stable_assignment(["a"], ["k", "k"])
    with pytest.raises(InvalidKeyError):
        stable_assignment(["a"], "k")
    with pytest.raises(InvalidReplicasError):
        stable_assignment(["a"], ["k"], replicas=1)
