"""Reader throughput: records/s through ``ShardReader`` vs a plain boto3 GetRecords loop.

Both read the same shards of the same embedded moto server (HTTP on 127.0.0.1) in the same
process, alternating, best of ``--rounds``. Scenarios:

1. ``plain``: 100-byte records. Baseline: GetShardIterator + GetRecords(Limit=10000) until
   caught up, counting records. The ratio shows what ShardReader's bookkeeping costs
   (Record objects, resume filtering, retry wrapper) on top of the HTTP round trips.
2. ``kpl``: the same number of user records packed into KPL aggregates of 100. Baseline: the
   same loop plus de-aggregation with the reference ``aws-kinesis-agg`` library (what a
   consumer would otherwise write). Records are user records in both.

Also measured without HTTP: ``records_from_response`` decoding throughput against the
reference de-aggregator on the same in-memory GetRecords responses.

Writes benchmarks/results/reader.json.

    .venv/bin/python benchmarks/bench_reader.py [--quick]
"""

from __future__ import annotations

import argparse
import logging
import platform
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from aws_kinesis_agg.deaggregator import iter_deaggregate_records
from rich.console import Console
from rich.table import Table

from kinesis.consumer.retrieval.polling import ShardReader
from kinesis.consumer.retrieval.positions import InitialPosition
from kinesis.consumer.retrieval.records import aggregate, records_from_response
from kinesis.testing import LocalAWS

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.report import write_json  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
SHARDS = 2
PAYLOAD = 100
PER_AGGREGATE = 100


