"""Shard discovery as one member's chore: the resource provider of ``reads="scoped"`` Workers.

With :class:`~kinesis.consumer.discovery.sync.ShardSync` every member lists every stream's shards
and judges parents from a full scan. :class:`ShardManifestSync` gives that work to one member
per stream and lets everyone else read one small row:

* **The chore owner** of a stream (whoever holds the head row of its manifest,
  :mod:`kinesis.lease_loop.table.manifests`) renews the head every tick, lists the shards every
  ``shard_sync_interval``, creates the missing lease rows (parents first, with the start rules
  of :func:`~kinesis.consumer.discovery.sync.initial_checkpoint`), reads every tick the rows of the
  closed shards not yet finished (none in steady state) and publishes a new version of the
  manifest (the shards and which of them are finished) when anything changed.
* **Who takes the chore**: the first of the members ranked for the reserved key
  ``__chore__/shards/<application>/<stream>`` (rendezvous over the sorted member list, plus
  ``replicas`` backups) claims a head that has no owner or whose owner left the member list;
  any of them claims a head whose counter did not move for ``lease_duration`` on its own clock
  (a dead owner, still listed), so the chore moves within a lease duration and a tick; and any
  other member claims a head (or the absence of one) that did not move for ``orphan_timeout``,
  so a chore whose candidates are listed but never run (older builds during a rolling upgrade,
  dead pods) reaches a running member within ``orphan_timeout + poll_interval``. Every head
  write is conditional on the counter read, so two members never both publish.
* **Everyone** reads the head every ``poll_interval`` (the chore's candidates, and a member
  that has no version yet, every tick) and
  the chunks only when its version moves. A new version takes effect ``poll_interval`` after it
  was published, so every member plans with the same key set at about the same moment. Its
  age is told by the head's counter (the owner adds one every tick; the version records the
  counter it was published with) on the reader's own monotonic clock: no wall clock is
  compared between hosts. Children of a finished shard are therefore planned within a tick
  plus ``poll_interval`` (default ``shard_sync_interval / 2``).

Reads per member: one head row per ``poll_interval`` and the manifest's chunks once per
version; ListShards: one caller per stream instead of every member.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from hashring import Membership, chore_owners
from hashring.errors import HashRingError
from kinesis.consumer.discovery.shards import Shard, ShardDiscovery, ready_shards, shard_order
from kinesis.consumer.discovery.sync import ShardSync
from kinesis.consumer.worker.config import StreamConfig, WorkerConfig
from kinesis.errors import ConfigurationError, CorruptLeaseError, KinesisHashRingError
from kinesis.lease_loop.membership import DynamoDBMembership
from kinesis.lease_loop.table.leases import LeaseTable
from kinesis.lease_loop.table.manifests import (
    ManifestConflictError,
    ManifestCorruptError,
    ManifestHead,
    ManifestStore,
)
from kinesis.lease_loop.table.model import TableSnapshot
from kinesis.lease_loop.timing import MONOTONIC, Clock

log = logging.getLogger(__name__)



@dataclass(frozen=True)
class ShardManifest:
    """One published version: the stream's shards and the finished ones."""

    shards: tuple[Shard, ...]
    finished: frozenset[str]
    published_counter: int | None = None
    """The head's counter this version was published with (the chore owner adds one every
    tick: a reader tells the version's age from the head's counter, on no wall clock);
    None: a version written by a release that carried the publisher's wall clock instead."""

    def to_bytes(self) -> bytes:
        return json.dumps(
            {
                "published_counter": self.published_counter,
                "finished": sorted(self.finished),
                "shards": [
                    [s.shard_id, s.parent_shard_id, s.adjacent_parent_shard_id, s.starting_sequence_number,
                     s.ending_sequence_number, str(s.hash_key_range[0]), str(s.hash_key_range[1])]
                    for s in self.shards
                ],
            },
            separators=(",", ":"),
        ).encode()

    @classmethod
    def from_bytes(cls, payload: bytes) -> ShardManifest:
        data = json.loads(payload)
        shards = tuple(
            Shard(sid, parent, adjacent, start, end, (int(lo), int(hi)))
            for sid, parent, adjacent, start, end, lo, hi in data["shards"]
        )
        counter = data.get("published_counter")
        return cls(shards, frozenset(data["finished"]), int(counter) if isinstance(counter, int) else None)

    def same_content(self, other: ShardManifest | None) -> bool:
        return other is not None and self.shards == other.shards and self.finished == other.finished


