"""One thread per held shard lease: a reader feeding a processor.

The reader is a :class:`~kinesis.consumer.retrieval.polling.ShardReader` (GetRecords polling) or a
:class:`~kinesis.consumer.retrieval.fanout.FanOutReader` (Enhanced Fan-Out), picked by
``StreamConfig.retrieval`` (:mod:`kinesis.consumer.retrieval.readers`); everything below is the same
for both.

:class:`~kinesis.consumer.worker.pool.ConsumerPool` is the worker's
:class:`~kinesis.lease_loop.coordinator.LeaseListener`; the lease coordinator calls it (on its
tick thread) and it starts or stops :class:`ShardConsumer` threads, never blocking the tick:

* ``on_lease_acquired(lease)``: a new :class:`ShardConsumer` starts at ``lease.checkpoint``
  (just after the checkpointed record, or at the initial position). A consumer still running
  for the same key (a lease lost and taken back) is waited for first, so a shard is never
  processed by two threads at once.
* ``on_handoff_requested(lease)``: the consumer finishes its current batch, calls
  ``processor.shutdown_requested(checkpointer)`` (which checkpoints), and only then completes
  the returned event; the coordinator passes the lease on with that checkpoint, so the next
  owner starts right after the last processed record: no gap, no duplicate.
* ``on_lease_lost(lease)``: the consumer stops after its current batch and calls
  ``processor.lease_lost()``; its checkpointer refuses every later checkpoint.

The processor lifecycle per lease is ``initialize``, ``process_records`` for every non-empty
batch, then exactly one of ``shard_ended`` (then the lease is released with its ``SHARD_END``
checkpoint, and the children become ready), ``shutdown_requested`` or ``lease_lost``.

Before every read the consumer checks ``coordinator.holds(key)``: a member whose lease is past
its local validity (renewals failing) pauses instead of processing, so it never processes
while another member may already hold the lease.

A processor exception never skips records on its own: the consumer keeps the lease and
retries the batch (minus what was checkpointed) with exponential backoff, per
:class:`~kinesis.consumer.shard.failures.ProcessorRetryPolicy`; only its opt-in ``on_exhausted``
handler can skip a batch. An unexpected failure of the consumer itself (not the processor)
releases the lease, which is then taken again from the last checkpoint. Shards without a checkpoint at ``LATEST`` are *pinned* on first acquisition: the
checkpoint becomes ``AT_TIMESTAMP`` of that moment, so a later owner (hand-off or crash)
continues from the same point instead of skipping what arrived in between.

The parts: :mod:`~kinesis.consumer.shard.consumer` (a batch the processor raised on),
:mod:`~kinesis.consumer.retrieval.failures` (the backoff after a failed read),
:mod:`~kinesis.consumer.shard.consumer` (pinning, where a shard starts),
:mod:`~kinesis.consumer.shard.consumer` (``SHARD_END``), :mod:`~kinesis.consumer.shard.consumer`.

Delivering one batch to a processor that raises: retry it in place, with backoff.

The policy (backoff, ``max_attempts``, ``on_exhausted``) is
:class:`~kinesis.consumer.shard.failures.ProcessorRetryPolicy`; this is how a shard
consumer follows it for one batch: count the failed attempt (again from 1 after a
checkpoint), log it, wait, and deliver again what was not checkpointed. Once stuck, the
policy's handler may skip the batch; a handler that raises counts as RETRY. The decisions
(:func:`undelivered`, :func:`exhausted_action`, :func:`logs_stuck`) are pure functions.

The end of a shard: the processor must checkpoint ``SHARD_END`` before the children start.

At the end of a closed shard the consumer tells the processor (``shard_ended``) with a
checkpointer on which ``checkpoint()`` records ``SHARD_END``. Only once that checkpoint is
written may the lease be released as ended (the child shards become ready); a processor that
did not checkpoint leaves the shard to be delivered again, with an error saying so.

Where a shard consumer starts: the lease's checkpoint, pinned first if it is ``LATEST``.

A shard without a checkpoint at ``LATEST`` is *pinned* on first acquisition: the checkpoint
becomes ``AT_TIMESTAMP`` of that moment, so a later owner (hand-off or crash) continues from
the same point instead of skipping what arrived in between. Pure: the consumer writes the
pinned checkpoint and builds its checkpointer and processor from :class:`StartPoint`.

What a shard consumer shows and what it sees of the lease coordinator.

:class:`ShardStatus` is one consumer's line in :meth:`Worker.status()
<kinesis.consumer.worker.worker.Worker.status>`; :class:`ConsumerLeases` is the part of the
:class:`~kinesis.lease_loop.coordinator.LeaseCoordinator` a consumer calls, and
:class:`NoCoordinator` stands in for it until the worker wires its coordinator in.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from operator import attrgetter
from typing import TYPE_CHECKING, Protocol

from kinesis.consumer.kclpy import adapt_processor
from kinesis.consumer.keyed.async_batch import AsyncBatchBridge, is_async
from kinesis.consumer.keyed.processor import KeyedProcessor
from kinesis.consumer.keyed.runner import Counting, KeyedRunner, KeyedStatus
from kinesis.consumer.retrieval.failures import MAX_READ_BACKOFF, READ_ERRORS, ReadFailures
from kinesis.consumer.retrieval.polling import DataGap
from kinesis.consumer.retrieval.positions import Checkpoint, InitialPosition, Position
from kinesis.consumer.retrieval.readers import BatchReader
from kinesis.consumer.retrieval.records import Record
from kinesis.consumer.shard.checkpointer import LeaseCheckpointer
from kinesis.consumer.shard.failures import (
    FailedBatch,
    FailureAction,
    FailureState,
    ProcessorRetryPolicy,
)
from kinesis.consumer.shard.lag import LagTracker
from kinesis.consumer.shard.load import LoadSample, ShardLoad
from kinesis.consumer.shard.processor import InitializationInput, RecordProcessor
from kinesis.consumer.worker.config import ProcessorFactory, StreamConfig
from kinesis.errors import KinesisHashRingError, LeaseLostError
from kinesis.lease_loop.table.model import Lease

if TYPE_CHECKING:
    from kinesis.consumer.worker.pool import ConsumerPool

__all__ = ["MAX_READ_BACKOFF", "READ_ERRORS", "ConsumerLeases", "ShardConsumer", "ShardStatus"]


log = logging.getLogger(__name__)
"""The shard consumer's logger: these lines keep the name operators filter on."""
_data = attrgetter("data")


