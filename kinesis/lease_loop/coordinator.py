"""``LeaseCoordinator``: the balanced, fenced lease loop for any set of resources.

Every member runs one coordinator over the same lease table. On each tick (every
``tick_interval``, by default ``lease_duration / 3``) it:

1. renews the leases it holds (one conditional write each; a failed condition means
   the lease was lost and the listener hears it at once);
2. heartbeats its :class:`~kinesis.lease_loop.membership.DynamoDBMembership` if it drives one;
3. scans the lease table (one consistent, paginated scan; the heartbeat rows come along);
4. asks the resource provider which keys may be planned now, refreshes the member list
   (cached by the membership) and computes :func:`hashring.plan_assignment` with the
   current holders as input and ``replicas`` backups per key;
5. takes the leases planned for it that are free, missing (it creates the row), handed
   to it (it *adopts* them at once) or expired; hands off (gracefully) the leases it holds
   that the plan gives to someone else, at most ``max_concurrent_handoffs`` at a time;
   takes over expired leases as a backup by rank, and orphaned ones as anyone.

Expiry is judged on this process's monotonic clock: a lease is expired when its counter
has not changed for ``lease_duration`` since this coordinator first saw that value. A
holder considers its own lease valid only until ``lease_duration - tick_interval`` after
it *sent* its last successful write, so it stops before anyone else can think the lease
expired: the two never process the same key at once (and every checkpoint is fenced by
owner + counter anyway).

Takeover order for an expired lease: the plan's owners without the dead holder, in
order; the i-th of them may take it once it has been expired for ``i * backup_grace``.
(If the plan's primary is the dead holder, its first backup acts at once; if the primary
is someone else, the primary acts at once and the first backup one grace later.) A free
lease counts as expired from the moment it is first seen free. Any member may take a
lease (or create a missing row) unchanged for ``orphan_timeout``: disagreeing views can
stall a key for a bounded time only.

A member whose leases all look expired is *suspected* and left out of the plan (so its
keys are not planned back to it), until a lease row shows it writing again. After
``orphan_timeout`` (doubling each time, up to 16x) it is on probation: planned again, but
handed at most one lease per member at a time until it adopts one (a change of the
membership version also ends suspicions this way). Nobody hands a lease
to a member that currently lets one of its leases expire. This covers a crashed member
that a static or slow membership still lists: its leases are taken over after one lease
duration straight into a balanced plan, and it costs only rare probes afterwards.

Between ticks, a *light round* runs every ``scan_interval`` (default ``tick_interval / 3``):
steps 3-5 without renewals or heartbeat, one scan request each. It makes a member see a
newcomer, a lease handed to it, or a lease that just expired within ``scan_interval``
instead of a whole tick. A hand-off whose listener finishes between rounds is written at
once (with the target of the last plan), not on the next round. Renewals, takes, adoptions
and hand-off writes of one round are sent concurrently (``write_threads``), so a round
costs about one DynamoDB round trip however many leases move.

Keys taken during a tick are judged for hand-off on the next tick (with a fresh plan).
With a driven DynamoDBMembership the first tick only heartbeats (``warmup_ticks``), so
members started together see each other before they take anything.

Graceful hand-off: the coordinator calls ``listener.on_handoff_requested(lease)``, which
returns a completion (a :class:`threading.Event`, a :class:`concurrent.futures.Future`,
or ``None`` for "already done"). Until the completion is done the lease keeps being
renewed (also past ``handoff_timeout``, which only logs); then one conditional write
passes the lease, with its checkpoint, to the planned owner, who adopts it on its next
round: no expiry wait, no duplicates. If by then the plan gives the key back to this
member, the listener is told ``on_lease_acquired`` again instead. Held keys the provider
no longer lists (e.g. finished shards) are released the same way (no new owner).

Threads: :meth:`start` runs ticks and light rounds on a daemon thread
("lease-coordinator-<id>"); tests call :meth:`tick` and :meth:`refresh` directly with a
:class:`~kinesis.lease_loop.clock.FakeClock`. :meth:`stop` (graceful) lets that thread hand every
lease off, writing each hand-off as soon as its listener is done. **Every listener
callback runs on the tick thread** (also for leases found lost by :meth:`checkpoint`,
which is called from processing threads). Listener exceptions are logged and counted;
a failing ``on_lease_acquired`` releases that lease.
"""

from __future__ import annotations

