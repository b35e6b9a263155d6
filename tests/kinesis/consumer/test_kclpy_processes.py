"""amazon-kclpy processors, as a user meets them: Worker processes (tests/support/kclpy_member.py,
real subprocesses) run a processor written for kclpy's v3 interface against the moto server of
this test process. It checkpoints; a joining member takes shards over gracefully
(shutdown_requested, then lease_lost, and the next owner starts right after the checkpoint);
a closed parent shard ends with shard_ended and its checkpoint lets the children start;
a prepared checkpoint outlives a SIGKILL; a lost lease makes checkpoint() raise the
ShutdownException-valued CheckpointError."""

from __future__ import annotations

import logging
import os
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from examples.demo_fleet import (
    Fleet,
    Producer,
    audit,
    processed_keys,
    read_ledgers,
    takeovers_and_handoffs,
)
from kinesis.lease_loop.table.leases import LeaseTable
from kinesis.lease_loop.table.model import SHARD_END, Checkpoint
from kinesis.testing import LocalAWS
from tests.support.kclpy_member import read_events
from tests.support.paths import ROOT

pytestmark = pytest.mark.slow
logging.getLogger("werkzeug").setLevel(logging.ERROR)

STREAM, APP, TABLE = "kclpy", "kclpy-app", "kclpy-leases"
LEASE = 2.0
TIMEOUT = 60.0
MEMBER = ROOT / "tests" / "support" / "kclpy_member.py"
SHARD0 = "shardId-000000000000"


class KclpyFleet(Fleet):
    """Members running tests/support/kclpy_member.py, each in its own mode."""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.modes: dict[str, list[str]] = {}

    def member_command(self, name: str) -> list[str]:
        command = super().member_command(name)
        return [sys.executable, str(MEMBER), *self.modes.get(name, []), *command[2:]]

    def start(self, name: str, *mode: str) -> None:
        self.modes[name] = list(mode)
        self.start_member(name)

    def signal(self, name: str, sig: signal.Signals) -> None:
        os.kill(self.members[name].process.pid, sig)


@pytest.fixture
def fleet(aws: LocalAWS, tmp_path: Path) -> Iterator[KclpyFleet]:
    LeaseTable.open(aws.client("dynamodb"), TABLE)
    f = KclpyFleet(aws.endpoint_url, tmp_path, stream=STREAM, application=APP, table=TABLE, lease_duration=LEASE)
    yield f
    for m in f.members.values():  # a member stopped with SIGSTOP must run again to die cleanly
        if m.process.poll() is None:
            os.kill(m.process.pid, signal.SIGCONT)
    f.close()


def key(shard: str) -> str:
    return f"{APP}/{STREAM}/{shard}"


def events_of(fleet: Fleet, kind: str, member: str | None = None) -> list[dict[str, Any]]:
    return [e for e in read_events(fleet.out_dir) if e["kind"] == kind and member in (None, e["member"])]


