"""The keyed runner (kinesis.consumer.keyed.runner) on its own: per-key order, the in-flight
cap, backpressure, per-record failures that hold up only their key, and exact hand-offs. Its
executor is the real one; only the lease sink is a recorder (the Worker tests use moto)."""

from __future__ import annotations

import asyncio
import threading
from collections import defaultdict
from typing import Any, ClassVar

import pytest

from kinesis import (
    TRIM_HORIZON,
    ConfigurationError,
    FailureAction,
    KeyedProcessor,
    ProcessorRetryPolicy,
    Record,
)
from kinesis.consumer.keyed.executor import KeyedExecutor
from kinesis.consumer.keyed.progress import usable
from kinesis.consumer.keyed.runner import KeyedRunner, check_keyed_class
from kinesis.consumer.retrieval.positions import Checkpoint
from kinesis.consumer.shard.checkpointer import LeaseCheckpointer
from tests.support.waiting import eventually


def seq(i: int) -> str:
    return str(49 * 10**54 + i * 3)


def record(i: int, key: str) -> Record:
    return Record("s", "shardId-0", seq(i), 0, key, f"{key}:{i}".encode(), None, None, False)


class Sink:
    """Records every checkpoint written (the coordinator's part a checkpointer calls)."""

    def __init__(self) -> None:
        self.writes: list[tuple[Checkpoint, str | None]] = []

    def checkpoint(self, key: str, checkpoint: Any, *, completed: str | None = None) -> Any:
        self.writes.append((Checkpoint.of(checkpoint), completed))

    def prepare_checkpoint(self, key: str, checkpoint: Any) -> Any:
        raise AssertionError("not used")


class Counters:
    def __init__(self) -> None:
        self.counts: dict[str, int] = defaultdict(int)

    def count(self, name: str, n: int = 1) -> None:
        self.counts[name] += n


@pytest.fixture
def executor() -> Any:
    ex = KeyedExecutor(threads=8)
    yield ex
    ex.close()


def runner_for(processor: KeyedProcessor, executor: KeyedExecutor, *, start: Checkpoint = TRIM_HORIZON,
               completed: str | None = None, stop: threading.Event | None = None,
               retry: ProcessorRetryPolicy | None = None) -> tuple[KeyedRunner, LeaseCheckpointer, Sink]:
    stop = stop or threading.Event()
    runner = KeyedRunner(processor, executor, key="app/s/shardId-0", stream="s", shard_id="shardId-0", start=start,
                         completed=completed, retry=retry or ProcessorRetryPolicy(initial_backoff=0.01, max_backoff=0.02),
                         stopping=stop.is_set, counters=Counters())
    sink = Sink()
    return runner, LeaseCheckpointer(sink, "app/s/shardId-0", "s", "shardId-0"), sink


class Ledger(KeyedProcessor):
    """Async: notes each record per key, checks it never overlaps its key, tracks concurrency."""

    max_in_flight = 8

    def __init__(self) -> None:
        super().__init__()
        self.by_key: dict[str, list[int]] = defaultdict(list)
        self.busy: set[str] = set()
        self.running = 0
        self.peak = 0
        self.overlaps = 0

    async def process(self, record: Record) -> None:
        key = record.partition_key
        if key in self.busy:
            self.overlaps += 1
        self.busy.add(key)
        self.running += 1
        self.peak = max(self.peak, self.running)
        await asyncio.sleep(0.002 * (hash(record.data) % 3))
        self.by_key[key].append(int(record.sequence_number))
        self.running -= 1
        self.busy.discard(key)


def test_records_of_a_key_run_in_order_one_at_a_time_and_keys_run_concurrently(executor: KeyedExecutor) -> None:
    processor = Ledger()
    runner, cp, sink = runner_for(processor, executor)
    records = [record(i, f"k{i % 20}") for i in range(400)]
    cp.record_delivered(records[-1:])
    runner.process_records(records, cp)
    eventually(lambda: sum(map(len, processor.by_key.values())) == 400, what="every record processed")
    for key, seen in processor.by_key.items():
        assert seen == sorted(seen), key
    assert processor.overlaps == 0
    assert 1 < processor.peak <= 8
    runner.tick()
    runner.shutdown_requested(cp)
    assert sink.writes[-1] == (records[-1].position, None)  # every record done: a plain checkpoint


class Blocking(KeyedProcessor):
    """Plain ``process`` (the thread pool): records of key ``slow`` wait for ``gate``."""

    max_in_flight = 4
    max_pending_records = 12
    gate: ClassVar[threading.Event]

    def __init__(self) -> None:
        super().__init__()
        self.done: list[int] = []
        self.lock = threading.Lock()

    def process(self, record: Record) -> None:
        if record.partition_key == "slow":
            assert self.gate.wait(30)
        with self.lock:
            self.done.append(int(record.sequence_number))


