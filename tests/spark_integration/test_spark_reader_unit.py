"""The stream reader's driver/executor contract, called directly (no Spark session needed)."""

from __future__ import annotations

import itertools
import json
import threading
from typing import Any

from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows

from kinesis.testing import LocalAWS
from spark_integration.options import parse_options
from spark_integration.readers import UNBOUNDED_ROWS, KinesisStreamReader
from tests.spark_support import create_stream, executor_ids, put_json


def _reader(aws: LocalAWS, **opts: str) -> KinesisStreamReader:
    options = parse_options({"streamName": "orders", "endpointUrl": aws.endpoint_url,
                             "region": "us-east-1", **opts}, streaming=True)
    return KinesisStreamReader(options)


def test_latest_first_batch_replays_identically_after_a_new_initial_offset(aws: LocalAWS) -> None:
    kinesis = aws.client("kinesis")
    create_stream(kinesis, "orders", 2)
    put_json(kinesis, "orders", [{"id": i} for i in range(10)])  # before the query: not read
    driver = _reader(aws)
    start = driver.initialOffset()
    assert driver.initialOffset() == start  # stable while the driver lives
    threading.Event().wait(0.01)
    put_json(kinesis, "orders", [{"id": i} for i in range(10, 20)])
    end = driver.latestOffset(start, ReadMaxRows(UNBOUNDED_ROWS))
    assert all("resume" in entry for entry in end.values())
    assert sorted(executor_ids(driver, start, end)) == list(range(10, 20))
    # a crash before the first commit: a new driver's initialOffset() is a later "now"
    threading.Event().wait(0.01)
    put_json(kinesis, "orders", [{"id": i} for i in range(20, 25)])
    restarted = _reader(aws)
    later_start = restarted.initialOffset()
    assert later_start != start
    assert sorted(executor_ids(restarted, later_start, end)) == list(range(10, 20))  # same records


def test_replaying_any_batch_reads_the_same_records(aws: LocalAWS) -> None:
    kinesis = aws.client("kinesis")
    create_stream(kinesis, "orders", 3)
    put_json(kinesis, "orders", [{"id": i} for i in range(45)])
    driver = _reader(aws, initialPosition="TRIM_HORIZON", maxRecordsPerShard="4")
    offsets = [driver.initialOffset()]
    limit = driver.getDefaultReadLimit()
    while True:
        end = driver.latestOffset(offsets[-1], limit)
        if end == offsets[-1]:
            break
        offsets.append(end)
        if len(offsets) == 4:
            put_json(kinesis, "orders", [{"id": i} for i in range(45, 60)])
    batches = [executor_ids(driver, a, b) for a, b in itertools.pairwise(offsets)]
    assert sorted(i for b in batches for i in b) == list(range(60))
    assert all(len(b) <= 3 * 4 for b in batches)
    # a fresh process (nothing cached) replays batch 2 from the logged offsets alone
    replayer = _reader(aws, initialPosition="TRIM_HORIZON", maxRecordsPerShard="4")
    assert executor_ids(replayer, offsets[2], offsets[3]) == batches[2]


def test_read_all_available_ignores_the_option_caps(aws: LocalAWS) -> None:
    kinesis = aws.client("kinesis")
    create_stream(kinesis, "orders", 2)
    put_json(kinesis, "orders", [{"id": i} for i in range(30)])
    driver = _reader(aws, initialPosition="TRIM_HORIZON", maxRecordsPerShard="2",
                     maxRecordsPerTrigger="3")
    start = driver.initialOffset()
    capped = driver.latestOffset(start, driver.getDefaultReadLimit())
    assert len(executor_ids(driver, start, capped)) == 3
    everything = driver.latestOffset(start, ReadAllAvailable())
    assert sorted(executor_ids(driver, start, everything)) == list(range(30))


