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

What a member reads in a ``reads="scoped"`` round: decisions only, no I/O.

With scoped reads there is no scan in steady state. The plan is made from (the published
baseline, members, keys) (:mod:`.published_plan`), with each member's keys backed
up by its successors in the sorted member list (:func:`hashring.watched_by_successors`).
Rows are read with BatchGetItem, eventually consistent (every write is conditional on what
it read, so a stale row costs time, never safety). A full scan (eventually consistent)
runs at start, and every ``sweep_interval`` on the two owners of a reserved chore key
(rendezvous over the members; they also take orphans). Suspects stay in the plan (every
member makes the same plan) but get no hand-offs; a dead member's keys stay with its
watcher until the member list drops it. The membership must not be fed by the scan
(Kubernetes, static); the resource provider sees the last full scan.

:class:`ScopedReads` turns a plan and what the member holds
into the set of lease and session rows to read this round, and judges the session rows it
reads:

* rows planned for this member and not held, every round (hand-offs offered to it, free or
  expiring leases it should take); the rows its session row says were handed to it (whatever
  its plan says), and the rows it handed off until they are adopted (the round loop adds both);
* every ``backup_check_interval``, the *session row* of each member it watches (the holders
  it backs up: with successor backups, its ``replicas`` predecessors in the sorted member
  list; with ``replicas=0``, its predecessor all the same, whose keys it then takes as
  orphans; past a stalled predecessor, its predecessor too, and so on: the first running
  member after a run of dead ones reads all their keys); a holder whose session did not change
  for a tick (or has none) is *stalled*, and
  from then on its session and all its rows backed up here are read every round; their
  expiry is timed from the first sight of its last session renewal (a lease naming that
  session is as old as the session: :func:`~kinesis.lease_loop.decisions.unchanged_since`);
  any change of its session or of one of its rows ends that; at the same checks, the session
  row of its predecessor in the sorted member list even if it backs up nothing of it (the
  plan version it records: :mod:`.published_plan`);
* a stalled holder it watched that then left the member list (*departed*): its session and
  the rows it watched for it, every round, until those leases moved: it goes on timing them
  and takes them once expired, whoever the new plan names (then hands them on), so a list
  change that lands before the expiry does not restart the timing.

It also keeps the mode's timing: when backups are checked (every tick while a new plan
settles) and when this member sweeps (scans) the table. The coordinator does the reading
(``LeaseTable.read_rows``) and acts on the rows.

``Planner``: a round's plan of the keys over the members.

``reads="scan"``: :func:`hashring.plan_assignment` with the current holders as input (it
moves as few keys as balance allows). ``reads="scoped"``: the same planner with the last
published plan as the current owners (:mod:`.published_plan`; ``stable_assignment`` of
(members, keys) before one exists), every member making the same plan without a full read,
each member's keys backed up by its successors (:meth:`ScopedReads.watched`). ``replicas``
backups per key (fewer when there are fewer members); optional weights (missing: 1.0).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, replace

from hashring import Assignment, chore_owners, plan_assignment, watched_by_successors
from kinesis.errors import KinesisHashRingError
from kinesis.lease_loop import decisions
from kinesis.lease_loop.decisions import SessionSeen, Snapshot, stale_sessions
from kinesis.lease_loop.holder import LeaseHolder
from kinesis.lease_loop.lease_listener import RoundRecord
from kinesis.lease_loop.membership import MemberList, SessionMembership
from kinesis.lease_loop.observations import Observations
from kinesis.lease_loop.plan import PublishedPlan
from kinesis.lease_loop.settings import CoordinatorSettings, LoadBalancing, ResourceKeys
from kinesis.lease_loop.table.model import Lease, SessionRow, TableSnapshot
from kinesis.lease_loop.timing import Clock

SWEEP_CHORE = "sweep"
"""The reserved ring key whose two owners sweep the table (rendezvous over the members)."""


