"""A member of the previous release, for mixed-build schedules: the rules it ran by, on its own.

The release before session leases renewed every held lease row on every tick and judged
expiry by the row alone: a row whose (counter, owner) did not change for a lease duration on
its clock was expired and could be taken by the planned owner (then its backups after a grace
each, anyone after ``orphan_timeout``). It scanned the table every round, planned with
:func:`hashring.plan_assignment` from the current owners over its member list, adopted
hand-offs addressed to it, handed off what its plan gave to others, and processed a lease
until ``lease_duration - tick`` after its last successful write of it. A row it could not
parse (an unknown ``leaseState``) was reported and never written. Those are exactly the
rules modelled here, over the same fenced writes (:class:`~kinesis.lease_loop.table.leases.LeaseTable`
without a session, which writes rows in the previous format).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from hashring import plan_assignment
from kinesis.errors import KinesisHashRingError, LeaseLostError
from kinesis.lease_loop.table.leases import LeaseTable
from kinesis.lease_loop.table.model import Lease, LeaseState, TableSnapshot

if TYPE_CHECKING:
    from tests.fleetsim.world import SimMember, World

OLD_STATES = {"ACTIVE", "SHARD_END"}
log = logging.getLogger("kinesis.sim.legacy")


@dataclass
class _Held:
    lease: Lease
    valid_until: float


class LegacyMember:
    """The previous release's lease loop for one member (see the module docs)."""

    def __init__(self, world: World, member: SimMember, table: LeaseTable, keys: Sequence[str],
                 provider: Callable[[TableSnapshot], list[str]] | None = None):
        self.world = world
        self.member = member
        self.table = table
        self.keys = list(keys)
        self.provider = provider
        self.me = member.id
        t = world.timing
        self.d, self.tick_interval, self.grace, self.orphan = t.lease_duration, t.tick, t.lease_duration, t.orphan
        self.held: dict[str, _Held] = {}
        self.seen: dict[str, tuple[int, str | None, float]] = {}
        self.counters: dict[str, int] = {"takeovers": 0, "handoffs": 0, "adopted": 0}
        self.suspects: dict[str, float] = {}
        """Members not handed anything: they let a lease (or an offer) expire, until orphan_timeout after."""

    def _now(self) -> float:
        return self.member.local(self.world.now)

    # --- what the world asks of a coordinator -------------------------------------------

    def held_keys(self) -> tuple[str, ...]:
        return tuple(sorted(self.held))

    def holds(self, key: str) -> bool:
        h = self.held.get(key)
        return h is not None and self._now() < h.valid_until

    def checkpoint(self, key: str, checkpoint: Any) -> Lease:
        h = self.held.get(key)
        if h is None:
            raise LeaseLostError(f"{self.me} does not hold {key}")
        stamp = self._now()
        try:
            h.lease = self.table.checkpoint(h.lease, str(checkpoint))
        except LeaseLostError:
            self._lost(key)
            raise
        h.valid_until = stamp + self.d - self.tick_interval
        return h.lease

    def tick(self) -> None:
        self._round(renew=True)

    def refresh(self) -> None:
        self._round(renew=False)

    def release(self, key: str) -> bool:
        """Give up a held lease now (after SHARD_END, its tenure already ended by the world):
        the row's owner cleared, as the previous release did; False if it was not held."""
        h = self.held.pop(key, None)
        if h is None:
            return False
        with contextlib.suppress(KinesisHashRingError):
            self.table.release(h.lease)
        return True

    def stop(self) -> None:
        """A graceful stop: release everything (its plan without itself has no owner to name)."""
        for key, h in list(self.held.items()):
            with contextlib.suppress(KinesisHashRingError):
                self.table.release(h.lease)
            self._lost(key)

    # --- one round ---------------------------------------------------------------------

    def _lost(self, key: str) -> None:
        if self.held.pop(key, None) is not None:
            log.info("%s: no longer holds %s", self.me, key)
        self.world.end_tenure(self.member, key, "lost")

    def _round(self, *, renew: bool) -> None:
        now = self._now()
        if renew:
            for key, h in list(self.held.items()):
                stamp = self._now()
                try:
                    h.lease = self.table.renew(h.lease)
                    h.valid_until = stamp + self.d - self.tick_interval
                except LeaseLostError:
                    self._lost(key)
                except KinesisHashRingError:
                    if self._now() >= h.valid_until:
                        self._lost(key)
        try:
            snapshot = self.table.scan()
        except KinesisHashRingError:
            return
        if self.provider is not None:
            self.keys = self.provider(snapshot)
        rows = {k: v for k, v in snapshot.leases.items() if v.state.value in OLD_STATES}
        for key, lease in rows.items():
            old = self.seen.get(key)
            if old is None or (old[0], old[1]) != (lease.counter, lease.owner):
                self.seen[key] = (lease.counter, lease.owner, now)
        assert self.member.membership is not None
        listed = list(self.member.membership.members())
        if self.me not in listed:
            return
        current = {k: rows[k].owner for k in self.keys if k in rows}
        plan = plan_assignment(listed, self.keys, current_owners=current, replicas=min(1, len(listed) - 1))
        unhealthy = {lease.owner for key, lease in rows.items() if lease.owner not in (None, self.me)
                     and now - self.seen[key][2] >= (self.tick_interval if lease.handed_off_by else self.d)}
        for member in unhealthy:
            self.suspects.setdefault(member, now)
        for member, since in list(self.suspects.items()):
            if member not in unhealthy and now - since >= self.orphan:
                del self.suspects[member]
        for key in self.keys:
            lease = rows.get(key)
            if key in self.held:
                h = self.held[key]
                target = plan.owner(key)
                if target != self.me and lease is not None and target not in self.suspects:
                    try:
                        self.table.handoff(h.lease, target)
                        self.counters["handoffs"] += 1
                        log.info("%s: handed %s off to %s", self.me, key, target)
                    except KinesisHashRingError:
                        pass
                    self._lost(key)
                continue
            if key not in rows and key in snapshot.corrupt:
                continue  # unparseable (a newer release's row): never written
            if lease is None:
                self._take(key, None, plan.owner(key) == self.me)
                continue
            if lease.owner == self.me and lease.handed_off_by is not None:
                stamp = self._now()
                try:
                    adopted = self.table.adopt(lease)
                except KinesisHashRingError:
                    continue
                self.counters["adopted"] += 1
                log.info("%s: adopted %s", self.me, key)
                self._hold(adopted, stamp)
                continue
            if lease.state is LeaseState.SHARD_END:
                continue
            since = self.seen[key][2]
            unchanged = now - since
            owners = [o for o in plan.owners[key] if o != lease.owner]
            expiry = 0.0 if lease.owner is None else self.tick_interval if lease.handed_off_by else self.d
            if unchanged < expiry:
                continue
            backup = self.me in owners and unchanged - expiry >= owners.index(self.me) * self.grace
            if backup or unchanged >= self.orphan:
                self._take(key, lease, True)

    def _take(self, key: str, lease: Lease | None, mine: bool) -> None:
        if not mine:
            return
        stamp = self._now()
        try:
            if lease is None:
                taken = self.table.create_lease_if_absent(key, owner=self.me)
            else:
                taken = self.table.take(lease, self.me)
        except KinesisHashRingError:
            return
        if taken is None:
            return
        self.counters["takeovers"] += 1
        log.info("%s: took %s from %s", self.me, key, None if lease is None else lease.owner)
        self._hold(taken, stamp)

    def _hold(self, lease: Lease, stamp: float) -> None:
        self.held[lease.key] = _Held(lease, stamp + self.d - self.tick_interval)
        self.world.begin_tenure(self.member, lease)
