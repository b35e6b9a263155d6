"""The lease loop's decisions: pure functions of one round's :class:`Snapshot`.

No I/O, no clock reads, no threads: the coordinator reads the table, builds a snapshot, calls
these, and sends the writes they name. Every duration is judged on the observer's clock
(``Snapshot.now``) against :class:`Seen` timers: when this member first saw a row's
(counter, owner) pair. A row is *unchanged* for ``now - seen.since``.

**Sessions.** A lease held under a session lease (``ACTIVE_SESSION``,
:mod:`~kinesis.lease_loop.holder`) is unchanged while the session it names is: since its
counter last changed, or, once that session is gone, since the first sight of another token
or of no row at all. A row that names a session but is renewed by its holder (a release
before 0.2, or a holder whose session cannot be renewed) is unchanged while both are. Such
expiry can be judged only in a round that read that session row; otherwise it is not
expired. A take that relies on a session carries a
:class:`~kinesis.lease_loop.table.model.SessionCheck`, which a strongly consistent read of
the session row confirms right before the conditional take.

**Taking** (:func:`takes`). A lease is expired once unchanged for ``lease_duration``; a free
lease (or a missing row) counts as expired from the moment it is first seen free; an offer
(a lease handed off to a member) once unchanged for ``adopt_timeout``. The takeover order
of an expired lease is the plan's owners without its holder, in order: the i-th may take
it once it has been expired for ``i * backup_grace`` (the planned primary at once, its first
backup one grace later); a lease of a holder this member watched and that then left the
member list, by this member at once (it timed that holder all along). Any member may take a
lease (or create a missing row) unchanged for ``orphan_timeout``: disagreeing views stall a
key for a bounded time only. A lease this
member owns but does not hold (an earlier run of the same id) is taken back once expired.
A free lease at ``SHARD_END`` is not taken: nothing is left to process (a finished key stays
planned until the resource provider's key set moves on, a manifest poll later with scoped
reads; taking it meant a take and a release every few ticks until then).
A lease this member handed off and its target did not adopt within ``adopt_timeout`` is
taken back by this member, whatever the plan says (the member that makes an offer sees it
through: nobody else may be reading that row).

**Suspecting** (:func:`suspect`). A member whose leases all look expired (or that leaves a
hand-off unadopted for ``adopt_timeout``) is *suspected* until a row shows it writing. A member found without a session row when a
hand-off to it starts is *absent*: no hand-off goes to it for a tick, then 2, 4... (at most
64) in a row, until it is seen running (a member not started yet gets its leases a tick
later; one that never runs costs a read now and then).
After ``orphan_timeout * 2**(n-1)`` (n: times suspected in a row, at most 16x), or a new
membership version (:meth:`Suspicions.forgiven`), it is on *probation*: planned again, but
handed at most one lease at a time until it adopts one.

**Handing off** (:func:`handoff_target`, :func:`start_handoff`). A held lease goes to its
planned owner, or is released when its key is no longer planned. A graceful hand-off to
another member starts only while fewer than ``max_concurrent_handoffs`` are in flight, never
to a suspect, an absent member or a member that lets one of its leases expire, and to a member on
probation only when it holds nothing and nothing else is on its way to it. Releases (and
everything while stopping) are not limited; a stopping member hands each lease to the first
of its owners (primary, then backups) that is neither suspected nor absent.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field, replace

from hashring import Assignment, chore_owners
from kinesis.lease_loop.table.model import Lease, LeaseState, SessionCheck
from kinesis.lease_loop.timing import LeaseTiming


@dataclass(frozen=True)
class Seen:
    """When this member first saw a row's (counter, owner) pair."""

    counter: int | None  # None: no row yet
    owner: str | None
    since: float
    session: str | None = None
    """The row's session token (``Lease.session``)."""
    leased: bool = False
    """Held under a session lease (``ACTIVE_SESSION``): timed by its session alone."""


