"""The simulated world: real ``LeaseCoordinator``s over an in-memory lease table, on simulated time.

One process, one thread, no sleeping: every member is a real
:class:`~kinesis.lease_loop.coordinator.LeaseCoordinator` (``write_threads=1``, so its writes
run inline and in order) over its own :class:`~kinesis.lease_loop.table.leases.LeaseTable` client
into one :class:`~tests.support.memory_dynamodb.MemoryDynamoDB` (DynamoDB's conditional
semantics, optionally stale eventually consistent reads). Time is a number the world moves
from one scheduled event to the next; each member sees it through its own clock (an offset
and a rate: ``skew``), and its own wall clock.

Each member's rounds are scheduled exactly as its :class:`~kinesis.lease_loop.coordinator.RoundLoop`
would run them (ticks, light rounds, expiry rounds, hand-offs completed between rounds); a
processor per member delivers records of the keys it was told to process, only while
``holds(key)``, checkpointing as it goes; a graceful hand-off checkpoints everything
delivered before it completes. Disturbances (:mod:`tests.fleetsim.schedule`) change who
runs, what each member's list shows, and what the table answers. :class:`~tests.fleetsim.checks.Checker`
looks at the world after every event.

The member list: in a "static" scenario the world keeps it (:attr:`World.listed`, each
member's :class:`~hashring.StaticMembership` set from it, lagging as told); in a "session"
scenario every new-build member keeps it itself through a
:class:`~kinesis.lease_loop.membership.SessionMembership` over its own table client
(so its faults reach the list too), and :attr:`World.listed` only records who was started and
not stopped gracefully (whom the checker may hold to a bound).
"""

from __future__ import annotations

import bisect
import heapq
import inspect
import itertools
import json
import math
import random
import threading
import zlib
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from botocore.exceptions import ClientError

from hashring import Membership, StaticMembership, chore_owners
from kinesis.consumer.discovery.manifest import ShardManifestSync
from kinesis.consumer.discovery.shards import ShardDiscovery
from kinesis.consumer.discovery.sync import ShardSync
from kinesis.errors import KinesisHashRingError, LeaseLostError
from kinesis.lease_loop.coordinator import LeaseCoordinator
from kinesis.lease_loop.membership import SessionMembership
from kinesis.lease_loop.plan import PLAN_CHORE
from kinesis.lease_loop.settings import LoadBalancing
from kinesis.lease_loop.table.leases import LeaseTable
from kinesis.lease_loop.table.model import SHARD_END, Lease
from tests.fleetsim.bounds import Timing, shard_sync_interval, timing
from tests.fleetsim.schedule import Event, Scenario
from tests.fleetsim.stream import SPEC, STREAM, KinesisClient, SimStream
from tests.support.memory_dynamodb import MemoryDynamoDB

TABLE = "sim-leases"
RECORDS_PER_SECOND = 4.0
BATCH = 8
NOBODY = "zz-nobody"
"""The one name a member list shows when nobody is listed (a member list is never empty)."""
LOAD_INTERVAL_D = 4.0
"""Lease durations between two load chores (``LoadBalancing.interval``) in scenarios with loads."""
WRITES = frozenset({"PutItem", "UpdateItem", "DeleteItem", "TransactWriteItems"})
MEMBERS_HEAD = "__manifest__#members"
"""The head row of a "session" scenario's member list."""


def _api_name(method: str) -> str:
    return "".join(part.title() for part in method.split("_"))


