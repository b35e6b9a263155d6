"""One consumer process of ``bench_consumer_cpu.py``: reads every record of a stream from
TRIM_HORIZON, touching each payload, and prints its CPU figures as one JSON line.

    python benchmarks/cpu_consumer.py ours|boto3|kcl-rs --endpoint URL --stream S --records N

``ours``: a :class:`kinesis.Worker` (its defaults, polling, the clients it builds itself from
the standard credential chain), checkpointing every batch.
``boto3``: a plain GetShardIterator/GetRecords loop per shard (one thread each), no leases, no
checkpoints. ``ours-fanout`` and ``boto3-fanout``: the same with Enhanced Fan-Out
(SubscribeToShard, a stream consumer registered first; botocore parses the event stream).
``ours-gc10k``: ours in a process that raised the GC's thresholds
(``gc.set_threshold(10_000, 20, 20)``: an application's setting).
``kcl-rs``: the Rust port of AWS's KCL (run with its own venv's Python),
checkpointing every batch. CPU is this process's (``resource.getrusage``: every thread, the
Rust ones too); ``startup_cpu_s`` is the CPU spent before the first record reached the
processor (``startup_parts``: importing the consumer's package, building its clients, and from
its start to the first record), ``steady_us`` the CPU per record after the first quarter of the
records, ``gc_cpu_s`` the part spent in Python's cyclic garbage collector (any thread).
"""

from __future__ import annotations

import argparse
import gc
import itertools
import json
import resource
import sys
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any


def cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


