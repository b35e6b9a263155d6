"""Read one shard: GetShardIterator, then a GetRecords loop, with backoff and iterator recovery.

:class:`ShardReader` keeps its own shard iterator and the position of the last record it
delivered, so it can recover from an expired iterator without losing or repeating a record.
It never sleeps between batches itself: each :class:`ReadResult` carries ``suggested_wait``,
and :meth:`ShardReader.wait` waits on the reader's stop event, so a shutdown is immediate.
Transient errors (throttling, 5xx, dropped connections) are retried with jittered exponential
backoff inside :meth:`ShardReader.read_batch`; those sleeps are interruptible too.

:func:`read_range` is the bounded convenience: the records after one position up to another.
"""

from __future__ import annotations

import bisect
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal, Protocol

from botocore.exceptions import ClientError

from kinesis.aws_errors import error_code
from kinesis.consumer.discovery.shards import named_client_error
from kinesis.consumer.retrieval import fast_parse
from kinesis.consumer.retrieval.failures import ShutdownRequested, call_with_retries, is_retryable
from kinesis.consumer.retrieval.positions import (
    Checkpoint,
    InitialPosition,
    Position,
    iterator_args,
)
from kinesis.consumer.retrieval.records import Record, records_from_response
from kinesis.durations import check_seconds
from kinesis.errors import (
    ConfigurationError,
    KinesisHashRingError,
    ShardNotFoundError,
    StartingPositionRejectedError,
    StreamNotFoundError,
)

MAX_GET_RECORDS_LIMIT = 10000


@dataclass(frozen=True)
class ReadResult:
    """One batch from :meth:`ShardReader.read_batch`."""

    records: list[Record]
    millis_behind_latest: int | None
    shard_ended: bool
    """True once every record of a closed shard was delivered (SHARD_END)."""
    suggested_wait: float = 0.0
    """Seconds to wait before the next call: ``idle_backoff`` after a batch at the tip of the
    shard (empty or not), else 0 (the next call itself waits out what remains of
    ``min_read_interval`` since the last call started)."""
    child_shard_ids: tuple[str, ...] = ()
    """At SHARD_END, the children GetRecords named (empty if the service did not say)."""
    stopped: bool = False
    """True when the stop event interrupted the read; ``records`` is then empty."""
    lost: DataGap | None = None
    """Set when the read found its resume position trimmed (:class:`DataGap`)."""
    fresh: bool = True
    """False when nothing was read (a fan-out wait without an event): ``millis_behind_latest``
    is then the last read's, not news."""


@dataclass(frozen=True)
class DataGap:
    """A reader resumed at ``after`` (the last record delivered, or a checkpoint) and Kinesis no
    longer has it: the retention period trimmed it. The oldest record still there is
    ``first_available``; the records between the two, if any were written, are lost (Kinesis
    sequence numbers are not contiguous, so their count cannot be known)."""

    after: Position
    first_available: str
    first_arrival: datetime | None
    """``ApproximateArrivalTimestamp`` of ``first_available``."""
    refused: str | None = None
    """Set when GetShardIterator refused the position outright (its message): the reader goes
    on from ``TRIM_HORIZON``, the oldest record still there, so nothing still there is skipped."""

    @property
    def lost_seconds(self) -> float | None:
        """The span of arrival times the loss covers: from the record resumed after (its
        :attr:`~kinesis.lease_loop.checkpoints.Checkpoint.arrival`, stored with checkpoints of
        records) to the oldest record still there; None when either time is unknown."""
        if self.after.arrival is None or self.first_arrival is None:
            return None
        return max(0.0, (self.first_arrival - self.after.arrival).total_seconds())


@dataclass
class ReaderStats:
    """Counters for tests and metrics."""

    get_records_calls: int = 0
    iterators_acquired: int = 0
    expired_iterators: int = 0
    transient_retries: int = 0
    records_delivered: int = 0


class _Delivered(Protocol):
    records_delivered: int


def until_end(records: list[Record], until: Position | None) -> int | None:
    """How many of ``records`` (in shard order) are at or before ``until`` when the batch
    reaches it, else None (every record is before it: the range goes on). One position a batch
    and a bisection, not a position per record (building one costs microseconds)."""
    if until is None or not records:
        return None
    if until.is_initial:
        return 0  # every record is after an initial position
    if records[-1].position < until:  # SHARD_END included: the range goes on
        return None
    return bisect.bisect_right(records, until.key, key=_record_key)


def _record_key(record: Record) -> tuple[int, int]:
    return int(record.sequence_number), record.sub_sequence_number


