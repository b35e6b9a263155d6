"""Test helpers for Worker tests: a shared journal of what processors did, and waiting helpers.

The journal is a condition variable: tests wait on it with a deadline (no sleeps standing in
for synchronisation).
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from kinesis import (
    Checkpointer,
    InitializationInput,
    Record,
    RecordProcessor,
    StreamConfig,
    Worker,
    WorkerConfig,
)
from kinesis.testing import LocalAWS


@dataclass(frozen=True)
class Entry:
    kind: str  # init, record, shutdown, ended, lost
    worker: str
    stream: str
    shard_id: str
    seq: str = ""
    sub: int = 0
    data: bytes = b""
    checkpoint: str = ""
    t: int = 0


class Journal:
    """Everything every processor of a test did, in order."""

    def __init__(self) -> None:
        self.entries: list[Entry] = []
        self._cond = threading.Condition()

    def add(self, entry: Entry) -> None:
        with self._cond:
            self.entries.append(entry)
            self._cond.notify_all()

    def snapshot(self) -> list[Entry]:
        with self._cond:
            return list(self.entries)

    def wait_for(self, predicate: Callable[[list[Entry]], bool], timeout: float = 30.0) -> bool:
        with self._cond:
            return self._cond.wait_for(lambda: predicate(self.entries), timeout)

    def records(self, stream: str | None = None) -> list[Entry]:
        return [e for e in self.snapshot() if e.kind == "record" and (stream is None or e.stream == stream)]

    def processed(self, stream: str | None = None) -> set[tuple[str, str]]:
        return {(e.shard_id, e.seq) for e in self.records(stream)}

    def duplicates(self, stream: str | None = None) -> int:
        counts = Counter((e.stream, e.shard_id, e.seq, e.sub) for e in self.records(stream))
        return sum(n - 1 for n in counts.values())


class JournalProcessor(RecordProcessor):
    """Journals every call; checkpoints every batch."""

    def __init__(self, journal: Journal, worker: str):
        self.journal = journal
        self.worker = worker
        self.stream = ""
        self.shard = ""

    def _add(self, kind: str, **kw: Any) -> None:
        self.journal.add(Entry(kind, self.worker, self.stream, self.shard, t=time.monotonic_ns(), **kw))

    def initialize(self, init: InitializationInput) -> None:
        self.stream, self.shard = init.stream_name, init.shard_id
        cp = init.checkpoint
        self._add("init", checkpoint=f"{cp.sequence_number}/{cp.sub_sequence_number}" if cp else str(init.initial_position))

    def process_records(
        self, records: list[Record], checkpointer: Checkpointer, millis_behind_latest: int | None = None
    ) -> None:
        for r in records:
            self._add("record", seq=r.sequence_number, sub=r.sub_sequence_number, data=r.data)
        checkpointer.checkpoint()

    def shutdown_requested(self, checkpointer: Checkpointer) -> None:
        checkpointer.checkpoint()
        self._add("shutdown")

    def shard_ended(self, checkpointer: Checkpointer) -> None:
        checkpointer.checkpoint()
        self._add("ended")

    def lease_lost(self) -> None:
        self._add("lost")


def make_worker(
    aws: LocalAWS,
    journal: Journal,
    worker_id: str,
    streams: Iterable[StreamConfig] | None = None,
    *,
    table: str = "worker-test-leases",
    membership: Any = None,
    **config: Any,
) -> Worker:
    """A Worker against the moto server with fast test timings (override with ``config``)."""
    settings: dict[str, Any] = {
        # Leases last 10 s, so a loaded machine's stalls never expire one in a test that
        # asserts no takeover and no duplicate; rounds stay fast (a tick every 2/3 s, as with
        # the 2 s leases these tests once used). Tests that wait for an expiry pass a short
        # lease_duration.
        "lease_duration": 10.0,
        "tick_interval": 2.0 / 3,
        "idle_backoff": 0.1,
        "shard_sync_interval": 1.0,
        "shutdown_grace": 10.0,
    }
    settings.update(config)
    cfg = WorkerConfig(
        table_name=table,
        streams=tuple(streams or [StreamConfig("orders", "app", "TRIM_HORIZON")]),
        worker_id=worker_id,
        **settings,
    )
    return Worker(
        cfg,
        lambda: JournalProcessor(journal, worker_id),
        membership=membership,
        kinesis_client=aws.client("kinesis"),
        dynamodb_client=aws.client("dynamodb"),
    )


def put_records(client: Any, stream: str, n: int, prefix: str = "r", keys: int = 16) -> list[tuple[str, str]]:
    """Put ``n`` records (PutRecords, in order); return their (shard id, sequence number)."""
    out: list[tuple[str, str]] = []
    for start in range(0, n, 100):
        batch = [
            {"Data": f"{prefix}{i}".encode(), "PartitionKey": f"{prefix}-key-{i % keys}"}
            for i in range(start, min(n, start + 100))
        ]
        response = client.put_records(StreamName=stream, Records=batch)
        out += [(r["ShardId"], r["SequenceNumber"]) for r in response["Records"]]
    return out
