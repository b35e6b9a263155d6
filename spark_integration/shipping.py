"""Ship the records the driver read ahead to the executors, inside the input partitions.

The driver fixes each micro-batch's end by reading every shard up to it
(:mod:`spark_integration.probe`). It keeps what that read returned, per shard exactly the
records in (begin, end] of its last probe, as one Arrow batch in a bounded
:class:`ReadAheadCache`. When Spark plans the batch, ``partitions(start, end)`` puts a range's
records into its partition if the cached range starts where the planned one starts and holds
its end (then exactly the records up to that end are shipped), and if the partition's payload
stays within ``maxShippedBytesPerPartition``. Executors yield shipped records without calling
Kinesis. Every other range (a replay after a driver restart, a range the cache does not hold
exactly, a payload over the cap) ships nothing and the executor reads it from Kinesis as before,
with the same :class:`~spark_integration.errors.OffsetRangeUnavailableError` guarantee.

Memory: one range per shard, each at most the per-partition cap, at most
:data:`MAX_CACHE_BYTES` in all (least recently probed shards go first). A range leaves the cache
when it is shipped, when the shard's next probe replaces it, when a commit passes its end, or
when the shard leaves the offsets.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from cachetools import LRUCache

from kinesis.consumer.retrieval import Checkpoint, Position, Record
from spark_integration.offsets import SourceOffset
from spark_integration.schema import to_arrow_batch

#: The whole cache on the driver (over all shards) stays under this many bytes.
MAX_CACHE_BYTES = 256 << 20
#: Per-record bytes an Arrow batch adds beyond the variable-length fields (offsets, numbers).
_FIXED_ROW_BYTES = 36


def record_size(record: Record) -> int:
    """Estimated Arrow bytes of one row (what the collector counts against the cap)."""
    return (len(record.data) + len(record.partition_key) + len(record.sequence_number)
            + len(record.stream_name) + len(record.shard_id) + _FIXED_ROW_BYTES)


class RangeCollector:
    """A probe's records, kept while their estimated size stays within ``cap`` bytes."""

    def __init__(self, cap: int):
        self.cap = cap
        self.records: list[Record] = []
        self.size = 0
        self.overflowed = cap <= 0

    def add(self, record: Record) -> None:
        if self.overflowed:
            return
        self.size += record_size(record)
        if self.size > self.cap:
            self.overflowed = True
            self.records = []  # can never ship: free it now
            return
        self.records.append(record)


@dataclass(frozen=True)
class CachedRange:
    """One shard's records in (``begin``, ``end``], in shard order."""

    begin: Checkpoint
    end: Position
    batch: Any  # pyarrow.RecordBatch

    @property
    def nbytes(self) -> int:
        return int(self.batch.nbytes)


@dataclass
class ShipStats:
    """What the cache did (for tests, logs and the docs' cost figures)."""

    cached: int = 0
    shipped_ranges: int = 0
    shipped_records: int = 0
    shipped_bytes: int = 0
    missed: int = 0
    over_cap: int = 0
    evicted: int = 0


@dataclass
class ReadAheadCache:
    """The driver's read-ahead records, per shard key; thread-safe (probes run in a pool)."""

    max_bytes_per_partition: int
    max_total_bytes: int = MAX_CACHE_BYTES
    stats: ShipStats = field(default_factory=ShipStats)

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        self._ranges: LRUCache[str, CachedRange] = LRUCache(
            maxsize=self.max_total_bytes, getsizeof=lambda r: r.nbytes)

    @property
    def enabled(self) -> bool:
        return self.max_bytes_per_partition > 0

    def collector(self) -> RangeCollector | None:
        """A collector for one probe, or None when shipping is off."""
        return RangeCollector(self.max_bytes_per_partition) if self.enabled else None

    def put(self, key: str, begin: Checkpoint, end: Position, records: Sequence[Record]) -> None:
        """Cache ``records``, which must be exactly the shard's records in (begin, end]."""
        if not records or records[-1].position != end:
            self.discard(key)
            return
        entry = CachedRange(begin, end, to_arrow_batch(records))
        with self._lock:
            self._ranges.pop(key, None)
            if entry.nbytes > min(self.max_bytes_per_partition, self.max_total_bytes):
                return
            evicted_before = len(self._ranges)
            self._ranges[key] = entry
            self.stats.evicted += max(0, evicted_before + 1 - len(self._ranges))
            self.stats.cached += 1

    def discard(self, key: str) -> None:
        with self._lock:
            self._ranges.pop(key, None)

    def take(self, key: str, begin: Checkpoint, end: Position) -> Any | None:
        """The records of (``begin``, ``end``] as an Arrow batch, removed from the cache; or None.

        Hits when the cached range starts at ``begin`` and ``end`` is one of its records (a
        read limit may have ended the batch earlier than the probe: the prefix is returned).
        """
        with self._lock:
            entry = self._ranges.pop(key, None)
        if entry is None or entry.begin != begin:
            self.stats.missed += 1
            return None
        if entry.end == end:
            return entry.batch
        if end > entry.end:
            self.stats.missed += 1
            return None
        index = _index_of(entry.batch, end)
        if index is None:
            self.stats.missed += 1
            return None
        return entry.batch.slice(0, index + 1)

    def committed(self, end: SourceOffset) -> None:
        """Drop ranges a committed batch has passed (nothing can plan them any more)."""
        with self._lock:
            for key, entry in end.shards.items():
                cached = self._ranges.get(key)
                if cached is not None and not cached.end > entry.position:
                    del self._ranges[key]

    def forget(self, keep: Iterable[str]) -> None:
        """Drop the ranges of shards that left the offsets."""
        keys = set(keep)
        with self._lock:
            for key in [k for k in self._ranges if k not in keys]:
                del self._ranges[key]

    def clear(self) -> None:
        with self._lock:
            self._ranges.clear()

    def keys(self) -> list[str]:
        with self._lock:
            return sorted(self._ranges)

    @property
    def total_bytes(self) -> int:
        with self._lock:
            return int(self._ranges.currsize)


def _index_of(batch: Any, end: Position) -> int | None:
    """Row index of the record at ``end`` in ``batch``, if it is there."""
    import pyarrow.compute as pc

    mask = pc.and_(pc.equal(batch.column("sequenceNumber"), end.sequence_number),
                   pc.equal(batch.column("subSequenceNumber"), end.sub_sequence_number))
    index = pc.index(mask, True).as_py()
    return None if index < 0 else int(index)


def encode(batch: Any) -> bytes:
    """An Arrow IPC stream holding ``batch`` (what a partition carries)."""
    import pyarrow as pa

    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, batch.schema) as writer:
        writer.write_batch(batch)
    return bytes(sink.getvalue().to_pybytes())


def decode(payload: bytes) -> Any:
    """The Arrow table of a payload made by :func:`encode`."""
    import pyarrow as pa

    return pa.ipc.open_stream(payload).read_all()


def chunks(table: Any, rows: int) -> Iterator[Any]:
    """``table`` as record batches of at most ``rows`` rows (zero-copy slices)."""
    for batch in table.to_batches(max_chunksize=rows):
        if batch.num_rows:
            yield batch


def shipped_range_is(table: Any, begin: Checkpoint, end: Position) -> bool:
    """True when ``table`` starts strictly after ``begin`` and ends exactly at ``end``."""
    if table.num_rows == 0:
        return False
    seq, sub = table.column("sequenceNumber"), table.column("subSequenceNumber")
    first = Position(seq[0].as_py(), sub[0].as_py())
    last = Position(seq[-1].as_py(), sub[-1].as_py())
    return last == end and first > begin
