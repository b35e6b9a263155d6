"""``LeaseCoordinator``: the balanced, fenced lease loop for any set of resources.

Every member runs one coordinator over the same lease table. A *round* is read ->
snapshot -> decisions -> writes; each part is a module of its own:

1. (ticks only, every ``tick_interval``) renew the held leases (:mod:`.holder`: a lost
   lease is told to the listener at once) and heartbeat a driven membership
   (:mod:`.member_list`);
2. read (:mod:`.round_reads`): one consistent scan, or with ``reads="scoped"`` only the rows
   that can change this member's decisions (:mod:`.scoped_reads`); update the expiry timers
   and suspicions (:mod:`.observations`);
3. plan the provider's keys (:mod:`.resource_keys`) over the listed members (:mod:`.planner`);
4. decide over one :class:`~.decisions.Snapshot` (:mod:`.decisions` holds the rules: expiry,
   takeover order, suspects, who may receive a hand-off): adopt what was handed to this
   member, take what is free, expired, offered too long or orphaned (:mod:`.acquisitions`),
   hand off what the plan gives to someone else (:mod:`.handoffs`);
5. send the round's writes at once (:mod:`.write_pool`).

*Light rounds* (steps 2-5, every ``scan_interval`` between ticks), expiry rounds and hand-offs
written between rounds are scheduled by :mod:`.round_loop`. Keys taken in a round are
judged for hand-off on the next one. With a driven DynamoDBMembership the first tick only
heartbeats (``warmup_ticks``), so members started together see each other first.

Threads, and what each touches:

* **The round thread**: "lease-coordinator-<id>" (:meth:`start`), or whoever calls
  :meth:`tick` / :meth:`refresh` (tests, with a :class:`~.clock.FakeClock`), or :meth:`stop`
  for a coordinator never started. Rounds run one at a time under the round lock
  (:mod:`.lifecycle`), and all round state is touched only under it: the observations
  (timers, suspects, the expiry schedule), the keys taken this round, the last full scan,
  the resource-key cache, the planner and :class:`~.scoped_reads.ScopedReads`, the write
  pool. **Every listener callback runs here** (also for leases a checkpoint found lost);
  listener exceptions are logged and counted, and a failing ``on_lease_acquired``
  releases that lease.
* **Writer threads** (``write_threads``): the renewals, takes, adoptions and hand-off
  writes of one round; each touches one held lease, under its own lock, and the counters.
* **Processing threads**: :meth:`checkpoint`, :meth:`release`, :meth:`holds`,
  :meth:`lease`, :meth:`held_keys`, :meth:`status`, :attr:`counters`.
* **The stopping thread**: :meth:`stop` (:mod:`.lifecycle`) sets the lifecycle flags, waits
  for the round thread, then drops what is left under the round lock.

So the holder is the only state shared across threads: its lock guards the held leases,
the counters and the lifecycle flags (``stopping``, the loop's thread and stop deadline).
Other threads read only single values the round replaces whole (``last_plan``, the suspect
ids, tick and read times and the last error (:mod:`.round_record`), which thread runs a round).

``RoundLoop``: when a coordinator's rounds run, on its own thread.

Ticks run on a fixed schedule (every ``tick_interval``) and light rounds every
``scan_interval`` between them (skipped when the tick comes less than half an interval
later); a light round also runs just after a lease held by someone else is due to expire
(each such moment once), and hand-offs whose listener finished are written between rounds
(looked at every 50 ms while any is pending). After a graceful stop the loop plans without
its member at once and goes on until every lease is handed off and adopted (light rounds at
least every 0.25 s read the offers) or the deadline passes. The
schedule is in real time (``time.monotonic``); rounds judge expiry on the coordinator's clock.

``Lifecycle``: a coordinator's round lock, and starting and stopping its loop, each once.

Rounds run one at a time under the *round lock* (:meth:`Lifecycle.exclusive`), on the loop's
thread or on whoever calls ``tick()`` / ``refresh()``; the thread running a round is known,
so a ``stop()`` from a listener callback (which would wait for itself) is refused.

:meth:`Lifecycle.start` starts the :class:`~kinesis.lease_loop.coordinator.RoundLoop` once; a
stopped coordinator cannot be restarted. :meth:`Lifecycle.stop` acts on the first call only
(later or concurrent calls wait for it and return its result): it sets the loop's flags and
the holder's ``stopping`` under the holder's lock and leaves the membership (graceful)
(:meth:`Lifecycle.begin`, which a caller that runs the rounds itself may call first), waits
for the loop (which hands the leases off), then, under the round lock, drops what is left
and stops the writer threads, so no round (not even a manual tick) runs after it.
"""