import concurrent.futures
import functools
import logging
import math
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from hashring import Assignment, Membership, plan_assignment, stable_assignment
from kinesis.errors import (
    ConfigurationError,
    KinesisHashRingError,
    LeaseLostError,
)
from kinesis.lease_loop.clock import MONOTONIC, Clock
from kinesis.lease_loop.coordinator_settings import CoordinatorSettings
from kinesis.lease_loop.holder import Handoff, Held, LeaseHolder
from kinesis.lease_loop.lease_listener import (
    COUNTER_NAMES,
    Completion,
    CoordinatorStatus,
    GuardedListener,
    LeaseListener,
    NullListener,
    ResourceProvider,
)
from kinesis.lease_loop.lease_listener import completion_done as _done
from kinesis.lease_loop.lease_model import (
    TRIM_HORIZON,
    Checkpoint,
    Lease,
    TableSnapshot,
)
from kinesis.lease_loop.lease_timing import LeaseTiming
from kinesis.lease_loop.leases import LeaseTable
from kinesis.lease_loop.member_list import MemberList
from kinesis.lease_loop.resource_keys import ResourceKeys
from kinesis.lease_loop.round_loop import RoundLoop, Rounds
from kinesis.lease_loop.scoped_reads import ScopedReads
from kinesis.lease_loop.write_pool import WritePool, raise_first

log = logging.getLogger(__name__)

__all__ = [
    "COUNTER_NAMES",
    "Completion",
    "CoordinatorStatus",
    "LeaseCoordinator",
    "LeaseListener",
    "NullListener",
    "ResourceProvider",
]