@dataclass(frozen=True)
class PlanIndex:
    """One member's view of a plan, computed once per plan."""

    planned: frozenset[str]
    primary: tuple[str, ...]
    backed_up: Mapping[str, tuple[str, ...]]
    """Holder -> the keys this member backs up for it (sorted)."""
    predecessor: str | None = None
    """The member before this one in the sorted member list (None: alone, or not in the plan)."""


class ScopedReads:
    """The read decisions of one member (see the module docs). Not thread-safe: the
    coordinator calls it from its round only."""

    def __init__(self, member_id: str):
        self.member_id = member_id
        self.stalled: set[str] = set()
        self.running: set[str] = set()
        """Members seen running (a session row that moved, or rows written) and not stalled
        since: the walk past stalled predecessors stops at them (read at backup checks only)."""
        self.settled: set[str] = set()
        """Stalled holders none of whose keys is theirs any more (all taken over, as read): read
        at the check interval, not every round, until one of their keys is seen theirs again."""
        self.departed: dict[str, frozenset[str]] = {}
        """Stalled holders this member watched that left the member list -> the keys it
        watched for them: it goes on timing them and takes those leases once expired (then
        hands them to their planned owners), so a list change does not restart the timing."""
        self._index: tuple[Assignment, PlanIndex] | None = None
        self._members: tuple[str, ...] = ()
        self._keys: tuple[list[str], tuple[str, ...]] | None = None
        self._watched: tuple[Assignment, int, Assignment] | None = None
        self._last_inputs: tuple[tuple[str, ...], tuple[str, ...]] | None = None
        self._plan_changed_at = -math.inf
        self._next_backup_check = -math.inf
        self._last_sweep_at = -math.inf

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
            members = plan.members
            position = members.index(me) if me in members else -1
            predecessor = members[position - 1] if position >= 0 and len(members) > 1 else None
            if predecessor is not None and all(len(owners) == 1 for owners in plan.owners.values()):
                # no backups (replicas=0): still watch the predecessor's keys, so a member that
                # dies (or never runs) is noticed and its keys are taken as orphans
                groups = {predecessor: plan.keys_of(predecessor)}
            index = PlanIndex(
                frozenset(plan.owners),
                tuple(plan.keys_of(me)),
                {holder: tuple(sorted(keys)) for holder, keys in groups.items()},
                predecessor,
            )
            self._index = (plan, index)
        return self._index[1]

    def to_read(self, plan: Assignment, held: Iterable[str], *, check_backups: bool) -> tuple[set[str], set[str]]:
        """(rows to read, members whose session row to read) for this round."""
        index = self.index(plan)
        held = set(held)
        wanted = {k for k in index.primary if k not in held}
        sessions: set[str] = set(self.departed)  # every round, until their leases moved
        for keys in self.departed.values():
            wanted.update(k for k in keys if k not in held and k in index.planned)
        for holder, backed in index.backed_up.items():
            if holder in self.stalled and (holder not in self.settled or check_backups):
                wanted.update(k for k in backed if k not in held)  # every round, so their expiry is seen when it comes
                sessions.add(holder)
            elif check_backups:
                sessions.add(holder)
        if check_backups and index.predecessor is not None:
            # also with replicas=0, or when it holds nothing this member backs up: its session
            # row names the plan version it plans from (a member that missed a change learns
            # of it there: kinesis.lease_loop.plan)
            sessions.add(index.predecessor)
        # past stalled predecessors: a dead member's keys (and its own predecessor's, if that
        # one is dead too) are read by the first member after them that runs, so a run of
        # listed members that do not run never leaves keys nobody reads
        members = plan.members
        position = {m: i for i, m in enumerate(members)} if index.predecessor in self.stalled else {}
        current = index.predecessor
        passed = {self.member_id}
        while current is not None and current in self.stalled and current not in passed:
            passed.add(current)
            if current not in self.settled or check_backups:
                wanted.update(k for k in plan.keys_of(current) if k not in held)
                sessions.add(current)
            current = members[position[current] - 1]
            # the next member back is read every round until it is known to run (or settled):
            # each dead member of a run would otherwise cost a backup check before the keys
            # planned past it are read and timed (seed 34 of the fleet simulator, three hops)
            if current not in passed and (check_backups or (current not in self.settled
                                                            and current not in self.running)):
                sessions.add(current)
        return wanted, sessions

    def rows_to_read(self, plan: Assignment | None, held: Iterable[str], keys: list[str], now: float, *,
                     full: bool, interval: float, tick_interval: float, lease_duration: float
                     ) -> tuple[set[str], set[str]]:
        """This round's (rows to read, sessions to read): :meth:`to_read`, sampling the
        watched members when :meth:`backups_due`; on a tick with nothing to read and nothing
        held, the first key (one cheap read: proof the table is reachable)."""
        held = set(held)
        wanted: set[str] = set()
        sessions: set[str] = set()
        if plan is not None:
            due = self.backups_due(now, interval=interval, tick_interval=tick_interval,
                                   lease_duration=lease_duration)
            wanted, sessions = self.to_read(plan, held, check_backups=due)
        if not wanted and not sessions and full and keys and not held:
            wanted = {keys[0]}
        return wanted, sessions

    def judge(
        self,
        sessions: Mapping[str, SessionRow | None],
        seen: Mapping[str, SessionSeen],
        now: float,
        tick_interval: float,
    ) -> None:
        """Mark the holders whose session rows were read stalled or not; ``seen`` is the
        previous observation of each session (token, counter, since when)."""
        for holder, row in sessions.items():
            previous = seen.get(holder)
            if row is None:
                self.stalled.add(holder)
                self.running.discard(holder)
            elif previous is None:
                continue  # a first sight says nothing: a newcomer stays read in full until it runs
            elif (previous.token, previous.counter) == (row.token, row.counter):
                if now - previous.since >= tick_interval:
                    self.stalled.add(holder)
                    self.running.discard(holder)
            else:
                self.stalled.discard(holder)
                self.running.add(holder)

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

    def new_plan(self, old: Assignment | None, plan: Assignment | None, now: float) -> None:
        """This round's plan (after :meth:`members_tuple` and :meth:`keys_tuple`): if its
        inputs changed, or its owners did (a newly read baseline), the plan settles from
        ``now`` and newcomers are read in full."""
        changed = self.inputs_changed()
        if not changed and old is not None and plan is not None and old is not plan:
            changed = old.owners != plan.owners  # rare: only when the baseline moved
        if changed:
            self._plan_changed_at = now
            if plan is not None:
                self.plan_changed(old, plan)
            if old is not None and plan is not None:
                self._keep_watching(old, plan)

    def _keep_watching(self, old: Assignment, new: Assignment) -> None:
        """The stalled holders watched under ``old`` that ``new`` leaves out become departed."""
        members = set(new.members)
        watched = self.index(old).backed_up
        for holder, keys in watched.items():
            if holder in self.stalled and holder not in members:
                self.departed[holder] = self.departed.get(holder, frozenset()) | frozenset(keys)
        for holder in [h for h in self.departed if h in members]:
            del self.departed[holder]  # listed again: watched by the plan as anyone

    def departed_keys(self) -> frozenset[str]:
        """The keys of departed holders this member still watches."""
        return frozenset(k for keys in self.departed.values() for k in keys)

    def settle_stalled(self, plan: Assignment | None, owners: Mapping[str, str | None], held: Iterable[str]) -> None:
        """Mark the stalled holders all of whose keys (planned for them, or backed up here) are
        held here or were read held by a member that is not stalled (``owners``: this round's
        rows) settled; a key read as still theirs unsettles them."""
        if plan is None:
            return
        mine = set(held)
        backed = self.index(plan).backed_up
        for holder in self.stalled:
            keys = set(plan.keys_of(holder)) | set(backed.get(holder, ()))
            if all(k in mine or ((o := owners.get(k)) is not None and o != holder and o not in self.stalled)
                   for k in keys):
                self.settled.add(holder)
            elif any(owners.get(k) == holder for k in keys):
                self.settled.discard(holder)
        self.settled &= self.stalled

    def settle_departed(self, owners: Mapping[str, str | None], holding: AbstractSet[str] = frozenset()
                        ) -> list[str]:
        """Forget departed holders that hold none of their watched keys any more (``owners``:
        the owner of each such key as read this round; keys not read are kept) and own no row
        this member last saw (``holding``: a departed member may hold keys planned for others,
        taken as orphans); those forgotten."""
        settled = [h for h, keys in self.departed.items()
                   if h not in holding and all(k in owners and owners[k] != h for k in keys)]
        for holder in settled:
            del self.departed[holder]
        return settled

    def backups_due(self, now: float, *, interval: float, tick_interval: float, lease_duration: float) -> bool:
        """Whether this round samples the watched members: every ``interval``, every tick while
        a new plan settles (for two lease durations: hand-offs in flight)."""
        if now < self._next_backup_check:
            return False
        settling = now - self._plan_changed_at < 2 * lease_duration
        self._next_backup_check = now + (min(tick_interval, interval) if settling else interval)
        return True

    def swept(self, now: float) -> None:
        """A full scan finished at ``now``."""
        self._last_sweep_at = now

    def sweep_due(self, now: float, interval: float, members: Callable[[], list[str] | None]) -> bool:
        """Sweep every ``interval``, only if this member is one of the two sweepers among
        ``members()`` (so the fleet sweeps twice per interval, not once per member); None
        from ``members`` (unreadable): not now."""
        if now - self._last_sweep_at < interval:
            return False
        listed = members()
        if listed is None:
            return False
        if self.is_sweeper(listed):
            return True
        self._last_sweep_at = now  # not a sweeper now: look again in one interval
        return False

    def alive(self, members: Iterable[str]) -> None:
        """Members seen writing are not stalled."""
        members = set(members)
        self.stalled.difference_update(members)
        self.settled.difference_update(members)
        self.running.update(members)

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
        return self.member_id in chore_owners(SWEEP_CHORE, members, replicas=1)


