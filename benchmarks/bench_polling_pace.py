"""Polling pace: GetRecords calls per shard and put-to-read latency, paced vs eager, one run.

Kinesis allows 5 GetRecords calls per second per shard, shared by every application reading
it. Two loops read the same shard of one embedded moto server at the same time, each with its
own ``ShardReader`` (``idle_backoff`` 1 s):

* ``paced`` is the SDK's policy: it waits ``ReadResult.suggested_wait`` (``idle_backoff``
  after every batch at the tip of the shard, records or not) and its calls start at least
  ``min_read_interval`` (0.25 s, the Worker's default) apart;
* ``eager`` waits ``idle_backoff`` only after an empty batch at the tip and reads again at
  once otherwise, with no ``min_read_interval`` (the SDK's policy before this benchmark).

1. **steady**: a producer puts ``--rate`` records/s (each carries its put time) for
   ``--seconds``; both loops read from LATEST. Reported: calls/s per shard and put -> read
   latency (p50, p95).
2. **catch-up**: a backlog of 100-byte records (50,000; 10,000 with ``--quick``) is written
   first, then each loop reads it from TRIM_HORIZON with the Worker's ``max_records`` (10,000),
   one after the other. Reported: calls/s and records/s.

Writes benchmarks/results/polling_pace.json.

    .venv/bin/python benchmarks/bench_polling_pace.py [--quick]
"""

from __future__ import annotations

import argparse
import logging
import platform
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.report import write_json  # noqa: E402
from kinesis.consumer.retrieval.polling import ReadResult, ShardReader  # noqa: E402
from kinesis.consumer.retrieval.positions import InitialPosition  # noqa: E402
from kinesis.testing import LocalAWS  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
STREAM = "pace"
BACKLOG_STREAM = "pace-backlog"
SHARD = "shardId-000000000000"
IDLE_BACKOFF = 1.0
MIN_READ_INTERVAL = 0.25
POLICIES = ("paced", "eager")


def pause(policy: str, batch: ReadResult, reader: ShardReader) -> float:
    """How long ``policy`` waits after ``batch``."""
    if policy == "paced":
        return batch.suggested_wait
    caught_up = batch.millis_behind_latest in (0, None)
    return reader.idle_backoff if not batch.records and caught_up and not batch.shard_ended else 0.0


def reader_for(client: Any, policy: str, start: InitialPosition, stream: str = STREAM) -> ShardReader:
    """The Worker's reader settings; ``eager`` without ``min_read_interval`` (it had none)."""
    return ShardReader(client, stream, SHARD, start, idle_backoff=IDLE_BACKOFF,
                       min_read_interval=MIN_READ_INTERVAL if policy == "paced" else 0.0)


def steady(client: Any, rate: float, seconds: float) -> dict[str, Any]:
    stop = threading.Event()
    latencies: dict[str, list[float]] = {p: [] for p in POLICIES}
    readers = {p: reader_for(client, p, InitialPosition.LATEST) for p in POLICIES}
    for r in readers.values():
        r.read_batch()  # LATEST: the iterator is taken before the producer starts

    def loop(policy: str) -> None:
        reader = readers[policy]
        while not stop.is_set():
            batch = reader.read_batch()
            now = time.monotonic()
            latencies[policy] += [now - float(r.data.decode()) for r in batch.records]
            stop.wait(pause(policy, batch, reader))

    threads = [threading.Thread(target=loop, args=(p,), daemon=True) for p in POLICIES]
    for t in threads:
        t.start()
    calls_before = {p: r.stats.get_records_calls for p, r in readers.items()}
    started = time.monotonic()
    sent = 0
    while time.monotonic() - started < seconds:
        client.put_record(StreamName=STREAM, Data=f"{time.monotonic():.6f}".encode(), PartitionKey=str(sent))
        sent += 1
        time.sleep(max(0.0, sent / rate - (time.monotonic() - started)))  # the producer's pace
    window = time.monotonic() - started
    deadline = time.monotonic() + 3 * IDLE_BACKOFF
    while time.monotonic() < deadline and any(len(latencies[p]) < sent for p in POLICIES):
        time.sleep(0.05)  # let both loops drain the last records (bounded; counts are checked)
    stop.set()
    for t in threads:
        t.join(5)
    out: dict[str, Any] = {"rate": rate, "seconds": round(window, 1), "records": sent}
    for p in POLICIES:
        lat = sorted(latencies[p])
        out[p] = {
            "records_read": len(lat),
            "calls_per_s": round((readers[p].stats.get_records_calls - calls_before[p]) / window, 2),
            "latency_p50_ms": round(1000 * statistics.median(lat), 1) if lat else None,
            "latency_p95_ms": round(1000 * lat[int(0.95 * (len(lat) - 1))], 1) if lat else None,
        }
    return out