def test_available_now_stops_at_the_records_present_when_prepared(aws: LocalAWS) -> None:
    kinesis = aws.client("kinesis")
    create_stream(kinesis, "orders", 1)
    put_json(kinesis, "orders", [{"id": i} for i in range(8)])
    driver = _reader(aws, initialPosition="TRIM_HORIZON")
    start = driver.initialOffset()
    threading.Event().wait(0.01)
    driver.prepareForTriggerAvailableNow()
    threading.Event().wait(0.01)
    put_json(kinesis, "orders", [{"id": i} for i in range(8, 12)])
    end = driver.latestOffset(start, ReadAllAvailable())
    assert sorted(executor_ids(driver, start, end)) == list(range(8))
    assert driver.latestOffset(end, ReadAllAvailable()) == end  # nothing more: the run ends


def test_spark_40_call_sequence_without_start_or_limit(aws: LocalAWS) -> None:
    """Spark < 4.2 calls latestOffset() with no arguments; a restart must not re-read."""
    kinesis = aws.client("kinesis")
    create_stream(kinesis, "orders", 2)
    put_json(kinesis, "orders", [{"id": i} for i in range(20)])
    driver = _reader(aws, initialPosition="TRIM_HORIZON", maxRecordsPerShard="3")
    start = driver.initialOffset()
    seen: list[int] = []
    for _ in range(3):  # a new query: initialOffset, then latestOffset/partitions per batch
        end = driver.latestOffset()
        batch = executor_ids(driver, start, end)
        assert 0 < len(batch) <= 6  # maxRecordsPerShard applies without a read limit
        seen += batch
        driver.commit(start)  # Spark commits the previous batch after planning this one
        start = end
    assert len(seen) == len(set(seen)) < 20
    # restart after the last batch was committed: a new driver knows nothing
    restarted = _reader(aws, initialPosition="TRIM_HORIZON", maxRecordsPerShard="3")
    sentinel = restarted.latestOffset()
    assert sentinel == {}
    assert restarted.partitions(start, sentinel) == []  # an empty batch teaches it the start
    rest: list[int] = []
    begin: dict[str, Any] = sentinel
    while True:
        end = restarted.latestOffset()
        if end == begin:
            break
        rest += executor_ids(restarted, begin, end)  # Spark's start is the sentinel: ends name theirs
        restarted.partitions(begin, end)
        begin = end
    assert sorted(seen + rest) == list(range(20))


def _put_sized(kinesis: Any, sizes: list[int]) -> None:
    """One record per size: ``size`` payload bytes (data plus the 1-byte partition key)."""
    for i, size in enumerate(sizes):
        body = json.dumps({"id": i}).encode()
        data = body + b" " * (size - 1 - len(body))
        kinesis.put_record(StreamName="orders", Data=data, PartitionKey="k")


def test_byte_limit_ends_a_range_with_the_record_that_reaches_it(aws: LocalAWS) -> None:
    kinesis = aws.client("kinesis")
    create_stream(kinesis, "orders", 1)
    _put_sized(kinesis, [100, 100, 100, 100, 1000, 100, 100])
    driver = _reader(aws, initialPosition="TRIM_HORIZON", maxBytesPerShard="250")
    offsets = [driver.initialOffset()]
    limit = driver.getDefaultReadLimit()
    while (end := driver.latestOffset(offsets[-1], limit)) != offsets[-1]:
        offsets.append(end)
    batches = [executor_ids(driver, a, b) for a, b in itertools.pairwise(offsets)]
    # 300 bytes cross 250 at the third record; the 1000-byte record alone exceeds the limit
    # and still makes a batch of its own
    assert batches == [[0, 1, 2], [3, 4], [5, 6]]
    exact = _reader(aws, initialPosition="TRIM_HORIZON", maxBytesPerShard="200")
    start = exact.initialOffset()
    assert executor_ids(exact, start, exact.latestOffset(start, limit)) == [0, 1]  # 200 reaches 200
    # a fresh process replays a logged range from Kinesis with the same records
    replayer = _reader(aws, initialPosition="TRIM_HORIZON", maxBytesPerShard="250",
                       maxShippedBytesPerPartition="0")
    assert executor_ids(replayer, offsets[1], offsets[2]) == [3, 4]
    # Trigger.Once (ReadAllAvailable) ignores the byte limit, as every other cap
    everything = driver.latestOffset(offsets[0], ReadAllAvailable())
    assert executor_ids(driver, offsets[0], everything) == list(range(7))