class MemberClient:
    """One member's view of the in-memory DynamoDB: counts its calls and injects its faults."""

    def __init__(self, world: World, member: SimMember):
        self._world = world
        self._member = member

    def __getattr__(self, name: str) -> Any:
        target = getattr(self._world.memory, name)
        if not callable(target) or name.startswith("_"):
            return target
        operation = _api_name(name)

        def call(**kwargs: Any) -> Any:
            member = self._member
            member.calls[operation] += 1
            fault = member.fault(operation, self._world)
            if fault == "deny":
                raise ClientError({"Error": {"Code": "AccessDeniedException", "Message": (
                    f"User: arn:aws:iam::123456789012:user/{member.id} is not authorized to perform: "
                    f"dynamodb:{operation} on resource: arn:aws:dynamodb:us-east-1:123456789012:table/{TABLE}")},
                    "ResponseMetadata": {"HTTPStatusCode": 400}}, operation)
            if fault == "failed":
                raise ClientError({"Error": {"Code": "InternalServerError", "Message": "failed"},
                                   "ResponseMetadata": {"HTTPStatusCode": 500}}, operation)
            if fault == "throttle":
                raise ClientError({"Error": {"Code": "ProvisionedThroughputExceededException", "Message": "slow down"},
                                   "ResponseMetadata": {"HTTPStatusCode": 400}}, operation)
            result = target(**kwargs)
            if fault == "ambiguous":
                raise ClientError({"Error": {"Code": "InternalServerError", "Message": "applied, then failed"},
                                   "ResponseMetadata": {"HTTPStatusCode": 500}}, operation)
            return result

        return call


@dataclass
class Tenure:
    """One member processing one key, from ``on_lease_acquired`` to its end."""

    member: str
    key: str
    start: int
    """The checkpoint it was given (records after it are its to deliver)."""
    began: float
    last: int = 0
    ended: str = ""
    """"" while running; "handoff" (graceful, everything delivered checkpointed), "lost", "crash"."""

    def __post_init__(self) -> None:
        self.last = self.start


@dataclass
class SimMember:
    """One member process (a new-build coordinator, or a legacy one)."""

    id: str
    rate: float
    offset: float
    legacy: bool = False
    name: str = ""
    """The process's name in the world (its member id, unless it runs under another's id)."""
    wall_offset: float = 0.0
    state: str = "running"
    """running, crashed or stopped."""
    paused_until: float = -math.inf
    generation: int = 0
    """Bumped when the process dies: events scheduled for an earlier life are ignored."""
    calls: Counter[str] = field(default_factory=Counter)
    throttle: tuple[float, float] = (0.0, -math.inf)
    ambiguous: tuple[float, float] = (0.0, -math.inf)
    denied: set[str] = field(default_factory=set)
    lag: tuple[float, float] = (0.0, -math.inf)
    """(seconds behind, until)."""
    stop_deadline: float = math.inf
    """A graceful stop ends by then (simulated time)."""
    coordinator: Any = None
    membership: Membership | None = None
    """A StaticMembership the world sets, or (a "session" scenario) the member's SessionMembership."""
    provider: Any = None
    tenures: dict[str, Tenure] = field(default_factory=dict)
    next_tick: float = 0.0
    last_round: float = -math.inf
    expiry_at: float = math.inf
    stopping: bool = False

    def local(self, now: float) -> float:
        return self.offset + self.rate * now

    def global_time(self, local: float) -> float:
        return (local - self.offset) / self.rate

    def fault(self, operation: str, world: World) -> str:
        now = world.now
        if operation in self.denied:
            return "deny"
        p, until = self.throttle
        if now < until and world.rng.random() < p:
            return "throttle"
        p, until = self.ambiguous
        if operation in WRITES and now < until:
            draw = world.rng.random()
            if draw < p:
                return "ambiguous"
            if draw < 2 * p:
                return "failed"
        return ""

    @property
    def alive(self) -> bool:
        return self.state == "running"


class SimListener:
    """A member's processor, as the lease loop sees it."""

    def __init__(self, world: World, member: SimMember):
        self.world = world
        self.member = member

    def on_lease_acquired(self, lease: Lease) -> None:
        self.world.begin_tenure(self.member, lease)

    def on_lease_lost(self, lease: Lease) -> None:
        self.world.end_tenure(self.member, lease.key, "lost")

    def on_handoff_requested(self, lease: Lease) -> threading.Event:
        done = threading.Event()
        if self.member.stopping:  # SIGTERM: the processor checkpoints and returns at once
            self.world.finish_handoff(self.member, lease.key, done, complete=False)
        else:
            delay = self.world.rng.uniform(0.0, self.world.timing.scan)
            generation = self.member.generation
            self.world.at(self.world.now + delay, lambda: self.world.finish_handoff(
                self.member, lease.key, done, complete=True), member=self.member, generation=generation)
        return done


