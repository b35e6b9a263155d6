"""Enhanced Fan-Out vs polling: put-to-process_records latency and records/s per shard, one run.

Both retrievals run against the same embedded moto server, fan-out through the test endpoint
(``tests/support/fanout_endpoint.py``: SubscribeToShard served as a real event stream, read
from moto with GetRecords every ``--endpoint-poll`` seconds), polling straight to moto, with
the Worker's defaults otherwise (``idle_backoff`` 1 s, KCL's ``idleTimeBetweenReadsInMillis``).

1. latency: two applications of one stream, one per retrieval, run at the same time while a
   producer puts ``--rate`` records/s (each carries its put time); every record's put ->
   ``process_records`` delay is measured in the same process (monotonic clock).
2. throughput: 20,000 records of 100 bytes per shard (5,000 with ``--quick``) are written
   first, then a Worker of each retrieval reads them from TRIM_HORIZON (alternating, best of 3
   rounds); records/s per shard from ``Worker.start()`` to the last record (start-up, i.e.
   taking the leases and, for fan-out, reusing the consumer, included; also reported alone).

Locally, fan-out latency is bounded by the endpoint's poll interval and polling latency by
``idle_backoff``; fan-out throughput cannot beat polling here (the endpoint itself reads moto
with GetRecords, then encodes events). On AWS a subscription has its own 2 MB/s per shard and
records arrive in about 70 ms; these figures show what our pipeline adds, not AWS's.
Exits 1 if a record was lost or processed twice.

    .venv/bin/python benchmarks/bench_fanout.py [--quick]
"""

from __future__ import annotations

import argparse
import logging
import os
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
from kinesis import Checkpointer, Record, RecordProcessor, StreamConfig, Worker, WorkerConfig  # noqa: E402
from kinesis.testing import LocalAWS, client_for  # noqa: E402
from tests.support.fanout_endpoint import fanout_endpoint  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
MODES = ("polling", "fanout")


