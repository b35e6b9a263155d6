"""The driver ships its read-ahead records in the input partitions (no Spark session needed).

Every shipped range is compared, row by row and column by column, with what the executor's
re-fetch path reads from Kinesis for the same (start, end]. Kinesis requests are counted on the
moto server by the User-Agent role of the source's clients, so "executors made no GetRecords"
is measured, not assumed.
"""

from __future__ import annotations

import json
import pickle
from typing import Any

import pytest

from kinesis.consumer.retrieval.positions import Position
from kinesis.consumer.retrieval.records import aggregate
from kinesis.testing import LocalAWS
from spark_integration.offsets import SourceOffset
from spark_integration.options import parse_options
from spark_integration.partitions import ShardRange, ShardRangePartition
from spark_integration.readers import KinesisStreamReader, plan_partitions
from spark_integration.shipping import encode
from tests.spark_support import create_stream, kinesis_calls, put_json

KEY = "orders/shardId-000000000000"


def _reader(aws: LocalAWS, **opts: str) -> KinesisStreamReader:
    options = parse_options({"streamName": "orders", "endpointUrl": aws.endpoint_url,
                             "region": "us-east-1", "initialPosition": "TRIM_HORIZON", **opts},
                            streaming=True)
    return KinesisStreamReader(options)


def _read(reader: KinesisStreamReader, partitions: list[Any]) -> list[dict[str, Any]]:
    """Every row the executors yield for ``partitions`` (pickled both ways, as on Spark)."""
    executor = pickle.loads(pickle.dumps(reader))
    rows: list[dict[str, Any]] = []
    for partition in partitions:
        for batch in executor.read(pickle.loads(pickle.dumps(partition))):
            rows.extend(batch.to_pylist())
    return rows


def _refetched(reader: KinesisStreamReader, start: Any, end: Any) -> list[dict[str, Any]]:
    """What the re-fetch path (no shipped records) reads for (start, end]."""
    o = reader.options
    plain = plan_partitions(SourceOffset.from_json(start), SourceOffset.from_json(end),
                            o.shards_per_partition, o.max_records_per_shard)
    assert all(p.shipped == (None,) * len(p.ranges) for p in plain)  # type: ignore[attr-defined]
    return _read(reader, plain)


def _shipped(partitions: list[Any]) -> list[bool]:
    return [payload is not None for p in partitions for payload in p.shipped]


def _put_mixed(kinesis: Any) -> None:
    """Plain records and KPL aggregates of 5 user records, interleaved, on one shard."""
    n = 0
    for _ in range(4):
        put_json(kinesis, "orders", [{"id": n + i} for i in range(2)])
        n += 2
        (agg,) = aggregate([(f"k{n + i}", f'{{"id": {n + i}}}'.encode()) for i in range(5)])
        kinesis.put_record(StreamName="orders", **agg.put_records_entry())
        n += 5


def test_shipped_ranges_equal_the_refetched_ones_even_cut_inside_an_aggregate(
        aws: LocalAWS) -> None:
    kinesis = aws.client("kinesis")
    create_stream(kinesis, "orders", 1)
    _put_mixed(kinesis)  # 28 user records
    driver = _reader(aws, maxRecordsPerShard="3")
    start = driver.initialOffset()
    limit = driver.getDefaultReadLimit()
    cut_inside = 0
    seen: list[int] = []
    while True:
        end = driver.latestOffset(start, limit)
        if end == start:
            break
        with kinesis_calls() as calls:
            partitions = driver.partitions(start, end)
            assert _shipped(partitions) == [True]
            rows = _read(driver, partitions)
        assert calls[("get_records", "executor")] == 0
        assert calls[("get_shard_iterator", "executor")] == 0
        assert rows == _refetched(driver, start, end)  # same rows, same order, all columns
        assert rows[-1]["sequenceNumber"] == end[KEY]["seq"]
        assert rows[-1]["subSequenceNumber"] == end[KEY]["sub"]
        if 0 < end[KEY]["sub"] < 4:
            cut_inside += 1  # this batch ends (and the next starts) inside an aggregate
        seen += [json.loads(r["data"])["id"] for r in rows]
        driver.commit(start)
        start = end
    assert cut_inside >= 2
    assert seen == list(range(28))
    assert driver.state.cache.stats.shipped_records == 28
    assert driver.state.cache.keys() == []  # shipped ranges leave the cache


def test_a_range_the_cache_does_not_hold_exactly_is_read_from_kinesis(aws: LocalAWS) -> None:
    kinesis = aws.client("kinesis")
    create_stream(kinesis, "orders", 1)
    put_json(kinesis, "orders", [{"id": i} for i in range(10)])
    driver = _reader(aws)
    start = driver.initialOffset()
    end = driver.latestOffset(start, driver.getDefaultReadLimit())
    everything = _refetched(driver, start, end)
    assert len(everything) == 10
    assert end[KEY]["resume"] == {"from": "TRIM_HORIZON"}  # the batch starts at the horizon

    def at(row: dict[str, Any]) -> dict[str, Any]:
        return {KEY: {"seq": row["sequenceNumber"], "sub": 0}}

    def fresh_probe() -> None:  # the cache holds (TRIM_HORIZON, 10th record] again
        assert driver.latestOffset(start, driver.getDefaultReadLimit()) == end
        assert driver.state.cache.keys() == [KEY]

    # another start than the cached range's: not shipped, read from Kinesis, still exact
    fresh_probe()
    with kinesis_calls() as calls:
        partitions = driver.partitions(at(everything[3]), at(everything[9]))
        assert _shipped(partitions) == [False]
        assert _read(driver, partitions) == everything[4:]
    assert calls[("get_records", "executor")] >= 1

    # an earlier end inside the cached range (a read limit): only the records up to it ship
    fresh_probe()
    with kinesis_calls() as calls:
        partitions = driver.partitions(start, at(everything[6]))
        assert _shipped(partitions) == [True]
        assert _read(driver, partitions) == everything[:7]
    assert calls[("get_records", "executor")] == 0

    # an end past the cached range: read from Kinesis
    fresh_probe()
    put_json(kinesis, "orders", [{"id": i} for i in range(10, 15)])
    with kinesis_calls() as calls:
        fifteenth = at(driver_rows(driver, start)[14])
        partitions = driver.partitions(start, fifteenth)
        assert _shipped(partitions) == [False]
        assert [json.loads(r["data"])["id"] for r in _read(driver, partitions)] == list(range(15))
    assert calls[("get_records", "executor")] >= 1

    # a new driver (restart) holds nothing: the logged (start, end] is read from Kinesis
    restarted = _reader(aws)
    partitions = restarted.partitions(start, end)
    assert _shipped(partitions) == [False]
    assert _read(restarted, partitions) == everything


