"""LeaseTable: every conditional write, races between two members, corrupt rows, retries.

boto3 talks HTTP to the moto server (the ``aws`` fixture). Races use two LeaseTable
objects with separate clients, as two processes would.
"""

from __future__ import annotations

import json
import urllib.request
from collections import Counter, deque
from datetime import UTC, datetime
from typing import Any

import botocore.exceptions
import pytest
from botocore.awsrequest import AWSResponse
from botocore.config import Config
from botocore.stub import Stubber

from kinesis.consumer.retrieval.records import Record
from kinesis.errors import (
    CheckpointError,
    CheckpointRegressionError,
    ConfigurationError,
    CorruptLeaseError,
    InvalidCheckpointError,
    InvalidLeaseKeyError,
    LeaseLostError,
    LeaseTableNotFoundError,
    LeaseTableNotReadyError,
    LeaseTableSchemaError,
    LeaseTableUnavailableError,
)
from kinesis.lease_loop.table.leases import LeaseTable
from kinesis.lease_loop.table.model import (
    LATEST,
    SHARD_END,
    TRIM_HORIZON,
    Checkpoint,
    LeaseState,
)
from kinesis.lease_loop.timing import FakeClock
from kinesis.testing import LocalAWS
from tests.coordinator_fleet import shared_client

TABLE = "leases-test"
NO_RETRY = Config(retries={"total_max_attempts": 1})


def open_table(aws: LocalAWS, name: str = TABLE, **kwargs: Any) -> LeaseTable:
    """A table on a fresh client without botocore retries (fault tests hook into it)."""
    return LeaseTable.open(aws.client("dynamodb", config=NO_RETRY), name, **kwargs)


@pytest.fixture
def tables(aws: LocalAWS) -> tuple[LeaseTable, LeaseTable]:
    """Two members' views of one table (separate clients, as in two processes)."""
    return (
        LeaseTable.open(shared_client(aws, "member-1", config=NO_RETRY), TABLE),
        LeaseTable.open(shared_client(aws, "member-2", config=NO_RETRY), TABLE),
    )


def raw_item(table: LeaseTable, key: str) -> dict[str, Any] | None:
    item = table.client.get_item(TableName=TABLE, Key={"leaseKey": {"S": key}}, ConsistentRead=True)
    return item.get("Item")


class _Raw:
    def __init__(self, body: bytes):
        self._body = body

    def stream(self, **_: Any) -> Any:
        yield self._body


class DynamoFaults:
    """Answer chosen DynamoDB calls with errors at the HTTP layer (botocore ``before-send``).

    ``fail(op, code)`` answers the next call with an error response; ``apply_then_drop(op)``
    forwards the request to the server (the write happens) and then reports a dropped
    connection, as when a response is lost on the way back.
    """

    def __init__(self, table: LeaseTable):
        self.queue: dict[str, deque[Any]] = {}
        self.requests: Counter[str] = Counter()
        table.client.meta.events.register("before-send.dynamodb", self._before_send)

    def fail(self, op: str, code: str, status: int = 400, times: int = 1) -> None:
        self.queue.setdefault(op, deque()).extend([(code, status)] * times)

    def apply_then_drop(self, op: str) -> None:
        self.queue.setdefault(op, deque()).append("drop")

    def _before_send(self, request: Any, **_: Any) -> AWSResponse | None:
        target = request.headers.get("X-Amz-Target", b"")
        op = (target.decode() if isinstance(target, bytes) else target).rsplit(".", 1)[-1]
        self.requests[op] += 1
        queue = self.queue.get(op)
        if not queue:
            return None
        fault = queue.popleft()
        if fault == "drop":
            headers = {k: (v.decode() if isinstance(v, bytes) else v) for k, v in request.headers.items()}
            forwarded = urllib.request.Request(request.url, data=request.body, headers=headers, method="POST")
            with urllib.request.urlopen(forwarded, timeout=10) as response:
                response.read()
            raise botocore.exceptions.ConnectionClosedError(endpoint_url=request.url)
        code, status = fault
        body = json.dumps({"__type": f"com.amazonaws.dynamodb.v20120810#{code}", "message": "injected"})
        headers = {"Content-Type": "application/x-amz-json-1.0", "x-amzn-RequestId": "injected"}
        return AWSResponse(request.url, status, headers, _Raw(body.encode()))


