"""MemoryDynamoDB answers like moto's DynamoDB for the calls the SDK makes; its hooks work.

Each contract scenario is written once against a client and runs twice: on moto (the ``aws``
fixture) and on a fresh :class:`MemoryDynamoDB`; both record a normalised transcript (step
name, outcome) and the transcripts must be equal. Random ids of the SDK (write tokens, session
tokens, chunk ids) are made deterministic, so the SDK's calls are the same on both sides.

Where moto is wrong against AWS, :meth:`Run.differs` records the step out of the comparison:
the memory side must give AWS's answer, and moto must still give its known wrong one (so a
moto upgrade that fixes it fails here, and the exception can go). The rest of the file tests
the fault, staleness and corruption hooks, the accessors and the speed on the memory side.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import re
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, tzinfo
from decimal import Decimal
from typing import Any

import botocore.exceptions
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError, ParamValidationError

from kinesis.aws_errors import is_retryable
from kinesis.errors import (
    KinesisHashRingError,
    LeaseTableAccessDeniedError,
    LeaseTableUnavailableError,
    is_access_denied,
)
from kinesis.lease_loop.checkpoints import Checkpoint
from kinesis.lease_loop.table import leases, manifests, sessions
from kinesis.lease_loop.table.leases import LeaseTable
from kinesis.lease_loop.table.manifests import ManifestStore
from kinesis.lease_loop.table.model import SessionCheck
from kinesis.lease_loop.timing import FakeClock
from kinesis.testing import LocalAWS
from tests.coordinator_fleet import shared_client
from tests.support.memory_dynamodb import Fault, MemoryDynamoDB, fault_sequence

NO_RETRY = Config(retries={"total_max_attempts": 1})
T = "contract"

# --- transcripts --------------------------------------------------------------------------


def norm(value: Any) -> Any:
    """A comparable form: dataclasses by field (also fields left out of ``==``), sets sorted."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return type(value).__name__, tuple((f.name, norm(getattr(value, f.name))) for f in dataclasses.fields(value))
    if isinstance(value, dict):
        if len(value) == 1 and next(iter(value)) in ("SS", "NS", "BS"):
            ((kind, elements),) = value.items()
            return {kind: sorted(elements, key=Decimal if kind == "NS" else None)}
        return {k: norm(v) for k, v in value.items() if k not in ("ResponseMetadata", "ConsumedCapacity",
                                                                  "ItemCollectionMetrics")}
    if isinstance(value, list | tuple):
        return [norm(v) for v in value]
    return value


def failure(exc: ClientError) -> tuple[Any, ...]:
    """An error answer: code, HTTP status, and the old items it carries."""
    out: list[Any] = ["error", exc.response["Error"]["Code"], exc.response["ResponseMetadata"]["HTTPStatusCode"]]
    if "Item" in exc.response:
        out.append(("Item", norm(exc.response["Item"])))
    if "CancellationReasons" in exc.response:
        out.append(("reasons", [(r["Code"], norm(r.get("Item"))) for r in exc.response["CancellationReasons"]]))
    return tuple(out)


class Run:
    """One side of a contract scenario: the client and the transcript so far."""

    def __init__(self, client: Any, *, moto: bool):
        self.client = client
        self.moto = moto
        self.steps: list[tuple[str, Any]] = []

    def outcome(self, fn: Callable[[], Any]) -> tuple[Any, Any]:
        try:
            result = fn()
        except ClientError as exc:
            return None, failure(exc)
        except ParamValidationError:
            return None, ("client-side parameter validation",)
        except KinesisHashRingError as exc:
            return None, ("raised", type(exc).__name__)
        return result, norm(result)

    def __call__(self, name: str, fn: Callable[[], Any]) -> Any:
        """Run step ``name`` and record its outcome; return its result (None after an error)."""
        result, outcome = self.outcome(fn)
        self.steps.append((name, outcome))
        return result

    def differs(self, name: str, fn: Callable[[], Any], *, aws: Any, moto: Any, why: str) -> None:
        """A step where moto is wrong against AWS (``why``): memory must answer ``aws``, moto
        (still) answers ``moto``; the step is left out of the comparison."""
        _, outcome = self.outcome(fn)
        expected = moto if self.moto else aws
        assert outcome == expected, f"{name} on {'moto' if self.moto else 'memory'}: {outcome!r} != {expected!r}"
        self.steps.append((name, f"moto differs from AWS: {why}"))


class Ids:
    """Deterministic ``uuid4`` for the SDK modules (unique in the first 12 hex digits too)."""

    def __init__(self) -> None:
        self.n = 0

    def uuid4(self) -> uuid.UUID:
        self.n += 1
        return uuid.UUID(int=(self.n << 96) | self.n)


class FixedDatetime:
    """``datetime`` for member_rows: its heartbeat rows' ``startedAt`` is fixed."""

    @staticmethod
    def now(tz: tzinfo | None = None) -> datetime:
        return datetime(2024, 1, 1, tzinfo=tz or UTC)


@pytest.fixture
def ids(monkeypatch: pytest.MonkeyPatch) -> Ids:
    ids = Ids()
    for module in (leases, sessions, manifests):
        monkeypatch.setattr(module, "uuid", ids)
    monkeypatch.setattr(sessions, "datetime", FixedDatetime)
    return ids


def check_contract(aws: LocalAWS, ids: Ids, scenario: Callable[[Run], None]) -> None:
    """Run ``scenario`` on moto and on MemoryDynamoDB; their transcripts must be equal."""
    transcripts = []
    for client, moto in ((shared_client(aws, "memory-contract", config=NO_RETRY), True), (MemoryDynamoDB(), False)):
        ids.n = 0
        run = Run(client, moto=moto)
        scenario(run)
        transcripts.append(run.steps)
    moto_steps, memory_steps = transcripts
    assert [name for name, _ in memory_steps] == [name for name, _ in moto_steps]
    for (name, on_moto), (_, on_memory) in zip(moto_steps, memory_steps, strict=True):
        assert on_memory == on_moto, f"step {name!r}: moto {on_moto!r} != memory {on_memory!r}"


# --- raw API scenarios ----------------------------------------------------------------------


def key(k: str) -> dict[str, Any]:
    return {"k": {"S": k}}


def create(client: Any, name: str = T) -> Any:
    return client.create_table(TableName=name, AttributeDefinitions=[{"AttributeName": "k", "AttributeType": "S"}],
                               KeySchema=[{"AttributeName": "k", "KeyType": "HASH"}], BillingMode="PAY_PER_REQUEST")


def contents(run: Run, name: str = T) -> None:
    run("table contents", lambda: run.client.scan(TableName=name, ConsistentRead=True)["Items"])


def pick(mapping: dict[str, Any], *names: str) -> dict[str, Any]:
    return {n: mapping[n] for n in names if n in mapping}


