"""A RecordProcessor, driven by hand over every shard of a stream (no lease table).

The Worker runs processors like this one for you, one per shard lease, and checkpoints to
DynamoDB. This example shows the contract on its own, against the embedded moto server:

    .venv/bin/python examples/processor_example.py

It writes plain and KPL-aggregated records, then processes each shard in lineage order with
:class:`kinesis.consumer.retrieval.polling.ShardReader`, calling the processor exactly as the Worker does.
"""

from __future__ import annotations

import logging
from collections import Counter
from typing import Any

from kinesis import Checkpointer, InitializationInput, InitialPosition, Record, RecordProcessor
from kinesis.consumer.discovery import ShardDiscovery, ready_shards
from kinesis.consumer.retrieval import ShardReader, aggregate
from kinesis.testing import InMemoryCheckpointer, LocalAWS


class WordCounter(RecordProcessor):
    """Counts words per shard; checkpoints after every batch (it finishes a batch synchronously)."""

    def __init__(self) -> None:
        self.shard_id = ""
        self.words: Counter[str] = Counter()

    def initialize(self, init: InitializationInput) -> None:
        self.shard_id = init.shard_id
        print(f"{init.shard_id}: starting after {init.checkpoint or init.initial_position}")

    def process_records(
        self, records: list[Record], checkpointer: Checkpointer, millis_behind_latest: int | None = None
    ) -> None:
        for record in records:
            self.words.update(record.data.decode().split())
        checkpointer.checkpoint()  # the last record of this batch is done
        print(f"{self.shard_id}: {len(records)} records, {millis_behind_latest} ms behind")

    def shard_ended(self, checkpointer: Checkpointer) -> None:
        checkpointer.checkpoint()  # required: lets the child shards start

    def shutdown_requested(self, checkpointer: Checkpointer) -> None:
        checkpointer.checkpoint()

    def lease_lost(self) -> None:
        print(f"{self.shard_id}: lease lost, stopping without checkpoint")


def process_shard(client: Any, stream: str, shard_id: str, processor: RecordProcessor) -> InMemoryCheckpointer:
    """What the Worker does for one held lease, minus the lease: read, process, checkpoint."""
    checkpointer = InMemoryCheckpointer(stream, shard_id)
    processor.initialize(InitializationInput(stream, shard_id, None, InitialPosition.TRIM_HORIZON))
    reader = ShardReader(client, stream, shard_id, InitialPosition.TRIM_HORIZON, idle_backoff=0)
    while True:
        batch = reader.read_batch()
        if batch.records:
            checkpointer.record_delivered(batch.records)
            processor.process_records(batch.records, checkpointer, millis_behind_latest=batch.millis_behind_latest)
        if batch.shard_ended:
            checkpointer.mark_shard_end()
            processor.shard_ended(checkpointer)
            return checkpointer
        if not batch.records and batch.millis_behind_latest == 0:
            processor.shutdown_requested(checkpointer)  # caught up: a graceful stop
            return checkpointer


def main() -> Counter[str]:
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    with LocalAWS() as aws:
        client = aws.client("kinesis")
        client.create_stream(StreamName="words", ShardCount=2)
        lines = ["the quick brown fox", "jumps over the lazy dog", "the end"]
        client.put_records(StreamName="words", Records=[{"Data": s.encode(), "PartitionKey": s} for s in lines])
        for agg in aggregate([(f"k{i}", b"aggregated words travel together") for i in range(3)]):
            client.put_record(StreamName="words", **agg.put_records_entry())

        shards = ShardDiscovery(client, "words").list_shards()
        finished: set[str] = set()
        total: Counter[str] = Counter()
        while ready := ready_shards(shards, finished):
            for shard in ready:
                processor = WordCounter()
                checkpointer = process_shard(client, "words", shard.shard_id, processor)
                print(f"{shard.shard_id}: checkpoint {checkpointer.last_checkpoint}")
                total += processor.words
                finished.add(shard.shard_id)  # caught up (open shard) or SHARD_END
        print("top words:", total.most_common(3))
        return total


if __name__ == "__main__":
    main()
