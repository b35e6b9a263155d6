"""A benchmark member running async-kinesis (pure-Python asyncio consumer, DynamoDB checkpointer).

Runs in async-kinesis's own environment (``benchmarks/peers/.venvs/async-kinesis``)::

    python benchmarks/peers/async_kinesis_member.py --endpoint URL --stream S \\
        --application A --member-id m1 --out-dir DIR [--max-shard-consumers N]

``Consumer(stream, iterator_type="TRIM_HORIZON", checkpointer=DynamoDBCheckPointer(name=A,
id=member))`` with every other setting at its default (``session_timeout`` 60 s,
``heartbeat_frequency`` 15 s, ``sleep_time_no_records`` 2 s, no ``max_shard_consumers``).
Its iterator yields the parsed payload only, so ledger lines carry ``-`` for shard and
sequence; the benchmark resolves them from the producer's log by (partition key, counter).
Checkpoints are the library's: the last record of a batch, committed on the next
``__anext__`` (after we wrote the batch). SIGTERM leaves the loop and closes the consumer
(which deallocates its shards).
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import json
import signal
import sys
from pathlib import Path
from typing import Any

# The repository root goes last on sys.path: this script runs in the peer's own venv, whose
# packages (async-kinesis's is named ``kinesis``) must win over this repository's.
sys.path.append(str(Path(__file__).resolve().parents[2]))
from benchmarks.peers.peer_ledger import Ledger, record_line

# async-kinesis's package is named ``kinesis`` (as this repository's is): import it by name
# at run time, in its own environment.
_kinesis: Any = importlib.import_module("kinesis")


async def run(args: argparse.Namespace) -> None:
    ledger = Ledger(args.out_dir / f"{args.member_id}.ledger")
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    loop.add_signal_handler(signal.SIGINT, stop.set)
    checkpointer = _kinesis.DynamoDBCheckPointer(
        name=args.application, id=args.member_id, endpoint_url=args.endpoint, region_name=args.region
    )
    extra = {} if args.max_shard_consumers is None else {"max_shard_consumers": args.max_shard_consumers}
    async with _kinesis.Consumer(
        args.stream, endpoint_url=args.endpoint, region_name=args.region, iterator_type="TRIM_HORIZON",
        checkpointer=checkpointer, **extra,
    ) as consumer:
        while not stop.is_set():
            async for item in consumer:
                ledger.write([record_line(None, None, 0, json.dumps(item))])
                if stop.is_set():
                    break


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--endpoint", required=True)
    p.add_argument("--region", default="us-east-1")
    p.add_argument("--stream", required=True)
    p.add_argument("--application", required=True)
    p.add_argument("--member-id", required=True)
    p.add_argument("--out-dir", required=True, type=Path)
    p.add_argument("--max-shard-consumers", type=int, default=None)
    args = p.parse_args()
    asyncio.run(run(args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
