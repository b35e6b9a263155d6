"""Keyed-parallel processors in a Worker on moto (HTTP): per-key order on every record, exactly
once in steady state, an exact resume after a crash (the next owner skips what completed), and a
graceful hand-off with no duplicate."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections import Counter
from typing import Any, ClassVar

from kinesis import (
    AsyncRecordProcessor,
    Checkpointer,
    InitializationInput,
    KeyedProcessor,
    Record,
    StreamConfig,
    Worker,
    WorkerConfig,
)
from kinesis.lease_loop.table.leases import LeaseTable
from kinesis.testing import LocalAWS
from tests.support.waiting import eventually
from tests.support.worker_journal import put_records

TABLE = "keyed-leases"
logging.getLogger("werkzeug").setLevel(logging.ERROR)


class Ledger:
    """Every record processed, by worker, with a per-key order check (shared across threads)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.done: list[tuple[str, str, str]] = []  # (worker, shard, sequence)
        self.last: dict[tuple[str, str], int] = {}  # (shard, key) -> last sequence processed
        self.out_of_order: list[tuple[str, str]] = []

    def note(self, worker: str, record: Record) -> None:
        n = int(record.sequence_number)
        with self.lock:
            where = (record.shard_id, record.partition_key)
            if self.last.get(where, -1) >= n and worker == self.done[-1][0]:
                self.out_of_order.append(where)
            self.last[where] = n
            self.done.append((worker, record.shard_id, record.sequence_number))

    def of(self, worker: str) -> set[tuple[str, str]]:
        with self.lock:
            return {(s, q) for w, s, q in self.done if w == worker}


def config(name: str, **kw: Any) -> WorkerConfig:
    return WorkerConfig(table_name=TABLE, streams=[StreamConfig("orders", "app", "TRIM_HORIZON")], worker_id=name,
                        lease_duration=2.0, idle_backoff=0.1, shard_sync_interval=1.0, shutdown_grace=10.0, **kw)


def worker(aws: LocalAWS, factory: Any, name: str, **kw: Any) -> Worker:
    return Worker(config(name, **kw), factory, kinesis_client=aws.client("kinesis"),
                  dynamodb_client=aws.client("dynamodb"))


def test_an_async_keyed_processor_processes_every_record_once_in_key_order(aws: LocalAWS) -> None:
    kinesis = aws.client("kinesis")
    kinesis.create_stream(StreamName="orders", ShardCount=2)
    written = put_records(kinesis, "orders", 600, keys=30)
    ledger = Ledger()

    class Async(KeyedProcessor):
        max_in_flight = 16
        checkpoint_interval = 0.2
        peak: ClassVar[int] = 0
        running: ClassVar[int] = 0

        async def process(self, record: Record) -> None:
            cls = type(self)
            cls.running += 1
            cls.peak = max(cls.peak, cls.running)
            await asyncio.sleep(0.003)
            ledger.note("w1", record)
            cls.running -= 1

    w1 = worker(aws, Async, "w1").start()
    try:
        eventually(lambda: len(ledger.done) >= 600, 60, "every record processed")
        table = LeaseTable(aws.client("dynamodb"), TABLE)
        last = {shard: str(max(int(s) for sh, s in written if sh == shard)) for shard, _ in written}

        def checkpointed(shard: str) -> str | None:
            row = table.get(f"app/orders/{shard}")
            return None if row is None else row.checkpoint.sequence_number

        eventually(lambda: all(checkpointed(shard) == n for shard, n in last.items()), 30,
                   "checkpoints at the last records")
        status = w1.status()
        assert any(s.keyed is not None for s in status.shards)
    finally:
        assert w1.stop()
    assert Counter(ledger.done).most_common(1)[0][1] == 1 and ledger.of("w1") == set(written)
    assert ledger.out_of_order == []
    assert Async.peak > 1  # keys overlapped
    for shard in last:
        row = table.get(f"app/orders/{shard}")
        assert row is not None and row.completed is None  # all done: a plain checkpoint


class Gated(KeyedProcessor):
    """Plain ``process``: records of key ``r-key-0`` wait for ``gate`` (and, in the member that
    crashes, never complete); the rest complete at once."""

    max_in_flight = 8
    checkpoint_interval = 0.1
    gate: ClassVar[threading.Event]
    crashes: ClassVar[bool]
    ledger: ClassVar[Ledger]
    name: ClassVar[str]

    def process(self, record: Record) -> None:
        if record.partition_key == "r-key-0":
            self.gate.wait()
            if self.crashes:
                return  # the member is gone: this record never completed
        self.ledger.note(self.name, record)


def test_after_a_crash_the_next_owner_skips_every_record_that_had_completed(aws: LocalAWS) -> None:
    kinesis = aws.client("kinesis")
    kinesis.create_stream(StreamName="orders", ShardCount=1)
    written = put_records(kinesis, "orders", 200, keys=10)
    key0 = {q for i, (_, q) in enumerate(written) if i % 10 == 0}
    ledger = Ledger()
    table = LeaseTable(aws.client("dynamodb"), TABLE)
    first = type("First", (Gated,), {"gate": threading.Event(), "crashes": True, "ledger": ledger, "name": "w1"})
    w1 = worker(aws, first, "w1").start()
    w2: Worker | None = None
    try:
        eventually(lambda: len(ledger.of("w1")) == 180, 60, "w1 to complete every record but key 0's")
        row: Any = eventually(lambda: (r := table.get("app/orders/shardId-000000000000")) is not None
                              and r.completed and r, 30, "a checkpoint with the completed set")
        assert row.owner == "w1"
        w1.stop(graceful=False)  # a crash: the lease expires and is taken over
        second = type("Second", (Gated,), {"gate": threading.Event(), "crashes": False, "ledger": ledger,
                                            "name": "w2"})
        second.gate.set()
        w2 = worker(aws, second, "w2").start()
        eventually(lambda: len(ledger.of("w2")) == 20, 60, "w2 to process key 0's records")
        done: Any = eventually(lambda: (r := table.get("app/orders/shardId-000000000000")) is not None
                               and r.owner == "w2" and r.completed is None and r, 30, "w2's plain checkpoint")
        assert done.checkpoint.sequence_number == written[-1][1]
    finally:
        first.gate.set()
        w1.stop(graceful=False)
        if w2 is not None:
            w2.stop()
    assert {q for _, q in ledger.of("w2")} == key0  # exactly what had not completed
    assert {q for _, q in ledger.of("w1")} == {q for _, q in written} - key0
    assert ledger.out_of_order == []


