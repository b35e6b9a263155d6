"""``HashRing``: the lease decision a consumer asks before acquiring a lease."""

from __future__ import annotations

import enum
import logging
import threading
from collections.abc import Hashable, Mapping

from hashring.hashing import key_hash
from hashring.membership.base import Membership
from hashring.placement import STRATEGIES, Strategy, make_strategy
from hashring.validation import check_members, check_replicas, check_weights

log = logging.getLogger(__name__)


class Role(enum.Enum):
    """What this member is for a key."""

    PRIMARY = "primary"
    """This member owns the key: it should hold the lease."""
    BACKUP = "backup"
    """This member takes over when the owners before it are gone."""
    NONE = "none"
    """Another member owns the key and this member is not a backup."""
    NOT_READY = "not_ready"
    """This member is not in the member list yet, so it owns nothing."""


class HashRing:
    """Answers "may this member acquire the lease of (consumer, shard)?".

    The decision is cached per key and recomputed only when ``membership.version``
    changes, so ``can_acquire_lease`` is a dictionary lookup on the hot path.

    When the member list shrinks below ``replicas + 1``, ``owners`` names every
    member (fewer backups) instead of failing inside a consumer's lease loop.
    """

    def __init__(
        self,
        membership: Membership,
        strategy: str = "rendezvous",
        replicas: int = 0,
        *,
        weights: Mapping[str, float] | None = None,
        cache_size: int = 1 << 16,
    ):
        if not isinstance(membership, Membership):
            raise TypeError(
                "membership must implement the hashring.Membership protocol "
                f"(members(), self_id, version), got {type(membership).__name__}"
            )
        if strategy not in STRATEGIES:
            make_strategy(strategy, ("a",))  # raises UnknownStrategyError with the choices
        if strategy != "rendezvous" and weights is not None:
            make_strategy(strategy, ("a-0",), weights)  # raises InvalidWeightsError
        self.membership = membership
        self.strategy = strategy
        self.replicas = check_replicas(replicas)
        self._weights = dict(weights) if weights is not None else None
        self._cache_size = cache_size
        self._lock = threading.Lock()
        self._version: Hashable = object()
        self._placement: Strategy | None = None
        self._members: tuple[str, ...] = ()
        self._cache: dict[tuple[str, str], tuple[str, ...]] = {}
        self._ready = True
        self._warned_short = False

    def _refresh(self, version: Hashable) -> None:
        members = self.membership.members()
        with self._lock:
            self._cache = {}
            self._version = version
            self._members = members
            if not members:
                self._placement = None
            else:
                ordered = check_members(members)
                weights = self._weights
                if weights is not None:
                    weights = check_weights(
                        {m: weights.get(m, 1.0) for m in ordered}, ordered
                    )
                self._placement = make_strategy(self.strategy, ordered, weights)
            ready = self.membership.self_id in members
            if ready != self._ready:
                self._ready = ready
                if ready:
                    log.info("member %s is in the member list: acquiring leases",
                             self.membership.self_id)
                else:
                    log.warning(
                        "member %s is not in the member list (%d members): not ready, "
                        "can_acquire_lease is False until it appears",
                        self.membership.self_id, len(members),
                    )
            if members and len(members) <= self.replicas and not self._warned_short:
                self._warned_short = True
                log.warning("only %d members for replicas=%d: fewer backups than asked",
                            len(members), self.replicas)

    def owners(self, consumer: str, shard: str) -> list[str]:
        """Primary owner first, then the backups; empty if there are no members."""
        return list(self._owners(consumer, shard))

    def _owners(self, consumer: str, shard: str) -> tuple[str, ...]:
        version = self.membership.version
        if version != self._version:
            self._refresh(version)
        cache = self._cache
        found = cache.get((consumer, shard))
        if found is not None:
            return found
        placement = self._placement
        if placement is None:
            return ()
        result = tuple(placement.owners(key_hash(consumer, shard), self.replicas))
        if len(cache) >= self._cache_size:
            cache.clear()
        cache[(consumer, shard)] = result
        return result

    def can_acquire_lease(self, consumer: str, shard: str) -> bool:
        """True when this member is the primary owner of the key and is ready."""
        owners = self._owners(consumer, shard)
        return self._ready and bool(owners) and owners[0] == self.membership.self_id

    def role(self, consumer: str, shard: str) -> Role:
        """This member's role for the key."""
        owners = self._owners(consumer, shard)
        if not self._ready:
            return Role.NOT_READY
        me = self.membership.self_id
        if owners and owners[0] == me:
            return Role.PRIMARY
        return Role.BACKUP if me in owners else Role.NONE

    def backup_rank(self, consumer: str, shard: str) -> int | None:
        """0 for the primary, 1 for the first backup, ...; None if not an owner."""
        owners = self._owners(consumer, shard)
        me = self.membership.self_id
        return owners.index(me) if self._ready and me in owners else None

    @property
    def ready(self) -> bool:
        """Whether this member is in the (current) member list."""
        version = self.membership.version
        if version != self._version:
            self._refresh(version)
        return self._ready

    def __repr__(self) -> str:
        return (f"HashRing(strategy={self.strategy!r}, replicas={self.replicas}, "
                f"members={len(self._members)}, self={self.membership.self_id!r})")
