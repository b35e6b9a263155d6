"""``LeaseHolder``: the leases one member holds, the only state its threads share.

The round thread registers, renews and hands off leases; writer threads renew and hand off
(one write per lease, at once); processing threads checkpoint, release and ask whether they
may still process (:meth:`LeaseHolder.holds`). :attr:`LeaseHolder.lock` guards the held map,
the queue of leases found lost by a checkpoint, the event counters and the ``stopping``
flag; each :class:`Held` lease has its own lock, taken around every write of it, so a
renewal, a checkpoint and a hand-off of the same lease never race, while writes of
different leases go out at once. A held lease is valid until ``lease_duration -
tick_interval`` (:attr:`~kinesis.lease_loop.lease_timing.LeaseTiming.validity`) after
:meth:`LeaseHolder.stamp` taken when this member *sent* its last successful write of it: the
send time, or the send time of the last session renewal completed by then if that is earlier
(:mod:`~kinesis.lease_loop.session_rows`). So it stops before anyone else can see the lease
expire, whether they time its row or its session.
"""

from __future__ import annotations

import functools
import logging
import math
import threading
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from kinesis.errors import DuplicateMemberIdError, KinesisHashRingError, LeaseLostError
from kinesis.lease_loop.clock import Clock
from kinesis.lease_loop.decisions import Offer
from kinesis.lease_loop.lease_listener import COUNTER_NAMES, Completion, completion_done
from kinesis.lease_loop.lease_model import Checkpoint, Lease
from kinesis.lease_loop.lease_timing import LeaseTiming
from kinesis.lease_loop.leases import LeaseTable
from kinesis.lease_loop.write_pool import WritePool, raise_first

log = logging.getLogger("kinesis.lease_loop.coordinator")  # the lease loop logs as the coordinator


@dataclass
class Handoff:
    """A graceful hand-off in progress (the listener is stopping processing)."""

    completion: Completion
    requested_at: float
    target: str | None  # member id, or None: release the lease
    warned: bool = False
    counted: bool = True  # counts against max_concurrent_handoffs
    failed: bool = False  # the write failed: retried by the next round, not between rounds


@dataclass(frozen=True)
class Offered:
    """A lease this member handed off and its target has not adopted yet: this member reads
    its row until it is adopted and takes it back after ``adopt_timeout`` if it is not."""

    target: str
    counter: int
    """The row's counter as the hand-off wrote it."""
    at: float


@dataclass
class Held:
    """One held lease: the row as last written, and until when it may be processed."""

    lease: Lease
    valid_until: float
    lock: threading.Lock = field(default_factory=threading.Lock)
    handoff: Handoff | None = None
    gone: bool = False
    started: bool = True  # False: adopted while stopping, handed on without processing


