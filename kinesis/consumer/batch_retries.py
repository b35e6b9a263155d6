"""Delivering one batch to a processor that raises: retry it in place, with backoff.

The policy (backoff, ``max_attempts``, ``on_exhausted``) is
:class:`~kinesis.consumer.processing_failures.ProcessorRetryPolicy`; this is how a shard
consumer follows it for one batch: count the failed attempt (again from 1 after a
checkpoint), log it, wait, and deliver again what was not checkpointed. Once stuck, the
policy's handler may skip the batch; a handler that raises counts as RETRY. The decisions
(:func:`undelivered`, :func:`exhausted_action`, :func:`logs_stuck`) are pure functions.
"""

from __future__ import annotations

import logging
from typing import Protocol

from kinesis.consumer.lease_checkpointer import LeaseCheckpointer
from kinesis.consumer.positions import Position
from kinesis.consumer.processing_failures import (
    FailedBatch,
    FailureAction,
    FailureState,
    ProcessorRetryPolicy,
)
from kinesis.consumer.processor import RecordProcessor
from kinesis.consumer.records import Record
from kinesis.consumer.worker_config import StreamConfig
from kinesis.errors import LeaseLostError

log = logging.getLogger("kinesis.consumer.shard_consumer")
"""The shard consumer's logger: these lines keep the name operators filter on."""


class Counting(Protocol):
    def count(self, name: str, n: int = 1) -> None: ...


class RetryingConsumer(Protocol):
    """The part of :class:`~kinesis.consumer.shard_consumer.ShardConsumer` a retry uses."""

    key: str
    shard_id: str
    state: str
    failure: FailureState

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

    Returns False if the consumer was stopped meanwhile (see :mod:`kinesis.consumer.processing_failures`).
    """
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
