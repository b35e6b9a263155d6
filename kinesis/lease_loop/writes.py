"""``Acquisitions``: the adopt / take / create writes of a round, and what they win.

The writes of one round go out at once (:class:`~kinesis.lease_loop.holder.WritePool`),
each conditional on the row as read; then, in order, each lease won is held
(:class:`~kinesis.lease_loop.holder.LeaseHolder`), counted, logged (how and from whom, at
INFO) and started (``on_lease_acquired``; if that raises, the lease is released). A lost
race counts as a ``take_conflict``; any other failure is logged and the next round retries;
a write answered with an error may have been applied, so its row is read every round until a
read tells (:meth:`~kinesis.lease_loop.holder.LeaseHolder.take_unanswered`).

``Handoffs``: the graceful hand-offs of one member, from request to write.

Each round walks the held leases in key order (:meth:`Handoffs.run`): the decisions say
where each belongs and whether a hand-off may start now; starting one asks the listener
(``on_handoff_requested``) to stop processing. Until its completion is done the lease keeps
being renewed (past ``handoff_timeout`` too, which only logs); then one conditional write
passes the lease, with its checkpoint, to the planned owner, or releases it
(:meth:`Handoffs.complete`, also called between rounds as soon as a listener is done). If
by then the plan gives the key back to this member (or the target's session row went), the
listener is told ``on_lease_acquired`` again instead, with the row as the table has it (a
write of it answered with an error may have been applied: :meth:`LeaseHolder.confirm`).
"""

from __future__ import annotations

import concurrent.futures
import functools
import logging
import threading
from collections.abc import Callable, Mapping, MutableSet, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import replace

from kinesis.errors import KinesisHashRingError, LeaseLostError
from kinesis.lease_loop import decisions
from kinesis.lease_loop.decisions import Seen, Snapshot, Take
from kinesis.lease_loop.holder import Handoff, Held, LeaseHolder, WritePool, raise_first
from kinesis.lease_loop.lease_listener import GuardedListener, completion_done
from kinesis.lease_loop.table.model import Checkpoint, Lease

log = logging.getLogger(__name__)


class Acquisitions:
    """Sends :class:`~kinesis.lease_loop.decisions.Take` decisions for ``member_id``."""

    def __init__(self, holder: LeaseHolder, listener: GuardedListener, pool: WritePool, member_id: str,
                 initial_checkpoint: Checkpoint):
        self._holder = holder
        self._listener = listener
        self._pool = pool
        self._me = member_id
        self._initial_checkpoint = initial_checkpoint

    def run(self, takes: Sequence[Take], fresh: MutableSet[str], seen: Mapping[str, Seen],
            last_full: Mapping[str, Lease]) -> None:
        """Send ``takes`` at once; hold and start what they won, adding started keys to
        ``fresh``. ``seen`` and ``last_full`` (the rows of the last full read) name the
        previous owner and the sender of a hand-off in the log."""
        # what a take rides on: a session chain alive now (renewed within half a tick); without
        # one, nothing it took could be processed (the next round tries again)
        if takes and not (self._holder.refresh_session() and self._holder.chain_alive()):
            return
        takes = self._confirmed(takes)
        results = self._pool.run([functools.partial(self._timed, self._write(t)) for t in takes])
        for take, result in zip(takes, results, strict=True):
            if isinstance(result, LeaseLostError):
                result = (None, 0.0)
            if isinstance(result, BaseException):  # the successful writes are still registered
                self._holder.count("lease_loop_errors")
                log.warning("%s: could not take %s: %s", self._me, take.key, result,
                            exc_info=not isinstance(result, KinesisHashRingError))
                # maybe applied: its row is read until that is known (a recovered take then)
                self._holder.take_unanswered(take.key, take.lease.counter + 1 if take.lease is not None else 0)
                continue
            self._holder.take_answered(take.key)
            lease, stamp = result
            if lease is None:
                self._holder.count("take_conflicts")
                continue
            h = self._holder.add(take.key, lease, stamp)
            if h.started:
                fresh.add(take.key)
            self._holder.count(take.kind)
            how = self._how(take, seen, last_full)
            log.info("%s: %s (counter %d)", self._me, how, lease.counter)
            if h.started and not self._listener.call("on_lease_acquired", lease):
                self._holder.drop(take.key, h)

    def _confirmed(self, takes: Sequence[Take]) -> Sequence[Take]:
        """``takes`` without those whose holder's session moved since it was timed: one strongly
        consistent read of each such session row, right before the takes (a take timed by a
        session relies on it: :mod:`~kinesis.lease_loop.holder`)."""
        members = sorted({t.check.member_id for t in takes if t.check is not None})
        if not members:
            return takes
        try:
            rows = self._holder.table.read_rows((), members, consistent=True)[1]
        except KinesisHashRingError as exc:
            log.warning("%s: could not read the sessions its takes rely on (trying next round): %s", self._me, exc)
            self._holder.count("lease_loop_errors")
            return [t for t in takes if t.check is None]
        kept = []
        for take in takes:
            if take.check is not None and not take.check.holds(rows.get(take.check.member_id)):
                self._holder.count("take_conflicts")  # the holder renewed its session meanwhile
                continue
            kept.append(take)
        return kept

    def _write(self, take: Take) -> Callable[[], Lease | None]:
        table, session = self._holder.table, self._holder.session
        if take.lease is None:
            return functools.partial(table.create_lease_if_absent, take.key,
                                     checkpoint=self._initial_checkpoint, owner=self._me, session=session)
        if take.kind == "adopted":
            return functools.partial(table.adopt, take.lease, session=session)
        return functools.partial(table.take, take.lease, self._me, session=session)

    def _timed(self, write: Callable[[], Lease | None]) -> tuple[Lease | None, float]:
        stamp = self._holder.stamp()
        return write(), stamp

    def _how(self, take: Take, seen: Mapping[str, Seen], last_full: Mapping[str, Lease]) -> str:
        """How ``take.key`` was acquired and from whom, for the log (the row as read)."""
        key, kind = take.key, take.kind
        timer = seen.get(key)
        before = timer.owner if timer is not None else None
        if kind == "adopted":
            row = take.lease if take.lease is not None else last_full.get(key)
            sender = row.handed_off_by if row is not None and row.owner == self._me else None
            return f"adopted lease {key} handed off by {sender or 'another member'}"
        if kind == "takeovers":
            return f"took over lease {key} from {before}, not renewed for a lease duration"
        if kind == "orphans_taken":
            return f"took orphaned lease {key} from {before or 'nobody'}"
        if kind == "offers_withdrawn":
            return f"took back lease {key} offered to {before}, not adopted within adopt_timeout"
        if kind == "recovered":
            return f"recovered lease {key}: its own take or adoption was applied though answered with an error"
        return f"acquired {'new' if kind == 'created' else 'free'} lease {key}"


