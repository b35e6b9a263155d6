"""``spark.readStream.format("kinesis")`` on a real local Spark session and the moto server."""

from __future__ import annotations

import json
import threading
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from kinesis.testing import LocalAWS
from tests.spark_support import create_stream, kinesis_calls, put_json, read_json_sink, wait_for

pytestmark = pytest.mark.slow


def _stream_df(spark: Any, aws: LocalAWS, stream: str, **options: str) -> Any:
    reader = (spark.readStream.format("kinesis").option("endpointUrl", aws.endpoint_url)
              .option("streamName", stream))
    for k, v in options.items():
        reader = reader.option(k, v)
    return reader.load()


def _offsets_log(checkpoint: Path) -> dict[int, dict[str, Any]]:
    """batch id -> the source's end offset, from Spark's offset log."""
    out = {}
    for f in (checkpoint / "offsets").iterdir():
        if f.name.isdigit():
            lines = f.read_text().splitlines()
            out[int(f.name)] = json.loads(lines[2])
    return out


def _committed(checkpoint: Path) -> set[int]:
    return {int(f.name) for f in (checkpoint / "commits").iterdir() if f.name.isdigit()}


def _sink_rows_by_batch(path: Path) -> dict[int, list[dict[str, Any]]]:
    """Rows of a file sink per batch id (from its _spark_metadata log)."""
    out: dict[int, list[dict[str, Any]]] = {}
    for log in (path / "_spark_metadata").iterdir():
        if not log.name.isdigit():
            continue
        rows = []
        for line in log.read_text().splitlines()[1:]:
            entry = json.loads(line)
            f = Path(entry["path"].removeprefix("file:"))
            rows.extend(json.loads(x) for x in f.read_text().splitlines() if x)
        out[int(log.name)] = rows
    return out


def _expected_batch(truth: dict[str, list[str]], start: dict[str, Any] | None,
                    end: dict[str, Any]) -> set[tuple[str, str]]:
    """(shardId, sequenceNumber) pairs a batch must read: after start, up to end, per shard."""
    out = set()
    for key, entry in end.items():
        shard = key.split("/", 1)[1]
        begin = (start or {}).get(key, {})
        if "resume" in entry:
            begin = entry["resume"]
        low = int(begin["seq"]) if "seq" in begin else -1
        high = int(entry["seq"]) if "seq" in entry else -1
        out |= {(shard, s) for s in truth[shard] if low < int(s) <= high}
    return out


def test_exactly_once_into_file_sink_across_restarts(spark: Any, aws: LocalAWS,
                                                      tmp_path: Path) -> None:
    kinesis = aws.client("kinesis")
    create_stream(kinesis, "orders", 3)
    truth: dict[str, list[str]] = defaultdict(list)

    def produce(ids: range) -> None:
        put_json(kinesis, "orders", [{"id": i} for i in ids])

    produce(range(0, 60))
    checkpoint, out = tmp_path / "ck", tmp_path / "out"
    gate = tmp_path / "gate"
    gate.mkdir()

    from pyspark.sql.functions import udf
    from pyspark.sql.types import StringType

    gate_dir = str(gate)

    def gate_fn(body):  # type: ignore[no-untyped-def]
        # Blocks a task while the gate is closed, so the test can stop the query mid-batch.
        import os
        import time

        if os.path.exists(os.path.join(gate_dir, "closed")):
            open(os.path.join(gate_dir, "entered"), "w").close()
            deadline = time.monotonic() + 120
            while os.path.exists(os.path.join(gate_dir, "closed")) and time.monotonic() < deadline:
                time.sleep(0.05)
        return body

    through_gate = udf(gate_fn, StringType())

    def start() -> Any:
        df = _stream_df(spark, aws, "orders", initialPosition="TRIM_HORIZON",
                        maxRecordsPerShard="8")
        rows = df.select(through_gate(df.data.cast("string")).alias("body"), "shardId",
                         "sequenceNumber")
        return (rows.writeStream.format("json").option("path", str(out))
                .option("checkpointLocation", str(checkpoint)).start())

    # 1) run, then stop between batches. The driver ships the records it read to fix each
    # batch's end inside the partitions: executors make no Kinesis call at all.
    with kinesis_calls() as calls:
        query = start()
        query.processAllAvailable()
        query.stop()
    assert len(_offsets_log(checkpoint)) >= 3  # 60 records, <= 8 per shard and batch
    assert calls[("get_records", "driver")] >= 3  # the counter sees the Spark processes
    assert calls[("get_records", "executor")] == 0, calls
    assert calls[("get_shard_iterator", "executor")] == 0, calls
    produce(range(60, 100))

    # 2) restart from the checkpoint and stop inside a batch
    (gate / "closed").touch()
    query = start()
    wait_for((gate / "entered").exists, 180, "a task to enter the gate")
    stopper = threading.Thread(target=query.stop)
    stopper.start()
    stopper.join(120)
    (gate / "closed").unlink()
    assert not stopper.is_alive()
    logged, committed = _offsets_log(checkpoint), _committed(checkpoint)
    interrupted = max(logged)
    assert interrupted not in committed  # the batch's end was logged, the batch never finished
    interrupted_end = logged[interrupted]

    # 3) restart: the interrupted batch is replayed with the same offsets, then the rest
    # (a new driver holds no read-ahead for the logged batch: its executors re-read it)
    produce(range(100, 130))
    with kinesis_calls() as calls:
        query = start()
        query.processAllAvailable()
        query.stop()
    assert calls[("get_records", "executor")] >= 1, calls

    rows = read_json_sink(out)
    ids = [json.loads(r["body"])["id"] for r in rows]
    assert sorted(ids) == list(range(130))  # everything, exactly once
    logged = _offsets_log(checkpoint)
    assert logged[interrupted] == interrupted_end  # the replay used the logged end offset
    for r in rows:
        truth[r["shardId"]].append(r["sequenceNumber"])
    by_batch = _sink_rows_by_batch(out)
    for batch_id, end in sorted(logged.items()):
        expected = _expected_batch(truth, logged.get(batch_id - 1), end)
        got = {(r["shardId"], r["sequenceNumber"]) for r in by_batch.get(batch_id, [])}
        assert got == expected, f"batch {batch_id} read other records than its offsets say"


