"""What a member reads in a ``reads="scoped"`` round: decisions only, no I/O.

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
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass

from hashring import Assignment, chore_owners, watched_by_successors
from kinesis.lease_loop.decisions import SessionSeen
from kinesis.lease_loop.lease_model import SessionRow

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
            # of it there: kinesis.lease_loop.published_plan)
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
            if current not in passed and (check_backups or (current in self.stalled and current not in self.settled)):
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
            elif previous is None:
                continue  # a first sight says nothing: a newcomer stays read in full until it runs
            elif (previous.token, previous.counter) == (row.token, row.counter):
                if now - previous.since >= tick_interval:
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
