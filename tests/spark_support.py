"""Helpers for the Spark tests: a local session and Kinesis fixtures on the moto server."""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any


def make_session(master: str = "local[2]", app_name: str = "kinesis-hashring-tests") -> Any:
    """A local SparkSession whose Python workers run this interpreter (the project's venv)."""
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")
    os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    import spark_integration

    spark = (
        SparkSession.builder.master(master)
        .appName(app_name)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.default.parallelism", "2")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.streaming.stopTimeout", "60s")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    spark_integration.register(spark)
    return spark


def create_stream(kinesis: Any, name: str, shards: int) -> None:
    """Create a stream and wait until it is ACTIVE."""
    kinesis.create_stream(StreamName=name, ShardCount=shards)
    kinesis.get_waiter("stream_exists").wait(StreamName=name, WaiterConfig={"Delay": 0.1})


def put_json(kinesis: Any, stream: str, payloads: Iterable[dict[str, Any]],
             key: Callable[[dict[str, Any]], str] = lambda p: str(p["id"])) -> list[str]:
    """PutRecords in chunks of 500; returns the sequence numbers, in order."""
    items = [{"Data": json.dumps(p).encode(), "PartitionKey": key(p)} for p in payloads]
    seqs: list[str] = []
    for i in range(0, len(items), 500):
        resp = kinesis.put_records(StreamName=stream, Records=items[i:i + 500])
        assert resp.get("FailedRecordCount", 0) == 0, resp
        seqs.extend(r["SequenceNumber"] for r in resp["Records"])
    return seqs


def read_json_sink(path: Path) -> list[dict[str, Any]]:
    """Every row of a JSON-lines file sink directory (Spark's committed files only)."""
    rows: list[dict[str, Any]] = []
    meta = path / "_spark_metadata"
    files: list[Path]
    if meta.exists():
        files = []
        for log in sorted(meta.iterdir(), key=lambda p: p.name):
            if log.name.startswith(".") or log.name.endswith(".crc"):
                continue
            for line in log.read_text().splitlines()[1:]:
                entry = json.loads(line)
                if entry.get("action", "add") == "add":
                    files.append(Path(entry["path"].removeprefix("file:")))
    else:
        files = sorted(path.glob("part-*.json"))
    for f in files:
        rows.extend(json.loads(line) for line in f.read_text().splitlines() if line)
    return rows


def wait_for(predicate: Callable[[], bool], timeout: float, what: str,
             interval: float = 0.2) -> None:
    """Poll ``predicate`` until it is true, or fail after ``timeout`` seconds naming ``what``."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(interval)