SERVER_ERROR = ("error", "500", 500)
"""How botocore reports moto's crash (an HTML 500 page)."""
CONDITION_FAILED = ("error", "ConditionalCheckFailedException", 400)
INVALID = ("error", "ValidationException", 400)


def tables_scenario(run: Run) -> None:
    c = run.client
    run("describe a missing table", lambda: c.describe_table(TableName=T))
    run("get from a missing table", lambda: c.get_item(TableName=T, Key=key("a")))
    run("put to a missing table", lambda: c.put_item(TableName=T, Item=key("a")))
    run("scan a missing table", lambda: c.scan(TableName=T))
    run.differs("create", lambda: create(c)["TableDescription"]["TableStatus"], aws="CREATING", moto="ACTIVE",
                why="CreateTable answers CREATING on AWS (DescribeTable says ACTIVE once it is)")
    run("describe", lambda: pick(c.describe_table(TableName=T)["Table"], "TableName", "TableStatus", "KeySchema",
                                 "AttributeDefinitions", "BillingModeSummary", "ItemCount"))
    run("create again", lambda: create(c))
    run("create with a range key", lambda: pick(c.create_table(
        TableName="pairs", AttributeDefinitions=[{"AttributeName": "h", "AttributeType": "S"},
                                                 {"AttributeName": "r", "AttributeType": "N"}],
        KeySchema=[{"AttributeName": "h", "KeyType": "HASH"}, {"AttributeName": "r", "KeyType": "RANGE"}],
        ProvisionedThroughput={"ReadCapacityUnits": 1, "WriteCapacityUnits": 1})["TableDescription"],
        "KeySchema", "AttributeDefinitions"))
    for r in ("10", "9", "-1"):
        run(f"put pair {r}", functools.partial(c.put_item, TableName="pairs", Item={"h": {"S": "x"}, "r": {"N": r}}))
    run("get pair", lambda: c.get_item(TableName="pairs", Key={"h": {"S": "x"}, "r": {"N": "9"}}))
    run("get with half a key", lambda: c.get_item(TableName="pairs", Key={"h": {"S": "x"}}))
    run("pairs scan in range key order", lambda: c.scan(TableName="pairs"))
    run("delete the table", lambda: pick(c.delete_table(TableName="pairs")["TableDescription"], "TableName"))
    run("describe the deleted table", lambda: c.describe_table(TableName="pairs"))


def items_scenario(run: Run) -> None:
    c = run.client
    create(c)
    every = {**key("a"), "s": {"S": "x"}, "empty": {"S": ""}, "n": {"N": "42"}, "f": {"N": "-3.25"},
             "b": {"B": b"\x00\xff"}, "t": {"BOOL": True}, "z": {"NULL": True},
             "l": {"L": [{"S": "x"}, {"N": "1"}, {"L": []}]}, "m": {"M": {"q": {"N": "2"}, "r": {"M": {}}}},
             "ss": {"SS": ["b", "a"]}, "ns": {"NS": ["2", "10"]}, "bs": {"BS": [b"a"]}}
    run("put every type", lambda: c.put_item(TableName=T, Item=every))
    run("get every type", lambda: c.get_item(TableName=T, Key=key("a"), ConsistentRead=True))
    run("get eventually consistent", lambda: c.get_item(TableName=T, Key=key("a")))
    run("get a missing item", lambda: c.get_item(TableName=T, Key=key("zz"), ConsistentRead=True))
    absent = {"ConditionExpression": "attribute_not_exists(#k)", "ExpressionAttributeNames": {"#k": "k"}}
    run("put if absent, present", lambda: c.put_item(TableName=T, Item=key("a"), **absent))
    run("put if absent, present, ALL_OLD", lambda: c.put_item(
        TableName=T, Item=key("a"), ReturnValuesOnConditionCheckFailure="ALL_OLD", **absent))
    run("put if absent, new", lambda: c.put_item(TableName=T, Item={**key("b"), "v": {"N": "1"}}, **absent))
    run("put ALL_OLD", lambda: c.put_item(TableName=T, Item={**key("b"), "v": {"N": "2"}}, ReturnValues="ALL_OLD"))
    run("put ALL_OLD of a new item", lambda: c.put_item(TableName=T, Item=key("c"), ReturnValues="ALL_OLD"))
    run("put ALL_NEW is invalid", lambda: c.put_item(TableName=T, Item=key("c"), ReturnValues="ALL_NEW"))
    run("delete ALL_OLD", lambda: c.delete_item(TableName=T, Key=key("c"), ReturnValues="ALL_OLD"))
    run("delete a missing item ALL_OLD", lambda: c.delete_item(TableName=T, Key=key("c"), ReturnValues="ALL_OLD"))
    cond = {"ConditionExpression": "#v = :v", "ExpressionAttributeNames": {"#v": "v"},
            "ExpressionAttributeValues": {":v": {"N": "1"}}}
    run("conditional delete fails", lambda: c.delete_item(TableName=T, Key=key("b"), **cond))
    run("conditional delete fails, ALL_OLD", lambda: c.delete_item(
        TableName=T, Key=key("b"), ReturnValuesOnConditionCheckFailure="ALL_OLD", **cond))
    run("conditional delete of a missing item, ALL_OLD", lambda: c.delete_item(
        TableName=T, Key=key("zz"), ReturnValuesOnConditionCheckFailure="ALL_OLD", **cond))
    run("get with the wrong key name", lambda: c.get_item(TableName=T, Key={"x": {"S": "a"}}))
    run("get with an empty key", lambda: c.get_item(TableName=T, Key=key("")))
    run("put without the key", lambda: c.put_item(TableName=T, Item={"x": {"S": "a"}}))
    run("put an empty key", lambda: c.put_item(TableName=T, Item=key("")))
    run("put an empty set", lambda: c.put_item(TableName=T, Item={**key("e"), "s": {"SS": []}}))
    run("put an unparseable number", lambda: c.put_item(TableName=T, Item={**key("e"), "n": {"N": "abc"}}))
    run("put 500 KB", lambda: c.put_item(TableName=T, Item={**key("big"), "d": {"B": b"x" * 500_000}}))
    run("put 350 KB", lambda: c.put_item(TableName=T, Item={**key("big"), "d": {"B": b"x" * 350_000}}))
    run("get 350 KB", lambda: len(c.get_item(TableName=T, Key=key("big"))["Item"]["d"]["B"]))
    run("empty ExpressionAttributeValues", lambda: c.put_item(
        TableName=T, Item=key("e"), ConditionExpression="attribute_exists(#k)", ExpressionAttributeNames={"#k": "k"},
        ExpressionAttributeValues={}))
    run("unused ExpressionAttributeNames", lambda: c.put_item(
        TableName=T, Item=key("e"), ConditionExpression="attribute_not_exists(#k)",
        ExpressionAttributeNames={"#k": "k", "#x": "x"}))
    run("ExpressionAttributeNames without an expression", lambda: c.put_item(
        TableName=T, Item=key("e"), ExpressionAttributeNames={"#k": "k"}))
    contents(run)


