"""Input partitions (one or a few shard ranges each) and reading them on an executor.

A partition is self-contained: the shard, where to start (exclusive) and where to stop
(inclusive, or an arrival-time bound for batch reads), and, for streaming ranges, possibly the
range's records themselves, shipped by the driver (:mod:`spark_integration.shipping`). ``read``
depends only on the partition and the options, as Spark requires (the reader object on an
executor is a fresh unpickled copy): it yields shipped records as they are, and reads every
other range from Kinesis: with GetRecords, or with ``consumerType=SubscribeToShard`` over
Enhanced Fan-Out (:mod:`spark_integration.fanout_range`).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

from pyspark.sql.datasource import InputPartition

from kinesis.consumer.retrieval import (
    MAX_GET_RECORDS_LIMIT,
    Checkpoint,
    InitialPosition,
    Position,
    Record,
    ShardReader,
)
from kinesis.errors import ShardNotFoundError, StartingPositionRejectedError
from spark_integration.clients import client
from spark_integration.data_loss import data_lost, describe, start_is_gone
from spark_integration.fanout_range import FanOutRangeReader
from spark_integration.options import KinesisOptions
from spark_integration.schema import to_arrow_batch
from spark_integration.shipping import chunks, decode, shipped_range_is

log = logging.getLogger(__name__)

#: Rows per Arrow batch handed to Spark.
ARROW_BATCH_ROWS = 5000


@dataclass(frozen=True)
class ShardRange:
    """Records of one shard strictly after ``begin``, up to ``end`` (inclusive) or ``until_ms``.

    Streaming ranges have an exact ``end`` fixed on the driver; batch reads have ``end=None``
    and ``until_ms`` (arrival time at planning): they stop at the first later record, at
    SHARD_END, or when the shard is caught up.
    """

    stream: str
    shard_id: str
    begin: Checkpoint
    end: Position | None = None
    until_ms: int | None = None
    limit: int = MAX_GET_RECORDS_LIMIT
    """GetRecords' ``Limit``: the per-shard cap, so a range is not fetched far past its end."""


class ShardRangePartition(InputPartition):
    """A Spark input partition: one or more :class:`ShardRange` (``shardsPerPartition``).

    ``shipped`` has one entry per range: the range's records as an Arrow IPC stream (exactly
    the records after ``begin`` up to ``end``) when the driver shipped them, else None.
    """

    def __init__(self, index: int, ranges: Sequence[ShardRange],
                 shipped: Sequence[bytes | None] | None = None):
        super().__init__(index)
        self.index = index
        self.ranges = tuple(ranges)
        self.shipped: tuple[bytes | None, ...] = (
            tuple(shipped) if shipped is not None else (None,) * len(self.ranges))
        if len(self.shipped) != len(self.ranges):
            raise ValueError(f"{len(self.shipped)} payloads for {len(self.ranges)} ranges")

    @property
    def shipped_bytes(self) -> int:
        return sum(len(p) for p in self.shipped if p is not None)

    def __repr__(self) -> str:
        shards = ",".join(f"{r.stream}/{r.shard_id}" for r in self.ranges)
        shipped = sum(p is not None for p in self.shipped)
        return f"ShardRangePartition({self.index}: {shards}; {shipped} shipped)"


def group_ranges(ranges: Sequence[ShardRange], per_partition: int) -> list[ShardRangePartition]:
    """Chunks of ``per_partition`` ranges, in the given (deterministic) order."""
    return [
        ShardRangePartition(i, ranges[start:start + per_partition])
        for i, start in enumerate(range(0, len(ranges), per_partition))
    ]