@dataclass
class _Stream:
    spec: StreamConfig
    discovery: ShardDiscovery
    store: ManifestStore
    head: ManifestHead | None = None
    head_seen_at: float = 0.0
    """When this member first saw ``head``'s (owner, counter) pair (its clock)."""
    polled_at: float | None = None
    synced_at: float | None = None
    manifest: ShardManifest | None = None
    """The newest version read."""
    version: int = 0
    """The head version ``manifest`` was read from."""
    effective: ShardManifest | None = None
    """The version planned with."""
    keys: list[str] = field(default_factory=list)
    observed: bool = False
    """Whether the head was read at least once (its absence, too, is then timed)."""
    apply_at: float | None = None
    """When (this member's clock) the newest version read takes effect."""
    corrupt_since: float | None = None
    """When this member first read the head unreadable (None: readable)."""


class ShardManifestSync(ShardSync):
    """Resource provider over several streams (see the module docs). Thread-safe."""

    def __init__(
        self,
        table: LeaseTable,
        streams: Iterable[tuple[StreamConfig, ShardDiscovery]],
        *,
        member_id: str,
        membership: Membership,
        lease_duration: float,
        tick_interval: float,
        shard_sync_interval: float,
        poll_interval: float | None = None,
        replicas: int = 1,
        orphan_timeout: float | None = None,
        clock: Clock = MONOTONIC,
        chunk_bytes: int | None = None,
    ):
        super().__init__(table, streams)
        self.member_id = member_id
        self.membership = membership
        self.lease_duration = lease_duration
        self.tick_interval = tick_interval
        self.shard_sync_interval = shard_sync_interval
        self.poll_interval = poll_interval if poll_interval is not None else shard_sync_interval / 2
        self.replicas = replicas
        self.orphan_timeout = orphan_timeout if orphan_timeout is not None else lease_duration * (replicas + 2)
        self.clock = clock
        extra = {} if chunk_bytes is None else {"chunk_bytes": chunk_bytes}
        self._streams = [
            _Stream(spec, discovery, ManifestStore(table, f"shards/{spec.key_prefix}".replace("#", "%23"), **extra))
            for spec, discovery in self.streams
        ]
        self._members: tuple[str, ...] = ()
        self.published = 0

    # --- the resource provider -------------------------------------------------------

    def __call__(self, snapshot: TableSnapshot) -> list[str]:
        keys: list[str] = []
        with self._lock:
            members = self._read_members()
            for stream in self._streams:
                try:
                    self._round(stream, members)
                except KinesisHashRingError as exc:
                    log.warning("%s: shard manifest of %s: %s", self.member_id, stream.spec.stream, exc)
                keys += stream.keys
        return keys

    @property
    def keys(self) -> tuple[str, ...]:
        """The lease keys the manifests in effect here give (what the last round returned)."""
        with self._lock:
            return tuple(k for s in self._streams for k in s.keys)

    def invalidate(self, stream: str | None = None) -> None:
        """A shard ended here: the chore owner lists again at once (others wait for it)."""
        super().invalidate(stream)
        with self._lock:
            for s in self._streams:
                if stream is None or s.spec.stream == stream:
                    s.synced_at = None

    def shards(self, spec: StreamConfig) -> list[Shard]:
        for s in self._streams:
            if s.spec.key_prefix == spec.key_prefix and s.manifest is not None:
                return list(s.manifest.shards)
        return super().shards(spec)

    def owns_chore(self, spec: StreamConfig) -> bool:
        """Whether this member holds the shard chore of ``spec``'s stream (as last read)."""
        return any(s.spec.key_prefix == spec.key_prefix and s.head is not None and s.head.owner == self.member_id
                   for s in self._streams)

    # --- one stream, one round -------------------------------------------------------

    def _read_members(self) -> tuple[str, ...]:
        try:
            self._members = tuple(self.membership.members())
        except HashRingError as exc:
            log.warning("%s: shard manifest: no member list (%s); using the last one", self.member_id, exc)
        return self._members

    def _candidates(self, spec: StreamConfig, members: Sequence[str]) -> list[str]:
        return chore_owners(f"shards/{spec.key_prefix}", members, replicas=self.replicas)

    def _round(self, stream: _Stream, members: tuple[str, ...]) -> None:
        now = self.clock()
        candidates = self._candidates(stream.spec, members)
        mine = stream.head is not None and stream.head.owner == self.member_id
        watching = mine or self.member_id in candidates
        # the chore's candidates, and a member that has no version yet (starting with the
        # fleet), read the head every tick: the first version is planned at once, not a poll late
        interval = self.tick_interval if watching or stream.effective is None else self.poll_interval
        if stream.polled_at is None or now - stream.polled_at >= interval:
            stream.polled_at = now
            try:
                head = stream.store.head(consistent=watching)
            except ManifestCorruptError as exc:
                if exc.item is None or not self._repair(stream, exc.item, candidates, members, now):
                    raise
                head = stream.head
            else:
                stream.corrupt_since = None
            self._observe(stream, head, now)
            mine = stream.head is not None and stream.head.owner == self.member_id
            if mine:
                self._renew(stream)
            elif self._may_claim(stream, candidates, members, now):
                self._claim(stream)
            if stream.head is not None and stream.head.owner == self.member_id:
                self._chore(stream, now)
        self._read_manifest(stream)
        self._apply(stream)

    def _repair(self, stream: _Stream, item: dict[str, Any], candidates: list[str], members: tuple[str, ...],
                now: float) -> bool:
        """An unreadable head: the chore's candidates replace it at once, anyone else once it
        stayed unreadable for ``orphan_timeout`` (conditional on every attribute as read, then
        published again from a fresh listing, past the newest version read). True if replaced."""
        if stream.corrupt_since is None:
            stream.corrupt_since = now
        if self.member_id not in candidates and not (
                self.member_id in members and now - stream.corrupt_since >= self.orphan_timeout):
            return False
        try:
            stream.head = stream.store.claim_corrupt(self.member_id, item, version=stream.version)
        except ManifestConflictError:
            return False
        log.warning("%s: the shard manifest head of %s was unreadable: replaced it", self.member_id,
                    stream.spec.stream)
        stream.corrupt_since = None
        stream.synced_at = None
        return True

    def _observe(self, stream: _Stream, head: ManifestHead | None, now: float) -> None:
        old = stream.head
        same = (head is None and old is None) or (
            head is not None and old is not None and (head.owner, head.counter) == (old.owner, old.counter))
        if not stream.observed or not same:  # no head at all is timed too (a chore nobody ever claimed)
            stream.head_seen_at = now
        stream.observed = True
        stream.head = head

    def _may_claim(self, stream: _Stream, candidates: list[str], members: tuple[str, ...], now: float) -> bool:
        """The chore's candidates claim an ownerless head at once (the first) or one whose
        counter did not move for a lease duration; anyone else once it did not move for
        ``orphan_timeout`` (the candidates are listed but do not run: older builds during a
        rolling upgrade, dead pods still listed)."""
        head = stream.head
        unchanged = now - stream.head_seen_at
        if self.member_id not in candidates:
            return self.member_id in members and unchanged >= self.orphan_timeout
        if head is None or head.owner not in members:
            return candidates[0] == self.member_id or unchanged >= self.lease_duration
        return unchanged >= self.lease_duration

    def _claim(self, stream: _Stream) -> None:
        previous = stream.head
        try:
            # a lost head is rebuilt past the newest version read (claimed, naming no chunks)
            stream.head = stream.store.claim(self.member_id, previous, version=stream.version)
        except ManifestConflictError:
            return
        stream.head_seen_at = self.clock()
        stream.synced_at = None
        log.info("%s: took the shard chore of %s%s", self.member_id, stream.spec.stream,
                 f" from {previous.owner}" if previous and previous.owner != self.member_id else "")

    def _renew(self, stream: _Stream) -> None:
        assert stream.head is not None
        try:
            stream.head = stream.store.renew(stream.head)
        except ManifestConflictError:
            log.info("%s: lost the shard chore of %s", self.member_id, stream.spec.stream)
            stream.head = None
            stream.polled_at = None

    def _chore(self, stream: _Stream, now: float) -> None:
        """List (every ``shard_sync_interval``), create rows, judge finished shards, publish."""
        assert stream.head is not None
        self._read_manifest(stream)
        current = stream.manifest
        listing = current.shards if current is not None else ()
        if stream.synced_at is None or now - stream.synced_at >= self.shard_sync_interval or current is None:
            listed = self._list(stream.spec, stream.discovery)
            if listed is None:
                return
            stream.synced_at = now
            listing = tuple(shard_order(listed))
        finished = self._finished(stream.spec, listing, current)
        if finished is None:
            return
        new = ShardManifest(listing, finished, stream.head.counter + 1)  # the counter the publish writes
        if new.same_content(current) and stream.head.chunks:  # none: a rebuilt head names no version
            return
        try:
            stream.head = stream.store.publish(stream.head, new.to_bytes())
        except ManifestConflictError:
            stream.head, stream.polled_at = None, None
            return
        self.published += 1
        stream.manifest, stream.version = new, stream.head.version
        stream.apply_at = self.clock() + self.poll_interval
        log.info("%s: published shard manifest v%d of %s (%d shards, %d finished)", self.member_id,
                 stream.head.version, stream.spec.stream, len(listing), len(finished))

    def _finished(self, spec: StreamConfig, listing: Sequence[Shard],
                  current: ShardManifest | None) -> frozenset[str] | None:
        """Create missing rows; the finished shards (rows read: new shards, and closed ones not
        known finished). ``None`` if a row could not be created (publish nothing this time)."""
        known = {s.shard_id for s in current.shards} if current is not None else set()
        done = set(current.finished) if current is not None else set()
        listed_ids = {s.shard_id for s in listing}
        check = [s for s in listing if s.shard_id not in known or (not s.is_open and s.shard_id not in done)]
        if not check:
            return frozenset(done & listed_ids)
        keys = [spec.lease_key(s.shard_id) for s in check]
        rows = self.table.get_many(keys, consistent=True)
        corrupt = set(keys) - set(rows)  # rows that exist but cannot be parsed (reported, never written)
        has_row = known | {s.shard_id for s in check if rows.get(spec.lease_key(s.shard_id)) is not None
                           or spec.lease_key(s.shard_id) in corrupt}
        for shard in check:
            key = spec.lease_key(shard.shard_id)
            if key in corrupt:
                continue  # not finished, as far as anyone can tell: the other shards go on
            lease = rows.get(key)
            if lease is None:
                self._create(spec, shard, parent_rows=any(p in has_row for p in shard.parents))
                try:
                    lease = self.table.get(key)
                except CorruptLeaseError:
                    continue  # a corrupt row appeared meanwhile: reported, skipped
                if lease is None:
                    return None  # not created (logged): publish nothing until it is
                has_row.add(shard.shard_id)
            if lease is not None and lease.is_shard_end:
                done.add(shard.shard_id)
        return frozenset(done & listed_ids)

    def _read_manifest(self, stream: _Stream) -> None:
        head = stream.head
        if head is None or head.version == 0 or head.chunks == 0:  # none, or claimed and never published
            return
        if stream.manifest is not None and stream.version == head.version:
            return
        try:
            payload = stream.store.read(head)
        except ManifestConflictError:
            stream.polled_at = None  # a newer version replaced it: read the head next round
            return
        stream.manifest, stream.version = ShardManifest.from_bytes(payload), head.version
        published = stream.manifest.published_counter
        age = 0.0 if published is None else max(0, head.counter - published) * self.tick_interval
        wait = 0.0 if published is None else max(0.0, self.poll_interval - age)
        stream.apply_at = self.clock() + wait

    def _apply(self, stream: _Stream) -> None:
        """Plan with the newest version once it is ``poll_interval`` old (see the module docs)."""
        new = stream.manifest
        if new is None or new is stream.effective:
            return
        if stream.effective is not None and stream.apply_at is not None and self.clock() < stream.apply_at:
            return
        stream.effective = new
        spec = stream.spec
        stream.keys = [spec.lease_key(s.shard_id) for s in ready_shards(new.shards, set(new.finished))]


