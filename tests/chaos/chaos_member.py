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
import asyncio
import logging
import random
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from examples.demo_member import (  # noqa: E402
    Ledger,
    LedgerProcessor,
    init_line,
    record_line,
    run_member,
    setup_logging,
)
from kinesis import Checkpointer, InitializationInput, KeyedProcessor, LeaseLostError, Record  # noqa: E402


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


class KeyedLedgerProcessor(KeyedProcessor):
    """``--keyed``: an async keyed-parallel processor (32 records of a shard in flight). Each
    record's effect (its ledger line) is written when its call starts, then the call awaits
    an acknowledgement of 0-20 ms, so records complete out of order; a crash loses the
    acknowledgements in flight and those records are delivered again. The hooks write the
    ledger's I, S, L and E lines (after the runner's own exact checkpoint)."""

    max_in_flight = 32
    checkpoint_interval = 0.5

    def __init__(self, ledger: Ledger):
        super().__init__()
        self.ledger = ledger
        self.shard = "?"

    def initialize(self, init: InitializationInput) -> None:
        self.shard = init.shard_id
        self.ledger.write([init_line(init)])

    async def process(self, record: Record) -> None:
        self.ledger.write([record_line(self.shard, record)])
        await asyncio.sleep(random.uniform(0, 0.02))

    def shutdown(self, reason: str) -> None:
        kind = {"handoff": "S", "lost": "L", "shard_end": "E"}[reason]
        self.ledger.write([f"{kind} {self.shard} {time.time_ns()}"])


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
    p.add_argument("--keyed", action="store_true", help="a keyed-parallel async processor (no checkpoint journal)")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    setup_logging(args)
    logging.getLogger(__name__).info("member %s starting, kinesis from %s", args.member_id,
                                     sys.modules["kinesis"].__file__)
    ledger = Ledger(args.out_dir / f"{args.member_id}.ledger")
    checkpoints = Ledger(args.out_dir / f"{args.member_id}.checkpoints")
    if args.keyed:
        return run_member(args, args.kinesis_endpoint, args.dynamodb_endpoint,
                          lambda: KeyedLedgerProcessor(ledger))  # type: ignore[arg-type, return-value]
    return run_member(args, args.kinesis_endpoint, args.dynamodb_endpoint,
                      lambda: JournalingProcessor(ledger, checkpoints))


if __name__ == "__main__":
    sys.exit(main())