def check_reader_args(max_records: int, start: object) -> None:
    """The arguments both readers share: ``max_records`` in 1..10000, ``start`` a position."""
    if not 1 <= max_records <= MAX_GET_RECORDS_LIMIT:
        raise ConfigurationError(
            f"max_records must be in 1..{MAX_GET_RECORDS_LIMIT} (GetRecords Limit), got {max_records}"
        )
    if not isinstance(start, Position | InitialPosition):
        raise ConfigurationError(
            f"start must be a Position (resume after a checkpoint) or an InitialPosition, got {start!r}"
        )


class BatchCursor:
    """Where a reader stands in its shard, whatever fetches the records (GetRecords or
    SubscribeToShard): the last record delivered (where a resume starts), the records fetched
    but not delivered yet (they come first), and the shard's end with its children.

    The readers fetch; the cursor decides what a fetch delivers: records at or before the
    resume position are dropped (a checkpoint inside an aggregated record, an AT_SEQUENCE_NUMBER
    start), at most ``max_records`` go out per batch, and SHARD_END is reported only once every
    fetched record was delivered."""

    def __init__(self, stream_name: str, shard_id: str, start: Checkpoint, max_records: int, stats: _Delivered):
        self.stream_name = stream_name
        self.shard_id = shard_id
        self.max_records = max_records
        self.stats = stats
        self.resume: Position | None = start if isinstance(start, Position) else None
        self.millis_behind: int | None = None
        self.first_sequence_number: str | None = None
        self.exhausted = False  # the shard is closed and its last records were fetched
        self.children: tuple[str, ...] = ()
        self._pending: list[Record] = []
        self._verify: Position | None = None  # a fetch from here must return this record first
        self._gap: DataGap | None = None

    def refused(self, message: str) -> None:
        """Kinesis refused to start at :attr:`resume` (trimmed, or not of this shard): report a
        :class:`DataGap` with the next batch and deliver from the trim horizon on, dropping
        nothing (a refused position cannot be compared with this shard's records)."""
        assert self.resume is not None
        self._gap = DataGap(self.resume, "TRIM_HORIZON", None, refused=message)
        self.resume = None
        self._verify = None

    def expect_resume(self) -> None:
        """The next fetch starts AT_SEQUENCE_NUMBER of :attr:`resume` (a new iterator or
        subscription): its first record must be that record, unless the retention period
        trimmed it (:class:`DataGap`, reported with the next batch)."""
        self._verify = self.resume

    @property
    def shard_ended(self) -> bool:
        return self.exhausted and not self._pending

    def held(self) -> ReadResult | None:
        """The next batch of records fetched earlier, or the end of the shard; None if the
        reader has to fetch."""
        if self._pending:
            batch, self._pending = self._pending[: self.max_records], self._pending[self.max_records:]
            return self.deliver(batch)
        if self.exhausted:
            return ReadResult([], self.millis_behind, True, 0.0, self.children)
        return None

    def fetched(self, raw: Sequence[Mapping[str, Any]] | fast_parse.DecodedRecords,
                millis_behind: int | None) -> list[Record]:
        """The records of one fetch past the resume position (aggregates unpacked); ``raw`` is
        botocore's ``Records``, or the records themselves (:class:`fast_parse.DecodedRecords`)."""
        self.millis_behind = millis_behind
        if isinstance(raw, fast_parse.DecodedRecords):
            records: list[Record] = raw
            first = raw.first
        else:
            records = records_from_response(self.stream_name, self.shard_id, raw)
            arrival = raw[0].get("ApproximateArrivalTimestamp") if raw else None
            first = (str(raw[0]["SequenceNumber"]), arrival if isinstance(arrival, datetime) else None) if raw else None
        if first is not None and self.first_sequence_number is None:
            self.first_sequence_number = first[0]
        if first is not None and self._verify is not None:
            if first[0] != self._verify.sequence_number:
                self._gap = DataGap(self._verify, first[0], first[1])
            self._verify = None
        resume = self.resume
        if resume is not None and records and not records[0].position > resume:
            # records come in shard order: only a fetch that starts at or before the resume
            # position (a new iterator, an aggregate resumed inside) has any to drop
            records = [r for r in records if r.position > resume]
        return records

    def end(self, child_shards: Sequence[Mapping[str, Any]] | None) -> None:
        """The shard is closed: this fetch was its last."""
        self.exhausted = True
        self.children = tuple(str(c["ShardId"]) for c in child_shards or ())

    def deliver(self, records: list[Record], pause: float = 0.0, *, split: bool = False) -> ReadResult:
        """Hand out ``records``; ``pause`` is the wait the fetch asks for (none while records
        are held). ``split``: at most ``max_records`` now, the rest with the next batches (a
        fan-out event has no Limit; a GetRecords batch keeps its unpacked aggregates whole,
        as KCL delivers them)."""
        if split and len(records) > self.max_records:
            records, self._pending = records[: self.max_records], records[self.max_records:] + self._pending
        if records:
            self.resume = records[-1].position
            self.stats.records_delivered += len(records)
        ended = self.shard_ended
        wait = 0.0 if ended or self._pending else pause
        gap, self._gap = self._gap, None
        return ReadResult(records, self.millis_behind, ended, wait, self.children if ended else (), lost=gap)

    def hold_back(self, records: list[Record], resume: Position | None) -> None:
        """Take back records delivered but not used; they come first next time."""
        if records:
            self._pending = records + self._pending
            self.stats.records_delivered -= len(records)
            self.resume = resume

    def empty(self, *, stopped: bool = False) -> ReadResult:
        gap, self._gap = (None, self._gap) if stopped else (self._gap, None)
        return ReadResult([], self.millis_behind, False, 0.0, stopped=stopped, lost=gap, fresh=False)


