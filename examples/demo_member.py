"""One member of the demo fleet: a :class:`kinesis.Worker` in its own process.

    python examples/demo_member.py --endpoint http://127.0.0.1:PORT --stream demo \\
        --application demo-app --table demo-leases --member-id member-1 --out-dir /tmp/demo

Its processor appends what it processes to ``<out-dir>/<member-id>.ledger`` (one line per
record, written and flushed per batch *before* the checkpoint), and the worker's status is
written to ``<out-dir>/<member-id>.status.json`` twice a second, with the number of DynamoDB
and Kinesis requests sent so far, by operation. SIGTERM stops it gracefully
(every lease handed off); the exit code is 0 if nothing was left behind, 3 otherwise.

Ledger lines (space separated; ``t`` is ``time.time_ns()``, all members run on one host)::

    I <shard> <checkpoint or -> <t>                    initialize
    R <shard> <sequence> <sub> <partition key> <n> <t> one processed record
    S <shard> <t>                                      shutdown_requested (after its checkpoint)
    E <shard> <t>                                      shard_ended (after SHARD_END)
    L <shard> <t>                                      lease_lost
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from kinesis import (  # noqa: E402
    Checkpointer,
    InitializationInput,
    Record,
    RecordProcessor,
    StreamConfig,
    Worker,
    WorkerConfig,
)
from kinesis.testing import client_for  # noqa: E402


class Ledger:
    """An append-only file shared by the member's shard threads; one write per batch."""

    def __init__(self, path: Path):
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self._lock = threading.Lock()

    def write(self, lines: list[str]) -> None:
        data = "".join(line + "\n" for line in lines).encode()
        with self._lock:
            os.write(self._fd, data)  # unbuffered: on disk (page cache) before we checkpoint


def init_line(init: InitializationInput) -> str:
    """The ledger's ``I`` line: a shard's processor starts (at its checkpoint)."""
    cp = init.checkpoint
    where = f"{cp.sequence_number}/{cp.sub_sequence_number}" if cp else "-"
    return f"I {init.shard_id} {where} {time.time_ns()}"


def record_line(shard: str, r: Record) -> str:
    """The ledger's ``R`` line of one processed record (the producer's key and counter)."""
    try:
        payload = json.loads(r.data)
        pk, n = str(payload["pk"]), int(payload["n"])
    except (ValueError, KeyError, TypeError):
        pk, n = r.partition_key, -1
    return f"R {shard} {r.sequence_number} {r.sub_sequence_number} {pk} {n} {time.time_ns()}"


class LedgerProcessor(RecordProcessor):
    """Records every record it processes, then checkpoints the batch."""

    def __init__(self, ledger: Ledger):
        self.ledger = ledger
        self.shard = "?"
        self.last_delivered = ""

    def initialize(self, init: InitializationInput) -> None:
        self.shard = init.shard_id
        self.ledger.write([init_line(init)])

    def process_records(
        self, records: list[Record], checkpointer: Checkpointer, millis_behind_latest: int | None = None
    ) -> None:
        self.ledger.write([record_line(self.shard, r) for r in records])
        last = records[-1]
        self.last_delivered = f"{last.sequence_number} {last.sub_sequence_number}"
        self._checkpoint(checkpointer, self.last_delivered)

    def shutdown_requested(self, checkpointer: Checkpointer) -> None:
        self._checkpoint(checkpointer, self.last_delivered)
        self.ledger.write([f"S {self.shard} {time.time_ns()}"])

    def shard_ended(self, checkpointer: Checkpointer) -> None:
        self._checkpoint(checkpointer, "SHARD_END 0")
        self.ledger.write([f"E {self.shard} {time.time_ns()}"])

    def _checkpoint(self, checkpointer: Checkpointer, target: str) -> None:
        """Checkpoint everything delivered (``target`` names it, for subclasses that journal)."""
        checkpointer.checkpoint()

    def lease_lost(self) -> None:
        self.ledger.write([f"L {self.shard} {time.time_ns()}"])


class RequestCounter:
    """Counts the AWS requests a client sends, by operation (a botocore ``before-send`` hook)."""

    def __init__(self, client: Any):
        self.counts: Counter[str] = Counter()
        self._lock = threading.Lock()
        client.meta.events.register("before-send", self._count)

    def _count(self, request: Any, **_: Any) -> None:
        target = request.headers.get("X-Amz-Target", b"")
        if isinstance(target, bytes):
            target = target.decode()
        with self._lock:
            self.counts[target.rsplit(".", 1)[-1] or "?"] += 1

    def snapshot(self) -> dict[str, int]:
        with self._lock:
            return dict(self.counts)


