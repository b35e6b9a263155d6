"""``LeaseHolder``: the leases one member holds, the only state its threads share.

The round thread registers, confirms and hands off leases; writer threads write them (one
write per lease, at once); processing threads checkpoint, release and ask whether they may
still process (:meth:`LeaseHolder.holds`). :attr:`LeaseHolder.lock` guards the held map, the
queue of leases found lost by a checkpoint, the session chain, the event counters and the
``stopping`` flag; each :class:`Held` lease has its own lock, taken around every write of
it, so a confirmation, a checkpoint and a hand-off of the same lease never race, while
writes of different leases go out at once.

**Session leases.** A member renews one session row per tick and no lease row: every lease
it writes names its session and says ``ACTIVE_SESSION`` (:mod:`~kinesis.lease_loop.table.model`),
and is valid while that session's *chain* lasts. With ``V = lease_duration - tick_interval``
(:attr:`~kinesis.lease_loop.timing.LeaseTiming.validity`), a renewal sent at ``s``
extends the chain to ``s + V``, but only if its answer came back before the chain ran out; a
renewal answered later (or a new session token) starts a new chain, and a lease of an
earlier chain is written again (conditional on its counter) before it is processed again.
A taker waits until the session the lease names has been unchanged for a lease duration on
its clock, and reads it strongly consistent right before its conditional take: a renewal
applied before that read is seen, and one applied after it was answered after the chain ran
out, so the holder writes the lease again first and one of the two conditional writes fails.
No transaction is needed, and checkpoints never make a lease valid for longer.

While the chain would not carry its leases to the next tick (session renewals fail, or
``tick_interval`` is more than a third of the lease), the holder renews each lease by
writing its row every tick instead, as ``ACTIVE`` (as releases before 0.2 always did): valid
until ``V`` after the send time of its last write (a conditional write: nobody took it
before, and nobody may take it until its row has been unchanged for a lease duration on
their clock). A session row that cannot be written costs writes, not leases.

``WritePool``: the DynamoDB writes of one round, sent at once.

Renewals, takes, adoptions and hand-off writes of a round run on up to ``threads`` writer
threads, so a round costs about one round trip however many leases move. Used by the round
only (under the coordinator's round lock), which also shuts it down.
"""

from __future__ import annotations

import concurrent.futures
import functools
import logging
import math
import threading
import uuid
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from kinesis.errors import DuplicateMemberIdError, KinesisHashRingError, LeaseLostError
from kinesis.lease_loop.decisions import Offer
from kinesis.lease_loop.lease_listener import COUNTER_NAMES, Completion, completion_done
from kinesis.lease_loop.table.leases import LeaseTable
from kinesis.lease_loop.table.model import Checkpoint, Lease, LeaseState, encode_loads
from kinesis.lease_loop.timing import Clock, LeaseTiming


class WritePool:
    """Runs calls on lazily started writer threads named ``lease-writer-<member>``."""

    def __init__(self, threads: int, member_id: str):
        self._threads = threads
        self._name = f"lease-writer-{member_id}"
        self._executor: concurrent.futures.ThreadPoolExecutor | None = None

    def run(self, calls: list[Callable[[], Any]]) -> list[Any]:
        """Run ``calls`` at once; their results (or exceptions), in order."""
        if len(calls) <= 1 or self._threads == 1:
            out: list[Any] = []
            for call in calls:
                try:
                    out.append(call())
                except Exception as exc:
                    out.append(exc)
            return out
        if self._executor is None:
            self._executor = concurrent.futures.ThreadPoolExecutor(self._threads, thread_name_prefix=self._name)
        futures = [self._executor.submit(call) for call in calls]
        return [f.exception() or f.result() for f in futures]

    def shutdown(self) -> None:
        """Stop the writer threads (without waiting for them)."""
        executor, self._executor = self._executor, None
        if executor is not None:
            executor.shutdown(wait=False)


def raise_first(results: list[Any]) -> None:
    """Re-raise the first unexpected exception a writer thread returned."""
    for r in results:
        if isinstance(r, BaseException):
            raise r