class ShardReader:
    """Reads one shard from ``start`` (a checkpoint :class:`Position` or an :class:`InitialPosition`).

    ``max_records`` is GetRecords' ``Limit`` (1..10000). Kinesis allows 5 GetRecords calls per
    second per shard, shared by every application reading it, so calls are paced: after a batch
    at the tip of the shard (``MillisBehindLatest`` 0 and fewer than ``max_records`` records,
    empty or not) :attr:`ReadResult.suggested_wait` is ``idle_backoff`` (AWS's advice of one
    poll a second per application, KCL's ``idleTimeBetweenReadsInMillis``), and every call
    starts at least ``min_read_interval`` after the previous one started (catching up, the time
    spent processing a batch counts). ``stop_event`` (shared with a worker's shutdown,
    optional) interrupts retries and :meth:`wait`. ``refused_resume``: what a refused resume
    position (GetShardIterator's ``InvalidArgumentException``) does: ``"raise"``
    :class:`StartingPositionRejectedError` (default: the caller decides, as Spark's
    ``failOnDataLoss``), or ``"trim_horizon"``: a :class:`DataGap` with the next batch, then
    reading from the oldest record still there (the Worker's ``on_data_loss``).

    GetRecords responses are parsed by :mod:`~kinesis.consumer.retrieval.fast_parse`, installed
    on ``kinesis_client`` (its other calls, and anything that parser does not recognise, stay
    botocore's); arrival times are UTC datetimes.

    Not thread-safe: one reader is driven by one thread.
    """

    def __init__(
        self,
        kinesis_client: Any,
        stream_name: str,
        shard_id: str,
        start: Checkpoint = InitialPosition.LATEST,
        *,
        max_records: int = MAX_GET_RECORDS_LIMIT,
        idle_backoff: float = 1.0,
        min_read_interval: float = 0.0,
        max_attempts: int = 8,
        max_wait: float = 5.0,
        max_iterator_renewals: int = 3,
        stop_event: threading.Event | None = None,
        retry_option: str = "ShardReader(max_attempts=...)",
        refused_resume: Literal["raise", "trim_horizon"] = "raise",
    ):
        check_reader_args(max_records, start)
        if refused_resume not in ("raise", "trim_horizon"):
            raise ConfigurationError(f"refused_resume must be 'raise' or 'trim_horizon', got {refused_resume!r}")
        self.refused_resume = refused_resume
        check_seconds("idle_backoff", idle_backoff, allow_zero=True)
        check_seconds("min_read_interval", min_read_interval, allow_zero=True)
        if max_attempts < 1:
            raise ConfigurationError(f"max_attempts must be >= 1, got {max_attempts}")
        self.client = kinesis_client
        fast_parse.install(kinesis_client)
        self.stream_name = stream_name
        self.shard_id = shard_id
        self.start = start
        self.max_records = max_records
        self.idle_backoff = idle_backoff
        self.min_read_interval = min_read_interval
        self.max_attempts = max_attempts
        self.retry_option = retry_option
        self.max_wait = max_wait
        self.max_iterator_renewals = max_iterator_renewals
        self.stop_event = stop_event if stop_event is not None else threading.Event()
        self.stats = ReaderStats()
        self._iterator: str | None = None
        self._cursor = BatchCursor(stream_name, shard_id, start, max_records, self.stats)
        self._latest_at: datetime | None = None
        self._last_call_at: float | None = None  # when the last GetRecords request was sent

    # -- state ---------------------------------------------------------------------------
    @property
    def first_sequence_number(self) -> str | None:
        """The sequence number of the first Kinesis record any GetRecords returned, before
        records up to the start position were dropped; None until one was returned. Started
        from a :class:`Position`, it is that position's own record unless it is gone."""
        return self._cursor.first_sequence_number

    @property
    def last_position(self) -> Position | None:
        """The last record delivered (or the start checkpoint): where a resume would start."""
        return self._cursor.resume

    @property
    def shard_ended(self) -> bool:
        """True once SHARD_END was reached and every record was delivered."""
        return self._cursor.shard_ended

    def stop(self) -> None:
        """Set the stop event: pending waits and backoffs return at once."""
        self.stop_event.set()

    def wait(self, seconds: float) -> bool:
        """Wait up to ``seconds`` on the stop event; True if the reader was stopped."""
        return self.stop_event.wait(seconds) if seconds > 0 else self.stop_event.is_set()

    def close(self) -> None:
        """Nothing to release (GetRecords holds no connection open); the fan-out reader's does."""

    # -- reading -------------------------------------------------------------------------
    def read_batch(self) -> ReadResult:
        """One GetRecords call (or the records held back by :meth:`iter_records`)."""
        cursor = self._cursor
        held = cursor.held()
        if held is not None:
            return held
        if self.stop_event.is_set():
            return cursor.empty(stopped=True)
        if self._last_call_at is not None and self.wait(self._last_call_at + self.min_read_interval - time.monotonic()):
            return cursor.empty(stopped=True)
        try:
            response = self._get_records()
        except ShutdownRequested:
            return cursor.empty(stopped=True)
        self._iterator = response.get("NextShardIterator")
        raw = response.get("Records", ())
        records = cursor.fetched(raw, response.get("MillisBehindLatest"))
        if self._iterator is None:
            cursor.end(response.get("ChildShards"))
        fetched = raw.kinesis_records if isinstance(raw, fast_parse.DecodedRecords) else len(raw)
        at_tip = cursor.millis_behind in (0, None) and fetched < self.max_records  # Limit counts Kinesis records
        return cursor.deliver(records, self.idle_backoff if at_tip else 0.0)

    def iter_records(
        self,
        *,
        until: Position | None = None,
        max_records: int | None = None,
        stop_when_caught_up: bool = True,
    ) -> Iterator[Record]:
        """Yield records until ``until`` (inclusive), ``max_records``, SHARD_END, or caught up.

        With ``stop_when_caught_up`` it returns at the first empty batch that reports no lag
        (reading again at once after a batch with records); otherwise it follows the shard,
        waiting ``suggested_wait`` between batches, until the reader is stopped. Records read
        but not yielded are kept for the next read.
        """
        if max_records is not None and max_records < 1:
            raise ConfigurationError(f"max_records must be >= 1 or None, got {max_records}")
        count = 0
        while True:
            resume = self._cursor.resume
            batch = self.read_batch()
            records = batch.records
            end = until_end(records, until)
            stop = end is not None
            end = len(records) if end is None else end
            if max_records is not None and count + end >= max_records:
                end, stop = max_records - count, True
            for index in range(end):
                record = records[index]
                try:
                    yield record
                except GeneratorExit:  # the caller stopped early: keep the rest for later
                    self._hold_back(records[index + 1 :], record.position)
                    raise
            count += end
            if stop:
                self._hold_back(records[end:], records[end - 1].position if end else resume)
                return
            if batch.shard_ended or batch.stopped:
                return
            if stop_when_caught_up and batch.millis_behind_latest in (0, None):
                if not batch.records:
                    return
                continue  # a bounded read ends at the next empty batch: no idle wait first
            if self.wait(batch.suggested_wait):
                return

    def _hold_back(self, records: list[Record], resume: Position | None) -> None:
        self._cursor.hold_back(records, resume)

    # -- AWS calls -----------------------------------------------------------------------
    def _get_records(self) -> dict[str, Any]:
        renewals = 0
        while True:
            if self._iterator is None:
                self._iterator = self._acquire_iterator()
            iterator = self._iterator
            try:
                self._last_call_at = time.monotonic()
                self.stats.get_records_calls += 1
                response: dict[str, Any] = self._call(lambda it=iterator: self._fetch(it), "GetRecords")
                return response
            except ClientError as exc:
                code = error_code(exc) or ""
                if code == "ExpiredIteratorException" and renewals < self.max_iterator_renewals:
                    # Re-acquire just after the last record delivered: no loss, no duplicate.
                    renewals += 1
                    self.stats.expired_iterators += 1
                    self._iterator = None
                    continue
                named = self._named(exc, "GetRecords")
                if named is None:
                    raise
                raise named from exc

    def _acquire_iterator(self) -> str:
        args: dict[str, object]
        if self._cursor.resume is not None:
            args = iterator_args(self._cursor.resume)
            self._cursor.expect_resume()
        elif isinstance(self.start, InitialPosition) and self.start.kind == "LATEST":
            if self._latest_at is None:
                # Remember when LATEST was taken: if this iterator expires before anything was
                # delivered, AT_TIMESTAMP from here loses nothing that arrived meanwhile.
                self._latest_at = datetime.now(UTC)
                args = iterator_args(self.start)
            else:
                args = iterator_args(InitialPosition.at_timestamp(self._latest_at))
        else:
            args = iterator_args(self.start)
        try:
            response = self._call(
                lambda: self.client.get_shard_iterator(
                    StreamName=self.stream_name, ShardId=self.shard_id, **args
                ),
                "GetShardIterator",
            )
        except ClientError as exc:
            code = error_code(exc) or ""
            if code == "InvalidArgumentException" and self._cursor.resume is not None \
                    and self.refused_resume == "trim_horizon":
                # the position is gone (or never was this shard's): a DataGap, then the oldest record
                self._cursor.refused(str(exc))
                self.start = InitialPosition.TRIM_HORIZON
                return self._acquire_iterator()
            if code == "InvalidArgumentException":
                raise StartingPositionRejectedError(
                    f"GetShardIterator refused to start shard {self.shard_id} of stream "
                    f"{self.stream_name!r} at {args}: {exc}"
                ) from exc
            named = self._named(exc, "GetShardIterator")
            if named is None:
                raise
            raise named from exc
        self.stats.iterators_acquired += 1
        iterator: str = response["ShardIterator"]
        return iterator

    def _call(self, fn: Any, operation: str) -> dict[str, Any]:
        def counted() -> dict[str, Any]:
            try:
                result: dict[str, Any] = fn()
            except Exception as exc:
                if is_retryable(exc):
                    self.stats.transient_retries += 1
                raise
            return result

        return call_with_retries(
            counted,
            what=f"{operation} on shard {self.shard_id} of stream {self.stream_name!r}",
            max_attempts=self.max_attempts,
            max_wait=self.max_wait,
            stop_event=self.stop_event,
            budget_option=self.retry_option,
        )

    def _fetch(self, iterator: str) -> dict[str, Any]:
        """One GetRecords call; its ``Records`` are the SDK's records when the fast decoder
        recognises the body (:func:`fast_parse.reading`)."""
        with fast_parse.reading(self.stream_name, self.shard_id):
            response: dict[str, Any] = self.client.get_records(ShardIterator=iterator, Limit=self.max_records)
        return response

    def _named(self, exc: ClientError, operation: str) -> KinesisHashRingError | None:
        """The named error for a non-retryable ClientError (None: re-raise it as it is)."""
        if error_code(exc) == "ResourceNotFoundException":
            return self._not_found(exc)
        return named_client_error(self.client, self.stream_name, operation, exc)

    def _not_found(self, exc: ClientError) -> KinesisHashRingError:
        message = str(exc.response.get("Error", {}).get("Message", ""))
        if "shard" in message.lower() and self.shard_id in message:
            return ShardNotFoundError(
                f"shard {self.shard_id!r} does not exist in Kinesis stream {self.stream_name!r} "
                f"({message}). List the stream's shards (ShardDiscovery) and use one of those ids; "
                "a shard older than the retention period is trimmed."
            )
        error = named_client_error(self.client, self.stream_name, "GetRecords", exc)
        assert isinstance(error, StreamNotFoundError)
        return error



def read_range(
    kinesis_client: Any,
    stream_name: str,
    shard_id: str,
    after: Checkpoint,
    until: Position | None = None,
    max_records: int | None = None,
    *,
    batch_size: int = MAX_GET_RECORDS_LIMIT,
    stop_event: threading.Event | None = None,
) -> Iterator[Record]:
    """Yield the records of one shard strictly after ``after`` and up to ``until`` (inclusive).

    ``after`` is a :class:`Position` (exclusive) or an :class:`InitialPosition`. Stops at
    ``until``, after ``max_records``, at SHARD_END, or when the shard is caught up (so an
    ``until`` that was trimmed or never written cannot make it hang). Replaying the same
    arguments yields the same records as long as they are retained.
    """
    reader = ShardReader(
        kinesis_client, stream_name, shard_id, after,
        max_records=batch_size, idle_backoff=0.0, stop_event=stop_event,
    )
    yield from reader.iter_records(until=until, max_records=max_records, stop_when_caught_up=True)