def catch_up(client: Any, backlog: int) -> dict[str, Any]:
    for i in range(0, backlog, 500):
        client.put_records(StreamName=BACKLOG_STREAM, Records=[
            {"Data": b"x" * 100, "PartitionKey": str(j)} for j in range(i, min(backlog, i + 500))])
    out: dict[str, Any] = {"backlog": backlog}
    for p in POLICIES:
        reader = reader_for(client, p, InitialPosition.TRIM_HORIZON, stream=BACKLOG_STREAM)
        read, started = 0, time.monotonic()
        while True:
            batch = reader.read_batch()
            read += len(batch.records)
            if not batch.records and batch.millis_behind_latest in (0, None):
                break
            time.sleep(pause(p, batch, reader))
        took = time.monotonic() - started
        out[p] = {"records": read, "seconds": round(took, 2), "calls_per_s": round(reader.stats.get_records_calls / took, 2),
                  "records_per_s": round(read / took)}
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a shorter window and a smaller backlog")
    parser.add_argument("--rate", type=float, default=100.0, help="records/s in the steady phase")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    seconds, backlog = (10.0, 10_000) if args.quick else (30.0, 50_000)
    with LocalAWS() as aws:
        client = aws.client("kinesis")
        for name in (STREAM, BACKLOG_STREAM):
            client.create_stream(StreamName=name, ShardCount=1)
        data: dict[str, Any] = {
            "python": platform.python_version(),
            "machine": platform.machine(),
            "command": "python benchmarks/bench_polling_pace.py" + (" --quick" if args.quick else ""),
            "steady": steady(client, args.rate, seconds),
        }
        data["catch_up"] = catch_up(client, backlog)
    s, c = data["steady"], data["catch_up"]
    data["ratios"] = {
        "steady_calls_paced_vs_eager": round(s["paced"]["calls_per_s"] / s["eager"]["calls_per_s"], 3),
        "catch_up_seconds_paced_vs_eager": round(c["paced"]["seconds"] / c["eager"]["seconds"], 2),
    }
    table = Table(title=f"polling pace, one shard on moto: {args.rate:g} records/s for {s['seconds']} s, "
                        f"then a backlog of {backlog}")
    for col in ("figure", *POLICIES):
        table.add_column(col, justify="left" if col == "figure" else "right")
    table.add_row("steady: GetRecords calls/s", *(str(s[p]["calls_per_s"]) for p in POLICIES))
    table.add_row("steady: put -> read p50 / p95 (ms)",
                  *(f"{s[p]['latency_p50_ms']} / {s[p]['latency_p95_ms']}" for p in POLICIES))
    table.add_row("steady: records read", *(f"{s[p]['records_read']} of {s['records']}" for p in POLICIES))
    table.add_row("catch-up: calls/s", *(str(c[p]["calls_per_s"]) for p in POLICIES))
    table.add_row("catch-up: records/s (seconds)", *(f"{c[p]['records_per_s']} ({c[p]['seconds']})" for p in POLICIES))
    Console(width=120).print(table)
    print(f"paced/eager: steady calls {data['ratios']['steady_calls_paced_vs_eager']}x, "
          f"catch-up time {data['ratios']['catch_up_seconds_paced_vs_eager']}x")
    write_json(RESULTS / "polling_pace.json", data)
    lost = [p for p in POLICIES if s[p]["records_read"] != s["records"] or c[p]["records"] != backlog]
    if lost:
        print(f"records missing for {lost}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