class RetryingConsumer(Protocol):
    """The part of :class:`~kinesis.consumer.shard.consumer.ShardConsumer` a retry uses."""

    key: str
    shard_id: str
    state: str
    failure: FailureState
    call_started: float | None
    advanced_at: float

    @property
    def spec(self) -> StreamConfig: ...

    @property
    def pool(self) -> Counting: ...

    def wait_to_retry(self, delay: float) -> bool: ...


def undelivered(records: list[Record], done: Position | None) -> list[Record]:
    """The records of a batch after the checkpoint ``done`` (all of them without one)."""
    return records if done is None else [r for r in records if r.position > done]


def exhausted_action(policy: ProcessorRetryPolicy, batch: FailedBatch) -> tuple[FailureAction, Exception | None]:
    """The policy's action for a stuck batch, and the handler's error if it raised (then RETRY)."""
    try:
        return policy.decide(batch), None
    except Exception as exc:
        return FailureAction.RETRY, exc


def logs_stuck(attempts: int, policy: ProcessorRetryPolicy) -> bool:
    """Whether a stuck batch's attempt gets the STUCK error line (the first, then every 10th)."""
    return attempts == policy.max_attempts or attempts % 10 == 0


def deliver(
    consumer: RetryingConsumer,
    records: list[Record],
    lag: int | None,
    processor: RecordProcessor,
    checkpointer: LeaseCheckpointer,
    policy: ProcessorRetryPolicy,
) -> bool:
    """Deliver one batch, retrying in place with backoff while the processor raises.

    Returns False if the consumer was stopped meanwhile (see :mod:`kinesis.consumer.shard.failures`).
    """
    base = checkpointer.last_checkpoint
    attempts = 0
    while True:
        try:
            consumer.call_started = time.monotonic()  # the watchdog times the call (worker.watchdog)
            try:
                processor.process_records(records, checkpointer, millis_behind_latest=lag)
            finally:
                consumer.advanced_at = time.monotonic()  # first: the call's time is not the reader's
                consumer.call_started = None
        except LeaseLostError:
            raise
        except Exception as exc:
            if checkpointer.last_checkpoint != base:  # progress: a new (shard, checkpoint)
                base, attempts = checkpointer.last_checkpoint, 0
            attempts += 1
            consumer.pool.count("processor_errors")
            if not after_failure(consumer, records, exc, attempts, policy):
                return True  # skipped by the policy's handler
            if not consumer.wait_to_retry(policy.backoff(attempts)):
                return False
            records = undelivered(records, checkpointer.last_checkpoint)
            if not records:
                break
            continue
        break
    if consumer.failure.attempts:
        log.info("%s: batch processed after %d failed attempts", consumer.key, consumer.failure.attempts)
    consumer.failure = FailureState()
    consumer.state = "processing"
    return True


