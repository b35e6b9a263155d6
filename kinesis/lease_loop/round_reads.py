"""``RoundReads``: what a round reads, and the snapshot and plan it makes of it.

Steps 2-3 of a round (see :mod:`~kinesis.lease_loop.coordinator`), one of two ways:

* a *scan* (every round with ``reads="scan"``): one consistent scan of the table (fed to a
  driven membership), then the member list; the provider's keys are planned over the listed
  members (:mod:`.planner`, from the current owners), and any of them may be taken;
* a *scoped* round (``reads="scoped"``): the member list and the keys (the provider sees the
  last full scan) are planned first (from the published plan, which the round then follows:
  :mod:`.published_plan`), then only the rows that can change this member's
  decisions are read (:mod:`.scoped_reads` says which), and only those may be taken. Rows
  are read with BatchGetItem, eventually consistent: every write is conditional on what it
  read, so a stale row costs time, never safety. The table is *swept* (a scan, eventually
  consistent) at start, then every ``sweep_interval`` by the two sweepers.

Either way the expiry timers and suspicions are updated from the rows read
(:mod:`.observations`) and the round gets a :class:`RoundView`: the
:class:`~kinesis.lease_loop.decisions.Snapshot` its decisions judge. An unreadable member
list gives none (the round then only renews). Used by the round only, under the round lock.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

from hashring import Assignment
from kinesis.errors import KinesisHashRingError
from kinesis.lease_loop.clock import Clock
from kinesis.lease_loop.coordinator_settings import CoordinatorSettings
from kinesis.lease_loop.decisions import Snapshot, stale_sessions
from kinesis.lease_loop.holder import LeaseHolder
from kinesis.lease_loop.lease_model import Lease, SessionRow, TableSnapshot
from kinesis.lease_loop.member_list import MemberList
from kinesis.lease_loop.observations import Observations
from kinesis.lease_loop.planner import Planner
from kinesis.lease_loop.resource_keys import ResourceKeys
from kinesis.lease_loop.round_record import RoundRecord
from kinesis.lease_loop.scoped_reads import ScopedReads
from kinesis.lease_loop.session_membership import SessionMembership

log = logging.getLogger("kinesis.lease_loop.coordinator")  # the lease loop logs as the coordinator

PLAN_RECHECK = 30
"""Lease durations between two backstop reads of the published plan's head (one small read)."""


@dataclass(frozen=True)
class RoundView:
    """What one round decides on."""

    snap: Snapshot
    """The rows read with their timers, the suspicions and the plan (the held leases as read)."""
    to_take: Sequence[str]
    """The keys the round may take: all of them (a scan) or the rows read (scoped)."""
    ready: bool
    """Whether this member may take leases (listed and not stopping)."""
    last_full: Mapping[str, Lease]
    """The rows of the last full scan (the log names who handed a lease off)."""
    inbox: frozenset[str] = frozenset()
    """The offers to this member its session row named and this round read."""


