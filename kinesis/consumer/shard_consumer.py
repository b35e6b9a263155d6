"""One thread per held shard lease: a reader feeding a processor.

The reader is a :class:`~kinesis.consumer.reader.ShardReader` (GetRecords polling) or a
:class:`~kinesis.consumer.fanout_reader.FanOutReader` (Enhanced Fan-Out), picked by
``StreamConfig.retrieval`` (:mod:`kinesis.consumer.retrieval`); everything below is the same
for both.

:class:`~kinesis.consumer.consumer_pool.ConsumerPool` is the worker's
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
:class:`~kinesis.consumer.processing_failures.ProcessorRetryPolicy`; only its opt-in ``on_exhausted``
handler can skip a batch. An unexpected failure of the consumer itself (not the processor)
releases the lease, which is then taken again from the last checkpoint. Shards without a checkpoint at ``LATEST`` are *pinned* on first acquisition: the
checkpoint becomes ``AT_TIMESTAMP`` of that moment, so a later owner (hand-off or crash)
continues from the same point instead of skipping what arrived in between.

The parts: :mod:`~kinesis.consumer.batch_retries` (a batch the processor raised on),
:mod:`~kinesis.consumer.read_failures` (the backoff after a failed read),
:mod:`~kinesis.consumer.shard_start` (pinning, where a shard starts),
:mod:`~kinesis.consumer.shard_end` (``SHARD_END``), :mod:`~kinesis.consumer.shard_status`.
"""

from __future__ import annotations

import logging
import threading
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from kinesis.consumer.batch_retries import deliver
from kinesis.consumer.lease_checkpointer import LeaseCheckpointer
from kinesis.consumer.processing_failures import FailureState
from kinesis.consumer.processor import InitializationInput, RecordProcessor
from kinesis.consumer.processor_style import adapt_processor
from kinesis.consumer.read_failures import MAX_READ_BACKOFF, READ_ERRORS, ReadFailures
from kinesis.consumer.retrieval import BatchReader
from kinesis.consumer.shard_end import finish_shard
from kinesis.consumer.shard_start import pinned_start, start_point
from kinesis.consumer.shard_status import ConsumerLeases, ShardStatus
from kinesis.consumer.worker_config import ProcessorFactory, StreamConfig
from kinesis.errors import KinesisHashRingError, LeaseLostError
from kinesis.lease_loop.lease_model import Lease

if TYPE_CHECKING:
    from kinesis.consumer.consumer_pool import ConsumerPool

__all__ = ["MAX_READ_BACKOFF", "READ_ERRORS", "ConsumerLeases", "ShardConsumer", "ShardStatus"]

log = logging.getLogger(__name__)


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
        self.checkpointer: LeaseCheckpointer | None = None
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
        processor = adapt_processor(
            self.processor_factory(), self.pool.processor_style,
            source=f"the processor factory of stream {self.spec.stream!r}",
        )
        processor.initialize(InitializationInput(
            self.spec.stream, self.shard_id, start.last, start.initial, pending_checkpoint=start.pending
        ))
        reader = self.pool.make_reader(self.spec, self.shard_id, checkpoint, self._wake)
        self.state = "processing"
        try:
            ended = self._loop(reader, processor, checkpointer)
        except LeaseLostError as exc:
            log.info("%s: lease lost while processing: %s", self.key, exc)
            if self.reason is None and coordinator.lease(self.key) is not None:
                # the coordinator still holds it (renewals late for longer than a lease
                # duration): give it back so it is planned again rather than left unprocessed
                self._stop_for("failed")
                self._release()
            self._stop_for("lost")
            ended = False
        finally:
            reader.close()  # a fan-out subscription ends here, before the lease is passed on
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

    def _loop(self, reader: BatchReader, processor: RecordProcessor, checkpointer: LeaseCheckpointer) -> bool:
        """Read and process until stopped (False) or the shard ended (True)."""
        coordinator = self.pool.coordinator
        poll = self.pool.poll_interval
        failures = ReadFailures()
        while self.reason is None:
            if not coordinator.holds(self.key):
                self._wake.wait(poll)  # renewals late: pause until renewed, lost or stopped
                continue
            try:
                batch = reader.read_batch()
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
                continue
            resumed = failures.resumed()
            if resumed:
                log.info("%s: reads resumed after %d failed attempts", self.key, resumed)
            if batch.stopped or self.reason is not None:
                break  # records read but not delivered are read again by the next owner
            if not coordinator.holds(self.key) and not self.wait_to_retry(0):
                # the lease lapsed while reading (the process was paused, or renewals are
                # late): deliver only once it is renewed; if it is lost, the next owner
                # reads the batch again
                break
            self.millis_behind_latest = batch.millis_behind_latest
            if batch.records:
                # a batch is in shard order: its last record is its highest position
                checkpointer.record_delivered(batch.records[-1:])
                if not deliver(self, batch.records, batch.millis_behind_latest, processor, checkpointer,
                               self.pool.config.processor_retry):
                    break  # stopped while retrying: the next owner reads the batch again
                self.records_processed += len(batch.records)
                self.batches += 1
                self.pool.count_records(self.spec, len(batch.records))
            if batch.shard_ended:
                if finish_shard(self.key, processor, checkpointer):
                    self.state = "ended"
                    self.pool.count("shard_ends")
                    self.pool.shard_ended(self.spec)
                else:
                    self.state = "failed"
                self._release()
                return True
            reader.wait(batch.suggested_wait)
        return False

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