def updates_scenario(run: Run) -> None:
    c = run.client
    create(c)
    c.put_item(TableName=T, Item={**key("a"), "n": {"N": "5"}, "s": {"S": "x"}, "ss": {"SS": ["b", "a"]},
                                  "gone": {"S": "g"}, "str": {"S": "text"}})

    def update(name: str, expression: str, names: dict[str, str], values: dict[str, Any] | None = None,
               k: str = "a", **kwargs: Any) -> None:
        extra = {"ExpressionAttributeValues": values} if values else {}
        run(name, lambda: c.update_item(TableName=T, Key=key(k), UpdateExpression=expression,
                                        ExpressionAttributeNames=names, **extra, **kwargs))

    update("SET REMOVE ADD, ALL_NEW", "SET #s = :s, #new = :new REMOVE #gone ADD #n :one, #ss :more",
           {"#s": "s", "#new": "new", "#gone": "gone", "#n": "n", "#ss": "ss"},
           {":s": {"S": "y"}, ":new": {"L": [{"S": "q"}]}, ":one": {"N": "1"}, ":more": {"SS": ["c", "a"]}},
           ReturnValues="ALL_NEW")
    update("DELETE from a set, UPDATED_NEW", "DELETE #ss :some", {"#ss": "ss"}, {":some": {"SS": ["a", "zz"]}},
           ReturnValues="UPDATED_NEW")
    update("DELETE the last elements removes the set", "DELETE #ss :all", {"#ss": "ss"},
           {":all": {"SS": ["b", "c"]}}, ReturnValues="ALL_NEW")
    update("if_not_exists keeps a value", "SET #n = if_not_exists(#n, :zero)", {"#n": "n"}, {":zero": {"N": "0"}},
           ReturnValues="ALL_NEW")
    update("if_not_exists sets a missing one", "SET #c = if_not_exists(#c, :zero)", {"#c": "c"},
           {":zero": {"N": "0"}}, ReturnValues="UPDATED_NEW")
    update("arithmetic", "SET #plus = #n + :half, #minus = #n - :ten", {"#plus": "plus", "#minus": "minus", "#n": "n"},
           {":half": {"N": "0.5"}, ":ten": {"N": "10"}}, ReturnValues="UPDATED_NEW")
    update("UPDATED_OLD", "SET #n = :v REMOVE #s", {"#n": "n", "#s": "s"}, {":v": {"N": "7"}},
           ReturnValues="UPDATED_OLD")
    update("ALL_OLD", "SET #n = :v", {"#n": "n"}, {":v": {"N": "8"}}, ReturnValues="ALL_OLD")
    update("NONE", "SET #n = :v", {"#n": "n"}, {":v": {"N": "9"}})
    update("create with SET and ADD, REMOVE absent", "SET #t = :t ADD #c :one REMOVE #pv",
           {"#t": "tok", "#c": "c", "#pv": "pv"}, {":t": {"S": "x"}, ":one": {"N": "1"}}, k="new",
           ReturnValues="ALL_NEW")
    update("ADD again", "SET #t = :t ADD #c :one REMOVE #pv", {"#t": "tok", "#c": "c", "#pv": "pv"},
           {":t": {"S": "x"}, ":one": {"N": "1"}}, k="new", ReturnValues="ALL_NEW")
    update("update the key", "SET #k = :v", {"#k": "k"}, {":v": {"S": "b"}})
    update("overlapping paths", "SET #a = :v REMOVE #b", {"#a": "x", "#b": "x"}, {":v": {"N": "1"}})
    update("two SET sections", "SET #a = :v SET #b = :v", {"#a": "x", "#b": "y"}, {":v": {"N": "1"}})
    update("operand missing", "SET #x = #nope + :one", {"#x": "x", "#nope": "nope"}, {":one": {"N": "1"}})
    update("ADD to a string", "ADD #str :one", {"#str": "str"}, {":one": {"N": "1"}})
    update("ADD a string", "ADD #n :s", {"#n": "n"}, {":s": {"S": "x"}})
    update("DELETE a number", "DELETE #n :one", {"#n": "n"}, {":one": {"N": "1"}})
    update("unused value", "SET #n = :v", {"#n": "n"}, {":v": {"N": "1"}, ":w": {"N": "2"}})
    update("unused name", "SET #n = :v", {"#n": "n", "#w": "w"}, {":v": {"N": "1"}})
    cond = {"ConditionExpression": "#n = :old", "ExpressionAttributeValues": {":v": {"N": "1"}, ":old": {"N": "0"}}}
    run("condition fails", lambda: c.update_item(TableName=T, Key=key("a"), UpdateExpression="SET #n = :v",
                                                 ExpressionAttributeNames={"#n": "n"}, **cond))
    run("condition fails, ALL_OLD", lambda: c.update_item(
        TableName=T, Key=key("a"), UpdateExpression="SET #n = :v", ExpressionAttributeNames={"#n": "n"},
        ReturnValuesOnConditionCheckFailure="ALL_OLD", **cond))
    run("condition fails on a missing item, ALL_OLD", lambda: c.update_item(
        TableName=T, Key=key("zz"), UpdateExpression="SET #n = :v", ExpressionAttributeNames={"#n": "n"},
        ReturnValuesOnConditionCheckFailure="ALL_OLD", **cond))
    contents(run)


ORDER_100 = Checkpoint("100").order_string