class RoundReads:
    """The reads of ``member_id``'s rounds (see the module docs)."""

    def __init__(self, member_id: str, settings: CoordinatorSettings, holder: LeaseHolder, members: MemberList,
                 keys: ResourceKeys, observations: Observations, scoped: ScopedReads, planner: Planner,
                 record: RoundRecord, clock: Clock):
        self._me = member_id
        self._s = settings
        self._holder = holder
        self._members = members
        self._keys = keys
        self._obs = observations
        self._scoped = scoped
        self._planner = planner
        self._record = record
        self._clock = clock
        self.last_plan: Assignment | None = None
        """The plan of the last round that read the member list (None: no plan could be made)."""
        self.last_full: TableSnapshot | None = None
        """The last full scan."""
        self._next_head_read = -math.inf  # SessionMembership: the next backstop read of its head
        self._list_moved: tuple[int, float] = (-1, -math.inf)  # its version as last seen, and since when

    def read(self, *, full: bool) -> RoundView | None:
        """This round's view; None if the member list is unreadable. ``full``: a tick."""
        if self._s.reads == "scoped" and not self._sweep_due():
            return self._scoped_round(full=full)
        # scoped reads sweep eventually consistent (every write is conditional on what it read)
        snapshot = self._holder.table.scan(consistent=self._s.reads == "scan")
        snapshot = self._fresh_snapshot(snapshot)
        self.last_full = snapshot
        self._scoped.swept(self._clock())
        self._record.table_read()
        self._members.observe(snapshot)
        now = self._clock()
        listed = self._read_members()
        # a consistent scan shows every session row: a listed member without one runs no chain
        # (it never ran, or left), timed from now like a session found gone; a sweep may be stale
        absent = ({m: None for m in listed if m not in snapshot.sessions}
                  if listed is not None and self._s.reads == "scan" else {})
        self._obs.observe_sessions({**absent, **snapshot.sessions}, now, partial=False)  # timers only
        active = self._obs.observe(snapshot.leases, now)
        self._obs.forget_tombstones(frozenset(absent))
        self._obs.present(snapshot.sessions)
        if listed is None:
            return None
        self._delete_stale_sessions(snapshot, listed, now)
        keys = self._keys(snapshot)
        self._obs.keep_missing(set(keys))
        self._resolve_offers(snapshot.leases, set(snapshot.leases) | set(self._holder.offered()))
        self._resolve_unanswered({k: snapshot.leases.get(k) for k in self._holder.unanswered()}, set(keys))
        snap = self._snapshot(now, snapshot.leases, keys)
        self._obs.suspect(snap, active)
        ready = self._ready(listed, now)
        plan = self._planner(listed, self._obs.suspicions.suspects, keys, snapshot.leases, ready=ready)
        self.last_plan = plan
        self._follow_plan(snapshot.sessions.values(), listed, now, full=full, ready=ready)
        return self._view(snap, plan, keys, keys, ready)

    def _scoped_round(self, *, full: bool) -> RoundView | None:
        """A round without a scan: plan from (members, keys) alone, then read only the rows
        that can change a decision of this member (planned for it but not held; its backup
        keys every ``backup_check_interval``; on a tick with nothing else, one key)."""
        assert self.last_full is not None
        self._follow_young_list()
        listed = self._read_members()
        if listed is None:
            return None
        keys = self._keys(self.last_full)
        now = self._clock()
        ready = self._ready(listed, now)
        plan = self._planner(listed, self._obs.suspicions.suspects, keys, self.last_full.leases, ready=ready)
        self._scoped.new_plan(self.last_plan, plan, now)
        self.last_plan = plan
        held = self._holder.keys()
        timing = self._s.timing
        wanted, watched = self._scoped.rows_to_read(  # watched: members whose session row is read
            plan, held, keys, now, full=full, interval=self._s.backup_check_interval,
            tick_interval=timing.tick_interval, lease_duration=timing.lease_duration)
        inbox = self._holder.inbox() - held  # offers to this member, whatever its plan says
        wanted |= inbox | set(self._holder.offered())  # and its own offers, until adopted
        wanted |= set(self._holder.unanswered())  # and its takes answered with an error, until known
        if self._scoped.departed:  # rows a departed holder was last seen holding, planned for it or not
            wanted |= {k for k, seen in self._obs.seen.items() if seen.owner in self._scoped.departed and k not in held}
        # the sessions the rows it reads name (as last seen): under session leases a lease is
        # expired only if its holder's session is too, judged from a read of this round
        watched |= {s.owner for k in wanted if (s := self._obs.seen.get(k)) is not None
                    and s.session is not None and s.owner is not None and s.owner != self._me}
        session_list = self._members.session_membership
        raw_keys = ([session_list.head_key] if session_list is not None
                    and self._head_due(session_list, now, reading=bool(wanted or watched)) else [])
        rows, sessions, raw = (self._holder.table.read_round(wanted, watched, raw_keys)
                               if wanted or watched or raw_keys else ({}, {}, {}))
        rows, sessions = self._fresh(rows, sessions)
        if session_list is not None and raw_keys:
            session_list.observe_head(raw.get(session_list.head_key))
        if rows or sessions or held:
            self._record.table_read()
        self._follow_plan((r for r in sessions.values() if r is not None), listed, now, full=full, ready=ready)
        self._scoped.judge(sessions, self._obs.sessions, now, timing.tick_interval)
        found = {k: v for k, v in rows.items() if v is not None}
        active = self._obs.observe_sessions(sessions, now)  # rows read late are no news of their holder
        active |= self._obs.observe(found, now, partial=True, by_session=True)
        self._obs.present(m for m, row in sessions.items() if row is not None)
        self._scoped.alive(active)
        self._remove_dead(sessions, listed, now)
        owners = {k: v.owner if v is not None else None for k, v in rows.items()}
        self._scoped.settle_stalled(plan, owners, held)
        # keys held here were not read: a departed holder's keys taken here have moved too
        # rows a departed member was last seen holding, held here now or not (its owner as last
        # read is stale for keys held here: they are not read again)
        holding = {seen.owner for k, seen in self._obs.seen.items() if seen.owner is not None and k not in held}
        for holder in self._scoped.settle_departed({**{k: self._me for k in held}, **owners}, holding):
            self._delete_session(holder, listed)
        self._resolve_offers(found, set(rows))
        planned = plan.owners if plan is not None else {}
        self._resolve_unanswered(rows, planned)
        to_take = sorted(k for k in wanted if k in planned)
        snap = replace(self._snapshot(now, found, to_take),
                       inherited={k: v.owner for k, v in found.items()
                                  if v.owner in self._scoped.departed and k in self._scoped.departed[v.owner]})
        self._obs.suspect(snap, active)
        return replace(self._view(snap, plan, keys, to_take, ready), inbox=frozenset(inbox & set(rows)))

    def _fresh(self, rows: dict[str, Lease | None], sessions: dict[str, SessionRow | None]
               ) -> tuple[dict[str, Lease | None], dict[str, SessionRow | None]]:
        """``rows`` and ``sessions`` with those read from a stale replica read again, strongly
        consistent (:meth:`Observations.behind`)."""
        keys, members = self._obs.behind(rows, sessions, self._written())
        if not keys and not members:
            return rows, sessions
        again_rows, again_sessions = self._holder.table.read_rows(keys, members, consistent=True)
        return {**rows, **again_rows}, {**sessions, **again_sessions}

    def _written(self) -> dict[str, int]:
        """The counters of this member's offers not adopted yet, as its hand-offs wrote them, and
        of its takes answered with an error, had they been applied: a row read below one is
        from a stale replica (or, read again strongly consistent, a take not applied)."""
        written = {key: offer.counter for key, offer in self._holder.offered().items()}
        for key, counter in self._holder.unanswered().items():
            written[key] = max(counter, written.get(key, counter))
        return written

    def _fresh_snapshot(self, snapshot: TableSnapshot) -> TableSnapshot:
        """A sweep's snapshot with its stale rows read again (see :meth:`_fresh`)."""
        keys, members = self._obs.behind(snapshot.leases, snapshot.sessions, self._written())
        if not keys and not members:
            return snapshot
        rows, sessions = self._holder.table.read_rows(keys, members, consistent=True)
        leases = {**snapshot.leases, **rows}
        current = {**snapshot.sessions, **sessions}
        return replace(snapshot, leases={k: v for k, v in leases.items() if v is not None},
                       sessions={k: v for k, v in current.items() if v is not None})

    def _follow_plan(self, sessions: Iterable[SessionRow], listed: list[str], now: float, *, full: bool,
                     ready: bool) -> None:
        """Scoped: hear the plan versions the sessions read record, follow the published plan
        (:meth:`Planner.follow`), and record this member's version for its next session renewal."""
        published = self._planner.published
        published.heard([*(r.plan_version for r in sessions), self._holder.plan_told])
        self._planner.follow(listed, now, full=full, ready=ready, tick_interval=self._s.timing.tick_interval,
                             recheck_interval=min(self._s.sweep_interval, PLAN_RECHECK * self._s.timing.lease_duration))
        self._holder.plan_version = published.version

    def _ready(self, listed: list[str], now: float) -> bool:
        """Whether this member plans with itself: listed and not stopping, and (a member of a
        SessionMembership) not in the round it joined: from the next light round on, once it
        has read the list again, so members that joined in one round see each other first."""
        session_list = self._members.session_membership
        settled = session_list is None or now - session_list.joined_at >= self._s.timing.scan_interval
        return self._me in listed and not self._holder.stopping and settled

    def _follow_young_list(self) -> None:
        """A SessionMembership list that moved within a lease duration (a fleet starting,
        members joining at once) is read before every round's plan, strongly consistent (one
        GetItem): members that start together see each other before they take free leases,
        instead of the first one taking every lease and handing them on."""
        session_list = self._members.session_membership
        if session_list is None:
            return
        now = self._clock()
        version = session_list.known_version
        if version != self._list_moved[0]:
            self._list_moved = (version, now)
        if now - self._list_moved[1] < self._s.timing.lease_duration:
            try:
                session_list.refresh()
            except KinesisHashRingError as exc:
                log.warning("%s: could not read the member list: %s", self._me, exc)

    def _head_due(self, session_list: SessionMembership, now: float, *, reading: bool) -> bool:
        """Whether this round reads the member list's head with its rows: while not listed,
        and every ``backup_check_interval`` (a backstop; up to half of it early when the round
        reads rows anyway, so the head rides in the same request as the session samples); when
        its session row told of a newer version, the head is read at once, strongly consistent."""
        if self._holder.members_version > session_list.known_version:
            try:
                session_list.refresh()
            except KinesisHashRingError as exc:
                log.warning("%s: could not read the member list: %s", self._me, exc)
        early = self._s.backup_check_interval / 2 if reading else 0.0
        if not session_list.listed or now + early >= self._next_head_read:
            self._next_head_read = now + self._s.backup_check_interval
            return True
        return False

    def _remove_dead(self, sessions: Mapping[str, SessionRow | None], listed: list[str], now: float) -> None:
        """With a :class:`SessionMembership`: a listed member whose session row (read this round)
        has not changed for a lease duration is dead: this member, which watches it, removes it
        from the member list."""
        session_list = self._members.session_membership
        if session_list is None:
            return
        duration = self._s.timing.lease_duration
        for member in sessions:
            seen = self._obs.sessions.get(member)
            if member != self._me and member in listed and seen is not None and now - seen.since >= duration:
                try:
                    session_list.remove(member, retry_after=duration)
                except KinesisHashRingError as exc:
                    log.warning("%s: could not remove %s from the member list: %s", self._me, member, exc)

    def _delete_session(self, member: str, listed: list[str]) -> None:
        """A departed member's leases have all moved: delete its session row (conditional on
        the one timed: a run that came back keeps its row), so no row is left behind."""
        seen = self._obs.sessions.get(member)
        if member in listed or seen is None or seen.token is None:
            return
        try:
            if self._holder.table.delete_session(member, seen.token, seen.counter):
                log.info("%s: deleted the session row of %s (it left, its leases moved)", self._me, member)
        except KinesisHashRingError as exc:
            log.warning("%s: could not delete the session row of %s: %s", self._me, member, exc)

    def _delete_stale_sessions(self, snapshot: TableSnapshot, listed: list[str], now: float) -> None:
        """The session chore (:func:`~kinesis.lease_loop.decisions.stale_sessions`) after a full read."""
        for member, seen in stale_sessions(self._obs.sessions, snapshot.leases, listed, self._me, now,
                                           self._s.timing.lease_duration):
            if seen.token is not None and self._holder.table.delete_session(member, seen.token, seen.counter):
                log.info("%s: deleted the stale session row of %s", self._me, member)

    def _read_members(self) -> list[str] | None:
        """The member list; None if unreadable (its error is then the round's last error)."""
        listed = self._members.read()
        if listed is None:
            self._record.last_error = self._members.error
        return listed

    def _sweep_due(self) -> bool:
        """Scoped reads: sweep (scan) at start, then as :meth:`ScopedReads.sweep_due` says."""
        return self.last_full is None or self._scoped.sweep_due(self._clock(), self._s.sweep_interval,
                                                                self._members.peek)

    def _resolve_offers(self, rows: Mapping[str, Lease], read: set[str]) -> None:
        """Forget this member's offers that the rows ``read`` show adopted or moved on."""
        for key, offer in self._holder.offered().items():
            if key not in read:
                continue
            lease = rows.get(key)
            if lease is not None and lease.counter < offer.counter:
                continue  # a stale replica's row, from before the offer (counters only grow): no news
            if lease is None or (lease.owner, lease.counter, lease.handed_off_by) != (offer.target, offer.counter,
                                                                                       self._me):
                self._holder.offer_resolved(key)

    def _resolve_unanswered(self, rows: Mapping[str, Lease | None], planned: Collection[str]) -> None:
        """Forget this member's takes answered with an error whose outcome the rows read (read
        again strongly consistent if below the take's counter: :meth:`_written`) tell: not
        applied (below its counter), or moved on (another owner, no row); or held now, or no
        longer planned. A row still this member's stays read: the round takes it back."""
        held = self._holder.keys()
        for key, counter in self._holder.unanswered().items():
            if key in held or key not in planned:
                self._holder.take_answered(key)
                continue
            if key not in rows:
                continue
            lease = rows[key]
            if lease is None or lease.owner != self._me or lease.counter < counter:
                self._holder.take_answered(key)

    def _snapshot(self, now: float, rows: Mapping[str, Lease], to_take: Sequence[str]) -> Snapshot:
        offered = {k: (o.target, o.counter) for k, o in self._holder.offered().items()}
        return Snapshot(now=now, me=self._me, timing=self._s.timing, rows=rows,
                        seen=self._obs.timers(rows, to_take), sessions=self._obs.sessions,
                        held=self._holder.keys(), offered=offered, absent=self._obs.absent_now(now),
                        session=self._holder.session, session_since=self._holder.session_since,
                        suspicions=self._obs.suspicions, max_concurrent_handoffs=self._s.max_concurrent_handoffs)

    def _view(self, snap: Snapshot, plan: Assignment | None, keys: list[str], to_take: Sequence[str],
              ready: bool) -> RoundView:
        """The view of ``snap`` with this round's suspicions and plan (and the keys it may plan)."""
        planned = self._scoped.index(plan).planned if self._s.reads == "scoped" and plan is not None else frozenset(keys)
        snap = replace(snap, suspicions=self._obs.suspicions, plan=plan, planned=planned)
        assert self.last_full is not None
        return RoundView(snap, to_take, ready, self.last_full.leases)