def test_read_limits_and_trigger_once(spark: Any, aws: LocalAWS, tmp_path: Path) -> None:
    kinesis = aws.client("kinesis")
    create_stream(kinesis, "orders", 3)
    put_json(kinesis, "orders", [{"id": i} for i in range(50)])
    sizes: list[int] = []
    lock = threading.Lock()

    def collect(batch: Any, batch_id: int) -> None:
        with lock:
            sizes.append(batch.count())

    df = _stream_df(spark, aws, "orders", initialPosition="TRIM_HORIZON",
                    maxRecordsPerTrigger="7", maxRecordsPerShard="5")
    query = (df.writeStream.foreachBatch(collect)
             .option("checkpointLocation", str(tmp_path / "ck1")).start())
    query.processAllAvailable()
    query.stop()
    assert sum(sizes) == 50
    assert max(sizes) <= 7 and len(sizes) >= 8

    sizes.clear()
    once = (df.writeStream.foreachBatch(collect).trigger(once=True)
            .option("checkpointLocation", str(tmp_path / "ck2")).start())
    once.awaitTermination(300)
    assert sizes == [50]  # ReadAllAvailable: the option limits do not apply


def test_latest_starts_after_the_query_start(spark: Any, aws: LocalAWS, tmp_path: Path) -> None:
    kinesis = aws.client("kinesis")
    create_stream(kinesis, "orders", 2)
    put_json(kinesis, "orders", [{"id": i} for i in range(10)])
    seen: list[int] = []

    def collect(batch: Any, batch_id: int) -> None:
        seen.extend(json.loads(r.data)["id"] for r in batch.collect())

    df = _stream_df(spark, aws, "orders")  # LATEST by default
    query = (df.writeStream.foreachBatch(collect)
             .option("checkpointLocation", str(tmp_path / "ck")).start())
    def first_batch() -> bool:
        if not query.isActive:  # fail with the query's error, not after the whole wait
            raise AssertionError(f"the query stopped: {query.exception()}")
        return query.lastProgress is not None

    wait_for(first_batch, 180, "the first (empty) batch")
    put_json(kinesis, "orders", [{"id": i} for i in range(10, 15)])
    query.processAllAvailable()
    query.stop()
    assert sorted(seen) == list(range(10, 15))


def test_split_and_merge_during_a_query(spark: Any, kinesis_resharding: LocalAWS,
                                        tmp_path: Path) -> None:
    aws = kinesis_resharding
    kinesis = aws.client("kinesis")
    create_stream(kinesis, "orders", 2)
    batches: dict[int, list[tuple[str, int]]] = defaultdict(list)

    def collect(batch: Any, batch_id: int) -> None:
        batches[batch_id].extend((r.shardId, json.loads(r.data)["id"]) for r in batch.collect())

    df = _stream_df(spark, aws, "orders", initialPosition="TRIM_HORIZON",
                    describeShardInterval="0s", maxRecordsPerShard="10")
    query = (df.writeStream.foreachBatch(collect)
             .option("checkpointLocation", str(tmp_path / "ck")).start())
    put_json(kinesis, "orders", [{"id": i} for i in range(0, 30)])
    query.processAllAvailable()

    shards = kinesis.list_shards(StreamName="orders")["Shards"]
    first = shards[0]
    low, high = int(first["HashKeyRange"]["StartingHashKey"]), int(
        first["HashKeyRange"]["EndingHashKey"])
    kinesis.split_shard(StreamName="orders", ShardToSplit=first["ShardId"],
                        NewStartingHashKey=str((low + high) // 2))
    put_json(kinesis, "orders", [{"id": i} for i in range(30, 60)])
    query.processAllAvailable()

    listed = kinesis.list_shards(StreamName="orders")["Shards"]
    children = sorted(s["ShardId"] for s in listed if s.get("ParentShardId") == first["ShardId"])
    kinesis.merge_shards(StreamName="orders", ShardToMerge=children[0],
                         AdjacentShardToMerge=children[1])
    put_json(kinesis, "orders", [{"id": i} for i in range(60, 90)])
    query.processAllAvailable()
    query.stop()

    rows = [row for rs in batches.values() for row in rs]
    assert sorted(i for _, i in rows) == list(range(90))  # nothing lost, nothing twice
    listed = kinesis.list_shards(StreamName="orders")["Shards"]
    parents = {s["ShardId"]: [p for p in (s.get("ParentShardId"), s.get("AdjacentParentShardId"))
                              if p] for s in listed}
    batches_of: dict[str, list[int]] = defaultdict(list)
    for batch_id, rs in batches.items():
        for shard, _ in rs:
            batches_of[shard].append(batch_id)
    assert len(batches_of) == 5  # 2 original shards, 2 split children, 1 merged child
    for child, ps in parents.items():
        for parent in ps:
            if batches_of.get(child) and batches_of.get(parent):
                assert max(batches_of[parent]) < min(batches_of[child]), (
                    f"{child} was read before its parent {parent} was finished")
