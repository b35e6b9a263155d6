"""The shard consumer's parts without AWS and without threads: the read-failure backoff, the
retries of a batch the processor raised on, the start and the end of a shard, and the
placeholder coordinator."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import UTC, datetime

import pytest
from botocore.exceptions import EndpointConnectionError

from kinesis.consumer.retrieval.failures import (
    MAX_READ_BACKOFF,
    READ_ERRORS,
    ReadFailures,
    read_backoff,
)
from kinesis.consumer.retrieval.positions import (
    LATEST,
    SHARD_END,
    TRIM_HORIZON,
    Checkpoint,
    InitialPosition,
    Position,
)
from kinesis.consumer.retrieval.records import Record
from kinesis.consumer.shard.checkpointer import LeaseCheckpointer
from kinesis.consumer.shard.consumer import (
    NoCoordinator,
    StartPoint,
    deliver,
    exhausted_action,
    finish_shard,
    logs_stuck,
    pending_position,
    pinned_start,
    start_point,
    undelivered,
)
from kinesis.consumer.shard.failures import (
    FailedBatch,
    FailureAction,
    FailureState,
    ProcessorRetryPolicy,
)
from kinesis.consumer.worker.config import StreamConfig
from kinesis.errors import KinesisRetriesExhaustedError, LeaseLostError

# --- read failures -------------------------------------------------------------------------


def test_the_read_backoff_doubles_from_the_larger_of_poll_and_idle_backoff_up_to_the_cap() -> None:
    assert [read_backoff(n, 0.5, 1.0) for n in (1, 2, 3, 4)] == [1.0, 2.0, 4.0, 8.0]
    assert read_backoff(1, 2.0, 1.0) == 2.0  # the poll interval when it is the longer
    assert read_backoff(6, 0.5, 1.0) == MAX_READ_BACKOFF == 30.0
    assert read_backoff(500, 0.5, 1.0) == MAX_READ_BACKOFF


def test_a_run_of_read_failures_says_whether_the_error_is_new() -> None:
    failures = ReadFailures()
    first = failures.failed(KinesisRetriesExhaustedError("throttled"), poll=0.5, idle_backoff=1.0)
    again = failures.failed(KinesisRetriesExhaustedError("throttled"), poll=0.5, idle_backoff=1.0)
    other = failures.failed(EndpointConnectionError(endpoint_url="http://x"), poll=0.5, idle_backoff=1.0)
    assert (first.attempt, first.delay, first.repeated, first.unexpected) == (1, 1.0, False, False)
    assert first.error == "KinesisRetriesExhaustedError: throttled"
    assert (again.attempt, again.delay, again.repeated) == (2, 2.0, True)
    assert (other.attempt, other.delay, other.repeated, other.unexpected) == (3, 4.0, False, True)


def test_a_read_that_succeeds_ends_the_run() -> None:
    failures = ReadFailures()
    assert failures.resumed() == 0  # nothing to log
    for _ in range(2):
        failures.failed(KinesisRetriesExhaustedError("x"), poll=0.5, idle_backoff=1.0)
    assert failures.resumed() == 2
    assert failures.resumed() == 0
    after = failures.failed(KinesisRetriesExhaustedError("x"), poll=0.5, idle_backoff=1.0)
    assert (after.attempt, after.delay, after.repeated) == (1, 1.0, False)


def test_a_lost_lease_is_not_a_read_failure() -> None:
    # a read failure keeps the lease; a lost lease must reach the consumer's lease-lost path
    assert not issubclass(LeaseLostError, READ_ERRORS)
    assert issubclass(KinesisRetriesExhaustedError, READ_ERRORS)


# --- batch retries -------------------------------------------------------------------------


def rec(seq: int) -> Record:
    return Record("orders", "shardId-0", str(seq), 0, "pk", b"x", None, None, False)


def test_undelivered_drops_what_was_checkpointed() -> None:
    batch = [rec(1), rec(2), rec(3)]
    assert undelivered(batch, None) == batch
    assert undelivered(batch, Position("2", 0)) == [rec(3)]
    assert undelivered(batch, Position("3", 0)) == []


def test_the_exhausted_action_is_retry_without_a_handler_and_when_the_handler_raises() -> None:
    batch = FailedBatch("app/orders/shardId-0", "orders", "shardId-0", (rec(1),), 3, ValueError("bad"))
    assert exhausted_action(ProcessorRetryPolicy(), batch) == (FailureAction.RETRY, None)
    skip = ProcessorRetryPolicy(on_exhausted=lambda b: FailureAction.SKIP)
    assert exhausted_action(skip, batch) == (FailureAction.SKIP, None)
    boom = RuntimeError("dead-letter queue down")

    def raising(b: FailedBatch) -> FailureAction:
        raise boom

    assert exhausted_action(ProcessorRetryPolicy(on_exhausted=raising), batch) == (FailureAction.RETRY, boom)


def test_the_stuck_line_is_logged_when_stuck_and_every_tenth_attempt() -> None:
    policy = ProcessorRetryPolicy(max_attempts=3)
    assert [n for n in range(1, 31) if logs_stuck(n, policy)] == [3, 10, 20, 30]


@dataclass
class Pool:
    counts: dict[str, int] = field(default_factory=dict)

    def count(self, name: str, n: int = 1) -> None:
        self.counts[name] = self.counts.get(name, 0) + n


@dataclass
class Consumer:
    """Stands in for ShardConsumer: records the waits instead of waiting."""

    key: str = "app/orders/shardId-0"
    shard_id: str = "shardId-0"
    state: str = "processing"
    failure: FailureState = field(default_factory=FailureState)
    spec: StreamConfig = field(default_factory=lambda: StreamConfig("orders", "app"))
    pool: Pool = field(default_factory=Pool)
    waits: list[float] = field(default_factory=list)
    seen: list[tuple[str, int]] = field(default_factory=list)  # (state, attempts) at every wait
    stop_after: int | None = None
    call_started: float | None = None
    timed_at_waits: list[float | None] = field(default_factory=list)

    def wait_to_retry(self, delay: float) -> bool:
        self.timed_at_waits.append(self.call_started)
        self.waits.append(delay)
        self.seen.append((self.state, self.failure.attempts))
        return self.stop_after is None or len(self.waits) < self.stop_after


@dataclass
class Checkpointer:
    last_checkpoint: Position | None = None


class Processor:
    """Raises ``fail`` times; ``checkpoint_first`` checkpoints the first record before raising."""

    def __init__(self, fail: int, checkpoint_first: bool = False):
        self.fail, self.checkpoint_first = fail, checkpoint_first
        self.deliveries: list[list[str]] = []

    def process_records(self, records, checkpointer, millis_behind_latest=None) -> None:
        self.deliveries.append([r.sequence_number for r in records])
        if self.checkpoint_first and len(self.deliveries) == 2:
            checkpointer.last_checkpoint = records[0].position
        if len(self.deliveries) <= self.fail:
            raise ValueError(f"poison {len(self.deliveries)}")


POLICY = ProcessorRetryPolicy(initial_backoff=0.5, max_backoff=4.0, max_attempts=3)


def test_a_batch_is_retried_with_backoff_until_the_processor_succeeds() -> None:
    consumer, processor = Consumer(), Processor(fail=2)
    assert deliver(consumer, [rec(1), rec(2)], 7, processor, Checkpointer(), POLICY)
    assert processor.deliveries == [["1", "2"]] * 3
    assert consumer.waits == [0.5, 1.0]
    assert consumer.seen == [("retrying", 1), ("retrying", 2)]
    assert consumer.pool.counts == {"processor_errors": 2}
    assert consumer.failure == FailureState() and consumer.state == "processing"


def test_only_the_processor_call_is_timed_for_the_watchdog_never_the_backoff() -> None:
    consumer = Consumer()
    timed: list[float | None] = []

    class Timed(Processor):
        def process_records(self, records, checkpointer, millis_behind_latest=None) -> None:
            timed.append(consumer.call_started)
            super().process_records(records, checkpointer, millis_behind_latest)

    assert deliver(consumer, [rec(1)], None, Timed(fail=2), Checkpointer(), POLICY)
    assert len(timed) == 3 and all(t is not None for t in timed)
    assert consumer.timed_at_waits == [None, None] and consumer.call_started is None


def test_a_checkpoint_between_failures_starts_the_count_again_and_is_not_delivered_again() -> None:
    consumer, processor = Consumer(), Processor(fail=3, checkpoint_first=True)
    assert deliver(consumer, [rec(1), rec(2), rec(3)], None, processor, Checkpointer(), POLICY)
    assert processor.deliveries == [["1", "2", "3"], ["1", "2", "3"], ["2", "3"], ["2", "3"]]
    assert [attempts for _, attempts in consumer.seen] == [1, 1, 2]  # progress at the 2nd attempt
    assert consumer.waits == [0.5, 0.5, 1.0]


def test_a_stuck_batch_is_retried_at_max_backoff_without_a_handler() -> None:
    consumer, processor = Consumer(), Processor(fail=5)
    assert deliver(consumer, [rec(1)], None, processor, Checkpointer(), POLICY)
    assert consumer.waits == [0.5, 1.0, 2.0, 4.0, 4.0]
    assert consumer.seen[2:] == [("stuck", 3), ("stuck", 4), ("stuck", 5)]
    assert consumer.pool.counts == {"processor_errors": 5}  # nothing skipped


def test_a_stuck_batch_the_handler_skips_counts_as_processed() -> None:
    policy = ProcessorRetryPolicy(initial_backoff=0.5, max_attempts=2, on_exhausted=lambda b: "skip")
    consumer, processor = Consumer(), Processor(fail=99)
    assert deliver(consumer, [rec(1), rec(2)], None, processor, Checkpointer(), policy)
    assert len(processor.deliveries) == 2 and consumer.waits == [0.5]
    assert consumer.pool.counts == {"processor_errors": 2, "batches_skipped": 1, "records_skipped": 2}
    assert consumer.failure == FailureState()


def test_a_stop_while_retrying_leaves_the_batch_to_the_next_owner() -> None:
    consumer, processor = Consumer(stop_after=1), Processor(fail=99)
    assert not deliver(consumer, [rec(1)], None, processor, Checkpointer(), POLICY)
    assert len(processor.deliveries) == 1
    assert consumer.state == "retrying" and consumer.failure.attempts == 1
    assert consumer.failure.error == "ValueError: poison 1"


def test_a_lost_lease_is_not_retried() -> None:
    class Losing:
        def process_records(self, records, checkpointer, millis_behind_latest=None) -> None:
            raise LeaseLostError("taken")

    consumer = Consumer()
    with pytest.raises(LeaseLostError):
        deliver(consumer, [rec(1)], None, Losing(), Checkpointer(), POLICY)
    assert consumer.waits == [] and consumer.pool.counts == {}


# --- the placeholder coordinator -----------------------------------------------------------


def test_before_the_worker_wires_its_coordinator_nothing_is_held_and_checkpoints_fail() -> None:
    none = NoCoordinator()
    assert not none.holds("k") and none.lease("k") is None and not none.release("k")
    for call in (none.checkpoint, none.prepare_checkpoint):
        with pytest.raises(LeaseLostError):
            call("k", Position("1", 0))


# --- the start and the end of a shard ------------------------------------------------------


def test_only_latest_is_pinned_to_the_moment_of_the_first_acquisition() -> None:
    now = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)
    assert pinned_start(LATEST, now) == Checkpoint.at_timestamp(now)
    assert pinned_start(TRIM_HORIZON, now) is None
    assert pinned_start(Position("7", 0), now) is None


def test_the_start_point_of_a_checkpointed_shard_and_of_a_fresh_one() -> None:
    stream_start = InitialPosition.LATEST
    checkpointed = start_point(Position("5", 0), Position("9", 0), stream_start)
    assert checkpointed == StartPoint(last=Position("5", 0), pending=Position("9", 0), initial=stream_start)
    fresh = start_point(TRIM_HORIZON, None, stream_start)
    assert fresh == StartPoint(last=None, pending=None, initial=TRIM_HORIZON)


def test_a_pending_checkpoint_behind_the_checkpoint_is_ignored() -> None:
    assert pending_position(Position("9", 0), Position("5", 0)) == Position("9", 0)
    assert pending_position(Position("5", 0), Position("5", 0)) is None  # not ahead
    assert pending_position(Position("3", 0), Position("5", 0)) is None  # checkpointed past it
    assert pending_position(None, Position("5", 0)) is None


class Sink:
    def __init__(self) -> None:
        self.written: list[object] = []

    def checkpoint(self, key: str, checkpoint: object) -> None:
        self.written.append(checkpoint)

    def prepare_checkpoint(self, key: str, checkpoint: object) -> None:
        raise AssertionError("not used")


class Ending:
    def __init__(self, checkpoints: bool):
        self.checkpoints = checkpoints

    def shard_ended(self, checkpointer) -> None:
        if self.checkpoints:
            checkpointer.checkpoint()


@pytest.mark.parametrize("checkpoints", [True, False])
def test_a_shard_ends_only_once_the_processor_checkpointed_shard_end(
    checkpoints: bool, caplog: pytest.LogCaptureFixture
) -> None:
    sink = Sink()
    checkpointer = LeaseCheckpointer(sink, "app/orders/shardId-0", "orders", "shardId-0", Position("5", 0))
    with caplog.at_level(logging.ERROR, logger="kinesis.consumer.shard.consumer"):
        assert finish_shard("app/orders/shardId-0", Ending(checkpoints), checkpointer) is checkpoints
    assert sink.written == ([SHARD_END] if checkpoints else [])
    errors = [r for r in caplog.records if r.name == "kinesis.consumer.shard.consumer"]
    assert [r.levelno for r in errors] == ([] if checkpoints else [logging.ERROR])
