"""A Worker process with an async keyed-parallel processor (test support).

    python tests/support/keyed_member.py --endpoint URL --stream S --table T --member-id m1 \\
        --out-dir DIR [--wait 0.05] [--max-in-flight 32]

Every record waits ``--wait`` seconds on average, from 0.2x to 1.8x (``asyncio.sleep``: an
I/O-bound processor whose calls vary, so records complete out of order), then one line
is appended to ``<out-dir>/<member-id>.ledger``: ``<shard> <sequence> <partition key>``. The line
is the record's completion: it is written before ``process`` returns. SIGTERM is the Worker's
graceful stop (every lease handed off, with its exact progress).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from kinesis import KeyedProcessor, Record, StreamConfig, Worker, WorkerConfig  # noqa: E402
from kinesis.testing import client_for  # noqa: E402


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--endpoint", required=True)
    p.add_argument("--stream", required=True)
    p.add_argument("--table", required=True)
    p.add_argument("--member-id", required=True)
    p.add_argument("--out-dir", required=True, type=Path)
    p.add_argument("--wait", type=float, default=0.05)
    p.add_argument("--max-in-flight", type=int, default=32)
    p.add_argument("--lease-duration", type=float, default=3.0)
    args = p.parse_args()
    fd = os.open(args.out_dir / f"{args.member_id}.ledger", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    class Ledgered(KeyedProcessor):
        max_in_flight = args.max_in_flight
        checkpoint_interval = 0.5

        async def process(self, record: Record) -> None:
            await asyncio.sleep(args.wait * random.uniform(0.2, 1.8))
            os.write(fd, f"{record.shard_id} {record.sequence_number} {record.partition_key}\n".encode())

    config = WorkerConfig(table_name=args.table, streams=[StreamConfig(args.stream, "keyed", "TRIM_HORIZON")],
                          worker_id=args.member_id, lease_duration=args.lease_duration, idle_backoff=0.2,
                          shard_sync_interval=2.0)
    worker = Worker(config, Ledgered, kinesis_client=client_for("kinesis", args.endpoint),
                    dynamodb_client=client_for("dynamodb", args.endpoint))
    worker.start()
    return 0 if worker.run(install_signal_handlers=True) else 3


if __name__ == "__main__":
    sys.exit(main())