# --- table lifecycle ------------------------------------------------------------------


def test_ensure_table_creates_pay_per_request_table_and_is_idempotent(aws: LocalAWS) -> None:
    table = open_table(aws)
    description = shared_client(aws).describe_table(TableName=TABLE)["Table"]
    assert description["KeySchema"] == [{"AttributeName": "leaseKey", "KeyType": "HASH"}]
    assert description["BillingModeSummary"]["BillingMode"] == "PAY_PER_REQUEST"
    assert description["TableStatus"] == "ACTIVE"
    table.create_lease_if_absent("k")
    open_table(aws)  # validating an existing table keeps its rows
    assert table.get("k") is not None


def test_missing_table_with_creation_disabled_is_a_clear_error(aws: LocalAWS) -> None:
    with pytest.raises(LeaseTableNotFoundError, match="create_if_missing"):
        open_table(aws, create_if_missing=False)


def test_operations_on_a_missing_table_say_so(aws: LocalAWS) -> None:
    table = LeaseTable(shared_client(aws, "member-1", config=NO_RETRY), "never-created")
    with pytest.raises(LeaseTableNotFoundError, match="ensure_table"):
        table.scan()


@pytest.mark.parametrize(
    "key_schema, attributes",
    [
        ([{"AttributeName": "id", "KeyType": "HASH"}], [{"AttributeName": "id", "AttributeType": "S"}]),
        ([{"AttributeName": "leaseKey", "KeyType": "HASH"}], [{"AttributeName": "leaseKey", "AttributeType": "N"}]),
        (
            [{"AttributeName": "leaseKey", "KeyType": "HASH"}, {"AttributeName": "r", "KeyType": "RANGE"}],
            [{"AttributeName": "leaseKey", "AttributeType": "S"}, {"AttributeName": "r", "AttributeType": "S"}],
        ),
    ],
    ids=["other-hash-key", "numeric-key", "range-key"],
)
def test_wrong_schema_is_refused(aws: LocalAWS, key_schema: Any, attributes: Any) -> None:
    shared_client(aws).create_table(
        TableName=TABLE, KeySchema=key_schema, AttributeDefinitions=attributes, BillingMode="PAY_PER_REQUEST"
    )
    with pytest.raises(LeaseTableSchemaError, match="leaseKey"):
        open_table(aws)


def test_waits_for_active_with_a_deadline(aws: LocalAWS) -> None:
    client = aws.client("dynamodb")
    creating = {
        "Table": {
            "TableName": TABLE,
            "TableStatus": "CREATING",
            "KeySchema": [{"AttributeName": "leaseKey", "KeyType": "HASH"}],
            "AttributeDefinitions": [{"AttributeName": "leaseKey", "AttributeType": "S"}],
        }
    }
    active = {"Table": {**creating["Table"], "TableStatus": "ACTIVE"}}
    with Stubber(client) as stub:
        for _ in range(3):
            stub.add_response("describe_table", creating)
        stub.add_response("describe_table", active)
        LeaseTable(client, TABLE).ensure_table()  # becomes ACTIVE on the 4th look
        stub.assert_no_pending_responses()
    with Stubber(client) as stub:
        for _ in range(50):
            stub.add_response("describe_table", creating)
        with pytest.raises(LeaseTableNotReadyError, match="ACTIVE within"):
            LeaseTable(client, TABLE, ready_timeout=0.3).ensure_table()


@pytest.mark.parametrize(
    "kwargs",
    [{"table_name": "x"}, {"retry_attempts": 0}, {"retry_max_wait": 0}, {"ready_timeout": -1}],
)
def test_bad_table_configuration(aws: LocalAWS, kwargs: dict[str, Any]) -> None:
    args = {"table_name": TABLE, **kwargs}
    with pytest.raises(ConfigurationError):
        LeaseTable(shared_client(aws), **args)


# --- create / read ----------------------------------------------------------------------


def test_create_if_absent_never_overwrites(tables: tuple[LeaseTable, LeaseTable]) -> None:
    a, b = tables
    created = a.create_lease_if_absent("s-1", parents=("s-0",), checkpoint=LATEST)
    assert created is not None and created.owner is None and created.counter == 0
    assert b.create_lease_if_absent("s-1", checkpoint=TRIM_HORIZON, owner="b") is None
    stored = a.get("s-1")
    assert stored is not None
    assert (stored.parents, stored.checkpoint, stored.owner) == (("s-0",), LATEST, None)


