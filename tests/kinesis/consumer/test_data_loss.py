"""Data loss is never silent: a Worker whose checkpoint the retention period trimmed says so (an
ERROR naming the shard, the checkpoint and the oldest record still there), counts it, and goes
on (``on_data_loss="continue"``) or holds the shard (``"stop_shard"``). Through real Workers on
the in-process moto server, whose shard storage is trimmed as the retention period would."""

from __future__ import annotations

import logging
import urllib.request
from datetime import timedelta

import pytest
from botocore.config import Config
from prometheus_client.parser import text_string_to_metric_families

from kinesis import StreamConfig, Worker, WorkerConfig
from kinesis.consumer.retrieval.polling import BatchCursor, ReaderStats
from kinesis.consumer.retrieval.positions import Position
from kinesis.errors import ConfigurationError
from kinesis.lease_loop.table.leases import LeaseTable
from kinesis.testing import LocalAWS
from tests.support.kinesis_faults import FaultInjector
from tests.support.moto_trim import moto_stream, trim_oldest
from tests.support.waiting import eventually
from tests.support.worker_journal import Journal, JournalProcessor, make_worker, put_records


def checkpointed_then_trimmed(aws: LocalAWS, stream: str, table: str) -> tuple[str, list[str], float]:
    """10 records processed and checkpointed by a worker that stopped; 5 more written; the 12
    oldest trimmed (the checkpoint and the 2 records after it). Returns the checkpoint's
    sequence number, the sequence numbers still there, and the arrival-time span lost (from
    the checkpointed record to the oldest record still there)."""
    kinesis = aws.client("kinesis")
    kinesis.create_stream(StreamName=stream, ShardCount=1)
    first = put_records(kinesis, stream, 10)
    journal = Journal()
    worker = make_worker(aws, journal, "before", [StreamConfig(stream, "app", "TRIM_HORIZON")], table=table)
    worker.start()
    try:
        assert journal.wait_for(lambda _: set(first) <= journal.processed(), 30)
    finally:
        assert worker.stop()
    shard = first[0][0]
    lease = LeaseTable(aws.client("dynamodb"), table).scan().leases[f"app/{stream}/{shard}"]
    assert lease.checkpoint.sequence_number == first[-1][1]
    assert lease.checkpoint.arrival is not None  # stored with the checkpoint
    later = put_records(kinesis, stream, 5, prefix="later")
    for _, seq in later:  # they arrived 42 s after the checkpointed record
        record = moto_stream(stream).shards[shard].records[int(seq)]
        record.created_at_datetime += timedelta(seconds=42)
        record.created_at += 42.0
    arrivals = {str(seq): r.created_at for seq, r in moto_stream(stream).shards[shard].records.items()}
    trim_oldest(stream, shard, 12)
    return first[-1][1], [seq for _, seq in later[2:]], arrivals[later[2][1]] - arrivals[first[-1][1]]


def test_a_trimmed_checkpoint_is_logged_counted_and_skipped_with_continue(
        aws: LocalAWS, caplog: pytest.LogCaptureFixture) -> None:
    checkpoint, remaining, span = checkpointed_then_trimmed(aws, "loss", "loss-leases")
    caplog.set_level(logging.ERROR, logger="kinesis.consumer.shard.consumer")
    journal = Journal()
    worker = make_worker(aws, journal, "after", [StreamConfig("loss", "app", "TRIM_HORIZON")], table="loss-leases",
                         health_port=0)
    worker.start()
    try:
        assert journal.wait_for(lambda _: {s for _, s in journal.processed()} >= set(remaining), 30)
        assert sorted(int(s) for _, s in journal.processed()) == sorted(int(s) for s in remaining)
        losses = [r.getMessage() for r in caplog.records if "DATA LOSS" in r.getMessage()]
        assert len(losses) == 1
        assert f"position {checkpoint}/0 is no longer in the shard" in losses[0]
        assert f"the oldest record still there is {remaining[0]}" in losses[0]
        assert "on_data_loss='continue': going on from the oldest record still there" in losses[0]
        assert f"records that arrived over {span:.1f} s after" in losses[0]
        assert worker.status().worker_counters["data_loss_events"] == 1
        url = worker.health_url
        assert url is not None
        samples = {s.name: s.value for f in text_string_to_metric_families(
            urllib.request.urlopen(url + "/metrics").read().decode()) for s in f.samples}
        assert samples["kinesis_worker_data_loss_events_total"] == 1
        assert span > 42 and samples["kinesis_worker_data_loss_seconds_total"] == pytest.approx(span, abs=0.002)
    finally:
        worker.stop()


