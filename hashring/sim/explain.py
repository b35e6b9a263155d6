"""Who owns which key and why: the data behind ``hashring explain``.

For every shard of one consumer, :func:`explain` returns the owners (primary
first, then the backups) computed by the library itself, plus the strategy's
reasoning:

* ``range``: the keyspace range [start, end) of the sorted member list that
  holds the key's hash (multiply-shift, ``(h * N) >> 64``);
* ``rendezvous``: the members' scores for the key, highest first;
* ``jump``: the jump-hash bucket (StatefulSet ordinal) of the key, and whether
  the key fell through to another ordinal because that one is missing;
* ``balanced``: :func:`hashring.plan_assignment` over the lease keys
  ``"<consumer>/<shard>"`` (no current owners): each member's quota and the
  rank of the owner in the key's walk around the ring of member points (rank
  > 1 when the members met first were already at quota).
* ``stable``: :func:`hashring.stable_assignment` over the same lease keys: the
  member the key landed on (first clockwise on the ring of member points), and
  whether it stayed there or walked on because that member was over quota.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from hashring.balance import fleet_of, plan_assignment
from hashring.errors import InvalidKeyError, UnknownStrategyError
from hashring.hashing import jump_bucket, key_hash, member_hash, range_index, score, string_key_hash
from hashring.placement import owners_of, parse_ordinal
from hashring.sim.placers import kinesis_shard_id
from hashring.stable import stable_assignment
from hashring.validation import check_members, check_replicas

EXPLAIN_STRATEGIES = ("range", "rendezvous", "jump", "balanced", "stable")
_TOP_SCORES = 3


@dataclass(frozen=True)
class KeyExplanation:
    """The owners of one shard's key and the reason."""

    shard: str
    hashed_key: str
    """What was hashed: ``"(consumer, shard)"`` or the planner's lease key."""
    key_hash: int
    owners: tuple[str, ...]
    reason: str
    detail: dict[str, Any]

    @property
    def primary(self) -> str:
        """The primary owner."""
        return self.owners[0]

    @property
    def backups(self) -> tuple[str, ...]:
        """The backups, in takeover order."""
        return self.owners[1:]

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready fields (the hash as an int and as hex)."""
        return {
            "shard": self.shard,
            "hashed_key": self.hashed_key,
            "key_hash": self.key_hash,
            "key_hash_hex": f"0x{self.key_hash:016x}",
            "primary": self.primary,
            "backups": list(self.backups),
            "reason": self.reason,
            "detail": self.detail,
        }


@dataclass(frozen=True)
class Explanation:
    """Everything ``hashring explain`` prints."""

    strategy: str
    consumer: str
    members: tuple[str, ...]
    replicas: int
    keys: tuple[KeyExplanation, ...]
    quotas: dict[str, int] | None = None

    def counts(self) -> dict[str, dict[str, int]]:
        """Per member (sorted): how many keys it is primary and backup for."""
        out = {m: {"primary": 0, "backup": 0} for m in self.members}
        for k in self.keys:
            out[k.primary]["primary"] += 1
            for b in k.backups:
                out[b]["backup"] += 1
        return out

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready data."""
        return {
            "strategy": self.strategy,
            "consumer": self.consumer,
            "members": list(self.members),
            "replicas": self.replicas,
            "keys": [k.to_dict() for k in self.keys],
            "counts": self.counts(),
            "quotas": self.quotas,
        }


def shard_list(shards: int | None = None, shard_ids: Sequence[str] | None = None) -> list[str]:
    """Kinesis-style ids ``shardId-000000000000``... (``shards`` of them) or ``shard_ids``."""
    if shards is not None and shard_ids is not None:
        raise InvalidKeyError("give either a shard count or explicit shard ids, not both")
    if shard_ids is not None:
        ids = [s.strip() for s in shard_ids]
        if not ids or any(not s for s in ids):
            raise InvalidKeyError(f"shard ids must be non-empty names, got {list(shard_ids)!r}")
        dups = sorted({s for s in ids if ids.count(s) > 1})
        if dups:
            raise InvalidKeyError(f"duplicate shard ids {dups}: list every shard once")
        return ids
    count = 16 if shards is None else shards
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise InvalidKeyError(f"the shard count must be an int >= 1, got {count!r}")
    return [kinesis_shard_id(i) for i in range(count)]


