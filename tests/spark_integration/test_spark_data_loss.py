"""``failOnDataLoss``: ranges whose records Kinesis trimmed before the query read them.

moto keeps records forever, so the tests simulate trimming where it happens, in the shard:
:func:`trim_oldest` deletes a moto shard's oldest records (the in-process server's storage),
which is what the retention period does on AWS; a reader started AT_SEQUENCE_NUMBER of a
deleted record then gets the first record still there, as on AWS. AWS may instead refuse such
a sequence number with ``InvalidArgumentException``: a proxy in front of moto answers
GetShardIterator with that error (``FanOutEndpoint.fail``). A closed shard whose records all
expired leaves ListShards: the test removes it from moto's stream.
"""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest

from kinesis.testing import LocalAWS
from spark_integration.data_loss import LOSSES
from spark_integration.errors import DataLossError, OffsetRangeUnavailableError
from tests.spark_support import (
    create_stream,
    executor_ids,
    logged_offsets,
    moto_stream,
    put_json,
    stream_reader,
    trim_oldest,
)
from tests.support.fanout_endpoint import fanout_endpoint

SHARD = "shardId-000000000000"


def four_batches(aws: LocalAWS, **options: str) -> list[dict[str, Any]]:
    """Records 0..11 in one shard (sequence numbers 1..12), logged as 4 batches of 3."""
    kinesis = aws.client("kinesis")
    create_stream(kinesis, "orders", 1)
    put_json(kinesis, "orders", [{"id": i} for i in range(12)])
    driver = stream_reader(aws.endpoint_url, initialPosition="TRIM_HORIZON",
                           maxRecordsPerShard="3", **options)
    offsets = logged_offsets(driver)
    assert len(offsets) == 5
    return offsets


def replayer(endpoint_url: str, **options: str) -> Any:
    """A fresh process's reader: nothing cached, executors read from Kinesis."""
    return stream_reader(endpoint_url, initialPosition="TRIM_HORIZON", maxRecordsPerShard="3",
                         maxShippedBytesPerPartition="0", **options)


def test_a_logged_range_whose_start_was_trimmed_fails_naming_shard_range_and_option(
        aws: LocalAWS) -> None:
    offsets = four_batches(aws)
    trim_oldest("orders", SHARD, 4)  # ids 0..3: batch 1 (after id 2, up to id 5) lost its start
    assert executor_ids(replayer(aws.endpoint_url), offsets[2], offsets[3]) == [6, 7, 8]
    with pytest.raises(DataLossError) as info:
        executor_ids(replayer(aws.endpoint_url), offsets[1], offsets[2])
    message = str(info.value)
    assert f"shard {SHARD} of stream 'orders'" in message
    assert "after sequence number 3 up to sequence number 6" in message
    assert "failOnDataLoss" in message and "'false'" in message
    assert isinstance(info.value, OffsetRangeUnavailableError)
    # a restarted driver fixing the next batch from the same start fails the same way
    with pytest.raises(DataLossError, match=f"shard {SHARD} .*sequence number 3"):
        replayer(aws.endpoint_url).latestOffset(offsets[1], None)


def test_with_fail_on_data_loss_false_the_rest_is_read_and_the_loss_logged_and_counted(
        aws: LocalAWS, caplog: pytest.LogCaptureFixture) -> None:
    offsets = four_batches(aws)
    trim_oldest("orders", SHARD, 4)
    before = LOSSES.count("orders", SHARD)
    caplog.set_level(logging.WARNING, logger="spark_integration.data_loss")
    reader = replayer(aws.endpoint_url, failOnDataLoss="false")
    assert executor_ids(reader, offsets[1], offsets[2]) == [4, 5]  # what is left of the range
    assert LOSSES.count("orders", SHARD) == before + 1
    [warning] = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert f"shard {SHARD} of stream 'orders'" in warning.getMessage()
    assert "failOnDataLoss=false" in warning.getMessage()
    # the driver goes on from the oldest record still there, and counts its loss too (then
    # the executor, which reads that batch from Kinesis, finds and counts it once more)
    end = reader.latestOffset(offsets[1], None)
    assert LOSSES.count("orders", SHARD) == before + 2
    assert executor_ids(reader, offsets[1], end) == [4, 5, 6]
    assert LOSSES.count("orders", SHARD) == before + 3