def conditions_scenario(run: Run) -> None:
    c = run.client
    create(c)
    item = {**key("a"), "n": {"N": "9"}, "s": {"S": "abc"}, "s9": {"S": "9"}, "o": {"S": ORDER_100},
            "z": {"NULL": True}, "ss": {"SS": ["x", "y"]}}
    c.put_item(TableName=T, Item=item)
    names = {"#n": "n", "#s": "s", "#s9": "s9", "#o": "o", "#z": "z", "#m": "missing", "#m2": "missing2", "#ss": "ss"}

    def check(expression: str, **values: dict[str, Any]) -> Callable[[], Any]:
        """Rewrite the item unchanged under ``expression``: {} when true, a failure when false."""
        used = {p: a for p, a in names.items() if p in re.findall(r"#\w+", expression)}
        kwargs: dict[str, Any] = {"ExpressionAttributeNames": used} if used else {}
        if values:
            kwargs["ExpressionAttributeValues"] = {f":{k}": v for k, v in values.items()}
        return lambda: c.put_item(TableName=T, Item=item, ConditionExpression=expression, **kwargs)

    n10, s10 = {"N": "10"}, {"S": "10"}
    cases: list[tuple[str, str, dict[str, Any]]] = [
        ("numbers compare as numbers", "#n < :v", {"v": n10}),
        ("9 > 10 is false for numbers", "#n > :v", {"v": n10}),
        ("9 > 10 is true for strings", "#s9 > :v", {"v": s10}),
        ("strings compare by code point", "#s < :v", {"v": {"S": "abd"}}),
        ("fixed-width <= equal", "#o <= :v", {"v": {"S": ORDER_100}}),
        ("fixed-width <= ahead", "#o <= :v", {"v": {"S": Checkpoint("1000").order_string}}),
        ("fixed-width <= behind", "#o <= :v", {"v": {"S": Checkpoint("99").order_string}}),
        ("fixed-width >= behind", "#o >= :v", {"v": {"S": Checkpoint("99", 5).order_string}}),
        ("= number", "#n = :v", {"v": {"N": "9"}}),
        ("<> number", "#n <> :v", {"v": {"N": "9"}}),
        ("= across types", "#n = :v", {"v": {"S": "9"}}),
        ("<> across types", "#n <> :v", {"v": {"S": "9"}}),
        ("= sets in any order", "#ss = :v", {"v": {"SS": ["y", "x"]}}),
        ("missing = value", "#m = :v", {"v": n10}),
        ("missing < value", "#m < :v", {"v": n10}),
        ("missing <> value", "#m <> :v", {"v": n10}),
        ("NOT missing = value", "NOT #m = :v", {"v": n10}),
        ("attribute_exists", "attribute_exists(#n)", {}),
        ("attribute_exists of a missing one", "attribute_exists(#m)", {}),
        ("attribute_not_exists", "attribute_not_exists(#m)", {}),
        ("attribute_exists of NULL", "attribute_exists(#z)", {}),
        ("AND binds tighter than OR", "#n = :a OR #n = :b AND #s = :c", {"a": {"N": "9"}, "b": n10, "c": s10}),
        ("parentheses", "(#n = :a OR #n = :b) AND #s = :c", {"a": {"N": "9"}, "b": n10, "c": s10}),
        ("NOT with parentheses", "NOT (#n = :a OR #s = :c)", {"a": n10, "c": s10}),
        ("lower-case keywords", "#n = :a and not #s = :c or #n = :b", {"a": {"N": "9"}, "b": n10, "c": s10}),
        ("BETWEEN", "#n BETWEEN :a AND :b", {"a": {"N": "5"}, "b": n10}),
        ("BETWEEN outside", "#n BETWEEN :a AND :b", {"a": n10, "b": {"N": "50"}}),
        ("IN", "#n IN (:a, :b)", {"a": n10, "b": {"N": "9"}}),
        ("begins_with", "begins_with(#s, :a)", {"a": {"S": "ab"}}),
        ("begins_with no", "begins_with(#s, :a)", {"a": {"S": "b"}}),
        ("size", "size(#s) = :a", {"a": {"N": "3"}}),
    ]
    for name, expression, values in cases:
        run(name, check(expression, **values))
    run.differs("order comparison across types", check("#n < :v", v=s10), aws=CONDITION_FAILED, moto=SERVER_ERROR,
                why="comparing a number with a string is false (moto crashes)")
    run.differs("missing = missing", check("#m = #m2"), aws=CONDITION_FAILED, moto={},
                why="a comparison with a missing operand is false except <> (moto: None == None)")
    run.differs("missing <> missing", check("#m <> #m2"), aws={}, moto=CONDITION_FAILED,
                why="<> with a missing operand is true")
    run.differs("undefined value placeholder", check("#n = :nope", v=n10), aws=INVALID, moto=SERVER_ERROR,
                why="an undefined :value is a ValidationException (moto crashes)")
    run.differs("undefined name placeholder", check("#nope = :v", v=n10), aws=INVALID, moto=SERVER_ERROR,
                why="an undefined #name is a ValidationException (moto crashes)")
    run.differs("syntax error", check("#n = = :v", v=n10), aws=INVALID, moto=SERVER_ERROR,
                why="a syntax error is a ValidationException (moto crashes)")
    contents(run)


def scans_scenario(run: Run) -> None:
    c = run.client
    create(c)
    for i, k in enumerate("ecadb"):
        c.put_item(TableName=T, Item={**key(k), "n": {"N": str(i)}})
    start: dict[str, Any] | None = None
    for page in range(4):
        kwargs = {"ExclusiveStartKey": start} if start else {}
        response = run(f"page {page} of 2", functools.partial(c.scan, TableName=T, Limit=2, **kwargs))
        start = response.get("LastEvaluatedKey")
        if not start:
            break
    run("Limit above the item count", lambda: c.scan(TableName=T, Limit=10))
    run("eventually consistent", lambda: c.scan(TableName=T, ConsistentRead=False))
    run("filtered", lambda: c.scan(TableName=T, Limit=3, FilterExpression="#n > :v", ExpressionAttributeNames={"#n": "n"},
                                   ExpressionAttributeValues={":v": {"N": "1"}}))
    c.delete_item(TableName=T, Key=key("b"))
    run("start at a deleted key", lambda: c.scan(TableName=T, Limit=2, ExclusiveStartKey=key("b")))
    run("start past the end", lambda: c.scan(TableName=T, ExclusiveStartKey=key("zz")))
    run.differs("a page that ends exactly at Limit", lambda: c.scan(TableName=T, Limit=2, ExclusiveStartKey=key("c")),
                aws={"Items": [{**key("d"), "n": {"N": "3"}}, {**key("e"), "n": {"N": "0"}}], "Count": 2,
                     "ScannedCount": 2, "LastEvaluatedKey": key("e")},
                moto={"Items": [{**key("d"), "n": {"N": "3"}}, {**key("e"), "n": {"N": "0"}}], "Count": 2,
                      "ScannedCount": 2},
                why="Scan returns LastEvaluatedKey whenever it stopped at Limit, also at the end")
    run.differs("a start key of another schema", lambda: c.scan(TableName=T, ExclusiveStartKey={"x": {"S": "a"}}),
                aws=INVALID, moto=SERVER_ERROR, why="a malformed ExclusiveStartKey is a ValidationException")


def batch_scenario(run: Run) -> None:
    c = run.client
    create(c)
    create(c, "other")
    for k in "abc":
        c.put_item(TableName=T, Item={**key(k), "v": {"S": k}})
    c.put_item(TableName="other", Item={**key("a"), "w": {"N": "1"}})

    def batch(request: dict[str, Any]) -> Callable[[], Any]:
        def call() -> Any:
            response = c.batch_get_item(RequestItems=request)
            return {"Responses": {t: sorted(items, key=lambda i: i["k"]["S"])
                                  for t, items in response["Responses"].items()},
                    "UnprocessedKeys": response["UnprocessedKeys"]}
        return call

    run("present and missing keys", batch({T: {"Keys": [key("c"), key("zz"), key("a")], "ConsistentRead": True}}))
    run("eventually consistent", batch({T: {"Keys": [key("b")]}}))
    run("two tables", batch({T: {"Keys": [key("a")]}, "other": {"Keys": [key("a"), key("b")]}}))
    run("101 keys", batch({T: {"Keys": [key(str(i)) for i in range(101)]}}))
    run("duplicate keys", batch({T: {"Keys": [key("a"), key("a")]}}))
    run("a missing table", batch({"nope": {"Keys": [key("a")]}}))


