"""Group mode: several Spark applications consume one stream through a shared lease table.

Each driver runs a :class:`~kinesis.lease_loop.coordinator.LeaseCoordinator` (balanced, fenced leases
placed by the hash ring) over lease keys ``"<applicationName>/<stream>/<shardId>"``:

* ``latestOffset`` plans only the shards this application holds. A shard it just acquired
  starts from the lease's DynamoDB checkpoint (written into the end offset as ``resume``, so
  a replay of that batch starts there too);
* ``commit(end)`` writes each shard's end position to its lease (SHARD_END for a finished
  shard), fenced by owner and counter. A checkpoint is written only if the lease is the very
  one held when the batch was planned: a lease lost during the batch (even if taken back
  since) never gets a checkpoint from that batch;
* a graceful hand-off (rebalance, or ``stop()``) first drops the shard from new batches,
  waits for the batches that already include it to commit, then passes the lease with its
  checkpoint to the next owner, which resumes exactly there.

Delivery across applications is at-least-once: a batch that reached the sink but whose
commit did not reach DynamoDB (a crash in between) is read again by the next holder.

Group mode: wait, on the driver, until a stopped query has handed its leases on.

``query.stop()`` returns before the hand-off is written: PySpark stops the source's
driver-side Python process with SIGTERM and does not wait for it, and that process hands the
leases on in the background (:mod:`spark_integration.sigterm`). Outside a container it
finishes even if the driver exits; in a container everything dies with the main process, so a
driver that exits on SIGTERM (pod deletion) should stop its queries and call
:func:`wait_for_handover` first::

    query.stop()
    wait_for_handover(options, timeout=20)   # the same options the query was given
    spark.stop()
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from hashring import Membership
from kinesis.consumer.discovery import ShardDiscovery, ready_shards
from kinesis.consumer.retrieval import LATEST, Position
from kinesis.errors import CheckpointRegressionError, KinesisHashRingError, LeaseLostError
from kinesis.lease_loop import (
    SHARD_END,
    Checkpoint,
    Completion,
    Lease,
    LeaseCoordinator,
    LeaseTable,
    TableSnapshot,
)
from spark_integration.clients import client
from spark_integration.errors import InvalidOptionError
from spark_integration.membership import (
    build_membership,
    close_membership,
    open_kubernetes_membership,
)
from spark_integration.offsets import (
    SourceOffset,
    at_timestamp_ms,
    position_to_json,
    shard_key,
    split_key,
    timestamp_ms,
)
from spark_integration.options import GroupOptions, KinesisOptions, parse_options

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class GroupView:
    """What a micro-batch may plan: held keys, where new ones resume, finished keys."""

    held: frozenset[str]
    resume: dict[str, Checkpoint]
    finished: frozenset[str]


@dataclass
class _Shard:
    """This driver's bookkeeping of one held shard."""

    lease: Lease
    generation: int
    needs_resume: bool = True
    draining: threading.Event | None = None
    planned: str | None = None  # JSON of the last planned end position
    committed: str | None = None  # JSON of the last committed end position


@dataclass
class GroupStats:
    """Counters for tests and logs."""

    checkpoints: int = 0
    fenced_out: int = 0
    acquired: int = 0
    lost: int = 0
    handoffs: int = 0
    planned_generations: dict[str, int] = field(default_factory=dict)


