"""Workers as separate processes (examples/demo_member.py) against the moto server of this test
process over HTTP, with DynamoDBMembership: balance, scale-out and SIGTERM scale-in by graceful
hand-off with no duplicates, and SIGKILL failover from the checkpoint. Every member appends
what it processed to its ledger; examples/demo_fleet.audit checks the ledgers."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

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
from kinesis.testing import LocalAWS

pytestmark = pytest.mark.slow
logging.getLogger("werkzeug").setLevel(logging.ERROR)

STREAM, APP, TABLE = "fleet", "fleet-app", "fleet-leases"
LEASE = 2.0
TIMEOUT = 60.0


@pytest.fixture
def fleet(aws: LocalAWS, tmp_path: Path) -> Iterator[Fleet]:
    LeaseTable.open(aws.client("dynamodb"), TABLE)
    f = Fleet(aws.endpoint_url, tmp_path, stream=STREAM, application=APP, table=TABLE, lease_duration=LEASE)
    yield f
    f.close()


def start_stream(aws: LocalAWS, shards: int) -> Producer:
    kinesis = aws.client("kinesis")
    kinesis.create_stream(StreamName=STREAM, ShardCount=shards)
    return Producer(kinesis, STREAM, rate=40.0, keys=32).start()


def drain(fleet: Fleet, producer: Producer) -> list:  # type: ignore[type-arg]
    producer.stop()
    produced = producer.snapshot()
    wanted = {(p.shard_id, p.sequence_number) for p in produced}
    fleet.wait_until(lambda: wanted <= processed_keys(fleet.out_dir), TIMEOUT, "every record processed")
    return produced


def test_scale_out_and_sigterm_scale_in_rebalance_by_handoff_without_duplicates(
    aws: LocalAWS, fleet: Fleet
) -> None:
    producer = start_stream(aws, 8)
    try:
        for name in ("m1", "m2", "m3"):
            fleet.start_member(name)
        fleet.wait_until(lambda: fleet.balanced(shards=8), TIMEOUT, "3 members to balance")
        assert sorted(fleet.counts().values()) == [2, 3, 3]
        fleet.start_member("m4")
        fleet.wait_until(lambda: fleet.balanced(shards=8), TIMEOUT, "4 members to balance")
        assert fleet.counts() == {"m1": 2, "m2": 2, "m3": 2, "m4": 2}
        assert fleet.terminate("m2", timeout=TIMEOUT) == 0  # handed everything off, then exited
        assert fleet.owners() and "m2" not in fleet.owners().values()
        fleet.wait_until(lambda: fleet.balanced(shards=8), TIMEOUT, "3 members to rebalance")
        produced = drain(fleet, producer)
        assert fleet.stop_all() == {"m1": 0, "m3": 0, "m4": 0}
    finally:
        producer.stop()
    result = audit(produced, fleet.out_dir)
    assert result.ok, result
    assert not result.lost and result.distinct == len(produced) > 0
    assert result.graceful_duplicates == 0 and result.crash_duplicates == 0
    takeovers, handoffs = takeovers_and_handoffs(fleet)
    assert takeovers == 0  # nobody ever waited for a lease to expire
    assert handoffs >= 2 + 2  # m4's quota, then m2's leases
    assert fleet.status("m2")["exit_clean"] is True  # type: ignore[index]


def test_sigkill_the_next_owner_resumes_from_the_checkpoint(aws: LocalAWS, fleet: Fleet) -> None:
    producer = start_stream(aws, 6)
    try:
        for name in ("m1", "m2", "m3"):
            fleet.start_member(name)
        fleet.wait_until(lambda: fleet.balanced(shards=6), TIMEOUT, "3 members to balance")
        fleet.wait_until(lambda: len(processed_keys(fleet.out_dir)) > 100, TIMEOUT, "some progress")
        victim_keys = sorted(k for k, o in fleet.owners().items() if o == "m1")
        assert len(victim_keys) == 2
        fleet.kill("m1")
        at_kill = {k: fleet.table.get(k) for k in victim_keys}  # frozen: m1 is dead
        fleet.wait_until(
            lambda: all(fleet.owners()[k] in ("m2", "m3") for k in victim_keys), TIMEOUT, "the takeover"
        )
        produced = drain(fleet, producer)
        fleet.wait_until(lambda: fleet.balanced(shards=6), TIMEOUT, "2 members to balance")
        assert fleet.stop_all() == {"m2": 0, "m3": 0}
    finally:
        producer.stop()
    events, _ = read_ledgers(fleet.out_dir)
    last_m1 = max(e.t for e in events if e.member == "m1")
    for key, lease in at_kill.items():
        assert lease is not None and lease.owner == "m1"
        shard = key.rsplit("/", 1)[1]
        resumed = min((e for e in events if e.kind == "I" and e.shard_id == shard and e.t > last_m1),
                      key=lambda e: e.t)
        cp = lease.checkpoint
        expected = "-" if cp.is_initial else f"{cp.sequence_number}/{cp.sub_sequence_number}"
        assert resumed.member in ("m2", "m3")
        if resumed.checkpoint != expected:
            # a checkpoint m1 sent just before the SIGKILL may reach the table after the read
            # above: the next owner then resumes from that one, never from an earlier one
            seq = resumed.checkpoint.split("/")[0]
            assert expected == "-" or int(seq) > int(expected.split("/")[0]), (resumed, expected)
            assert any(e.kind == "R" and e.member == "m1" and e.shard_id == shard and e.sequence_number == seq
                       for e in events), (resumed, "not a record m1 processed")
    result = audit(produced, fleet.out_dir, killed=["m1"])
    assert result.ok, result
    assert not result.lost and result.graceful_duplicates == 0
    takeovers, _ = takeovers_and_handoffs(fleet)
    assert takeovers >= len(victim_keys)