@dataclass
class _Seen:
    counter: int | None  # None: no row yet
    owner: str | None
    since: float


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
        tick_interval: time between ticks (default ``lease_duration / 3``; at most half).
        scan_interval: time between light rounds (scan, adopt, take, hand off; no renewals)
            between ticks (default ``tick_interval / 3``; ``tick_interval`` turns them off).
            Each costs one scan request.
        max_concurrent_handoffs: graceful hand-offs in progress at once per member
            (rebalancing only; ``stop()`` hands everything off at once).
        replicas: backups named per key, in takeover order.
        backup_grace: how much longer each further backup waits (default ``lease_duration``).
        orphan_timeout: after this long without a change, any member may take a lease or
            create a missing row (default ``lease_duration + (replicas + 1) * backup_grace``).
        handoff_timeout: log (and count) a listener that takes longer than this to finish
            a hand-off; the lease is still renewed meanwhile (default ``lease_duration``).
        weights: optional member weights for proportional shares (missing members: 1.0).
        initial_checkpoint: checkpoint of rows this coordinator creates (default
            :data:`~kinesis.lease_loop.lease_model.TRIM_HORIZON`).
        drive_membership: with a :class:`DynamoDBMembership` on the same table, heartbeat it
            on every tick and feed it this tick's scan (no extra reads). Default True.
        warmup_ticks: ticks to wait before taking free leases, so members started together
            see each other first (default 1 with a driven DynamoDBMembership, else 0).
        write_threads: DynamoDB writes of one round sent at once (renewals, takes,
            hand-offs); default 8 (botocore keeps 10 connections per client).
        adopt_timeout: a lease handed to a member that has not adopted it after this long
            (on the observer's clock) is taken back by the plan's next owner, and that member
            is suspected (default ``tick_interval``; a live member adopts within a light
            round). Safe at any time: a handed-off lease is processed only after the
            target's adopt write, and the take is conditional on the counter it saw.
        timing: all the durations above as one :class:`~kinesis.lease_loop.lease_timing.LeaseTiming`
            (what a WorkerConfig builds); then leave the individual durations unset.
        reads: ``"scan"`` (default): every round scans the table and plans with
            :func:`hashring.plan_assignment` from the current owners. ``"scoped"``: no scan
            in steady state; the plan is :func:`hashring.stable_assignment` of (members,
            keys) alone, with each member's keys backed up by its successors in the sorted
            member list (:func:`hashring.watched_by_successors`); a round reads
            (BatchGetItem, eventually consistent) only the rows planned for this member and
            not held and, every ``backup_check_interval``, one sample row of each member it
            watches (its ``replicas`` predecessors; all of that member's rows once the sample
            stops changing for a tick); a full scan (eventually consistent) runs at start,
            and every ``sweep_interval`` on the two owners of a reserved chore key
            (rendezvous over the members; they also take orphans). Suspects stay in the
            plan (every member makes the same plan) but get no hand-offs; a dead member's
            keys stay with its watcher until the member list drops it. Needs a membership
            not fed by the scan (Kubernetes, static); the resource provider sees the last
            full scan.
        sweep_interval: scoped reads: the slow safety sweep (default ``30 * lease_duration``).
        backup_check_interval: scoped reads: how often a member samples the members it
            watches (default ``lease_duration / 2``: a crashed member still listed is taken
            over within a lease duration and three ticks of its last renewal; one tick
            takes over a tick sooner at 1.5x the reads).
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
        tick_interval: float | None = None,
        scan_interval: float | None = None,
        max_concurrent_handoffs: int = 2,
        replicas: int = 1,
        backup_grace: float | None = None,
        orphan_timeout: float | None = None,
        handoff_timeout: float | None = None,
        weights: Mapping[str, float] | None = None,
        initial_checkpoint: Checkpoint | str = TRIM_HORIZON,
        drive_membership: bool = True,
        warmup_ticks: int | None = None,
        write_threads: int = 8,
        adopt_timeout: float | None = None,
        timing: LeaseTiming | None = None,
        reads: str = "scan",
        sweep_interval: float | None = None,
        backup_check_interval: float | None = None,
        clock: Clock = MONOTONIC,
    ):
        s = CoordinatorSettings.of(
            table, membership, resources, listener, lease_duration=lease_duration,
            tick_interval=tick_interval, scan_interval=scan_interval, backup_grace=backup_grace,
            orphan_timeout=orphan_timeout, handoff_timeout=handoff_timeout, adopt_timeout=adopt_timeout,
            max_concurrent_handoffs=max_concurrent_handoffs, replicas=replicas, weights=weights,
            initial_checkpoint=initial_checkpoint, drive_membership=drive_membership,
            warmup_ticks=warmup_ticks, write_threads=write_threads, timing=timing, reads=reads,
            sweep_interval=sweep_interval, backup_check_interval=backup_check_interval,
        )
        self.membership, self.listener, self.clock = membership, s.listener, clock
        self.member_id = membership.self_id
        self.timing = t = s.timing
        self.lease_duration, self.tick_interval, self.scan_interval = t.lease_duration, t.tick_interval, t.scan_interval
        self.backup_grace, self.orphan_timeout = t.backup_grace, t.orphan_timeout
        self.handoff_timeout, self.adopt_timeout = t.handoff_timeout, t.adopt_timeout
        self.replicas, self.weights, self.reads = s.replicas, s.weights, s.reads
        self.write_threads, self.max_concurrent_handoffs = s.write_threads, s.max_concurrent_handoffs
        self.initial_checkpoint, self.warmup_ticks = s.initial_checkpoint, s.warmup_ticks
        self.sweep_interval, self.backup_check_interval = s.sweep_interval, s.backup_check_interval
        self._holder = LeaseHolder(table, self.member_id, t, clock)  # the state shared across threads
        self._lock = self._holder.lock  # also guards the lifecycle flags and the dicts below
        self._count = self._holder.count
        self._members = MemberList(membership, s.drive, self.member_id, self._count, clock,
                                   self._new_membership_version)
        self._keys = ResourceKeys(s.resources, self.member_id, self._count)
        self._tick_lock = threading.Lock()  # one tick at a time
        self._seen: dict[str, _Seen] = {}
        self._suspects: dict[str, float] = {}  # member -> last evidence of death
        self._suspicions: dict[str, int] = {}  # member -> times suspected in a row
        self._probation: set[str] = set()  # ex-suspects: one hand-off at a time until alive
        self._membership_version: object = None
        self._fresh: set[str] = set()  # keys acquired during the current tick
        self._ticks = 0
        self._last_tick_at: float | None = None
        self._last_table_read_at: float | None = None
        self._last_error: str | None = None
        self._stopped = False
        self._loop = RoundLoop(Rounds(self.tick, self.refresh, self._complete_ready_handoffs, self._next_expiry,
                                      self._holder.holding, self._holder.has_pending_handoffs), self.timing)
        self._pool = WritePool(self.write_threads, self.member_id)  # the round's writes, at once
        self._listener = GuardedListener(self.listener, self.member_id, self._count)
        self._expiry_served = -math.inf  # the last expiry moment a round was scheduled for
        self._stop_done = threading.Event()  # set when the first stop() call has finished
        self._stop_result = False
        self._ticking: threading.Thread | None = None
        self._last_full: TableSnapshot | None = None  # the last full scan (scoped reads)
        self._scoped = ScopedReads(membership.self_id)  # what a scoped round reads (no I/O)
        self._last_sweep_at = -math.inf
        self._next_backup_check = -math.inf
        self._plan_changed_at = -math.inf
        self.last_plan: Assignment | None = None
        """The plan computed on the last tick (None if none could be made)."""

    # --- public API --------------------------------------------------------------------

    def start(self) -> LeaseCoordinator:
        """Run ticks every ``tick_interval`` and light rounds every ``scan_interval`` (real
        time) on a daemon thread."""
        with self._lock:
            if self._stopped or self._loop.stopped.is_set():
                raise ConfigurationError("a stopped coordinator cannot be restarted: build a new one")
            self._loop.start(f"lease-coordinator-{self.member_id}")
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
        if self._ticking is threading.current_thread():
            raise RuntimeError(
                "stop() was called from a listener callback (the tick thread): call it from "
                "another thread, e.g. the one handling SIGTERM"
            )
        with self._lock:
            first = not self._loop.stopped.is_set()
            if first:  # a crash (not graceful) must not plan without this member meanwhile
                self._holder.stopping = graceful
                self._loop.stop(graceful, timeout if timeout is not None else self.lease_duration)
        if not first:  # the first call does the work; later calls get its result
            self._stop_done.wait()
            return self._stop_result
        self._loop.wake.set()
        leave = getattr(self.membership, "leave", None)
        if graceful and callable(leave):
            try:
                leave()
            except Exception:
                log.exception("%s: leaving the membership failed", self.member_id)
        self._loop.finish()
        with self._tick_lock, self._lock:  # no round (not even a manual tick) goes on after this
            self._stopped = True
            left = self._holder.drop_all()
            self._pool.shutdown()
        if left:
            (log.warning if graceful else log.info)(
                "%s stopped with leases left to expire: %s", self.member_id, left
            )
        self._stop_result = graceful and not left
        self._stop_done.set()
        return self._stop_result

    def checkpoint(self, key: str, checkpoint: Checkpoint | str | object) -> Lease:
        """Checkpoint a held lease (from any thread); fenced by owner + counter.

        A successful checkpoint also renews the lease. It is attempted even when the last
        renewal is late (``holds()`` is False): the conditional write can only succeed if
        no other member took the lease since, which proves nobody else processed it.
        Raises :class:`LeaseLostError` if this member no longer holds ``key`` (the listener
        also gets ``on_lease_lost`` on the next tick) and :class:`CheckpointRegressionError`
        if ``checkpoint`` is behind the stored one.
        """
        return self._holder.checkpoint(key, Checkpoint.of(checkpoint))

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
                stopping=self._loop.stopped.is_set(),
                held=tuple(sorted(self._holder.keys())),
                pending_handoffs=self._holder.pending_handoffs(),
                suspects=tuple(sorted(self._suspects)),
                ticks=self._ticks,
                last_tick_at=self._last_tick_at,
                counters=self._holder.counters(),
                last_table_read_at=self._last_table_read_at,
                last_membership_at=self._members.last_read_at,
                last_error=self._last_error,
            )

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

    # --- the tick ------------------------------------------------------------------------

    def _round(self, *, full: bool) -> None:
        with self._tick_lock:
            if self._stopped:
                return
            self._ticking = threading.current_thread()
            try:
                self._tick(full=full)
            except KinesisHashRingError as exc:
                self._count("lease_loop_errors")
                self._last_error = f"{type(exc).__name__}: {exc}"
                log.warning("%s: lease loop round failed: %s", self.member_id, exc)
            except Exception as exc:
                self._count("lease_loop_errors")
                self._last_error = f"{type(exc).__name__}: {exc}"
                log.exception("%s: lease loop round failed", self.member_id)
            finally:
                self._ticking = None
                if full:
                    self._ticks += 1
                    self._count("ticks")
                    self._last_tick_at = self.clock()
                else:
                    self._count("refreshes")

    def _next_expiry(self) -> float:
        """Seconds until the next lease held by someone else expires unless renewed (a
        crashed holder's leases are then taken at that moment, not at the next round)."""
        now = self.clock()
        held = self._holder.keys()
        with self._lock:
            due = [
                seen.since + self.lease_duration
                for key, seen in self._seen.items()
                if seen.owner not in (None, self.member_id) and key not in held
            ]
            future = [t for t in due if t > max(now, self._expiry_served)]
            if not future:
                return math.inf
            self._expiry_served = min(future)  # scheduled now: never again
        return self._expiry_served - now + _EXPIRY_MARGIN

    def _complete_ready_handoffs(self) -> None:
        """Write the hand-offs whose listener finished since the last round (last plan's target)."""
        with self._tick_lock:
            if self._stopped:
                return
            self._ticking = threading.current_thread()
            try:
                self._complete_handoffs(self._holder.ready_handoffs())
            except Exception:  # the loop must survive anything (as a round does)
                self._count("lease_loop_errors")
                log.exception("%s: completing hand-offs failed", self.member_id)
            finally:
                self._ticking = None

    def _tick(self, *, full: bool = True) -> None:
        self._fresh.clear()
        for lease in self._holder.take_lost():
            self._count("leases_lost")
            self._listener.call("on_lease_lost", lease)
        if full:
            self._holder.renew_all(self._pool, self._lost)
        if full and not self._holder.stopping:
            self._members.heartbeat()
        if self.reads == "scoped" and not self._sweep_due():
            self._scoped_round(full=full)
            return
        # scoped reads sweep eventually consistent (every write is conditional on what it read)
        snapshot = self.table.scan(consistent=self.reads == "scan")
        self._last_full = snapshot
        self._last_sweep_at = self.clock()
        self._last_table_read_at = self.clock()
        self._last_error = None
        self._members.observe(snapshot)
        now = self.clock()
        active = self._observe(snapshot, now)
        listed = self._read_members()
        if listed is None:
            return
        keys = self._keys(snapshot)
        with self._lock:  # forget missing-row timers of keys no longer planned
            planned = set(keys)
            for key in [k for k, s in self._seen.items() if s.counter is None and k not in planned]:
                del self._seen[key]
        self._update_suspects(snapshot, active, now)
        ready = self.member_id in listed and not self._holder.stopping
        plan = self._plan(self._plan_members(listed, ready), keys, snapshot)
        self.last_plan = plan
        self._adopt(snapshot)
        if ready and plan is not None and self._ticks >= self.warmup_ticks:
            self._take(plan, keys, snapshot, now)
        self._handoffs(plan, keys, snapshot, now)

    def _read_members(self) -> list[str] | None:
        """The member list; None if unreadable (this round then only renews)."""
        listed = self._members.read()
        if listed is None:
            self._last_error = self._members.error
        return listed

    def _new_membership_version(self, version: object) -> None:
        """A new membership version gives suspects another chance (on probation)."""
        if version != self._membership_version:
            self._membership_version = version
            with self._lock:
                self._probation.update(self._suspects)
                self._suspects.clear()

    def _plan_members(self, listed: list[str], ready: bool) -> list[str]:
        """The members to plan for: the listed ones minus suspects (scoped reads keep them: every
        member must make the same plan, and only a dead member's watcher suspects it; suspects
        then get no hand-offs); this member only when ready."""
        scoped = self.reads == "scoped"
        members = [m for m in listed if (scoped or m not in self._suspects) and (m != self.member_id or ready)]
        if ready and self.member_id not in members:
            members.append(self.member_id)
        return members

    def _sweep_due(self) -> bool:
        """Scoped reads: sweep (scan) at start, then every ``sweep_interval`` only if this
        member is one of the two owners of the reserved chore key (rendezvous over the
        members), so the fleet sweeps twice per interval, not once per member."""
        now = self.clock()
        if self._last_full is None:
            return True
        if now - self._last_sweep_at < self.sweep_interval:
            return False
        members = self._members.peek()
        if members is None:
            return False
        if self._scoped.is_sweeper(members):
            return True
        self._last_sweep_at = now  # not a sweeper now: look again in one interval
        return False

    def _scoped_round(self, *, full: bool) -> None:
        """A round without a scan: plan from (members, keys) alone, then read only the rows
        that can change a decision of this member (planned for it but not held; its backup
        keys every ``backup_check_interval``), eventually consistent (every write is
        conditional on what it read, so a stale row costs time, never safety)."""
        assert self._last_full is not None
        listed = self._read_members()
        if listed is None:
            return
        keys = self._keys(self._last_full)
        ready = self.member_id in listed and not self._holder.stopping
        plan = self._plan(self._plan_members(listed, ready), keys, self._last_full)
        now = self.clock()
        if self._scoped.inputs_changed():
            self._plan_changed_at = now
            if plan is not None:
                self._scoped.plan_changed(self.last_plan, plan)
        self.last_plan = plan
        held = self._holder.keys()
        wanted: set[str] = set()
        samples: dict[str, str] = {}  # holder -> the one backup row read to see it is alive
        if plan is not None:
            check_backups = now >= self._next_backup_check
            if check_backups:  # every tick while a new plan settles (hand-offs in flight)
                settling = now - self._plan_changed_at < 2 * self.lease_duration
                self._next_backup_check = now + (
                    min(self.tick_interval, self.backup_check_interval) if settling else self.backup_check_interval
                )
            wanted, samples = self._scoped.to_read(plan, held, check_backups=check_backups)
        if not wanted and full and keys and not held:
            wanted = {keys[0]}  # one cheap read per tick: proof the table is reachable
        rows = self.table.get_many(wanted) if wanted else {}
        if rows or held:
            self._last_table_read_at = self.clock()
            self._last_error = None
        with self._lock:
            seen = {k: (self._seen[k].counter, self._seen[k].owner, self._seen[k].since)
                    for k in samples.values() if k in self._seen}
        self._scoped.judge(samples, rows, seen, now, self.tick_interval)
        fresh = TableSnapshot({k: v for k, v in rows.items() if v is not None}, {}, {}, now)
        active = self._observe(fresh, now, partial=True)
        self._scoped.alive(active)
        self._update_suspects(fresh, active, now)
        self._adopt(fresh)
        if ready and plan is not None and self._ticks >= self.warmup_ticks:
            self._take(plan, sorted(wanted), fresh, now)
        self._handoffs(plan, keys, fresh, now)

    def _adopt(self, snapshot: TableSnapshot) -> None:
        """Adopt every lease handed off to this member (also when not planned or stopping:
        an adopted lease is handed on or released right away, instead of stalling a key
        for a lease duration)."""
        writes = []
        for key, lease in sorted(snapshot.leases.items()):
            if lease.owner != self.member_id or lease.handed_off_by is None:
                continue
            if self._holder.get(key) is not None:
                continue
            writes.append((key, "adopted", functools.partial(self.table.adopt, lease)))
        self._acquire_all(writes)

    def _lost(self, key: str, h: Held) -> None:
        """Forget a lease found lost; tell the listener unless it already stopped (hand-off done)."""
        self._holder.forget(key, h)
        self._count("leases_lost")
        if h.started and (h.handoff is None or not _done(h.handoff.completion)):
            self._listener.call("on_lease_lost", h.lease)

    def _observe(self, snapshot: TableSnapshot, now: float, *, partial: bool = False) -> set[str]:
        """Track when each row's counter last changed; return members seen writing.

        ``partial``: the snapshot holds only some rows (scoped reads); timers of rows it
        does not hold are kept (an unchanged (owner, counter) pair seen again later means
        no write happened in between: counters only grow)."""
        active: set[str] = set()
        with self._lock:
            for key, lease in snapshot.leases.items():
                seen = self._seen.get(key)
                if seen is None or seen.counter != lease.counter or seen.owner != lease.owner:
                    self._seen[key] = _Seen(lease.counter, lease.owner, now)
                    if seen is not None and lease.owner is not None and lease.handed_off_by is None:
                        active.add(lease.owner)
            if not partial:
                for key in [k for k, s in self._seen.items() if k not in snapshot.leases and s.counter is not None]:
                    del self._seen[key]
        return active

    def _update_suspects(self, snapshot: TableSnapshot, active: set[str], now: float) -> None:
        """Suspect members whose leases all expired; give them another chance later.

        A suspect is left out of the plan until a lease row shows it writing, or until
        ``orphan_timeout * 2**(n-1)`` (n: how often it was suspected in a row, at most 16x)
        has passed or the membership version changed; then it is on *probation*: it is
        planned again, but each member hands it at most one lease at a time until it adopts
        one (proof of life). A dead member
        that a static membership keeps listing so costs one lease per donor for one lease
        duration, at exponentially growing intervals.
        """
        holders: dict[str, list[str]] = {}
        for key, lease in snapshot.leases.items():
            if lease.owner is not None and lease.owner != self.member_id:
                holders.setdefault(lease.owner, []).append(key)
        with self._lock:
            for member in active:
                if member in self._suspects or member in self._probation:
                    log.info("%s: %s is alive again", self.member_id, member)
                self._suspects.pop(member, None)
                self._probation.discard(member)
                self._suspicions.pop(member, None)
            for member, keys in holders.items():
                if member in active:
                    continue
                unadopted = any(
                    snapshot.leases[k].handed_off_by is not None and now - self._seen[k].since >= self.adopt_timeout
                    for k in keys
                )
                if unadopted or all(now - self._seen[k].since >= self.lease_duration for k in keys):
                    if member not in self._suspects:
                        self._suspicions[member] = self._suspicions.get(member, 0) + 1
                        self._probation.discard(member)
                        log.info("%s: suspecting %s (all its leases expired)", self.member_id, member)
                    self._suspects[member] = now
            for member, since in list(self._suspects.items()):
                backoff = 2 ** min(self._suspicions.get(member, 1) - 1, 4)
                if now - since >= self.orphan_timeout * backoff:
                    del self._suspects[member]
                    self._probation.add(member)

    def _plan(self, members: list[str], keys: list[str], snapshot: TableSnapshot) -> Assignment | None:
        if not members:
            return None
        current = {k: snapshot.leases[k].owner for k in keys if k in snapshot.leases}
        weights = None
        if self.weights is not None:
            weights = {m: self.weights.get(m, 1.0) for m in members}
        replicas = min(self.replicas, len(members) - 1)
        if self.reads == "scoped":  # a function of (members, keys) alone: no full read needed
            base = stable_assignment(self._scoped.members_tuple(members), self._scoped.keys_tuple(keys),
                                     weights=weights)
            return self._scoped.watched(base, replicas)
        return plan_assignment(members, keys, current_owners=current, weights=weights, replicas=replicas)

    def _take(self, plan: Assignment, keys: list[str], snapshot: TableSnapshot, now: float) -> None:
        me = self.member_id
        writes: list[tuple[str, str, Callable[[], Lease | None]]] = []
        for key in keys:
            with self._lock:
                if self._holder.get(key) is not None:
                    continue
                seen = self._seen.get(key)
                if seen is None or (key not in snapshot.leases and seen.counter is not None):
                    seen = self._seen[key] = _Seen(None, None, now)
            lease = snapshot.leases.get(key)
            owners = plan.owners[key]
            unchanged = now - seen.since
            if lease is not None and lease.owner == me:
                if lease.handed_off_by is None and unchanged >= self.lease_duration:
                    # left behind by an earlier run of this member id: take it once expired
                    writes.append((key, "takeovers", functools.partial(self.table.take, lease, me)))
                continue
            free = lease is None or lease.owner is None
            offer = lease is not None and lease.owner is not None and lease.handed_off_by is not None
            expired_for = unchanged if free else unchanged - (self.adopt_timeout if offer else self.lease_duration)
            if expired_for < 0:
                continue
            holder = None if lease is None else lease.owner
            candidates = [o for o in owners if o != holder]
            if me in candidates:
                if expired_for < candidates.index(me) * self.backup_grace:
                    continue
                kind = "offers_withdrawn" if offer else "acquired" if free else "takeovers"
            elif unchanged >= self.orphan_timeout:
                kind = "orphans_taken"
            else:
                continue
            if lease is None:
                writes.append((
                    key,
                    "created" if kind == "acquired" else kind,
                    functools.partial(
                        self.table.create_lease_if_absent,
                        key,
                        checkpoint=self.initial_checkpoint,
                        owner=me,
                    ),
                ))
            else:
                writes.append((key, kind, functools.partial(self.table.take, lease, me)))
        self._acquire_all(writes)

    def _acquire_all(self, writes: Sequence[tuple[str, str, Callable[[], Lease | None]]]) -> None:
        """Send the take/create/adopt writes at once; then start the listener on each, in order."""
        results = self._pool.run([functools.partial(self._timed, write) for _, _, write in writes])
        for (key, kind, _), result in zip(writes, results, strict=True):
            if isinstance(result, LeaseLostError):
                result = (None, 0.0)
            if isinstance(result, BaseException):  # the successful writes are still registered
                self._count("lease_loop_errors")
                log.warning("%s: could not take %s: %s", self.member_id, key, result,
                            exc_info=not isinstance(result, KinesisHashRingError))
                continue
            lease, sent = result
            if lease is None:
                self._count("take_conflicts")
                continue
            self._register(key, kind, lease, sent)

    def _timed(self, write: Callable[[], Lease | None]) -> tuple[Lease | None, float]:
        sent = self.clock()
        return write(), sent

    def _register(self, key: str, kind: str, lease: Lease, sent: float) -> None:
        h = self._holder.add(key, lease, sent)
        if h.started:
            self._fresh.add(key)
        self._count(kind)
        log.info("%s: %s (counter %d)", self.member_id, self._acquired_how(key, kind), lease.counter)
        if h.started and not self._listener.call("on_lease_acquired", lease):
            self._holder.drop(key, h)

    def _acquired_how(self, key: str, kind: str) -> str:
        """How ``key`` was acquired and from whom, for the log (the row as last read)."""
        with self._lock:
            seen = self._seen.get(key)
        before = seen.owner if seen is not None else None
        if kind == "adopted":
            row = self._last_full.leases.get(key) if self._last_full is not None else None
            sender = row.handed_off_by if row is not None and row.owner == self.member_id else None
            return f"adopted lease {key} handed off by {sender or 'another member'}"
        if kind == "takeovers":
            return f"took over lease {key} from {before}, not renewed for a lease duration"
        if kind == "orphans_taken":
            return f"took orphaned lease {key} from {before or 'nobody'}"
        if kind == "offers_withdrawn":
            return f"took back lease {key} offered to {before}, not adopted within adopt_timeout"
        return f"acquired {'new' if kind == 'created' else 'free'} lease {key}"

    def _handoffs(
        self, plan: Assignment | None, keys: list[str], snapshot: TableSnapshot, now: float
    ) -> None:
        plannable = self._scoped.index(plan).planned if self.reads == "scoped" and plan is not None else set(keys)
        owners = {lease.owner for lease in snapshot.leases.values()}
        # never hand a lease to a member that lets one of its leases expire
        unhealthy = {
            lease.owner
            for key, lease in snapshot.leases.items()
            if lease.owner is not None
            and now - self._seen[key].since
            >= (self.adopt_timeout if lease.handed_off_by is not None else self.lease_duration)
        }
        held = self._holder.items()
        in_flight = sum(1 for _, h in held if h.handoff is not None and h.handoff.counted)
        ready: list[tuple[str, Held, str | None]] = []
        probing = {h.handoff.target for _, h in held if h.handoff is not None}
        for key, h in held:
            if h.gone or key in self._fresh:
                continue  # taken this tick under an older plan: judged on the next tick
            target: str | None
            if key not in plannable:
                target = None  # release
            elif plan is None:
                target = self.member_id if not self._holder.stopping else None
            else:
                target = plan.owner(key)
            if h.handoff is None:
                if target == self.member_id:
                    continue
                if target is not None and not self._holder.stopping:
                    if in_flight >= self.max_concurrent_handoffs:
                        continue
                    if target in unhealthy or target in self._suspects:
                        continue
                    if target in self._probation and (target in probing or target in owners):
                        continue  # one probe at a time until it shows it is alive
                    in_flight += 1
                    probing.add(target)
                    counted = True
                else:
                    counted = False
                completion = self._listener.request_handoff(h.lease) if h.started else None
                self._holder.begin_handoff(h, Handoff(completion, now, target, counted=counted))
                if isinstance(completion, concurrent.futures.Future):
                    completion.add_done_callback(lambda _: self._loop.wake.set())
                self._loop.wake.set()  # the loop looks at pending completions often from now on
                self._count("handoffs_requested")
            handoff = h.handoff
            assert handoff is not None
            handoff.target = target
            handoff.failed = False
            if not _done(handoff.completion):
                if not handoff.warned and now - handoff.requested_at >= self.handoff_timeout:
                    handoff.warned = True
                    self._count("handoff_timeouts")
                    log.warning(
                        "%s: listener has not finished hand-off of %s after %.1f s; still renewing",
                        self.member_id, key, now - handoff.requested_at,
                    )
                continue
            ready.append((key, h, target))
            if handoff.counted:
                in_flight -= 1  # the limit is on hand-offs in progress, not per tick
        self._complete_handoffs(ready)

    def _complete_handoffs(self, ready: list[tuple[str, Held, str | None]]) -> None:
        """Finish hand-offs whose listener is done: resume (plan changed back), or write the
        hand-off / release of each, all at once."""
        writes: list[tuple[str, Held, str | None]] = []
        for key, h, target in ready:
            if target == self.member_id:  # the plan changed back: resume processing
                self._holder.begin_handoff(h, None)
                self._count("handoffs_resumed")
                if self._listener.call("on_lease_acquired", h.lease):
                    continue
                target = None
            writes.append((key, h, target))
        done = self._pool.run([functools.partial(self._holder.hand_off, *w) for w in writes])
        for (key, h, _), gone in zip(writes, done, strict=True):
            if gone is True:
                self._holder.forget(key, h)
        raise_first(done)


_EXPIRY_MARGIN = 0.005  # run the expiry round just after the expiry, not just before it