def test_checkpoints_and_a_graceful_handoff_shutdown_requested_then_lease_lost(aws: LocalAWS,
                                                                               fleet: KclpyFleet) -> None:
    kinesis = aws.client("kinesis")
    kinesis.create_stream(StreamName=STREAM, ShardCount=4)
    producer = Producer(kinesis, STREAM, rate=40.0, keys=32).start()
    try:
        fleet.start("k1")
        fleet.wait_until(lambda: fleet.balanced(shards=4), TIMEOUT, "k1 to hold every shard")
        fleet.wait_until(lambda: len(processed_keys(fleet.out_dir)) > 40, TIMEOUT, "k1 to process records")
        fleet.start("k2")
        fleet.wait_until(lambda: fleet.balanced(shards=4), TIMEOUT, "k2 to take half the shards")
        assert fleet.counts() == {"k1": 2, "k2": 2}
        # the lease rows say k2 holds two shards; its processors start a moment later (on a
        # loaded machine, possibly after the last record was produced and processed)
        fleet.wait_until(lambda: len(events_of(fleet, "initialize", "k2")) >= 2, TIMEOUT,
                         "k2 to initialize the two shards handed to it")
        producer.stop()
        produced = producer.snapshot()
        wanted = {(p.shard_id, p.sequence_number) for p in produced}
        fleet.wait_until(lambda: wanted <= processed_keys(fleet.out_dir), TIMEOUT, "every record processed")
        stopped_at = time.time_ns()
        assert fleet.stop_all() == {"k1": 0, "k2": 0}
    finally:
        producer.stop()
    result = audit(produced, fleet.out_dir)
    assert result.ok, result
    assert not result.lost and result.graceful_duplicates == 0 and result.distinct == len(produced) > 0
    takeovers, handoffs = takeovers_and_handoffs(fleet)
    assert takeovers == 0 and handoffs >= 2  # moved by hand-off, never by expiry
    assert events_of(fleet, "checkpoint_error") == []
    first_inits = events_of(fleet, "initialize", "k1")[:4]
    assert {e["sequence_number"] for e in first_inits} == {"TRIM_HORIZON"}  # KCL's name for "never checkpointed"
    moved = [e for e in events_of(fleet, "initialize", "k2") if e["t"] < stopped_at]
    assert len(moved) == 2
    ledger, _ = read_ledgers(fleet.out_dir)
    for init in moved:
        shard = init["shard"]
        k1_calls = [e["kind"] for e in read_events(fleet.out_dir)
                    if e["member"] == "k1" and e.get("shard") == shard and e["t"] < init["t"]]
        assert k1_calls[-2:] == ["shutdown_requested", "lease_lost"], k1_calls
        last = max((e for e in ledger if e.kind == "R" and e.member == "k1" and e.shard_id == shard),
                   key=lambda e: e.t)
        assert init["checkpoint"] == f"{last.sequence_number}/{last.sub}"  # right after k1's last record


def test_a_closed_parent_shard_ends_with_shard_ended_and_its_children_start(
    kinesis_resharding: LocalAWS, fleet: KclpyFleet
) -> None:
    kinesis = kinesis_resharding.client("kinesis")
    kinesis.create_stream(StreamName=STREAM, ShardCount=2)
    producer = Producer(kinesis, STREAM, rate=40.0, keys=32).start()
    children = {"shardId-000000000002", "shardId-000000000003"}
    try:
        fleet.start("k1", "--explicit")  # KclpyProcessor.factory(...) instead of detection
        fleet.start("k2")
        fleet.wait_until(lambda: fleet.balanced(shards=2), TIMEOUT, "two members to balance")
        fleet.wait_until(lambda: len(processed_keys(fleet.out_dir)) > 40, TIMEOUT, "records processed")
        parent = kinesis.list_shards(StreamName=STREAM)["Shards"][0]["HashKeyRange"]
        middle = (int(parent["StartingHashKey"]) + int(parent["EndingHashKey"])) // 2
        kinesis.split_shard(StreamName=STREAM, ShardToSplit=SHARD0, NewStartingHashKey=str(middle))
        fleet.wait_until(lambda: children <= {s for s, _ in processed_keys(fleet.out_dir)}, TIMEOUT,
                         "records of both children processed")
        producer.stop()
        produced = producer.snapshot()
        wanted = {(p.shard_id, p.sequence_number) for p in produced}
        fleet.wait_until(lambda: wanted <= processed_keys(fleet.out_dir), TIMEOUT, "every record processed")
        assert fleet.stop_all() == {"k1": 0, "k2": 0}
    finally:
        producer.stop()
    result = audit(produced, fleet.out_dir)
    assert result.ok, result
    assert not result.lost and result.graceful_duplicates == 0
    [ended] = events_of(fleet, "shard_ended")
    assert ended["shard"] == SHARD0 and events_of(fleet, "checkpoint_error") == []
    row = fleet.table.get(key(SHARD0))
    assert row is not None and row.is_shard_end and row.checkpoint == SHARD_END
    ledger, _ = read_ledgers(fleet.out_dir)
    last_parent = max(e.t for e in ledger if e.kind == "R" and e.shard_id == SHARD0)
    assert last_parent < ended["t"]
    for child in children:
        first_child = min(e.t for e in ledger if e.kind == "R" and e.shard_id == child)
        assert ended["t"] < first_child, f"{child} started before its parent ended"