from __future__ import annotations

import contextlib
import logging
import math
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, replace
from typing import Unpack

from hashring import Assignment, LoadReport, Membership
from hashring.loads import DEFAULT_TOLERANCE
from kinesis.errors import ConfigurationError, DuplicateMemberIdError
from kinesis.lease_loop.decisions import adoptions, recoveries, takes
from kinesis.lease_loop.holder import Held, LeaseHolder, WritePool
from kinesis.lease_loop.lease_listener import (
    COUNTER_NAMES,
    Completion,
    CoordinatorStatus,
    GuardedListener,
    LeaseListener,
    NullListener,
    ResourceProvider,
    RoundRecord,
    completion_done,
)
from kinesis.lease_loop.membership import MemberList
from kinesis.lease_loop.observations import Observations
from kinesis.lease_loop.plan import DOCUMENT, PublishedPlan
from kinesis.lease_loop.round_reads import Planner, RoundReads, RoundView, ScopedReads
from kinesis.lease_loop.settings import CoordinatorSettings, LoadBalancing, ResourceKeys
from kinesis.lease_loop.table.leases import LeaseTable
from kinesis.lease_loop.table.manifests import ManifestStore
from kinesis.lease_loop.table.model import TRIM_HORIZON, Checkpoint, Lease
from kinesis.lease_loop.timing import MONOTONIC, Clock, Durations, LeaseTiming
from kinesis.lease_loop.writes import Acquisitions, Handoffs

__all__ = ["COUNTER_NAMES", "Completion", "CoordinatorStatus", "LeaseCoordinator", "LeaseListener", "NullListener", "ResourceProvider"]


_COMPLETION_POLL = 0.05  # seconds between looks at pending hand-off completions (local state)
_OFFER_POLL = 0.25  # a stopping member reads its offers not adopted yet at least this often


@dataclass(frozen=True)
class Rounds:
    """What the loop runs (the coordinator's methods)."""

    tick: Callable[[], None]
    refresh: Callable[[], None]
    complete_handoffs: Callable[[], None]
    """Write the hand-offs whose listener finished since the last round."""
    next_expiry: Callable[[], float]
    """Seconds until the next round due to an expiry (math.inf: none)."""
    holding: Callable[[], bool]
    """Whether any lease is held (a graceful stop ends once none is)."""
    handoffs_pending: Callable[[], bool]
    """Whether a hand-off waits for its listener (then completions are polled)."""


