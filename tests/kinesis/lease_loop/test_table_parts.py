"""The lease table's parts, without DynamoDB: calls (settings read at every call, the update
expression), reads (rows sorted, batched reads, corrupt rows reported once) and set-up."""

from __future__ import annotations

import logging
from typing import Any

import botocore.exceptions
import pytest

from kinesis.errors import CorruptLeaseError, LeaseTableSchemaError, LeaseTableUnavailableError
from kinesis.lease_loop.table import model as m
from kinesis.lease_loop.table.calls import update_expression
from kinesis.lease_loop.table.leases import LeaseTable, check_schema
from kinesis.lease_loop.table.model import Lease
from kinesis.lease_loop.table.reads import CorruptRows, sort_rows

TABLE = "parts-test"


def throttled(operation: str) -> botocore.exceptions.ClientError:
    return botocore.exceptions.ClientError(
        {"Error": {"Code": "ThrottlingException", "Message": "slow down"},
         "ResponseMetadata": {"HTTPStatusCode": 400}}, operation)


class ThrottledClient:
    """Every GetItem is throttled; counts them."""

    def __init__(self) -> None:
        self.calls = 0

    def get_item(self, **_: Any) -> dict[str, Any]:
        self.calls += 1
        raise throttled("GetItem")


def test_the_retry_settings_are_read_at_every_call_not_when_the_table_is_built() -> None:
    client = ThrottledClient()
    table = LeaseTable(client, TABLE, retry_attempts=5)
    table.retry_attempts = 2  # e.g. a test or an operator tightening a built table
    table.retry_max_wait = 0.001
    with pytest.raises(LeaseTableUnavailableError, match="ThrottlingException after 2 attempts"):
        table.get("k")
    assert client.calls == 2


def test_the_update_expression_aliases_every_attribute_and_names_the_condition_placeholders() -> None:
    expr, names = update_expression({m.OWNER: {"S": "a"}, m.COUNTER: {"N": "2"}}, [m.PENDING_HANDOFF],
                                    "#o = :o AND #c = :c")
    assert expr == "SET #a0 = :s0, #a1 = :s1 REMOVE #a2"
    assert names == {"#a0": m.OWNER, "#a1": m.COUNTER, "#a2": m.PENDING_HANDOFF, "#o": m.OWNER, "#c": m.COUNTER}
    assert update_expression({m.COUNTER: {"N": "2"}}, (), "#c = :c")[0] == "SET #a0 = :s0"


def member_item(member_id: str) -> dict[str, Any]:
    return {m.KEY: {"S": m.MEMBER_PREFIX + member_id}, m.MEMBER_ID: {"S": member_id},
            m.HEARTBEAT: {"N": "3"}, m.INCARNATION: {"S": "inc"}, m.STARTED_AT: {"S": "2026-01-01T00:00:00+00:00"}}


CORRUPT = {m.KEY: {"S": "bad"}, m.COUNTER: {"S": "x"}}


def test_scanned_rows_are_sorted_into_leases_members_and_corrupt_rows_and_reserved_rows_are_left_out() -> None:
    lease = Lease("app/orders/shardId-0", "a", 4)
    leases, members, corrupt, _sessions = sort_rows([m.lease_to_item(lease), member_item("a"),
                                          {m.KEY: {"S": "__manifest__#head"}}, CORRUPT])
    assert leases == {lease.key: lease}
    assert list(members) == ["a"] and members["a"].heartbeat == 3
    assert [e.key for e in corrupt] == ["bad"]


def test_a_corrupt_row_is_logged_once_per_reason_on_the_lease_table_logger(caplog: pytest.LogCaptureFixture) -> None:
    rows = CorruptRows()
    with caplog.at_level(logging.ERROR, logger="kinesis.lease_loop.table"):
        rows.report(CorruptLeaseError("bad", "leaseCounter is not a number"))
        rows.report(CorruptLeaseError("bad", "leaseCounter is not a number"))
        rows.report(CorruptLeaseError("bad", "no owner"))
    assert [r.name for r in caplog.records] == ["kinesis.lease_loop.table.reads"] * 2
    assert rows.rows == {"bad": "no owner"}
    rows.rows["other"] = "changed"  # a copy
    assert rows.rows == {"bad": "no owner"}


class BatchClient:
    """BatchGetItem over rows in memory; leaves the first ``unprocessed`` answers' keys unprocessed."""

    def __init__(self, rows: dict[str, dict[str, Any]], unprocessed: int = 0):
        self.rows = rows
        self.unprocessed = unprocessed
        self.requests: list[list[str]] = []

    def batch_get_item(self, RequestItems: dict[str, Any]) -> dict[str, Any]:
        keys = [k[m.KEY]["S"] for k in RequestItems[TABLE]["Keys"]]
        self.requests.append(keys)
        if self.unprocessed:
            self.unprocessed -= 1
            return {"Responses": {TABLE: []}, "UnprocessedKeys": RequestItems}
        return {"Responses": {TABLE: [self.rows[k] for k in keys if k in self.rows]}}


def test_batched_reads_ask_for_100_keys_a_request_and_retry_unprocessed_keys_after_the_given_wait() -> None:
    keys = [f"k{i:03d}" for i in range(250)]
    rows = {k: m.lease_to_item(Lease(k, "a", 1)) for k in keys[::2]} | {"bad": CORRUPT}
    client = BatchClient(rows, unprocessed=2)
    table = LeaseTable(client, TABLE)
    waits: list[float] = []
    table.clock_sleep = waits.append  # type: ignore[method-assign]
    got = table.get_many([*keys, "bad"])
    assert [len(r) for r in client.requests] == [100, 100, 100, 100, 51]  # the first twice unprocessed
    assert waits == [0.01, 0.02]
    assert sorted(k for k, v in got.items() if v is not None) == keys[::2]
    assert "bad" not in got and got["k001"] is None and list(table.corrupt_rows) == ["bad"]


def test_batched_reads_give_up_on_keys_left_unprocessed_by_every_attempt() -> None:
    client = BatchClient({}, unprocessed=1000)
    table = LeaseTable(client, TABLE, retry_attempts=1)
    table.clock_sleep = lambda seconds: None  # type: ignore[method-assign]
    with pytest.raises(LeaseTableUnavailableError, match="unprocessed after 4 attempts"):
        table.get_items(["a"])
    assert len(client.requests) == 4


def description(keys: list[tuple[str, str]], types: dict[str, str]) -> dict[str, Any]:
    return {"KeySchema": [{"AttributeName": n, "KeyType": t} for n, t in keys],
            "AttributeDefinitions": [{"AttributeName": n, "AttributeType": t} for n, t in types.items()]}


def test_the_schema_check_wants_exactly_one_string_hash_key_named_lease_key() -> None:
    check_schema(TABLE, description([("leaseKey", "HASH")], {"leaseKey": "S"}))
    for keys, types in [([("leaseKey", "HASH"), ("sort", "RANGE")], {"leaseKey": "S", "sort": "S"}),
                        ([("leaseKey", "HASH")], {"leaseKey": "N"}),
                        ([("id", "HASH")], {"id": "S"})]:
        with pytest.raises(LeaseTableSchemaError, match=f"table '{TABLE}' has key schema"):
            check_schema(TABLE, description(keys, types))