class Slow(KeyedProcessor):
    max_in_flight = 4
    checkpoint_interval = 0.2
    ledger: ClassVar[Ledger]
    name: ClassVar[str]

    async def process(self, record: Record) -> None:
        await asyncio.sleep(0.02)
        self.ledger.note(self.name, record)


def test_a_graceful_hand_off_passes_the_exact_progress_with_no_duplicate(aws: LocalAWS) -> None:
    kinesis = aws.client("kinesis")
    kinesis.create_stream(StreamName="orders", ShardCount=2)
    written = set(put_records(kinesis, "orders", 800, keys=40))
    ledger = Ledger()
    a = type("A", (Slow,), {"ledger": ledger, "name": "a"})
    b = type("B", (Slow,), {"ledger": ledger, "name": "b"})
    wa = worker(aws, a, "a").start()
    wb: Worker | None = None
    try:
        eventually(lambda: len(ledger.of("a")) >= 100, 60, "a to be processing")
        wb = worker(aws, b, "b").start()
        eventually(lambda: len(ledger.of("b")) >= 50, 60, "b to take a shard")
        assert wa.stop()  # SIGTERM: every lease handed off with its exact progress
        eventually(lambda: len(ledger.done) >= len(written), 120, "every record processed")
    finally:
        wa.stop()
        if wb is not None:
            wb.stop()
    counts = Counter((s, q) for _, s, q in ledger.done)
    assert [k for k, n in counts.items() if n > 1] == []
    assert set(counts) == written
    assert ledger.out_of_order == []


def test_an_async_batch_processor_awaits_on_the_workers_loop_and_checkpoints_without_blocking_it(
        aws: LocalAWS) -> None:
    kinesis = aws.client("kinesis")
    kinesis.create_stream(StreamName="orders", ShardCount=3)
    written = put_records(kinesis, "orders", 300, keys=30)
    seen: list[tuple[str, str]] = []
    threads: set[str] = set()
    state = {"running": 0, "peak": 0}

    class Batches(AsyncRecordProcessor):
        async def initialize(self, init: InitializationInput) -> None:
            self.shard = init.shard_id

        async def process_records(self, records: list[Record], checkpointer: Checkpointer,
                                  millis_behind_latest: int | None = None) -> None:
            threads.add(threading.current_thread().name)
            state["running"] += 1
            state["peak"] = max(state["peak"], state["running"])
            await asyncio.sleep(0.2)  # the other shards' batches run meanwhile, on this thread
            seen.extend((r.shard_id, r.sequence_number) for r in records)
            await checkpointer.acheckpoint()
            state["running"] -= 1

    w1 = worker(aws, Batches, "w1").start()
    table = LeaseTable(aws.client("dynamodb"), TABLE)
    try:
        eventually(lambda: len(seen) >= 300, 60, "every record processed")
        last = {shard: str(max(int(s) for sh, s in written if sh == shard)) for shard, _ in written}
        eventually(lambda: all((row := table.get(f"app/orders/{shard}")) is not None
                               and row.checkpoint.sequence_number == n for shard, n in last.items()), 30,
                   "checkpoints at the last records")
    finally:
        assert w1.stop()
    assert sorted(seen) == sorted(written)
    assert threads == {"keyed-loop"} and state["peak"] > 1  # one thread, shards overlapping


def test_after_a_split_the_children_start_after_the_parents_last_record_completed(
        kinesis_resharding: LocalAWS) -> None:
    kinesis = kinesis_resharding.client("kinesis")
    kinesis.create_stream(StreamName="orders", ShardCount=1)
    before = put_records(kinesis, "orders", 80, keys=8)
    kinesis.split_shard(StreamName="orders", ShardToSplit="shardId-000000000000", NewStartingHashKey=str(2**127))
    after = put_records(kinesis, "orders", 80, prefix="s", keys=8)
    completed: list[tuple[float, str, str]] = []  # (when, shard, sequence)

    class Varied(KeyedProcessor):
        max_in_flight = 8
        checkpoint_interval = 0.2

        async def process(self, record: Record) -> None:
            await asyncio.sleep(0.05 * (int(record.sequence_number) % 5))  # out of order
            completed.append((time.monotonic(), record.shard_id, record.sequence_number))

    w1 = worker(kinesis_resharding, Varied, "w1").start()
    try:
        eventually(lambda: len(completed) >= 160, 60, "the parent's and the children's records")
    finally:
        assert w1.stop()
    assert sorted((s, q) for _, s, q in completed) == sorted(before + after)  # each once
    parent_done = max(t for t, s, _ in completed if s == "shardId-000000000000")
    assert min(t for t, s, _ in completed if s != "shardId-000000000000") > parent_done