def test_create_with_owner_takes_in_the_same_write(tables: tuple[LeaseTable, LeaseTable]) -> None:
    a, _ = tables
    lease = a.create_lease_if_absent("s-1", owner="a")
    assert lease is not None and (lease.owner, lease.counter) == ("a", 1)
    assert a.renew(lease).counter == 2


def test_at_timestamp_checkpoint_round_trips(tables: tuple[LeaseTable, LeaseTable]) -> None:
    a, _ = tables
    ts = datetime(2024, 5, 1, 12, tzinfo=UTC)
    a.create_lease_if_absent("s-1", checkpoint=Checkpoint.at_timestamp(ts))
    lease = a.get("s-1")
    assert lease is not None and lease.checkpoint.timestamp == ts and lease.checkpoint.is_initial


@pytest.mark.parametrize("key", ["", "__member__#x", "__anything"])
def test_reserved_or_empty_keys_are_refused(tables: tuple[LeaseTable, LeaseTable], key: str) -> None:
    with pytest.raises(InvalidLeaseKeyError):
        tables[0].create_lease_if_absent(key)


def test_scan_is_paginated_and_excludes_member_rows(tables: tuple[LeaseTable, LeaseTable]) -> None:
    a, _ = tables
    for i in range(25):
        a.create_lease_if_absent(f"s-{i:02d}")
    a.heartbeat("member-1", "inc", None)
    snapshot = a.scan(page_size=4)
    assert sorted(snapshot.leases) == [f"s-{i:02d}" for i in range(25)]
    assert list(snapshot.members) == ["member-1"]
    assert [lease.key for lease in a.list_leases()] == sorted(snapshot.leases)


# --- take / renew races -----------------------------------------------------------------


def test_two_members_race_to_take_a_free_lease_exactly_one_wins(tables: tuple[LeaseTable, LeaseTable]) -> None:
    a, b = tables
    a.create_lease_if_absent("s-1")
    seen_a, seen_b = a.get("s-1"), b.get("s-1")
    assert seen_a is not None and seen_b is not None
    won_a = a.take(seen_a, "a")
    won_b = b.take(seen_b, "b")
    assert won_a is not None and won_a.owner == "a" and won_a.counter == 1
    assert won_b is None
    stored = b.get("s-1")
    assert stored is not None and stored.owner == "a"


def test_take_of_an_expired_lease_with_a_stale_view_loses(tables: tuple[LeaseTable, LeaseTable]) -> None:
    a, b = tables
    lease = a.create_lease_if_absent("s-1", owner="a")
    assert lease is not None
    stale = b.get("s-1")
    assert stale is not None
    a.renew(lease)  # the holder is alive after all: the counter moved
    assert b.take(stale, "b") is None
    fresh = b.get("s-1")
    assert fresh is not None
    taken = b.take(fresh, "b")
    assert taken is not None and taken.owner == "b" and taken.owner_switches_since_checkpoint == 1


def test_renew_with_a_stale_counter_or_by_a_non_owner_is_lease_lost(tables: tuple[LeaseTable, LeaseTable]) -> None:
    a, b = tables
    lease = a.create_lease_if_absent("s-1", owner="a")
    assert lease is not None
    renewed = a.renew(lease)
    with pytest.raises(LeaseLostError, match="expected counter 1"):
        a.renew(lease)
    taken = b.take(renewed, "b")
    assert taken is not None
    with pytest.raises(LeaseLostError, match="now owner 'b'"):
        a.renew(renewed)
    with pytest.raises(LeaseLostError, match="no owner"):
        a.renew(renewed.evolve(owner=None))


def test_pending_handoff_marker_is_set_and_cleared_by_renew(tables: tuple[LeaseTable, LeaseTable]) -> None:
    a, _ = tables
    lease = a.create_lease_if_absent("s-1", owner="a")
    assert lease is not None
    marked = a.renew(lease, pending_handoff="b")
    assert marked.pending_handoff == "b"
    kept = a.renew(marked)
    assert kept.pending_handoff == "b"
    assert a.renew(kept, pending_handoff=None).pending_handoff is None


# --- checkpoints ----------------------------------------------------------------------------


