"""Drives a :class:`~kinesis.consumer.keyed.processor.KeyedProcessor` for one shard lease.

The shard consumer sees a :class:`KeyedRunner` as an ordinary processor: ``process_records``
queues each record behind its partition key and returns (it blocks only while the shard's
pending records or bytes, or the Worker's pending bytes, are at their caps: that pauses
reading), and :meth:`KeyedRunner.tick`, called after every read, writes the progress.

* **Order.** A key's records run one at a time in shard order; a key becomes *ready* when its
  previous record completes, and ready keys start in the order they became ready while fewer
  than ``max_in_flight`` records run.
* **Exact checkpoints.** :class:`~kinesis.consumer.keyed.progress.ShardProgress` keeps the
  watermark and the records completed beyond it; every ``checkpoint_interval`` (and on hand-off
  and shard end) both are written in one fenced checkpoint. All writes happen on the shard
  consumer's thread.
* **Failures.** A record whose ``process`` raises is retried after the Worker's
  ``processor_retry`` backoff while its key waits and other keys go on; after ``max_attempts``
  ``on_exhausted`` decides (SKIP completes it, RETRY goes on at the maximum backoff).
* **Hand-off.** Queued records are dropped (never started: the next owner delivers them), the
  running ones are awaited up to ``drain_timeout``, then the exact progress is checkpointed:
  the next owner skips every completed record, so nothing is processed twice.
* **Shard end.** Every record completes before ``SHARD_END`` is checkpointed, so the children
  start after the parent's last record.
"""

from __future__ import annotations

import inspect
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Hashable
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, Protocol

from kinesis.consumer.keyed.executor import CallCancelled, KeyedExecutor
from kinesis.consumer.keyed.processor import ORDERINGS, KeyedProcessor
from kinesis.consumer.keyed.progress import ShardProgress, usable
from kinesis.consumer.retrieval.positions import Checkpoint
from kinesis.consumer.retrieval.records import Record
from kinesis.consumer.shard.checkpointer import LeaseCheckpointer
from kinesis.consumer.shard.failures import FailedBatch, FailureAction, ProcessorRetryPolicy
from kinesis.consumer.shard.processor import Checkpointer, InitializationInput, RecordProcessor
from kinesis.durations import check_seconds
from kinesis.errors import ConfigurationError, LeaseLostError

log = logging.getLogger(__name__)

ROOM_WAIT = 0.5
"""Longest wait for room before the runner looks at the stop flag and the checkpoint clock again."""


class Counting(Protocol):
    """Where counters go (the Worker's consumer pool)."""

    def count(self, name: str, n: int = 1) -> None: ...


@dataclass(frozen=True)
class KeyedStatus:
    """A keyed shard's parallel state (part of a shard's line in ``Worker.status()``)."""

    in_flight: int
    """Records being processed now."""
    queued: int
    """Records waiting behind their key or for a free slot."""
    completed_not_checkpointed: int
    """Records completed since the last progress checkpoint."""
    oldest_in_flight_seconds: float | None
    """Age of the record running longest (None when none runs)."""
    max_key_queue: int
    """The deepest per-key queue (records waiting behind one key)."""
    pending: int
    """Records after the watermark (the window the caps bound)."""
    stuck: int
    """Records that exhausted their attempts and are retried at the maximum backoff."""


def check_keyed_class(cls: type[KeyedProcessor]) -> None:
    """Refuse impossible limits on a keyed processor class (when the Worker is built)."""

    def positive_int(name: str, upper: int) -> None:
        value = getattr(cls, name)
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= upper:
            raise ConfigurationError(f"{cls.__name__}.{name} must be an int in 1..{upper:,}, got {value!r}")

    positive_int("max_in_flight", 100_000)
    positive_int("max_pending_records", 100_000)
    positive_int("max_pending_bytes", 1 << 40)
    if cls.max_pending_records < cls.max_in_flight:
        raise ConfigurationError(
            f"{cls.__name__}.max_pending_records ({cls.max_pending_records}) must be >= max_in_flight "
            f"({cls.max_in_flight}): records in flight are pending too")
    if cls.ordering not in ORDERINGS:
        raise ConfigurationError(f"{cls.__name__}.ordering must be one of {ORDERINGS}, got {cls.ordering!r}")
    for name in ("checkpoint_interval", "drain_timeout"):
        check_seconds(f"{cls.__name__}.{name}", getattr(cls, name), allow_zero=True)
    if cls.process is KeyedProcessor.process:
        raise ConfigurationError(f"{cls.__name__} must implement process(self, record)")
    for hook in ("initialize", "on_exhausted", "shutdown"):
        if inspect.iscoroutinefunction(getattr(cls, hook)):
            raise ConfigurationError(
                f"{cls.__name__}.{hook} must be a plain method (only process may be async def): it runs "
                "on the runner's thread; start async work from process")


