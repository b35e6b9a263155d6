"""Fix a micro-batch's end on the driver: read ahead in each shard to the last record it admits.

Kinesis has no "latest offset" call, so the driver reads the records the next batch will take
(GetRecords, capped by the read limits) and returns the position of the last one. With a
:class:`~spark_integration.shipping.ReadAheadCache` it also keeps those records (exactly the
range it fixed), so they can ride to the executors inside the input partitions instead of
being fetched a second time there. The driver keeps one :class:`~kinesis.consumer.retrieval.polling.ShardReader`
per shard between batches, so the next probe continues where the last one stopped (no extra
GetShardIterator, and records read past a cap are held back in memory for the next batch
instead of being fetched again). A shard with a backlog is read ahead in the background while
Spark runs the batch.
"""

from __future__ import annotations

import contextlib
import threading
from collections import deque
from collections.abc import Generator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from kinesis.consumer.retrieval import (
    MAX_GET_RECORDS_LIMIT,
    TRIM_HORIZON,
    Checkpoint,
    Position,
    Record,
    ShardReader,
)
from kinesis.errors import ShardNotFoundError, StartingPositionRejectedError
from spark_integration.data_loss import data_lost, describe, start_is_gone
from spark_integration.shipping import RangeCollector, ReadAheadCache


@dataclass
class ProbeResult:
    """Where a shard's batch ends."""

    position: Checkpoint
    records: int
    shard_ended: bool


@dataclass
class ProbeStats:
    """Kinesis calls made by the driver's probes (for the docs' cost figures and tests)."""

    get_records_calls: int = 0
    iterators_acquired: int = 0
    records_seen: int = 0


@dataclass
class _Slot:
    """One shard's reader on the driver, where it stands, and records read ahead."""

    reader: ShardReader
    position: Checkpoint
    buffer: deque[Record] = field(default_factory=deque)
    prefetch: Future[None] | None = None

    def settle(self) -> None:
        """Wait for a read-ahead in flight (the reader is not thread-safe)."""
        if self.prefetch is not None:
            # A failed read-ahead only loses time: the reader's state is unchanged, and the
            # probe reads (and reports errors) again itself.
            with contextlib.suppress(Exception):
                self.prefetch.result()
            self.prefetch = None