def read_partition(partition: ShardRangePartition, options: KinesisOptions) -> Iterator[Any]:
    """Arrow record batches with every record of the partition's ranges."""
    kinesis: Any = None
    for shard_range, payload in zip(partition.ranges, partition.shipped, strict=True):
        if payload is not None:
            table = decode(payload)
            if shard_range.end is not None and shipped_range_is(table, shard_range.begin,
                                                                 shard_range.end):
                yield from chunks(table, ARROW_BATCH_ROWS)
                continue
            log.warning("records shipped for %s/%s do not match the range after %s up to %s; "
                        "reading it from Kinesis", shard_range.stream, shard_range.shard_id,
                        shard_range.begin, shard_range.end)
        if kinesis is None:
            kinesis = client("kinesis", options, role="executor")
        chunk: list[Record] = []
        for record in read_shard_range(kinesis, shard_range, options):
            chunk.append(record)
            if len(chunk) >= ARROW_BATCH_ROWS:
                yield to_arrow_batch(chunk)
                chunk = []
        if chunk:
            yield to_arrow_batch(chunk)


def read_shard_range(kinesis: Any, shard_range: ShardRange,
                     options: KinesisOptions) -> Iterator[Record]:
    """The records of one range; a streaming range must end exactly at its ``end``.

    A streaming range whose records are no longer all there (see
    :mod:`spark_integration.data_loss`) fails with ``DataLossError``, or with
    ``failOnDataLoss=false`` yields what is left of it from the trim horizon on.
    """
    r = shard_range
    reader = _reader(kinesis, r, r.begin, options)
    if r.end is None:
        until = (datetime.fromtimestamp(r.until_ms / 1000, tz=UTC)
                 if r.until_ms is not None else None)
        for record in reader.iter_records(stop_when_caught_up=True):
            arrived = record.approximate_arrival_timestamp
            if until is not None and arrived is not None and arrived > until:
                return
            yield record
        return
    lost = False

    def lose(what: str) -> None:
        nonlocal lost
        lost = True
        data_lost(r.stream, r.shard_id, f"the logged range after {describe(r.begin)} up to "
                  f"{describe(r.end)}: {what}", fail=options.fail_on_data_loss, side="executor")

    def checked(records: Iterator[Record]) -> Iterator[Record]:
        """``records``, after checking (at the first one, or at the end if none) that the
        range's start record was the first one the reader got."""
        first = True
        for record in records:
            if first and start_is_gone(r.begin, reader.first_sequence_number):
                lose(f"its records before sequence number {reader.first_sequence_number} were "
                     "trimmed before they were read")
            first = False
            yield record
        if first and start_is_gone(r.begin, reader.first_sequence_number):
            lose("none of its records is left")

    last: Record | None = None  # its position only when needed: building one costs microseconds
    try:
        for record in checked(reader.iter_records(until=r.end, stop_when_caught_up=True)):
            last = record
            yield record
    except StartingPositionRejectedError as exc:
        lose(f"Kinesis refused its start ({exc.__cause__ or exc})")
        reader = _reader(kinesis, r, InitialPosition.TRIM_HORIZON, options)
        done: Checkpoint = r.begin if last is None else last.position
        for record in reader.iter_records(until=r.end, stop_when_caught_up=True):
            if record.position > done:  # never a record yielded already or before the start
                last = record
                yield record
    except ShardNotFoundError:
        lose("the shard is gone")
    if (last is None or last.position != r.end) and not lost:
        ended = None if last is None else last.position
        lose(f"the read ended at {describe(ended)}, before the range's end: its records are no longer "
             "readable")


class RangeReader(Protocol):
    """What a range read needs from a reader: :class:`ShardReader` (GetRecords) or
    :class:`~spark_integration.fanout_range.FanOutRangeReader` (SubscribeToShard)."""

    @property
    def first_sequence_number(self) -> str | None: ...

    def iter_records(self, *, until: Position | None = None,
                     stop_when_caught_up: bool = True) -> Iterator[Record]: ...


def _reader(kinesis: Any, r: ShardRange, start: Checkpoint,
            options: KinesisOptions) -> RangeReader:
    """The reader of ``options.consumer_type`` for range ``r``, from ``start``."""
    limit = max(1, min(r.limit, MAX_GET_RECORDS_LIMIT))
    if options.consumer_type == "SubscribeToShard":
        assert options.consumer_name is not None
        return FanOutRangeReader(kinesis, r.stream, r.shard_id, options.consumer_name, start,
                                 max_records=limit)
    return ShardReader(kinesis, r.stream, r.shard_id, start, max_records=limit, idle_backoff=0.0)