def after_failure(
    consumer: RetryingConsumer, records: list[Record], exc: Exception, attempts: int, policy: ProcessorRetryPolicy
) -> bool:
    """Log, count and record one failed attempt; False if the batch is to be skipped."""
    key = consumer.key
    summary = f"{type(exc).__name__}: {exc}"
    where = f"records {records[0].sequence_number}..{records[-1].sequence_number}"
    stuck = attempts >= policy.max_attempts
    consumer.failure = FailureState(attempts, summary, stuck)
    consumer.state = "stuck" if stuck else "retrying"
    if attempts == 1:
        log.warning("%s: processor raised on %s (attempt 1, retrying in %.1f s): %s",
                    key, where, policy.backoff(1), summary, exc_info=True)
    elif not stuck:
        log.warning("%s: processor raised on %s (attempt %d, retrying in %.1f s): %s",
                    key, where, attempts, policy.backoff(attempts), summary)
    if not stuck:
        return True
    batch = FailedBatch(key, consumer.spec.stream, consumer.shard_id, tuple(records), attempts, exc)
    action, handler_exc = exhausted_action(policy, batch)
    if handler_exc is not None:
        log.error("%s: on_exhausted raised %s: %s (the batch is retried)",
                  key, type(handler_exc).__name__, handler_exc)
    if action is FailureAction.SKIP:
        log.warning("%s: %s skipped by on_exhausted after %d attempts: %s", key, where, attempts, summary)
        consumer.pool.count("batches_skipped")
        consumer.pool.count("records_skipped", len(records))
        consumer.failure = FailureState()
        return False
    if logs_stuck(attempts, policy):
        log.error("%s: STUCK on %s after %d attempts, retrying every %.0f s: %s",
                  key, where, attempts, policy.max_backoff, summary)
    return True


"""The shard consumer's logger: this line keeps the name operators filter on."""


def finish_shard(key: str, processor: RecordProcessor, checkpointer: LeaseCheckpointer,
                 stopping: Callable[[], bool] = lambda: False) -> bool:
    """Tell the processor the shard ended; True if it checkpointed ``SHARD_END``. A processor
    that returns without it because the consumer is being stopped (a keyed runner handed off
    meanwhile) is not an error: the caller then stops as for any hand-off or loss."""
    checkpointer.mark_shard_end()
    processor.shard_ended(checkpointer)
    if checkpointer.shard_end_checkpointed:
        return True
    if stopping():
        return False
    log.error(
        "%s: shard_ended() did not checkpoint; the shard will be delivered again "
        "and its children cannot start. Call checkpointer.checkpoint() in shard_ended.",
        key,
    )
    return False


def pinned_start(checkpoint: Checkpoint, now: datetime) -> Checkpoint | None:
    """The ``AT_TIMESTAMP`` checkpoint to write before reading from ``LATEST`` (None otherwise)."""
    return Checkpoint.at_timestamp(now) if checkpoint.sequence_number == "LATEST" else None


