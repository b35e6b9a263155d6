"""Worker throughput: records/s through a :class:`kinesis.Worker` vs a plain boto3 GetRecords loop.

Same moto server (its own process, HTTP on 127.0.0.1, so it does not share the GIL with what
is measured), same stream, same process, same run; the variants alternate, best of 5 rounds.
Both read every shard concurrently, one thread per shard:

* baseline: GetShardIterator(TRIM_HORIZON), then GetRecords(Limit=10000) until caught up,
  counting records (no lease, no checkpoint);
* worker: a fresh lease table per round, ``StreamConfig(..., "TRIM_HORIZON")``, a processor
  that counts and checkpoints every batch (one fenced DynamoDB write per batch), i.e. the
  whole path: lease loop, shard sync, reader, processor, checkpointer.

Both read with ``Limit`` = ``--batch`` records per GetRecords. Throughput is measured on both
sides from the first GetShardIterator request (seen by a botocore ``before-send`` hook) to the
last record delivered; the worker's start-up before that (lease table, first ticks, lease
takes) is reported separately.

Writes benchmarks/results/worker.json.

    .venv/bin/python benchmarks/bench_worker.py [--quick]
"""

from __future__ import annotations

import argparse
import logging
import os
import platform
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

from benchmarks.moto_process import MotoProcess  # noqa: E402
from benchmarks.report import write_json  # noqa: E402
from kinesis import Checkpointer, Record, RecordProcessor, StreamConfig, Worker, WorkerConfig  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
STREAM = "bench-worker"
PAYLOAD = 100


class Clock:
    """First/last delivery times and a count, shared by the threads of one run."""

    def __init__(self, expected: int):
        self.expected = expected
        self.count = 0
        self.first: float | None = None
        self.reading_since: float | None = None
        self.last = 0.0
        self.done = threading.Event()
        self._lock = threading.Lock()

    def add(self, n: int) -> None:
        if not n:
            return
        now = time.perf_counter()
        with self._lock:
            if self.first is None:
                self.first = now
            self.count += n
            self.last = now
            if self.count >= self.expected:
                self.done.set()

    def iterator_requested(self, **_: Any) -> None:
        with self._lock:
            if self.reading_since is None:
                self.reading_since = time.perf_counter()

    def rate(self) -> float:
        assert self.reading_since is not None
        return self.count / max(self.last - self.reading_since, 1e-9)


def kinesis_client(aws: MotoProcess, clock: Clock) -> Any:
    """A client whose first GetShardIterator request starts ``clock``."""
    client = aws.client("kinesis")
    client.meta.events.register("before-send.kinesis.GetShardIterator", clock.iterator_requested)
    return client


def fill(client: Any, shards: int, records: int) -> None:
    client.create_stream(StreamName=STREAM, ShardCount=shards)
    data = [{"Data": b"%08d" % i + b"x" * (PAYLOAD - 8), "PartitionKey": f"pk-{i}"} for i in range(records)]
    for start in range(0, records, 500):
        client.put_records(StreamName=STREAM, Records=data[start : start + 500])


def baseline(client: Any, clock: Clock, batch: int) -> None:
    def one(shard_id: str) -> None:
        it = client.get_shard_iterator(StreamName=STREAM, ShardId=shard_id, ShardIteratorType="TRIM_HORIZON")["ShardIterator"]
        while it:
            response = client.get_records(ShardIterator=it, Limit=batch)
            clock.add(len(response["Records"]))
            it = response.get("NextShardIterator")
            if not response["Records"] and response.get("MillisBehindLatest") == 0:
                return

    shards = [s["ShardId"] for s in client.list_shards(StreamName=STREAM)["Shards"]]
    threads = [threading.Thread(target=one, args=(s,)) for s in shards]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if clock.count != clock.expected:
        raise SystemExit(f"baseline read {clock.count} records, expected {clock.expected}")


class Counting(RecordProcessor):
    """Counts records; checkpoints every batch, or at most every ``interval`` seconds."""

    def __init__(self, clock: Clock, interval: float):
        self.clock = clock
        self.interval = interval
        self.checkpointed_at = time.perf_counter()

    def process_records(self, records: list[Record], checkpointer: Checkpointer,
                        millis_behind_latest: int | None = None) -> None:
        self.clock.add(len(records))
        now = time.perf_counter()
        if now - self.checkpointed_at >= self.interval:
            checkpointer.checkpoint()
            self.checkpointed_at = now