class KeyedRunner(RecordProcessor):
    """One shard lease's keyed-parallel processing, seen by the consumer as a processor."""

    def __init__(self, processor: KeyedProcessor, executor: KeyedExecutor, *, key: str, stream: str,
                 shard_id: str, start: Checkpoint, completed: str | None, retry: ProcessorRetryPolicy,
                 stopping: Callable[[], bool], counters: Counting, valid: Callable[[], bool] = lambda: True):
        cls = type(processor)
        check_keyed_class(cls)
        self.processor = processor
        self.executor = executor
        self.key, self.stream, self.shard_id = key, stream, shard_id
        self.retry = retry
        self.stopping = stopping
        self.valid = valid
        self.counters = counters
        self.max_in_flight = cls.max_in_flight
        self.max_pending_records = cls.max_pending_records
        self.max_pending_bytes = cls.max_pending_bytes
        self.interval = float(cls.checkpoint_interval)
        self.drain_timeout = float(cls.drain_timeout)
        self.ordering = cls.ordering
        self.is_async = inspect.iscoroutinefunction(cls.process)
        self.progress = ShardProgress(start, usable(completed, start, key), where=key)
        self._cond = threading.Condition()
        self._queues: dict[Hashable, deque[tuple[int, Record]]] = {}
        self._ready: deque[Hashable] = deque()
        self._running: dict[int, float] = {}  # index -> when it started
        self._attempts: dict[int, int] = {}
        self._stuck: set[int] = set()
        self._backoff: dict[int, tuple[Record, Hashable]] = {}  # failed records waiting to be retried
        self._calls: dict[int, Future[Any]] = {}  # running calls, cancelled if the lease is lost
        self._active_keys: set[Hashable] = set()  # keys with a record in flight (or in backoff)
        self._pending_bytes = 0
        self._open = True
        self._completed = 0
        self._completed_at_flush = 0
        self._checkpointer: LeaseCheckpointer | None = None
        self._last_flush = time.monotonic()
        self._lost = False  # set by lease_lost: every call, even one starting now, is cancelled
        self._shut = False  # the processor's shutdown hook was called

    # --- RecordProcessor --------------------------------------------------------------

    def initialize(self, init: InitializationInput) -> None:
        self.processor.initialize(init)

    def process_records(self, records: list[Record], checkpointer: Checkpointer,
                        millis_behind_latest: int | None = None) -> None:
        """Queue each record behind its key (blocking while the caps are reached)."""
        if isinstance(checkpointer, LeaseCheckpointer):
            self._checkpointer = checkpointer
        for record in records:
            size = len(record.data)
            if not self._wait_for_room(size):
                return  # stopping: the records not queued are delivered again by the next owner
            starts: list[tuple[int, Record, Hashable]] = []
            with self._cond:
                index, done = self.progress.deliver(record.sequence_number, record.sub_sequence_number)
                if done:
                    self.progress.complete(index)
                    self.counters.count("records_resumed_completed")
                    continue
                key = self._key_of(record, index)
                queue = self._queues.get(key)
                if queue is None:
                    queue = self._queues[key] = deque()
                queue.append((index, record))
                self._pending_bytes += size
                if len(queue) == 1 and key not in self._active_keys:
                    self._ready.append(key)  # an idle key; a running one is made ready when it completes
                starts = self._take_starts()
            self.executor.reserve(size)
            self._submit(starts)
        self._maybe_flush()

    def tick(self) -> None:
        """After every read: start what a lapsed lease held back, checkpoint when due."""
        self._kick()
        self._maybe_flush()

    def _kick(self) -> None:
        with self._cond:
            starts = self._take_starts()
        self._submit(starts)

    def shutdown_requested(self, checkpointer: Checkpointer) -> None:
        """Drop queued records, wait for running ones (``drain_timeout``), checkpoint exactly."""
        if isinstance(checkpointer, LeaseCheckpointer):
            self._checkpointer = checkpointer
        dropped = self._close()
        still = self._drain()
        if still:
            log.warning("%s: hand-off after %.0f s with %d records still running: the next owner delivers "
                        "them again, maybe while they still run here", self.key, self.drain_timeout, still)
        log.info("%s: hand-off: %d queued records left for the next owner, progress checkpointed", self.key,
                 dropped)
        try:
            self._flush()
        finally:
            self._shutdown("handoff")

    def lease_lost(self) -> None:
        """Start nothing more, cancel the calls still running (another member may process these
        records now) and wait up to ``drain_timeout`` for them (a plain ``process`` already
        running cannot be stopped, and a new runner of this shard in this Worker waits)."""
        self._close(lost=True)
        self._drain()
        self._shutdown("lost")

    def abort(self) -> None:
        """The shard consumer failed (its lease is released): as a lost lease."""
        self.lease_lost()

    def _drain(self) -> int:
        """Wait up to ``drain_timeout`` for the running records; how many still run."""
        deadline = time.monotonic() + self.drain_timeout
        with self._cond:
            self._cond.wait_for(lambda: not self._running, max(0.0, deadline - time.monotonic()))
            return len(self._running)

    def _shutdown(self, reason: str) -> None:
        """The processor's ``shutdown`` hook, once per lease."""
        with self._cond:
            if self._shut:
                return
            self._shut = True
        self.processor.shutdown(reason)

    def shard_ended(self, checkpointer: Checkpointer) -> None:
        """Wait for every record, then checkpoint ``SHARD_END`` (the children start after it)."""
        if isinstance(checkpointer, LeaseCheckpointer):
            self._checkpointer = checkpointer
        while True:
            with self._cond:
                # every delivered record completed (none abandoned): only then may SHARD_END
                # let the children start
                if self._cond.wait_for(lambda: not self._running and not self._queues
                                       and self.progress.pending == 0, ROOM_WAIT):
                    break
            if self.stopping():
                # handed off or lost meanwhile: no SHARD_END; the consumer goes on with
                # shutdown_requested (drain, exact checkpoint) or lease_lost
                return
            self._kick()  # what a lapsed lease held back
            self._maybe_flush()
        self._flush()  # a failed SHARD_END write then keeps every completion
        checkpointer.checkpoint()
        self._shutdown("shard_end")

    # --- status -------------------------------------------------------------------------

    def status(self) -> KeyedStatus:
        now = time.monotonic()
        with self._cond:
            oldest = min(self._running.values(), default=None)
            return KeyedStatus(
                in_flight=len(self._running),
                queued=sum(len(q) for q in self._queues.values()),
                completed_not_checkpointed=self._completed - self._completed_at_flush,
                oldest_in_flight_seconds=None if oldest is None else now - oldest,
                max_key_queue=max((len(q) for q in self._queues.values()), default=0),
                pending=self.progress.pending,
                stuck=len(self._stuck),
            )

    # --- scheduling (under self._cond) ----------------------------------------------------

    def _key_of(self, record: Record, index: int) -> Hashable:
        if self.ordering == "key":
            return record.partition_key
        return "" if self.ordering == "shard" else index

    def _take_starts(self) -> list[tuple[int, Record, Hashable]]:
        if not self._ready or not self._open or not self.valid():
            return []  # a lapsed lease starts nothing (tick starts again once it is renewed)
        starts = []
        now = time.monotonic()
        while self._ready and len(self._running) < self.max_in_flight and self._open:
            key = self._ready.popleft()
            queue = self._queues.get(key)
            if not queue:
                continue
            index, record = queue.popleft()
            self._active_keys.add(key)
            self._running[index] = now
            starts.append((index, record, key))
        return starts

    def _submit(self, starts: list[tuple[int, Record, Hashable]]) -> None:
        for index, record, key in starts:
            self._call(index, record, key)

    def _call(self, index: int, record: Record, key: Hashable) -> None:
        with self._cond:
            if not self._open:  # closed since it was picked: never started, delivered again
                self._abandon(index, record, key)
                return
        process = self.processor.process

        def done(error: BaseException | None) -> None:
            self._finished(index, record, key, error)

        def started() -> None:
            if self._lost or not self._open:  # the lease ended between submission and start
                raise CallCancelled

        async def run_async() -> Any:
            started()
            return await process(record)

        def run_sync() -> Any:
            started()
            return process(record)

        if self.is_async:
            call: Future[Any] | None = self.executor.run_async(run_async, done)
        else:
            call = self.executor.run_sync(run_sync, done)
        if call is not None:
            with self._cond:
                if index in self._running and (index not in self._calls or self._calls[index].done()):
                    self._calls[index] = call
                cancel = self._lost
            if cancel:  # the lease was lost while this call was being submitted
                call.cancel()

    def _finished(self, index: int, record: Record, key: Hashable, error: BaseException | None) -> None:
        """A call returned (any thread): complete the record, or retry it after a backoff.

        A call the SDK cancelled (``CallCancelled``, or any cancellation once the lease is
        lost or handed off) is abandoned: the next owner delivers it. Any other exit, a
        ``CancelledError`` the processor's own code raised included, is a failed attempt: a
        record abandoned while the lease is held would stall the watermark for ever."""
        if (error is not None and not isinstance(error, Exception | CallCancelled) and self._open
                and not self._lost):
            error = RuntimeError(f"process raised {type(error).__name__}: {error}")
        if error is not None and not self._gives_up(index, record, error):
            with self._cond:
                retry = self._open and not self._lost and isinstance(error, Exception)
                if retry:
                    self._backoff[index] = (record, key)
                else:  # closed, or cancelled: the next owner delivers it again
                    self._abandon(index, record, key)
            if retry:
                delay = self.retry.backoff(self._attempts.get(index, 1))
                self.executor.later(delay, lambda: self._retry(index))
            return
        size = len(record.data)
        with self._cond:
            self.progress.complete(index)
            self._completed += 1
            self._pending_bytes -= size
            self._forget(index, key)
            starts = self._take_starts()
            self._cond.notify_all()
        self.executor.release(size)
        self._submit(starts)

    def _forget(self, index: int, key: Hashable) -> None:
        """``index`` no longer runs; its key is ready again if it has queued records."""
        self._running.pop(index, None)
        self._calls.pop(index, None)
        self._attempts.pop(index, None)
        self._stuck.discard(index)
        self._active_keys.discard(key)
        queue = self._queues.get(key)
        if queue:
            if self._open:
                self._ready.append(key)
        else:
            self._queues.pop(key, None)

    def _abandon(self, index: int, record: Record, key: Hashable) -> None:
        """Give up ``index`` without completing it (under the lock): it is delivered again."""
        self._forget(index, key)
        self._pending_bytes -= len(record.data)
        self.executor.release(len(record.data))
        self._cond.notify_all()

    def _retry(self, index: int) -> None:
        with self._cond:
            waiting = self._backoff.pop(index, None)
            if waiting is None:
                return  # abandoned meanwhile (the lease ended)
            record, key = waiting
            if not self._open:
                self._abandon(index, record, key)
                return
            if not self.valid():  # the lease lapsed: try again once it is renewed
                self._backoff[index] = waiting
                self.executor.later(ROOM_WAIT, lambda: self._retry(index))
                return
        self._call(index, record, key)

    def _gives_up(self, index: int, record: Record, error: BaseException) -> bool:
        """Count a failed attempt; True if ``on_exhausted`` says to skip the record."""
        if not isinstance(error, Exception):
            return False  # cancelled (the Worker stops): never skipped
        with self._cond:
            attempts = self._attempts[index] = self._attempts.get(index, 0) + 1
        self.counters.count("processor_errors")
        where = f"record {record.sequence_number}/{record.sub_sequence_number} (key {record.partition_key!r})"
        if attempts < self.retry.max_attempts:
            if attempts == 1:
                log.warning("%s: process raised on %s (attempt 1, retrying in %.1f s; other keys go on): %s: %s",
                            self.key, where, self.retry.backoff(1), type(error).__name__, error)
            return False
        action = self._exhausted_action(record, error, attempts)
        if action is FailureAction.SKIP:
            log.warning("%s: %s skipped by on_exhausted after %d attempts: %s", self.key, where, attempts, error)
            self.counters.count("records_skipped")
            return True
        with self._cond:
            first = index not in self._stuck
            self._stuck.add(index)
        if first or attempts % 10 == 0:
            log.error("%s: STUCK on %s after %d attempts, retrying every %.0f s (other keys go on): %s",
                      self.key, where, attempts, self.retry.max_backoff, error)
        return False

    def _exhausted_action(self, record: Record, error: Exception, attempts: int) -> FailureAction:
        try:
            answer: Any = self.processor.on_exhausted(record, error, attempts)
            if answer is None:
                return self.retry.decide(FailedBatch(self.key, self.stream, self.shard_id, (record,), attempts, error))
            return FailureAction(answer.value if isinstance(answer, FailureAction) else answer)
        except Exception as exc:
            log.error("%s: on_exhausted raised %s: %s (the record is retried)", self.key, type(exc).__name__, exc)
            return FailureAction.RETRY

    # --- room, stop, checkpoints ------------------------------------------------------------

    def _wait_for_room(self, size: int) -> bool:
        """Wait until the shard's and the Worker's caps allow one more record; False if stopping."""
        while True:
            if self.stopping():
                return False
            with self._cond:
                room = self.progress.pending < self.max_pending_records and (
                    self._pending_bytes == 0 or self._pending_bytes + size <= self.max_pending_bytes)
                if not room:
                    self._cond.wait(ROOM_WAIT)
            if room:
                if not self.executor.full() or self._pending_bytes == 0:
                    return True
                self.executor.wait_for_room(ROOM_WAIT)
            self._kick()
            self._maybe_flush()

    def _close(self, lost: bool = False) -> int:
        """Start nothing more; drop the queued records (the next owner delivers them), those
        waiting in the thread pool included (``lost``: cancel every call). Returns how many
        were dropped."""
        with self._cond:
            self._open = False
            self._lost = self._lost or lost
            calls = [c for c in self._calls.values() if lost or not self.is_async]
            dropped = [r for q in self._queues.values() for _, r in q]
            for key in list(self._queues):
                if key not in self._active_keys:
                    del self._queues[key]
                else:
                    self._queues[key].clear()
            self._ready.clear()
            for index, (record, key) in list(self._backoff.items()):
                self._abandon(index, record, key)  # waiting to be retried: never started again
            self._backoff.clear()
            size = sum(len(r.data) for r in dropped)
            self._pending_bytes -= size
            self._cond.notify_all()
        self.executor.release(size)
        for call in calls:  # a pool call not started yet is cancelled (dropped); a running one goes on
            call.cancel()
        return len(dropped)

    def _maybe_flush(self) -> None:
        requested = self.processor.take_checkpoint_request()
        if requested or time.monotonic() - self._last_flush >= self.interval:
            self._flush()

    def _flush(self) -> None:
        """Checkpoint the watermark and the records completed beyond it (consumer thread only)."""
        checkpointer = self._checkpointer
        if checkpointer is None:
            return
        with self._cond:
            checkpoint, completed = self.progress.snapshot()
            done = self._completed
        self._last_flush = time.monotonic()
        try:
            checkpointer.write_progress(checkpoint, completed)
        except LeaseLostError:
            raise
        except Exception as exc:  # throttled, unreachable: the progress is written at the next one
            self.counters.count("checkpoint_errors")
            log.warning("%s: progress checkpoint failed (tried again in %.1f s; a crash now delivers the "
                        "records after the last one again): %s: %s", self.key, self.interval,
                        type(exc).__name__, exc)
            return
        self._completed_at_flush = done