@dataclass(frozen=True)
class SessionSeen:
    """When this member first saw a member's session row with (token, counter); ``token``
    None: it saw no row (a tombstone: since then)."""

    token: str | None
    counter: int
    since: float
    read_at: float
    """When the row was last read (unchanged since ``since`` until then)."""
    token_since: float = -math.inf
    """When this member first saw ``token`` (or no row): a session it replaced is gone since then."""


def unchanged_since(seen: Seen, sessions: Mapping[str, SessionSeen], read_by: float = -math.inf) -> float | None:
    """Since when a lease seen as ``seen`` is unchanged. A row that names no session: its own
    timer. A row held under a session lease: its session's (its counter's timer while it has
    the token the row names, else the first sight of the token or absence that replaced
    it), whatever the row did (its checkpoints do not make the holder valid for longer). A
    row that names a session but is renewed by its holder (before 0.2, or while its session
    cannot be renewed): the later of the two. None: it names a session not read at
    ``read_by`` or later (this round: its expiry cannot be judged now)."""
    if seen.session is None or seen.owner is None:
        return seen.since
    session = sessions.get(seen.owner)
    if session is None or session.read_at < read_by:
        return None
    timer = session.since if session.token == seen.session else session.token_since
    return timer if seen.leased else max(seen.since, timer)


def expired_for(seen: Seen, sessions: Mapping[str, SessionSeen], now: float, expiry: float) -> float:
    """How long past ``expiry`` a lease seen as ``seen`` has been unchanged at ``now``
    (negative: not expired, or not judgeable now)."""
    since = unchanged_since(seen, sessions, now)
    return -math.inf if since is None else now - since - expiry


def session_check(seen: Seen, sessions: Mapping[str, SessionSeen]) -> SessionCheck | None:
    """What a take of the lease seen as ``seen`` relies on about its owner's session (None:
    it names none)."""
    if seen.session is None or seen.owner is None:
        return None
    session = sessions.get(seen.owner)
    alive = session is not None and session.token == seen.session
    return SessionCheck(seen.owner, seen.session, session.counter if alive and session is not None else None)


@dataclass(frozen=True)
class Suspicions:
    """Whom this member suspects (see the module docs)."""

    suspects: Mapping[str, float] = field(default_factory=dict)
    """Member -> the last evidence of its death (all its leases expired)."""
    counts: Mapping[str, int] = field(default_factory=dict)
    """Member -> times suspected in a row."""
    probation: frozenset[str] = frozenset()
    """Ex-suspects: one hand-off at a time until seen writing."""

    def forgiven(self) -> Suspicions:
        """A new membership version: every suspect is on probation."""
        return Suspicions({}, self.counts, self.probation | set(self.suspects))


@dataclass(frozen=True)
class Offer:
    """A graceful hand-off in progress of a held lease."""

    target: str | None
    """The member it goes to; None: it is released."""
    counted: bool
    """Counts against ``max_concurrent_handoffs``."""


@dataclass(frozen=True)
class Snapshot:
    """What one round decides on. The plan carries the members it was made for."""

    now: float
    me: str
    timing: LeaseTiming
    rows: Mapping[str, Lease] = field(default_factory=dict)
    """The lease rows read this round (all of them, or the scoped few)."""
    seen: Mapping[str, Seen] = field(default_factory=dict)
    """Timers of the rows read (after :func:`observe`) and of the keys to take."""
    sessions: Mapping[str, SessionSeen] = field(default_factory=dict)
    """Session timers, by member."""
    held: AbstractSet[str] = frozenset()
    suspicions: Suspicions = Suspicions()
    plan: Assignment | None = None
    planned: AbstractSet[str] = frozenset()
    """The keys that may be planned now (others held are released)."""
    offers: Mapping[str, Offer] = field(default_factory=dict)
    """Held key -> its hand-off in progress."""
    offered: Mapping[str, tuple[str, int]] = field(default_factory=dict)
    """Key -> (target, counter written) of this member's hand-offs not adopted yet."""
    session: str | None = None
    """This member's session token (a row that names it and is not held is this run's own)."""
    session_since: float = math.inf
    """When this member's session token was first written (answered): a row of its member id
    naming another token belongs to an earlier run, gone at least since then."""
    inherited: Mapping[str, str | None] = field(default_factory=dict)
    """Key -> holder of leases of members this member watched that left the member list: it
    takes them once expired as their first backup, whatever the plan says."""
    absent: AbstractSet[str] = frozenset()
    """Members found without a session row lately: no hand-off goes to them now."""
    stopping: bool = False
    max_concurrent_handoffs: int = 2


