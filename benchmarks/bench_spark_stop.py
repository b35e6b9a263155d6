"""Group mode: how long after ``query.stop()`` a Spark application's leases are handed on.

One local Spark application (``local[1]``) reads a 4-shard stream in group mode
(``membership=static``, a single member, so ``stop()`` *releases* every lease: the same
single conditional write per lease as a hand-off to another member) into the ``noop`` sink.
Each round starts a query, waits until it holds the 4 leases and has run a few micro-batches,
calls ``query.stop()``, then reads the lease table every ~10 ms until no row names this
member. Figures per round: how long ``query.stop()`` took, and when the leases were free,
both from the moment ``query.stop()`` was called.

Without the SIGTERM handler (``spark_integration/sigterm.py``) PySpark ends the source's
Python process at once and the leases stay owned until they expire: another application can
take them only after ``leaseDuration`` (seen unchanged on its own clock). The baseline is
therefore that configured duration, and the ratio is hand-off time / ``leaseDuration``.

The moto server runs in its own process. Writes benchmarks/results/spark_stop.json.

    .venv/bin/python benchmarks/bench_spark_stop.py [--rounds 3]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.bench_spark import spark_session  # noqa: E402
from benchmarks.moto_process import MotoProcess  # noqa: E402
from benchmarks.report import write_json  # noqa: E402
from kinesis.errors import LeaseTableNotFoundError  # noqa: E402
from spark_integration.group import held_leases  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results"
LEASE_DURATION_S = 10.0
SHARDS = 4


def _wait(predicate: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.05)


def one_round(spark: Any, kinesis: Any, options: dict[str, str],
              workdir: Path) -> dict[str, float]:
    kinesis.put_records(StreamName="orders", Records=[  # a few batches of new data
        {"Data": b"x" * 100, "PartitionKey": str(i)} for i in range(200)])
    query = (spark.readStream.format("kinesis").options(**options).load()
             .writeStream.format("noop")
             .option("checkpointLocation", str(workdir / "ck"))
             .trigger(processingTime="200 milliseconds").start())
    def holds_all() -> bool:
        try:
            return len(held_leases(options)) == SHARDS
        except LeaseTableNotFoundError:  # the query creates it
            return False

    _wait(holds_all, 60, "the query to hold every lease")
    _wait(lambda: len(query.recentProgress) >= 3, 60, "three micro-batches")
    start = time.perf_counter()
    query.stop()
    returned = time.perf_counter() - start
    while held_leases(options):
        if time.perf_counter() - start > 3 * LEASE_DURATION_S:
            raise RuntimeError("the leases were not handed on")
        time.sleep(0.01)
    free = time.perf_counter() - start
    return {"stop_returned_s": round(returned, 3), "leases_free_s": round(free, 3)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    load_before = os.getloadavg()[0]
    with MotoProcess() as server, tempfile.TemporaryDirectory() as tmp:
        kinesis = server.client("kinesis")
        kinesis.create_stream(StreamName="orders", ShardCount=SHARDS)
        kinesis.get_waiter("stream_exists").wait(StreamName="orders",
                                                 WaiterConfig={"Delay": 0.1})
        options = {
            "streamName": "orders", "endpointUrl": server.endpoint_url,
            "region": "us-east-1", "initialPosition": "TRIM_HORIZON",
            "maxRecordsPerShard": "10", "leaseTable": "bench-leases",
            "applicationName": "bench", "membership": "static", "members": "bench-m1",
            "memberId": "bench-m1", "leaseDuration": f"{LEASE_DURATION_S:g}s",
        }
        spark = spark_session()
        try:
            rounds = [one_round(spark, kinesis, options, Path(tmp) / f"round-{i}")
                      for i in range(args.rounds)]
        finally:
            spark.stop()
    median = statistics.median(r["leases_free_s"] for r in rounds)
    result = {
        "benchmark": "spark_stop",
        "python": platform.python_version(),
        "shards": SHARDS,
        "rounds": rounds,
        "median_stop_returned_s": statistics.median(r["stop_returned_s"] for r in rounds),
        "median_leases_free_s": median,
        "baseline_lease_duration_s": LEASE_DURATION_S,
        "ratio_to_lease_duration": round(median / LEASE_DURATION_S, 4),
        "load_avg_1m": [round(load_before, 2), round(os.getloadavg()[0], 2)],
    }
    for i, r in enumerate(rounds):
        print(f"round {i}: query.stop() returned after {r['stop_returned_s']:.3f} s, "
              f"leases free {r['leases_free_s']:.3f} s after the call")
    print(f"median: leases free {median:.3f} s after query.stop() "
          f"({result['ratio_to_lease_duration']:.3f}x the {LEASE_DURATION_S:g} s lease "
          f"duration another application would otherwise wait)")
    write_json(RESULTS / "spark_stop.json", result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
