"""``spark.read.format("kinesis")``: bounded backfills on a real local Spark session."""

from __future__ import annotations

import json
import threading
from datetime import UTC, datetime
from typing import Any

import pytest

from kinesis.consumer.retrieval.records import aggregate
from kinesis.testing import LocalAWS
from tests.spark_support import create_stream, put_json

pytestmark = pytest.mark.slow


def _read(spark: Any, aws: LocalAWS, **options: str) -> list[Any]:
    reader = spark.read.format("kinesis").option("endpointUrl", aws.endpoint_url)
    for k, v in options.items():
        reader = reader.option(k, v)
    return reader.load().collect()


def test_trim_horizon_and_at_timestamp_with_kpl_aggregates(spark: Any, aws: LocalAWS) -> None:
    kinesis = aws.client("kinesis")
    create_stream(kinesis, "orders", 3)
    put_json(kinesis, "orders", [{"id": i} for i in range(40)])
    # the arrival times of the two halves must differ: wait until the clock has moved on
    split_at = datetime.now(UTC)
    threading.Event().wait(0.05)
    put_json(kinesis, "orders", [{"id": i} for i in range(40, 70)])
    users = [(f"k{i}", json.dumps({"id": i}).encode()) for i in range(70, 80)]
    for agg in aggregate(users):
        kinesis.put_record(StreamName="orders", Data=agg.data, PartitionKey=agg.partition_key,
                           ExplicitHashKey=agg.explicit_hash_key)

    rows = _read(spark, aws, streamName="orders")
    ids = sorted(json.loads(r.data)["id"] for r in rows)
    assert ids == list(range(80))
    assert {r.stream for r in rows} == {"orders"}
    assert len({r.shardId for r in rows}) == 3
    subs = sorted(r.subSequenceNumber for r in rows if json.loads(r.data)["id"] >= 70)
    assert subs == list(range(10))  # one Kinesis record, ten user records
    agg_rows = [r for r in rows if json.loads(r.data)["id"] >= 70]
    assert len({r.sequenceNumber for r in agg_rows}) == 1
    assert {r.partitionKey for r in agg_rows} == {f"k{i}" for i in range(70, 80)}
    assert all(r.approximateArrivalTimestamp is not None for r in rows)

    later = _read(spark, aws, streamName="orders", initialPosition="AT_TIMESTAMP",
                  initialTimestamp=split_at.isoformat(), shardsPerPartition="2")
    assert sorted(json.loads(r.data)["id"] for r in later) == list(range(40, 80))


def test_batch_read_is_a_snapshot_up_to_planning_time(spark: Any, aws: LocalAWS) -> None:
    kinesis = aws.client("kinesis")
    create_stream(kinesis, "clicks", 1)
    put_json(kinesis, "clicks", [{"id": i} for i in range(5)])
    df = (spark.read.format("kinesis").option("endpointUrl", aws.endpoint_url)
          .option("streamName", "clicks").load())
    assert df.count() == 5
    put_json(kinesis, "clicks", [{"id": i} for i in range(5, 8)])
    assert df.count() == 5  # a DataFrame is planned once: its "now" is fixed
    again = (spark.read.format("kinesis").option("endpointUrl", aws.endpoint_url)
             .option("streamName", "clicks").load())
    assert again.count() == 8


def test_two_streams_in_one_read(spark: Any, aws: LocalAWS) -> None:
    kinesis = aws.client("kinesis")
    create_stream(kinesis, "a", 1)
    create_stream(kinesis, "b", 2)
    put_json(kinesis, "a", [{"id": i} for i in range(3)])
    put_json(kinesis, "b", [{"id": i} for i in range(4)])
    rows = _read(spark, aws, streamName="a,b")
    assert sorted((r.stream, json.loads(r.data)["id"]) for r in rows) == (
        [("a", i) for i in range(3)] + [("b", i) for i in range(4)])


def _job_count(spark: Any) -> int:
    return len(spark.sparkContext.statusTracker().getJobIdsForGroup(None))


@pytest.mark.parametrize(("options", "fragment"), [
    ({"streamName": "bad name!"}, "option 'streamName'"),
    ({"streamName": "orders", "maxRecordsPerShard": "0"}, "option 'maxRecordsPerShard'"),
    ({"streamName": "orders", "initialposition": "FIRST"}, "option 'initialPosition'"),
    ({"streamName": "orders", "awsSecretKey": "hunter2"}, "credential chain"),
    ({"streamName": "orders", "leaseTable": "leases"}, "option 'applicationName'"),
])
def test_bad_options_fail_at_load_before_any_job(spark: Any, aws: LocalAWS,
                                                  options: dict[str, str], fragment: str) -> None:
    jobs = _job_count(spark)
    for fmt in (spark.read, spark.readStream):
        builder = fmt.format("kinesis").option("endpointUrl", aws.endpoint_url)
        for k, v in options.items():
            builder = builder.option(k, v)
        with pytest.raises(Exception) as info:
            builder.load()
        assert fragment in str(info.value)
        assert "InvalidOptionError" in str(info.value)
        assert "hunter2" not in str(info.value)
    assert _job_count(spark) == jobs


def test_batch_only_rule_fails_when_planning_before_any_job(spark: Any, aws: LocalAWS) -> None:
    create_stream(aws.client("kinesis"), "orders", 1)
    jobs = _job_count(spark)
    df = (spark.read.format("kinesis").option("endpointUrl", aws.endpoint_url)
          .option("streamName", "orders").option("initialPosition", "LATEST").load())
    with pytest.raises(Exception, match="LATEST makes an empty batch read"):
        df.collect()
    assert _job_count(spark) == jobs


def test_missing_stream_names_it(spark: Any, aws: LocalAWS) -> None:
    with pytest.raises(Exception, match="Kinesis stream 'nope' not found"):
        _read(spark, aws, streamName="nope")