class LeaseHolder:
    """The held leases of ``member_id`` (see the module docs)."""

    def __init__(self, table: LeaseTable, member_id: str, timing: LeaseTiming, clock: Clock):
        self.lock = threading.RLock()
        self.stopping = False
        """Set by a graceful stop: adopted leases are handed on, not started."""
        self.table = table
        """The lease table every write goes to (the coordinator's ``table``)."""
        self._me = member_id
        self._timing = timing
        self._clock = clock
        self._held: dict[str, Held] = {}
        self._lost: list[Lease] = []  # lost by a checkpoint: the round tells the listener
        self._counters: Counter[str] = Counter(dict.fromkeys(COUNTER_NAMES, 0))
        self.session = uuid.uuid4().hex
        """This holder's session token (recorded by every write of its leases)."""
        self._session_counter: int | None = None  # the counter last written (None: not yet)
        self._session_sent = -math.inf  # send time of the last session renewal that completed
        self._session_uncertain = False  # the last renewal failed: it may have been applied anyway
        self._session_lock = threading.Lock()
        self.plan_version = 0
        """The published plan this member plans from, recorded in its session row (set by the round)."""
        self.refused: DuplicateMemberIdError | None = None
        """Set when another process took this member id over: this process refuses to run."""
        self._inbox: frozenset[str] = frozenset()  # offers to this member, as its last renewal read them
        self._handled: set[str] = set()  # offers looked at: removed from the row by the next renewal
        self._offered: dict[str, Offered] = {}

    # --- reads (any thread) -------------------------------------------------------------

    def get(self, key: str) -> Held | None:
        with self.lock:
            return self._held.get(key)

    def items(self) -> list[tuple[str, Held]]:
        """The held leases, by key."""
        with self.lock:
            return sorted(self._held.items())

    def keys(self) -> frozenset[str]:
        with self.lock:
            return frozenset(self._held)

    def holding(self) -> bool:
        """Whether any lease is held (or, while stopping, an offer of it not yet adopted: a
        graceful stop sees its offers through)."""
        with self.lock:
            return bool(self._held) or (self.stopping and bool(self._offered))

    def inbox(self) -> frozenset[str]:
        """Keys other members handed off to this member, not looked at yet."""
        with self.lock:
            return self._inbox - self._handled

    def handled(self, keys: set[str]) -> None:
        """Offers looked at (adopted, or not offered to this member any more)."""
        with self.lock:
            self._handled |= keys & self._inbox

    def offered(self) -> dict[str, Offered]:
        """This member's offers not adopted yet, by key."""
        with self.lock:
            return dict(self._offered)

    def offer_resolved(self, key: str) -> None:
        """An offer was adopted, taken back, or moved on."""
        with self.lock:
            self._offered.pop(key, None)

    def holds(self, key: str) -> bool:
        """True while ``key`` may be processed (held, renewed in time, not handed off)."""
        held = self.get(key)
        if held is None or held.gone or self._clock() >= held.valid_until:
            return False
        return held.handoff is None or not completion_done(held.handoff.completion)

    def lease(self, key: str) -> Lease | None:
        held = self.get(key)
        return None if held is None or held.gone else held.lease

    def held_keys(self) -> tuple[str, ...]:
        with self.lock:
            return tuple(sorted(k for k, h in self._held.items() if not h.gone))

    def offers(self, items: list[tuple[str, Held]]) -> dict[str, Offer]:
        """The hand-offs in progress among ``items``, as the decisions see them."""
        with self.lock:
            return {k: Offer(h.handoff.target, h.handoff.counted) for k, h in items if h.handoff is not None}

    def pending_handoffs(self) -> dict[str, str | None]:
        """Key -> target of each hand-off in progress (None: release)."""
        with self.lock:
            return {k: h.handoff.target for k, h in self._held.items() if h.handoff is not None}

    def has_pending_handoffs(self) -> bool:
        with self.lock:
            return any(h.handoff is not None and not h.gone for h in self._held.values())

    def ready_handoffs(self) -> list[tuple[str, Held, str | None]]:
        """Hand-offs whose listener is done and whose write is due (not failed: the next round
        retries those), with the last plan's target."""
        with self.lock:
            return [
                (k, h, h.handoff.target)
                for k, h in sorted(self._held.items())
                if h.handoff is not None and not h.gone and not h.handoff.failed
                and completion_done(h.handoff.completion)
                and not (self.stopping and h.handoff.target == self._me)
            ]

    # --- counters -------------------------------------------------------------------------

    def count(self, name: str) -> None:
        with self.lock:
            self._counters[name] += 1

    def counters(self) -> dict[str, int]:
        with self.lock:
            return dict(self._counters)

    # --- the session ----------------------------------------------------------------------

    def stamp(self) -> float:
        """What the validity of a write sent now counts from: now, or the send time of the
        last completed session renewal if that is earlier."""
        with self.lock:
            return min(self._clock(), self._session_sent)

    def refresh_session(self) -> bool:
        """Renew the session unless a renewal was sent within half a tick (before takes, and
        before a late checkpoint); whether any renewal ever succeeded (nothing is taken
        before one)."""
        self.renew_session(unless_newer_than=self._timing.tick_interval / 2)
        with self.lock:
            return self._session_sent > -math.inf

    def renew_session(self, *, unless_newer_than: float | None = None) -> None:
        """Renew the session row (the round thread, before lease writes); with
        ``unless_newer_than``, only if the last renewal was sent longer ago than that. A
        failure is logged and counted: validity then stops growing until one succeeds."""
        with self._session_lock:  # one renewal at a time (the round, or a late checkpoint)
            sent = self._clock()
            with self.lock:
                if self.refused is not None:
                    return
                if unless_newer_than is not None and sent - self._session_sent < unless_newer_than:
                    return
                previous = self._session_counter
                if self._session_uncertain:  # the last renewal may have been applied, at an unknown
                    self.session, previous = uuid.uuid4().hex, None  # time: start a session of our own
                    self._session_uncertain = False
            with self.lock:
                handled = frozenset(self._handled)
            try:
                row = self.table.renew_session(self._me, self.session, previous, plan_version=self.plan_version,
                                               handled=handled if previous is not None else frozenset())
            except DuplicateMemberIdError as exc:
                with self.lock:
                    self.refused = exc
                log.critical("%s: %s", self._me, exc)
                return
            except BaseException as exc:
                with self.lock:  # it may have been applied: the next success cannot say when
                    self._session_uncertain = True
                if not isinstance(exc, KinesisHashRingError):
                    raise
                self.count("renew_failures")
                log.warning("%s: could not renew its session: %s", self._me, exc)
                return
            with self.lock:
                if row.token != self.session:  # the row had gone: a new session under a new token
                    log.warning("%s: its session row was deleted; new session %s", self._me, row.token)
                    self.session = row.token
                self._session_counter = row.counter
                if previous is not None:
                    self._handled -= handled
                self._inbox = row.offers
                self._session_sent = max(self._session_sent, sent)

    def end_session(self) -> None:
        """Delete the session row, if one was written (a graceful stop; errors ignored: it
        goes stale)."""
        with self.lock:
            if self._session_counter is None:
                return
        try:
            self.table.delete_session(self._me, self.session)
        except KinesisHashRingError as exc:
            log.warning("%s: could not delete its session row: %s", self._me, exc)

    # --- the round thread -----------------------------------------------------------------

    def add(self, key: str, lease: Lease, stamp: float) -> Held:
        """Hold ``lease``, written with :meth:`stamp` ``stamp`` (not started while stopping)."""
        h = Held(lease, stamp + self._timing.validity)
        with self.lock:
            self._held[key] = h
            if self.stopping:  # handed to a leaving member: pass it on, do not process it
                h.started = False
        return h

    def forget(self, key: str, h: Held) -> None:
        with self.lock:
            if self._held.get(key) is h:
                del self._held[key]

    def begin_handoff(self, h: Held, handoff: Handoff | None) -> None:
        """Start (or, with None, call off) the hand-off of ``h``."""
        with self.lock:
            h.handoff = handoff

    def take_lost(self) -> list[Lease]:
        """The leases a checkpoint found lost since the last call."""
        with self.lock:
            lost, self._lost = self._lost, []
        return lost

    def drop(self, key: str, h: Held) -> None:
        """Release ``h`` if still held (errors ignored: it expires) and forget it."""
        with h.lock:
            if not h.gone:
                try:
                    self.table.release(h.lease)
                    self.count("releases")
                except KinesisHashRingError:
                    pass
                h.gone = True
        self.forget(key, h)

    def drop_all(self) -> list[str]:
        """Forget every lease (the coordinator stopped); the keys left to expire."""
        with self.lock:
            left = sorted(self._held)
            for h in self._held.values():
                h.gone = True
            self._held.clear()
        return left

    # --- writes (round, writer and processing threads) ------------------------------------

    def renew_all(self, pool: WritePool, lost: Callable[[str, Held], None]) -> None:
        """Renew the session, then every held lease at once on ``pool``; ``lost(key, h)`` for
        each one lost (not yet forgotten), then re-raise the first unexpected error."""
        self.renew_session()
        held = self.items()
        gone = pool.run([functools.partial(self.renew, key, h) for key, h in held])
        for (key, h), was_lost in zip(held, gone, strict=True):
            if was_lost is True:
                lost(key, h)
        raise_first(gone)

    def renew(self, key: str, h: Held) -> bool:
        """Renew one held lease, carrying the hand-off target; True if it was lost."""
        with h.lock:
            if h.gone:
                return False
            stamp = self.stamp()
            if not stamp + self._timing.validity - h.valid_until >= self._timing.tick_interval / 2:
                # nothing to gain: written since the last session renewal, or none since
                if self._clock() < h.valid_until:
                    return False
                log.error("%s: lease %s not renewed in time (no session renewal); dropping it", self._me, key)
                h.gone = True
                return True
            desired = h.handoff.target if h.handoff is not None else None
            try:
                if desired == h.lease.pending_handoff:
                    h.lease = self.table.renew(h.lease, session=self.session)
                else:
                    h.lease = self.table.renew(h.lease, pending_handoff=desired, session=self.session)
                h.valid_until = stamp + self._timing.validity
                self.count("renewals")
                return False
            except LeaseLostError as exc:
                log.warning("%s: lost lease %s (another member took it): %s", self._me, key, exc)
            except KinesisHashRingError as exc:
                self.count("renew_failures")
                log.warning("%s: could not renew %s: %s", self._me, key, exc)
                if self._clock() < h.valid_until:
                    return False
                log.error("%s: lease %s not renewed in time; dropping it", self._me, key)
            h.gone = True
            return True

    def checkpoint(self, key: str, checkpoint: Checkpoint) -> Lease:
        """Checkpoint (and so renew) a held lease, fenced by owner + counter; also past
        ``valid_until``: the write succeeds only if nobody took the lease meanwhile."""
        return self._write_held(key, "checkpoints",
                                lambda lease: self.table.checkpoint(lease, checkpoint, session=self.session))

    def prepare_checkpoint(self, key: str, checkpoint: Checkpoint) -> Lease:
        """Record a pending checkpoint (two-phase checkpoints), fenced and renewing like
        :meth:`checkpoint`; the next checkpoint clears it."""
        return self._write_held(
            key, "checkpoints_prepared",
            lambda lease: self.table.prepare_checkpoint(lease, checkpoint, session=self.session)
        )

    def _write_held(self, key: str, counter: str, write: Callable[[Lease], Lease]) -> Lease:
        """One fenced write of the holder to ``key`` (from any thread); it renews the lease."""
        held = self.get(key)
        if held is None:
            raise LeaseLostError(f"{self._me} does not hold lease {key!r}: stop processing it")
        with held.lock:
            if held.gone:
                raise LeaseLostError(f"{self._me} no longer holds lease {key!r}")
            if self._clock() >= held.valid_until:  # late: this write renews the session too
                self.refresh_session()
            stamp = self.stamp()
            try:
                new = write(held.lease)
            except LeaseLostError:
                held.gone = True
                with self.lock:
                    if self._held.get(key) is held:
                        del self._held[key]
                        self._lost.append(held.lease)
                raise
            held.lease = new
            held.valid_until = stamp + self._timing.validity
            self.count(counter)
            return new

    def release(self, key: str) -> bool:
        """Give up a held lease now; False if it was not held."""
        held = self.get(key)
        if held is None:
            return False
        with held.lock:
            if held.gone:
                return False
            try:
                self.table.release(held.lease)
                self.count("releases")
            except LeaseLostError:
                self.count("leases_lost")
            held.gone = True
            self.forget(key, held)
        return True

    def hand_off(self, key: str, h: Held, target: str | None) -> bool | None:
        """Hand the lease to ``target`` (None: release it); True once it is no longer held,
        None if ``target`` has no session row (it never ran, or left: nothing was written).
        The target is told first (its session row's offers), so it adopts the lease whatever
        its own plan says; this member then watches the offer until it is adopted. A failed
        write (throttling, outage) is left for the next round to retry."""
        with h.lock:
            if h.gone:
                return False
            try:
                if target is None:
                    self.table.release(h.lease)
                    self.count("releases")
                else:
                    if not self.table.offer(target, key):
                        return None
                    written = self.table.handoff(h.lease, target)
                    with self.lock:
                        self._offered[key] = Offered(target, written.counter, self._clock())
                    self.count("handoffs")
                    log.info("%s: handed %s off to %s", self._me, key, target)
            except LeaseLostError:
                self.count("leases_lost")
            except Exception as exc:
                if h.handoff is not None:
                    h.handoff.failed = True
                self.count("lease_loop_errors")
                log.warning("%s: hand-off of %s failed (retried next round): %s", self._me, key, exc)
                return False
            h.gone = True
            return True
