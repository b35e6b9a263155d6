"""Fix a micro-batch's end on the driver: read ahead in each shard to the last record it admits.

Kinesis has no "latest offset" call, so the driver reads the records the next batch will take
(GetRecords, capped by the read limits) and keeps only the position of the last one. The
executors read the same range again, so every record is fetched twice (driver and executor);
the driver keeps one :class:`~kinesis.reader.ShardReader` per shard between batches, so the
next probe continues where the last one stopped (no extra GetShardIterator, and records read
past a cap are held back in memory for the next batch instead of being fetched again).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from kinesis.positions import Position
from kinesis.reader import MAX_GET_RECORDS_LIMIT, ShardReader
from spark_integration.offsets import ShardPosition, to_start


@dataclass
class ProbeResult:
    """Where a shard's batch ends."""

    position: ShardPosition
    records: int
    shard_ended: bool


@dataclass
class ProbeStats:
    """Kinesis calls made by the driver's probes (for the docs' cost figures and tests)."""

    get_records_calls: int = 0
    iterators_acquired: int = 0
    records_seen: int = 0


@dataclass
class Prober:
    """Per-shard readers kept across batches on the driver."""

    kinesis: Any
    batch_limit: int = MAX_GET_RECORDS_LIMIT
    _readers: dict[str, tuple[ShardReader, ShardPosition]] = field(default_factory=dict)
    stats: ProbeStats = field(default_factory=ProbeStats)

    def probe(
        self,
        key: str,
        stream: str,
        shard_id: str,
        begin: ShardPosition,
        budget: int | None,
        until_ms: int | None = None,
    ) -> ProbeResult:
        """Read from ``begin`` up to ``budget`` records (None: until caught up).

        ``until_ms`` (Trigger.AvailableNow) excludes records that arrived after it.
        """
        if budget is not None and budget <= 0:
            return ProbeResult(begin, 0, False)
        reader = self._reader(key, stream, shard_id, begin, budget)
        calls, iterators = reader.stats.get_records_calls, reader.stats.iterators_acquired
        until = datetime.fromtimestamp(until_ms / 1000, tz=UTC) if until_ms is not None else None
        last: ShardPosition = begin
        count = 0
        beyond_target = False
        for record in reader.iter_records(max_records=budget, stop_when_caught_up=True):
            arrived = record.approximate_arrival_timestamp
            if until is not None and arrived is not None and arrived > until:
                beyond_target = True
                break
            last = record.position
            count += 1
        self.stats.get_records_calls += reader.stats.get_records_calls - calls
        self.stats.iterators_acquired += reader.stats.iterators_acquired - iterators
        self.stats.records_seen += count
        if beyond_target:
            # The reader went past the end we return: it cannot continue from ``last``.
            self._readers.pop(key, None)
            return ProbeResult(last, count, False)
        self._readers[key] = (reader, last)
        return ProbeResult(last, count, reader.shard_ended)

    def _reader(self, key: str, stream: str, shard_id: str, begin: ShardPosition,
                budget: int | None) -> ShardReader:
        cached = self._readers.get(key)
        if cached is not None and cached[1] == begin:
            return cached[0]
        limit = self.batch_limit if budget is None else max(1, min(self.batch_limit, budget))
        return ShardReader(self.kinesis, stream, shard_id, to_start(begin),
                           max_records=limit, idle_backoff=0.0)

    def forget(self, keep: set[str]) -> None:
        """Drop the readers of shards that left the offsets."""
        for key in [k for k in self._readers if k not in keep]:
            del self._readers[key]


def is_position(pos: ShardPosition) -> bool:
    """True for a record position (something was read)."""
    return isinstance(pos, Position)
