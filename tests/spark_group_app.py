"""One Spark application of a group-mode test (run as a subprocess by test_spark_group.py).

Streams ``--stream`` in group mode into a JSON file sink until ``<workdir>/stop`` exists, then
stops the query (which hands its leases over) and exits 0. ``<workdir>/stopping`` and
``<workdir>/stop-returned`` hold the wall-clock times just before and after ``query.stop()``.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--endpoint", required=True)
    parser.add_argument("--stream", required=True)
    parser.add_argument("--table", required=True)
    parser.add_argument("--member", required=True)
    parser.add_argument("--workdir", required=True)
    parser.add_argument("--lease-duration", default="3s")
    args = parser.parse_args()
    work = Path(args.workdir)
    from tests.spark_support import make_session

    spark = make_session("local[1]", app_name=f"group-{args.member}")
    df = (spark.readStream.format("kinesis")
          .option("streamName", args.stream)
          .option("endpointUrl", args.endpoint)
          .option("initialPosition", "TRIM_HORIZON")
          .option("maxRecordsPerShard", "5")
          .option("describeShardInterval", "1s")
          .option("leaseTable", args.table)
          .option("applicationName", "orders-app")
          .option("memberId", args.member)
          .option("leaseDuration", args.lease_duration)
          .load())
    query = (df.selectExpr("CAST(data AS STRING) AS body", "shardId", "sequenceNumber")
             .writeStream.format("json")
             .option("path", str(work / "out"))
             .option("checkpointLocation", str(work / "ck"))
             .trigger(processingTime="500 milliseconds")
             .start())
    (work / "started").touch()
    deadline = time.monotonic() + 600
    while not (work / "stop").exists() and query.isActive and time.monotonic() < deadline:
        query.awaitTermination(0.2)
    failed = query.exception()
    (work / "stopping").write_text(repr(time.time()))  # wall clock: the test compares
    query.stop()
    (work / "stop-returned").write_text(repr(time.time()))
    spark.stop()
    if failed is not None:
        print(f"query failed: {failed}", file=sys.stderr)
        return 1
    (work / "stopped").touch()
    return 0


if __name__ == "__main__":
    os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")
    sys.exit(main())
