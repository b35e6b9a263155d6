"""``Acquisitions``: the adopt / take / create writes of a round, and what they win.

The writes of one round go out at once (:class:`~kinesis.lease_loop.write_pool.WritePool`),
each conditional on the row as read; then, in order, each lease won is held
(:class:`~kinesis.lease_loop.holder.LeaseHolder`), counted, logged (how and from whom, at
INFO) and started (``on_lease_acquired``; if that raises, the lease is released). A lost
race counts as a ``take_conflict``; any other failure is logged and the next round retries;
a write answered with an error may have been applied, so its row is read every round until a
read tells (:meth:`~kinesis.lease_loop.holder.LeaseHolder.take_unanswered`).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Mapping, MutableSet, Sequence

from kinesis.errors import KinesisHashRingError, LeaseLostError
from kinesis.lease_loop.decisions import Seen, Take
from kinesis.lease_loop.holder import LeaseHolder
from kinesis.lease_loop.lease_listener import GuardedListener
from kinesis.lease_loop.lease_model import Checkpoint, Lease
from kinesis.lease_loop.write_pool import WritePool

log = logging.getLogger("kinesis.lease_loop.coordinator")  # the lease loop logs as the coordinator


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