class GroupSession:
    """The lease loop of one Spark application (driver side); see the module docs."""

    def __init__(self, options: KinesisOptions, kinesis: Any,
                 discovery: dict[str, ShardDiscovery]):
        group = options.group
        assert group is not None
        self.options = options
        self.group: GroupOptions = group
        self.discovery = discovery
        self.prefix = f"{group.application_name}/"
        self.stats = GroupStats()
        self._lock = threading.RLock()
        self._shards: dict[str, _Shard] = {}  # offset key -> state
        self._generation = 0
        self._finished: frozenset[str] = frozenset()
        self._plans: dict[tuple[str, str], int] = {}  # (key, end position JSON) -> generation
        self._closing = False
        start_ms = int(time.time() * 1000)
        self.start_checkpoint = self._initial_checkpoint(start_ms)
        # Kubernetes first: a bad configuration fails the query before any table is touched.
        kube = open_kubernetes_membership(group) if group.membership == "kubernetes" else None
        try:
            self.table = LeaseTable.open(client("dynamodb", options), group.lease_table)
            self.membership: Membership = (
                kube if kube is not None else build_membership(group, self.table))
            self.coordinator = LeaseCoordinator(
                self.table,
                self.membership,
                self._resources,
                self,
                lease_duration=group.lease_duration_s,
                replicas=group.replicas,
                initial_checkpoint=self.start_checkpoint,
            ).start()
        except BaseException:
            if kube is not None:
                close_membership(kube)
            raise

    # -- set-up --------------------------------------------------------------------------
    def _initial_checkpoint(self, start_ms: int) -> Checkpoint:
        """The checkpoint of a lease row this application creates (LATEST pinned to now)."""
        if self.options.initial_position == "LATEST":
            return at_timestamp_ms(start_ms)
        return self.options.first_start

    # -- lease keys --------------------------------------------------------------------
    def lease_key(self, key: str) -> str:
        return self.prefix + key

    def offset_key(self, lease_key: str) -> str | None:
        return lease_key[len(self.prefix):] if lease_key.startswith(self.prefix) else None

    def _resources(self, snapshot: TableSnapshot) -> list[str]:
        """Called on the lease loop's thread: the shards that may be planned now."""
        finished: set[str] = set()
        for lease_key, lease in snapshot.leases.items():
            key = self.offset_key(lease_key)
            if key is not None and lease.is_shard_end:
                finished.add(key)
        self._finished = frozenset(finished)
        keys: list[str] = []
        for stream, discovery in sorted(self.discovery.items()):
            shards = discovery.list_shards()
            done = {split_key(k)[1] for k in finished if split_key(k)[0] == stream}
            keys.extend(self.lease_key(shard_key(stream, s.shard_id))
                        for s in ready_shards(shards, done))
        return keys

    # -- LeaseListener (called on the lease loop's thread) ---------------------------------
    def on_lease_acquired(self, lease: Lease) -> None:
        key = self.offset_key(lease.key)
        if key is None:
            return
        with self._lock:
            self._generation += 1
            self._shards[key] = _Shard(lease, self._generation)
            self.stats.acquired += 1
        log.info("%s: reading %s from checkpoint %s", self.group.member_id, key, lease.checkpoint)

    def on_lease_lost(self, lease: Lease) -> None:
        key = self.offset_key(lease.key)
        with self._lock:
            state = self._shards.pop(key, None) if key is not None else None
            if state is not None:
                self.stats.lost += 1
                if state.draining is not None:
                    state.draining.set()
        log.warning("%s: lost the lease of %s", self.group.member_id, key)

    def on_handoff_requested(self, lease: Lease) -> Completion:
        key = self.offset_key(lease.key)
        with self._lock:
            state = self._shards.get(key) if key is not None else None
            if state is None:
                return None
            if state.draining is None:
                state.draining = threading.Event()
                self.stats.handoffs += 1
            if self._closing or state.planned is None or state.planned == state.committed:
                state.draining.set()
            return state.draining

    # -- micro-batch hooks -------------------------------------------------------------
    def plan(self, begin: SourceOffset, listing: Any) -> GroupView:
        """The shards the next micro-batch may read, and where newly acquired ones resume."""
        held: set[str] = set()
        resume: dict[str, Checkpoint] = {}
        with self._lock:
            for key, state in sorted(self._shards.items()):
                if state.draining is not None:
                    continue
                if not self.coordinator.holds(self.lease_key(key)):
                    continue
                if state.lease.is_shard_end:
                    continue
                held.add(key)
                if state.needs_resume:
                    resume[key] = _start_of(state.lease.checkpoint)
            return GroupView(frozenset(held), resume, self._finished)

    def planned(self, end: SourceOffset) -> None:
        """Remember, per shard, the lease generation this end offset was planned under."""
        with self._lock:
            for key, entry in end.shards.items():
                state = self._shards.get(key)
                if state is None:
                    continue
                pos = _json(entry.position, entry.done)
                state.planned = pos
                state.needs_resume = False
                self._plans[(key, pos)] = state.generation
                self.stats.planned_generations[key] = state.generation

    def checkpoint(self, end: SourceOffset) -> None:
        """Write each shard's end position to its lease, fenced (called by ``commit``)."""
        for key, entry in sorted(end.shards.items()):
            pos = _json(entry.position, entry.done)
            with self._lock:
                state = self._shards.get(key)
                generation = self._plans.pop((key, pos), None)
            if state is None or generation != state.generation:
                # planned under a lease we lost since: never checkpoint it
                self.stats.fenced_out += 1
                continue
            target = SHARD_END if entry.done else _checkpoint_of(entry.position)
            if target is not None and target != state.lease.checkpoint:
                try:
                    state.lease = self.coordinator.checkpoint(self.lease_key(key), target)
                    self.stats.checkpoints += 1
                except LeaseLostError as exc:
                    self.stats.fenced_out += 1
                    log.warning("%s: checkpoint of %s refused: %s", self.group.member_id, key, exc)
                    continue
                except CheckpointRegressionError as exc:
                    log.info("%s: %s already checkpointed further (%s)",
                             self.group.member_id, key, exc)
                except KinesisHashRingError as exc:
                    log.warning("%s: checkpoint of %s failed; the next batch retries: %s",
                                self.group.member_id, key, exc)
                    continue
            with self._lock:
                state.committed = pos
                if state.draining is not None and state.planned == pos:
                    state.draining.set()

    def held_keys(self) -> list[str]:
        """The offset keys this application holds now (for tests and logs)."""
        return sorted(k for k in (self.offset_key(x) for x in self.coordinator.held_keys()) if k)

    def close(self) -> None:
        """Hand every lease to the next owner (after the last commit) and stop the loop."""
        with self._lock:
            self._closing = True
            for state in self._shards.values():
                if state.draining is not None:
                    state.draining.set()
        try:
            self.coordinator.stop(graceful=True)
        finally:
            close_membership(self.membership)