@dataclass(frozen=True)
class Observation:
    """What a read changed: new timers, timers of rows gone, members seen writing."""

    changed: Mapping[str, Seen]
    gone: tuple[str, ...]
    active: frozenset[str]


def observe(rows: Mapping[str, Lease], seen: Mapping[str, Seen], now: float, *,
            partial: bool = False, sessions: Mapping[str, SessionSeen] | None = None) -> Observation:
    """Restart the timer of each row whose (counter, owner) changed; a holder whose row
    changed (not by a hand-off) is *active*, unless the row names the holder's session in
    ``sessions`` read at ``now`` (then only its session row tells: scoped reads may see a
    row's old change late). ``partial``: ``rows`` are some rows only (scoped reads): timers of the others are
    kept (counters only grow, so an unchanged pair seen again later means no write happened
    in between)."""
    changed: dict[str, Seen] = {}
    active: set[str] = set()
    sessions = {m: s for m, s in (sessions or {}).items() if s.read_at >= now}  # read this round
    for key, lease in rows.items():
        old = seen.get(key)
        if old is None or old.counter != lease.counter or old.owner != lease.owner:
            changed[key] = Seen(lease.counter, lease.owner, now, lease.session, lease.state is LeaseState.ACTIVE_SESSION)
            if old is not None and lease.owner is not None and lease.handed_off_by is None:
                timer = sessions.get(lease.owner)
                if timer is None or lease.session != timer.token:
                    active.add(lease.owner)
    gone = () if partial else tuple(k for k, s in seen.items() if k not in rows and s.counter is not None)
    return Observation(changed, gone, frozenset(active))


@dataclass(frozen=True)
class Suspicion:
    """The result of :func:`suspect`: the new state, and who changed (for the log)."""

    suspicions: Suspicions
    revived: tuple[str, ...]
    suspected: tuple[str, ...]


def suspect(snap: Snapshot, active: Iterable[str]) -> Suspicion:
    """Suspect the holders whose leases all expired; clear the ``active`` ones; put suspects
    whose back-off ran out on probation."""
    me, now, timing = snap.me, snap.now, snap.timing
    holders: dict[str, list[str]] = {}
    for key, lease in snap.rows.items():
        if lease.owner is not None and lease.owner != me:
            holders.setdefault(lease.owner, []).append(key)
    suspects = dict(snap.suspicions.suspects)
    counts = dict(snap.suspicions.counts)
    probation = set(snap.suspicions.probation)
    active = set(active)
    revived: list[str] = []
    for member in active:
        if member in suspects or member in probation:
            revived.append(member)
        suspects.pop(member, None)
        probation.discard(member)
        counts.pop(member, None)
    suspected: list[str] = []
    for member, keys in holders.items():
        if member in active:
            continue
        unadopted = any(
            snap.rows[k].handed_off_by is not None and now - snap.seen[k].since >= timing.adopt_timeout
            for k in keys
        )
        if unadopted or all(expired_for(snap.seen[k], snap.sessions, now, timing.lease_duration) >= 0
                            for k in keys):
            if member not in suspects:
                counts[member] = counts.get(member, 0) + 1
                probation.discard(member)
                suspected.append(member)
            suspects[member] = now
    for member, since in list(suspects.items()):
        backoff = 2 ** min(counts.get(member, 1) - 1, 4)
        if now - since >= timing.orphan_timeout * backoff:
            del suspects[member]
            probation.add(member)
    return Suspicion(Suspicions(suspects, counts, frozenset(probation)), tuple(revived), tuple(suspected))