@dataclass
class Prober:
    """Per-shard readers kept across batches on the driver.

    With ``read_ahead`` (a thread pool), after a probe that stopped at its budget the next
    GetRecords of that shard is issued in the background, while Spark runs the batch; the
    next probe starts from those records. The same records are fetched, only earlier.
    """

    kinesis: Any
    batch_limit: int = MAX_GET_RECORDS_LIMIT
    read_ahead: ThreadPoolExecutor | None = None
    cache: ReadAheadCache | None = None
    """Keeps each probe's records (the range it fixed) for shipping in the partitions."""
    fail_on_data_loss: bool = True
    """``failOnDataLoss``: a probe that finds its start trimmed fails (else: logs, counts)."""
    _slots: dict[str, _Slot] = field(default_factory=dict)
    stats: ProbeStats = field(default_factory=ProbeStats)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def probe(
        self,
        key: str,
        stream: str,
        shard_id: str,
        begin: Checkpoint,
        budget: int | None,
        until_ms: int | None = None,
        max_bytes: int | None = None,
    ) -> ProbeResult:
        """Read from ``begin`` up to ``budget`` records (None: until caught up).

        ``until_ms`` (Trigger.AvailableNow) excludes records that arrived after it.
        ``max_bytes`` ends the range with the record whose :func:`payload_size` brings the
        range's total to the limit or past it (so a single larger record still makes progress).
        """
        if budget is not None and budget <= 0:
            if self.cache is not None:
                self.cache.discard(key)
            return ProbeResult(begin, 0, False)
        slot, fresh = self._slot(key, stream, shard_id, begin, budget)
        try:
            taken = self._take(slot, begin, budget, until_ms, max_bytes)
        except StartingPositionRejectedError as exc:
            if not (fresh and isinstance(begin, Position)):
                raise
            self._lost(stream, shard_id, f"GetShardIterator refused to start after "
                       f"{describe(begin)} ({exc.__cause__ or exc})")
            slot, fresh = self._new_slot(stream, shard_id, TRIM_HORIZON, begin,
                                         budget), False
            for _ in slot.reader.iter_records(until=begin, stop_when_caught_up=True):
                pass  # records at or before begin, if any are left: the batch starts after it
            taken = self._take(slot, begin, budget, until_ms, max_bytes)
        except ShardNotFoundError:
            self._lost(stream, shard_id, f"the shard is gone; its records after "
                       f"{describe(begin)} were not read")
            with self._lock:
                self._slots.pop(key, None)
            if self.cache is not None:
                self.cache.discard(key)
            return ProbeResult(begin, 0, True)
        reader = slot.reader
        if fresh and start_is_gone(begin, reader.first_sequence_number):
            first = reader.first_sequence_number
            upto = "the end of the shard" if first is None else f"sequence number {first}"
            self._lost(stream, shard_id, f"the records after {describe(begin)} up to {upto} "
                       "(exclusive) were trimmed before they were read")
        last, count, beyond_target, byte_capped, kept = taken
        if self.cache is not None:
            # Exactly the records in (begin, last]: what an executor would read for that range.
            if kept is not None and not kept.overflowed and isinstance(last, Position):
                self.cache.put(key, begin, last, kept.records)
            else:
                self.cache.discard(key)
        ended = reader.shard_ended and not slot.buffer
        with self._lock:
            self.stats.records_seen += count
            if beyond_target:
                # The reader went past the end we return: it cannot continue from ``last``.
                self._slots.pop(key, None)
                return ProbeResult(last, count, False)
            slot.position = last
            self._slots[key] = slot
        capped = byte_capped or (budget is not None and count >= budget)
        if self.read_ahead is not None and capped and not ended:
            slot.prefetch = self.read_ahead.submit(_read_ahead, slot)
        return ProbeResult(last, count, ended)

    def _take(self, slot: _Slot, begin: Checkpoint, budget: int | None,
              until_ms: int | None, max_bytes: int | None
              ) -> tuple[Checkpoint, int, bool, bool, RangeCollector | None]:
        """Read the probe's records: (last, count, beyond_target, byte_capped, kept)."""
        kept = self.cache.collector() if self.cache is not None else None
        reader = slot.reader
        calls, iterators = reader.stats.get_records_calls, reader.stats.iterators_acquired
        until = datetime.fromtimestamp(until_ms / 1000, tz=UTC) if until_ms is not None else None
        last: Checkpoint = begin
        count = 0
        size = 0
        beyond_target = False
        byte_capped = False

        def records() -> Generator[Record, None, None]:
            while slot.buffer and (budget is None or count < budget):
                yield slot.buffer.popleft()
            if budget is None or count < budget:
                remaining = None if budget is None else budget - count
                yield from reader.iter_records(max_records=remaining, stop_when_caught_up=True)

        try:
            # closed explicitly when left early, so the reader keeps the records not taken
            with contextlib.closing(records()) as taken:
                for record in taken:
                    arrived = record.approximate_arrival_timestamp
                    if until is not None and arrived is not None and arrived > until:
                        beyond_target = True
                        break
                    last = record.position
                    count += 1
                    if kept is not None:
                        kept.add(record)
                    size += payload_size(record)
                    if max_bytes is not None and size >= max_bytes:
                        byte_capped = True
                        break
        finally:
            with self._lock:
                self.stats.get_records_calls += reader.stats.get_records_calls - calls
                self.stats.iterators_acquired += reader.stats.iterators_acquired - iterators
        return last, count, beyond_target, byte_capped, kept

    def _lost(self, stream: str, shard_id: str, what: str) -> None:
        data_lost(stream, shard_id, what, fail=self.fail_on_data_loss, side="driver")

    def _slot(self, key: str, stream: str, shard_id: str, begin: Checkpoint,
              budget: int | None) -> tuple[_Slot, bool]:
        """The shard's reader at ``begin``, and True if it is new (not continuing a probe)."""
        with self._lock:
            cached = self._slots.get(key)
        if cached is not None:
            cached.settle()
            if cached.position == begin:
                return cached, False
        return self._new_slot(stream, shard_id, begin, begin, budget), True

    def _new_slot(self, stream: str, shard_id: str, start: Checkpoint,
                  position: Checkpoint, budget: int | None) -> _Slot:
        limit = self.batch_limit if budget is None else max(1, min(self.batch_limit, budget))
        reader = ShardReader(self.kinesis, stream, shard_id, start,
                             max_records=limit, idle_backoff=0.0)
        return _Slot(reader, position)

    def forget(self, keep: set[str]) -> None:
        """Drop the readers of shards that left the offsets."""
        with self._lock:
            for key in [k for k in self._slots if k not in keep]:
                del self._slots[key]
        if self.cache is not None:
            self.cache.forget(keep)


def _read_ahead(slot: _Slot) -> None:
    """One GetRecords for the next probe (runs on the pool while Spark runs the batch)."""
    batch = slot.reader.read_batch()
    slot.buffer.extend(batch.records)


def payload_size(record: Record) -> int:
    """What ``maxBytesPerShard`` counts: the user record's data plus its partition key."""
    return len(record.data) + len(record.partition_key.encode())