def test_checkpoint_is_fenced_by_owner_and_counter(tables: tuple[LeaseTable, LeaseTable]) -> None:
    a, b = tables
    lease = a.create_lease_if_absent("s-1", owner="a")
    assert lease is not None
    done = a.checkpoint(lease, "100")
    assert done.checkpoint == Checkpoint("100") and done.counter == lease.counter + 1
    fresh = b.get("s-1")
    assert fresh is not None
    assert b.take(fresh, "b") is not None  # the lease moved (e.g. taken after expiry)
    with pytest.raises(LeaseLostError):
        a.checkpoint(done, "200")
    stored = b.get("s-1")
    assert stored is not None and stored.checkpoint == Checkpoint("100")


def test_checkpoint_compares_sequence_numbers_as_integers(tables: tuple[LeaseTable, LeaseTable]) -> None:
    a, _ = tables
    lease = a.create_lease_if_absent("s-1", owner="a")
    assert lease is not None
    big = "49590338271490256608559692538361571095921575989136588898"
    lease = a.checkpoint(lease, "99")
    lease = a.checkpoint(lease, "100")  # "100" < "99" as strings, but not as integers
    lease = a.checkpoint(lease, big)
    lease = a.checkpoint(lease, Checkpoint(big, 3))
    lease = a.checkpoint(lease, Checkpoint(big, 3))  # the same checkpoint again is fine
    with pytest.raises(CheckpointRegressionError):
        a.checkpoint(lease, Checkpoint(big, 2))
    with pytest.raises(CheckpointRegressionError):
        a.checkpoint(lease, "100")
    with pytest.raises(CheckpointRegressionError):
        a.checkpoint(lease, TRIM_HORIZON)


def test_backwards_checkpoint_is_refused_by_the_write_condition(tables: tuple[LeaseTable, LeaseTable]) -> None:
    """A holder with an outdated local copy (same owner and counter) cannot move it back."""
    a, _ = tables
    lease = a.create_lease_if_absent("s-1", owner="a")
    assert lease is not None
    lease = a.checkpoint(lease, "500")
    stale_copy = lease.evolve(checkpoint=Checkpoint("10"))  # the local check passes
    with pytest.raises(CheckpointRegressionError, match="stored checkpoint 500"):
        a.checkpoint(stale_copy, "20")
    stored = a.get("s-1")
    assert stored is not None and stored.checkpoint == Checkpoint("500")
    assert issubclass(CheckpointRegressionError, CheckpointError)


def test_shard_end_is_final_and_sets_the_state(tables: tuple[LeaseTable, LeaseTable]) -> None:
    a, _ = tables
    lease = a.create_lease_if_absent("s-1", owner="a")
    assert lease is not None
    lease = a.checkpoint(lease, "7")
    ended = a.mark_shard_end(lease)
    assert ended.state is LeaseState.SHARD_END and ended.is_shard_end and ended.checkpoint == SHARD_END
    with pytest.raises(CheckpointRegressionError):
        a.checkpoint(ended, "8")
    stored = a.get("s-1")
    assert stored is not None and stored.is_shard_end


def test_checkpoint_resets_owner_switches(tables: tuple[LeaseTable, LeaseTable]) -> None:
    a, b = tables
    lease = a.create_lease_if_absent("s-1", owner="a")
    assert lease is not None
    moved = b.take(lease, "b")
    assert moved is not None and moved.owner_switches_since_checkpoint == 1
    assert b.checkpoint(moved, "5").owner_switches_since_checkpoint == 0


def test_prepare_checkpoint_is_stored_fenced_and_cleared_by_the_next_checkpoint(
    tables: tuple[LeaseTable, LeaseTable],
) -> None:
    a, b = tables
    lease = a.create_lease_if_absent("s-1", owner="a")
    assert lease is not None
    lease = a.checkpoint(lease, "100")
    prepared = a.prepare_checkpoint(lease, Checkpoint("150", 2))
    assert prepared.pending_checkpoint == Checkpoint("150", 2) and prepared.counter == lease.counter + 1
    assert prepared.checkpoint == Checkpoint("100")  # the checkpoint itself does not move
    item = raw_item(a, "s-1")
    assert item is not None and item["pendingCheckpoint"] == {"S": "150"}
    assert item["pendingCheckpointSubSequenceNumber"] == {"N": "2"}
    stored = b.get("s-1")
    assert stored is not None and stored.pending_checkpoint == Checkpoint("150", 2)
    committed = a.checkpoint(prepared, Checkpoint("150", 2))
    assert committed.checkpoint == Checkpoint("150", 2) and committed.pending_checkpoint is None
    item = raw_item(a, "s-1")
    assert item is not None and "pendingCheckpoint" not in item and "pendingCheckpointSubSequenceNumber" not in item