def plan_members(listed: Sequence[str], me: str, suspects: Mapping[str, float], *, ready: bool,
                 keep_suspects: bool) -> list[str]:
    """The members to plan for: the listed ones minus suspects (unless ``keep_suspects``:
    scoped reads, where every member must make the same plan); ``me`` only when ready."""
    members = [m for m in listed if (keep_suspects or m not in suspects) and (m != me or ready)]
    if ready and me not in members:
        members.append(me)
    return members


@dataclass(frozen=True)
class Take:
    """Take (with no row: create; kind "adopted": adopt) the lease of ``key``; ``kind`` is the
    counter it counts as: adopted, created, acquired, takeovers, orphans_taken,
    offers_withdrawn or recovered (this run's own take or adoption whose answer was lost)."""

    key: str
    kind: str
    lease: Lease | None
    check: SessionCheck | None = None
    """What the take relies on about the holder's session (confirmed by a consistent read)."""


def adoptions(snap: Snapshot) -> list[Take]:
    """Adopt each lease handed off to this member and not held yet, by key (also when not
    planned or stopping: it is handed on or released at once instead of stalling the key)."""
    return [
        Take(key, "adopted", lease) for key, lease in sorted(snap.rows.items())
        if lease.owner == snap.me and lease.handed_off_by is not None and key not in snap.held
    ]


def recoveries(snap: Snapshot) -> list[Take]:
    """This run's own takes whose answer was lost (rows naming this member under its session,
    not held), by key. :func:`takes` recovers them among the keys it may take; a stopping
    member takes nothing, so the round recovers these alone, and hands them on as it does
    every lease it holds (else each would wait for its session to end)."""
    if snap.session is None:
        return []
    return [
        Take(key, "recovered", lease) for key, lease in sorted(snap.rows.items())
        if lease.owner == snap.me and lease.session == snap.session and lease.handed_off_by is None
        and key not in snap.held
    ]


@dataclass(frozen=True)
class Takes:
    """The result of :func:`takes`."""

    timers: Mapping[str, Seen]
    """Timers started this round (keys without a row: free from now on)."""
    takes: tuple[Take, ...]


def takes(snap: Snapshot, keys: Iterable[str]) -> Takes:
    """Which of ``keys`` (all planned) this member takes now (see the module docs)."""
    plan = snap.plan
    if plan is None:
        return Takes({}, ())
    me, now, timing = snap.me, snap.now, snap.timing
    timers: dict[str, Seen] = {}
    out: list[Take] = []
    for key in keys:
        if key in snap.held:
            continue
        seen = snap.seen.get(key)
        if seen is None or (key not in snap.rows and seen.counter is not None):
            seen = timers[key] = Seen(None, None, now)
        lease = snap.rows.get(key)
        owners = plan.owners[key]
        if lease is not None and lease.owner == me:
            if lease.handed_off_by is not None:
                continue  # handed to this member: adopted (adoptions)
            if snap.session is not None and lease.session == snap.session:
                out.append(Take(key, "recovered", lease))  # this run's own write, its answer lost
                continue
            # an earlier run's: its session is gone since this run's first renewal at the latest
            earlier = seen.since if lease.session is None else max(seen.since, snap.session_since)
            if now - earlier >= timing.lease_duration:
                check = None if lease.session is None else SessionCheck(me, lease.session, None)
                out.append(Take(key, "takeovers", lease, check))
            continue
        timer = unchanged_since(seen, snap.sessions, now)
        if timer is None:
            continue  # it names a session this round did not read: not judgeable now
        unchanged = now - timer
        mine = snap.offered.get(key)
        if (lease is not None and mine is not None and (lease.owner, lease.counter) == mine
                and lease.handed_off_by == me):  # this member's offer: it sees it through
            if unchanged >= timing.adopt_timeout:
                out.append(Take(key, "offers_withdrawn", lease))
            continue
        free = lease is None or lease.owner is None
        if free and lease is not None and lease.is_shard_end:
            continue  # fully processed: nothing to take it for (planned until the key set moves on)
        offer = lease is not None and lease.owner is not None and lease.handed_off_by is not None
        expiry = timing.adopt_timeout if offer else timing.lease_duration
        past = unchanged if free else unchanged - expiry
        if past < 0:
            continue
        holder = None if lease is None else lease.owner
        candidates = [o for o in owners if o != holder]
        if holder is not None and snap.inherited.get(key) == holder:
            candidates = [me]  # its former watcher: it has timed that holder all along
        if me in candidates:
            # owners ahead of this member whose session is gone (never ran, or crashed) take
            # nothing: it waits one grace per owner ahead that may be running, not per owner
            ahead = [o for o in candidates[:candidates.index(me)] if not session_gone(snap, o)]
            if past < len(ahead) * timing.backup_grace:
                continue
            kind = "offers_withdrawn" if offer else "acquired" if free else "takeovers"
        elif stands_in(snap, owners, holder):
            kind = "offers_withdrawn" if offer else "acquired" if free else "takeovers"
        elif unchanged >= timing.orphan_timeout:
            kind = "orphans_taken"
        else:
            continue
        check = session_check(seen, snap.sessions) if lease is not None else None
        out.append(Take(key, "created" if lease is None and kind == "acquired" else kind, lease, check))
    return Takes(timers, tuple(out))


