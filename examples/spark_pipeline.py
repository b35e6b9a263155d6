"""Spark pipeline demo: per-minute order aggregates from a Kinesis stream into Parquet.

Runs end to end on this machine: an embedded AWS (moto server on 127.0.0.1) holds the
``orders`` stream; a local Spark session reads it with the ``kinesis`` source, parses the JSON,
computes per-minute counts and revenue with a watermark, and appends the closed windows to
Parquet, with a checkpoint directory. It runs the query twice (Trigger.AvailableNow), the second
time restarting from the checkpoint after more orders arrived, then checks the Parquet output
against totals computed directly from the orders it produced. Exits 1 on any mismatch.

    make spark-demo            # or: .venv/bin/python examples/spark_pipeline.py [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import random
import sys
import tempfile
import time
from collections import defaultdict
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kinesis.consumer.retrieval import aggregate  # noqa: E402
from kinesis.testing import LocalAWS  # noqa: E402

STREAM = "orders"
SHARDS = 4
MINUTES = 6
ORDERS_PER_PHASE = 600
T0 = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)
ORDER_SCHEMA = "order_id STRING, customer STRING, amount DOUBLE, event_time TIMESTAMP"


def make_orders(rng: random.Random, first_id: int, count: int,
                minute_range: tuple[int, int]) -> list[dict[str, Any]]:
    """Orders with event times spread over the given minutes (in random arrival order)."""
    low, high = minute_range
    orders = []
    for i in range(first_id, first_id + count):
        at = T0 + timedelta(seconds=rng.uniform(low * 60, high * 60))
        orders.append({"order_id": f"o-{i:06d}", "customer": f"c-{rng.randrange(50):03d}",
                       "amount": round(rng.uniform(1, 200), 2),
                       "event_time": at.isoformat()})
    return orders


def put_orders(kinesis: Any, orders: list[dict[str, Any]]) -> None:
    """Plain PutRecords for most orders, KPL aggregates for every fifth (de-aggregated on read)."""
    plain = [o for i, o in enumerate(orders) if i % 5]
    packed = [o for i, o in enumerate(orders) if not i % 5]
    for i in range(0, len(plain), 500):
        chunk = plain[i:i + 500]
        resp = kinesis.put_records(StreamName=STREAM, Records=[
            {"Data": json.dumps(o).encode(), "PartitionKey": o["customer"]} for o in chunk])
        if resp.get("FailedRecordCount"):
            raise RuntimeError(f"PutRecords failed for {resp['FailedRecordCount']} orders")
    for agg in aggregate((o["customer"], json.dumps(o).encode()) for o in packed):
        kinesis.put_record(StreamName=STREAM, Data=agg.data, PartitionKey=agg.partition_key,
                           ExplicitHashKey=agg.explicit_hash_key)


def run_query(spark: Any, endpoint: str, out: Path, checkpoint: Path) -> int:
    """One Trigger.AvailableNow run of the pipeline; returns the number of micro-batches."""
    from pyspark.sql import functions as F

    raw = (spark.readStream.format("kinesis")
           .option("streamName", STREAM)
           .option("endpointUrl", endpoint)
           .option("initialPosition", "TRIM_HORIZON")
           .option("maxRecordsPerShard", "200")
           .load())
    orders = (raw.select(F.from_json(F.col("data").cast("string"), ORDER_SCHEMA).alias("o"))
              .select("o.*"))
    per_minute = (orders.withWatermark("event_time", "2 minutes")
                  .groupBy(F.window("event_time", "1 minute"))
                  .agg(F.count("*").alias("orders"), F.round(F.sum("amount"), 2).alias("revenue"))
                  .select(F.col("window.start").alias("minute"), "orders", "revenue"))
    query = (per_minute.writeStream.format("parquet").outputMode("append")
             .option("path", str(out)).option("checkpointLocation", str(checkpoint))
             .trigger(availableNow=True).start())
    query.awaitTermination()
    if query.exception() is not None:
        raise RuntimeError(f"the streaming query failed: {query.exception()}")
    return len(query.recentProgress)


def expected_minutes(orders: list[dict[str, Any]], closed_before: datetime) -> dict[datetime, tuple[int, float]]:
    """Per-minute (count, revenue) of the orders, for the minutes the watermark has closed."""
    acc: dict[datetime, list[float]] = defaultdict(lambda: [0, 0.0])
    for o in orders:
        at = datetime.fromisoformat(o["event_time"])
        minute = at.replace(second=0, microsecond=0)
        acc[minute][0] += 1
        acc[minute][1] += o["amount"]
    return {m: (int(c), round(r, 2)) for m, (c, r) in sorted(acc.items())
            if m + timedelta(minutes=1) <= closed_before}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--keep", type=Path, help="write output here (default: a temp dir)")
    args = parser.parse_args()
    os.environ.setdefault("AWS_ACCESS_KEY_ID", "demo")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "demo")
    os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # the moto server's access log
    console = Console()
    work = args.keep or Path(tempfile.mkdtemp(prefix="spark-pipeline-"))
    out, checkpoint = work / "per_minute", work / "checkpoint"
    rng = random.Random(7)

    with LocalAWS() as aws:
        kinesis = aws.client("kinesis")
        kinesis.create_stream(StreamName=STREAM, ShardCount=SHARDS)
        kinesis.get_waiter("stream_exists").wait(StreamName=STREAM, WaiterConfig={"Delay": 0.1})
        from spark_integration.local import local_session

        started = time.monotonic()
        spark = local_session("kinesis-spark-pipeline")
        console.print(f"Spark {spark.version} up in {time.monotonic() - started:.1f} s; "
                      f"output in {work}")

        # phase 1: minutes 0-3; phase 2 (a restart from the checkpoint): minutes 3-6, then a
        # late marker at minute 9 that moves the watermark past every real minute.
        phase1 = make_orders(rng, 0, ORDERS_PER_PHASE, (0, 3))
        put_orders(kinesis, phase1)
        batches1 = run_query(spark, aws.endpoint_url, out, checkpoint)
        phase2 = make_orders(rng, ORDERS_PER_PHASE, ORDERS_PER_PHASE, (3, MINUTES))
        marker = {"order_id": "marker", "customer": "c-000", "amount": 0.0,
                  "event_time": (T0 + timedelta(minutes=MINUTES + 3)).isoformat()}
        put_orders(kinesis, [*phase2, marker])
        batches2 = run_query(spark, aws.endpoint_url, out, checkpoint)

        got_rows = spark.read.parquet(str(out)).orderBy("minute").collect()
        spark.stop()

    got = {r.minute.replace(tzinfo=UTC): (int(r.orders), round(float(r.revenue), 2))
           for r in got_rows}
    want = expected_minutes(phase1 + phase2, T0 + timedelta(minutes=MINUTES))
    table = Table(title=f"orders per minute ({len(phase1) + len(phase2)} orders, "
                        f"{SHARDS} shards, {batches1} + {batches2} micro-batches)")
    for col in ("minute", "orders", "revenue", "expected", "ok"):
        table.add_column(col, justify="right")
    ok = True
    for minute in sorted(set(want) | set(got)):
        g, w = got.get(minute), want.get(minute)
        good = g is not None and w is not None and g[0] == w[0] and abs(g[1] - w[1]) < 0.011
        ok &= good
        table.add_row(minute.strftime("%H:%M"), str(g[0]) if g else "-",
                      f"{g[1]:.2f}" if g else "-", f"{w[0]} / {w[1]:.2f}" if w else "-",
                      "[green]yes[/]" if good else "[red]NO[/]")
    console.print(table)
    if ok and len(got) == MINUTES:
        console.print("[green]pipeline output matches the orders produced[/]")
        return 0
    console.print("[red]pipeline output does NOT match the orders produced[/]")
    return 1


if __name__ == "__main__":
    sys.exit(main())
