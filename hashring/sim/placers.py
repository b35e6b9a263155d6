"""Every strategy the simulator compares, behind one interface.

A placer returns the primary owner of every key of a :class:`SimKeys` for a
member list. The stateless strategies ignore the previous owners; the balanced
planner carries them over (that is what makes it sticky).

* ``range``, ``jump``: the library's own strategy objects
  (:func:`hashring.placement.make_strategy`), key by key.
* ``rendezvous``: the library's scores (:func:`hashring.hashing.score_matrix`),
  vectorised; the tests check it against :func:`hashring.owners_of` key by key.
* ``ketama``: the :mod:`hashring.ketama` baseline (``vnodes`` points per member).
* ``balanced``: :func:`hashring.plan_assignment` over the lease keys
  ``"<consumer>/<shard>"`` with the previous owners as ``current_owners``.
* ``stable``: :func:`hashring.stable_assignment` over the same lease keys; it
  never sees the previous owners.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Protocol

import numpy as np
import numpy.typing as npt

from hashring.balance import plan_assignment
from hashring.errors import UnknownStrategyError
from hashring.hashing import key_hash, member_hash, score_matrix
from hashring.ketama import DEFAULT_VNODES, KetamaRing, check_vnodes, ketama_key_points
from hashring.placement import make_strategy
from hashring.stable import stable_assignment
from hashring.validation import check_members

SIM_STRATEGIES = ("range", "rendezvous", "jump", "ketama", "balanced", "stable")
"""Strategies the simulator compares: the public ones, the ketama baseline, the planners."""


def kinesis_shard_id(i: int) -> str:
    """Kinesis-style shard id number ``i``: ``shardId-000000000007``."""
    return f"shardId-{i:012d}"


@dataclass(frozen=True)
class SimKeys:
    """The simulated keys: one consumer reading ``len(shards)`` shards."""

    consumer: str
    shards: tuple[str, ...]

    @classmethod
    def kinesis(cls, consumer: str, count: int) -> SimKeys:
        """``count`` Kinesis-style shard ids for one consumer."""
        return cls(consumer, tuple(kinesis_shard_id(i) for i in range(count)))

    def __len__(self) -> int:
        return len(self.shards)

    @cached_property
    def hash_list(self) -> list[int]:
        """:func:`hashring.key_hash` of every (consumer, shard) key."""
        return [key_hash(self.consumer, s) for s in self.shards]

    @cached_property
    def hashes(self) -> npt.NDArray[np.uint64]:
        """The key hashes as a NumPy array."""
        return np.array(self.hash_list, dtype=np.uint64)

    @cached_property
    def lease_keys(self) -> list[str]:
        """The planner's keys: ``"<consumer>/<shard>"``."""
        return [f"{self.consumer}/{s}" for s in self.shards]

    @cached_property
    def ketama_points(self) -> npt.NDArray[np.int64]:
        """The ketama ring points of the keys."""
        return ketama_key_points(self.consumer, self.shards)


class Placer(Protocol):
    """Places every key of a key set on a member list."""

    @property
    def name(self) -> str:
        """The strategy's name (one of :data:`SIM_STRATEGIES`)."""
        ...

    @property
    def workload(self) -> str:
        """``"statefulset"`` if it needs ``name-<ordinal>`` pods, else ``"deployment"``."""
        ...

    def place(self, members: Sequence[str], previous: Sequence[str] | None) -> list[str]:
        """The owner of each key (aligned with ``keys.shards``)."""
        ...


@dataclass
class LibraryPlacer:
    """``range`` or ``jump`` through the library's strategy objects."""

    name: str
    keys: SimKeys
    workload: str = "deployment"

    def place(self, members: Sequence[str], previous: Sequence[str] | None) -> list[str]:
        strategy = make_strategy(self.name, check_members(members))
        return [strategy.owners(h, 0)[0] for h in self.keys.hash_list]


@dataclass
class RendezvousPlacer:
    """Highest random weight with the library's scores, vectorised over all keys."""

    keys: SimKeys
    name: str = "rendezvous"
    workload: str = "deployment"

    def place(self, members: Sequence[str], previous: Sequence[str] | None) -> list[str]:
        ordered = check_members(members)
        mh = np.array([member_hash(m) for m in ordered], dtype=np.uint64)
        # Scores are fmix64(key ^ member): a bijection, so two members never tie.
        best = np.argmax(score_matrix(self.keys.hashes, mh), axis=1)
        return [ordered[i] for i in best.tolist()]


@dataclass
class KetamaPlacer:
    """The ketama ring baseline with ``vnodes`` points per member."""

    keys: SimKeys
    vnodes: int = DEFAULT_VNODES
    name: str = "ketama"
    workload: str = "deployment"

    def place(self, members: Sequence[str], previous: Sequence[str] | None) -> list[str]:
        ring = KetamaRing(members, self.vnodes)
        idx = ring.owner_indices(self.keys.ketama_points)
        return [ring.members[i] for i in idx.tolist()]


@dataclass
class BalancedPlacer:
    """:func:`hashring.plan_assignment`, carrying the previous owners over."""

    keys: SimKeys
    name: str = "balanced"
    workload: str = "deployment"

    def place(self, members: Sequence[str], previous: Sequence[str] | None) -> list[str]:
        lease_keys = self.keys.lease_keys
        current = None if previous is None else dict(zip(lease_keys, previous, strict=True))
        plan = plan_assignment(members, lease_keys, current_owners=current)
        return [plan.owner(k) for k in lease_keys]


@dataclass
class StablePlacer:
    """:func:`hashring.stable_assignment`: balanced from the members and keys alone."""

    keys: SimKeys
    name: str = "stable"
    workload: str = "deployment"

    def place(self, members: Sequence[str], previous: Sequence[str] | None) -> list[str]:
        lease_keys = self.keys.lease_keys
        plan = stable_assignment(members, lease_keys)
        return [plan.owner(k) for k in lease_keys]


def make_placer(name: str, keys: SimKeys, *, vnodes: int = DEFAULT_VNODES) -> Placer:
    """The placer for strategy ``name`` (one of :data:`SIM_STRATEGIES`)."""
    if name in ("range", "jump"):
        return LibraryPlacer(name, keys, "statefulset" if name == "jump" else "deployment")
    if name == "rendezvous":
        return RendezvousPlacer(keys)
    if name == "ketama":
        return KetamaPlacer(keys, check_vnodes(vnodes))
    if name == "balanced":
        return BalancedPlacer(keys)
    if name == "stable":
        return StablePlacer(keys)
    raise UnknownStrategyError(
        f"unknown strategy {name!r} for the simulator: choose one of {', '.join(SIM_STRATEGIES)}"
    )