class RoundLoop:
    """The loop of one coordinator (see the module docs). Its flags are set under the
    holder's lock by the coordinator's ``start`` and ``stop``; the loop only reads them."""

    def __init__(self, rounds: Rounds, timing: LeaseTiming):
        self._rounds = rounds
        self._tick_interval = timing.tick_interval
        self._scan_interval = timing.scan_interval
        self.wake = threading.Event()
        """Interrupts the wait between rounds."""
        self.stopped = threading.Event()
        """Set by a stop: the loop ends (graceful: once nothing is held)."""
        self.graceful = True
        self.deadline = math.inf  # real time (time.monotonic) by which a graceful stop ends
        self.thread: threading.Thread | None = None

    def start(self, name: str) -> None:
        """Run :meth:`serve` on a daemon thread (once)."""
        if self.thread is None:
            self.thread = threading.Thread(target=self.serve, name=name, daemon=True)
            self.thread.start()

    def stop(self, graceful: bool, timeout: float) -> None:
        """End the loop: at once, or (graceful) when nothing is held or ``timeout`` passed."""
        self.graceful = graceful
        self.deadline = time.monotonic() + timeout
        self.stopped.set()

    def finish(self) -> None:
        """After :meth:`stop`: wait for the loop to end; a graceful stop of a loop never
        started runs it on this thread (to hand every lease off)."""
        if self.thread is not None:
            self.thread.join()
        elif self.graceful:
            self.serve()

    def running(self) -> bool:
        return self.thread is not None and self.thread.is_alive()

    def serve(self) -> None:
        """The loop (see the module docs)."""
        rounds = self._rounds
        next_tick = time.monotonic()
        last_round = -math.inf
        expiry_at = math.inf  # a light round when a lease this member saw is due to expire
        stop_seen = False
        while True:
            now = time.monotonic()
            if self.stopped.is_set():
                if not self.graceful:
                    return
                if not stop_seen:  # plan without this member and hand off right away
                    stop_seen = True
                    rounds.refresh()  # also adopts (to hand on) what was handed to this member
                    rounds.complete_handoffs()
                    last_round = now
                if not rounds.holding() or time.monotonic() >= self.deadline:
                    return
            if now >= next_tick:
                rounds.tick()
                last_round = now
                next_tick = max(next_tick + self._tick_interval, time.monotonic())
            elif now >= min(expiry_at, self._next_scan(last_round, next_tick)):
                rounds.refresh()
                last_round = now
            if last_round == now and expiry_at <= now:
                expiry_at = math.inf  # served by this round
            rounds.complete_handoffs()
            now = time.monotonic()
            expiry_at = min(expiry_at, now + rounds.next_expiry())  # each moment scheduled once
            wait = min(next_tick, self._next_scan(last_round, next_tick), expiry_at) - now
            if rounds.handoffs_pending():
                wait = min(wait, _COMPLETION_POLL)
            if self.stopped.is_set():
                wait = min(wait, self.deadline - now)
                if not rounds.holding():
                    continue  # all handed off: end now
            if wait > 0 and self.wake.wait(wait):
                self.wake.clear()

    def _next_scan(self, last_round: float, next_tick: float) -> float:
        """When the next light round is due: ``scan_interval`` after the last round, unless
        the next tick comes less than half an interval later (then the tick does it); while
        a graceful stop waits for its offers to be adopted, at least every 0.25 s."""
        if self.stopped.is_set() and self.graceful:
            return last_round + min(self._scan_interval, _OFFER_POLL)
        due = last_round + self._scan_interval
        return next_tick if next_tick - due < self._scan_interval / 2 else due


log = logging.getLogger(__name__)