def session_gone(snap: Snapshot, member: str) -> bool:
    """Whether ``member``'s session row, read this round, has not changed (or has been missing)
    for a lease duration: it runs no chain, so it can take nothing (unknown: False)."""
    session = snap.sessions.get(member)
    return (session is not None and session.read_at >= snap.now
            and snap.now - session.since >= snap.timing.lease_duration)


def stands_in(snap: Snapshot, owners: Sequence[str], holder: str | None) -> bool:
    """Whether this member takes a key of ``owners`` (held by ``holder``) in the takeover order's
    place: every owner but the holder has a session gone for a lease duration (listed members
    that never ran, or crashed) and this member is the first member after the owners in the
    sorted member list whose session is not (as a stopping member hands a lease on). It then
    takes the lease as its first backup would, instead of after ``orphan_timeout``: with
    scoped reads it is the member that reads the keys of a run of stalled members."""
    plan = snap.plan
    if plan is None or snap.me in owners:
        return False
    if any(not session_gone(snap, o) for o in owners if o != holder):
        return False
    members = plan.members
    start = members.index(owners[-1]) + 1 if owners[-1] in members else 0
    for member in (*members[start:], *members[:start]):
        if member == snap.me:
            return True
        if member in owners or member == holder:
            continue
        if not session_gone(snap, member):
            return False  # a member that may be running comes first
    return False


def handoff_target(snap: Snapshot, key: str) -> str | None:
    """Where the held lease of ``key`` belongs: its planned owner (``me``: keep it), or None:
    release it (not planned any more, or stopping without a plan). While stopping: the first
    of the key's owners (primary, then backups) that is not suspected, else the first such
    member after them in the sorted member list (a released lease would wait ``orphan_timeout``
    when every owner is listed but not running), else None."""
    if key not in snap.planned:
        return None
    if snap.plan is None:
        return None if snap.stopping else snap.me
    if not snap.stopping:
        return snap.plan.owner(key)
    owners = snap.plan.owners[key]
    members = snap.plan.members
    start = members.index(owners[-1]) + 1 if owners[-1] in members else 0
    ring = (*owners, *members[start:], *members[:start])
    return next((o for o in ring
                 if o != snap.me and o not in snap.suspicions.suspects and o not in snap.absent), None)