def test_reading_pauses_at_the_pending_cap_while_other_keys_keep_flowing(executor: KeyedExecutor) -> None:
    Blocking.gate = threading.Event()
    processor = Blocking()
    runner, cp, _ = runner_for(processor, executor)
    records = [record(0, "slow")] + [record(i, f"k{i}") for i in range(1, 40)]
    cp.record_delivered(records[-1:])
    feeder = threading.Thread(target=runner.process_records, args=(records, cp))
    feeder.start()
    # the slow record holds the watermark: 11 more complete, then the window (12) is full
    eventually(lambda: len(processor.done) == 11, what="other keys processed")
    status = runner.status()
    assert status.pending == 12 and status.in_flight == 1 and feeder.is_alive()
    Blocking.gate.set()
    feeder.join(30)
    assert not feeder.is_alive()
    eventually(lambda: len(processor.done) == 40, what="everything processed")


class Flaky(KeyedProcessor):
    max_in_flight = 4

    def __init__(self, fail_times: int, answer: Any = None) -> None:
        super().__init__()
        self.fail_times = fail_times
        self.answer = answer
        self.attempts: dict[int, int] = defaultdict(int)
        self.done: list[tuple[str, int]] = []
        self.exhausted: list[int] = []

    async def process(self, record: Record) -> None:
        n = int(record.sequence_number)
        if record.partition_key == "poison":
            self.attempts[n] += 1
            if self.attempts[n] <= self.fail_times:
                raise ValueError(f"bad record {n}")
        self.done.append((record.partition_key, n))

    def on_exhausted(self, record: Record, error: BaseException, attempts: int) -> Any:
        self.exhausted.append(attempts)
        return self.answer


def test_a_failing_record_is_retried_while_other_keys_go_on(executor: KeyedExecutor) -> None:
    processor = Flaky(fail_times=3)
    runner, cp, _ = runner_for(processor, executor)
    records = [record(0, "poison"), record(1, "poison"), *(record(i, f"k{i}") for i in range(2, 30))]
    cp.record_delivered(records[-1:])
    runner.process_records(records, cp)
    eventually(lambda: len(processor.done) == 30, what="all records, the poison key after its retries")
    assert processor.attempts[int(seq(0))] == 4
    poison = [n for key, n in processor.done if key == "poison"]
    assert poison == [int(seq(0)), int(seq(1))]  # in order, the second after the first succeeded
    assert runner.counters.counts["processor_errors"] == 6  # type: ignore[attr-defined]


def test_on_exhausted_skips_one_record_without_blocking_its_key_for_ever(executor: KeyedExecutor) -> None:
    processor = Flaky(fail_times=100, answer=FailureAction.SKIP)
    runner, cp, sink = runner_for(processor, executor, retry=ProcessorRetryPolicy(
        initial_backoff=0.01, max_backoff=0.02, max_attempts=3))
    records = [record(0, "poison"), record(1, "ok")]
    cp.record_delivered(records[-1:])
    runner.process_records(records, cp)
    eventually(lambda: runner.status().pending == 0, what="the poison record skipped")
    assert processor.exhausted == [3] and processor.done == [("ok", int(seq(1)))]
    runner.shutdown_requested(cp)
    assert sink.writes[-1][0] == records[-1].position


def test_a_hand_off_checkpoints_exactly_and_the_next_owner_processes_only_the_rest(executor: KeyedExecutor) -> None:
    class QuickDrain(Blocking):
        drain_timeout = 0.2  # the slow record outlives the hand-off's drain

    Blocking.gate = threading.Event()
    first = QuickDrain()
    stop = threading.Event()
    runner, cp, sink = runner_for(first, executor, stop=stop)
    records = [record(0, "slow"), *(record(i, f"k{i % 5}") for i in range(1, 11)), record(11, "slow")]
    cp.record_delivered(records[-1:])
    runner.process_records(records, cp)
    eventually(lambda: len(first.done) == 10, what="the fast keys processed")
    stop.set()
    runner.shutdown_requested(cp)
    checkpoint, completed = sink.writes[-1]
    assert checkpoint == TRIM_HORIZON and completed is not None  # record 0 never completed
    # the next owner reads the same records from the checkpoint
    Blocking.gate.set()
    second = Blocking()
    runner2, cp2, sink2 = runner_for(second, executor, start=checkpoint, completed=completed)
    assert usable(completed, checkpoint, "k") is not None
    cp2.record_delivered(records[-1:])
    runner2.process_records(records, cp2)
    eventually(lambda: len(second.done) == 2, what="the records that had not completed")
    assert sorted(second.done) == [int(seq(0)), int(seq(11))]
    assert not set(second.done) & {int(s) for s in first.done if s != int(seq(0))}
    runner2.shutdown_requested(cp2)
    assert sink2.writes[-1] == (records[-1].position, None)