class Planner:
    """Plans for ``member_id``; ``scoped``: plan as scoped reads do, with its caches, from
    ``published`` (the baseline)."""

    def __init__(self, member_id: str, replicas: int, weights: Mapping[str, float] | None,
                 scoped: ScopedReads | None, published: PublishedPlan, balancing: LoadBalancing | None = None,
                 read_sessions: Callable[[Sequence[str]], Mapping[str, SessionRow | None]] | None = None):
        self._me = member_id
        self._balancing = balancing
        self._read_sessions = read_sessions
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
            if self._balancing is not None and full:
                self.published.rebalance(listed, now, ready=ready, interval=self._balancing.interval,
                                         read_loads=self._read_loads)

    def _read_loads(self, members: Sequence[str]) -> Mapping[str, float] | None:
        """Every planned member's loads from its session row (one batch read per 100
        members); None if a member that runs reports none (an older build, ``balance="count"``,
        or one just started): then counts balance. A listed member without a session row runs
        nothing and reports nothing (its keys weigh the median). A key two members report (a
        hand-off between reports) weighs what its baseline owner says."""
        assert self._read_sessions is not None
        rows = self._read_sessions(members)
        base = self.published.baseline
        owners = base.owners if base is not None else {}
        merged: dict[str, float] = {}
        for member in sorted(rows):
            row = rows[member]
            if row is None:
                continue
            if row.loads is None:
                return None
            for key, load in row.loads.items():
                if key not in merged or owners.get(key) == member:
                    merged[key] = load
        return merged


