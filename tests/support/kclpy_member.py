"""A fleet member whose processor is written for amazon-kclpy's v3 interface (test support).

    python tests/support/kclpy_member.py --mode commit [--explicit] <examples/demo_member.py args>

:class:`LedgerKclpyProcessor` is an amazon-kclpy processor as its users write them (the shape
of kclpy's sample: records' ``binary_data``, ``checkpointer.checkpoint(seq, sub)`` retried on
throttling, ``ShutdownException`` ends the attempt); amazon-kclpy is not installed, so its
``CheckpointError`` is imported from ``kinesis`` and its base class is left out: the Worker
recognises the processor by its methods. It writes ``examples/demo_member.py``'s ledger (so
``examples.demo_fleet.audit`` checks it) and, one JSON object a line, what kclpy-specific
calls it saw to ``<out-dir>/<member-id>.kclpy.jsonl`` (:func:`read_events`).

Modes: ``commit`` checkpoints every batch; ``prepare`` checkpoints the first half of each batch
and only prepares the rest (never committing it); ``hold`` blocks in ``process_records`` after
writing the batch to the ledger until ``<out-dir>/release`` exists, then checkpoints.
``--explicit`` wraps the processor in ``KclpyProcessor.factory`` instead of relying on detection.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from examples.demo_member import Ledger, parse_args, run_member, setup_logging  # noqa: E402
from kinesis import KclpyCheckpointError as CheckpointError  # noqa: E402  # amazon_kclpy.kcl.CheckpointError
from kinesis import KclpyProcessor  # noqa: E402

SENTINELS = ("TRIM_HORIZON", "LATEST", "AT_TIMESTAMP")


class Events:
    """``<member>.kclpy.jsonl``: one JSON object per line, appended atomically."""

    def __init__(self, path: Path, member: str):
        self.member = member
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    def write(self, kind: str, **fields: Any) -> None:
        line = json.dumps({"kind": kind, "member": self.member, "t": time.time_ns(), **fields}) + "\n"
        os.write(self._fd, line.encode())


def read_events(out_dir: Path) -> list[dict[str, Any]]:
    """Every member's events, in time order."""
    events = []
    for path in sorted(Path(out_dir).glob("*.kclpy.jsonl")):
        events += [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return sorted(events, key=lambda e: e["t"])


class LedgerKclpyProcessor:
    """An amazon-kclpy v3 record processor (``amazon_kclpy.v3.processor.RecordProcessorBase`` shape)."""

    CHECKPOINT_RETRIES = 5
    RETRY_WAIT = 0.2

    def __init__(self, ledger: Ledger, events: Events, mode: str, release: Path):
        self.ledger = ledger
        self.events = events
        self.mode = mode
        self.release = release
        self.shard_id = "?"
        self.largest: tuple[str, int] | None = None

    def initialize(self, initialize_input: Any) -> None:
        self.shard_id = initialize_input.shard_id
        seq = initialize_input.sequence_number
        where = "-" if seq in SENTINELS else f"{seq}/{initialize_input.sub_sequence_number}"
        pending = initialize_input.pending_checkpoint
        self.events.write("initialize", shard=self.shard_id, checkpoint=where, sequence_number=seq,
                          pending=f"{pending.sequence_number}/{pending.sub_sequence_number}" if pending else None)
        self.ledger.write([f"I {self.shard_id} {where} {time.time_ns()}"])

    def process_records(self, process_records_input: Any) -> None:
        records = process_records_input.records
        lines = []
        for record in records:
            payload = json.loads(record.binary_data)
            lines.append(f"R {self.shard_id} {record.sequence_number} {record.sub_sequence_number} "
                         f"{payload['pk']} {payload['n']} {time.time_ns()}")
            self.largest = (record.sequence_number, record.sub_sequence_number)
        self.ledger.write(lines)
        checkpointer = process_records_input.checkpointer
        if self.mode == "prepare":
            half = records[max(0, len(records) // 2 - 1)]
            self.checkpoint(checkpointer, half.sequence_number, half.sub_sequence_number)
            assert self.largest is not None
            prepared = checkpointer.prepare_checkpoint(*self.largest)
            p = prepared.pending_checkpoint
            self.events.write("prepared", shard=self.shard_id, checkpoint=f"{half.sequence_number}/"
                              f"{half.sub_sequence_number}", pending=f"{p.sequence_number}/{p.sub_sequence_number}")
            return
        if self.mode == "hold":
            self.events.write("holding", shard=self.shard_id)
            while not self.release.exists():
                threading.Event().wait(0.05)
        assert self.largest is not None
        self.checkpoint(checkpointer, *self.largest)

    def lease_lost(self, lease_lost_input: Any) -> None:
        self.events.write("lease_lost", shard=self.shard_id)
        self.ledger.write([f"L {self.shard_id} {time.time_ns()}"])

    def shard_ended(self, shard_ended_input: Any) -> None:
        self.checkpoint(shard_ended_input.checkpointer)
        self.events.write("shard_ended", shard=self.shard_id)
        self.ledger.write([f"E {self.shard_id} {time.time_ns()}"])

    def shutdown_requested(self, shutdown_requested_input: Any) -> None:
        self.checkpoint(shutdown_requested_input.checkpointer)
        self.events.write("shutdown_requested", shard=self.shard_id)
        self.ledger.write([f"S {self.shard_id} {time.time_ns()}"])

    def checkpoint(self, checkpointer: Any, sequence_number: str | None = None,
                   sub_sequence_number: int | None = None) -> None:
        for _ in range(self.CHECKPOINT_RETRIES):
            try:
                checkpointer.checkpoint(sequence_number, sub_sequence_number)
                return
            except CheckpointError as e:
                self.events.write("checkpoint_error", shard=self.shard_id, value=e.value)
                if e.value == "ShutdownException":
                    return  # another member owns the shard: stop checkpointing
                if e.value not in ("ThrottlingException", "KinesisClientLibDependencyException"):
                    raise
            threading.Event().wait(self.RETRY_WAIT)


def main(argv: list[str] | None = None) -> int:
    extra = argparse.ArgumentParser(add_help=False)
    extra.add_argument("--mode", choices=("commit", "prepare", "hold"), default="commit")
    extra.add_argument("--explicit", action="store_true")
    mine, rest = extra.parse_known_args(argv)
    args = parse_args(rest)
    setup_logging(args)
    ledger = Ledger(args.out_dir / f"{args.member_id}.ledger")
    events = Events(args.out_dir / f"{args.member_id}.kclpy.jsonl", args.member_id)
    release = args.out_dir / "release"

    def make() -> LedgerKclpyProcessor:
        return LedgerKclpyProcessor(ledger, events, mine.mode, release)

    factory: Any = KclpyProcessor.factory(make) if mine.explicit else make
    return run_member(args, args.endpoint, args.endpoint, factory)


if __name__ == "__main__":
    sys.exit(main())