def transactions_scenario(run: Run) -> None:
    c = run.client
    create(c)
    for k in "abd":
        c.put_item(TableName=T, Item={**key(k), "n": {"N": "1"}})
    names = {"#n": "n"}

    def check(k: str, n: str, **extra: Any) -> dict[str, Any]:
        return {"ConditionCheck": {"TableName": T, "Key": key(k), "ConditionExpression": "#n = :n",
                                   "ExpressionAttributeNames": names, "ExpressionAttributeValues": {":n": {"N": n}},
                                   **extra}}

    def bump(k: str, expected: str) -> dict[str, Any]:
        return {"Update": {"TableName": T, "Key": key(k), "UpdateExpression": "SET #n = #n + :one",
                           "ConditionExpression": "#n = :n", "ExpressionAttributeNames": names,
                           "ExpressionAttributeValues": {":one": {"N": "1"}, ":n": {"N": expected}}}}

    def transact(items: list[dict[str, Any]], **kwargs: Any) -> Callable[[], Any]:
        return lambda: c.transact_write_items(TransactItems=items, **kwargs)

    applied = [check("a", "1"), bump("b", "1"), {"Put": {"TableName": T, "Item": {**key("c"), "n": {"N": "7"}}}},
               {"Delete": {"TableName": T, "Key": key("d")}}]
    run("all four kinds apply", transact(applied, ClientRequestToken="token-1"))
    contents(run)
    run("a failed ConditionCheck cancels the Update",
        transact([check("a", "2", ReturnValuesOnConditionCheckFailure="ALL_OLD"), bump("b", "2")]))
    run("the Update was not applied", lambda: c.get_item(TableName=T, Key=key("b"), ConsistentRead=True))
    run("two failed conditions", transact([check("a", "5"), bump("b", "5")]))
    run("an Update's own condition fails, ALL_OLD", transact([check("a", "1"), {"Update": {
        **bump("b", "9")["Update"], "ReturnValuesOnConditionCheckFailure": "ALL_OLD"}}]))
    run("one item twice", transact([check("a", "1"), bump("a", "1")]))
    run("a missing table", transact([{"Put": {"TableName": "nope", "Item": key("a")}}]))
    run("a ConditionCheck without a condition", transact([{"ConditionCheck": {"TableName": T, "Key": key("a")}}]))
    run("unused names", transact([{"ConditionCheck": {**check("a", "1")["ConditionCheck"],
                                                      "ExpressionAttributeNames": {"#n": "n", "#x": "x"}}}]))
    contents(run)
    # AWS-only behaviour last: moto applies some of these, so the tables differ afterwards.
    run.differs("an Update whose operand is missing", transact([check("a", "1"), {"Update": {
        "TableName": T, "Key": key("b"), "UpdateExpression": "SET #n = #nope + :one",
        "ExpressionAttributeNames": {"#n": "n", "#nope": "nope"}, "ExpressionAttributeValues": {":one": {"N": "1"}}}}]),
        aws=("error", "TransactionCanceledException", 400, ("reasons", [("None", None), ("ValidationError", None)])),
        moto=INVALID, why="an item-dependent validation error cancels the transaction (reason ValidationError)")
    once = [bump("b", "2")]
    run("a transaction with a token", transact(once, ClientRequestToken="token-2"))
    run.differs("the same token and request again", transact(once, ClientRequestToken="token-2"), aws={},
                moto=("error", "TransactionCanceledException", 400, ("reasons", [("ConditionalCheckFailed", None)])),
                why="a repeated ClientRequestToken succeeds without applying again (moto re-runs it)")
    run("applied once", lambda: c.get_item(TableName=T, Key=key("b"), ConsistentRead=True))
    run.differs("the same token with another request", transact([bump("a", "1")], ClientRequestToken="token-2"),
                aws=("error", "IdempotentParameterMismatchException", 400), moto={},
                why="a token reused for another request is refused (moto applies it)")


def moto_differences_scenario(run: Run) -> None:
    c = run.client
    create(c)
    c.put_item(TableName=T, Item={**key("a"), "n": {"N": "01.50"}, "e": {"N": "1E+2"}})
    run.differs("numbers are stored canonically", lambda: c.get_item(TableName=T, Key=key("a"))["Item"],
                aws={**key("a"), "n": {"N": "1.5"}, "e": {"N": "100"}},
                moto={**key("a"), "n": {"N": "01.50"}, "e": {"N": "1E+2"}},
                why="DynamoDB trims leading/trailing zeros and exponents")
    run.differs("duplicates in a set", lambda: c.put_item(TableName=T, Item={**key("b"), "s": {"SS": ["x", "x"]}}),
                aws=INVALID, moto={}, why="a set with duplicates is a ValidationException")
    run.differs("unused ExpressionAttributeValues in PutItem", lambda: c.put_item(
        TableName=T, Item=key("c"), ConditionExpression="attribute_exists(#k)", ExpressionAttributeNames={"#k": "k"},
        ExpressionAttributeValues={":x": {"N": "1"}}), aws=INVALID, moto=CONDITION_FAILED,
        why="unused values are a ValidationException in every operation (moto checks UpdateItem only)")
    run.differs("ExpressionAttributeValues without an expression", lambda: c.put_item(
        TableName=T, Item=key("d"), ExpressionAttributeValues={":x": {"N": "1"}}), aws=INVALID, moto={},
        why="values without an expression are a ValidationException")
    run.differs("407,000 bytes", lambda: c.put_item(TableName=T, Item={**key("big"), "d": {"B": b"x" * 407_000}}),
                aws={}, moto=INVALID, why="the item limit is 400 KB = 409,600 bytes (moto: 405,000)")


@pytest.mark.parametrize("scenario", [tables_scenario, items_scenario, updates_scenario, conditions_scenario,
                                      scans_scenario, batch_scenario, transactions_scenario,
                                      moto_differences_scenario], ids=lambda f: f.__name__)
def test_api_contract(aws: LocalAWS, ids: Ids, scenario: Callable[[Run], None]) -> None:
    check_contract(aws, ids, scenario)


# --- the SDK's own calls --------------------------------------------------------------------


def done(fn: Callable[[], Any]) -> Callable[[], str]:
    """A step whose result is not comparable (the table object): "done" once it returned."""
    return lambda: (fn(), "done")[1]