log = logging.getLogger(__name__)

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
        self._earlier: set[str] = set()
        """Keys last read naming this member id under another session (an earlier process's, or
        a second process's that refused to run): read every scoped round until taken back or
        moved on, as no plan need name this member for them (:meth:`_note_earlier`)."""
        self._next_head_read = -math.inf  # SessionMembership: the next backstop read of its head
        self._list_moved: tuple[int, float] = (-1, -math.inf)  # its version as last seen, and since when

    def read(self, *, full: bool) -> RoundView | None:
        """This round's view; None if the member list is unreadable. ``full``: a tick."""
        if self._s.reads == "scoped" and not self._sweep_due():
            return self._scoped_round(full=full)
        # scoped reads sweep eventually consistent (every write is conditional on what it read)
        consistent = self._s.reads == "scan"
        snapshot = self._holder.table.scan(consistent=consistent)
        snapshot = self._fresh_snapshot(snapshot, consistent=consistent)
        self.last_full = snapshot
        self._note_earlier(snapshot.leases)
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
        wanted |= self._earlier - held  # an earlier process's under this id: taken back, whatever the plan
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
        self._note_earlier(rows)
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
        departed = self._scoped.departed
        holding = {seen.owner for k, seen in self._obs.seen.items()
                   if seen.owner in departed and k not in held} if departed else frozenset()
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

    def _note_earlier(self, rows: Mapping[str, Lease | None]) -> None:
        """Track the rows read that name this member id under another session than this
        process's: the process that wrote them stopped (a restart, or a second process under one
        id that refused to run), and no plan need route them to this member, so without this
        a row planned for members that do not run waits for the plan to move."""
        mine = self._holder.session
        for key, lease in rows.items():
            if lease is not None and lease.owner == self._me and lease.session != mine:
                self._earlier.add(key)
            else:
                self._earlier.discard(key)

    def _fresh(self, rows: dict[str, Lease | None], sessions: dict[str, SessionRow | None]
               ) -> tuple[dict[str, Lease | None], dict[str, SessionRow | None]]:
        """``rows`` and ``sessions`` with those read from a stale replica read again, strongly
        consistent (:meth:`Observations.behind`)."""
        keys, members = self._obs.behind(rows, sessions, self._written(), stalled_before=self._stalled_before())
        if not keys and not members:
            return rows, sessions
        again_rows, again_sessions = self._holder.table.read_rows(keys, members, consistent=True)
        self._obs.read_again()
        return {**rows, **again_rows}, {**sessions, **again_sessions}

    def _stalled_before(self) -> float:
        """A session seen unchanged since then (a lease duration ago) is about to be judged
        stalled: its row is read strongly consistent first (:meth:`Observations.behind`)."""
        return self._clock() - self._s.timing.lease_duration

    def _written(self) -> dict[str, int]:
        """The counters of this member's offers not adopted yet, as its hand-offs wrote them, and
        of its takes answered with an error, had they been applied: a row read below one is
        from a stale replica (or, read again strongly consistent, a take not applied)."""
        written = {key: offer.counter for key, offer in self._holder.offered().items()}
        for key, counter in self._holder.unanswered().items():
            written[key] = max(counter, written.get(key, counter))
        return written

    def _fresh_snapshot(self, snapshot: TableSnapshot, *, consistent: bool) -> TableSnapshot:
        """A sweep's snapshot with its stale rows read again (see :meth:`_fresh`); read
        eventually consistent (a sweep), also its session rows (those seen and missing from it
        too: a stale replica may not have them yet)."""
        sessions_read: Mapping[str, SessionRow | None] = {}
        if not consistent:
            sessions_read = {**{m: None for m, s in self._obs.sessions.items()
                                if s.token is not None and m not in snapshot.sessions}, **snapshot.sessions}
        keys, members = self._obs.behind(snapshot.leases, sessions_read, self._written(),
                                         stalled_before=self._stalled_before())
        if not keys and not members:
            return snapshot
        rows, sessions = self._holder.table.read_rows(keys, members, consistent=True)
        self._obs.read_again()
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