def shard_provider(
    config: WorkerConfig,
    table: LeaseTable,
    streams: Sequence[tuple[StreamConfig, ShardDiscovery]],
    membership: Membership,
    clock: Clock = MONOTONIC,
    *,
    reads: str,
) -> ShardSync:
    """The Worker's resource provider: :class:`ShardSync` for ``reads="scan"``, the shard
    manifest for ``reads="scoped"`` (which needs a membership outside the lease table);
    ``reads``: the resolved mode (:func:`~kinesis.consumer.worker.setup.resolve_reads`)."""
    if reads == "scan":
        return ShardSync(table, streams)
    if isinstance(membership, DynamoDBMembership):
        raise ConfigurationError(
            "WorkerConfig(reads='scoped') needs a membership the lease table's scans do not "
            "feed: leave membership unset (SessionMembership), or pass KubernetesMembership(...) "
            "or StaticMembership(...) to Worker, or use reads='scan' with a DynamoDBMembership"
        )
    timing = config.timing
    return ShardManifestSync(
        table, streams, member_id=membership.self_id, membership=membership,
        lease_duration=timing.lease_duration, tick_interval=timing.tick_interval,
        shard_sync_interval=config.shard_sync_interval, poll_interval=config.manifest_poll_interval,
        replicas=max(1, config.replicas), orphan_timeout=timing.orphan_timeout, clock=clock,
    )