log = logging.getLogger(__name__)
LOAD_FAILURES_TOLERATED = 3
"""Failed load measurements in a row after which a member's loads are removed from its session
row (the fleet then balances by counts): fewer keep the last loads, so one failure does not
flip the fleet to counts and back."""


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
    its row until it is adopted, tells the target again each ``adopt_timeout`` (its round may
    have read the offer before the row named it) and takes it back if its plan says so."""

    target: str
    counter: int
    """The row's counter as the hand-off wrote it."""
    at: float
    told: float = -math.inf
    """When the target was last told again (its session row's offers)."""


@dataclass
class Held:
    """One held lease: the row as last written, and until when it may be processed."""

    lease: Lease
    valid_until: float
    """``V`` after the send time of its last successful write (its row alone)."""
    epoch: int = -1
    """The session chain that write rode on (-1: none); while that chain lasts, so does the lease."""
    lock: threading.Lock = field(default_factory=threading.Lock)
    handoff: Handoff | None = None
    gone: bool = False
    started: bool = True  # False: adopted while stopping, handed on without processing
    unconfirmed: tuple[str, ...] = ()
    """The write tokens of its writes answered with an error since its last confirmed write (any
    of them may have been applied: a later one that failed need not have been)."""


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
        self._uncertain: float | None = None  # send time of a renewal answered with an error
        self._chain_until = -math.inf  # the current session chain lasts until then
        self._epoch = 0  # the current chain (a new one starts when a renewal comes back too late)
        self._abandoned: list[tuple[Lease, tuple[str, ...]]] = []  # given up, release failed (lease, its unconfirmed tokens)
        self.members_version = 0
        """The newest member list version this member's session row was told of."""
        self.plan_told = 0
        """The newest plan version a rebuilder of the plan's head told this member of."""
        self.session_since = math.inf
        """When the first renewal of the current session token was answered: a row of this
        member id naming another token (an earlier run's) is unchanged at least since then."""
        self._session_lock = threading.Lock()
        self.plan_version = 0
        """The published plan this member plans from, recorded in its session row (set by the round)."""
        self.load_source: Callable[[], Mapping[str, float]] | None = None
        """What each held lease costs (set by the coordinator when it balances by load)."""
        self.load_every = math.inf
        """Seconds between two renewals that carry the loads (the others leave them as they are)."""
        self._loads_sent = -math.inf  # send time of the last renewal that carried loads
        self._load_failures = 0  # measurements that failed in a row
        self.refused: DuplicateMemberIdError | None = None
        """Set when another process took this member id over: this process refuses to run."""
        self._inbox: frozenset[str] = frozenset()  # offers to this member, as its last renewal read them
        self._handled: set[str] = set()  # offers looked at: removed from the row by the next renewal
        self._offered: dict[str, Offered] = {}
        self._unanswered: dict[str, int] = {}  # key -> counter of a take answered with an error

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

    def retell(self, now: float, every: float) -> int:
        """Tell the target of each offer unadopted for ``every`` seconds (and not told again
        for as long) of it again; the number told. A target's round that read the offer from
        its session row before the hand-off write named it in the row marked it handled, and
        a target whose plan does not give it the key reads the row only through its offers."""
        with self.lock:
            due = {k: o for k, o in self._offered.items() if now - max(o.at, o.told) >= every}
        told = 0
        for key, offer in sorted(due.items()):
            try:
                if not self.table.offer(offer.target, key):
                    continue  # its session row went: the plan's next owner takes the offer back
            except KinesisHashRingError as exc:
                self.count("lease_loop_errors")
                log.warning("%s: could not tell %s again of its offer %s: %s", self._me, offer.target, key, exc)
                continue
            with self.lock:
                if self._offered.get(key) == offer:
                    self._offered[key] = replace(offer, told=now)
            self.count("offers_retold")
            told += 1
        return told

    def unanswered(self) -> dict[str, int]:
        """This member's takes (and adoptions) answered with an error, by key: the counter
        each would have written if it was applied."""
        with self.lock:
            return dict(self._unanswered)

    def take_unanswered(self, key: str, counter: int) -> None:
        """A take of ``key`` writing ``counter`` was answered with an error: it may have been
        applied. Its row is then read every round until a read tells (scoped reads read only
        the rows that can change a decision: a backup whose take of a paused holder's key
        was applied unbeknown to it stopped reading the key once the holder ran again, and
        nobody else could take a lease whose owner's session lives on: the key stalled)."""
        with self.lock:
            self._unanswered[key] = max(counter, self._unanswered.get(key, counter))

    def take_answered(self, key: str) -> None:
        """The outcome of a take of ``key`` is known (won, lost, or read in the table)."""
        with self.lock:
            self._unanswered.pop(key, None)

    def offer_resolved(self, key: str) -> None:
        """An offer was adopted, taken back, or moved on."""
        with self.lock:
            self._offered.pop(key, None)

    def holds(self, key: str) -> bool:
        """True while ``key`` may be processed (held, valid, not handed off): see the module docs."""
        held = self.get(key)
        if held is None or held.gone or not self._valid(held, self._clock()):
            return False
        return held.handoff is None or not completion_done(held.handoff.completion)

    def _valid(self, h: Held, now: float) -> bool:
        """A session lease while its chain lasts; a row this member renews itself until ``V``
        after its last write."""
        with self.lock:
            if h.lease.state is LeaseState.ACTIVE_SESSION:
                return h.epoch == self._epoch and now < self._chain_until
            return now < h.valid_until

    def chain_alive(self, margin: float = 0.0) -> bool:
        """Whether the session chain lasts ``margin`` seconds more (a lease written now rides on it)."""
        with self.lock:
            return self._clock() + margin < self._chain_until

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
        """What the validity of a write sent now counts from: now (its send time)."""
        return self._clock()

    def _chain_of(self, stamp: float) -> int:
        """The session chain a lease written at ``stamp`` rides on (-1: none was alive then)."""
        with self.lock:
            return self._epoch if stamp < self._chain_until else -1

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
        failure is logged and counted: the chain then stops growing until one succeeds. A
        renewal answered with an error may have been applied: the next one recognises it
        (the row carries this session's token and that counter) and counts from the earlier
        send, so a renewal is never dated later than it may have been applied."""
        with self._session_lock:  # one renewal at a time (the round, or a late checkpoint)
            sent = self._clock()
            with self.lock:
                if self.refused is not None:
                    return
                if unless_newer_than is not None and sent - self._session_sent < unless_newer_than:
                    return
                previous = self._session_counter
                handled = frozenset(self._handled)
                token = self.session
            loads = self._loads_due(sent)
            try:
                row = self.table.renew_session(self._me, token, previous, plan_version=self.plan_version,
                                               handled=handled if previous is not None else frozenset(),
                                               loads=loads)
            except DuplicateMemberIdError as exc:
                with self.lock:
                    self.refused = exc
                log.critical("%s: %s", self._me, exc)
                return
            except BaseException as exc:
                with self.lock:  # it may have been applied: the next success counts from this send
                    if self._uncertain is None:
                        self._uncertain = sent
                if not isinstance(exc, KinesisHashRingError):
                    raise
                self.count("renew_failures")
                log.warning("%s: could not renew its session: %s", self._me, exc)
                return
            answered = self._clock()
            with self.lock:
                fresh = row.token != token  # the row had gone: a new session under a new token
                if fresh:
                    log.warning("%s: its session row was deleted; new session %s", self._me, row.token)
                    self.session = row.token
                if fresh or previous is None:
                    self.session_since = answered
                # an earlier attempt answered with an error was applied: count from its send
                counted_from = sent if self._uncertain is None or not row.replayed else min(sent, self._uncertain)
                if not fresh and answered < self._chain_until:
                    self._chain_until = max(self._chain_until, counted_from + self._timing.validity)
                else:  # answered too late (or a new session): a new chain; older leases get written again
                    self._epoch += 1
                    self._chain_until = counted_from + self._timing.validity
                self._uncertain = None
                if loads is not None:
                    self._loads_sent = sent
                self._session_counter = row.counter
                if previous is not None:
                    self._handled -= handled
                self._inbox = row.offers
                self.members_version = max(self.members_version, row.members_version)
                self.plan_told = max(self.plan_told, row.plan_told)
                self._session_sent = max(self._session_sent, sent)

    def _loads_due(self, now: float) -> bytes | None:
        """The loads to write with this renewal: once per :attr:`load_every` (None otherwise).
        When measuring fails it is logged and the loads on the row are removed (``b""``): a
        member whose loads are unknown keeps the fleet on counts rather than on stale loads;
        the renewal goes ahead either way."""
        source = self.load_source
        if source is None or now - self._loads_sent < self.load_every:
            return None
        try:
            loads = encode_loads(source())
        except Exception as exc:  # a measurement must never stop a renewal
            self._load_failures += 1
            keep = self._load_failures < LOAD_FAILURES_TOLERATED  # one failure: keep the last loads
            log.warning("%s: could not measure its loads (%s): %s: %s", self._me,
                        "the last ones stay" if keep else "removed from its session row until it can",
                        type(exc).__name__, exc)
            return None if keep else b""
        self._load_failures = 0
        return loads

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
        h = Held(lease, stamp + self._timing.validity, self._chain_of(stamp))
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
        """Release ``h`` if still held and forget it (a release that fails is tried again every
        tick: the lease names this member's live session, so it would never expire)."""
        with h.lock:
            if not h.gone:
                try:
                    self.table.release(h.lease, prior_token=h.unconfirmed)
                    self.count("releases")
                except LeaseLostError:
                    pass
                except KinesisHashRingError:
                    with self.lock:
                        self._abandoned.append((h.lease, h.unconfirmed))
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
        """Renew the session; then write again, at once on ``pool``, every held lease the
        session chain does not carry to the next tick (one of an earlier chain, or all of them
        while session renewals fail), and release what was given up; ``lost(key, h)`` for each
        one lost (not yet forgotten), then re-raise the first unexpected error."""
        self.renew_session()
        with self.lock:
            abandoned, self._abandoned = self._abandoned, []
        for lease, prior in abandoned:
            try:
                self.table.release(lease, prior_token=prior)
                self.count("releases")
            except LeaseLostError:
                pass
            except KinesisHashRingError:
                with self.lock:
                    self._abandoned.append((lease, prior))
        held = self.items()
        gone = pool.run([functools.partial(self.renew, key, h) for key, h in held])
        for (key, h), was_lost in zip(held, gone, strict=True):
            if was_lost is True:
                lost(key, h)
        raise_first(gone)

    def renew(self, key: str, h: Held) -> bool:
        """Write one held lease again unless the session chain carries it to the next tick
        (the usual case: nothing to do): as a session lease once the chain carries (a lease of
        an earlier chain, or renewed by its row), else renewed by its row (its session cannot
        be renewed); True if it was lost."""
        with h.lock:
            if h.gone:
                return False
            now = self._clock()
            with self.lock:
                carries = now + self._timing.tick_interval < self._chain_until
                carried = carries and h.epoch == self._epoch and h.lease.state is LeaseState.ACTIVE_SESSION
            if carried:
                return False
            error = self._rewrite(h, leased=carries)
            if error is None:
                return False
            if isinstance(error, LeaseLostError):
                log.warning("%s: lost lease %s (another member took it): %s", self._me, key, error)
            else:
                log.warning("%s: could not renew %s: %s", self._me, key, error)
                if self._valid(h, self._clock()):
                    return False
                log.error("%s: lease %s not renewed in time; dropping it", self._me, key)
                # its row still names this member's session, which lives on once renewals succeed
                # again: release it (next tick, fenced), or nobody would ever see it expire
                with self.lock:
                    self._abandoned.append((h.lease, h.unconfirmed))
            h.gone = True
            return True

    def checkpoint(self, key: str, checkpoint: Checkpoint, completed: str | None = None) -> Lease:
        """Checkpoint (and so renew) a held lease, fenced by owner + counter; also past its
        validity: the write succeeds only if nobody took the lease meanwhile. ``completed``:
        records completed beyond it, encoded (None removes an earlier set)."""
        return self._write_held(key, "checkpoints", lambda lease, token, prior: self.table.checkpoint(
            lease, checkpoint, session=self.session, leased=self.chain_alive(), token=token, prior_token=prior,
            completed=completed))

    def prepare_checkpoint(self, key: str, checkpoint: Checkpoint) -> Lease:
        """Record a pending checkpoint (two-phase checkpoints), fenced and renewing like
        :meth:`checkpoint`; the next checkpoint clears it."""
        return self._write_held(key, "checkpoints_prepared", lambda lease, token, prior: self.table.prepare_checkpoint(
            lease, checkpoint, session=self.session, leased=self.chain_alive(), token=token, prior_token=prior))

    def _write_held(self, key: str, counter: str, write: Callable[[Lease, str, tuple[str, ...]], Lease]) -> Lease:
        """One fenced write of the holder to ``key`` (from any thread); it renews the lease.
        ``write(lease, token, prior_token)``: a write answered with an error is remembered by
        its token, so the next one recognises it if it was applied after all."""
        held = self.get(key)
        if held is None:
            raise LeaseLostError(f"{self._me} does not hold lease {key!r}: stop processing it")
        with held.lock:
            if held.gone:
                raise LeaseLostError(f"{self._me} no longer holds lease {key!r}")
            if not self._valid(held, self._clock()):  # late: this write renews the session too
                self.refresh_session()
            stamp = self.stamp()
            token = uuid.uuid4().hex
            try:
                new = write(held.lease, token, held.unconfirmed)
            except LeaseLostError:
                held.gone = True
                with self.lock:
                    if self._held.get(key) is held:
                        del self._held[key]
                        self._lost.append(held.lease)
                raise
            except KinesisHashRingError:
                held.unconfirmed = (*held.unconfirmed, token)
                raise
            held.lease = new
            held.unconfirmed = ()
            held.valid_until = stamp + self._timing.validity
            held.epoch = self._chain_of(stamp)
            self.count(counter)
            return new

    def confirm(self, key: str, h: Held) -> bool | None:
        """Make ``h.lease`` the row as the table has it, before its processing starts again (a
        hand-off called off). ``h.lease`` is the row as this member's last *confirmed* write
        left it; a write answered with an error since (a checkpoint its listener wrote before
        it stopped, most often) may have been applied, so the row may be ahead: a processor
        started from ``h.lease.checkpoint`` would deliver again records it had checkpointed,
        and its next checkpoints would be refused as regressions. So, only after such a write,
        write the lease again (fenced, recognising its own applied writes by their tokens):
        what it returns is the row. True once ``h.lease`` is the row; False if the lease was
        lost (forgotten; its listener already stopped); None if the write failed too (the
        caller tries again later)."""
        with h.lock:
            if h.gone:
                return False
            if not h.unconfirmed:
                return True  # only this holder writes the row: it is as its last write left it
            if not self._valid(h, self._clock()):  # late: this write renews the session too
                self.refresh_session()
            error = self._rewrite(h, leased=self.chain_alive())
            if error is None:
                return True
            if isinstance(error, LeaseLostError):
                log.warning("%s: lost lease %s (another member took it): %s", self._me, key, error)
                self.count("leases_lost")
                h.gone = True
                self.forget(key, h)
                return False
            log.warning("%s: could not confirm %s before processing it again (retried): %s",
                        self._me, key, error)
            return None

    def _rewrite(self, h: Held, *, leased: bool) -> KinesisHashRingError | None:
        """Write a held lease again (fenced; recognising this holder's own writes answered with
        an error), under ``h.lock``. None once written (``h`` is the row as the table has it);
        else the error: a :class:`LeaseLostError`, or a failure whose token joins the
        unconfirmed ones (it may have been applied)."""
        stamp = self.stamp()
        token = uuid.uuid4().hex
        try:
            h.lease = self.table.renew(h.lease, session=self.session, leased=leased, token=token,
                                       prior_token=h.unconfirmed)
        except LeaseLostError as exc:
            return exc
        except KinesisHashRingError as exc:
            h.unconfirmed = (*h.unconfirmed, token)
            self.count("renew_failures")
            return exc
        h.valid_until = stamp + self._timing.validity
        h.epoch = self._chain_of(stamp)
        h.unconfirmed = ()
        self.count("renewals")
        return None

    def release(self, key: str) -> bool:
        """Give up a held lease now; False if it was not held. A release the table does not
        answer is tried again every tick (the row names this member's live session)."""
        held = self.get(key)
        if held is None:
            return False
        with held.lock:
            if held.gone:
                return False
            try:
                self.table.release(held.lease, prior_token=held.unconfirmed)
                self.count("releases")
            except LeaseLostError:
                self.count("leases_lost")
            except KinesisHashRingError:  # given up here; released again every tick until it is
                with self.lock:
                    self._abandoned.append((held.lease, held.unconfirmed))
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
                    self.table.release(h.lease, prior_token=h.unconfirmed)
                    self.count("releases")
                else:
                    if not self.table.offer(target, key):
                        return None
                    written = self.table.handoff(h.lease, target, prior_token=h.unconfirmed)
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