class GcTime:
    """CPU spent in CPython's cyclic garbage collector, per generation (``gc.callbacks``):
    a collection runs in the thread that triggered it, so thread time is its cost."""

    def __init__(self) -> None:
        self.seconds, self.counts = [0.0, 0.0, 0.0], [0, 0, 0]
        self._started = 0.0
        gc.callbacks.append(self._callback)

    def _callback(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._started = time.thread_time()
        else:
            generation = info["generation"]
            self.seconds[generation] += time.thread_time() - self._started
            self.counts[generation] += 1

    def stop(self) -> None:
        """Count no collection from now on (the consumer's stop is not counted)."""
        if self._callback in gc.callbacks:
            gc.callbacks.remove(self._callback)

    def report(self) -> dict[str, Any]:
        return {"gc_cpu_s": round(sum(self.seconds), 3), "gc_collections": self.counts,
                "gc_cpu_s_by_generation": [round(s, 3) for s in self.seconds]}


class Tally:
    """Counts records (thread-safe) and notes the CPU at the first record and at a quarter."""

    def __init__(self, total: int):
        self.total, self.n, self.touched = total, 0, 0
        self.first_cpu: float | None = None
        self.quarter: tuple[float, int] | None = None
        self.done_cpu: float | None = None
        self.done = threading.Event()
        self._lock = threading.Lock()
        self.marks: list[tuple[str, float]] = [("start", cpu())]
        self.on_done: list[Callable[[], None]] = []
        """Called once, when the last record is counted (before the consumer stops)."""

    def mark(self, name: str) -> None:
        """Notes the CPU at the end of a start-up step (``name``)."""
        self.marks.append((name, cpu()))

    def startup_parts(self) -> dict[str, float]:
        """CPU seconds of each start-up step; the last, to the first record."""
        marks = [*self.marks, ("first record", self.first_cpu or cpu())]
        return {name: round(t - before, 3) for (_, before), (name, t) in itertools.pairwise(marks)}

    def add(self, payloads: list[bytes]) -> None:
        touched = sum(len(p) for p in payloads)  # every payload is read
        with self._lock:
            if self.first_cpu is None and payloads:
                self.first_cpu = cpu()
            self.n += len(payloads)
            self.touched += touched
            if self.quarter is None and self.n >= self.total // 4:
                self.quarter = (cpu(), self.n)
            if self.n >= self.total and self.done_cpu is None:
                self.done_cpu = cpu()  # the reading is done: its stop is not counted
                for hook in self.on_done:
                    hook()
                self.done.set()


def run_ours(args: argparse.Namespace, tally: Tally) -> None:
    from kinesis import RecordProcessor, StreamConfig, Worker, WorkerConfig

    tally.mark("import")

    class Touch(RecordProcessor):
        def process_records(self, records: Any, checkpointer: Any, millis_behind_latest: int | None = None) -> None:
            tally.add([r.data for r in records])
            checkpointer.checkpoint()

    retrieval = "fanout" if args.consumer.endswith("-fanout") else "polling"
    config = WorkerConfig(f"cpu-{uuid.uuid4().hex[:8]}",
                          [StreamConfig(args.stream, f"cpu-{uuid.uuid4().hex[:6]}", "TRIM_HORIZON",
                                        retrieval=retrieval)],
                          worker_id="ours")
    worker = Worker(config, Touch, endpoint_url=args.endpoint, region_name="us-east-1")
    tally.mark("clients")
    worker.start()
    tally.done.wait(args.timeout)
    worker.stop()


def boto3_client(args: argparse.Namespace, tally: Tally) -> Callable[[], Any]:
    """Imports boto3 (a start-up step) and returns a maker of Kinesis clients for the endpoint."""
    import boto3

    tally.mark("import")
    lock = threading.Lock()

    def client() -> Any:
        with lock:  # boto3's default session is not thread-safe: one client at a time
            return boto3.client("kinesis", endpoint_url=args.endpoint, region_name="us-east-1",
                                aws_access_key_id="testing", aws_secret_access_key="testing")

    return client


def read_each(shards: list[str], read: Callable[[str], None], args: argparse.Namespace, tally: Tally) -> None:
    """Runs ``read`` for each shard in a thread of its own until every record is read."""
    for shard in shards:
        threading.Thread(target=read, args=(shard,), daemon=True).start()
    tally.done.wait(args.timeout)


def run_boto3(args: argparse.Namespace, tally: Tally) -> None:
    client = boto3_client(args, tally)
    listing = client()
    tally.mark("clients")
    shards = [s["ShardId"] for s in listing.list_shards(StreamName=args.stream)["Shards"]]

    def read(shard: str) -> None:
        kinesis = client()
        it = kinesis.get_shard_iterator(StreamName=args.stream, ShardId=shard,
                                        ShardIteratorType="TRIM_HORIZON")["ShardIterator"]
        while it and not tally.done.is_set():
            response = kinesis.get_records(ShardIterator=it, Limit=10000)
            tally.add([r["Data"] for r in response["Records"]])
            it = response.get("NextShardIterator")
            if not response["Records"] and response.get("MillisBehindLatest", 0) == 0:
                tally.done.wait(0.2)  # at the tip: poll again shortly (the others may still read)

    read_each(shards, read, args, tally)


def run_boto3_fanout(args: argparse.Namespace, tally: Tally) -> None:
    client = boto3_client(args, tally)
    kinesis = client()
    tally.mark("clients")
    arn = kinesis.describe_stream_summary(StreamName=args.stream)["StreamDescriptionSummary"]["StreamARN"]
    consumer = kinesis.register_stream_consumer(StreamARN=arn, ConsumerName=f"cpu-{uuid.uuid4().hex[:6]}")
    consumer_arn = consumer["Consumer"]["ConsumerARN"]
    while kinesis.describe_stream_consumer(ConsumerARN=consumer_arn)["ConsumerDescription"][
            "ConsumerStatus"] != "ACTIVE":
        tally.done.wait(0.2)
    shards = [s["ShardId"] for s in kinesis.list_shards(StreamName=args.stream)["Shards"]]

    def read(shard: str) -> None:
        subscriber = client()
        position: dict[str, Any] = {"Type": "TRIM_HORIZON"}
        while not tally.done.is_set():
            stream = subscriber.subscribe_to_shard(ConsumerARN=consumer_arn, ShardId=shard,
                                                   StartingPosition=position)["EventStream"]
            for event in stream:
                batch = event["SubscribeToShardEvent"]
                tally.add([r["Data"] for r in batch["Records"]])
                if batch.get("ContinuationSequenceNumber"):
                    position = {"Type": "AFTER_SEQUENCE_NUMBER",
                                "SequenceNumber": batch["ContinuationSequenceNumber"]}
                if tally.done.is_set():
                    break
            stream.close()

    read_each(shards, read, args, tally)


def run_kcl_rs(args: argparse.Namespace, tally: Tally) -> None:
    from kcl_rs import RecordProcessorBase, Scheduler

    tally.mark("import")

    class Touch(RecordProcessorBase):
        def initialize(self, i: Any) -> None:
            pass

        def process_records(self, p: Any) -> None:
            tally.add([r.data for r in p.records])
            if p.records:
                p.checkpointer.checkpoint()

        def lease_lost(self, _: Any) -> None:
            pass

        def shard_ended(self, s: Any) -> None:
            s.checkpointer.checkpoint()

        def shutdown_requested(self, s: Any) -> None:
            s.checkpointer.checkpoint()

    scheduler = Scheduler(stream_name=args.stream, application_name=f"cpu-{uuid.uuid4().hex[:8]}",
                          record_processor_factory=Touch, worker_identifier="kcl-rs", region="us-east-1",
                          endpoint_url=args.endpoint, initial_position="TRIM_HORIZON", retrieval_mode="POLLING")
    tally.mark("clients")
    scheduler.start()
    tally.done.wait(args.timeout)
    scheduler.shutdown()


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("consumer", choices=("ours", "boto3", "kcl-rs", "ours-fanout", "boto3-fanout", "ours-gc10k"))
    p.add_argument("--endpoint", required=True)
    p.add_argument("--stream", required=True)
    p.add_argument("--records", type=int, required=True)
    p.add_argument("--timeout", type=float, default=300.0, help="give up after this many seconds")
    p.add_argument("--tree", type=Path, default=Path(__file__).resolve().parents[1],
                   help="the checkout whose packages ours imports (default: this one)")
    args = p.parse_args()
    if args.consumer.startswith("ours"):  # a checkout's package (the peers' venvs run without it)
        sys.path.insert(0, str(args.tree))
    if args.consumer == "ours-gc10k":  # an application's choice, not the SDK's: larger GC thresholds
        gc.set_threshold(10_000, 20, 20)
    wall = time.monotonic()
    gc_time = GcTime()
    tally = Tally(args.records)
    tally.on_done.append(gc_time.stop)
    started = tally.marks[0][1]
    {"ours": run_ours, "boto3": run_boto3, "kcl-rs": run_kcl_rs, "ours-fanout": run_ours,
     "boto3-fanout": run_boto3_fanout, "ours-gc10k": run_ours}[args.consumer](args, tally)
    end = tally.done_cpu
    if end is None or tally.first_cpu is None or tally.quarter is None:
        print(json.dumps({"error": f"read {tally.n} of {args.records} records"}))
        return 1
    quarter_cpu, quarter_n = tally.quarter
    print(json.dumps({
        "consumer": args.consumer, "records": tally.n, "bytes": tally.touched,
        "cpu_s": round(end - started, 3), "wall_s": round(time.monotonic() - wall, 2),
        "startup_cpu_s": round(tally.first_cpu - started, 3), "startup_parts": tally.startup_parts(),
        "us_per_record": round((end - started) / tally.n * 1e6, 2),
        "steady_us": round((end - quarter_cpu) / max(1, tally.n - quarter_n) * 1e6, 2),
        **gc_time.report(),
    }))
    return 0


if __name__ == "__main__":
    sys.exit(main())
