"""CPU per record of decoding GetRecords: botocore's parser vs :mod:`kinesis.consumer.retrieval.fast_parse`.

Three paths, run in the same process, alternating, best of ``--rounds``: botocore's parser,
the fast parser's dicts (what a user's own call on a client the SDK set up gets), and the
SDK's own reads (``decoded``: msgspec straight into Records, ``fast_parse.reading``):

1. ``in memory``: one GetRecords body of ``--records`` records of ``--size`` bytes (as AWS
   sends it: base64 data, epoch arrival times) turned into the SDK's records (botocore's or
   the fast parser's dicts, then ``records_from_response``; or ``decode_get_records``). No I/O.
2. ``through HTTP``: a :class:`ShardReader` reading every record of a 1-shard stream of a
   moto server in its own process (:mod:`benchmarks.moto_process`: an in-process server would
   share the GIL), by each path; CPU of this process.

Writes benchmarks/results/get_records_parse.json.

    .venv/bin/python benchmarks/bench_get_records_parse.py [--records 1000] [--size 1024] [--rounds 5]
"""

from __future__ import annotations

import argparse
import base64
import functools
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


PATHS = ("botocore", "dicts", "decoded")


def in_memory(records: int, size: int, rounds: int) -> dict[str, float]:
    """CPU seconds per record of each path, body to SDK records."""
    shape = boto3.client("kinesis", region_name="us-east-1", aws_access_key_id="x",
                         aws_secret_access_key="y").meta.service_model.operation_model("GetRecords").output_shape
    parser, body = create_parser("json"), body_of(records, size)

    def botocore() -> int:
        parsed = parser.parse({"status_code": 200, "headers": {}, "body": body}, shape)
        return len(records_from_response("s", "shardId-0", parsed["Records"]))

    def dicts() -> int:
        parsed = fast_parse.parse_get_records(body)
        assert parsed is not None
        return len(records_from_response("s", "shardId-0", parsed["Records"]))

    def decoded() -> int:
        parsed = fast_parse.decode_get_records(body, "s", "shardId-0")
        assert parsed is not None
        return len(parsed["Records"])

    runs = {"botocore": botocore, "dicts": dicts, "decoded": decoded}
    best = dict.fromkeys(PATHS, float("inf"))
    for _ in range(rounds):  # alternating, so a noisy moment hurts each alike
        for name in PATHS:
            best[name] = min(best[name], best_cpu_per_record(runs[name], 1, time.process_time))
    return best


def through_http(records: int, size: int, rounds: int) -> dict[str, float]:
    """CPU seconds per record of a ShardReader reading a moto shard by each path."""
    with MotoProcess() as aws:
        client = aws.client("kinesis")
        client.create_stream(StreamName="parse", ShardCount=1)
        for start in range(0, records, 500):
            client.put_records(StreamName="parse", Records=[
                {"Data": os.urandom(size), "PartitionKey": f"pk-{i}"} for i in range(start, min(records, start + 500))])
        shard = client.list_shards(StreamName="parse")["Shards"][0]["ShardId"]

        def read(path: str) -> int:
            reader_client = aws.client("kinesis")
            reader = ShardReader(reader_client, "parse", shard, InitialPosition.TRIM_HORIZON,
                                 max_records=1000, idle_backoff=0.0)
            if path != "decoded":  # GetRecords outside fast_parse.reading: botocore's shape of dicts
                def as_dicts(iterator: str) -> dict[str, Any]:
                    response: dict[str, Any] = reader_client.get_records(ShardIterator=iterator,
                                                                         Limit=reader.max_records)
                    return response

                reader._fetch = as_dicts  # type: ignore[method-assign]
            if path == "botocore":
                reader_client.meta.events.unregister("before-parse.kinesis.GetRecords",
                                                     unique_id=fast_parse.HANDLER_ID)
            n = 0
            while n < records:
                n += len(reader.read_batch().records)
            return n

        best = dict.fromkeys(PATHS, float("inf"))
        for _ in range(rounds):
            for name in PATHS:
                best[name] = min(best[name], best_cpu_per_record(functools.partial(read, name), 1, time.process_time))
    return best


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=1000)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--out", type=Path, default=RESULTS / "get_records_parse.json")
    args = parser.parse_args(argv)
    results: dict[str, Any] = {"records": args.records, "size": args.size, "rounds": args.rounds}
    table = Table(title=f"GetRecords decoding, CPU per record ({args.records} records of {args.size} B)")
    for column in ("path", "botocore (us)", "fast dicts (us)", "decoded (us)", "dicts / botocore",
                   "decoded / botocore"):
        table.add_column(column)
    for name, measure in (("in memory", in_memory), ("through HTTP", through_http)):
        best = measure(args.records, args.size, args.rounds)
        us = {path: round(seconds * 1e6, 2) for path, seconds in best.items()}
        results[name.replace(" ", "_")] = {
            "botocore_us": us["botocore"], "fast_us": us["dicts"], "decoded_us": us["decoded"],
            "ratio": round(best["dicts"] / best["botocore"], 3),
            "decoded_ratio": round(best["decoded"] / best["botocore"], 3)}
        table.add_row(name, f"{us['botocore']:.1f}", f"{us['dicts']:.1f}", f"{us['decoded']:.1f}",
                      f"{best['dicts'] / best['botocore']:.2f}", f"{best['decoded'] / best['botocore']:.2f}")
    Console().print(table)
    write_json(args.out, results)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
