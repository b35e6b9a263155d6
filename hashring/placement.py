"""Stateless placement strategies: the owners of a key given the sorted member list.

Each strategy returns the primary owner followed by ``replicas`` distinct backups.
A key's owners depend only on its 64-bit hash and the member list (and weights).

* ``range``: the Knock algorithm. The keyspace [0, 2**64) is split into N equal
  ranges over the sorted members; backups are the next members in sorted order.
* ``rendezvous`` (default): highest random weight. Owners are the members with
  the highest scores; weights give proportional shares. Moves only the keys
  that must move when a member joins or leaves.
* ``jump``: jump consistent hash over StatefulSet ordinals. Member ``name-<i>``
  is bucket ``i``; the bucket count is the highest ordinal + 1, so a missing
  (not ready) ordinal's keys fall through to the next candidates.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from hashring.errors import InvalidMembersError, InvalidWeightsError, UnknownStrategyError
from hashring.hashing import (
    MASK64,
    fmix64,
    jump_bucket,
    key_hash,
    member_hash,
    range_index,
    score,
    weighted_score,
)
from hashring.validation import check_members, check_replicas, check_weights

STRATEGIES = ("range", "rendezvous", "jump")
_ORDINAL = re.compile(r"^(?P<base>.+)-(?P<ordinal>0|[1-9][0-9]*)$")
_GOLDEN = 0x9E3779B97F4A7C15


class Strategy(Protocol):
    """A stateless placement strategy bound to one sorted member list."""

    @property
    def name(self) -> str:
        """The strategy's name."""
        ...

    @property
    def members(self) -> tuple[str, ...]:
        """The sorted members it places keys on."""
        ...

    def owners(self, khash: int, replicas: int) -> list[str]:
        """Primary first, then ``replicas`` distinct backups (fewer if members run out)."""
        ...


@dataclass(frozen=True)
class RangePlacement:
    """Knock's keyspace split: member i owns hashes in [i * 2**64 / N, (i+1) * 2**64 / N)."""

    members: tuple[str, ...]
    name: str = "range"

    def owners(self, khash: int, replicas: int) -> list[str]:
        n = len(self.members)
        i = range_index(khash, n)
        return [self.members[(i + r) % n] for r in range(min(replicas + 1, n))]


class RendezvousPlacement:
    """Highest random weight: owners are the top-scoring members for the key."""

    name = "rendezvous"

    def __init__(self, members: tuple[str, ...], weights: Mapping[str, float] | None = None):
        self.members = members
        self._hashes = [(member_hash(m), m) for m in members]
        self._weights = None if weights is None else [weights[m] for m in members]

    def owners(self, khash: int, replicas: int) -> list[str]:
        count = min(replicas + 1, len(self.members))
        if self._weights is None:
            scored: list[tuple[float | int, str]] = [
                (score(khash, mh), m) for mh, m in self._hashes
            ]
        else:
            scored = [
                (weighted_score(score(khash, mh), w), m)
                for (mh, m), w in zip(self._hashes, self._weights, strict=True)
            ]
        if count == 1:
            return [max(scored)[1]]
        scored.sort(reverse=True)
        return [m for _, m in scored[:count]]


def parse_ordinal(member: str) -> int:
    """The StatefulSet ordinal of ``name-<i>``; raises if the name has none."""
    match = _ORDINAL.match(member)
    if match is None:
        raise InvalidMembersError(
            f"the jump strategy needs StatefulSet-style names 'name-<ordinal>', got {member!r}; "
            "use strategy='rendezvous' for other names"
        )
    return int(match.group("ordinal"))


class JumpPlacement:
    """Jump consistent hash: ordinal i is bucket i; missing ordinals fall through."""

    name = "jump"
    _MAX_PROBES = 64

    def __init__(self, members: tuple[str, ...]):
        self.members = members
        by_ordinal: dict[int, str] = {}
        for m in members:
            o = parse_ordinal(m)
            if o in by_ordinal:
                raise InvalidMembersError(
                    f"members {by_ordinal[o]!r} and {m!r} share ordinal {o}: "
                    "jump needs one member per ordinal"
                )
            by_ordinal[o] = m
        self._by_ordinal = by_ordinal
        self._buckets = max(by_ordinal) + 1
        self._fallback = RendezvousPlacement(members)

    def owners(self, khash: int, replicas: int) -> list[str]:
        count = min(replicas + 1, len(self.members))
        out: list[str] = []
        h = khash
        for _ in range(self._MAX_PROBES):
            m = self._by_ordinal.get(jump_bucket(h, self._buckets))
            if m is not None and m not in out:
                out.append(m)
                if len(out) == count:
                    return out
            h = fmix64((h + _GOLDEN) & MASK64)
        # Very sparse ordinals: finish deterministically by rendezvous order.
        for m in self._fallback.owners(khash, len(self.members) - 1):
            if m not in out:
                out.append(m)
                if len(out) == count:
                    break
        return out


def make_strategy(
    name: str, members: Sequence[str], weights: Mapping[str, float] | None = None
) -> Strategy:
    """Build the named strategy for an already validated, sorted member tuple."""
    members_t = tuple(members)
    if name == "rendezvous":
        return RendezvousPlacement(members_t, weights)
    if weights is not None and name in STRATEGIES:
        raise InvalidWeightsError(
            f"strategy {name!r} does not support weights; use strategy='rendezvous'"
        )
    if name == "range":
        return RangePlacement(members_t)
    if name == "jump":
        return JumpPlacement(members_t)
    raise UnknownStrategyError(
        f"unknown strategy {name!r}: choose one of {', '.join(STRATEGIES)}"
    )


CHORE_CONSUMER = "__chore__"
"""The consumer name of reserved ring keys: singleton chores owned like any other key."""


def chore_owners(chore: str, members: Sequence[str], *, replicas: int = 0) -> list[str]:
    """Who runs the singleton ``chore``: the owner of the reserved key ``__chore__/<chore>``
    among ``members``, then up to ``replicas`` backups (fewer if there are fewer members);
    ``[]`` without members. Every member computes the same list from the same member list."""
    if not members:
        return []
    return owners_of(CHORE_CONSUMER, chore, members, replicas=min(replicas, len(members) - 1))


def owners_of(
    consumer: str,
    shard: str,
    members: Sequence[str],
    *,
    strategy: str = "rendezvous",
    replicas: int = 0,
    weights: Mapping[str, float] | None = None,
) -> list[str]:
    """One-shot owners of a (consumer, shard) key; validates every argument."""
    ordered = check_members(members)
    check_replicas(replicas, len(ordered))
    w = check_weights(weights, ordered)
    return make_strategy(strategy, ordered, w).owners(key_hash(consumer, shard), replicas)