def driver_rows(reader: KinesisStreamReader, start: dict[str, Any]) -> list[dict[str, Any]]:
    """Every record after ``start`` (a bounded batch read through the re-fetch path)."""
    probe = _reader_like(reader)
    end = probe.latestOffset(start, probe.getDefaultReadLimit())
    return _refetched(probe, start, end)


def _reader_like(reader: KinesisStreamReader) -> KinesisStreamReader:
    return KinesisStreamReader(reader.options)


def test_the_size_cap_per_partition(aws: LocalAWS) -> None:
    kinesis = aws.client("kinesis")
    create_stream(kinesis, "orders", 2)
    put_json(kinesis, "orders", [{"id": i, "pad": "x" * 200} for i in range(40)])
    sizes = [p.shipped_bytes for p in _probe_and_plan(_reader(aws))]
    assert len(sizes) == 2 and min(sizes) > 500
    # both shards in one partition; the cap admits either shard's payload, not both
    cap = max(sizes) + 100
    driver = _reader(aws, shardsPerPartition="2", maxShippedBytesPerPartition=str(cap))
    start = driver.initialOffset()
    end = driver.latestOffset(start, driver.getDefaultReadLimit())
    partitions = driver.partitions(start, end)
    assert len(partitions) == 1
    assert _shipped(partitions) == [True, False]
    assert partitions[0].shipped_bytes <= cap
    assert driver.state.cache.stats.over_cap == 1
    assert _read(driver, partitions) == _refetched(driver, start, end)

    # a range over the cap is not even kept by the driver
    small = _reader(aws, maxShippedBytesPerPartition="1k")
    start = small.initialOffset()
    end = small.latestOffset(start, small.getDefaultReadLimit())
    assert small.state.cache.keys() == []
    partitions = small.partitions(start, end)
    assert _shipped(partitions) == [False, False]
    assert sorted(r["data"] for r in _read(small, partitions)) == sorted(
        r["data"] for r in _refetched(small, start, end))

    # 0 turns shipping off
    off = _reader(aws, maxShippedBytesPerPartition="0")
    start = off.initialOffset()
    end = off.latestOffset(start, off.getDefaultReadLimit())
    assert _shipped(off.partitions(start, end)) == [False, False]


def test_the_cache_is_emptied_by_commits_and_bounded(aws: LocalAWS) -> None:
    kinesis = aws.client("kinesis")
    create_stream(kinesis, "orders", 2)
    put_json(kinesis, "orders", [{"id": i} for i in range(30)])
    driver = _reader(aws, maxRecordsPerShard="5")
    cache = driver.state.cache
    start = driver.initialOffset()
    end = driver.latestOffset(start, driver.getDefaultReadLimit())
    assert len(cache.keys()) == 2 and cache.total_bytes > 0
    driver.commit(start)  # an earlier batch's commit keeps them
    assert len(cache.keys()) == 2
    driver.commit(end)  # a commit at (or past) their end drops them
    assert cache.keys() == [] and cache.total_bytes == 0
    # the next probe replaces a shard's range instead of adding one
    nxt = driver.latestOffset(end, driver.getDefaultReadLimit())
    again = driver.latestOffset(end, driver.getDefaultReadLimit())
    assert again == nxt and len(cache.keys()) == 2
    driver.stop()
    assert cache.keys() == []


def test_shipped_records_that_do_not_match_the_range_are_not_used(aws: LocalAWS) -> None:
    kinesis = aws.client("kinesis")
    create_stream(kinesis, "orders", 1)
    put_json(kinesis, "orders", [{"id": i} for i in range(6)])
    driver = _reader(aws)
    start = driver.initialOffset()
    end = driver.latestOffset(start, driver.getDefaultReadLimit())
    (planned,) = driver.partitions(start, end)
    (r,) = planned.ranges
    payload = planned.shipped[0]
    assert payload is not None
    # the same payload claimed for a shorter range: the executor reads that range from Kinesis
    rows = _refetched(driver, start, end)
    short = ShardRange(r.stream, r.shard_id, r.begin, Position(rows[2]["sequenceNumber"]),
                       limit=r.limit)
    forged = ShardRangePartition(0, [short], [payload])
    assert _read(driver, [forged]) == rows[:3]
    empty = ShardRangePartition(0, [r], [encode(_empty_batch())])
    assert _read(driver, [empty]) == rows
    with pytest.raises(ValueError, match="payloads for"):
        ShardRangePartition(0, [r], [])


def _empty_batch() -> Any:
    from spark_integration.schema import to_arrow_batch

    return to_arrow_batch([])


def _probe_and_plan(reader: KinesisStreamReader) -> list[Any]:
    start = reader.initialOffset()
    return reader.partitions(start, reader.latestOffset(start, reader.getDefaultReadLimit()))