def test_a_prepared_checkpoint_outlives_a_sigkill_and_the_next_commit_clears_it(
    aws: LocalAWS, fleet: KclpyFleet
) -> None:
    kinesis = aws.client("kinesis")
    kinesis.create_stream(StreamName=STREAM, ShardCount=1)
    producer = Producer(kinesis, STREAM, rate=400.0, keys=8, limit=20).start()
    producer.stop()  # returns once all 20 are written
    produced = producer.snapshot()
    seqs = [p.sequence_number for p in produced]
    assert len(seqs) == 20
    fleet.start("k1", "--mode", "prepare")
    fleet.wait_until(lambda: bool((r := fleet.table.get(key(SHARD0))) and r.pending_checkpoint), TIMEOUT,
                     "k1 to prepare a checkpoint")
    # the member notes the prepare once prepare_checkpoint returned: after the row shows it
    fleet.wait_until(lambda: bool(events_of(fleet, "prepared", "k1")), TIMEOUT, "k1 to note its prepare")
    [prepared] = events_of(fleet, "prepared", "k1")
    assert prepared["checkpoint"] == f"{seqs[9]}/0" and prepared["pending"] == f"{seqs[19]}/0"
    row = fleet.table.get(key(SHARD0))
    assert row is not None and row.checkpoint == Checkpoint(seqs[9]) and row.pending_checkpoint == Checkpoint(seqs[19])
    fleet.kill("k1")  # SIGKILL: the prepared work is never committed
    fleet.start("k2")
    fleet.wait_until(lambda: bool(events_of(fleet, "initialize", "k2")), TIMEOUT, "k2 to take the shard over")
    [init] = events_of(fleet, "initialize", "k2")
    assert init["checkpoint"] == f"{seqs[9]}/0" and init["pending"] == f"{seqs[19]}/0"
    fleet.wait_until(lambda: (r := fleet.table.get(key(SHARD0))) is not None and r.pending_checkpoint is None,
                     TIMEOUT, "k2's checkpoint to clear the pending checkpoint")
    row = fleet.table.get(key(SHARD0))
    assert row is not None and row.owner == "k2" and row.checkpoint == Checkpoint(seqs[19])
    assert fleet.stop_all() == {"k2": 0}
    ledger, _ = read_ledgers(fleet.out_dir)
    assert [e.sequence_number for e in ledger if e.kind == "R" and e.member == "k2"] == seqs[10:]
    result = audit(produced, fleet.out_dir, killed=["k1"])
    assert result.ok, result
    assert not result.lost and result.crash_duplicates == 10 and result.graceful_duplicates == 0


def test_a_lost_lease_makes_checkpoint_raise_shutdown_exception(aws: LocalAWS, fleet: KclpyFleet) -> None:
    kinesis = aws.client("kinesis")
    kinesis.create_stream(StreamName=STREAM, ShardCount=1)
    producer = Producer(kinesis, STREAM, rate=400.0, keys=8, limit=10).start()
    producer.stop()
    seqs = [p.sequence_number for p in producer.snapshot()]
    fleet.start("k1", "--mode", "hold")  # blocks in process_records before checkpointing
    fleet.wait_until(lambda: bool(events_of(fleet, "holding", "k1")), TIMEOUT, "k1 to hold its first batch")
    fleet.signal("k1", signal.SIGSTOP)  # k1 stops renewing: its lease expires
    fleet.start("k2")
    fleet.wait_until(lambda: fleet.owners().get(key(SHARD0)) == "k2", TIMEOUT, "k2 to take the lease over")
    fleet.wait_until(lambda: (r := fleet.table.get(key(SHARD0))) is not None and r.checkpoint == Checkpoint(seqs[-1]),
                     TIMEOUT, "k2 to process and checkpoint the shard")
    (fleet.out_dir / "release").touch()
    fleet.signal("k1", signal.SIGCONT)  # k1 finishes its batch and checkpoints: too late
    fleet.wait_until(lambda: bool(events_of(fleet, "lease_lost", "k1")), TIMEOUT, "k1 to hear lease_lost")
    errors = events_of(fleet, "checkpoint_error", "k1")
    assert [e["value"] for e in errors] == ["ShutdownException"]
    assert errors[0]["t"] < events_of(fleet, "lease_lost", "k1")[0]["t"]
    row = fleet.table.get(key(SHARD0))
    assert row is not None and row.checkpoint == Checkpoint(seqs[-1])  # k1 could not move it
    fleet.stop_all()
