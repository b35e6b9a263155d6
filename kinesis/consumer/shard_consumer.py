"""One thread per held shard lease: a reader feeding a processor.

The reader is a :class:`~kinesis.consumer.reader.ShardReader` (GetRecords polling) or a
:class:`~kinesis.consumer.fanout_reader.FanOutReader` (Enhanced Fan-Out), picked by
``StreamConfig.retrieval`` (:mod:`kinesis.consumer.retrieval`); everything below is the same
for both.

:class:`ConsumerPool` is the worker's :class:`~kinesis.lease_loop.coordinator.LeaseListener`; the lease
coordinator calls it (on its tick thread) and it starts or stops :class:`ShardConsumer`
threads, never blocking the tick:

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
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

from botocore.exceptions import BotoCoreError

from kinesis.consumer.consumer_registration import ConsumerRegistration
from kinesis.consumer.lease_checkpointer import LeaseCheckpointer
from kinesis.consumer.positions import Checkpoint, InitialPosition, Position
from kinesis.consumer.processing_failures import (
    FailedBatch,
    FailureAction,
    FailureState,
    ProcessorRetryPolicy,
)
from kinesis.consumer.processor import InitializationInput, RecordProcessor
from kinesis.consumer.processor_style import adapt_processor
from kinesis.consumer.records import Record
from kinesis.consumer.retrieval import BatchReader, make_reader
from kinesis.consumer.worker_config import ProcessorFactory, StreamConfig, WorkerConfig
from kinesis.errors import (
    ConfigurationError,
    KinesisAccessDeniedError,
    KinesisHashRingError,
    KinesisRetriesExhaustedError,
    LeaseLostError,
    ShardNotFoundError,
    StreamNotActiveError,
    StreamNotFoundError,
)
from kinesis.lease_loop.lease_model import Lease

log = logging.getLogger(__name__)

READ_ERRORS = (KinesisRetriesExhaustedError, KinesisAccessDeniedError, StreamNotActiveError,
               StreamNotFoundError, ShardNotFoundError, BotoCoreError)
"""Read failures a consumer waits out with the lease kept (another member would fail alike)."""
MAX_READ_BACKOFF = 30.0
"""The longest wait between two reads that failed (the wait doubles from ``idle_backoff``)."""


class LeaseHolder(Protocol):
    """The part of :class:`~kinesis.lease_loop.coordinator.LeaseCoordinator` a consumer uses."""

    def holds(self, key: str) -> bool: ...

    def lease(self, key: str) -> Lease | None: ...

    def checkpoint(self, key: str, checkpoint: Checkpoint | str | object) -> Lease: ...

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
    """starting, processing, retrying, stuck, shutting-down, ended, lost, failed or stopped."""
    records_processed: int
    batches: int
    millis_behind_latest: int | None
    last_checkpoint: str | None
    failed_attempts: int = 0
    """Failed attempts at the current batch (0 while it goes well)."""
    last_error: str | None = None


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
        if checkpoint.sequence_number == "LATEST":
            pinned = Checkpoint.at_timestamp(datetime.now(UTC))
            try:
                coordinator.checkpoint(self.key, pinned)
            except LeaseLostError:
                self.state = "lost"
                return
            checkpoint = pinned
        last = checkpoint if isinstance(checkpoint, Position) else None
        pending = _pending_position(self.lease.pending_checkpoint, checkpoint)
        checkpointer = LeaseCheckpointer(
            coordinator, self.key, self.spec.stream, self.shard_id, last, pending
        )
        self.checkpointer = checkpointer
        processor = adapt_processor(
            self.processor_factory(), self.pool.processor_style,
            source=f"the processor factory of stream {self.spec.stream!r}",
        )
        initial = checkpoint if isinstance(checkpoint, InitialPosition) else self.spec.start
        processor.initialize(
            InitializationInput(self.spec.stream, self.shard_id, last, initial, pending_checkpoint=pending)
        )
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
        failures, last_error = 0, ""
        while self.reason is None:
            if not coordinator.holds(self.key):
                self._wake.wait(poll)  # renewals late: pause until renewed, lost or stopped
                continue
            try:
                batch = reader.read_batch()
            except READ_ERRORS as exc:
                # keep the lease and read again from the same position, backing off: nothing
                # is skipped, and another member (with the same policy) would fail the same way
                failures += 1
                self.pool.count("read_errors")
                delay = min(MAX_READ_BACKOFF, max(poll, self.pool.config.idle_backoff) * 2 ** (failures - 1))
                error = f"{type(exc).__name__}: {exc}"
                if error != last_error:  # the whole message (and a traceback if unexpected) once
                    log.warning("%s: read failed (attempt %d, retrying in %.1f s; the lease is kept): %s",
                                self.key, failures, delay, error, exc_info=isinstance(exc, BotoCoreError))
                else:
                    log.warning("%s: read failed again (attempt %d, retrying in %.1f s): %s",
                                self.key, failures, delay, type(exc).__name__)
                last_error = error
                self._wake.wait(delay)
                continue
            if failures:
                log.info("%s: reads resumed after %d failed attempts", self.key, failures)
                failures, last_error = 0, ""
            if batch.stopped or self.reason is not None:
                break  # records read but not delivered are read again by the next owner
            if not coordinator.holds(self.key) and not self._wait_to_retry(0):
                # the lease lapsed while reading (the process was paused, or renewals are
                # late): deliver only once it is renewed; if it is lost, the next owner
                # reads the batch again
                break
            self.millis_behind_latest = batch.millis_behind_latest
            if batch.records:
                # a batch is in shard order: its last record is its highest position
                checkpointer.record_delivered(batch.records[-1:])
                if not self._process(batch.records, batch.millis_behind_latest, processor, checkpointer):
                    break  # stopped while retrying: the next owner reads the batch again
                self.records_processed += len(batch.records)
                self.batches += 1
                self.pool.count_records(self.spec, len(batch.records))
            if batch.shard_ended:
                checkpointer.mark_shard_end()
                processor.shard_ended(checkpointer)
                if checkpointer.shard_end_checkpointed:
                    self.state = "ended"
                    self.pool.count("shard_ends")
                    self.pool.shard_ended(self.spec)
                else:
                    log.error(
                        "%s: shard_ended() did not checkpoint; the shard will be delivered again "
                        "and its children cannot start. Call checkpointer.checkpoint() in shard_ended.",
                        self.key,
                    )
                    self.state = "failed"
                self._release()
                return True
            reader.wait(batch.suggested_wait)
        return False

    def _process(
        self,
        records: list[Record],
        lag: int | None,
        processor: RecordProcessor,
        checkpointer: LeaseCheckpointer,
    ) -> bool:
        """Deliver one batch, retrying in place with backoff while the processor raises.

        Returns False if the consumer was stopped meanwhile (see :mod:`kinesis.consumer.processing_failures`).
        """
        policy = self.pool.config.processor_retry
        base = checkpointer.last_checkpoint
        attempts = 0
        while True:
            try:
                processor.process_records(records, checkpointer, millis_behind_latest=lag)
            except LeaseLostError:
                raise
            except Exception as exc:
                if checkpointer.last_checkpoint != base:  # progress: a new (shard, checkpoint)
                    base, attempts = checkpointer.last_checkpoint, 0
                attempts += 1
                self.pool.count("processor_errors")
                if not self._after_failure(records, exc, attempts, policy):
                    return True  # skipped by the policy's handler
                if not self._wait_to_retry(policy.backoff(attempts)):
                    return False
                if checkpointer.last_checkpoint is not None:
                    done = checkpointer.last_checkpoint
                    records = [r for r in records if r.position > done]
                if not records:
                    break
                continue
            break
        if self.failure.attempts:
            log.info("%s: batch processed after %d failed attempts", self.key, self.failure.attempts)
        self.failure = FailureState()
        self.state = "processing"
        return True

    def _after_failure(
        self, records: list[Record], exc: Exception, attempts: int, policy: ProcessorRetryPolicy
    ) -> bool:
        """Log, count and record one failed attempt; False if the batch is to be skipped."""
        summary = f"{type(exc).__name__}: {exc}"
        where = f"records {records[0].sequence_number}..{records[-1].sequence_number}"
        stuck = attempts >= policy.max_attempts
        self.failure = FailureState(attempts, summary, stuck)
        self.state = "stuck" if stuck else "retrying"
        if attempts == 1:
            log.warning("%s: processor raised on %s (attempt 1, retrying in %.1f s): %s",
                        self.key, where, policy.backoff(1), summary, exc_info=True)
        elif not stuck:
            log.warning("%s: processor raised on %s (attempt %d, retrying in %.1f s): %s",
                        self.key, where, attempts, policy.backoff(attempts), summary)
        if not stuck:
            return True
        batch = FailedBatch(self.key, self.spec.stream, self.shard_id, tuple(records), attempts, exc)
        try:
            action = policy.decide(batch)
        except Exception as handler_exc:
            log.error("%s: on_exhausted raised %s: %s (the batch is retried)",
                      self.key, type(handler_exc).__name__, handler_exc)
            action = FailureAction.RETRY
        if action is FailureAction.SKIP:
            log.warning("%s: %s skipped by on_exhausted after %d attempts: %s", self.key, where, attempts, summary)
            self.pool.count("batches_skipped")
            self.pool.count("records_skipped", len(records))
            self.failure = FailureState()
            return False
        if attempts == policy.max_attempts or attempts % 10 == 0:
            log.error("%s: STUCK on %s after %d attempts, retrying every %.0f s: %s",
                      self.key, where, attempts, policy.max_backoff, summary)
        return True

    def _wait_to_retry(self, delay: float) -> bool:
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


class ConsumerPool:
    """The worker's lease listener: one :class:`ShardConsumer` per held lease (thread-safe)."""

    def __init__(
        self,
        config: WorkerConfig,
        kinesis_client: Any,
        processor_factory: ProcessorFactory | None,
        on_shard_end: Callable[[StreamConfig], None] | None = None,
        registrations: Mapping[str, ConsumerRegistration] | None = None,
        processor_style: str = "auto",
    ):
        self.config = config
        self.processor_style = processor_style
        """``"auto"``, ``"sdk"`` or ``"kclpy"`` (:mod:`kinesis.consumer.processor_style`)."""
        self.kinesis_client = kinesis_client
        self.registrations: Mapping[str, ConsumerRegistration] = registrations or {}
        """Enhanced Fan-Out consumers by stream key prefix (streams with retrieval="fanout")."""
        self.processor_factory = processor_factory
        self.on_shard_end = on_shard_end
        self.coordinator: LeaseHolder = _NoCoordinator()
        self.poll_interval = config.effective_tick_interval / 2
        self._consumers: dict[str, ShardConsumer] = {}
        self._lock = threading.Lock()
        self._failures_logged: set[tuple[str, str, str]] = set()
        self.counters: Counter[str] = Counter(
            {
                "processor_errors": 0,
                "batches_skipped": 0,
                "records_skipped": 0,
                "read_errors": 0,
                "shard_ends": 0,
                "consumers_started": 0,
            }
        )
        self.records: Counter[tuple[str, str]] = Counter()

    # --- LeaseListener ------------------------------------------------------------------

    def on_lease_acquired(self, lease: Lease) -> None:
        spec = self.config.stream_of(lease.key)
        if spec is None:
            raise ConfigurationError(f"lease {lease.key!r} belongs to no configured stream")
        factory = spec.processor_factory or self.processor_factory
        if factory is None:  # Worker checks this at build time
            raise ConfigurationError(f"no processor factory for stream {spec.stream!r}")
        with self._lock:
            previous = self._consumers.get(lease.key)
            if previous is not None and previous.stopped.is_set():
                previous = None
            if previous is not None and previous.reason is None:
                previous.lease_lost()  # a new lease incarnation: the old consumer must stop
            consumer = ShardConsumer(self, spec, lease, factory, previous)
            self._consumers[lease.key] = consumer
            self.counters["consumers_started"] += 1
        consumer.start()

    def on_lease_lost(self, lease: Lease) -> None:
        with self._lock:
            consumer = self._consumers.get(lease.key)
        if consumer is not None:
            consumer.lease_lost()

    def on_handoff_requested(self, lease: Lease) -> threading.Event | None:
        with self._lock:
            consumer = self._consumers.get(lease.key)
        if consumer is None or consumer.stopped.is_set():
            return None
        return consumer.request_handoff()

    # --- used by consumers --------------------------------------------------------------

    def make_reader(self, spec: StreamConfig, shard_id: str, start: Checkpoint,
                    stop_event: threading.Event) -> BatchReader:
        """The reader for one shard: polling or fan-out, by ``spec.retrieval``."""
        return make_reader(
            spec, shard_id, start, kinesis_client=self.kinesis_client, config=self.config,
            registrations=self.registrations, stop_event=stop_event, max_block=self.poll_interval,
        )

    def first_failure(self, key: str, exc: BaseException) -> bool:
        """True the first time ``key`` fails with this error (log its traceback once)."""
        seen = (key, type(exc).__name__, str(exc))
        with self._lock:
            if seen in self._failures_logged:
                return False
            self._failures_logged.add(seen)
            return True

    def is_current(self, consumer: ShardConsumer) -> bool:
        with self._lock:
            return self._consumers.get(consumer.key) is consumer

    def finished(self, consumer: ShardConsumer) -> None:
        with self._lock:
            if self._consumers.get(consumer.key) is consumer:
                del self._consumers[consumer.key]

    def count(self, name: str, n: int = 1) -> None:
        with self._lock:
            self.counters[name] += n

    def count_records(self, spec: StreamConfig, n: int) -> None:
        with self._lock:
            self.records[(spec.application, spec.stream)] += n

    def shard_ended(self, spec: StreamConfig) -> None:
        if self.on_shard_end is not None:
            self.on_shard_end(spec)

    # --- worker side --------------------------------------------------------------------

    def consumers(self) -> list[ShardConsumer]:
        with self._lock:
            return sorted(self._consumers.values(), key=lambda c: c.key)

    def request_handoff_all(self) -> None:
        """Ask every consumer to finish its batch and checkpoint now (a graceful stop begins)."""
        for c in self.consumers():
            c.request_handoff()

    def halt_all(self, timeout: float) -> list[str]:
        """Stop every consumer (processors hear lease_lost); return the keys still running."""
        consumers = self.consumers()
        for c in consumers:
            c.halt()
        deadline = time.monotonic() + timeout
        return [c.key for c in consumers if not c.join(max(0.0, deadline - time.monotonic()))]

    def totals(self) -> tuple[dict[str, int], dict[str, int]]:
        """(counters, records processed by ``"<application>/<stream>"``), copied atomically."""
        with self._lock:
            return dict(self.counters), {f"{a}/{s}": n for (a, s), n in self.records.items()}

    def statuses(self) -> list[ShardStatus]:
        return [c.status() for c in self.consumers()]


def _pending_position(pending: Checkpoint | None, checkpoint: Checkpoint) -> Position | None:
    """The lease's pending checkpoint, if it is still ahead of the checkpoint (a member of an
    older release may have checkpointed past it without clearing it)."""
    if not isinstance(pending, Position) or not checkpoint < pending:
        return None
    return pending


class _NoCoordinator:
    """Placeholder until the worker wires its coordinator in."""

    def holds(self, key: str) -> bool:
        return False

    def lease(self, key: str) -> Lease | None:
        return None

    def checkpoint(self, key: str, checkpoint: Checkpoint | str | object) -> Lease:
        raise LeaseLostError("the worker has no lease coordinator yet")

    def prepare_checkpoint(self, key: str, checkpoint: Checkpoint | str | object) -> Lease:
        raise LeaseLostError("the worker has no lease coordinator yet")

    def release(self, key: str) -> bool:
        return False