def test_prepare_checkpoint_never_goes_behind_the_checkpoint_and_needs_the_lease(
    tables: tuple[LeaseTable, LeaseTable],
) -> None:
    a, b = tables
    lease = a.create_lease_if_absent("s-1", owner="a")
    assert lease is not None
    lease = a.checkpoint(lease, "500")
    with pytest.raises(CheckpointRegressionError, match=r"pending checkpoint 20 .* behind the stored"):
        a.prepare_checkpoint(lease, "20")  # refused locally
    stale_copy = lease.evolve(checkpoint=Checkpoint("10"))
    with pytest.raises(CheckpointRegressionError, match=r"pending checkpoint 20 .* stored checkpoint 500"):
        a.prepare_checkpoint(stale_copy, "20")  # refused by the write condition
    for sentinel in (SHARD_END, TRIM_HORIZON):
        with pytest.raises(InvalidCheckpointError, match="pending checkpoint is a sequence number"):
            a.prepare_checkpoint(lease, sentinel)
    same = a.prepare_checkpoint(lease, "500")  # at the checkpoint itself: allowed
    assert same.pending_checkpoint == Checkpoint("500")
    fresh = b.get("s-1")
    assert fresh is not None and b.take(fresh, "b") is not None
    with pytest.raises(LeaseLostError, match="cannot prepare a checkpoint on lease 's-1'"):
        a.prepare_checkpoint(same, "600")
    stored = b.get("s-1")
    assert stored is not None and stored.pending_checkpoint == Checkpoint("500")  # kept by the take


def test_rows_without_a_pending_checkpoint_and_corrupt_pending_checkpoints(
    tables: tuple[LeaseTable, LeaseTable],
) -> None:
    a, _ = tables
    lease = a.create_lease_if_absent("s-1", owner="a")
    assert lease is not None and lease.pending_checkpoint is None  # old rows parse as before
    assert "pendingCheckpoint" not in (raw_item(a, "s-1") or {})
    for bad in ("SHARD_END", "12a"):
        a.client.update_item(
            TableName=TABLE, Key={"leaseKey": {"S": "s-1"}},
            UpdateExpression="SET pendingCheckpoint = :p", ExpressionAttributeValues={":p": {"S": bad}},
        )
        with pytest.raises(CorruptLeaseError, match="pendingCheckpoint"):
            a.get("s-1")


@pytest.mark.parametrize("bad", ["12a", "-1", "", "SHARD-END", "1" * 131])
def test_invalid_checkpoints_are_named(bad: str) -> None:
    with pytest.raises(InvalidCheckpointError):
        Checkpoint(bad)


def test_checkpoint_ordering_and_coercion() -> None:
    assert TRIM_HORIZON < Checkpoint("0") < Checkpoint("0", 1) < Checkpoint("9") < Checkpoint("10") < SHARD_END
    assert not TRIM_HORIZON < LATEST and not LATEST < TRIM_HORIZON  # initial positions tie
    assert Checkpoint("007") == Checkpoint("7")
    with pytest.raises(InvalidCheckpointError):
        Checkpoint("AT_TIMESTAMP")
    with pytest.raises(InvalidCheckpointError):
        Checkpoint.at_timestamp(datetime(2024, 1, 1))  # naive
    record = Record("s", "shard-0", "42", 2, "pk", b"", None, None, True)
    assert Checkpoint.of(record) == Checkpoint("42", 2)
    assert Checkpoint.of("SHARD_END") is not SHARD_END and Checkpoint.of("SHARD_END") == SHARD_END
    assert Checkpoint.of(LATEST) is LATEST


# --- hand-off, adopt, release, delete -------------------------------------------------------


