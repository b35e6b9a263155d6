"""One member of the chaos fleet: ``examples/demo_member.py``'s Worker and ledger, plus a
journal of every checkpoint write, with DynamoDB and Kinesis reached through separate
endpoints (each a fault proxy of this member alone).

    python tests/chaos/chaos_member.py --dynamodb-endpoint URL --kinesis-endpoint URL \\
        --stream S --application A --table T --member-id m1 --out-dir DIR

Besides ``<member>.ledger`` (the demo's format, see ``examples/demo_member.py``) it appends
to ``<member>.checkpoints``, one line per checkpoint call that wrote (or tried to write)::

    C <shard> <sequence or SHARD_END> <sub> <t0> <t1>   the write succeeded
    X <shard> <sequence or SHARD_END> <sub> <t0> <t1>   LeaseLostError (the write was refused)

``t0`` is ``time.time_ns()`` before the call, ``t1`` after it returned: the write was applied
in between. A call the checkpointer answers locally (nothing new to write) is not journaled.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from examples.demo_member import Ledger, LedgerProcessor, RequestCounter, status_of, write_status  # noqa: E402
from kinesis import Checkpointer, LeaseLostError, StreamConfig, Worker, WorkerConfig  # noqa: E402
from kinesis.testing import client_for  # noqa: E402


class JournalingProcessor(LedgerProcessor):
    """The demo's ledger processor, journaling each checkpoint write with its time window."""

    def __init__(self, ledger: Ledger, checkpoints: Ledger):
        super().__init__(ledger)
        self.checkpoints = checkpoints

    def _checkpoint(self, checkpointer: Checkpointer, target: str) -> None:
        before = getattr(checkpointer, "last_checkpoint", None)
        t0 = time.time_ns()
        try:
            checkpointer.checkpoint()
        except LeaseLostError:
            self.checkpoints.write([f"X {self.shard} {target} {t0} {time.time_ns()}"])
            raise
        t1 = time.time_ns()
        if target.startswith("SHARD_END") or getattr(checkpointer, "last_checkpoint", None) != before:
            self.checkpoints.write([f"C {self.shard} {target} {t0} {t1}"])


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--dynamodb-endpoint", required=True)
    p.add_argument("--kinesis-endpoint", required=True)
    p.add_argument("--region", default="us-east-1")
    p.add_argument("--stream", required=True)
    p.add_argument("--application", required=True)
    p.add_argument("--table", required=True)
    p.add_argument("--member-id", required=True)
    p.add_argument("--out-dir", required=True, type=Path)
    p.add_argument("--lease-duration", type=float, default=3.0)
    p.add_argument("--idle-backoff", type=float, default=0.25)
    p.add_argument("--max-records", type=int, default=200)
    p.add_argument("--shutdown-grace", type=float, default=20.0)
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    args.out_dir.mkdir(parents=True, exist_ok=True)
    logging.basicConfig(
        filename=args.out_dir / f"{args.member_id}.log",
        level=logging.INFO,
        format="%(asctime)s %(process)d %(threadName)s %(name)s %(levelname)s %(message)s",
    )
    logging.getLogger("botocore").setLevel(logging.WARNING)
    logging.getLogger(__name__).info("member %s starting, kinesis from %s", args.member_id,
                                     sys.modules["kinesis"].__file__)
    ledger = Ledger(args.out_dir / f"{args.member_id}.ledger")
    checkpoints = Ledger(args.out_dir / f"{args.member_id}.checkpoints")
    config = WorkerConfig(
        table_name=args.table,
        streams=[StreamConfig(args.stream, args.application, "TRIM_HORIZON")],
        worker_id=args.member_id,
        lease_duration=args.lease_duration,
        idle_backoff=args.idle_backoff,
        max_records=args.max_records,
        shutdown_grace=args.shutdown_grace,
        shard_sync_interval=max(2.0, args.lease_duration),
    )
    kinesis = client_for("kinesis", args.kinesis_endpoint, args.region)
    dynamodb = client_for("dynamodb", args.dynamodb_endpoint, args.region)
    counters = {"dynamodb": RequestCounter(dynamodb), "kinesis": RequestCounter(kinesis)}
    worker = Worker(config, lambda: JournalingProcessor(ledger, checkpoints),
                    kinesis_client=kinesis, dynamodb_client=dynamodb)
    stop = threading.Event()
    status_path = args.out_dir / f"{args.member_id}.status.json"
    worker.start()
    reporter = threading.Thread(target=write_status, args=(worker, counters, status_path, stop), daemon=True)
    reporter.start()
    clean = worker.run(install_signal_handlers=True)
    stop.set()
    reporter.join()
    final: dict[str, Any] = status_of(worker, counters)
    final["exit_clean"] = clean
    tmp = status_path.with_suffix(".tmp")
    tmp.write_text(json.dumps(final))
    tmp.replace(status_path)
    return 0 if clean else 3


if __name__ == "__main__":
    sys.exit(main())
