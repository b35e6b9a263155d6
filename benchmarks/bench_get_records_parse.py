"""CPU per record of decoding GetRecords: botocore's parser vs :mod:`kinesis.consumer.retrieval.fast_parse`.

Two figures, each a ratio of two runs in the same process, alternating, best of ``--rounds``:

1. ``in memory``: one GetRecords body of ``--records`` records of ``--size`` bytes (as AWS
   sends it: base64 data, epoch arrival times) parsed into the SDK's records
   (``records_from_response``), by botocore's JSON parser and by the fast parser. No I/O.
2. ``through HTTP``: a :class:`ShardReader` reading every record of a 1-shard stream of a
   moto server in its own process (:mod:`benchmarks.moto_process`: an in-process server would
   share the GIL), the fast parser installed on its client or not; CPU of this process.

Writes benchmarks/results/get_records_parse.json.

    .venv/bin/python benchmarks/bench_get_records_parse.py [--records 1000] [--size 1024] [--rounds 5]
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import boto3
from botocore.parsers import create_parser
from rich.console import Console
from rich.table import Table

from kinesis.consumer.retrieval import fast_parse
from kinesis.consumer.retrieval.polling import ShardReader
from kinesis.consumer.retrieval.positions import InitialPosition
from kinesis.consumer.retrieval.records import records_from_response

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.moto_process import MotoProcess  # noqa: E402
from benchmarks.report import write_json  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"


def body_of(records: int, size: int) -> bytes:
    """A GetRecords response body as Kinesis sends it."""
    return json.dumps({"Records": [
        {"SequenceNumber": str(49_600_000_000_000_000_000_000_000_000_000_000_000_000_000_000_000 + i),
         "ApproximateArrivalTimestamp": 1_764_288_000 + i / 1000, "Data": base64.b64encode(os.urandom(size)).decode(),
         "PartitionKey": f"pk-{i % 64}"} for i in range(records)],
        "NextShardIterator": "A" * 200, "MillisBehindLatest": 0}).encode()


def best_cpu_per_record(run: Callable[[], int], rounds: int, clock: Callable[[], float]) -> float:
    """The lowest CPU seconds per record of ``rounds`` runs (``run`` returns the records done)."""
    best = float("inf")
    for _ in range(rounds):
        start = clock()
        n = run()
        best = min(best, (clock() - start) / max(1, n))
    return best


def in_memory(records: int, size: int, rounds: int) -> tuple[float, float]:
    """(botocore, fast) CPU seconds per record, body to SDK records."""
    shape = boto3.client("kinesis", region_name="us-east-1", aws_access_key_id="x",
                         aws_secret_access_key="y").meta.service_model.operation_model("GetRecords").output_shape
    parser, body = create_parser("json"), body_of(records, size)

    def botocore() -> int:
        parsed = parser.parse({"status_code": 200, "headers": {}, "body": body}, shape)
        return len(records_from_response("s", "shardId-0", parsed["Records"]))

    def fast() -> int:
        parsed = fast_parse.parse_get_records(body)
        assert parsed is not None
        return len(records_from_response("s", "shardId-0", parsed["Records"]))

    slow_s, fast_s = float("inf"), float("inf")
    for _ in range(rounds):  # alternating, so a noisy moment hurts both alike
        slow_s = min(slow_s, best_cpu_per_record(botocore, 1, time.process_time))
        fast_s = min(fast_s, best_cpu_per_record(fast, 1, time.process_time))
    return slow_s, fast_s


def through_http(records: int, size: int, rounds: int) -> tuple[float, float]:
    """(botocore, fast) CPU seconds per record of a ShardReader reading a moto shard."""
    with MotoProcess() as aws:
        client = aws.client("kinesis")
        client.create_stream(StreamName="parse", ShardCount=1)
        for start in range(0, records, 500):
            client.put_records(StreamName="parse", Records=[
                {"Data": os.urandom(size), "PartitionKey": f"pk-{i}"} for i in range(start, min(records, start + 500))])
        shard = client.list_shards(StreamName="parse")["Shards"][0]["ShardId"]

        def read(fast: bool) -> int:
            reader_client = aws.client("kinesis")
            reader = ShardReader(reader_client, "parse", shard, InitialPosition.TRIM_HORIZON,
                                 max_records=1000, idle_backoff=0.0)
            if not fast:
                reader_client.meta.events.unregister("before-parse.kinesis.GetRecords",
                                                     unique_id=fast_parse.HANDLER_ID)
            n = 0
            while n < records:
                n += len(reader.read_batch().records)
            return n

        slow_s, fast_s = float("inf"), float("inf")
        for _ in range(rounds):
            slow_s = min(slow_s, best_cpu_per_record(lambda: read(False), 1, time.process_time))
            fast_s = min(fast_s, best_cpu_per_record(lambda: read(True), 1, time.process_time))
    return slow_s, fast_s


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=1000)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--out", type=Path, default=RESULTS / "get_records_parse.json")
    args = parser.parse_args(argv)
    results: dict[str, Any] = {"records": args.records, "size": args.size, "rounds": args.rounds}
    table = Table(title=f"GetRecords decoding, CPU per record ({args.records} records of {args.size} B)")
    for column in ("path", "botocore (us)", "fast (us)", "fast / botocore"):
        table.add_column(column)
    for name, measure in (("in memory", in_memory), ("through HTTP", through_http)):
        slow, fast = measure(args.records, args.size, args.rounds)
        results[name.replace(" ", "_")] = {"botocore_us": round(slow * 1e6, 2), "fast_us": round(fast * 1e6, 2),
                                           "ratio": round(fast / slow, 3)}
        table.add_row(name, f"{slow * 1e6:.1f}", f"{fast * 1e6:.1f}", f"{fast / slow:.2f}")
    Console().print(table)
    write_json(args.out, results)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
