"""Spark source throughput and micro-batch latency, against a plain boto3 reader in the same run.

A moto server runs in its own process (so neither side shares its interpreter); both sides
read the same ``--shards`` shards of 200-byte records over HTTP:

* baseline: one plain boto3 loop per shard (GetShardIterator TRIM_HORIZON, GetRecords with
  Limit=10000 until caught up), shards one after the other;
* source: ``spark.readStream.format("kinesis")`` into the ``noop`` sink on ``local[2]``,
  Trigger.AvailableNow, ``maxRecordsPerShard`` records per shard and micro-batch. Records/s
  is rows over the summed trigger time of the micro-batches (steady state: the query's
  start-up is reported apart), and over the wall time from ``start()`` to termination.

The driver fixes each batch's end by reading the shards; it ships those records to the
executors inside the input partitions (``maxShippedBytesPerPartition``, default 4m), so in
steady state every record is fetched once, by the driver. Spark's per-batch overhead (planning,
task launch, the Arrow hand-over) is what separates the source from the plain loop.

Latency: a second query with the default trigger follows a producer writing
``--rate`` records/s; the figure is the per-batch trigger-to-commit time
(``durationMs.triggerExecution``) of batches with data, median and p90, after a warm-up.

The machine's 1-minute load average before and after is recorded: the source runs several
processes (JVM, driver Python, two executor workers) and suffers more from a busy machine
than the single-threaded baseline, so compare ratios from quiet runs.

Writes benchmarks/results/spark.json.

    .venv/bin/python benchmarks/bench_spark.py [--quick]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
sys.path.insert(0, str(ROOT))

from benchmarks.moto_process import MotoProcess  # noqa: E402
from benchmarks.report import write_json  # noqa: E402

PAYLOAD = 200
def fill(kinesis: Any, stream: str, shards: int, records: int) -> None:
    kinesis.create_stream(StreamName=stream, ShardCount=shards)
    kinesis.get_waiter("stream_exists").wait(StreamName=stream, WaiterConfig={"Delay": 0.1})
    body = b"x" * PAYLOAD
    for start in range(0, records, 500):
        n = min(500, records - start)
        kinesis.put_records(StreamName=stream, Records=[
            {"Data": body, "PartitionKey": f"pk-{start + i}"} for i in range(n)])


def plain_reader(kinesis: Any, stream: str) -> int:
    """The baseline: a plain boto3 GetRecords loop over every shard; returns records read."""
    count = 0
    for shard in kinesis.list_shards(StreamName=stream)["Shards"]:
        it = kinesis.get_shard_iterator(StreamName=stream, ShardId=shard["ShardId"],
                                        ShardIteratorType="TRIM_HORIZON")["ShardIterator"]
        while it:
            resp = kinesis.get_records(ShardIterator=it, Limit=10000)
            count += len(resp["Records"])
            it = resp.get("NextShardIterator")
            if not resp["Records"] and resp.get("MillisBehindLatest") == 0:
                break
    return count


def spark_session() -> Any:
    os.environ.setdefault("AWS_ACCESS_KEY_ID", "bench")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "bench")
    os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
    from spark_integration.local import local_session

    return local_session("bench-spark")


def through_source(spark: Any, endpoint: str, stream: str, per_shard: int,
                   workdir: Path, shipped_bytes: str | None = None) -> dict[str, Any]:
    """One AvailableNow run into the noop sink; rows, wall time and per-batch durations."""
    reader = (spark.readStream.format("kinesis").option("streamName", stream)
              .option("endpointUrl", endpoint).option("initialPosition", "TRIM_HORIZON")
              .option("maxRecordsPerShard", str(per_shard)))
    if shipped_bytes is not None:
        reader = reader.option("maxShippedBytesPerPartition", shipped_bytes)
    df = reader.load()
    started = time.perf_counter()
    query = (df.writeStream.format("noop").trigger(availableNow=True)
             .option("checkpointLocation", str(workdir / f"ck-{time.time_ns()}")).start())
    query.awaitTermination()
    wall = time.perf_counter() - started
    if query.exception() is not None:
        raise SystemExit(f"query failed: {query.exception()}")
    batches = [p for p in query.recentProgress if p["numInputRows"] > 0]
    rows = sum(p["numInputRows"] for p in batches)
    busy = sum(p["durationMs"]["triggerExecution"] for p in batches) / 1000
    phases = sorted({k for p in batches for k in p["durationMs"]})
    return {"rows": rows, "wall_s": wall, "busy_s": busy, "batches": len(batches),
            "latest_offset_ms": statistics.median(p["durationMs"].get("latestOffset", 0)
                                                  for p in batches),
            "median_ms_per_phase": {k: statistics.median(p["durationMs"].get(k, 0)
                                                         for p in batches) for k in phases}}


def latency(spark: Any, endpoint: str, kinesis: Any, stream: str, rate: int, seconds: float,
            workdir: Path) -> dict[str, Any]:
    """Trigger-to-commit time of micro-batches while a producer writes ``rate`` records/s."""
    kinesis.create_stream(StreamName=stream, ShardCount=2)
    kinesis.get_waiter("stream_exists").wait(StreamName=stream, WaiterConfig={"Delay": 0.1})
    df = (spark.readStream.format("kinesis").option("streamName", stream)
          .option("endpointUrl", endpoint).load())
    query = (df.writeStream.format("noop")
             .option("checkpointLocation", str(workdir / "ck-latency")).start())
    stop = threading.Event()

    def produce() -> None:
        body = b"y" * PAYLOAD
        n = 0
        while not stop.wait(0.1):
            batch = max(1, rate // 10)
            kinesis.put_records(StreamName=stream, Records=[
                {"Data": body, "PartitionKey": f"k{n + i}"} for i in range(batch)])
            n += batch

    producer = threading.Thread(target=produce, daemon=True)
    producer.start()
    stop.wait(seconds)
    stop.set()
    producer.join()
    query.processAllAvailable()
    query.stop()
    batches = [p for p in query.recentProgress if p["numInputRows"] > 0][2:]  # skip warm-up
    times = sorted(p["durationMs"]["triggerExecution"] for p in batches)
    if not times:
        return {"batches": 0}
    return {
        "batches": len(times),
        "rows_per_batch_median": statistics.median(p["numInputRows"] for p in batches),
        "trigger_to_commit_ms_median": statistics.median(times),
        "trigger_to_commit_ms_p90": times[min(len(times) - 1, int(len(times) * 0.9))],
        "latest_offset_ms_median": statistics.median(
            p["durationMs"].get("latestOffset", 0) for p in batches),
        "add_batch_ms_median": statistics.median(
            p["durationMs"].get("addBatch", 0) for p in batches),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer records and rounds")
    parser.add_argument("--shards", type=int, default=4)
    parser.add_argument("--rate", type=int, default=200, help="producer records/s (latency)")
    parser.add_argument("--out", type=Path, default=RESULTS / "spark.json")
    parser.add_argument("--max-shipped-bytes", default=None,
                        help="the source's maxShippedBytesPerPartition (default: its default; "
                             "0: executors re-read every range, as before shipping)")
    args = parser.parse_args(argv)
    records, rounds, per_shard, seconds = ((8_000, 1, 1_000, 15) if args.quick
                                           else (80_000, 2, 5_000, 40))
    console = Console()
    load_before = os.getloadavg()[0]
    with MotoProcess() as aws:
        endpoint = aws.endpoint_url
        kinesis = aws.client("kinesis")
        fill(kinesis, "bench", args.shards, records)
        spark = spark_session()
        work = Path(tempfile.mkdtemp(prefix="bench-spark-"))
        base_rates, source_busy, source_wall = [], [], []
        runs = []
        for i in range(rounds):  # alternate the order, keep the best of each
            order = ["plain", "source"] if i % 2 == 0 else ["source", "plain"]
            for which in order:
                if which == "plain":
                    t = time.perf_counter()
                    n = plain_reader(kinesis, "bench")
                    elapsed = time.perf_counter() - t
                    assert n == records, (n, records)
                    base_rates.append(n / elapsed)
                else:
                    run = through_source(spark, endpoint, "bench", per_shard, work,
                                         args.max_shipped_bytes)
                    assert run["rows"] == records, run
                    runs.append(run)
                    source_busy.append(run["rows"] / run["busy_s"])
                    source_wall.append(run["rows"] / run["wall_s"])
        lat = latency(spark, endpoint, kinesis, "bench-latency", args.rate, seconds, work)
        spark.stop()

    base, busy, wall = max(base_rates), max(source_busy), max(source_wall)
    table = Table(title=f"kinesis source -> noop sink (local[2]) vs plain boto3 reader, "
                        f"{args.shards} shards, {records:,} records of {PAYLOAD} B")
    for col in ("reader", "records/s", "ratio to plain"):
        table.add_column(col, justify="right" if col != "reader" else "left")
    table.add_row("plain boto3 GetRecords loop", f"{base:,.0f}", "1.00")
    table.add_row("source, micro-batches (steady state)", f"{busy:,.0f}", f"{busy / base:.2f}")
    table.add_row("source, wall time incl. query start", f"{wall:,.0f}", f"{wall / base:.2f}")
    console.print(table)
    if lat.get("batches"):
        console.print(
            f"micro-batch latency at {args.rate} records/s: trigger-to-commit median "
            f"{lat['trigger_to_commit_ms_median']:.0f} ms, p90 {lat['trigger_to_commit_ms_p90']:.0f}"
            f" ms over {lat['batches']} batches (latestOffset median "
            f"{lat['latest_offset_ms_median']:.0f} ms, addBatch {lat['add_batch_ms_median']:.0f} ms)")
    data = {
        "python": platform.python_version(),
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        "load_average_1m": [round(load_before, 2), round(os.getloadavg()[0], 2)],
        "quick": args.quick,
        "shards": args.shards,
        "records": records,
        "payload_bytes": PAYLOAD,
        "max_records_per_shard": per_shard,
        "max_shipped_bytes_per_partition": args.max_shipped_bytes or "default",
        "rounds": rounds,
        "plain_reader_records_per_s": round(base),
        "source_records_per_s_steady": round(busy),
        "source_records_per_s_wall": round(wall),
        "source_over_plain_steady": round(busy / base, 3),
        "source_over_plain_wall": round(wall / base, 3),
        "target_ratio": 0.5,
        "source_runs": runs,
        "latency": {"producer_records_per_s": args.rate, **lat},
    }
    write_json(args.out, data)
    console.print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