def test_stop_shard_holds_the_lease_processes_nothing_and_keeps_the_checkpoint(aws: LocalAWS) -> None:
    checkpoint, _, _ = checkpointed_then_trimmed(aws, "held", "held-leases")
    journal = Journal()
    worker = make_worker(aws, journal, "after", [StreamConfig("held", "app", "TRIM_HORIZON")], table="held-leases",
                         on_data_loss="stop_shard", health_port=0)
    worker.start()
    try:
        assert eventually(lambda: [s.state for s in worker.status().shards] == ["data-loss"], 30), worker.status()
        assert worker.health_url is not None
        samples = {s.name: s.value for f in text_string_to_metric_families(
            urllib.request.urlopen(worker.health_url + "/metrics").read().decode()) for s in f.samples}
        assert samples["kinesis_worker_shards_data_loss"] == 1
        put_records(aws.client("kinesis"), "held", 3, prefix="more")
        assert worker.status().held and not journal.records()  # held, and nothing delivered
        assert worker.status().worker_counters["data_loss_events"] == 1
    finally:
        worker.stop()
    assert not journal.records()
    leases = LeaseTable(aws.client("dynamodb"), "held-leases").scan().leases.values()
    assert [lease.checkpoint.sequence_number for lease in leases] == [checkpoint]  # not moved past the loss


def test_a_resume_position_that_is_still_there_is_no_loss() -> None:
    cursor = BatchCursor("s", "shardId-0", Position("100"), 10, ReaderStats())
    cursor.expect_resume()
    cursor.fetched([], 0)  # an empty answer proves nothing yet
    records = cursor.fetched([{"SequenceNumber": "100", "Data": b"x", "PartitionKey": "k"},
                              {"SequenceNumber": "105", "Data": b"y", "PartitionKey": "k"}], 0)
    batch = cursor.deliver(records)
    assert batch.lost is None and [r.sequence_number for r in batch.records] == ["105"]
    cursor.expect_resume()  # a new iterator at 105; the retention period trimmed it
    records = cursor.fetched([{"SequenceNumber": "130", "Data": b"z", "PartitionKey": "k"}], 0)
    lost = cursor.deliver(records).lost
    assert lost is not None and (lost.after.sequence_number, lost.first_available) == ("105", "130")
    assert cursor.deliver([]).lost is None  # reported once


def test_on_data_loss_is_checked() -> None:
    with pytest.raises(ConfigurationError, match="on_data_loss must be 'continue' or 'stop_shard', got 'fail'"):
        WorkerConfig("leases", [StreamConfig("orders", "app")], on_data_loss="fail")  # type: ignore[arg-type]


def test_a_position_kinesis_refuses_is_reported_and_read_from_the_trim_horizon(
        aws: LocalAWS, caplog: pytest.LogCaptureFixture) -> None:
    kinesis = aws.client("kinesis")
    kinesis.create_stream(StreamName="refused", ShardCount=1)
    first = put_records(kinesis, "refused", 10)
    journal = Journal()
    before = make_worker(aws, journal, "before", [StreamConfig("refused", "app", "TRIM_HORIZON")], table="refused-leases")
    before.start()
    try:
        assert journal.wait_for(lambda _: set(first) <= journal.processed(), 30)
    finally:
        assert before.stop()
    later = put_records(kinesis, "refused", 5, prefix="later")
    client = aws.client("kinesis", config=Config(retries={"total_max_attempts": 1}))
    faults = FaultInjector(client)
    faults.fail("GetShardIterator", "InvalidArgumentException")  # as for a position past the retention
    caplog.set_level(logging.ERROR, logger="kinesis.consumer.shard.consumer")
    after_journal = Journal()
    config = WorkerConfig("refused-leases", [StreamConfig("refused", "app", "TRIM_HORIZON")], worker_id="after",
                          lease_duration=10.0, tick_interval=2.0 / 3, idle_backoff=0.1)
    after = Worker(config, lambda: JournalProcessor(after_journal, "after"), kinesis_client=client,
                   dynamodb_client=aws.client("dynamodb"))
    after.start()
    try:
        # nothing still there is skipped: from the trim horizon, the old records again and the new ones
        assert after_journal.wait_for(lambda _: set(first) | set(later) <= after_journal.processed(), 30)
        assert faults.injected["GetShardIterator"] == 1
        losses = [r.getMessage() for r in caplog.records if "DATA LOSS" in r.getMessage()]
        assert len(losses) == 1 and "GetShardIterator refused to start at it" in losses[0]
        assert f"position {first[-1][1]}/0" in losses[0]
        assert after.status().worker_counters["data_loss_events"] == 1
    finally:
        after.stop()
