"""One Spark application of a group-mode test (run as a subprocess by test_spark_group.py).

Streams ``--stream`` in group mode into a JSON file sink until ``<workdir>/stop`` exists, then
stops the query (which hands its leases over) and exits 0. ``<workdir>/stopping`` and
``<workdir>/stop-returned`` hold the wall-clock times just before and after ``query.stop()``,
``<workdir>/handed-over`` the time ``wait_for_handover`` saw every lease leave this member.
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
    from spark_integration.group import wait_for_handover
    from tests.spark_support import make_session

    spark = make_session("local[1]", app_name=f"group-{args.member}")
    options = {
        "streamName": args.stream, "endpointUrl": args.endpoint,
        "initialPosition": "TRIM_HORIZON", "maxRecordsPerShard": "5",
        "describeShardInterval": "1s", "leaseTable": args.table,
        "applicationName": "orders-app", "memberId": args.member,
        "leaseDuration": args.lease_duration,
    }
    df = spark.readStream.format("kinesis").options(**options).load()
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
    # query.stop() does not wait for the hand-off (it runs in the source's Python process)
    left = wait_for_handover(options, timeout=30)
    (work / "handed-over").write_text(repr(time.time()))
    spark.stop()
    if failed is not None:
        print(f"query failed: {failed}", file=sys.stderr)
        return 1
    if left:
        print(f"leases still held after the hand-off wait: {left}", file=sys.stderr)
        return 1
    (work / "stopped").touch()
    return 0


if __name__ == "__main__":
    os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")
    sys.exit(main())