def through_worker(aws: MotoProcess, clock: Clock, round_no: int, batch: int, interval: float) -> float:
    """Run a worker until every record is processed; return its start-up seconds."""
    config = WorkerConfig(
        table_name=f"bench-worker-leases-{round_no}-{interval:g}",
        streams=[StreamConfig(STREAM, f"bench-{round_no}", "TRIM_HORIZON")],
        worker_id="bench",
        lease_duration=3.0,
        idle_backoff=0.2,
        max_records=batch,
    )
    worker = Worker(config, lambda: Counting(clock, interval), kinesis_client=kinesis_client(aws, clock),
                    dynamodb_client=aws.client("dynamodb"))
    started = time.perf_counter()
    worker.start()
    if not clock.done.wait(300):
        raise SystemExit(f"the worker processed {clock.count} of {clock.expected} records in 300 s")
    worker.stop(graceful=True)
    assert clock.reading_since is not None
    return clock.reading_since - started


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer records and rounds")
    parser.add_argument("--batch", type=int, default=2000, help="GetRecords Limit on both sides")
    parser.add_argument("--out", type=Path, default=RESULTS / "worker.json")
    args = parser.parse_args(argv)
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    shards, records, rounds = (2, 8_000, 2) if args.quick else (4, 40_000, 5)
    variants = {"baseline": None, "worker, checkpoint every 1 s": 1.0, "worker, checkpoint every batch": 0.0}
    rates: dict[str, list[float]] = {name: [] for name in variants}
    startup: list[float] = []
    with MotoProcess() as aws:
        fill(aws.client("kinesis"), shards, records)
        names = list(variants)
        for i in range(rounds):  # rotate which goes first; keep the best of each
            for name in names[i % 3 :] + names[: i % 3]:
                clock = Clock(records)
                interval = variants[name]
                if interval is None:
                    baseline(kinesis_client(aws, clock), clock, args.batch)
                else:
                    startup.append(through_worker(aws, clock, i, args.batch, interval))
                rates[name].append(clock.rate())
    best = {name: max(r) for name, r in rates.items()}
    base = best["baseline"]
    result = {
        "python": platform.python_version(),
        "machine": platform.machine(),
        "quick": args.quick,
        "cpus": os.cpu_count(),
        "load_average": [round(x, 2) for x in os.getloadavg()],
        "shards": shards,
        "records": records,
        "payload_bytes": PAYLOAD,
        "rounds": rounds,
        "get_records_limit": args.batch,
        "baseline": "boto3 GetRecords loop, one thread per shard, no lease or checkpoint",
        "baseline_records_per_s": round(base),
        "worker_records_per_s": round(best["worker, checkpoint every 1 s"]),
        "worker_over_baseline": round(best["worker, checkpoint every 1 s"] / base, 3),
        "worker_checkpoint_every_batch_records_per_s": round(best["worker, checkpoint every batch"]),
        "worker_checkpoint_every_batch_over_baseline": round(best["worker, checkpoint every batch"] / base, 3),
        "target_ratio": 0.9,
        "worker_startup_s": round(min(startup), 2),
        "all_rounds_records_per_s": {name: [round(x) for x in r] for name, r in rates.items()},
        "command": "python benchmarks/bench_worker.py" + (" --quick" if args.quick else "")
        + (f" --batch {args.batch}" if args.batch != 2000 else ""),
    }
    table = Table(title=f"Worker vs plain boto3 loop: {records:,} records of {PAYLOAD} B, {shards} shards, "
                        f"GetRecords Limit {args.batch}, moto in its own process (best of {rounds})")
    for col in ("reader", "records/s", "over baseline (target >= 0.9)"):
        table.add_column(col, justify="left" if col == "reader" else "right")
    for name in variants:
        table.add_row(name, f"{best[name]:,.0f}", f"{best[name] / base:.2f}")
    Console().print(table)
    Console().print(f"worker start-up before the first GetShardIterator: {result['worker_startup_s']:.2f} s")
    write_json(args.out, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
