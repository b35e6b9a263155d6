"""``consumerType=SubscribeToShard``: executors read ranges over Enhanced Fan-Out.

Kinesis is moto behind ``tests/support/fanout_endpoint.py`` (SubscribeToShard served as a real
event stream, everything else proxied to moto), as in ``tests/kinesis/consumer/test_fanout.py``. The driver
still fixes each batch's end with GetRecords; ``maxShippedBytesPerPartition=0`` makes the
executors read every range from Kinesis, here over SubscribeToShard.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from itertools import pairwise
from typing import Any

import pytest

from kinesis.consumer.retrieval.records import aggregate
from kinesis.errors import FanOutConsumerLimitError
from kinesis.testing import LocalAWS
from spark_integration.data_loss import LOSSES
from spark_integration.errors import DataLossError
from spark_integration.options import parse_options
from spark_integration.readers import KinesisBatchReader
from tests.spark_support import (
    create_stream,
    executor_ids,
    logged_offsets,
    put_json,
    stream_reader,
    trim_oldest,
)
from tests.support.fanout_endpoint import FanOutEndpoint, fanout_endpoint
from tests.support.waiting import eventually

SHARD = "shardId-000000000000"

FANOUT = {"consumerType": "SubscribeToShard", "consumerName": "spark-app",
          "maxShippedBytesPerPartition": "0"}


@pytest.fixture
def endpoint(aws: LocalAWS) -> Iterator[FanOutEndpoint]:
    with fanout_endpoint(aws.endpoint_url, takeover_guard=0.2) as ep:
        yield ep


def consumers(aws: LocalAWS, stream: str = "orders") -> list[str]:
    kinesis = aws.client("kinesis")
    arn = kinesis.describe_stream_summary(StreamName=stream)["StreamDescriptionSummary"]["StreamARN"]
    return [c["ConsumerName"] for c in kinesis.list_stream_consumers(StreamARN=arn)["Consumers"]]


def test_a_logged_range_replays_exactly_over_subscribe_to_shard(
        aws: LocalAWS, endpoint: FanOutEndpoint) -> None:
    kinesis = aws.client("kinesis")
    create_stream(kinesis, "orders", 2)
    put_json(kinesis, "orders", [{"id": i} for i in range(40)])
    # one KPL aggregate of ten user records: batches of 4 start inside it
    users = [(f"k{i}", json.dumps({"id": i}).encode()) for i in range(40, 50)]
    for agg in aggregate(users):
        kinesis.put_record(StreamName="orders", Data=agg.data, PartitionKey=agg.partition_key,
                           ExplicitHashKey=agg.explicit_hash_key)
    options = {"initialPosition": "TRIM_HORIZON", "maxRecordsPerShard": "4"}
    driver = stream_reader(endpoint.endpoint_url, **options, **FANOUT)
    driver.initialOffset()
    assert consumers(aws) == ["spark-app"]  # registered when the driver started
    offsets = logged_offsets(driver)
    put_json(kinesis, "orders", [{"id": i} for i in range(50, 60)])  # beyond every logged end
    fanout = [executor_ids(driver, a, b) for a, b in pairwise(offsets)]
    polled = stream_reader(endpoint.endpoint_url, **options, maxShippedBytesPerPartition="0")
    assert fanout == [executor_ids(polled, a, b) for a, b in pairwise(offsets)]  # same order
    assert sorted(i for b in fanout for i in b) == list(range(50))
    assert any(v.get("sub", 0) > 0 for o in offsets for v in o.values())  # inside the aggregate
    assert all(len(b) <= 2 * 4 for b in fanout)
    # every range was one subscription, from where its logged start says, then closed
    subscribed = endpoint.calls("subscribed")
    ranges = sum(len(p.ranges) for a, b in pairwise(offsets) for p in driver.partitions(a, b))
    assert len(subscribed) == ranges
    starts = [c.starting_position for c in subscribed]
    assert starts[:2] == [{"Type": "TRIM_HORIZON"}] * 2
    logged = {(k.split("/")[1], v["seq"]) for o in offsets[1:-1] for k, v in o.items()}
    later = {(c.shard_id, c.starting_position.get("SequenceNumber")) for c in subscribed[2:]}
    assert all(p["Type"] == "AT_SEQUENCE_NUMBER" for p in starts[2:])
    assert later <= logged
    eventually(lambda: endpoint.live_subscriptions() == 0, 10, "every subscription closed")
    # a fresh process replays batch 2 from the logged offsets alone: the same records
    replayer = stream_reader(endpoint.endpoint_url, **options, **FANOUT)
    assert executor_ids(replayer, offsets[2], offsets[3]) == fanout[2]


def test_a_trimmed_start_is_data_loss_over_subscribe_to_shard(
        aws: LocalAWS, endpoint: FanOutEndpoint) -> None:
    kinesis = aws.client("kinesis")
    create_stream(kinesis, "orders", 1)
    put_json(kinesis, "orders", [{"id": i} for i in range(12)])
    offsets = logged_offsets(stream_reader(aws.endpoint_url, initialPosition="TRIM_HORIZON",
                                           maxRecordsPerShard="3"))
    trim_oldest("orders", SHARD, 4)  # batch 1 (after id 2, up to id 5) lost its start
    strict = stream_reader(endpoint.endpoint_url, **FANOUT)
    with pytest.raises(DataLossError, match=f"shard {SHARD} .*after sequence number 3"):
        executor_ids(strict, offsets[1], offsets[2])
    before = LOSSES.count("orders", SHARD)
    lenient = stream_reader(endpoint.endpoint_url, failOnDataLoss="false", **FANOUT)
    assert executor_ids(lenient, offsets[1], offsets[2]) == [4, 5]
    assert LOSSES.count("orders", SHARD) == before + 1
    endpoint.fail("SubscribeToShard", "InvalidArgumentException")
    with pytest.raises(DataLossError, match="refused its start"):
        executor_ids(strict, offsets[1], offsets[2])


def test_a_batch_read_over_subscribe_to_shard(aws: LocalAWS, endpoint: FanOutEndpoint) -> None:
    kinesis = aws.client("kinesis")
    create_stream(kinesis, "orders", 2)
    put_json(kinesis, "orders", [{"id": i} for i in range(30)])
    options = parse_options({"streamName": "orders", "endpointUrl": endpoint.endpoint_url,
                             "region": "us-east-1", "consumerType": "SubscribeToShard",
                             "consumerName": "backfill"}, streaming=False)
    reader = KinesisBatchReader(options)
    ids = []
    for partition in reader.partitions():
        for batch in reader.read(partition):
            ids += [json.loads(d)["id"] for d in batch.column("data").to_pylist()]
    assert sorted(ids) == list(range(30))
    assert {c.shard_id for c in endpoint.calls("subscribed")} == {
        "shardId-000000000000", "shardId-000000000001"}
    assert consumers(aws) == ["backfill"]


@pytest.mark.slow
def test_a_spark_query_reads_over_subscribe_to_shard(
        spark: Any, aws: LocalAWS, endpoint: FanOutEndpoint, tmp_path: Any) -> None:
    kinesis = aws.client("kinesis")
    create_stream(kinesis, "orders", 2)
    put_json(kinesis, "orders", [{"id": i} for i in range(30)])
    seen: list[int] = []

    def collect(batch: Any, batch_id: int) -> None:
        seen.extend(json.loads(r.data)["id"] for r in batch.collect())

    reader = (spark.readStream.format("kinesis").option("endpointUrl", endpoint.endpoint_url)
              .option("streamName", "orders").option("initialPosition", "TRIM_HORIZON")
              .option("maxRecordsPerShard", "10"))
    for name, value in FANOUT.items():
        reader = reader.option(name, value)
    query = (reader.load().writeStream.foreachBatch(collect)
             .option("checkpointLocation", str(tmp_path / "ck")).start())
    query.processAllAvailable()
    put_json(kinesis, "orders", [{"id": i} for i in range(30, 45)])
    query.processAllAvailable()
    query.stop()
    assert sorted(seen) == list(range(45))  # exactly once
    assert len(endpoint.calls("subscribed")) >= 4  # 2 shards, at least 2 batches each
    assert consumers(aws) == ["spark-app"]


def test_the_consumer_quota_fails_the_query_at_start_naming_the_options(
        aws: LocalAWS, endpoint: FanOutEndpoint) -> None:
    kinesis = aws.client("kinesis")
    create_stream(kinesis, "orders", 1)
    arn = kinesis.describe_stream_summary(StreamName="orders")["StreamDescriptionSummary"]["StreamARN"]
    for i in range(20):  # the default quota of registered consumers per stream
        kinesis.register_stream_consumer(StreamARN=arn, ConsumerName=f"other-{i}")
    # moto has no quota: the endpoint answers like AWS at it (more times than botocore retries)
    endpoint.fail("RegisterStreamConsumer", "LimitExceededException", times=20)
    driver = stream_reader(endpoint.endpoint_url, **{**FANOUT, "consumerName": "one-too-many"})
    with pytest.raises(FanOutConsumerLimitError) as info:
        driver.initialOffset()
    assert "consumerName" in str(info.value) and "consumerType=GetRecords" in str(info.value)
