"""Two-phase checkpoints with the SDK's own RecordProcessor: a Worker prepares a checkpoint and
crashes before committing it; the next Worker sees it in InitializationInput.pending_checkpoint,
gets the records after the committed checkpoint again, and its checkpoint clears the pending one.
(The amazon-kclpy flavour runs in worker processes: tests/kinesis/consumer/test_kclpy_processes.py.)"""

from __future__ import annotations

import logging
import threading
from typing import Any

from kinesis import (
    Checkpointer,
    InitializationInput,
    Position,
    Record,
    RecordProcessor,
    StreamConfig,
    Worker,
    WorkerConfig,
)
from kinesis.lease_loop.table.leases import LeaseTable
from kinesis.lease_loop.table.model import Checkpoint
from kinesis.testing import LocalAWS
from tests.support.waiting import eventually
from tests.support.worker_journal import put_records

TABLE = "two-phase-leases"
KEY = "app/orders/shardId-000000000000"
logging.getLogger("werkzeug").setLevel(logging.ERROR)


class Seen:
    """What the processors of one test saw (shared across threads)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.inits: list[tuple[str, InitializationInput]] = []
        self.records: list[tuple[str, str]] = []


class PreparingProcessor(RecordProcessor):
    """First worker: checkpoints the first half of its first batch, prepares the rest and
    never commits. Second worker: commits everything it gets."""

    def __init__(self, seen: Seen, worker: str, commit: bool):
        self.seen, self.worker, self.commit = seen, worker, commit

    def initialize(self, init: InitializationInput) -> None:
        with self.seen.lock:
            self.seen.inits.append((self.worker, init))

    def process_records(
        self, records: list[Record], checkpointer: Checkpointer, millis_behind_latest: int | None = None
    ) -> None:
        with self.seen.lock:
            self.seen.records += [(self.worker, r.sequence_number) for r in records]
        if self.commit:
            checkpointer.checkpoint()
            return
        checkpointer.checkpoint(records[len(records) // 2 - 1])
        prepared = checkpointer.prepare_checkpoint()
        assert prepared.pending_checkpoint == records[-1].position

    def shutdown_requested(self, checkpointer: Checkpointer) -> None:
        if self.commit:
            checkpointer.checkpoint()


def worker(aws: LocalAWS, seen: Seen, name: str, *, commit: bool) -> Worker:
    config = WorkerConfig(
        table_name=TABLE,
        streams=[StreamConfig("orders", "app", "TRIM_HORIZON")],
        worker_id=name,
        lease_duration=2.0,
        idle_backoff=0.1,
        shard_sync_interval=1.0,
        shutdown_grace=10.0,
    )
    return Worker(config, lambda: PreparingProcessor(seen, name, commit),
                  kinesis_client=aws.client("kinesis"), dynamodb_client=aws.client("dynamodb"))


def test_a_prepared_checkpoint_survives_a_crash_and_the_next_checkpoint_clears_it(aws: LocalAWS) -> None:
    kinesis = aws.client("kinesis")
    kinesis.create_stream(StreamName="orders", ShardCount=1)
    written = [seq for _, seq in put_records(kinesis, "orders", 10)]
    table = LeaseTable(aws.client("dynamodb"), TABLE)
    seen = Seen()
    w1 = worker(aws, seen, "w1", commit=False).start()
    w2: Worker | None = None
    try:
        row: Any = eventually(lambda: (r := table.get(KEY)) is not None and r.pending_checkpoint and r, 30,
                              "w1 to prepare a checkpoint")
        assert row.pending_checkpoint == Checkpoint(written[-1])
        assert row.checkpoint == Checkpoint(written[4]) and row.owner == "w1"
        w1.stop(graceful=False)  # a crash: nothing committed, nothing handed off
        w2 = worker(aws, seen, "w2", commit=True).start()
        eventually(lambda: any(w == "w2" for w, _ in seen.inits), 30, "w2 to take the lease over")
        init = next(i for w, i in seen.inits if w == "w2")
        assert init.checkpoint == Position(written[4])
        assert init.pending_checkpoint == Position(written[-1])
        eventually(lambda: [s for w, s in seen.records if w == "w2"] == written[5:], 30,
                   "w2 to get the records after the committed checkpoint again")
        done: Any = eventually(lambda: (r := table.get(KEY)) is not None and r.pending_checkpoint is None and r,
                               30, "w2's checkpoint to clear the pending checkpoint")
        assert done.checkpoint == Checkpoint(written[-1]) and done.owner == "w2"
    finally:
        w1.stop(graceful=False)
        if w2 is not None:
            w2.stop()