class Lifecycle:
    """The round lock and the start / stop of one coordinator (see the module docs)."""

    def __init__(self, holder: LeaseHolder, loop: RoundLoop, pool: WritePool, membership: Membership,
                 member_id: str):
        self._holder = holder
        self._loop = loop
        self._pool = pool
        self._membership = membership
        self._me = member_id
        self.round_lock = threading.Lock()
        """One round at a time; guards all round state."""
        self.stopped = False  # set under the round lock by stop(): no round runs after it
        self.ticking: threading.Thread | None = None
        """The thread running a round now."""
        self._stop_done = threading.Event()  # set when the first stop() call has finished
        self._stop_result = False
        self._begun = False  # the stop flags are set (by begin() or the first stop())
        self._finishing = False  # a stop() call is finishing (later ones wait for it)

    @contextlib.contextmanager
    def exclusive(self) -> Iterator[bool]:
        """Hold the round lock as the tick thread (listener callbacks run here); False: stopped."""
        with self.round_lock:
            if self.stopped:
                yield False
                return
            self.ticking = threading.current_thread()
            try:
                yield True
            finally:
                self.ticking = None

    def start(self) -> None:
        """Start the loop's thread (once); a ConfigurationError after a stop."""
        with self._holder.lock:
            if self.stopped or self._loop.stopped.is_set():
                raise ConfigurationError("a stopped coordinator cannot be restarted: build a new one")
            self._loop.start(f"lease-coordinator-{self._me}")

    def begin(self, graceful: bool, timeout: float) -> bool:
        """Set the stop flags (the rounds plan without this member from now on, if graceful)
        and leave the membership: on the first call only (True), not waiting for anything."""
        with self._holder.lock:
            if self._begun:
                return False
            self._begun = True  # a crash (not graceful) must not plan without this member meanwhile
            self._holder.stopping = graceful
            self._loop.stop(graceful, timeout)
        self._loop.wake.set()
        leave = getattr(self._membership, "leave", None)
        if graceful and callable(leave):
            try:
                leave()
            except Exception:
                log.exception("%s: leaving the membership failed", self._me)
        return True

    def stop(self, graceful: bool, timeout: float) -> bool:
        """Stop (see the module docs); True if no lease is left behind."""
        if self.ticking is threading.current_thread():
            raise RuntimeError(
                "stop() was called from a listener callback (the tick thread): call it from "
                "another thread, e.g. the one handling SIGTERM"
            )
        self.begin(graceful, timeout)
        with self._holder.lock:
            first = not self._finishing
            self._finishing = True
        if not first:  # the first call does the work; later calls get its result
            self._stop_done.wait()
            return self._stop_result
        graceful = self._loop.graceful
        self._loop.finish()
        with self.round_lock, self._holder.lock:  # no round (not even a manual tick) goes on after this
            self.stopped = True
            left = self._holder.drop_all()
            self._pool.shutdown()
        if left:
            (log.warning if graceful else log.info)("%s stopped with leases left to expire: %s", self._me, left)
        elif graceful:  # nothing left to time by it (leases left expire faster with it)
            self._holder.end_session()
        self._stop_result = graceful and not left
        self._stop_done.set()
        return self._stop_result


_EXPIRY_MARGIN = 0.005  # run the expiry round just after the expiry, not just before it