def lease_table_scenario(run: Run) -> None:
    c = run.client
    table = LeaseTable(c, "leases", retry_attempts=1, clock=FakeClock(100.0))
    run("ensure_table creates", done(table.ensure_table))
    run("ensure_table again", done(table.ensure_table))
    run("describe", lambda: pick(c.describe_table(TableName="leases")["Table"], "KeySchema", "AttributeDefinitions",
                                 "BillingModeSummary", "TableStatus"))
    k1 = run("create k1", lambda: table.create_lease_if_absent("k1"))
    run("create k1 again", lambda: table.create_lease_if_absent("k1"))
    k2 = run("create k2 held", lambda: table.create_lease_if_absent("k2", parents=["p0"], checkpoint=Checkpoint("5"), owner="a",
                                                                    session="tok-a"))
    run("get k1", lambda: table.get("k1"))
    run("get a missing lease", lambda: table.get("nope"))
    free = k1
    k1 = run("take k1", lambda: table.take(free, "a", session="tok-a"))
    run("take k1 from a stale read", lambda: table.take(free, "b"))
    stale = k1
    k1 = run("renew", lambda: table.renew(stale, session="tok-a"))
    run("renew from a stale read", lambda: table.renew(stale))
    k1 = run("renew setting a hand-off", lambda: table.renew(k1, pending_handoff="b"))
    k1 = run("renew clearing it", lambda: table.renew(k1, pending_handoff=None))
    k1 = run("checkpoint 100", lambda: table.checkpoint(k1, "100", session="tok-a"))
    k1 = run("checkpoint 200/3", lambda: table.checkpoint(k1, Checkpoint("200", 3)))
    behind = k1.evolve(checkpoint=Checkpoint("100"))
    run("checkpoint behind the stored one", lambda: table.checkpoint(behind, "150"))
    run("checkpoint behind the local one", lambda: table.checkpoint(k1, "150"))
    run("checkpoint by a lost holder", lambda: table.checkpoint(k1.evolve(counter=k1.counter - 1), "300"))
    k1 = run("prepare a checkpoint", lambda: table.prepare_checkpoint(k1, "250"))
    run("prepare behind the stored one", lambda: table.prepare_checkpoint(k1.evolve(checkpoint=Checkpoint("100")),
                                                                           "150"))
    k1 = run("commit it", lambda: table.checkpoint(k1, "250"))
    k1 = run("hand off to b", lambda: table.handoff(k1, "b"))
    k1 = run("adopt by b", lambda: table.adopt(k1, session="tok-b"))
    k1 = run("release", lambda: table.release(k1))
    sa = run("session a, first", lambda: table.renew_session("a", "tok-a", None))
    sa = run("session a, next", lambda: table.renew_session("a", "tok-a", sa.counter, plan_version=7))
    run("session a from another process", lambda: table.renew_session("a", "tok-other", sa.counter))
    run("session b, first", lambda: table.renew_session("b", "tok-b", None))
    check = SessionCheck("a", "tok-a", sa.counter)
    k2 = run("take k2 proving a's session", lambda: table.take(k2, "b", session="tok-b", check=check))
    run("take k2 with a stale session proof", lambda: table.take(k2, "c", check=SessionCheck("b", "tok-b", 99)))
    run("delete a's session with another token", lambda: table.delete_session("a", "tok-x"))
    run("delete a's session", lambda: table.delete_session("a", "tok-a", sa.counter))
    run("session a after its deletion", lambda: table.renew_session("a", "tok-a", sa.counter))
    run("heartbeat, first", lambda: table.heartbeat("m1", "inc-1", None))
    run("heartbeat, next", lambda: table.heartbeat("m1", "inc-1", 1))
    run("heartbeat of a duplicate", lambda: table.heartbeat("m1", "inc-2", 1))
    run("delete member, wrong incarnation", lambda: table.delete_member("m1", incarnation="inc-2"))
    run("delete member", lambda: table.delete_member("m1", incarnation="inc-1", heartbeat=2))
    run("heartbeat after deletion", lambda: table.heartbeat("m1", "inc-1", 2))
    run("read_rows", lambda: table.read_rows(["k1", "k2", "nope"], ["a", "b", "zz"], consistent=True))
    run("get_many", lambda: table.get_many(["k1", "k2"]))
    run("plant a corrupt row", lambda: c.put_item(TableName="leases", Item={"leaseKey": {"S": "bad"},
                                                                              "leaseCounter": {"S": "x"}}))
    run("scan in pages of 2", lambda: table.scan(page_size=2))
    run("scan eventually consistent", lambda: table.scan(consistent=False))
    run("corrupt rows", lambda: table.corrupt_rows)
    run("list_leases", table.list_leases)
    run("delete from a stale read", lambda: table.delete(free))
    run("delete", lambda: table.delete(k2))
    run("table contents", lambda: c.scan(TableName="leases", ConsistentRead=True)["Items"])


def payload(seed: str, size: int) -> bytes:
    """``size`` incompressible bytes."""
    out = b""
    while len(out) < size:
        out += hashlib.sha256(f"{seed}{len(out)}".encode()).digest()
    return out[:size]


def manifest_scenario(run: Run) -> None:
    table = LeaseTable(run.client, "leases", retry_attempts=1, clock=FakeClock(5.0)).ensure_table()
    store = ManifestStore(table, "plan", chunk_bytes=40)
    run("no head yet", lambda: store.head(consistent=True))
    h0 = run("claim", lambda: store.claim("a", None))
    run("claim from no head again", lambda: store.claim("b", None))
    h0 = run("renew", lambda: store.renew(h0))
    h1 = run("publish v1 in several chunks", lambda: store.publish(h0, payload("one", 150)))
    run("read v1", lambda: store.read(h1))
    run("a conflicting publish", lambda: store.publish(h0, payload("two", 90)))
    h2 = run("publish v2", lambda: store.publish(h1, payload("two", 90)))
    h3 = run("publish v3", lambda: store.publish(h2, payload("three", 60)))
    run("read v1 after v3", lambda: store.read(h1))
    run("read v3", lambda: store.read(h3))
    run("claim from a stale head", lambda: store.claim("b", h2))
    run("claim by b", lambda: store.claim("b", h3))
    run("head", lambda: store.head())
    run("table contents", lambda: run.client.scan(TableName="leases", ConsistentRead=True)["Items"])


@pytest.mark.parametrize("scenario", [lease_table_scenario, manifest_scenario], ids=lambda f: f.__name__)
def test_sdk_contract(aws: LocalAWS, ids: Ids, scenario: Callable[[Run], None]) -> None:
    check_contract(aws, ids, scenario)


# --- hooks (memory only) --------------------------------------------------------------------


@pytest.fixture
def table() -> Iterator[LeaseTable]:
    yield LeaseTable(MemoryDynamoDB(), "leases", retry_attempts=3, retry_max_wait=0.001).ensure_table()