class Sink:
    """Collects (mode, shard, sequence) -> latency; counts duplicates."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.seen: dict[str, dict[tuple[str, str], float]] = {m: {} for m in MODES}
        self.duplicates = 0
        self.first_at: dict[str, float] = {}
        self.changed = threading.Condition(self.lock)

    def add(self, mode: str, records: list[Record], now: int) -> None:
        with self.lock:
            self.first_at.setdefault(mode, time.monotonic())
            for r in records:
                key = (r.shard_id, r.sequence_number)
                if key in self.seen[mode]:
                    self.duplicates += 1
                put_ns = int(r.data.split(b":", 1)[0])
                self.seen[mode][key] = (now - put_ns) / 1e6
            self.changed.notify_all()

    def wait_for(self, mode: str, n: int, timeout: float) -> bool:
        with self.lock:
            return self.changed.wait_for(lambda: len(self.seen[mode]) >= n, timeout)


class Timed(RecordProcessor):
    def __init__(self, sink: Sink, mode: str):
        self.sink, self.mode = sink, mode

    def process_records(self, records: list[Record], checkpointer: Checkpointer,
                        millis_behind_latest: int | None = None) -> None:
        self.sink.add(self.mode, records, time.monotonic_ns())
        checkpointer.checkpoint()

    def shutdown_requested(self, checkpointer: Checkpointer) -> None:
        checkpointer.checkpoint()


def worker(aws: LocalAWS, endpoint_url: str, sink: Sink, mode: str, stream: str, app: str) -> Worker:
    spec = StreamConfig(stream, app, "TRIM_HORIZON", retrieval=mode)
    config = WorkerConfig(f"{app}-leases", [spec], worker_id=f"{app}-w", lease_duration=10.0)
    url = endpoint_url if mode == "fanout" else aws.endpoint_url
    return Worker(config, lambda: Timed(sink, mode), kinesis_client=client_for("kinesis", url),
                  dynamodb_client=aws.client("dynamodb"))


def put(client: Any, stream: str, n: int, prefix: str) -> None:
    for start in range(0, n, 500):
        batch = [{"Data": b"%d:%s-%d" % (time.monotonic_ns(), prefix.encode(), i) + b"x" * 80,
                  "PartitionKey": f"{prefix}-{i}"} for i in range(start, min(n, start + 500))]
        client.put_records(StreamName=stream, Records=batch)


def latency(aws: LocalAWS, endpoint_url: str, shards: int, rate: float, seconds: float) -> tuple[dict[str, Any], int]:
    kinesis = aws.client("kinesis")
    kinesis.create_stream(StreamName="latency", ShardCount=shards)
    sink = Sink()
    workers = [worker(aws, endpoint_url, sink, m, "latency", f"lat-{m}").start() for m in MODES]
    try:
        put(kinesis, "latency", 1, "warmup")
        for m in MODES:
            if not sink.wait_for(m, 1, 60):
                raise SystemExit(f"{m}: the warm-up record was not processed in 60 s")
        with sink.lock:
            for m in MODES:
                sink.seen[m].clear()
        total, pause, started = int(rate * seconds), threading.Event(), time.monotonic()
        for i in range(total):
            pause.wait(max(0.0, started + i / rate - time.monotonic()))
            kinesis.put_record(StreamName="latency", Data=b"%d:r%d" % (time.monotonic_ns(), i),
                               PartitionKey=f"k{i}")
        lost = sum(0 if sink.wait_for(m, total, 60) else total - len(sink.seen[m]) for m in MODES)
    finally:
        for w in workers:
            w.stop(graceful=True)
    out: dict[str, Any] = {}
    for m in MODES:
        ms = sorted(sink.seen[m].values())
        out[m] = {"records": len(ms), "p50_ms": round(statistics.median(ms), 1),
                  "p95_ms": round(ms[int(0.95 * (len(ms) - 1))], 1), "max_ms": round(ms[-1], 1)}
    return out, lost + sink.duplicates


def throughput(aws: LocalAWS, endpoint_url: str, shards: int, per_shard: int, rounds: int) -> tuple[dict[str, Any], int]:
    kinesis = aws.client("kinesis")
    kinesis.create_stream(StreamName="bulk", ShardCount=shards)
    put(kinesis, "bulk", shards * per_shard, "b")
    total = shards * per_shard
    rates: dict[str, list[float]] = {m: [] for m in MODES}
    first: dict[str, list[float]] = {m: [] for m in MODES}
    bad = 0
    for i in range(rounds):
        for m in (MODES if i % 2 == 0 else MODES[::-1]):
            sink = Sink()
            w = worker(aws, endpoint_url, sink, m, "bulk", f"bulk-{m}-{i}")
            started = time.monotonic()
            w.start()
            done = sink.wait_for(m, total, 300)
            elapsed = time.monotonic() - started
            w.stop(graceful=True)
            bad += (0 if done else total - len(sink.seen[m])) + sink.duplicates
            rates[m].append(len(sink.seen[m]) / elapsed / shards)
            first[m].append(sink.first_at.get(m, time.monotonic()) - started)
    return {m: {"records_per_s_per_shard": round(max(r)), "all_rounds": [round(x) for x in r],
                "start_to_first_record_s": round(min(first[m]), 2)}
            for m, r in rates.items()}, bad


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer records and rounds")
    parser.add_argument("--rate", type=float, default=20.0, help="records/s put during the latency run")
    parser.add_argument("--endpoint-poll", type=float, default=0.02, help="the test endpoint's GetRecords interval")
    parser.add_argument("--out", type=Path, default=RESULTS / "fanout.json")
    args = parser.parse_args(argv)
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    shards, seconds, per_shard, rounds = (2, 10.0, 5_000, 1) if args.quick else (2, 30.0, 20_000, 3)
    with LocalAWS() as aws, fanout_endpoint(aws.endpoint_url, poll_interval=args.endpoint_poll) as ep:
        lat, lat_bad = latency(aws, ep.endpoint_url, shards, args.rate, seconds)
        thr, thr_bad = throughput(aws, ep.endpoint_url, shards, per_shard, rounds)
    result = {
        "python": platform.python_version(),
        "machine": platform.machine(),
        "quick": args.quick,
        "cpus": os.cpu_count(),
        "load_average": [round(x, 2) for x in os.getloadavg()],
        "shards": shards,
        "latency": {"rate_records_per_s": args.rate, "seconds": seconds, **lat},
        "throughput": {"records_per_shard": per_shard, "payload_bytes": 100, "rounds": rounds, **thr},
        "fanout_over_polling_p50_latency": round(lat["fanout"]["p50_ms"] / lat["polling"]["p50_ms"], 3),
        "fanout_over_polling_throughput": round(
            thr["fanout"]["records_per_s_per_shard"] / thr["polling"]["records_per_s_per_shard"], 3),
        "setup": "moto in this process; fan-out via tests/support/fanout_endpoint.py (GetRecords on moto every "
                 f"{args.endpoint_poll:g} s), polling with the Worker's default idle_backoff (1 s)",
        "lost_or_duplicated": lat_bad + thr_bad,
        "command": "python benchmarks/bench_fanout.py" + (" --quick" if args.quick else ""),
    }
    table = Table(title=f"Enhanced Fan-Out vs polling, {shards} shards, one run (moto + the test endpoint)")
    for col in ("retrieval", "latency p50 ms", "p95 ms", "max ms", "records/s per shard"):
        table.add_column(col, justify="left" if col == "retrieval" else "right")
    for m in MODES:
        table.add_row(m, f"{lat[m]['p50_ms']:.0f}", f"{lat[m]['p95_ms']:.0f}", f"{lat[m]['max_ms']:.0f}",
                      f"{thr[m]['records_per_s_per_shard']:,}")
    Console().print(table)
    write_json(args.out, result)
    if result["lost_or_duplicated"]:
        print(f"FAILED: {result['lost_or_duplicated']} records lost or processed twice")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
