"""``stable_assignment``: a balanced assignment from the members and keys alone.

For a fleet-scale lease loop in which a member cannot read every current owner:
every member computes the same owners from the member list and the key list.

Algorithm ("consistent hashing, then the sticky planner"): every key first
lands on the first member clockwise on the ring of member points
(:mod:`hashring.point_ring`, 256 points per member); then the planner of
:func:`hashring.plan_assignment` balances that placement as if it were the
current owners: quotas floor/ceil(K/N) (the larger ones to the members that
landed more keys), each member keeps its highest-scoring landed keys up to its
quota, and the rest walk on clockwise to the first member with room. A join or
a leave changes the landing of only the keys whose first member is the
newcomer or the leaver, so most of the balanced result stays put.

Properties (``tests/hashring/test_stable.py``): deterministic across processes and
platforms (integer hashing only; no dict/set order or floating point in an
unweighted decision), independent of input order, max - min <= 1 unweighted,
backups distinct from the primary.

Keys moved on one join or leave: between 1.04x (K/N = 1000) and 3.3x (K/N = 2) the
optimum, the best of the stateless designs measured (docs/placement-design.md compares
them); ``tests/hashring/test_stable.py`` pins the envelope (moved <= 4 x optimum + 12; <= 1.5x at
K/N = 1000).

The scoped lease loop therefore uses this function only until a plan has been published:
then every member plans with :func:`hashring.plan_assignment` from the last published plan
(``kinesis/lease_loop/plan.py``), which moves exactly the optimum.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from hashring.balance import (
    Assignment,
    balance_from,
    cached,
    collected,
    prepared,
    remember,
)


def stable_assignment(
    members: Iterable[str],
    keys: Iterable[str],
    *,
    replicas: int = 0,
    weights: Mapping[str, float] | None = None,
) -> Assignment:
    """A balanced assignment of ``keys`` to ``members`` that depends on nothing else.

    Unweighted, loads differ by at most one key; ``weights`` gives members
    proportional quotas (largest remainders); ``replicas`` backups per key are
    the next distinct members clockwise on the ring. Calls with the same inputs
    as one of the last few return the cached :class:`Assignment`.
    """
    members, keys = collected(members), collected(keys)
    inputs = (members, keys, weights, replicas)
    cache_key, hit = cached("stable", *inputs)
    if hit is not None:
        return hit
    fleet, ks, w = prepared(members, keys, weights, replicas)
    landed = fleet.ring.first(ks.hashes)
    plan = balance_from(fleet, ks, landed, w, replicas)
    remember(cache_key, inputs, plan)
    return plan


def watched_by_successors(plan: Assignment, replicas: int) -> Assignment:
    """``plan`` with each key's backups replaced by its primary's successors in the sorted
    member list (wrapping around): every member's keys are backed up by the same
    ``replicas`` members, so one member watches one holder instead of every holder whose
    keys it happens to back up. Primaries and quotas are unchanged."""
    members = plan.members
    n = min(replicas, len(members) - 1)
    if n <= 0:
        return Assignment(members, {k: owners[:1] for k, owners in plan.owners.items()}, plan.quotas)
    position = {m: i for i, m in enumerate(members)}
    chains = {
        m: (m, *(members[(position[m] + j) % len(members)] for j in range(1, n + 1))) for m in members
    }
    return Assignment(members, {k: chains[owners[0]] for k, owners in plan.owners.items()}, plan.quotas)
