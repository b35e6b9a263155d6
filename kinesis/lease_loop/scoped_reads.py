"""What a member reads in a ``reads="scoped"`` round: decisions only, no I/O.

:class:`ScopedReads` turns a plan (``hashring.stable_assignment``) and what the member holds
into the set of lease rows to read this round, and judges the sample rows it reads:

* rows planned for this member and not held, every round (hand-offs offered to it, free or
  expiring leases it should take);
* every ``backup_check_interval``, one *sample* row of each member it watches (the holders it
  backs up: with successor backups, its ``replicas`` predecessors in the sorted member list);
  a holder whose sample did not change for a tick (or no longer holds it) is *stalled*, and
  from then on all its rows backed up here are read every round, so their expiry is timed;
  any change seen in one of its rows ends that.

The coordinator does the reading (``LeaseTable.get_many``) and acts on the rows.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from hashring import Assignment, owners_of, watched_by_successors
from kinesis.lease_loop.lease_model import Lease

SWEEP_CHORE = ("__chore__", "sweep")
"""The reserved ring key whose two owners sweep the table (rendezvous over the members)."""


@dataclass(frozen=True)
class PlanIndex:
    """One member's view of a plan, computed once per plan."""

    planned: frozenset[str]
    primary: tuple[str, ...]
    backed_up: Mapping[str, tuple[str, ...]]
    """Holder -> the keys this member backs up for it (sorted)."""


class ScopedReads:
    """The read decisions of one member (see the module docs). Not thread-safe: the
    coordinator calls it from its round only."""

    def __init__(self, member_id: str):
        self.member_id = member_id
        self.stalled: set[str] = set()
        self._index: tuple[Assignment, PlanIndex] | None = None
        self._members: tuple[str, ...] = ()
        self._keys: tuple[list[str], tuple[str, ...]] | None = None
        self._watched: tuple[Assignment, int, Assignment] | None = None
        self._last_inputs: tuple[tuple[str, ...], tuple[str, ...]] | None = None

    def watched(self, base: Assignment, replicas: int) -> Assignment:
        """``base`` with successor backups (:func:`hashring.watched_by_successors`): this
        member then samples only the ``replicas`` members before it in the sorted member
        list. Cached per base plan (the planner returns the same object for the same inputs)."""
        if self._watched is None or self._watched[0] is not base or self._watched[1] != replicas:
            self._watched = (base, replicas, watched_by_successors(base, replicas))
        return self._watched[2]

    def index(self, plan: Assignment) -> PlanIndex:
        """This member's primary keys and the keys it backs up, by holder (cached per plan)."""
        if self._index is None or self._index[0] is not plan:
            me = self.member_id
            groups: dict[str, list[str]] = {}
            for key, owners in plan.owners.items():
                if me in owners[1:]:
                    groups.setdefault(owners[0], []).append(key)
            index = PlanIndex(
                frozenset(plan.owners),
                tuple(plan.keys_of(me)),
                {holder: tuple(sorted(keys)) for holder, keys in groups.items()},
            )
            self._index = (plan, index)
        return self._index[1]

    def to_read(self, plan: Assignment, held: Iterable[str], *, check_backups: bool) -> tuple[set[str], dict[str, str]]:
        """(rows to read, holder -> its sample row) for this round."""
        index = self.index(plan)
        held = set(held)
        wanted = {k for k in index.primary if k not in held}
        samples: dict[str, str] = {}
        for holder, backed in index.backed_up.items():
            if holder in self.stalled:  # every round, so their expiry is seen when it comes
                wanted.update(k for k in backed if k not in held)
            elif check_backups:
                samples[holder] = backed[0]
        wanted.update(k for k in samples.values() if k not in held)
        return wanted, samples

    def judge(
        self,
        samples: Mapping[str, str],
        rows: Mapping[str, Lease | None],
        seen: Mapping[str, tuple[int | None, str | None, float]],
        now: float,
        tick_interval: float,
    ) -> None:
        """Mark holders stalled or not from their sample rows; ``seen`` is the previous
        observation of each row: (counter, owner, since when that pair has been seen)."""
        for holder, key in samples.items():
            lease = rows.get(key)
            if lease is None or lease.owner != holder:
                self.stalled.add(holder)
                continue
            previous = seen.get(key)
            if previous is not None and previous[:2] == (lease.counter, lease.owner):
                if now - previous[2] >= tick_interval:
                    self.stalled.add(holder)
            else:
                self.stalled.discard(holder)

    def inputs_changed(self) -> bool:
        """Whether the plan's inputs (the members and keys last passed to
        :meth:`members_tuple` and :meth:`keys_tuple`) differ from the last call's. Compared by
        content, not by plan identity: a planner cache shared by many members in one process
        may hand out a new but equal plan."""
        current = (self._members, self._keys[1] if self._keys is not None else ())
        last = self._last_inputs
        self._last_inputs = current
        if last is None:
            return True
        return not all(a is b or a == b for a, b in zip(current, last, strict=True))

    def plan_changed(self, old: Assignment | None, new: Assignment) -> None:
        """A member new to the plan is read in full by its watchers until it is seen writing
        (adopting what is handed to it): a newcomer that never comes up must not hold the
        offers made to it for longer than ``adopt_timeout`` plus a round."""
        joined = set(new.members) - set(old.members if old is not None else new.members)
        self.stalled.update(h for h in self.index(new).backed_up if h in joined)

    def alive(self, members: Iterable[str]) -> None:
        """Members seen writing are not stalled."""
        self.stalled.difference_update(members)

    def members_tuple(self, members: Iterable[str]) -> tuple[str, ...]:
        """The same tuple object while the members do not change (the planner's cache hits
        by identity)."""
        ordered = tuple(sorted(members))
        if ordered != self._members:
            self._members = ordered
        return self._members

    def keys_tuple(self, keys: list[str]) -> tuple[str, ...]:
        """The same tuple object for the same key list object."""
        if self._keys is None or self._keys[0] is not keys:
            self._keys = (keys, tuple(keys))
        return self._keys[1]

    def is_sweeper(self, members: list[str]) -> bool:
        """One of the two owners of the sweep chore among ``members``."""
        if self.member_id not in members:
            return False
        return self.member_id in owners_of(*SWEEP_CHORE, members, replicas=min(1, len(members) - 1))