def test_handoff_preserves_the_checkpoint_and_the_target_adopts_from_the_observed_counter(
    tables: tuple[LeaseTable, LeaseTable],
) -> None:
    a, b = tables
    lease = a.create_lease_if_absent("s-1", owner="a")
    assert lease is not None
    lease = a.checkpoint(lease, Checkpoint("123", 4))
    handed = a.handoff(lease, "b")
    assert (handed.owner, handed.handed_off_by, handed.checkpoint) == ("b", "a", Checkpoint("123", 4))
    with pytest.raises(LeaseLostError):
        a.renew(lease)  # the old owner is fenced off at once
    observed = b.get("s-1")
    assert observed is not None and observed.counter == handed.counter
    adopted = b.adopt(observed)  # b never wrote that counter: it renews from what it saw
    assert (adopted.owner, adopted.handed_off_by, adopted.counter) == ("b", None, observed.counter + 1)
    assert adopted.checkpoint == Checkpoint("123", 4)
    assert b.checkpoint(adopted, "124").checkpoint == Checkpoint("124")


def test_adopt_requires_a_handoff_and_a_fresh_counter(tables: tuple[LeaseTable, LeaseTable]) -> None:
    a, b = tables
    lease = a.create_lease_if_absent("s-1", owner="a")
    assert lease is not None
    with pytest.raises(LeaseLostError, match="not handed off"):
        a.adopt(lease)
    handed = a.handoff(lease, "b")
    adopted = b.adopt(handed)
    with pytest.raises(LeaseLostError):
        b.adopt(handed)  # adopting twice from the same view loses (counter moved)
    with pytest.raises(ConfigurationError, match="own owner"):
        b.handoff(adopted, "b")


def test_release_keeps_the_checkpoint_and_frees_the_lease(tables: tuple[LeaseTable, LeaseTable]) -> None:
    a, b = tables
    lease = a.create_lease_if_absent("s-1", owner="a")
    assert lease is not None
    lease = a.checkpoint(lease, "9")
    released = a.release(lease)
    assert released.owner is None and released.checkpoint == Checkpoint("9")
    with pytest.raises(LeaseLostError):
        a.evict(lease)  # KCL's name for release
    fresh = b.get("s-1")
    assert fresh is not None and fresh.is_free
    taken = b.take(fresh, "b")
    assert taken is not None and taken.owner_switches_since_checkpoint == 0


def test_delete_is_conditional_on_the_row_being_unchanged(tables: tuple[LeaseTable, LeaseTable]) -> None:
    a, b = tables
    lease = a.create_lease_if_absent("s-1", owner="a")
    assert lease is not None
    seen = b.get("s-1")
    assert seen is not None
    a.renew(lease)
    assert b.delete(seen) is False
    fresh = b.get("s-1")
    assert fresh is not None and b.delete(fresh) is True
    assert a.get("s-1") is None
    with pytest.raises(LeaseLostError, match="deleted"):
        a.renew(fresh)


# --- corrupt rows -------------------------------------------------------------------------


CORRUPT_ROWS = {
    "no-counter": {"leaseOwner": {"S": "x"}},
    "counter-as-string": {"leaseCounter": {"S": "three"}},
    "bad-checkpoint": {"checkpoint": {"S": "12x"}},
    "bad-state": {"leaseState": {"S": "EXPLODED"}},
    "order-mismatch": {"checkpointOrder": {"S": "1:junk"}},
    "parents-not-list": {"parents": {"S": "p"}},
}


def _good_item(key: str) -> dict[str, Any]:
    cp = TRIM_HORIZON
    return {
        "leaseKey": {"S": key},
        "leaseCounter": {"N": "3"},
        "checkpoint": {"S": cp.sequence_number},
        "checkpointSubSequenceNumber": {"N": "0"},
        "checkpointOrder": {"S": cp.order_string},
        "parents": {"L": []},
        "leaseState": {"S": "ACTIVE"},
    }