class LeaseCoordinator:
    """The lease loop of one member over one lease table (see the module docs).

    Args:
        table: the lease table (call ``ensure_table()`` first, or build it with ``open``).
        membership: the live member list (:class:`hashring.StaticMembership`,
            ``KubernetesMembership``, :class:`~kinesis.lease_loop.membership.DynamoDBMembership`, ...);
            its ``self_id`` is this member's id.
        resources: ``callable(snapshot) -> keys`` called once per tick with the fresh table
            snapshot (e.g. "shards whose parents are finished"), or a fixed collection of
            keys. Keys must be non-empty strings not starting with ``__``.
        listener: told to start / stop processing leases (default: :class:`NullListener`).
        lease_duration: a lease whose counter has not changed for this long (on this
            process's monotonic clock) is expired. Default 10 s (KCL's failover time).
        durations: ``tick_interval``, ``scan_interval``, ``backup_grace``,
            ``orphan_timeout``, ``handoff_timeout``, ``adopt_timeout``
            (:class:`~kinesis.lease_loop.timing.Durations`; what each means, its default and
            its rules: :mod:`~kinesis.lease_loop.timing`).
        timing: ``lease_duration`` and the durations as one
            :class:`~kinesis.lease_loop.timing.LeaseTiming` (what a WorkerConfig builds); then
            leave them unset.
        max_concurrent_handoffs: graceful hand-offs in progress at once per member
            (rebalancing only; ``stop()`` hands everything off at once).
        replicas: backups named per key, in takeover order.
        weights: optional member weights for proportional shares (missing members: 1.0).
        initial_checkpoint: checkpoint of rows this coordinator creates (default
            :data:`~kinesis.lease_loop.table.model.TRIM_HORIZON`).
        drive_membership: with a :class:`DynamoDBMembership` on the same table, heartbeat it
            on every tick and feed it this tick's scan (no extra reads). Default True.
        warmup_ticks: ticks to wait before taking free leases, so members started together
            see each other first (default 1 with a driven DynamoDBMembership, else 0).
        write_threads: DynamoDB writes of one round sent at once (renewals, takes,
            hand-offs); default 8 (botocore keeps 10 connections per client).
        reads: ``"scan"`` (default): every round scans the table and plans with
            :func:`hashring.plan_assignment` from the current owners. ``"scoped"``: a round
            reads only the rows planned for this member and not held and, every
            ``backup_check_interval``, the session row of each member it watches (its
            ``replicas`` predecessors; all of that member's rows once its session stops
            changing for a tick); see :mod:`~kinesis.lease_loop.round_reads`.
        sweep_interval: scoped reads: a periodic full scan by two members (default: none;
            a member scans once at start). Every key is read by a member that can act on it
            without one (tests/fleetsim); set it for an extra backstop.
        backup_check_interval: scoped reads: how often a member reads the session rows of
            the members it watches (default ``lease_duration / 2``: a crashed member still
            listed is taken over within a lease duration, that interval and a light round
            of its last session renewal; one tick takes over sooner at 1.5x the reads).
        load_balancing: scoped reads: balance leases by what they cost
            (:class:`~kinesis.lease_loop.settings.LoadBalancing`: the loads' source, the
            interval, the tolerance); default: by count.
        clock: the monotonic clock expiry is measured on (inject a FakeClock in tests;
            :meth:`start` still schedules ticks in real time).
    """

    def __init__(
        self,
        table: LeaseTable,
        membership: Membership,
        resources: ResourceProvider | Iterable[str],
        listener: LeaseListener | None = None,
        *,
        lease_duration: float | None = None,
        max_concurrent_handoffs: int = 2,
        replicas: int = 1,
        weights: Mapping[str, float] | None = None,
        initial_checkpoint: Checkpoint | str = TRIM_HORIZON,
        drive_membership: bool = True,
        warmup_ticks: int | None = None,
        write_threads: int = 8,
        timing: LeaseTiming | None = None,
        reads: str = "scan",
        sweep_interval: float | None = None,
        backup_check_interval: float | None = None,
        load_balancing: LoadBalancing | None = None,
        clock: Clock = MONOTONIC,
        **durations: Unpack[Durations],
    ):
        s = CoordinatorSettings.of(
            table, membership, resources, listener, lease_duration=lease_duration, **durations,
            max_concurrent_handoffs=max_concurrent_handoffs, replicas=replicas, weights=weights,
            initial_checkpoint=initial_checkpoint, drive_membership=drive_membership,
            warmup_ticks=warmup_ticks, write_threads=write_threads, timing=timing, reads=reads,
            sweep_interval=sweep_interval, backup_check_interval=backup_check_interval,
            load_balancing=load_balancing,
        )
        self.membership, self.listener, self.clock = membership, s.listener, clock
        self.member_id = me = membership.self_id
        self.timing = t = s.timing
        self.lease_duration, self.tick_interval, self.scan_interval = t.lease_duration, t.tick_interval, t.scan_interval
        self.backup_grace, self.orphan_timeout = t.backup_grace, t.orphan_timeout
        self.handoff_timeout, self.adopt_timeout = t.handoff_timeout, t.adopt_timeout
        self.replicas, self.weights, self.reads = s.replicas, s.weights, s.reads
        self.write_threads, self.max_concurrent_handoffs = s.write_threads, s.max_concurrent_handoffs
        self.initial_checkpoint, self.warmup_ticks = s.initial_checkpoint, s.warmup_ticks
        self.sweep_interval, self.backup_check_interval = s.sweep_interval, s.backup_check_interval
        self._holder = LeaseHolder(table, me, t, clock)  # the state shared across threads
        self._lock = self._holder.lock  # also guards the lifecycle flags
        self._count = self._holder.count
        self._listener = GuardedListener(s.listener, me, self._count)
        self._loop = RoundLoop(Rounds(self.tick, self.refresh, self._complete_ready_handoffs, self._next_expiry,
                                      self._holder.holding, self._holder.has_pending_handoffs), t)
        self._pool = WritePool(s.write_threads, me)
        self._life = Lifecycle(self._holder, self._loop, self._pool, membership, me)  # the round lock
        self._record = RoundRecord(me, self._count, clock)  # read by status() from any thread
        self._obs = Observations(me)  # the rest is touched by the round only
        self._members = MemberList(membership, s.drive, me, self._count, clock, self._obs.membership)
        self._scoped = ScopedReads(me)  # what a scoped round reads (no I/O)
        balancing = self.load_balancing = s.load_balancing
        published = PublishedPlan(ManifestStore(table, DOCUMENT) if s.reads == "scoped" else None, me, self._count,
                                  lambda member, version: self._holder.table.tell_plan_version(member, version),
                                  tolerance=balancing.tolerance if balancing is not None else DEFAULT_TOLERANCE)
        if balancing is not None:  # loads ride on the session row, fresh for each interval's read
            self._holder.load_source, self._holder.load_every = balancing.source, balancing.interval / 2
        planner = Planner(me, s.replicas, s.weights, self._scoped if s.reads == "scoped" else None, published,
                          balancing, lambda members: self._holder.table.read_rows((), members)[1])
        self._reads = RoundReads(me, s, self._holder, self._members, ResourceKeys(s.resources, me, self._count),
                                 self._obs, self._scoped, planner, self._record, clock)
        self._acquisitions = Acquisitions(self._holder, self._listener, self._pool, me, s.initial_checkpoint)
        self._handoffs = Handoffs(self._holder, self._listener, self._pool, me, self._loop.wake,
                                  lambda member: self._obs.absent(member, clock(), t.scan_interval))
        self._fresh: set[str] = set()  # keys acquired during the current round

    # --- public API --------------------------------------------------------------------

    def start(self) -> LeaseCoordinator:
        """Run ticks every ``tick_interval`` and light rounds every ``scan_interval`` (real
        time) on a daemon thread."""
        self._life.start()
        return self

    def tick(self) -> None:
        """One round of the lease loop (see the module docs). Never raises on table errors."""
        self._round(full=True)

    def refresh(self) -> None:
        """One light round: a tick without renewals and heartbeat (scan, adopt, take, hand off)."""
        self._round(full=False)

    def stop(self, graceful: bool = True, timeout: float | None = None) -> bool:
        """Stop the coordinator; return True if no lease is left behind.

        ``graceful=True`` (SIGTERM): leave the membership (if it has ``leave()``), then hand
        every held lease to its planned next owner (the plan without this member; released
        if there is none), each as soon as its listener has finished, waiting up to
        ``timeout`` real seconds (default: ``lease_duration``). Leases whose listener does
        not finish in time are left to expire. ``graceful=False`` (a crash): simply stop
        renewing. Only the first call acts; later (or concurrent) calls wait for it and
        return its result.
        """
        return self._life.stop(graceful, timeout if timeout is not None else self.lease_duration)

    def begin_stop(self, graceful: bool = True, timeout: float | None = None) -> None:
        """Start :meth:`stop` without waiting: from now on the rounds plan without this member
        (graceful) and hand its leases off. For callers that run the rounds themselves
        (:meth:`tick`, :meth:`refresh`: tests, simulators); :meth:`stop` finishes it."""
        self._life.begin(graceful, timeout if timeout is not None else self.lease_duration)

    def checkpoint(self, key: str, checkpoint: Checkpoint | str | object, *, completed: str | None = None) -> Lease:
        """Checkpoint a held lease (from any thread); fenced by owner + counter. ``checkpoint``
        is a :class:`Checkpoint`, its string (a sequence number or sentinel name) or a record
        (its ``position``). ``completed``: the records completed beyond it, encoded
        (:mod:`kinesis.consumer.keyed.progress`), written with it; None removes an earlier set.

        A successful checkpoint also renews the lease. It is attempted even when the last
        renewal is late (``holds()`` is False): the conditional write can only succeed if
        no other member took the lease since, which proves nobody else processed it.
        Raises :class:`LeaseLostError` if this member no longer holds ``key`` (the listener
        also gets ``on_lease_lost`` on the next tick) and :class:`CheckpointRegressionError`
        if ``checkpoint`` is behind the stored one.
        """
        return self._holder.checkpoint(key, Checkpoint.of(checkpoint), completed)

    def prepare_checkpoint(self, key: str, checkpoint: Checkpoint | str | object) -> Lease:
        """Record a pending checkpoint on a held lease (two-phase checkpoints); fenced like
        :meth:`checkpoint`, which it also renews. The next :meth:`checkpoint` clears it."""
        return self._holder.prepare_checkpoint(key, Checkpoint.of(checkpoint))

    def holds(self, key: str) -> bool:
        """True while this member may process ``key`` (held, renewed in time, not handed off)."""
        return self._holder.holds(key)

    def lease(self, key: str) -> Lease | None:
        """The held lease as last written by this member, or None."""
        return self._holder.lease(key)

    def held_keys(self) -> tuple[str, ...]:
        """The keys this member holds, sorted."""
        return self._holder.held_keys()

    def release(self, key: str) -> bool:
        """Give up a held lease now (e.g. after SHARD_END); False if it was not held."""
        return self._holder.release(key)

    def status(self) -> CoordinatorStatus:
        """A consistent snapshot of the coordinator's state."""
        with self._lock:
            return CoordinatorStatus(
                member_id=self.member_id,
                running=self._loop.running(),
                stopping=self._loop.stopped.is_set() or self._holder.refused is not None,
                held=tuple(sorted(self._holder.keys())),
                pending_handoffs=self._holder.pending_handoffs(),
                suspects=self._obs.suspect_ids,
                ticks=self._record.ticks,
                last_tick_at=self._record.last_tick_at,
                counters=self._holder.counters(),
                last_table_read_at=self._record.last_table_read_at,
                last_membership_at=self._members.last_read_at,
                last_error=self._record.last_error,
            )

    @property
    def last_plan(self) -> Assignment | None:
        """The plan computed on the last tick (None if none could be made)."""
        return self._reads.last_plan

    def load_report(self) -> LoadReport | None:
        """How the published plan spreads load (each member's load and fair share, the hot
        keys); None under a count plan (no ``load_balancing``, or a member reports no loads)."""
        return self._reads._planner.published.load_report()

    @property
    def counters(self) -> Mapping[str, int]:
        """The event counters (see :data:`COUNTER_NAMES`)."""
        return self._holder.counters()

    @property
    def table(self) -> LeaseTable:
        """The lease table (assignable: the holder writes through the new one)."""
        return self._holder.table

    @table.setter
    def table(self, table: LeaseTable) -> None:
        self._holder.table = table

    def __repr__(self) -> str:
        return f"LeaseCoordinator({self.member_id!r}, table={self.table.table_name!r})"

    # --- rounds --------------------------------------------------------------------------

    @property
    def refused(self) -> DuplicateMemberIdError | None:
        """Why this coordinator refuses to run (another process uses its member id), or None."""
        return self._holder.refused

    def _round(self, *, full: bool) -> None:
        with self._life.exclusive() as running:
            if not running or self._refusing():
                return
            try:
                self._tick(full=full)
            except Exception as exc:
                self._record.failed(exc)
            finally:
                self._record.finished(full=full)
            self._refusing()

    def _refusing(self) -> bool:
        """Another process took this member id over (its session row names another token):
        stop at once, without a write (the id is the other process's now): drop every lease
        (the listener hears ``lease_lost``) and run no more rounds. Whoever runs the
        coordinator (a Worker) sees :attr:`refused` and stops it."""
        refused = self._holder.refused
        if refused is None:
            return False
        if self._holder.holding():
            self._record.last_error = f"{type(refused).__name__}: {refused}"
            for key, h in self._holder.items():
                self._holder.forget(key, h)
                h.gone = True
                if h.started:
                    self._listener.call("on_lease_lost", h.lease)
        return True

    def _next_expiry(self) -> float:
        """Seconds until the next lease held by someone else expires unless renewed (a
        crashed holder's leases are then taken at that moment, not at the next round)."""
        now = self.clock()
        with self._life.round_lock:
            due = self._obs.next_expiry(self._holder.keys(), self.lease_duration, now)
        return due - now + _EXPIRY_MARGIN

    def _complete_ready_handoffs(self) -> None:
        """Write the hand-offs whose listener finished since the last round (last plan's target)."""
        with self._life.exclusive() as running:
            try:
                if running:
                    self._handoffs.complete(self._holder.ready_handoffs())
            except Exception:  # the loop must survive anything (as a round does)
                self._count("lease_loop_errors")
                log.exception("%s: completing hand-offs failed", self.member_id)

    def _tick(self, *, full: bool = True) -> None:
        self._fresh.clear()
        for lease in self._holder.take_lost():
            self._count("leases_lost")
            self._listener.call("on_lease_lost", lease)
        if full:
            self._holder.renew_all(self._pool, self._lost)
        if full and not self._holder.stopping:
            self._members.heartbeat()
        view = self._reads.read(full=full)
        if view is not None:
            self._decide(view)

    def _decide(self, view: RoundView) -> None:
        """Adopt, take and hand off as the decisions over the round's view say."""
        snap = replace(view.snap, held=self._holder.keys(), stopping=self._holder.stopping)
        self._acquisitions.run(adoptions(snap), self._fresh, self._obs.seen, view.last_full)
        if view.ready and snap.plan is not None and self._record.ticks >= self.warmup_ticks:
            taking = takes(replace(snap, held=self._holder.keys()), view.to_take)
            self._obs.start_timers(taking.timers)
            self._acquisitions.run(taking.takes, self._fresh, self._obs.seen, view.last_full)
        elif snap.stopping:
            self._acquisitions.run(recoveries(snap), self._fresh, self._obs.seen, view.last_full)
        held = self._holder.keys()
        for key in set(self._holder.offered()) & held:  # taken back
            self._holder.offer_resolved(key)
        self._holder.retell(snap.now, snap.timing.adopt_timeout)
        # looked at: adopted, or not offered to this member (any more); offers of keys it holds
        # already (not read again) too, or they would stay on its session row for good
        looked_at = {k for k in view.inbox if k in held or not self._offered_to_me(snap.rows.get(k))}
        self._holder.handled(looked_at | (self._holder.inbox() & held))
        self._handoffs.run(snap, self._fresh)

    def _offered_to_me(self, lease: Lease | None) -> bool:
        return lease is not None and lease.owner == self.member_id and lease.handed_off_by is not None

    def _lost(self, key: str, h: Held) -> None:
        """Forget a lease found lost; tell the listener unless it already stopped (hand-off done)."""
        self._holder.forget(key, h)
        self._count("leases_lost")
        if h.started and (h.handoff is None or not completion_done(h.handoff.completion)):
            self._listener.call("on_lease_lost", h.lease)
