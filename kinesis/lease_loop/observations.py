"""``Observations``: what one member has seen of the lease table, from round to round.

The expiry timer of each row (:class:`~kinesis.lease_loop.decisions.Seen`) and of each
member's session (:class:`~kinesis.lease_loop.decisions.SessionSeen`), whom it
suspects, the membership version those suspicions were made under, and the expiry moments
already scheduled a round. The round updates
them from :mod:`~kinesis.lease_loop.decisions` and logs who changed; only the round (under
the coordinator's round lock) touches them, and :attr:`Observations.suspect_ids` is
published as an immutable tuple for status readers.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable, Mapping
from collections.abc import Set as AbstractSet
from dataclasses import replace
from itertools import chain

from kinesis.lease_loop import decisions
from kinesis.lease_loop.decisions import Seen, SessionSeen, Snapshot, Suspicions
from kinesis.lease_loop.table.model import Lease, SessionRow

log = logging.getLogger(__name__)


class Observations:
    """Timers and suspicions of ``member_id`` (see the module docs)."""

    def __init__(self, member_id: str):
        self.seen: dict[str, Seen] = {}
        self.sessions: dict[str, SessionSeen] = {}
        self.suspicions = Suspicions()
        self.suspect_ids: tuple[str, ...] = ()
        self._me = member_id
        self._version: object = None
        self._expiry_served = -math.inf  # the last expiry moment a round was scheduled for
        self._absent: dict[str, tuple[float, int]] = {}  # member -> (no hand-off until, times in a row)
        self._stall_read: dict[str, tuple[str | None, int]] = {}  # member -> (token, counter) read again as stalled
        self._confirming: dict[str, tuple[str | None, int]] = {}  # those the last behind() asked to confirm

    def observe(self, rows: Mapping[str, Lease], now: float, *, partial: bool = False,
                by_session: bool = False) -> frozenset[str]:
        """Update the timers from the rows read; the members seen writing (``by_session``: a
        row naming its holder's known session is no news: the session row tells)."""
        seen = decisions.observe(rows, self.seen, now, partial=partial,
                                 sessions=self.sessions if by_session else None)
        self.seen.update(seen.changed)
        for key in seen.gone:
            del self.seen[key]
        return seen.active

    def observe_sessions(self, rows: Mapping[str, SessionRow | None], now: float, *,
                         partial: bool = True) -> frozenset[str]:
        """Update the session timers from the session rows read (member -> row, None: no
        row); the members whose session changed since last seen. ``partial``: the others
        are kept (a scan passes every row and ``partial=False``)."""
        active: set[str] = set()
        for member, row in rows.items():
            self._observe_session(member, row, now, active)
        if not partial:
            for member in [m for m in self.sessions if m not in rows]:
                self._observe_session(member, None, now, active)
        return frozenset(active)

    def _observe_session(self, member: str, row: SessionRow | None, now: float, active: set[str]) -> None:
        """One session row read at ``now`` (None: there is none: a tombstone keeps since when,
        so the leases of a session that is gone are timed from then)."""
        old = self.sessions.get(member)
        if row is None:
            if old is None or old.token is not None:
                self.sessions[member] = SessionSeen(None, -1, now, now, now)
            else:
                self.sessions[member] = replace(old, read_at=now)
        elif old is None or old.token != row.token:
            self.sessions[member] = SessionSeen(row.token, row.counter, now, now, now)
            if old is not None and old.token is not None:
                active.add(member)  # a new session: it (re)started
        elif old.counter != row.counter:
            self.sessions[member] = replace(old, counter=row.counter, since=now, read_at=now)
            active.add(member)
        else:
            self.sessions[member] = replace(old, read_at=now)

    def forget_tombstones(self, keep: frozenset[str]) -> None:
        """Forget the absent sessions of members no row names any more (but ``keep``'s)."""
        owners = {s.owner for s in self.seen.values()}
        for member in [m for m, s in self.sessions.items() if s.token is None and m not in owners and m not in keep]:
            del self.sessions[member]
            self._stall_read.pop(member, None)

    def behind(self, rows: Mapping[str, Lease | None], sessions: Mapping[str, SessionRow | None],
               written: Mapping[str, int] | None = None, *, stalled_before: float = -math.inf
               ) -> tuple[list[str], list[str]]:
        """The rows and session rows read that are older than what this member already saw or
        wrote itself (a lower counter than seen, or than ``written``: key -> the counter of this
        member's own write, e.g. an offer it made; or no row where one was seen or written: an
        eventually consistent read from a stale replica). Such a read is no news: the caller
        reads them again, strongly consistent, instead of restarting their timers (stale reads
        that restart a timer can postpone a takeover for as long as they keep coming, and a
        stale read of an offer's row would make its maker forget the offer).

        A session row read with another token than seen, or none where one was seen, or one
        where none was seen (a tombstone), may be such a read too: a stale replica from
        before the row was written, or from before it was replaced or deleted (so a session
        that left keeps coming back, with an old counter, from replicas that missed its
        deletion: each flip would restart the timers of its leases and postpone their takeover
        for as long as the flips keep coming). Those are read again, strongly consistent, too:
        a token change (a start, a restart, a leave) counts only once a consistent read shows it.

        And a session row read with the counter seen since ``stalled_before`` or earlier (a
        lease duration ago: its session is about to be judged stalled) may be a replica that
        missed the renewals since: a member is judged dead (its leases taken, itself removed
        from a member list) only on a strongly consistent read. That read is made once per
        session counter: a dead member still listed is not read twice a round for ever."""
        written = written or {}
        keys = []
        for key, lease in rows.items():  # the rows read only: self.seen may hold every row of the table
            floor = seen.counter if (seen := self.seen.get(key)) is not None else None
            if (mine := written.get(key)) is not None:
                floor = mine if floor is None else max(mine, floor)
            if floor is not None and (lease is None or lease.counter < floor):
                keys.append(key)
        members = []
        self._confirming = {}
        for member, row in sessions.items():
            if (s2 := self.sessions.get(member)) is None:
                continue
            if _session_behind(s2, row):
                members.append(member)
            elif (row is not None and row.counter == s2.counter and s2.since <= stalled_before
                  and self._stall_read.get(member) != (s2.token, s2.counter)):
                members.append(member)  # read again now: see read_again
                self._confirming[member] = (s2.token, s2.counter)
        return keys, members

    def read_again(self) -> None:
        """The caller read again, strongly consistent, the session rows the last :meth:`behind`
        asked for: those about to be judged stalled are not read again at the counter seen
        then (a re-read of a row that was merely behind is no such confirmation). Called only
        once that read succeeded: a failed one is owed still."""
        self._stall_read.update(self._confirming)
        self._confirming = {}

    def timers(self, rows: Mapping[str, Lease], keys: Iterable[str]) -> dict[str, Seen]:
        """A copy of the timers a round's decisions may look at (the rows read, the keys to take)."""
        keys = list(keys)
        if len(rows) + len(keys) >= len(self.seen):
            return dict(self.seen)
        return {k: s for k in chain(rows, keys) if (s := self.seen.get(k)) is not None}

    def start_timers(self, timers: Mapping[str, Seen]) -> None:
        self.seen.update(timers)

    def keep_missing(self, planned: AbstractSet[str]) -> None:
        """Forget the missing-row timers of keys no longer planned."""
        for key in [k for k, s in self.seen.items() if s.counter is None and k not in planned]:
            del self.seen[key]

    def next_expiry(self, held: AbstractSet[str], lease_duration: float, now: float) -> float:
        """The next moment (after ``now`` and after the last one returned) when a lease held by
        someone else expires unless renewed; math.inf if none. Each moment is returned once."""
        due = decisions.next_expiry(self.seen, held, self._me, lease_duration, max(now, self._expiry_served),
                                    self.sessions)
        if due != math.inf:
            self._expiry_served = due  # scheduled now: never again
        return due

    def membership(self, version: object) -> None:
        """A new membership version gives every suspect another chance (on probation)."""
        if version != self._version:
            self._version = version
            self._set(self.suspicions.forgiven())

    def suspect(self, snap: Snapshot, active: Iterable[str]) -> None:
        """Apply :func:`~kinesis.lease_loop.decisions.suspect` and log who changed."""
        result = decisions.suspect(snap, active)
        for member in result.revived:
            log.info("%s: %s is alive again", self._me, member)
        for member in result.suspected:
            log.info("%s: suspecting %s (all its leases expired)", self._me, member)
        self._set(result.suspicions)

    def absent(self, member: str, now: float, retry: float) -> None:
        """A hand-off found ``member`` without a session row (not started yet, never runs, or
        left): no hand-off goes to it for ``retry`` seconds, doubling each time in a row
        (at most 64x), until one of its rows or its session row is seen."""
        _, times = self._absent.get(member, (0.0, 0))
        self._absent[member] = (now + retry * 2 ** min(times, 6), times + 1)
        log.info("%s: %s has no session row (not running): no hand-off to it for now", self._me, member)

    def absent_now(self, now: float) -> frozenset[str]:
        """The members no hand-off goes to now (see :meth:`absent`)."""
        return frozenset(m for m, (until, _) in self._absent.items() if now < until)

    def present(self, members: Iterable[str]) -> None:
        """Members seen running (a row or their session row changed): forget their absence."""
        for member in members:
            self._absent.pop(member, None)

    def _set(self, suspicions: Suspicions) -> None:
        self.suspicions = suspicions
        self.suspect_ids = tuple(sorted(suspicions.suspects))


def _session_behind(seen: SessionSeen, row: SessionRow | None) -> bool:
    """Whether a session row read eventually consistent may be older than ``seen`` (see
    :meth:`Observations.behind`): an older counter of the same token, or another token (or
    none) than seen: read it again, strongly consistent, before it counts."""
    token = row.token if row is not None else None
    if token != seen.token:
        return True
    return row is not None and row.counter < seen.counter