def status_of(worker: Worker, counters: dict[str, RequestCounter]) -> dict[str, Any]:
    data = worker.status_dict()
    data["pid"] = os.getpid()
    data["time_ns"] = time.time_ns()
    for service, counter in counters.items():
        data[f"{service}_requests"] = counter.snapshot()
    return data


def write_status(worker: Worker, counters: dict[str, RequestCounter], path: Path, stop: threading.Event) -> None:
    """Write the worker status as JSON (atomically) until ``stop``."""
    tmp = path.with_suffix(".tmp")
    while True:
        tmp.write_text(json.dumps(status_of(worker, counters)))
        tmp.replace(path)
        if stop.wait(0.5):
            return


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--endpoint", required=True, help="AWS endpoint URL (the demo's moto server)")
    p.add_argument("--region", default="us-east-1")
    p.add_argument("--stream", required=True)
    p.add_argument("--application", required=True)
    p.add_argument("--table", required=True)
    p.add_argument("--member-id", required=True)
    p.add_argument("--out-dir", required=True, type=Path)
    p.add_argument("--lease-duration", type=float, default=3.0)
    p.add_argument("--idle-backoff", type=float, default=0.25)
    p.add_argument("--max-records", type=int, default=500)
    p.add_argument("--initial-position", default="TRIM_HORIZON")
    p.add_argument("--shutdown-grace", type=float, default=10.0)
    p.add_argument("--reads", choices=("scan", "scoped"), default="scan",
                   help="scoped: no table scans, shard manifest; needs --kubeconfig (Kubernetes membership)")
    p.add_argument("--backup-check-interval", type=float, default=None,
                   help="scoped reads: seconds between samples of the watched members (default D/2)")
    p.add_argument("--kubeconfig", help="a kubeconfig for KubernetesMembership (pods labelled --k8s-selector)")
    p.add_argument("--k8s-namespace", default="default")
    p.add_argument("--k8s-selector", default="app=kinesis-demo")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    setup_logging(args)
    ledger = Ledger(args.out_dir / f"{args.member_id}.ledger")
    return run_member(args, args.endpoint, args.endpoint, lambda: LedgerProcessor(ledger))


def setup_logging(args: argparse.Namespace) -> None:
    """Log to ``<out-dir>/<member-id>.log`` (botocore quiet)."""
    args.out_dir.mkdir(parents=True, exist_ok=True)
    logging.basicConfig(
        filename=args.out_dir / f"{args.member_id}.log",
        level=logging.INFO,
        format="%(asctime)s %(process)d %(threadName)s %(name)s %(levelname)s %(message)s",
    )
    logging.getLogger("botocore").setLevel(logging.WARNING)


def run_member(
    args: argparse.Namespace,
    kinesis_endpoint: str,
    dynamodb_endpoint: str,
    processor_factory: Callable[[], RecordProcessor],
) -> int:
    """Run one Worker until SIGTERM with a status file beside the ledger; the exit code says
    whether every lease was handed off (0) or not (3)."""
    config = WorkerConfig(
        table_name=args.table,
        streams=[StreamConfig(args.stream, args.application, getattr(args, "initial_position", "TRIM_HORIZON"))],
        worker_id=args.member_id,
        lease_duration=args.lease_duration,
        idle_backoff=args.idle_backoff,
        max_records=args.max_records,
        shutdown_grace=args.shutdown_grace,
        shard_sync_interval=max(2.0, args.lease_duration),
        reads=getattr(args, "reads", "scan"),
        backup_check_interval=getattr(args, "backup_check_interval", None),
    )
    kinesis = client_for("kinesis", kinesis_endpoint, args.region)
    dynamodb = client_for("dynamodb", dynamodb_endpoint, args.region)
    counters = {"dynamodb": RequestCounter(dynamodb), "kinesis": RequestCounter(kinesis)}
    membership = None
    if getattr(args, "kubeconfig", None):
        from hashring import KubernetesMembership

        membership = KubernetesMembership(
            "label_selector", namespace=args.k8s_namespace, pod_name=args.member_id,
            label_selector=args.k8s_selector, kubeconfig=args.kubeconfig, watch=True,
        )
    worker = Worker(config, processor_factory, membership=membership, kinesis_client=kinesis, dynamodb_client=dynamodb)
    stop = threading.Event()
    status_path = args.out_dir / f"{args.member_id}.status.json"
    worker.start()
    reporter = threading.Thread(target=write_status, args=(worker, counters, status_path, stop), daemon=True)
    reporter.start()
    clean = worker.run(install_signal_handlers=True)
    stop.set()
    reporter.join()
    final = status_of(worker, counters)
    final["exit_clean"] = clean
    tmp = status_path.with_suffix(".tmp")
    tmp.write_text(json.dumps(final))
    tmp.replace(status_path)
    return 0 if clean else 3


if __name__ == "__main__":
    sys.exit(main())
