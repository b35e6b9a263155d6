"""A benchmark member running kcl-rs (the Rust port of AWS's KCL, Python bindings).

Runs in kcl-rs's own environment (``benchmarks/peers/.venvs/kcl-rs``)::

    python benchmarks/peers/kcl_rs_member.py --endpoint URL --stream S --application A \\
        --member-id m1 --out-dir DIR [--shard-sync-ms 2000] [--cost-ms 2]

Everything else is kcl-rs's default except ``retrieval_mode="POLLING"`` (moto has no
SubscribeToShard) and ``initial_position="TRIM_HORIZON"`` (every peer reads from the start).
The processor writes the ledger (``peer_ledger``) and checkpoints after every batch;
``--cost-ms X`` first burns X ms of CPU per record (``bench_load_workers.py``'s skewed load).
SIGTERM calls ``Scheduler.shutdown()`` (kcl-rs's graceful shutdown) and exits.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

from kcl_rs import RecordProcessorBase, Scheduler

# The repository root goes last on sys.path: this script runs in the peer's own venv, whose
# packages (async-kinesis's is named ``kinesis``) must win over this repository's.
sys.path.append(str(Path(__file__).resolve().parents[2]))
from benchmarks.peers.peer_ledger import Ledger, install_stop, record_line


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--endpoint", required=True)
    p.add_argument("--region", default="us-east-1")
    p.add_argument("--stream", required=True)
    p.add_argument("--application", required=True)
    p.add_argument("--member-id", required=True)
    p.add_argument("--out-dir", required=True, type=Path)
    p.add_argument("--shard-sync-ms", type=int, default=None, help="default: kcl-rs's (60000)")
    p.add_argument("--cost-ms", type=float, default=0.0, help="CPU ms the processor burns per record")
    args = p.parse_args()
    cost = args.cost_ms / 1000
    ledger = Ledger(args.out_dir / f"{args.member_id}.ledger")

    class Processor(RecordProcessorBase):
        shard = "?"

        def initialize(self, i: Any) -> None:
            self.shard = i.shard_id
            ledger.event("I", self.shard, i.sequence_number or "-")

        def process_records(self, p: Any) -> None:
            if cost > 0 and p.records:  # this thread's CPU time, as bench_load_workers.py's Burning
                end = time.thread_time() + cost * len(p.records)
                while time.thread_time() < end:
                    pass
            ledger.write([record_line(self.shard, r.sequence_number, r.sub_sequence_number, r.data)
                          for r in p.records])
            if p.records:
                p.checkpointer.checkpoint()

        def lease_lost(self, _: Any) -> None:
            ledger.event("L", self.shard)

        def shard_ended(self, s: Any) -> None:
            s.checkpointer.checkpoint()
            ledger.event("E", self.shard)

        def shutdown_requested(self, s: Any) -> None:
            s.checkpointer.checkpoint()
            ledger.event("S", self.shard)

    extra = {} if args.shard_sync_ms is None else {"shard_sync_interval_millis": args.shard_sync_ms}
    scheduler = Scheduler(
        stream_name=args.stream, application_name=args.application, record_processor_factory=Processor,
        worker_identifier=args.member_id, region=args.region, endpoint_url=args.endpoint,
        initial_position="TRIM_HORIZON", retrieval_mode="POLLING", **extra,
    )
    stop = install_stop(None)
    scheduler.start()
    while not stop.wait(0.5):
        pass
    scheduler.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