@dataclass(frozen=True)
class StartPoint:
    """What the processor's ``initialize`` and the lease checkpointer are told."""

    last: Position | None
    """The last checkpointed record (the reader starts just after it), or None."""
    pending: Position | None
    """A prepared checkpoint still ahead of :attr:`last`, or None."""
    initial: InitialPosition
    """The lease's initial position, or the stream's when it has a record checkpoint."""


def start_point(checkpoint: Checkpoint, pending: Checkpoint | None, stream_start: InitialPosition) -> StartPoint:
    """The start of a shard whose lease holds ``checkpoint`` (already pinned) and ``pending``."""
    return StartPoint(
        last=checkpoint if isinstance(checkpoint, Position) else None,
        pending=pending_position(pending, checkpoint),
        initial=checkpoint if isinstance(checkpoint, InitialPosition) else stream_start,
    )


def pending_position(pending: Checkpoint | None, checkpoint: Checkpoint) -> Position | None:
    """The lease's pending checkpoint, if it is still ahead of the checkpoint (a member of an
    older release may have checkpointed past it without clearing it)."""
    if not isinstance(pending, Position) or not checkpoint < pending:
        return None
    return pending


class ConsumerLeases(Protocol):
    """The part of :class:`~kinesis.lease_loop.coordinator.LeaseCoordinator` a consumer uses."""

    def holds(self, key: str) -> bool: ...

    def lease(self, key: str) -> Lease | None: ...

    def checkpoint(self, key: str, checkpoint: Checkpoint | str | object, *, completed: str | None = None) -> Lease: ...

    def prepare_checkpoint(self, key: str, checkpoint: Checkpoint | str | object) -> Lease: ...

    def release(self, key: str) -> bool: ...


@dataclass(frozen=True)
class ShardStatus:
    """What one shard consumer is doing (part of :meth:`Worker.status`)."""

    key: str
    application: str
    stream: str
    shard_id: str
    state: str
    """starting, processing, retrying, stuck, data-loss, shutting-down, ended, lost, failed or stopped."""
    records_processed: int
    batches: int
    millis_behind_latest: int | None
    last_checkpoint: str | None
    failed_attempts: int = 0
    """Failed attempts at the current batch (0 while it goes well)."""
    last_error: str | None = None
    lag_seconds: float | None = None
    """``millis_behind_latest`` in seconds (:mod:`kinesis.consumer.shard.lag`)."""
    lag_age_seconds: float | None = None
    """Seconds since the lag was measured (a large age with a small lag hides a stalled reader)."""
    processing_rate: float | None = None
    """Records per second handed to the processor, smoothed over about a minute."""
    arrival_rate: float | None = None
    """Records per second entering the shard, smoothed (None while no progress is made)."""
    catch_up_seconds: float | None = None
    """Until the lag is 0 at the current trend (0: caught up; ``inf``: not catching up)."""
    processor_call_seconds: float | None = None
    """How long the processor call in progress has run (None between calls)."""
    load: LoadSample | None = None
    """What the shard costs this member, smoothed over about a minute (None at first)."""
    keyed: KeyedStatus | None = None
    """In flight, queued and completed-not-checkpointed records of a keyed-parallel processor."""


class NoCoordinator:
    """Placeholder until the worker wires its coordinator in."""

    def holds(self, key: str) -> bool:
        return False

    def lease(self, key: str) -> Lease | None:
        return None

    def checkpoint(self, key: str, checkpoint: Checkpoint | str | object, *, completed: str | None = None) -> Lease:
        raise LeaseLostError("the worker has no lease coordinator yet")

    def prepare_checkpoint(self, key: str, checkpoint: Checkpoint | str | object) -> Lease:
        raise LeaseLostError("the worker has no lease coordinator yet")

    def release(self, key: str) -> bool:
        return False