@pytest.mark.parametrize(("attrs", "message"), [
    ({"max_in_flight": 0}, "max_in_flight"),
    ({"max_in_flight": True}, "max_in_flight"),
    ({"ordering": "partition"}, "ordering"),
    ({"max_pending_records": 4, "max_in_flight": 8}, "max_pending_records"),
    ({"checkpoint_interval": -1}, "checkpoint_interval"),
])
def test_impossible_limits_are_refused_by_name(attrs: dict[str, Any], message: str) -> None:
    cls = type("Bad", (Ledger,), attrs)
    with pytest.raises(ConfigurationError, match=message):
        check_keyed_class(cls)
    with pytest.raises(ConfigurationError, match="must implement process"):
        check_keyed_class(type("Empty", (KeyedProcessor,), {}))


def test_nothing_starts_while_the_lease_has_lapsed_and_a_lost_lease_cancels_what_runs(
        executor: KeyedExecutor) -> None:
    """The consumer pauses reads while its lease is not valid; the runner likewise starts no
    record (another member may take the lease), and once the lease is lost it cancels the
    calls still running."""
    valid = threading.Event()
    started: list[str] = []
    cancelled: list[str] = []

    class Hanging(KeyedProcessor):
        max_in_flight = 4

        async def process(self, record: Record) -> None:
            started.append(record.partition_key)
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                cancelled.append(record.partition_key)
                raise

    runner = KeyedRunner(Hanging(), executor, key="k", stream="s", shard_id="shardId-0", start=TRIM_HORIZON,
                         completed=None, retry=ProcessorRetryPolicy(), stopping=lambda: False, counters=Counters(),
                         valid=valid.is_set)
    cp = LeaseCheckpointer(Sink(), "k", "s", "shardId-0")
    records = [record(i, f"k{i}") for i in range(6)]
    cp.record_delivered(records[-1:])
    runner.process_records(records, cp)
    runner.tick()
    assert started == [] and runner.status().queued == 6
    valid.set()
    runner.tick()  # renewed: the next read starts what was held back
    eventually(lambda: len(started) == 4, what="4 records started")
    runner.lease_lost()
    eventually(lambda: sorted(cancelled) == sorted(started), what="the running calls cancelled")
    eventually(lambda: runner.status().in_flight == 0, what="nothing in flight")
    assert len(started) == 4  # the queued ones never start


# --- review regressions: each failed before its fix ------------------------------------------


def test_a_cancelled_pool_call_never_counts_as_an_attempt_nor_is_skipped() -> None:
    """A plain call cancelled before it ran (the Worker stops) is abandoned, never handed to
    on_exhausted: a SKIP would count a record that never ran as completed."""
    gate = threading.Event()
    ran: list[int] = []
    exhausted: list[int] = []

    class Dead(KeyedProcessor):
        max_in_flight = 4

        def process(self, record: Record) -> None:
            ran.append(int(record.sequence_number))
            gate.wait(10)

        def on_exhausted(self, record: Record, error: BaseException, attempts: int) -> Any:
            exhausted.append(int(record.sequence_number))
            return FailureAction.SKIP

    executor = KeyedExecutor(threads=1)  # busy with the first record: the others wait in its queue
    runner, cp, sink = runner_for(Dead(), executor, retry=ProcessorRetryPolicy(max_attempts=1))
    records = [record(i, f"k{i}") for i in range(3)]
    cp.record_delivered(records[-1:])
    runner.process_records(records, cp)
    eventually(lambda: len(ran) == 1, what="the first record running")
    executor.close()  # cancels what waits in the pool
    gate.set()
    eventually(lambda: runner.status().in_flight == 0, what="nothing in flight")
    runner.tick()
    runner._flush()
    assert exhausted == [] and ran == [int(seq(0))]
    assert sink.writes[-1][0] == records[0].position  # only the record that ran


def test_a_hand_off_drops_records_still_waiting_in_the_shared_pool() -> None:
    gate = threading.Event()
    ran: list[int] = []

    class Other(KeyedProcessor):  # another shard's record holds the only pool thread
        def process(self, record: Record) -> None:
            gate.wait(10)

    class Mine(KeyedProcessor):
        max_in_flight = 8
        drain_timeout = 0.2

        def process(self, record: Record) -> None:
            ran.append(int(record.sequence_number))

    executor = KeyedExecutor(threads=1)
    try:
        other, cp_other, _ = runner_for(Other(), executor)
        cp_other.record_delivered([record(0, "x")])
        other.process_records([record(0, "x")], cp_other)
        stop = threading.Event()
        mine, cp, sink = runner_for(Mine(), executor, stop=stop)
        records = [record(i, f"k{i}") for i in range(1, 4)]
        cp.record_delivered(records[-1:])
        mine.process_records(records, cp)
        stop.set()
        mine.shutdown_requested(cp)
        assert sink.writes[-1] == (TRIM_HORIZON, None) and mine.status().in_flight == 0
        gate.set()
        behind = threading.Event()  # queued after them: once it ran, they would have too
        executor.run_sync(lambda: None, lambda _error: behind.set())
        assert behind.wait(10)
        assert ran == []  # never started: the next owner delivers them once
    finally:
        gate.set()
        executor.close()


