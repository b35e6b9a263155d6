"""Read one shard range over Enhanced Fan-Out (``consumerType=SubscribeToShard``).

The stream consumer ``consumerName`` is described, or registered if it does not exist, by the
Worker's :class:`~kinesis.consumer.retrieval.fanout.ConsumerRegistration` (once per process
and stream: the driver at the query's start, so a missing permission or the consumer quota
fails the query at once, and each executor's Python worker before its first subscription).

:class:`FanOutRangeReader` wraps the Worker's :class:`~kinesis.consumer.retrieval.fanout.FanOutReader`
for one bounded read: it subscribes from the range's start as the offsets say (a logged
position: ``AT_SEQUENCE_NUMBER`` of that record, which is dropped with everything before it,
since a position may sit inside a KPL aggregate, so the read starts strictly after it; an
initial position: ``TRIM_HORIZON`` or ``AT_TIMESTAMP``), yields records up to the range's end
(inclusive), and closes the subscription. Records an event delivers beyond the end are not
yielded. It also stops at SHARD_END, and (with ``stop_when_caught_up``) at an event that brings
nothing new with ``MillisBehindLatest`` 0. Without any event for ``idle_timeout`` seconds (for
instance another live subscription of the same consumer to the shard keeps refusing this one)
it raises :class:`~kinesis.errors.KinesisRetriesExhaustedError`.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

from kinesis.consumer.retrieval import (
    Checkpoint,
    ConsumerRegistration,
    FanOutReader,
    Position,
    Record,
    until_end,
)
from kinesis.errors import FanOutConsumerLimitError, KinesisRetriesExhaustedError
from spark_integration.options import KinesisOptions

#: Seconds a range read waits for a first (or next) event before it gives up.
IDLE_TIMEOUT_S = 120.0
#: Where errors of the registration and the subscriptions point for more retries.
RETRY_BUDGET = "spark.task.maxFailures (the task is retried)"

_REGISTRATIONS: dict[tuple[int, str, str], ConsumerRegistration] = {}
_LOCK = threading.Lock()


def registration(kinesis: Any, stream: str, consumer_name: str) -> ConsumerRegistration:
    """This process's registration of ``consumer_name`` on ``stream``, ACTIVE."""
    key = (id(kinesis), stream, consumer_name)
    with _LOCK:
        found = _REGISTRATIONS.get(key)
        if found is None:
            found = ConsumerRegistration(kinesis, stream, consumer_name, poll_interval=0.5,
                                         retry_option=RETRY_BUDGET)
            _REGISTRATIONS[key] = found
    try:
        found.ensure()
    except FanOutConsumerLimitError as exc:
        raise FanOutConsumerLimitError(
            f"{exc} (Spark source: reuse a registered consumer as consumerName, or read with "
            "consumerType=GetRecords)") from exc
    return found


def ensure_consumers(kinesis: Any, options: KinesisOptions) -> None:
    """With SubscribeToShard, register (or find) the consumer on every stream now."""
    if options.consumer_type == "SubscribeToShard":
        assert options.consumer_name is not None
        for stream in options.streams:
            registration(kinesis, stream, options.consumer_name)


class FanOutRangeReader:
    """One bounded SubscribeToShard read of a shard (see the module docstring)."""

    def __init__(self, kinesis: Any, stream: str, shard_id: str, consumer_name: str,
                 start: Checkpoint, *, max_records: int, idle_timeout: float = IDLE_TIMEOUT_S,
                 min_subscribe_interval: float = 1.0):
        self.idle_timeout = idle_timeout
        self._reader = FanOutReader(
            kinesis, stream, shard_id, registration(kinesis, stream, consumer_name), start,
            max_records=max_records, min_subscribe_interval=min_subscribe_interval,
            retry_option=RETRY_BUDGET,
        )

    @property
    def first_sequence_number(self) -> str | None:
        """The first Kinesis record the subscription delivered (before filtering)."""
        return self._reader.first_sequence_number

    @property
    def stats(self) -> Any:
        """The fan-out reader's counters (subscribe calls, events, records)."""
        return self._reader.stats

    def iter_records(self, *, until: Position | None = None,
                     stop_when_caught_up: bool = True) -> Iterator[Record]:
        """Records from the start up to ``until`` (inclusive); the subscription is closed on
        return (also when the caller stops early)."""
        reader = self._reader
        deadline = time.monotonic() + self.idle_timeout
        try:
            while True:
                events = reader.stats.events
                batch = reader.read_batch()
                end = until_end(batch.records, until)
                if end is not None:  # the range ends in this batch (what is beyond is not part of it)
                    yield from batch.records[:end]
                    return
                yield from batch.records
                if batch.shard_ended or batch.stopped:
                    return
                if reader.stats.events > events:
                    deadline = time.monotonic() + self.idle_timeout
                    if (stop_when_caught_up and not batch.records
                            and batch.millis_behind_latest == 0):
                        return
                elif time.monotonic() > deadline:
                    raise KinesisRetriesExhaustedError(
                        f"SubscribeToShard on shard {reader.shard_id} of stream "
                        f"{reader.stream_name!r} delivered no event for {self.idle_timeout:g} s "
                        f"(consumer {reader.registration.consumer_name!r}; {reader.stats}). "
                        "Kinesis keeps one subscription per consumer and shard: is another "
                        "application reading with the same consumerName?")
        finally:
            reader.close()