def _range_reason(h: int, members: tuple[str, ...], owners: list[str]) -> tuple[str, dict[str, Any]]:
    n = len(members)
    i = range_index(h, n)
    start = -(-(i << 64) // n)  # ceil(i * 2**64 / n): the first hash with (h*n)>>64 == i
    end = -(-((i + 1) << 64) // n)
    assert members[i] == owners[0]
    reason = (f"hash in range {i + 1}/{n} [0x{start:016x}, 0x{end:016x}) of the sorted members"
              " -> " + members[i])
    if len(owners) > 1:
        reason += "; backups: the next members in sorted order"
    return reason, {"range_index": i, "range_start": start, "range_end": end}


def _rendezvous_reason(h: int, members: tuple[str, ...], replicas: int
                       ) -> tuple[str, dict[str, Any]]:
    scored = sorted(((score(h, member_hash(m)), m) for m in members), reverse=True)
    top = scored[: min(len(scored), replicas + _TOP_SCORES)]
    reason = "highest scores: " + " > ".join(f"{m} 0x{s:016x}" for s, m in top)
    if len(scored) > len(top):
        reason += f" > ... ({len(scored) - len(top)} more)"
    return reason, {"scores": [[m, s] for s, m in top]}


def _jump_reason(h: int, members: tuple[str, ...], owners: list[str]) -> tuple[str, dict[str, Any]]:
    by_ordinal = {parse_ordinal(m): m for m in members}
    buckets = max(by_ordinal) + 1
    bucket = jump_bucket(h, buckets)
    hit = by_ordinal.get(bucket)
    if hit == owners[0]:
        reason = f"jump bucket {bucket} of {buckets} -> ordinal {bucket} = {hit}"
    else:
        reason = (f"jump bucket {bucket} of {buckets}: ordinal {bucket} is not a member, "
                  f"the key fell through (rehashed) to {owners[0]}")
    if len(owners) > 1:
        reason += "; backups: the next distinct buckets of the rehash sequence"
    return reason, {"buckets": buckets, "bucket": bucket, "fell_through": hit != owners[0]}


def explain(
    members: Sequence[str],
    consumer: str,
    shards: Sequence[str],
    *,
    strategy: str = "rendezvous",
    replicas: int = 0,
) -> Explanation:
    """Owners and reasons for every shard of ``consumer`` under ``strategy``."""
    if strategy not in EXPLAIN_STRATEGIES:
        raise UnknownStrategyError(
            f"unknown strategy {strategy!r}: choose one of {', '.join(EXPLAIN_STRATEGIES)}"
        )
    ordered = check_members(members)
    check_replicas(replicas, len(ordered))
    shard_ids = shard_list(shard_ids=list(shards))
    if strategy == "balanced":
        return _explain_balanced(ordered, consumer, shard_ids, replicas)
    if strategy == "stable":
        return _explain_stable(ordered, consumer, shard_ids, replicas)
    out = []
    for shard in shard_ids:
        h = key_hash(consumer, shard)
        owners = owners_of(consumer, shard, ordered, strategy=strategy, replicas=replicas)
        if strategy == "range":
            reason, detail = _range_reason(h, ordered, owners)
        elif strategy == "jump":
            reason, detail = _jump_reason(h, ordered, owners)
        else:
            reason, detail = _rendezvous_reason(h, ordered, replicas)
        out.append(KeyExplanation(shard, f"({consumer!r}, {shard!r})", h, tuple(owners),
                                  reason, detail))
    return Explanation(strategy, consumer, ordered, replicas, tuple(out))


def _explain_balanced(members: tuple[str, ...], consumer: str, shards: list[str],
                      replicas: int) -> Explanation:
    lease_keys = [f"{consumer}/{s}" for s in shards]
    plan = plan_assignment(members, lease_keys, replicas=replicas)
    fleet = fleet_of(members)
    hashes = np.array([string_key_hash(k) for k in lease_keys], dtype=np.uint64)
    walks = fleet.ring.walk(hashes, len(members)).tolist()
    out = []
    for shard, lk, h, walk in zip(shards, lease_keys, hashes.tolist(), walks, strict=True):
        order = [members[i] for i in walk]
        owners = plan.owners[lk]
        rank = order.index(owners[0]) + 1
        quota = plan.quotas[owners[0]]
        if rank == 1:
            reason = f"ring choice #1 of {len(members)}; {owners[0]} quota {quota}"
        else:
            reason = (f"ring choice #{rank} of {len(members)}: "
                      f"{', '.join(order[: rank - 1])} already at quota; "
                      f"{owners[0]} quota {quota}")
        if replicas:
            reason += "; backups: the next distinct members clockwise"
        out.append(KeyExplanation(shard, lk, h, owners, reason,
                                  {"rank": rank, "quota": quota, "preference": order[:5]}))
    return Explanation("balanced", consumer, members, replicas, tuple(out), dict(plan.quotas))


def _explain_stable(members: tuple[str, ...], consumer: str, shards: list[str],
                    replicas: int) -> Explanation:
    lease_keys = [f"{consumer}/{s}" for s in shards]
    plan = stable_assignment(members, lease_keys, replicas=replicas)
    fleet = fleet_of(members)
    hashes = np.array([string_key_hash(k) for k in lease_keys], dtype=np.uint64)
    landed = [members[i] for i in fleet.ring.first(hashes).tolist()]
    out = []
    for shard, lk, h, first in zip(shards, lease_keys, hashes.tolist(), landed, strict=True):
        owners = plan.owners[lk]
        quota = plan.quotas[owners[0]]
        if owners[0] == first:
            reason = f"landed on {first} (first clockwise on the ring); quota {quota}"
        else:
            reason = (f"landed on {first}, over its quota {plan.quotas[first]}: walked on "
                      f"clockwise to {owners[0]} (quota {quota})")
        if replicas:
            reason += "; backups: the next distinct members clockwise"
        out.append(KeyExplanation(shard, lk, h, owners, reason,
                                  {"landed": first, "quota": quota,
                                   "walked": owners[0] != first}))
    return Explanation("stable", consumer, members, replicas, tuple(out), dict(plan.quotas))