def test_shard_end_starts_what_a_lapsed_lease_held_back(executor: KeyedExecutor) -> None:
    gate = threading.Event()
    valid = threading.Event()
    valid.set()

    class One(KeyedProcessor):
        max_in_flight = 1

        def process(self, record: Record) -> None:
            if record.partition_key == "a":
                gate.wait(10)

    runner = KeyedRunner(One(), executor, key="k", stream="s", shard_id="shardId-0", start=TRIM_HORIZON,
                         completed=None, retry=ProcessorRetryPolicy(), stopping=lambda: False, counters=Counters(),
                         valid=valid.is_set)
    sink = Sink()
    cp = LeaseCheckpointer(sink, "k", "s", "shardId-0")
    records = [record(0, "a"), record(1, "b")]
    cp.record_delivered(records[-1:])
    runner.process_records(records, cp)
    cp.mark_shard_end()
    ender = threading.Thread(target=runner.shard_ended, args=(cp,))
    ender.start()
    valid.clear()  # a renewal is late while the first record completes: the second is held back
    gate.set()
    eventually(lambda: runner.status().in_flight == 0, what="the first record done")
    valid.set()  # renewed
    ender.join(10)
    assert not ender.is_alive() and cp.shard_end_checkpointed


def test_a_retry_waits_while_the_lease_has_lapsed(executor: KeyedExecutor) -> None:
    valid = threading.Event()
    valid.set()
    attempts: list[bool] = []
    asked_while_lapsed: list[int] = []

    def is_valid() -> bool:
        if not valid.is_set():
            asked_while_lapsed.append(len(attempts))
        return valid.is_set()

    class Flaky(KeyedProcessor):
        def process(self, record: Record) -> None:
            attempts.append(valid.is_set())
            if len(attempts) == 1:
                valid.clear()  # the lease lapses while the first attempt fails
                raise RuntimeError("transient")

    runner = KeyedRunner(Flaky(), executor, key="k", stream="s", shard_id="shardId-0", start=TRIM_HORIZON,
                         completed=None, retry=ProcessorRetryPolicy(initial_backoff=0.01, max_backoff=0.01),
                         stopping=lambda: False, counters=Counters(), valid=is_valid)
    cp = LeaseCheckpointer(Sink(), "k", "s", "shardId-0")
    cp.record_delivered([record(0, "a")])
    runner.process_records([record(0, "a")], cp)
    # the retry came due twice while the lease had lapsed, and did not run
    eventually(lambda: asked_while_lapsed.count(1) >= 2, what="the retry held back")
    assert attempts == [True]
    valid.set()
    eventually(lambda: len(attempts) == 2, what="the retry once renewed")
    assert attempts == [True, True]


def test_async_hooks_other_than_process_are_refused_by_name() -> None:
    class AsyncInit(Ledger):
        async def initialize(self, init: Any) -> None:  # type: ignore[override]
            pass

    with pytest.raises(ConfigurationError, match=r"AsyncInit\.initialize must be a plain method"):
        check_keyed_class(AsyncInit)


def test_a_cancellation_raised_by_the_processor_itself_is_a_failed_attempt(executor: KeyedExecutor) -> None:
    """Only the SDK's own cancellations abandon a record (the lease ended): one the processor's
    code raises while the lease is held is retried, or the watermark would stall for ever."""
    calls: list[int] = []

    class Cancelling(KeyedProcessor):
        async def process(self, record: Record) -> None:
            calls.append(int(record.sequence_number))
            if calls.count(int(seq(1))) == 1 and record.sequence_number == seq(1):
                raise asyncio.CancelledError  # e.g. a shared client cancelled its future

    runner, cp, sink = runner_for(Cancelling(), executor)
    records = [record(i, f"k{i}") for i in range(3)]
    cp.record_delivered(records[-1:])
    runner.process_records(records, cp)
    eventually(lambda: runner.status().pending == 0, what="every record completed, the cancelled one retried")
    assert calls.count(int(seq(1))) == 2
    cp.mark_shard_end()
    runner.shard_ended(cp)
    assert sink.writes[-2] == (records[-1].position, None) and cp.shard_end_checkpointed