def memory(table: LeaseTable) -> MemoryDynamoDB:
    client = table.client
    assert isinstance(client, MemoryDynamoDB)
    return client


def test_an_error_before_applying_is_retried_then_named(table: LeaseTable) -> None:
    lease = table.create_lease_if_absent("k", owner="a")
    assert lease is not None
    fake = memory(table)
    fake.faults = fault_sequence({"UpdateItem": [Fault.throttled()] * 3})
    with pytest.raises(LeaseTableUnavailableError, match="ProvisionedThroughputExceededException"):
        table.renew(lease)
    assert fake.calls["UpdateItem"] == 3
    assert table.get("k") == lease  # nothing applied
    assert table.renew(lease).counter == 2


def test_an_ambiguous_write_is_applied_once_and_recognised(table: LeaseTable) -> None:
    lease = table.create_lease_if_absent("k", owner="a")
    assert lease is not None
    fake = memory(table)
    fake.faults = fault_sequence({"UpdateItem": [Fault.ambiguous()]})
    renewed = table.renew(lease)  # the retry fails its condition on its own write token
    assert renewed.counter == 2 == fake.calls["UpdateItem"]
    assert table.get("k") == renewed


def test_an_ambiguous_take_is_recognised_by_its_write_token(table: LeaseTable) -> None:
    lease = table.create_lease_if_absent("k", owner="a", session="tok-a")
    session = table.renew_session("a", "tok-a", None)
    assert lease is not None
    fake = memory(table)
    fake.faults = fault_sequence({"UpdateItem": [Fault.ambiguous()]})
    before = fake.calls["UpdateItem"]
    taken = table.take(lease, "b", check=SessionCheck("a", "tok-a", session.counter))
    assert taken is not None and taken.counter == 2
    assert fake.calls["UpdateItem"] - before == 2  # the retry's condition failed on its own earlier write
    assert table.get("k") == taken


def test_connection_errors_are_the_real_botocore_ones() -> None:
    fake = MemoryDynamoDB()
    create(fake)
    for fault, applied in ((Fault.unreachable(), False), (Fault.timeout(), False), (Fault.timeout(applied=True), True),
                           (Fault.connection_closed(applied=True), True)):
        fake.faults = fault_sequence({"PutItem": [fault]})
        with pytest.raises((botocore.exceptions.HTTPClientError, botocore.exceptions.ConnectionError)) as caught:
            fake.put_item(TableName=T, Item=key(fault.code))
        assert type(caught.value).__name__ == fault.code
        assert is_retryable(caught.value)
        assert (fake.item(fault.code) is not None) is applied


def test_error_answers_are_classified_like_aws() -> None:
    fake = MemoryDynamoDB()
    create(fake)
    for fault, status, retryable in ((Fault.throttled(), 400, True), (Fault.internal(), 500, True),
                                     (Fault(code="ThrottlingException"), 400, True),
                                     (Fault(code="ValidationException", message="bad"), 400, False)):
        fake.faults = fault_sequence({"GetItem": [fault]})
        with pytest.raises(ClientError) as caught:
            fake.get_item(TableName=T, Key=key("a"))
        response = caught.value.response
        assert response["Error"]["Code"] == fault.code
        assert response["ResponseMetadata"]["HTTPStatusCode"] == status
        assert caught.value.operation_name == "GetItem"
        assert is_retryable(caught.value) is retryable


def test_access_denied_names_the_action_and_the_table(table: LeaseTable) -> None:
    fake = memory(table)
    fake.faults = lambda op, request: Fault.denied() if op == "GetItem" else None
    with pytest.raises(LeaseTableAccessDeniedError) as caught:
        table.get("k")
    assert caught.value.action == "dynamodb:GetItem"
    cause = caught.value.__cause__
    assert isinstance(cause, ClientError) and is_access_denied(cause) and not is_retryable(cause)
    assert ("User: arn:aws:iam::123456789012:user/sim is not authorized to perform: dynamodb:GetItem on resource: "
            "arn:aws:dynamodb:us-east-1:123456789012:table/leases") in str(cause)
    assert fake.calls["GetItem"] == 1


def test_unprocessed_keys_are_fetched_again(table: LeaseTable) -> None:
    for k in ("a", "b", "c"):
        table.create_lease_if_absent(k)
    fake = memory(table)
    fake.faults = fault_sequence({"BatchGetItem": [Fault.unprocessed_keys(2)]})
    assert sorted(k for k, lease in table.get_many(["a", "b", "c"], consistent=True).items() if lease) == ["a", "b", "c"]
    assert fake.calls["BatchGetItem"] == 2
    fake.faults = fault_sequence({"BatchGetItem": [Fault.unprocessed_keys(5)]})
    response = fake.batch_get_item(RequestItems={"leases": {"Keys": [{"leaseKey": {"S": "a"}}], "ConsistentRead": True}})
    assert response["Responses"] == {"leases": []}
    assert response["UnprocessedKeys"] == {"leases": {"Keys": [{"leaseKey": {"S": "a"}}], "ConsistentRead": True}}


def test_faults_are_checked() -> None:
    with pytest.raises(ValueError):
        Fault(kind="connection", code="Nope")
    with pytest.raises(ValueError):
        Fault(kind="connection", code="EndpointConnectionError", applied=True)
    with pytest.raises(ValueError):
        Fault(kind="unprocessed")
    fake = MemoryDynamoDB(faults=lambda op, request: Fault.unprocessed_keys(1))
    with pytest.raises(ValueError, match="BatchGetItem"):
        create(fake)


def test_eventually_consistent_reads_may_return_older_versions() -> None:
    asked: list[tuple[str, int]] = []
    back = {"a": 1}

    def stale_reads(k: str, versions: int) -> int:
        asked.append((k, versions))
        return back.get(k, 0)

    fake = MemoryDynamoDB(stale_reads=stale_reads, history=3)
    create(fake)
    fake.put_item(TableName=T, Item={**key("a"), "v": {"N": "1"}})
    assert "Item" not in fake.get_item(TableName=T, Key=key("a"))  # created, not visible yet
    assert asked == [("a", 2)]
    fake.put_item(TableName=T, Item={**key("a"), "v": {"N": "2"}})
    assert fake.get_item(TableName=T, Key=key("a"))["Item"]["v"] == {"N": "1"}
    assert fake.get_item(TableName=T, Key=key("a"), ConsistentRead=True)["Item"]["v"] == {"N": "2"}
    for v in "345":
        fake.put_item(TableName=T, Item={**key("a"), "v": {"N": v}})
    back["a"] = 10  # clamped to the 3 versions kept
    assert fake.get_item(TableName=T, Key=key("a"))["Item"]["v"] == {"N": "3"}
    fake.delete_item(TableName=T, Key=key("a"))
    back["a"] = 1
    assert fake.get_item(TableName=T, Key=key("a"))["Item"]["v"] == {"N": "5"}  # deleted, still visible
    assert fake.scan(TableName=T)["Items"] == [{**key("a"), "v": {"N": "5"}}]
    assert fake.scan(TableName=T, ConsistentRead=True)["Items"] == []
    request = {T: {"Keys": [key("a")]}}
    assert fake.batch_get_item(RequestItems=request)["Responses"][T] == [{**key("a"), "v": {"N": "5"}}]
    assert fake.batch_get_item(RequestItems={T: {**request[T], "ConsistentRead": True}})["Responses"][T] == []
    back["a"] = 0
    assert "Item" not in fake.get_item(TableName=T, Key=key("a"))


