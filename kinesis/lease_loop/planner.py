"""``Planner``: a round's plan of the keys over the members.

``reads="scan"``: :func:`hashring.plan_assignment` with the current holders as input (it
moves as few keys as balance allows). ``reads="scoped"``: the same planner with the last
published plan as the current owners (:mod:`.published_plan`; ``stable_assignment`` of
(members, keys) before one exists), every member making the same plan without a full read,
each member's keys backed up by its successors (:meth:`ScopedReads.watched`). ``replicas``
backups per key (fewer when there are fewer members); optional weights (missing: 1.0).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from hashring import Assignment, plan_assignment
from kinesis.lease_loop import decisions
from kinesis.lease_loop.lease_model import Lease
from kinesis.lease_loop.published_plan import PublishedPlan
from kinesis.lease_loop.scoped_reads import ScopedReads


class Planner:
    """Plans for ``member_id``; ``scoped``: plan as scoped reads do, with its caches, from
    ``published`` (the baseline)."""

    def __init__(self, member_id: str, replicas: int, weights: Mapping[str, float] | None,
                 scoped: ScopedReads | None, published: PublishedPlan):
        self._me = member_id
        self._replicas = replicas
        self._weights = weights
        self._scoped = scoped
        self.published = published
        self.base: Assignment | None = None
        """The last scoped plan without its backups (what is published)."""

    def __call__(self, listed: Sequence[str], suspects: Mapping[str, float], keys: list[str],
                 rows: Mapping[str, Lease], *, ready: bool) -> Assignment | None:
        """The plan of ``keys`` over the listed members (see
        :func:`~kinesis.lease_loop.decisions.plan_members`); None without members."""
        members = decisions.plan_members(listed, self._me, suspects, ready=ready,
                                         keep_suspects=self._scoped is not None)
        if not members:
            return None
        weights = None
        if self._weights is not None:
            weights = {m: self._weights.get(m, 1.0) for m in members}
        replicas = min(self._replicas, len(members) - 1)
        if self._scoped is not None:  # from (baseline, members, keys): no full read needed
            self.base = self.published.plan(self._scoped.members_tuple(members), self._scoped.keys_tuple(keys),
                                            weights)
            return self._scoped.watched(self.base, replicas)
        current = {k: rows[k].owner for k in keys if k in rows}
        return plan_assignment(members, keys, current_owners=current, weights=weights, replicas=replicas)

    def follow(self, listed: list[str], now: float, *, full: bool, ready: bool, tick_interval: float,
               recheck_interval: float) -> None:
        """Move the baseline towards the last scoped plan (:meth:`PublishedPlan.follow`)."""
        if self.base is not None:
            self.published.follow(self.base, listed, now, full=full, ready=ready, tick_interval=tick_interval,
                                  recheck_interval=recheck_interval)