def test_corrupt_rows_are_reported_skipped_and_never_overwritten(aws: LocalAWS) -> None:
    table = open_table(aws)
    client = table.client
    for key, change in CORRUPT_ROWS.items():
        item = _good_item(key)
        item.update(change)
        if key == "no-counter":
            del item["leaseCounter"]
        client.put_item(TableName=TABLE, Item=item)
    table.create_lease_if_absent("healthy")
    before = {key: raw_item(table, key) for key in CORRUPT_ROWS}
    snapshot = table.scan()
    assert list(snapshot.leases) == ["healthy"]
    assert sorted(snapshot.corrupt) == sorted(CORRUPT_ROWS)
    assert "leaseCounter" in snapshot.corrupt["no-counter"]
    assert "leaseState" in snapshot.corrupt["bad-state"]
    for key in CORRUPT_ROWS:
        with pytest.raises(CorruptLeaseError, match=key):
            table.get(key)
        assert table.create_lease_if_absent(key, owner="me") is None
    assert {key: raw_item(table, key) for key in CORRUPT_ROWS} == before


# --- transient errors -------------------------------------------------------------------------


def test_throttling_and_5xx_are_retried_then_succeed(aws: LocalAWS) -> None:
    table = open_table(aws, retry_max_wait=0.01)
    faults = DynamoFaults(table)
    lease = table.create_lease_if_absent("s-1", owner="a")
    assert lease is not None
    faults.fail("UpdateItem", "ProvisionedThroughputExceededException")
    faults.fail("UpdateItem", "ThrottlingException")
    faults.fail("UpdateItem", "InternalServerError", status=500)
    renewed = table.renew(lease)
    assert renewed.counter == 2
    assert faults.requests["UpdateItem"] == 4
    faults.fail("Scan", "ServiceUnavailable", status=503)
    assert list(table.scan().leases) == ["s-1"]


def test_retries_give_up_with_a_named_error(aws: LocalAWS) -> None:
    table = open_table(aws, retry_attempts=3, retry_max_wait=0.01)
    faults = DynamoFaults(table)
    table.create_lease_if_absent("s-1")
    faults.fail("Scan", "ThrottlingException", times=3)
    with pytest.raises(LeaseTableUnavailableError, match="ThrottlingException after 3 attempts"):
        table.scan()


def test_conditional_failure_is_not_retried(aws: LocalAWS) -> None:
    table = open_table(aws, retry_max_wait=0.01)
    faults = DynamoFaults(table)
    lease = table.create_lease_if_absent("s-1", owner="a")
    assert lease is not None
    table.renew(lease)
    before = faults.requests["UpdateItem"]
    with pytest.raises(LeaseLostError):
        table.renew(lease)
    assert faults.requests["UpdateItem"] == before + 1


def test_a_write_whose_response_was_lost_is_recognised_on_retry(aws: LocalAWS) -> None:
    """The first attempt is applied but its response dropped; the retry meets its own write."""
    table = open_table(aws, retry_max_wait=0.01)
    faults = DynamoFaults(table)
    lease = table.create_lease_if_absent("s-1", owner="a")
    assert lease is not None
    faults.apply_then_drop("UpdateItem")
    renewed = table.renew(lease)
    assert renewed.counter == 2 and faults.requests["UpdateItem"] == 2
    faults.apply_then_drop("UpdateItem")
    handed = table.handoff(renewed, "b")
    assert handed.owner == "b"
    faults.apply_then_drop("PutItem")
    assert table.create_lease_if_absent("s-2", owner="a") is not None
    faults.apply_then_drop("UpdateItem")
    assert table.heartbeat("m", "inc", None).heartbeat == 1
    hb = table.heartbeat("m", "inc", 1)
    assert hb.heartbeat == 2


def test_fake_clock_moves_forward_only() -> None:
    clock = FakeClock(5)
    assert clock() == 5 and clock.advance(1.5) == 6.5
    with pytest.raises(ConfigurationError):
        clock.advance(-1)


# --- writes applied by DynamoDB that still answered with an error (botocore retries) --------


@pytest.fixture
def proxied_table(aws: LocalAWS) -> Any:
    """A table whose client (default botocore retries) talks to moto through a fault proxy."""
    from tests.support.fault_proxy import fault_proxy

    with fault_proxy(aws.endpoint_url) as proxy:
        client = boto3_client_via(proxy.endpoint_url, aws)
        yield LeaseTable.open(client, TABLE), proxy


def boto3_client_via(endpoint_url: str, aws: LocalAWS) -> Any:
    from kinesis.testing import client_for

    return client_for("dynamodb", endpoint_url, aws.region, config=Config(retries={"mode": "standard"}))


