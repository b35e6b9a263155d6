"""The Worker quick start, runnable against the embedded AWS:

    .venv/bin/python examples/worker_example.py

Two workers (threads here; pods or processes in real life) share a 4-shard stream through one
DynamoDB lease table: they balance 2/2, process every record once, and when one stops
gracefully it hands its leases to the other, which continues right after the last checkpoint.
Against AWS, drop LocalAWS and pass your own boto3 clients (or a session) instead.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter

from kinesis import Checkpointer, Record, RecordProcessor, StreamConfig, Worker, WorkerConfig
from kinesis.testing import LocalAWS

processed: Counter[str] = Counter()
lock = threading.Lock()
done = threading.Condition(lock)


class CountingProcessor(RecordProcessor):
    """Counts records per worker; checkpoints after every batch (a batch is done on return)."""

    def __init__(self, worker_id: str):
        self.worker_id = worker_id

    def process_records(
        self, records: list[Record], checkpointer: Checkpointer, millis_behind_latest: int | None = None
    ) -> None:
        with done:
            processed[self.worker_id] += len(records)
            done.notify_all()
        checkpointer.checkpoint()


def make_worker(aws: LocalAWS, worker_id: str) -> Worker:
    config = WorkerConfig(
        table_name="example-app-leases",
        streams=[StreamConfig("example", application="example-app", initial_position="TRIM_HORIZON")],
        worker_id=worker_id,          # on Kubernetes: the pod name
        lease_duration=3.0,           # production: ~10 s
    )
    return Worker(
        config,
        lambda: CountingProcessor(worker_id),
        kinesis_client=aws.client("kinesis"),
        dynamodb_client=aws.client("dynamodb"),
    )


def main() -> None:
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    with LocalAWS() as aws:
        kinesis = aws.client("kinesis")
        kinesis.create_stream(StreamName="example", ShardCount=4)
        kinesis.put_records(
            StreamName="example",
            Records=[{"Data": f"event {i}".encode(), "PartitionKey": f"user-{i % 20}"} for i in range(400)],
        )
        a, b = make_worker(aws, "worker-a").start(), make_worker(aws, "worker-b").start()
        with done:
            done.wait_for(lambda: sum(processed.values()) >= 400, timeout=60)
        print("processed:", dict(processed), "| leases:", a.status().held, b.status().held)
        a.stop(graceful=True)  # what SIGTERM does in Worker.run(): hand every lease off
        kinesis.put_records(StreamName="example", Records=[{"Data": b"late", "PartitionKey": f"k{i}"} for i in range(40)])
        with done:
            done.wait_for(lambda: sum(processed.values()) >= 440, timeout=60)
        print("after worker-a stopped:", dict(processed), "| worker-b holds", len(b.status().held), "leases")
        b.stop()


if __name__ == "__main__":
    main()
