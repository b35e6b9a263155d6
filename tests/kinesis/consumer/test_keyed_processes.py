"""Keyed-parallel Workers as processes (tests/support/keyed_member.py) on the moto server of this
test, over HTTP, during heavy parallel processing (32 records in flight per shard):

* SIGKILL: the records the next owners process again are only records the killed member's last
  progress checkpoint did not cover (after its checkpoint and not in its completed set), at most
  the shard's pending window, and none is lost;
* SIGTERM: the member's shards are handed over with their exact progress: 0 duplicates.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
from collections import Counter, defaultdict
from pathlib import Path

import pytest

from kinesis.consumer.keyed.progress import checkpoint_key, usable
from kinesis.lease_loop.table.leases import LeaseTable
from kinesis.testing import LocalAWS
from tests.support.paths import ROOT
from tests.support.waiting import eventually
from tests.support.worker_journal import put_records

pytestmark = pytest.mark.slow
logging.getLogger("werkzeug").setLevel(logging.ERROR)

STREAM, TABLE, SHARDS, RECORDS = "keyed-procs", "keyed-procs-leases", 2, 4000
MAX_PENDING = 10_000  # KeyedProcessor.max_pending_records (keyed_member.py keeps the default)


def ledger(out: Path, member: str) -> list[tuple[str, str, str]]:
    path = out / f"{member}.ledger"
    if not path.exists():
        return []
    return [tuple(line.split()) for line in path.read_text().splitlines() if line.count(" ") == 2]  # type: ignore[misc]


def test_sigkill_redelivers_only_what_was_not_checkpointed_and_sigterm_none(aws: LocalAWS, tmp_path: Path) -> None:
    kinesis = aws.client("kinesis")
    kinesis.create_stream(StreamName=STREAM, ShardCount=SHARDS)
    written = put_records(kinesis, STREAM, RECORDS, keys=100)
    order: dict[str, list[str]] = defaultdict(list)  # shard -> sequence numbers in shard order
    for shard, seq in written:
        order[shard].append(seq)
    for seqs in order.values():
        seqs.sort(key=int)
    table = LeaseTable.open(aws.client("dynamodb"), TABLE)
    procs: dict[str, subprocess.Popen[bytes]] = {}

    def start(member: str) -> None:
        log = open(tmp_path / f"{member}.log", "ab")  # noqa: SIM115 - the child's
        procs[member] = subprocess.Popen(
            [sys.executable, str(ROOT / "tests" / "support" / "keyed_member.py"), "--endpoint", aws.endpoint_url,
             "--stream", STREAM, "--table", TABLE, "--member-id", member, "--out-dir", str(tmp_path)],
            stdout=log, stderr=log, env=dict(os.environ, PYTHONPATH=str(ROOT)), cwd=ROOT)
        log.close()

    try:
        start("a")
        eventually(lambda: len(ledger(tmp_path, "a")) >= 800, 90, "a to process in parallel")
        procs["a"].send_signal(signal.SIGKILL)
        procs["a"].wait(10)
        # what a last wrote, read before anyone can take over (the lease lasts 3 s)
        rows = {shard: table.get(f"keyed/{STREAM}/{shard}") for shard in order}
        by_a = {(s, q) for s, q, _ in ledger(tmp_path, "a")}
        start("b")
        start("c")
        eventually(lambda: len(ledger(tmp_path, "b")) >= 200 and len(ledger(tmp_path, "c")) >= 200, 90,
                   "b and c to take the shards over")
        procs["b"].send_signal(signal.SIGTERM)  # a graceful hand-off to c, mid-processing
        assert procs["b"].wait(60) == 0
        done = lambda: {(s, q) for m in "abc" for s, q, _ in ledger(tmp_path, m)}  # noqa: E731
        eventually(lambda: done() >= set(written), 120, "every record processed")
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in procs.values():
            try:
                p.wait(60)
            except subprocess.TimeoutExpired:
                p.kill()
    covered: set[tuple[str, str]] = set()
    for shard, row in rows.items():
        assert row is not None and row.owner == "a"
        seqs = order[shard]
        key = checkpoint_key(row.checkpoint)
        start_at = 0 if key is None else seqs.index(key[0]) + 1
        covered |= {(shard, q) for q in seqs[:start_at]}
        completed = usable(row.completed, row.checkpoint, shard)
        if completed is not None:
            covered |= {(shard, q) for i, q in enumerate(seqs[start_at:]) if completed.completed(i)}
    after = [(s, q) for m in "bc" for s, q, _ in ledger(tmp_path, m)]
    again = {r for r in after if r in by_a}
    print(f"SIGKILL after {len(by_a)} records: {len(covered)} covered by a's last checkpoint and sets, "
          f"{len(again)} processed again")
    assert not again & covered, "a record whose completion was checkpointed was processed again"
    assert len(again) <= MAX_PENDING * SHARDS
    assert len(covered) > 0 and any(row is not None and row.completed for row in rows.values()), (
        "the kill should land while records complete out of order")
    counts = Counter(after)
    assert [r for r, n in counts.items() if n > 1] == [], "the SIGTERM hand-off processed a record twice"
    assert set(written) <= by_a | set(after), "lost records"