class ShardConsumer:
    """Reads one shard lease and drives its processor on a daemon thread (see module docs)."""

    def __init__(
        self,
        pool: ConsumerPool,
        spec: StreamConfig,
        lease: Lease,
        processor_factory: ProcessorFactory,
        previous: ShardConsumer | None = None,
    ):
        self.pool = pool
        self.spec = spec
        self.lease = lease
        self.key = lease.key
        self.shard_id = lease.key[len(spec.key_prefix) :]
        self.processor_factory = processor_factory
        self.previous = previous
        self.state = "starting"
        self.records_processed = 0
        self.batches = 0
        self.millis_behind_latest: int | None = None
        self.lag = LagTracker()
        self.load = ShardLoad()
        """What this shard costs (records/s, bytes/s, CPU, processor time), smoothed."""
        self.call_started: float | None = None
        """When the processor call in progress began (monotonic; None between calls)."""
        self.advanced_at = time.monotonic()
        """When its reads last advanced (records, or a read that found nothing waiting) or it
        last went back to reading (after a processor call, a pause): see :meth:`reader_stalled_for`."""
        self.read_done_at = self.advanced_at
        """When the last read returned (a failed one does not count)."""
        self._reader: BatchReader | None = None
        self._restart_reader = False  # set by the watchdog: the loop starts a new reader
        self._last_lag: int | None = None  # MillisBehindLatest of the last fresh read
        self._gaps_reported: set[tuple[str, int]] = set()  # a restarted reader finds the same loss again
        self.checkpointer: LeaseCheckpointer | None = None
        self.keyed: KeyedRunner | None = None
        """The keyed-parallel runner, when the processor is a KeyedProcessor."""
        self.failure = FailureState()
        self.stopped = threading.Event()
        """Set once the processor is done with this lease (the hand-off completion)."""
        self._wake = threading.Event()  # the reader's stop event: interrupts waits and retries
        self._lock = threading.Lock()
        self._reason: str | None = None  # "handoff", "lost" or "halt"
        self.thread = threading.Thread(target=self._run, name=f"shard-{self.key}", daemon=True)

    # --- control (any thread) -------------------------------------------------------

    def start(self) -> ShardConsumer:
        self.thread.start()
        return self

    def request_handoff(self) -> threading.Event:
        """Finish the current batch, call ``shutdown_requested``, then set the returned event."""
        log.info("%s: hand-off requested", self.key)
        self._stop_for("handoff")
        return self.stopped

    def lease_lost(self) -> None:
        """Stop after the current batch and call ``lease_lost`` (no checkpoint is possible)."""
        self._stop_for("lost")

    def halt(self) -> None:
        """Stop without hand-off (the worker stops without grace): the processor hears lease_lost."""
        self._stop_for("halt")

    def join(self, timeout: float | None = None) -> bool:
        self.thread.join(timeout)
        return not self.thread.is_alive()

    def _stop_for(self, reason: str) -> None:
        with self._lock:
            # "lost" overrides a pending hand-off: no checkpoint can succeed any more
            if self._reason is None or (reason == "lost" and self._reason == "handoff"):
                self._reason = reason
        self._wake.set()

    @property
    def reason(self) -> str | None:
        with self._lock:
            return self._reason

    def status(self) -> ShardStatus:
        cp = self.checkpointer.last_checkpoint if self.checkpointer is not None else None
        lag = self.lag.estimate()
        return ShardStatus(
            key=self.key,
            application=self.spec.application,
            stream=self.spec.stream,
            shard_id=self.shard_id,
            state=self.state,
            records_processed=self.records_processed,
            batches=self.batches,
            millis_behind_latest=self.millis_behind_latest,
            last_checkpoint=None if cp is None else f"{cp.sequence_number}/{cp.sub_sequence_number}",
            failed_attempts=self.failure.attempts,
            last_error=self.failure.error,
            lag_seconds=lag.lag_seconds,
            lag_age_seconds=None if lag.measured_at is None else max(0.0, time.monotonic() - lag.measured_at),
            processing_rate=lag.processing_rate,
            arrival_rate=lag.arrival_rate,
            catch_up_seconds=lag.catch_up_seconds,
            processor_call_seconds=None if (started := self.call_started) is None else time.monotonic() - started,
            load=self.load.sample(),
            keyed=None if (keyed := self.keyed) is None else keyed.status(),
        )

    # --- the thread -------------------------------------------------------------------

    def _run(self) -> None:
        try:
            if self.previous is not None:
                while not self.previous.stopped.wait(0.05):
                    if self.reason is not None:
                        return
            self._consume()
        except Exception as exc:
            log.error("%s: shard consumer failed (the lease is released and taken again from its "
                      "last checkpoint): %s: %s", self.key, type(exc).__name__, exc,
                      exc_info=self.pool.first_failure(self.key, exc))
            self.state = "failed"
            self.pool.count("processor_errors")
            self._release()
        finally:
            self.stopped.set()
            self.pool.finished(self)

    def _consume(self) -> None:
        coordinator = self.pool.coordinator
        checkpoint = self.lease.checkpoint
        if checkpoint.is_shard_end:  # nothing left to read: let the children start
            self.state = "ended"
            self._release()
            return
        pinned = pinned_start(checkpoint, datetime.now(UTC))
        if pinned is not None:
            try:
                coordinator.checkpoint(self.key, pinned)
            except LeaseLostError:
                self.state = "lost"
                return
            checkpoint = pinned
        start = start_point(checkpoint, self.lease.pending_checkpoint, self.spec.start)
        checkpointer = LeaseCheckpointer(
            coordinator, self.key, self.spec.stream, self.shard_id, start.last, start.pending
        )
        self.checkpointer = checkpointer
        made = self.processor_factory()
        processor: RecordProcessor
        if isinstance(made, KeyedProcessor):
            processor = self.keyed = KeyedRunner(
                made, self.pool.keyed_executor(), key=self.key, stream=self.spec.stream, shard_id=self.shard_id,
                start=checkpoint, completed=self.lease.completed, retry=self.pool.config.processor_retry,
                stopping=lambda: self.reason is not None, counters=self.pool,
                valid=lambda: self.pool.coordinator.holds(self.key))
        else:
            processor = adapt_processor(made, self.pool.processor_style,
                                        source=f"the processor factory of stream {self.spec.stream!r}")
            if is_async(processor):
                processor = AsyncBatchBridge(processor, self.pool.keyed_executor())
        processor.initialize(InitializationInput(
            self.spec.stream, self.shard_id, start.last, start.initial, pending_checkpoint=start.pending
        ))
        self._reader = self.pool.make_reader(self.spec, self.shard_id, checkpoint, self._wake)
        self.advanced_at = self.read_done_at = time.monotonic()
        self.state = "processing"
        try:
            ended = self._loop(checkpoint, processor, checkpointer)
        except LeaseLostError as exc:
            log.info("%s: lease lost while processing: %s", self.key, exc)
            if self.reason is None and coordinator.lease(self.key) is not None:
                # the coordinator still holds it (renewals late for longer than a lease
                # duration): give it back so it is planned again rather than left unprocessed
                self._stop_for("failed")
                self._release()
            self._stop_for("lost")
            ended = False
        except BaseException:
            if self.keyed is not None:
                try:
                    self.keyed.abort()  # the consumer fails and releases the lease: nothing of it runs on
                except Exception:
                    log.exception("%s: stopping the keyed runner after a failure failed too", self.key)
            raise
        finally:
            if self._reader is not None:
                self._reader.close()  # a fan-out subscription ends here, before the lease is passed on
        if ended:
            return
        reason = self.reason
        if reason == "handoff":
            self.state = "shutting-down"
            try:
                processor.shutdown_requested(checkpointer)
            except LeaseLostError:
                log.info("%s: lease lost during shutdown_requested", self.key)
            self.state = "stopped"
            log.info("%s: processor finished for the hand-off", self.key)
        else:
            checkpointer.mark_lease_lost()
            self.state = "lost"
            processor.lease_lost()

    def _loop(self, start: Checkpoint, processor: RecordProcessor, checkpointer: LeaseCheckpointer) -> bool:
        """Read and process until stopped (False) or the shard ended (True)."""
        coordinator = self.pool.coordinator
        poll = self.pool.poll_interval
        failures = ReadFailures()
        assert self._reader is not None
        reader = self._reader
        load = self.load
        load.start()
        while self.reason is None:
            if self._restart_reader:
                reader = self._new_reader(reader, start)
            if not coordinator.holds(self.key):
                self._wake.wait(poll)  # renewals late: pause until renewed, lost or stopped
                self.advanced_at = time.monotonic()
                continue
            try:
                batch = reader.read_batch()
                read_at = self.read_done_at = time.monotonic()  # when millis_behind_latest was true
            except READ_ERRORS as exc:
                # keep the lease and read again from the same position, backing off (read_failures)
                self.pool.count("read_errors")
                failed = failures.failed(exc, poll=poll, idle_backoff=self.pool.config.idle_backoff)
                if not failed.repeated:  # the whole message (and a traceback if unexpected) once
                    log.warning("%s: read failed (attempt %d, retrying in %.1f s; the lease is kept): %s",
                                self.key, failed.attempt, failed.delay, failed.error, exc_info=failed.unexpected)
                else:
                    log.warning("%s: read failed again (attempt %d, retrying in %.1f s): %s",
                                self.key, failed.attempt, failed.delay, type(exc).__name__)
                self._wake.wait(failed.delay)
                self.advanced_at = time.monotonic()  # failing reads are retried and logged, not stalled
                continue
            resumed = failures.resumed()
            if resumed:
                log.info("%s: reads resumed after %d failed attempts", self.key, resumed)
            if batch.stopped or self.reason is not None:
                break  # records read but not delivered are read again by the next owner
            if not coordinator.holds(self.key):
                if not self.wait_to_retry(0):
                    # the lease lapsed while reading (the process was paused, or renewals are
                    # late): deliver only once it is renewed; if it is lost, the next owner
                    # reads the batch again
                    break
                self.advanced_at = time.monotonic()
            self.millis_behind_latest = batch.millis_behind_latest
            if batch.lost is not None and not self._data_lost(batch.lost):
                break  # on_data_loss="stop_shard": held until stopped; nothing was delivered
            processing = 0.0
            if batch.records:
                # a batch is in shard order: its last record is its highest position
                checkpointer.record_delivered(batch.records[-1:])
                started = time.monotonic()
                if not deliver(self, batch.records, batch.millis_behind_latest, processor, checkpointer,
                               self.pool.config.processor_retry):
                    break  # stopped while retrying: the next owner reads the batch again
                processing = time.monotonic() - started
                self.records_processed += len(batch.records)
                self.batches += 1
                self.pool.count_records(self.spec, len(batch.records))
            load.observe(len(batch.records), sum(map(len, map(_data, batch.records))), processing)
            if self.keyed is not None:
                self.keyed.tick()  # checkpoints the exact progress when due
            if batch.fresh:
                lag, self._last_lag = self._last_lag, batch.millis_behind_latest
                if batch.records or batch.millis_behind_latest == 0 or (
                        lag is not None and batch.millis_behind_latest is not None and batch.millis_behind_latest < lag):
                    self.advanced_at = time.monotonic()  # records, caught up, or nearer the tip (a sparse shard)
            self.lag.observe(read_at, batch.millis_behind_latest, len(batch.records))
            if batch.shard_ended:
                stopping = (lambda: self.reason is not None) if self.keyed is not None else (lambda: False)
                if finish_shard(self.key, processor, checkpointer, stopping):
                    self.state = "ended"
                    self.pool.count("shard_ends")
                    self.pool.shard_ended(self.spec)
                elif stopping():
                    return False  # a keyed runner stopped while finishing: hand off (or stop) as usual
                else:
                    self.state = "failed"
                self._release()
                return True
            reader.wait(batch.suggested_wait)
        return False

    def reader_stalled_for(self, now: float) -> float | None:
        """Seconds from this shard's last advance to its last read that returned: reads
        returned with no record and none found the shard caught up (``MillisBehindLatest`` 0)
        or nearer the tip than the read before (a sparse shard's empty reads move on through
        time): a stuck iterator, a lost fan-out subscription (its waits without events are
        not reads, so they are no advance). Judged on returned reads only: a read in progress
        or one that failed (retried with backoff, logged) adds nothing, nor do lease pauses.
        None while it is not reading (a processor call, a stop, a shard held after a loss)."""
        if self.state != "processing" or self.call_started is not None or self.reason is not None:
            return None
        return max(0.0, self.read_done_at - self.advanced_at)

    def restart_reader(self) -> None:
        """Replace the reader (the watchdog's remedy for a stalled one): the loop closes it and
        reads on from the last record delivered with a new one (a new iterator or
        subscription). Closing it here too ends a fan-out subscription at once."""
        self._restart_reader = True
        reader = self._reader
        if reader is not None:
            reader.close()

    def _new_reader(self, old: BatchReader, start: Checkpoint) -> BatchReader:
        """A new reader from ``old``'s last record delivered (``start`` if none yet)."""
        self._restart_reader = False
        old.close()
        position = old.last_position or start
        self.pool.count("reader_restarts")
        log.warning("%s: reader restarted after %s (a new iterator or subscription)", self.key,
                    getattr(position, "sequence_number", position))
        self._reader = self.pool.make_reader(self.spec, self.shard_id, position, self._wake)
        self.advanced_at = self.read_done_at = time.monotonic()
        return self._reader

    def _data_lost(self, gap: DataGap) -> bool:
        """Report a trimmed resume position (ERROR, counted, once per position: a restarted
        reader finds the same loss again); False to stop the shard here
        (``on_data_loss="stop_shard"``: hold the lease and process nothing until stopped)."""
        stop = self.pool.config.on_data_loss == "stop_shard"
        seen = (gap.after.sequence_number, gap.after.sub_sequence_number)
        if seen not in self._gaps_reported:
            self._gaps_reported.add(seen)
            self._report_loss(gap, stop)
        if not stop:
            return True
        self.state = "data-loss"
        self._wake.wait()  # a stop (hand-off, loss of the lease, worker stop) ends the wait
        return False

    def _report_loss(self, gap: DataGap, stop: bool) -> None:
        self.pool.count("data_loss_events")
        span = gap.lost_seconds
        if span is not None:
            self.pool.count("data_loss_ms", round(span * 1000))
        arrived = f", arrived {gap.first_arrival.isoformat()}" if gap.first_arrival is not None else ""
        lost = (f"records that arrived over {span:.1f} s after {gap.after.arrival.isoformat()}"
                if span is not None and gap.after.arrival is not None else "the records")
        what = (f"GetShardIterator refused to start at it ({gap.refused}): it was trimmed, or is not of this "
                "shard" if gap.refused is not None else
                "the stream's retention period trimmed it before it was read on; the oldest record still there "
                f"is {gap.first_available}{arrived}")
        log.error("%s: DATA LOSS: position %s/%s is no longer in the shard (%s), and %s written after "
                  "it and before those still there are lost. on_data_loss=%r: %s", self.key,
                  gap.after.sequence_number, gap.after.sub_sequence_number, what, lost, self.pool.config.on_data_loss,
                  "holding the lease and processing nothing until an operator acts" if stop
                  else "going on from the oldest record still there")

    def wait_to_retry(self, delay: float) -> bool:
        """Wait ``delay`` (woken by a stop); then until the lease is valid. False if stopped."""
        self._wake.wait(delay)
        while self.reason is None and not self.pool.coordinator.holds(self.key):
            self._wake.wait(self.pool.poll_interval)
        return self.reason is None

    def _release(self) -> None:
        """Give the lease back, unless it is no longer ours (lost, or taken again meanwhile)."""
        if self.reason == "lost" or not self.pool.is_current(self):
            return
        try:
            self.pool.coordinator.release(self.key)
        except KinesisHashRingError as exc:
            log.warning("%s: release failed (the lease expires instead): %s", self.key, exc)
