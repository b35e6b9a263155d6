"""Group mode's checkpoint fencing, without Spark: GroupSession over moto (HTTP)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from kinesis.consumer.discovery.shards import ShardDiscovery
from kinesis.consumer.retrieval.positions import TRIM_HORIZON, Position
from kinesis.errors import LeaseLostError
from kinesis.lease_loop.table.leases import LeaseTable
from kinesis.lease_loop.table.model import Checkpoint
from kinesis.testing import LocalAWS
from spark_integration.group import GroupSession
from spark_integration.offsets import ShardOffset, SourceOffset
from spark_integration.options import parse_options
from tests.spark_support import create_stream, put_json, wait_for

KEY0, KEY1 = "orders/shardId-000000000000", "orders/shardId-000000000001"


@pytest.fixture
def session(aws: LocalAWS) -> Iterator[GroupSession]:
    kinesis = aws.client("kinesis")
    create_stream(kinesis, "orders", 2)
    put_json(kinesis, "orders", [{"id": i} for i in range(20)])
    options = parse_options({
        "streamName": "orders", "endpointUrl": aws.endpoint_url, "region": "us-east-1",
        "initialPosition": "TRIM_HORIZON", "leaseTable": "spark-leases",
        "applicationName": "app", "membership": "static", "members": "m1", "memberId": "m1",
        "leaseDuration": "3s",  # renewals every second: tolerant of a loaded machine
    }, streaming=True)
    discovery = {"orders": ShardDiscovery(kinesis, "orders", cache_ttl=0)}
    group = GroupSession(options, kinesis, discovery)
    yield group
    group.close()


def _steal(table: LeaseTable, key: str, thief: str) -> None:
    """Another application takes the lease (conditional write on the counter it read)."""
    def taken() -> bool:
        lease = table.get("app/" + key)
        return lease is not None and table.take(lease, thief) is not None
    wait_for(taken, 20, f"{thief} to take {key}", interval=0.01)


def test_plan_resumes_from_the_lease_checkpoint(session: GroupSession) -> None:
    wait_for(lambda: session.held_keys() == [KEY0, KEY1], 30, "m1 to hold both shards")
    view = session.plan(SourceOffset({}), {})
    assert view.held == {KEY0, KEY1}
    assert view.resume == {KEY0: TRIM_HORIZON, KEY1: TRIM_HORIZON}
    end = SourceOffset({KEY0: ShardOffset(Position("3")), KEY1: ShardOffset(Position("4"))})
    session.planned(end)
    session.checkpoint(end)
    assert session.table.get("app/" + KEY0).checkpoint == Checkpoint("3")  # type: ignore[union-attr]
    assert session.table.get("app/" + KEY1).checkpoint == Checkpoint("4")  # type: ignore[union-attr]
    assert session.plan(SourceOffset({}), {}).resume == {}  # resume only once per acquisition


def test_a_lease_lost_mid_batch_gets_no_checkpoint(session: GroupSession) -> None:
    wait_for(lambda: session.held_keys() == [KEY0, KEY1], 30, "m1 to hold both shards")
    end = SourceOffset({KEY0: ShardOffset(Position("3")), KEY1: ShardOffset(Position("4"))})
    session.planned(end)  # the batch is planned under the current leases...
    _steal(session.table, KEY0, "m2")  # ...and one of them is lost while it runs
    session.checkpoint(end)
    stolen = session.table.get("app/" + KEY0)
    assert stolen is not None and stolen.owner == "m2"
    assert stolen.checkpoint == Checkpoint("TRIM_HORIZON")  # nothing written by the old holder
    assert session.table.get("app/" + KEY1).checkpoint == Checkpoint("4")  # type: ignore[union-attr]
    assert session.stats.fenced_out >= 1


def test_a_lease_lost_and_taken_back_mid_batch_gets_no_checkpoint(session: GroupSession) -> None:
    wait_for(lambda: session.held_keys() == [KEY0, KEY1], 30, "m1 to hold both shards")
    end = SourceOffset({KEY0: ShardOffset(Position("3"))})
    session.planned(end)
    generation = session.stats.planned_generations[KEY0]
    _steal(session.table, KEY0, "m2")
    # a take outside the protocol (m1's session is alive) is noticed at m1's next write of the
    # lease (a session lease's row is not renewed): here, the checkpoint of its other shard's
    # batch does not touch it, so the holder confirms the lease as the test does by hand
    with pytest.raises(LeaseLostError):
        session.coordinator.checkpoint("app/" + KEY0, Checkpoint("1"))
    # m2 is not a member and never renews: m1 takes the lease back after it expires
    wait_for(lambda: session.stats.acquired >= 3 and KEY0 in session.held_keys(), 30,
             "m1 to take the lease back")
    session.checkpoint(end)  # the batch planned under the old lease commits now
    lease = session.table.get("app/" + KEY0)
    assert lease is not None and lease.owner == "m1"
    assert lease.checkpoint == Checkpoint("TRIM_HORIZON")
    # the next batch starts from the lease's checkpoint again, under the new generation
    view = session.plan(SourceOffset({}), {})
    assert view.resume[KEY0] == TRIM_HORIZON
    again = SourceOffset({KEY0: ShardOffset(Position("3"))})
    session.planned(again)
    assert session.stats.planned_generations[KEY0] > generation
    session.checkpoint(again)
    assert session.table.get("app/" + KEY0).checkpoint == Checkpoint("3")  # type: ignore[union-attr]