def _start_of(cp: Checkpoint) -> Checkpoint:
    """Where to resume from a lease checkpoint: the checkpoint itself in an offset's terms
    (LATEST, written by another consumer, pinned to now; a timestamp cut to milliseconds)."""
    if cp == LATEST:
        return at_timestamp_ms(int(time.time() * 1000))
    return at_timestamp_ms(timestamp_ms(cp)) if cp.timestamp is not None else cp


def _checkpoint_of(pos: Checkpoint) -> Checkpoint | None:
    return pos if isinstance(pos, Position) else None  # nothing read: keep the lease's initial one


def _json(pos: Checkpoint, done: bool) -> str:
    body = position_to_json(pos)
    if done:
        body["done"] = True
    return repr(sorted(body.items()))


#: How often the lease table is read while waiting.
POLL_INTERVAL_S = 0.2


def held_leases(options: Mapping[str, str]) -> list[str]:
    """The lease keys this application (``memberId``) holds now in its group's table."""
    opts = parse_options(options, streaming=True)
    group = opts.group
    if group is None:
        raise InvalidOptionError(
            "wait_for_handover needs the group-mode options of the query (leaseTable, "
            "applicationName, memberId, ...): option 'leaseTable' is not set", "leaseTable")
    table = LeaseTable(client("dynamodb", opts), group.lease_table)
    prefix = f"{group.application_name}/"
    return sorted(key for key, lease in table.scan().leases.items()
                  if key.startswith(prefix) and lease.owner == group.member_id)


def wait_for_handover(options: Mapping[str, str], timeout: float = 30.0) -> list[str]:
    """Wait until this application holds no lease of its group, at most ``timeout`` seconds.

    ``options`` are the source options of the stopped query. Returns the lease keys still
    held when the time is up (empty: every lease was handed on or released); those expire
    after ``leaseDuration``.
    """
    if not timeout >= 0:
        raise ValueError(f"timeout must be >= 0 seconds, got {timeout!r}")
    deadline = time.monotonic() + timeout
    while True:
        held = held_leases(options)
        remaining = deadline - time.monotonic()
        if not held or remaining <= 0:
            return held
        time.sleep(min(POLL_INTERVAL_S, remaining))