class World:
    """One simulated run of ``scenario`` (see the module docs)."""

    def __init__(self, scenario: Scenario):
        self.scenario = scenario
        self.timing: Timing = timing(scenario)
        self.rng = random.Random(scenario.seed * 1_000_003 + 17)
        self.now = 0.0
        self._queue: list[tuple[float, int, Callable[[], None], SimMember | None, int]] = []
        self._seq = itertools.count()
        self.memory = MemoryDynamoDB(stale_reads=self._stale_read if scenario.stale_reads else None)
        self.members: dict[str, SimMember] = {}
        self.listed: set[str] = set()
        self._truth: list[tuple[float, tuple[str, ...]]] = [(-math.inf, ())]
        self.view_moves: list[float] = []
        """Moments a running member's lagging list moved while the list itself did not (its lag
        ended, or an event refreshed it mid-lag): a change of the member list for that member,
        like the changes in ``_truth`` are for the others."""
        self.stream = SimStream(scenario.keys, RECORDS_PER_SECOND) if scenario.provider == "worker" else None
        self.keys = [f"k{i:02d}" for i in range(scenario.keys)] if self.stream is None else []
        self.tenures: list[Tenure] = []
        self.delivered: dict[str, dict[int, Tenure]] = defaultdict(dict)
        self.duplicates: Counter[str] = Counter()
        self.violations: list[str] = []
        self.log: list[str] = []
        self.observers: list[Callable[[World], None]] = []
        self._setup = LeaseTable(self.memory, TABLE, retry_attempts=1, sleep=lambda s: None)
        self._setup.ensure_table()

    # --- scheduling ------------------------------------------------------------------

    def at(self, when: float, action: Callable[[], None], *, member: SimMember | None = None,
           generation: int = 0) -> None:
        heapq.heappush(self._queue, (max(when, self.now), next(self._seq), action, member, generation))

    def run(self, until: float) -> None:
        """Run every event up to ``until`` (simulated seconds), looking after each."""
        while self._queue and self._queue[0][0] <= until:
            when, _, action, member, generation = heapq.heappop(self._queue)
            if member is not None and generation != member.generation:
                continue  # scheduled for an earlier life of the process
            if member is not None and when < member.paused_until:
                self.at(member.paused_until, action, member=member, generation=generation)
                continue
            self.now = when
            action()
            for observer in self.observers:
                observer(self)
        self.now = max(self.now, until)

    # --- the member list ---------------------------------------------------------------

    def set_listed(self, listed: set[str]) -> None:
        self.listed = set(listed)
        self._truth.append((self.now, tuple(sorted(listed))))
        self.refresh_views()

    def view_of(self, member: SimMember) -> tuple[str, ...]:
        behind, until = member.lag
        when = self.now - behind if self.now < until else self.now
        i = bisect.bisect_right([t for t, _ in self._truth], when) - 1
        return self._truth[max(i, 0)][1]

    def refresh_views(self) -> None:
        moved = False
        for m in self.members.values():
            if isinstance(m.membership, StaticMembership):  # a SessionMembership keeps its own list
                version = m.membership.version
                m.membership.set_members(self.view_of(m) or (NOBODY,))
                moved |= m.alive and not m.legacy and m.membership.version != version
        if moved and self._truth[-1][0] != self.now:  # (a move with the list's own change is that change)
            self.view_moves.append(self.now)

    # --- members ---------------------------------------------------------------------

    def start_member(self, member_id: str, *, legacy: bool = False, listed: bool = True,
                     name: str | None = None) -> SimMember:
        index = len(self.members)
        skew = self.scenario.skew
        rate = skew[index] if index < len(skew) else 1.0
        name = name or member_id
        old = self.members.get(name)
        generation = old.generation + 1 if old is not None else 0
        member = SimMember(member_id, rate, offset=1000.0 + 37.0 * index, legacy=legacy, generation=generation,
                           name=name)
        self.members[name] = member
        if listed:
            self.set_listed(self.listed | {member_id})
        if self.scenario.membership == "session" and not legacy:
            member.membership = SessionMembership(self.table_for(member), member_id,
                                                  clock=lambda: member.local(self.now))
        else:
            member.membership = StaticMembership(self.view_of(member) or (NOBODY,), member_id)
        if legacy:
            from tests.fleetsim.legacy import LegacyMember

            table = self.table_for(member)
            member.provider = ShardSync(table, [(SPEC, self._discovery(member))]) if self.stream else None
            member.coordinator = LegacyMember(self, member, table, self.keys, member.provider)
        else:
            member.coordinator = self.new_coordinator(member)
        member.next_tick = member.local(self.now) + self.rng.uniform(0.0, self.timing.tick)
        self._schedule_round(member)
        self.at(self.now + self.rng.uniform(0.0, self.timing.scan), lambda: self._process(member),
                member=member, generation=member.generation)
        return member

    def table_for(self, member: SimMember) -> LeaseTable:
        return LeaseTable(MemberClient(self, member), TABLE, retry_attempts=2, retry_max_wait=0.01,
                          clock=lambda: member.local(self.now), sleep=lambda s: None)

    def _discovery(self, member: SimMember) -> ShardDiscovery:
        assert self.stream is not None
        return ShardDiscovery(KinesisClient(self.stream), STREAM, cache_ttl=shard_sync_interval(self.scenario),
                              timer=lambda: member.local(self.now))

    def new_coordinator(self, member: SimMember) -> LeaseCoordinator:
        assert member.membership is not None
        table = self.table_for(member)
        resources: Any = self.keys
        if self.stream is not None:
            streams = [(SPEC, self._discovery(member))]
            if self.scenario.reads == "scoped":
                extra: dict[str, Any] = {}
                if "wall_clock" in inspect.signature(ShardManifestSync).parameters:  # releases that used one
                    extra["wall_clock"] = lambda: 1.7e9 + self.now + member.wall_offset
                member.provider = ShardManifestSync(
                    table, streams, member_id=member.id, membership=member.membership,
                    lease_duration=self.scenario.lease_duration, tick_interval=self.timing.tick,
                    shard_sync_interval=shard_sync_interval(self.scenario), replicas=max(1, self.scenario.replicas),
                    clock=lambda: member.local(self.now), **extra)
            else:
                member.provider = ShardSync(table, streams)
            resources = member.provider
        balancing = None
        if self.scenario.loads and self.scenario.reads == "scoped":
            loads = self.scenario.loads

            def source() -> dict[str, float]:  # what each lease it holds costs it
                return {k: loads[zlib.crc32(k.encode()) % len(loads)] for k in member.coordinator.held_keys()}

            balancing = LoadBalancing(source, interval=LOAD_INTERVAL_D * self.scenario.lease_duration)
        return LeaseCoordinator(
            table, member.membership, resources, SimListener(self, member),
            lease_duration=self.scenario.lease_duration, replicas=self.scenario.replicas,
            reads=self.scenario.reads, write_threads=1, warmup_ticks=0,
            clock=lambda: member.local(self.now), load_balancing=balancing,
        )

    def crash(self, member: SimMember) -> None:
        if not member.alive:
            return
        member.state = "crashed"
        member.generation += 1
        for key in list(member.tenures):
            self.end_tenure(member, key, "crash")

    def sigterm(self, member: SimMember) -> None:
        """A graceful stop: plan without this member and hand off (its processors checkpoint
        and return at once); its rounds go on until nothing is held or offered, or the
        shutdown grace (two lease durations) has passed, then the coordinator stops."""
        if not member.alive or member.stopping:
            return
        member.stopping = True
        if member.legacy:
            member.coordinator.stop()
            self._stopped(member)
            return
        begin = getattr(member.coordinator, "begin_stop", None)
        if begin is None:  # a build before begin_stop(): one pass, what is left expires
            member.coordinator.stop(graceful=True, timeout=0.0)
            self._stopped(member)
            return
        begin(graceful=True, timeout=0.0)
        member.stop_deadline = self.now + 2 * self.scenario.lease_duration

    def _stopped(self, member: SimMember) -> None:
        member.state = "stopped"
        member.generation += 1
        for key in list(member.tenures):
            self.end_tenure(member, key, "lost")

    # --- rounds, as RoundLoop schedules them -----------------------------------------

    def _schedule_round(self, member: SimMember) -> None:
        t = self.timing
        due = min(member.next_tick, self._next_scan(member), member.expiry_at)
        self.at(member.global_time(due), lambda: self._round(member), member=member, generation=member.generation)
        del t

    def _next_scan(self, member: SimMember) -> float:
        due = member.last_round + self.timing.scan
        return member.next_tick if member.next_tick - due < self.timing.scan / 2 else due

    def _round(self, member: SimMember) -> None:
        if not member.alive:
            return
        c = member.coordinator
        now = member.local(self.now)
        if now >= member.next_tick - 1e-9:
            c.tick()
            member.last_round = now
            member.next_tick = max(member.next_tick + self.timing.tick, now)
        elif now >= min(member.expiry_at, self._next_scan(member)) - 1e-9:
            c.refresh()
            member.last_round = now
        if member.last_round == now and member.expiry_at <= now:
            member.expiry_at = math.inf
        if not member.legacy:
            c._complete_ready_handoffs()
            member.expiry_at = min(member.expiry_at, now + c._next_expiry())
            if member.stopping and (not c._holder.holding() or self.now >= member.stop_deadline):
                c.stop(graceful=True, timeout=0.0)
                self._stopped(member)
                return
        self._schedule_round(member)

    # --- processing ------------------------------------------------------------------

    def produced(self, key: str, at: float | None = None) -> int:
        """Records written to ``key`` so far (sequence numbers 1..n), or by time ``at``."""
        when = self.now if at is None else at
        if self.stream is None:
            return int(when * RECORDS_PER_SECOND)
        return self.stream.shard_of(key).produced(when, RECORDS_PER_SECOND)

    def begin_tenure(self, member: SimMember, lease: Lease) -> None:
        cp = lease.checkpoint
        start = int(cp.sequence_number) if cp.is_record else 0
        if cp.is_shard_end and self.stream is not None:  # finished: the processor ends it at once
            start = self.stream.last_record(self.stream.shard_of(lease.key)) or 0
        tenure = Tenure(member.name, lease.key, start, self.now)
        old = member.tenures.get(lease.key)
        if old is not None and not old.ended:
            old.ended = "lost"
        member.tenures[lease.key] = tenure
        self.tenures.append(tenure)

    def end_tenure(self, member: SimMember, key: str, how: str) -> None:
        tenure = member.tenures.pop(key, None)
        if tenure is not None and not tenure.ended:
            tenure.ended = how

    def finish_handoff(self, member: SimMember, key: str, done: threading.Event, *, complete: bool) -> None:
        """The processor stops: checkpoint everything delivered, then the hand-off may complete."""
        tenure = member.tenures.get(key)
        if tenure is not None and tenure.last > tenure.start:
            try:
                member.coordinator.checkpoint(key, str(tenure.last))
            except LeaseLostError:
                self.end_tenure(member, key, "lost")
            except KinesisHashRingError:
                pass  # the hand-off goes on with the last checkpoint written
        tenure = member.tenures.get(key)
        if tenure is not None and not tenure.ended:
            stored = self._stored_checkpoint(key)
            self.end_tenure(member, key, "handoff" if stored >= tenure.last else "lost")
        done.set()
        if complete and member.alive:
            member.coordinator._complete_ready_handoffs()

    def _stored_checkpoint(self, key: str) -> int:
        item = self.memory.peek(key)
        if not item:
            return 0
        seq = item.get("checkpoint", {}).get("S", "")
        return int(seq) if seq.isdigit() else 0

    def _process(self, member: SimMember) -> None:
        """One batch of every key this member processes (only while it holds the lease)."""
        if not member.alive:
            return
        c = member.coordinator
        for key, tenure in sorted(member.tenures.items()):
            if tenure.ended or not c.holds(key):
                continue
            top = min(tenure.last + BATCH, self.produced(key))
            for seq in range(tenure.last + 1, top + 1):
                self._deliver(tenure, seq)
            if self.stream is not None and top == self.stream.last_record(self.stream.shard_of(key)):
                tenure.last = top
                self._shard_end(member, key)
                continue
            if top > tenure.last:
                tenure.last = top
                if self.rng.random() < 0.6:
                    try:
                        c.checkpoint(key, str(top))
                    except LeaseLostError:
                        self.end_tenure(member, key, "lost")
                    except KinesisHashRingError:
                        pass
        self.at(self.now + self.timing.scan, lambda: self._process(member), member=member,
                generation=member.generation)

    def _shard_end(self, member: SimMember, key: str) -> None:
        """The shard's last record was delivered: checkpoint SHARD_END, release, list again."""
        c = member.coordinator
        try:
            c.checkpoint(key, SHARD_END)
        except LeaseLostError:
            self.end_tenure(member, key, "lost")
            return
        except KinesisHashRingError:
            return  # the next batch tries again
        self.end_tenure(member, key, "shard_end")
        c.release(key)
        if member.provider is not None:
            member.provider.invalidate(STREAM)

    def _deliver(self, tenure: Tenure, seq: int) -> None:
        seen = self.delivered[tenure.key]
        before = seen.get(seq)
        if before is not None and before is not tenure:
            cause = before.ended or "running"
            self.duplicates[cause] += 1
            if cause == "handoff":
                self.violations.append(
                    f"t={self.now:.3f}: {tenure.member} delivered {tenure.key} record {seq} again after "
                    f"{before.member} handed it off gracefully with a checkpoint covering it")
        seen[seq] = tenure

    def _stale_read(self, key: str, history: int) -> int:
        if history <= 1 or self.rng.random() >= self.scenario.stale_reads:
            return 0
        return self.rng.randint(1, history - 1)

    # --- disturbances ----------------------------------------------------------------

    def schedule(self, events: tuple[Event, ...]) -> None:
        for event in events:
            self.at(event.at, lambda e=event: self.apply(e))

    def apply(self, event: Event) -> None:
        self.log.append(f"t={self.now:.3f} {event.kind} {event.member} {json.dumps(event.args, sort_keys=True)}")
        member = self.members.get(event.member)
        kind = event.kind
        if kind == "crash" and member is not None:
            self.crash(member)
            after = event.arg("unlist_after")
            if after is not None:
                self.at(self.now + float(after), lambda: self._unlist(event.member))
        elif kind == "unlist":
            self._unlist(event.member)
        elif kind == "restart" and member is not None and not member.alive:
            new_id = str(event.arg("as", event.member))
            if new_id != event.member:
                self._unlist(event.member)
            self.start_member(new_id)
        elif kind == "sigterm" and member is not None and member.alive:
            self.sigterm(member)
            self._unlist(event.member)
        elif kind == "pause" and member is not None and member.alive:
            member.paused_until = self.now + float(event.arg("seconds"))
        elif kind == "join":
            after = float(event.arg("listed_after", 0.0))
            self.start_member(event.member, listed=after == 0.0)
            if after:
                self.at(self.now + after, lambda: self.set_listed(self.listed | {event.member}))
        elif kind == "lag" and event.arg("chore_owner"):
            owner = self.members.get(chore_owners(PLAN_CHORE, sorted(self.listed))[0]) if self.listed else None
            if owner is not None and owner.alive:
                owner.lag = (float(event.arg("seconds")), self.now + float(event.arg("for")))
                self.refresh_views()
                self.at(owner.lag[1], self.refresh_views)
        elif kind == "lag" and member is not None:
            member.lag = (float(event.arg("seconds")), self.now + float(event.arg("for")))
            self.refresh_views()
            self.at(member.lag[1], self.refresh_views)
        elif kind == "duplicate" and member is not None and member.alive and not member.legacy:
            self.start_member(event.member, name=f"{event.member}#2")
        elif kind == "chore_split" and self.listed:
            listed = sorted(self.listed)
            old_owner = self.members.get(chore_owners(PLAN_CHORE, listed)[0])
            name = next((f"c{i}" for i in range(200) if f"c{i}" not in self.members
                         and chore_owners(PLAN_CHORE, sorted([*listed, f"c{i}"]))[0] == f"c{i}"), None)
            if old_owner is not None and old_owner.alive and name is not None:
                old_owner.lag = (float(event.arg("for")) + 1.0, self.now + float(event.arg("for")))
                self.start_member(name)
                self.at(old_owner.lag[1], self.refresh_views)
        elif kind == "phantom":
            self.set_listed(self.listed | {event.member})
        elif kind == "legacy":
            self.start_member(event.member, legacy=True)
        elif kind in ("throttle", "ambiguous") and member is not None:
            setattr(member, kind, (float(event.arg("p")), self.now + float(event.arg("for"))))
        elif kind == "deny" and member is not None:
            member.denied.add(str(event.arg("action")))
        elif kind == "corrupt":
            self._corrupt(str(event.arg("row")), int(event.arg("pick", 0)))
        elif kind == "wall_step" and member is not None:
            member.wall_offset += float(event.arg("seconds"))
        elif kind == "reshard" and self.stream is not None:
            self.stream.split(self.now, int(event.arg("pick", 0)))
        self.refresh_views()

    def _unlist(self, member_id: str) -> None:
        if member_id in self.listed:
            self.set_listed(self.listed - {member_id})

    def _corrupt(self, row: str, pick: int) -> None:
        items = self.memory.items()
        if row == "plan_head":
            candidates = [k for k in items if k == "__manifest__#plan"]
        elif row == "plan_chunk":
            candidates = sorted(k for k in items if k.startswith("__manifest__#plan#"))
        elif row == "manifest_head":
            candidates = sorted(k for k in items if k.startswith("__manifest__#shards") and k.count("#") == 1)
        elif row == "session":
            candidates = sorted(k for k in items if k.startswith("__session__#"))
        elif row == "members_head":
            candidates = [k for k in items if k == MEMBERS_HEAD]
        else:
            candidates = []
        if not candidates:
            return
        key = candidates[pick % len(candidates)]
        if pick % 3 == 0:
            self.memory.corrupt(key, None)  # missing
        else:
            self.memory.corrupt(key, {"leaseKey": {"S": key}, "garbage": {"S": "\u0000not a row"}})

    # --- ground truth ------------------------------------------------------------------

    def ready_keys(self) -> list[str]:
        """The keys that must be processed now: every key, or (a stream) the shards not finished
        whose parents are (their rows say ``SHARD_END``)."""
        if self.stream is None:
            return self.keys
        ready = []
        for shard_id, shard in sorted(self.stream.shards.items()):
            key = self.stream.key(shard_id)
            if not self._finished(key) and all(self._finished(self.stream.key(p)) for p in shard.parents):
                ready.append(key)
        return ready

    def _finished(self, key: str) -> bool:
        item = self.memory.peek(key)
        return bool(item) and item.get("leaseState", {}).get("S") == "SHARD_END"

    def all_keys(self) -> list[str]:
        """Every key there ever was."""
        if self.stream is None:
            return self.keys
        return [self.stream.key(s) for s in sorted(self.stream.shards)]

    def serving(self) -> bool:
        """Whether a member of this release runs and is listed (else nobody can be held to a bound)."""
        return any(m.alive and not m.legacy and m.id in self.listed for m in self.members.values())

    def processing(self, key: str) -> list[str]:
        """Members processing ``key`` now: running, not paused, a processor started, lease held."""
        out = []
        for m in self.members.values():
            tenure = m.tenures.get(key)
            if (m.alive and self.now >= m.paused_until and tenure is not None and not tenure.ended
                    and m.coordinator.holds(key)):
                out.append(m.name)
        return out

    def holders(self, key: str) -> list[str]:
        """Members whose coordinator says they may process ``key`` now (paused ones too)."""
        return [m.name for m in self.members.values() if m.alive and m.coordinator.holds(key)]