def test_conditions_and_writes_see_the_current_item_whatever_reads_see() -> None:
    table = LeaseTable(MemoryDynamoDB(stale_reads=lambda k, n: 2), "leases").ensure_table()
    lease = table.create_lease_if_absent("k", owner="a")
    assert lease is not None
    for _ in range(5):
        lease = table.renew(lease)
    assert table.get("k") == lease  # GetItem with ConsistentRead
    stale = table.get_many(["k"])["k"]
    assert stale is not None and stale.counter == lease.counter - 2
    assert table.scan(consistent=False).leases["k"].counter == lease.counter - 2
    assert table.scan().leases["k"] == lease


def test_corrupt_plants_raw_rows(table: LeaseTable) -> None:
    fake = memory(table)
    fake.corrupt("k", {"leaseCounter": {"S": "not a number"}})
    assert fake.item("k") == {"leaseCounter": {"S": "not a number"}, "leaseKey": {"S": "k"}}
    assert "k" in table.scan().corrupt
    fake.corrupt("k", None)
    assert fake.item("k") is None and table.scan().corrupt == {}
    with pytest.raises(ValueError):
        fake.corrupt("k", {"leaseKey": {"S": "other"}})


def test_conditions_over_planted_malformed_values_fail_cleanly() -> None:
    fake = MemoryDynamoDB()
    create(fake)
    fake.corrupt("x", {"a": "untyped", "b": {"S": 5}, "c": {"SS": [["unhashable"]]}, "d": {}})
    values = {":v": {"S": "x"}, ":n": {"N": "1"}, ":set": {"SS": ["x"]}}
    for expression in ("#a = :v", "#a <> :v", "#b < :v", "#b = :v", "begins_with(#b, :v)", "size(#b) = :n",
                       "#c = :set", "contains(#c, :v)", "#d = :v", "attribute_exists(#a)"):
        used = {p: p[1:] for p in re.findall(r"#\w+", expression)}
        request: dict[str, Any] = {"TableName": T, "Key": key("x"), "ConditionExpression": expression,
                                   "ExpressionAttributeNames": used}
        if ":" in expression:
            request["ExpressionAttributeValues"] = {k: v for k, v in values.items() if k in expression}
        try:
            fake.delete_item(**request, ReturnValues="ALL_OLD")
        except ClientError as exc:
            assert exc.response["Error"]["Code"] == "ConditionalCheckFailedException", expression
        else:
            fake.corrupt("x", {"a": "untyped", "b": {"S": 5}, "c": {"SS": [["unhashable"]]}, "d": {}})


def test_the_same_calls_give_the_same_answers_and_tables(ids: Ids) -> None:
    runs = []
    for _ in range(2):
        ids.n = 0
        run = Run(MemoryDynamoDB(), moto=False)
        lease_table_scenario(run)
        runs.append(run)
    assert runs[0].steps == runs[1].steps
    assert runs[0].client.items() == runs[1].client.items()


def test_items_are_copied_on_the_way_in_and_out() -> None:
    fake = MemoryDynamoDB()
    create(fake)
    item = {**key("a"), "l": {"L": [{"S": "x"}]}, "m": {"M": {"q": {"SS": ["y"]}}}}
    fake.put_item(TableName=T, Item=item)
    item["l"]["L"].append({"S": "changed"})
    got = fake.get_item(TableName=T, Key=key("a"))["Item"]
    got["m"]["M"]["q"]["SS"].append("changed")
    fake.items()["a"]["l"]["L"].clear()
    listed = fake.item("a")
    assert listed is not None
    listed["k"]["S"] = "changed"
    assert fake.items() == {"a": {**key("a"), "l": {"L": [{"S": "x"}]}, "m": {"M": {"q": {"SS": ["y"]}}}}}


def test_calls_are_counted_and_requests_checked_like_boto3() -> None:
    fake = MemoryDynamoDB()
    create(fake)
    fake.put_item(TableName=T, Item=key("a"))
    fake.get_item(TableName=T, Key=key("a"))
    assert fake.calls == {"CreateTable": 1, "PutItem": 1, "GetItem": 1}
    assert fake.writes == 1
    with pytest.raises(ParamValidationError):
        fake.put_item(TableName=T, Item={**key("b"), "n": {"N": 3}})
    with pytest.raises(ParamValidationError):
        fake.get_item(TableName=T, Key=key("a"), Bogus=1)
    with pytest.raises(ParamValidationError):
        fake.get_item(Key=key("a"))
    with pytest.raises(NotImplementedError):
        fake.get_item(TableName=T, Key=key("a"), ProjectionExpression="k")
    with pytest.raises(NotImplementedError):
        fake.update_item(TableName=T, Key=key("a"), UpdateExpression="SET #m.#x = :v",
                         ExpressionAttributeNames={"#m": "m", "#x": "x"}, ExpressionAttributeValues={":v": {"N": "1"}})


def test_one_lock_makes_concurrent_calls_atomic() -> None:
    fake = MemoryDynamoDB()
    create(fake)

    def add() -> None:
        for _ in range(300):
            fake.update_item(TableName=T, Key=key("n"), UpdateExpression="ADD #c :one",
                             ExpressionAttributeNames={"#c": "c"}, ExpressionAttributeValues={":one": {"N": "1"}})

    threads = [threading.Thread(target=add) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert fake.item("n") == {**key("n"), "c": {"N": "2400"}}


def test_renewals_are_fast(capsys: pytest.CaptureFixture[str]) -> None:
    fake = MemoryDynamoDB()
    table = LeaseTable(fake, "leases").ensure_table()
    lease = table.create_lease_if_absent("k", owner="a", session="tok-a")
    assert lease is not None
    start = time.perf_counter()
    for _ in range(10_000):
        lease = table.renew(lease, session="tok-a")
    elapsed = time.perf_counter() - start
    with capsys.disabled():
        print(f"\n10,000 LeaseTable.renew calls on MemoryDynamoDB: {elapsed:.2f} s ({elapsed / 10_000 * 1e6:.0f} us each)")
    assert lease.counter == 10_001 and fake.calls["UpdateItem"] == 10_000
    assert elapsed < 20