class Handoffs:
    """Hand-off bookkeeping over ``holder`` (see the module docs); ``wake`` interrupts the
    coordinator's wait between rounds when a completion may be done."""

    def __init__(self, holder: LeaseHolder, listener: GuardedListener, pool: WritePool, member_id: str,
                 wake: threading.Event, absent: Callable[[str], None]):
        self._holder = holder
        self._listener = listener
        self._pool = pool
        self._me = member_id
        self._wake = wake
        self._absent = absent  # a target found without a session row (no hand-off to it for a while)

    def run(self, snap: Snapshot, fresh: AbstractSet[str]) -> None:
        """Start, retarget and finish the hand-offs of this round's plan; ``fresh`` keys (taken
        this round under an older plan) are judged on the next round."""
        held = self._holder.items()
        snap = replace(snap, held=frozenset(k for k, _ in held), offers=self._holder.offers(held))
        budget = decisions.handoff_budget(snap)
        ready: list[tuple[str, Held, str | None]] = []
        for key, h in held:
            if h.gone or key in fresh:
                continue
            target = decisions.handoff_target(snap, key)
            if h.handoff is None:
                start = decisions.start_handoff(snap, budget, target)
                if start is None:
                    continue
                if target is not None and not self._holder.table.has_session(target):
                    self._absent(target)  # not started yet, or never runs: ask no processor to stop
                    continue
                counted, budget = start
                self._request(h, target, counted, snap.now)
            handoff = h.handoff
            assert handoff is not None
            handoff.target = target
            handoff.failed = False
            if not completion_done(handoff.completion):
                if not handoff.warned and decisions.handoff_overdue(snap, handoff.requested_at):
                    handoff.warned = True
                    self._holder.count("handoff_timeouts")
                    log.warning(
                        "%s: listener has not finished hand-off of %s after %.1f s; still renewing",
                        self._me, key, snap.now - handoff.requested_at,
                    )
                continue
            ready.append((key, h, target))
            budget = budget.finished(handoff.counted)
        self.complete(ready)

    def _request(self, h: Held, target: str | None, counted: bool, now: float) -> None:
        completion = self._listener.request_handoff(h.lease) if h.started else None
        self._holder.begin_handoff(h, Handoff(completion, now, target, counted=counted))
        if isinstance(completion, concurrent.futures.Future):
            completion.add_done_callback(lambda _: self._wake.set())
        self._wake.set()  # the loop looks at pending completions often from now on
        self._holder.count("handoffs_requested")

    def complete(self, ready: list[tuple[str, Held, str | None]]) -> None:
        """Finish hand-offs whose listener is done: resume (the plan changed back), or write
        the hand-off / release of each, all at once."""
        writes: list[tuple[str, Held, str | None]] = []
        for key, h, target in ready:
            if target == self._me:  # the plan changed back: resume processing
                if self._resume(key, h) is not False:
                    continue
                target = None
            writes.append((key, h, target))
        done = self._pool.run([functools.partial(self._holder.hand_off, *w) for w in writes])
        for (key, h, target), gone in zip(writes, done, strict=True):
            if gone is True:
                self._holder.forget(key, h)
            elif gone is None and target is not None:  # the target's session row went: keep it
                log.info("%s: %s has no session row any more: keeping %s", self._me, target, key)
                self._absent(target)
                if self._resume(key, h) is False:
                    self._holder.drop(key, h)
        raise_first(done)

    def _resume(self, key: str, h: Held) -> bool | None:
        """Call a hand-off off and process the lease again, from the checkpoint its row has
        (:meth:`LeaseHolder.confirm`: a checkpoint answered with an error may have been
        applied); True once resumed (or the lease turned out lost: nothing to resume), False if
        the listener refused, None if the row could not be confirmed (the hand-off stays,
        done, and the next round tries again; meanwhile nothing processes the lease)."""
        confirmed = self._holder.confirm(key, h)
        if confirmed is None:
            if h.handoff is not None:
                h.handoff.failed = True
            return None
        if not confirmed:
            return True
        self._holder.begin_handoff(h, None)
        self._holder.count("handoffs_resumed")
        return self._listener.call("on_lease_acquired", h.lease)