def fill(client: Any, stream: str, user_records: int, kpl: bool) -> None:
    """Write ``user_records`` 100-byte records (or KPL aggregates of them) over all shards."""
    client.create_stream(StreamName=stream, ShardCount=SHARDS)
    payloads = [(f"pk-{i}", (b"%08d" % i) * (PAYLOAD // 8) + b"x" * (PAYLOAD % 8)) for i in range(user_records)]
    entries: list[dict[str, Any]]
    if kpl:
        entries = []
        for start in range(0, len(payloads), PER_AGGREGATE):
            entries += [a.put_records_entry() for a in aggregate(payloads[start : start + PER_AGGREGATE])]
    else:
        entries = [{"Data": d, "PartitionKey": k} for k, d in payloads]
    for start in range(0, len(entries), 500):
        client.put_records(StreamName=stream, Records=entries[start : start + 500])


def shard_ids(client: Any, stream: str) -> list[str]:
    return [s["ShardId"] for s in client.list_shards(StreamName=stream)["Shards"]]


def baseline(client: Any, stream: str, deaggregate: bool) -> int:
    """The plain boto3 loop over every shard; returns user records seen."""
    count = 0
    for shard_id in shard_ids(client, stream):
        it = client.get_shard_iterator(StreamName=stream, ShardId=shard_id, ShardIteratorType="TRIM_HORIZON")["ShardIterator"]
        while it:
            response = client.get_records(ShardIterator=it, Limit=10000)
            records = response["Records"]
            if deaggregate:
                count += sum(1 for _ in iter_deaggregate_records(records, data_format="Boto3"))
            else:
                count += len(records)
            it = response.get("NextShardIterator")
            if not records and response.get("MillisBehindLatest") == 0:
                break
    return count


def through_reader(client: Any, stream: str) -> int:
    """ShardReader over every shard; returns user records delivered."""
    count = 0
    for shard_id in shard_ids(client, stream):
        reader = ShardReader(client, stream, shard_id, InitialPosition.TRIM_HORIZON, idle_backoff=0)
        while True:
            batch = reader.read_batch()
            count += len(batch.records)
            if batch.shard_ended or (not batch.records and batch.millis_behind_latest == 0):
                break
    return count


def best_rate(fn: Callable[[], int], expected: int) -> tuple[float, float]:
    """(records/s, seconds) of one run; checks the count."""
    started = time.perf_counter()
    n = fn()
    seconds = time.perf_counter() - started
    if n != expected:
        raise SystemExit(f"expected {expected} records, got {n}")
    return n / seconds, seconds


def compare(name: str, client: Any, stream: str, expected: int, kpl: bool, rounds: int) -> dict[str, Any]:
    base: list[float] = []
    ours: list[float] = []
    for i in range(rounds):  # alternate which goes first, keep the best of each
        runs: list[tuple[list[float], Callable[[], int]]] = [
            (base, lambda: baseline(client, stream, deaggregate=kpl)),
            (ours, lambda: through_reader(client, stream)),
        ]
        for sink, fn in runs if i % 2 == 0 else reversed(runs):
            sink.append(best_rate(fn, expected)[0])
    return {
        "scenario": name,
        "user_records": expected,
        "kinesis_records": expected // PER_AGGREGATE if kpl else expected,
        "baseline": "boto3 GetRecords loop" + (" + aws-kinesis-agg" if kpl else ""),
        "baseline_records_per_s": round(max(base)),
        "reader_records_per_s": round(max(ours)),
        "reader_over_baseline": round(max(ours) / max(base), 3),
    }


def decode_only(user_records: int, rounds: int) -> dict[str, Any]:
    """records_from_response vs the reference de-aggregator on in-memory responses (no HTTP)."""
    payloads = [(f"pk-{i}", b"x" * PAYLOAD) for i in range(user_records)]
    aggs = [a for s in range(0, user_records, PER_AGGREGATE) for a in aggregate(payloads[s : s + PER_AGGREGATE])]
    raw = [
        {"Data": a.data, "PartitionKey": a.partition_key, "SequenceNumber": str(i + 1),
         "ApproximateArrivalTimestamp": None}
        for i, a in enumerate(aggs)
    ]

    def ours() -> int:
        return len(records_from_response("s", "shard", raw))

    def reference() -> int:
        return sum(1 for _ in iter_deaggregate_records(raw, data_format="Boto3"))

    repeats = max(7, rounds)  # cheap: best of several, alternating, to beat machine noise
    ours_rate = ref_rate = 0.0
    for _ in range(repeats):
        ours_rate = max(ours_rate, best_rate(ours, user_records)[0])
        ref_rate = max(ref_rate, best_rate(reference, user_records)[0])
    return {
        "user_records": user_records,
        "ours_user_records_per_s": round(ours_rate),
        "reference_user_records_per_s": round(ref_rate),
        "ours_over_reference": round(ours_rate / ref_rate, 3),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer records and rounds")
    parser.add_argument("--out", type=Path, default=RESULTS / "reader.json")
    args = parser.parse_args(argv)
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    records, rounds = (4_000, 2) if args.quick else (20_000, 3)

    with LocalAWS() as aws:
        client = aws.client("kinesis")
        fill(client, "bench-plain", records, kpl=False)
        fill(client, "bench-kpl", records, kpl=True)
        scenarios = [
            compare("plain", client, "bench-plain", records, kpl=False, rounds=rounds),
            compare("kpl", client, "bench-kpl", records, kpl=True, rounds=rounds),
        ]
    decode = decode_only(records, rounds)

    table = Table(title=f"ShardReader vs plain boto3 loop, moto over HTTP, {SHARDS} shards")
    for col in ("scenario", "user records", "baseline", "baseline rec/s", "reader rec/s", "ratio"):
        table.add_column(col, justify="right" if col != "baseline" else "left")
    for s in scenarios:
        table.add_row(s["scenario"], str(s["user_records"]), s["baseline"], f"{s['baseline_records_per_s']:,}",
                      f"{s['reader_records_per_s']:,}", f"{s['reader_over_baseline']:.2f}")
    console = Console()
    console.print(table)
    console.print(
        f"decode only ({decode['user_records']:,} user records in KPL aggregates of {PER_AGGREGATE}): "
        f"records_from_response {decode['ours_user_records_per_s']:,}/s, aws-kinesis-agg "
        f"{decode['reference_user_records_per_s']:,}/s, ratio {decode['ours_over_reference']:.2f}"
    )
    data = {
        "python": platform.python_version(),
        "machine": platform.machine(),
        "quick": args.quick,
        "shards": SHARDS,
        "payload_bytes": PAYLOAD,
        "rounds": rounds,
        "scenarios": scenarios,
        "decode_only": decode,
    }
    write_json(args.out, data)
    console.print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