def test_a_start_sequence_number_refused_by_kinesis_is_data_loss(aws: LocalAWS) -> None:
    offsets = four_batches(aws)
    trim_oldest("orders", SHARD, 4)
    with fanout_endpoint(aws.endpoint_url) as proxy:
        proxy.fail("GetShardIterator", "InvalidArgumentException")
        with pytest.raises(DataLossError, match="refused its start"):
            executor_ids(replayer(proxy.endpoint_url), offsets[1], offsets[2])
        proxy.fail("GetShardIterator", "InvalidArgumentException")
        before = LOSSES.count("orders", SHARD)
        lenient = replayer(proxy.endpoint_url, failOnDataLoss="false")
        assert executor_ids(lenient, offsets[1], offsets[2]) == [4, 5]  # from the trim horizon
        assert LOSSES.count("orders", SHARD) == before + 1
        proxy.fail("GetShardIterator", "InvalidArgumentException")
        with pytest.raises(DataLossError, match="GetShardIterator refused"):
            replayer(proxy.endpoint_url).latestOffset(offsets[1], None)


def test_a_shard_that_left_listshards_before_it_was_read_is_data_loss(aws: LocalAWS) -> None:
    kinesis = aws.client("kinesis")
    create_stream(kinesis, "orders", 2)
    put_json(kinesis, "orders", [{"id": i} for i in range(20)])
    strict = stream_reader(aws.endpoint_url, initialPosition="TRIM_HORIZON",
                           maxRecordsPerShard="3", describeShardInterval="0")
    lenient = stream_reader(aws.endpoint_url, initialPosition="TRIM_HORIZON",
                            maxRecordsPerShard="3", describeShardInterval="0",
                            failOnDataLoss="false")
    start = strict.initialOffset()
    first = strict.latestOffset(start, None)
    del moto_stream("orders").shards[SHARD]  # all its records expired: no longer listed
    with pytest.raises(DataLossError, match=f"shard {SHARD} .*no longer listed"):
        strict.latestOffset(first, None)
    before = LOSSES.count("orders", SHARD)
    end = lenient.latestOffset(first, None)
    assert list(end) == ["orders/shardId-000000000001"]
    assert LOSSES.count("orders", SHARD) == before + 1


@pytest.mark.slow
def test_a_query_restarted_after_its_position_was_trimmed_fails_unless_told_to_skip(
        spark: Any, aws: LocalAWS, tmp_path: Any) -> None:
    kinesis = aws.client("kinesis")
    create_stream(kinesis, "orders", 1)
    put_json(kinesis, "orders", [{"id": i} for i in range(12)])
    seen: list[int] = []

    def collect(batch: Any, batch_id: int) -> None:
        seen.extend(json.loads(r.data)["id"] for r in batch.collect())

    def run(**options: str) -> Any:
        reader = (spark.readStream.format("kinesis").option("endpointUrl", aws.endpoint_url)
                  .option("streamName", "orders").option("initialPosition", "TRIM_HORIZON"))
        for name, value in options.items():
            reader = reader.option(name, value)
        return (reader.load().writeStream.foreachBatch(collect)
                .option("checkpointLocation", str(tmp_path / "ck")).start())

    query = run()
    query.processAllAvailable()
    query.stop()
    assert sorted(seen) == list(range(12))
    put_json(kinesis, "orders", [{"id": i} for i in range(12, 17)])
    trim_oldest("orders", SHARD, 13)  # the query stands after id 11; ids 0..12 are gone
    query = run()
    with pytest.raises(Exception) as info:
        query.processAllAvailable()
    query.stop()
    assert "DataLossError" in str(info.value)
    assert f"shard {SHARD} of stream 'orders'" in str(info.value)
    assert "failOnDataLoss" in str(info.value)
    assert sorted(seen) == list(range(12))
    query = run(failOnDataLoss="false")
    query.processAllAvailable()
    query.stop()
    assert sorted(seen) == [*range(12), 13, 14, 15, 16]  # id 12 was lost


def test_after_a_refused_start_nothing_at_or_before_the_start_is_read(aws: LocalAWS) -> None:
    """Kinesis refuses the start although nothing was trimmed: reading on from the trim
    horizon must still begin after the range's start."""
    offsets = four_batches(aws)
    with fanout_endpoint(aws.endpoint_url) as proxy:
        lenient = replayer(proxy.endpoint_url, failOnDataLoss="false")
        proxy.fail("GetShardIterator", "InvalidArgumentException")
        assert executor_ids(lenient, offsets[1], offsets[2]) == [3, 4, 5]
        proxy.fail("GetShardIterator", "InvalidArgumentException")
        end = lenient.latestOffset(offsets[1], None)
        assert executor_ids(lenient, offsets[1], end) == [3, 4, 5]