@dataclass(frozen=True)
class HandoffBudget:
    """What limits new hand-offs during one round."""

    in_flight: int
    """Counted hand-offs in progress."""
    probing: frozenset[str | None]
    """Targets of hand-offs in progress."""
    unhealthy: frozenset[str]
    """Members letting one of their leases (or an offer to them) expire."""
    holders: frozenset[str | None]
    """Owners of the rows read."""

    def finished(self, counted: bool) -> HandoffBudget:
        """One hand-off done: the limit is on hand-offs in progress, not per round."""
        return replace(self, in_flight=self.in_flight - 1) if counted else self


def handoff_budget(snap: Snapshot) -> HandoffBudget:
    """The budget at the start of a round's hand-offs."""
    now, timing = snap.now, snap.timing
    unhealthy = frozenset(
        lease.owner
        for key, lease in snap.rows.items()
        if lease.owner is not None
        and expired_for(snap.seen[key], snap.sessions, now,
                        timing.adopt_timeout if lease.handed_off_by is not None else timing.lease_duration) >= 0
    )
    return HandoffBudget(
        in_flight=sum(1 for o in snap.offers.values() if o.counted),
        probing=frozenset(o.target for o in snap.offers.values()),
        unhealthy=unhealthy,
        holders=frozenset(lease.owner for lease in snap.rows.values()),
    )


def start_handoff(snap: Snapshot, budget: HandoffBudget, target: str | None
                  ) -> tuple[bool, HandoffBudget] | None:
    """Whether to start handing a held lease (none in progress) to ``target`` now: None (keep
    it, for now or for good), else (counted against ``max_concurrent_handoffs``, the budget
    after it)."""
    if target == snap.me:
        return None
    if target is None or snap.stopping:
        return False, budget
    if budget.in_flight >= snap.max_concurrent_handoffs:
        return None
    if target in budget.unhealthy or target in snap.suspicions.suspects or target in snap.absent:
        return None
    if target in snap.suspicions.probation and (target in budget.probing or target in budget.holders):
        return None  # one probe at a time until it shows it is alive
    return True, replace(budget, in_flight=budget.in_flight + 1, probing=budget.probing | {target})


def handoff_overdue(snap: Snapshot, requested_at: float) -> bool:
    """The listener has taken longer than ``handoff_timeout`` (logged; still renewed)."""
    return snap.now - requested_at >= snap.timing.handoff_timeout


def next_expiry(seen: Mapping[str, Seen], held: AbstractSet[str], me: str, lease_duration: float,
                after: float, sessions: Mapping[str, SessionSeen] | None = None) -> float:
    """The first moment after ``after`` when a lease held by someone else expires unless
    renewed, by its row or its session (math.inf: none)."""
    sessions = sessions or {}
    due = [
        since + lease_duration for key, s in seen.items()
        if s.owner not in (None, me) and key not in held and (since := unchanged_since(s, sessions)) is not None
    ]
    return min((t for t in due if t > after), default=math.inf)


SESSION_CHORE = "sessions"
"""The chore (:func:`hashring.chore_owners`) whose owner deletes stale session rows."""


def stale_sessions(sessions: Mapping[str, SessionSeen], leases: Mapping[str, Lease], listed: Sequence[str],
                   me: str, now: float, lease_duration: float) -> list[tuple[str, SessionSeen]]:
    """The session rows the owner of :data:`SESSION_CHORE` among ``listed`` deletes after a
    full read (``leases``: every row): those of members not listed, unchanged for a lease
    duration, that own no lease any more (their leases moved: no watcher times them by it).
    Empty unless ``me`` owns the chore."""
    live = set(listed)
    gone = [(member, s) for member, s in sorted(sessions.items())
            if s.token is not None and member not in live and now - s.since >= lease_duration]
    if not gone or chore_owners(SESSION_CHORE, listed)[:1] != [me]:
        return []  # the usual case, every scan round: no row to look at, no ring to hash
    owners = {lease.owner for lease in leases.values()}
    return [(member, s) for member, s in gone if member not in owners]