def test_a_write_applied_then_answered_500_is_ours_whoever_retried(proxied_table: Any) -> None:
    """DynamoDB applies a write and answers 500; botocore (not us) retries; the condition
    then fails on our own write. The write token says it was ours: no LeaseLostError."""
    from tests.support.fault_proxy import Fault

    table, proxy = proxied_table
    applied_then_500 = Fault("applied_then_error")
    proxy.queue("PutItem", applied_then_500)
    lease = table.create_lease_if_absent("s-1", owner="a")
    assert lease is not None and lease.owner == "a"
    proxy.queue("UpdateItem", applied_then_500)
    renewed = table.renew(lease)
    assert renewed.counter == lease.counter + 1
    proxy.queue("UpdateItem", applied_then_500)
    checkpointed = table.checkpoint(renewed, "100")
    assert str(checkpointed.checkpoint) == "100"
    proxy.queue("UpdateItem", applied_then_500)
    handed = table.handoff(checkpointed, "b")
    assert handed.owner == "b"
    proxy.queue("UpdateItem", applied_then_500)
    adopted = table.adopt(handed)
    proxy.queue("UpdateItem", applied_then_500)
    released = table.release(adopted)
    assert released.owner is None
    proxy.queue("UpdateItem", applied_then_500)
    taken = table.take(released, "c")
    assert taken is not None and taken.owner == "c"
    assert proxy.injected[("UpdateItem", "applied_then_error")] == 6
    # every fault was retried by botocore itself: one extra request per write
    assert proxy.requests["UpdateItem"] == 12 and proxy.requests["PutItem"] == 2


def test_a_condition_failed_on_someone_elses_write_is_still_lease_lost(proxied_table: Any) -> None:
    """The token check must not hide a real loss: after our write applied, another member
    wrote the row (a new token), so the retry's failed condition is a genuine loss."""
    from tests.support.fault_proxy import Fault

    table, proxy = proxied_table
    lease = table.create_lease_if_absent("s-1", owner="a")
    assert lease is not None
    other = LeaseTable(table.client, TABLE)
    stolen = other.take(lease, "z")  # moves the row on: counter 2, owner z, another token
    assert stolen is not None
    proxy.queue("UpdateItem", Fault("applied_then_error"))
    with pytest.raises(LeaseLostError):
        table.renew(lease)


# --- reading many rows at once -----------------------------------------------------------------


def test_get_many_reads_in_batches_of_100_and_marks_missing_rows(aws: LocalAWS) -> None:
    table = open_table(aws)
    faults = DynamoFaults(table)
    for i in range(0, 250, 2):
        assert table.create_lease_if_absent(f"k-{i:03d}", owner="a" if i % 4 else None) is not None
    got = table.get_many(f"k-{i:03d}" for i in range(250))
    assert len(got) == 250 and faults.requests["BatchGetItem"] == 3
    assert all((got[f"k-{i:03d}"] is None) == (i % 2 == 1) for i in range(250))
    lease = got["k-002"]
    assert lease is not None and lease.owner == "a" and lease.counter == 1
    with pytest.raises(InvalidLeaseKeyError):
        table.get_many(["__member__#x"])


def test_get_many_retries_unprocessed_keys_and_skips_corrupt_rows(aws: LocalAWS) -> None:
    table = open_table(aws)
    for key in ("a", "b", "c"):
        table.create_lease_if_absent(key)
    table.client.put_item(TableName=TABLE, Item={"leaseKey": {"S": "bad"}, "leaseCounter": {"S": "x"}})
    throttled = {"times": 1}

    def unprocess(parsed: dict[str, Any], **_: Any) -> None:
        if throttled["times"] and parsed.get("Responses", {}).get(TABLE):
            throttled["times"] -= 1
            moved = parsed["Responses"][TABLE][:2]
            parsed["Responses"][TABLE] = parsed["Responses"][TABLE][2:]
            parsed["UnprocessedKeys"] = {TABLE: {"Keys": [{"leaseKey": i["leaseKey"]} for i in moved]}}

    table.client.meta.events.register("after-call.dynamodb.BatchGetItem", unprocess)
    table.clock_sleep = lambda seconds: None  # type: ignore[method-assign]
    got = table.get_many(["a", "b", "c", "bad", "none"], consistent=True)
    assert sorted(k for k, v in got.items() if v is not None) == ["a", "b", "c"]
    assert "bad" not in got and got["none"] is None and throttled["times"] == 0
