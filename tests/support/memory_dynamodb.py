"""An in-memory stand-in for a low-level boto3 DynamoDB client, for deterministic simulations.

:class:`MemoryDynamoDB` answers the calls the lease table makes (CreateTable, DescribeTable,
DeleteTable, GetItem, PutItem, UpdateItem, DeleteItem, Scan, BatchGetItem, TransactWriteItems)
with DynamoDB's semantics, request and response shapes and error codes, using plain dict
operations under one lock: no I/O, no clock, no randomness. ``tests/kinesis/lease_loop/test_memory_dynamodb.py``
proves it answers like moto's DynamoDB for that subset; where moto is wrong against AWS, it
follows AWS (each such case is listed there):

* ``a <> b`` is true when an operand is missing (also both), ``a = b`` with both missing is
  false, an order comparison (``<`` ...) of different types is false (moto answers 500);
* an undefined ``#name``/``:value`` placeholder, a syntax error, a malformed
  ``ExclusiveStartKey`` (moto: 500), unused ``ExpressionAttributeValues`` in PutItem/DeleteItem,
  ``ExpressionAttributeValues`` without an expression and duplicate set elements are
  ``ValidationException``s;
* numbers are stored canonically (``"01.50"`` reads back as ``"1.5"``, ``"1E+2"`` as ``"100"``);
* Scan returns ``LastEvaluatedKey`` whenever it stopped at ``Limit`` (also at the table's end);
* TransactWriteItems honours ``ClientRequestToken`` (a repeat of an applied request succeeds
  without applying again; the same token with another request is an
  ``IdempotentParameterMismatchException``), and an item-dependent validation error of an
  Update (say ``SET a = missing + :one``) cancels the transaction with a ``ValidationError``
  reason instead of raising a ``ValidationException``;
* CreateTable answers ``CREATING`` (DescribeTable then ``ACTIVE`` at once); items may be 400 KB
  (409,600 bytes, sized as AWS documents it).

Outside the subset (nested document paths in an UpdateExpression, ProjectionExpression,
indexes, the legacy ``Expected``/``AttributeUpdates`` parameters, Query...) it raises
``NotImplementedError`` rather than answering differently from DynamoDB. Not modelled: reserved
words in expressions (accepted), capacity and throttling (see the ``faults`` hook), transaction
conflicts between concurrent calls (the lock serialises them), and the 10-minute expiry of
client request tokens (remembered for the instance's life).

Hooks for a simulator (see :class:`MemoryDynamoDB`): ``faults`` (errors, ambiguous writes,
connection errors, unprocessed keys), ``stale_reads`` (eventually consistent reads of older
versions), ``corrupt`` (plant raw rows), ``items``/``item`` (deep copies for checkers) and
``calls`` (requests per operation).
"""

from __future__ import annotations

import copy
import re
import threading
from bisect import bisect_right
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Context, Decimal, InvalidOperation
from functools import lru_cache
from typing import Any, Literal

import botocore.exceptions

Item = dict[str, Any]
"""An item: attribute name -> typed attribute value (``{"S": "x"}``, ``{"N": "3"}``...)."""
Names = Mapping[str, str]
Values = Mapping[str, Any]
KeyT = Any
"""A stored item's key: the hash key value (str, Decimal or bytes), or (hash, range)."""

ITEM_LIMIT = 400 * 1024
"""DynamoDB's item size limit, in bytes (attribute names and values)."""
PAGE_LIMIT = 1024 * 1024
"""Scan stops a page after this many bytes of items."""
BATCH_GET_LIMIT = 16 * 1024 * 1024
"""BatchGetItem leaves keys unprocessed past this many bytes of items."""
HASH_KEY_LIMIT = 2048
RANGE_KEY_LIMIT = 1024
ENDPOINT = "https://dynamodb.{region}.amazonaws.com"
VALIDATION = "ValidationException"
CONDITION_FAILED = "The conditional request failed"
_CREATED = datetime(2020, 1, 1, tzinfo=UTC)
_NUMBER = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?")
_MATH = Context(prec=80)
_SETS = {"SS": "S", "NS": "N", "BS": "B"}
_TYPE_NAMES = {"S": "STRING", "N": "NUMBER", "B": "BINARY", "BOOL": "BOOLEAN", "NULL": "NULL",
               "L": "LIST", "M": "MAP", "SS": "SS", "NS": "NS", "BS": "BS"}

_MODELED = {
    "ConditionalCheckFailedException": "message", "ResourceNotFoundException": "message",
    "ResourceInUseException": "message", "ProvisionedThroughputExceededException": "message",
    "RequestLimitExceeded": "message", "ThrottlingException": "message", "InternalServerError": "message",
    "ItemCollectionSizeLimitExceededException": "message", "TransactionConflictException": "message",
    "LimitExceededException": "message", "TransactionCanceledException": "Message",
    "TransactionInProgressException": "Message", "IdempotentParameterMismatchException": "Message",
}
"""Error shapes botocore parses: their message field is copied to the error response's top level."""

_DEFAULT_MESSAGES = {
    "ProvisionedThroughputExceededException": "The level of configured provisioned throughput for the "
    "table was exceeded. Consider increasing your provisioning level with the UpdateTable API.",
    "ThrottlingException": "Rate of requests exceeds the allowed throughput.",
    "RequestLimitExceeded": "Throughput exceeds the current throughput limit for your account.",
    "InternalServerError": "Internal server error",
    "ServiceUnavailable": "The service is currently unavailable or busy.",
    "TransactionConflictException": "Transaction is ongoing for the item",
}
_SERVER_STATUS = {"InternalServerError": 500, "InternalFailure": 500, "ServiceUnavailable": 503}

_PARAMS: dict[str, tuple[frozenset[str], frozenset[str], frozenset[str]]] = {}
"""Operation -> (required parameters, supported ones, ones of the real API not supported here)."""


def _params(op: str, required: str, supported: str, unsupported: str) -> None:
    _PARAMS[op] = (frozenset(required.split()), frozenset((required + " " + supported).split()),
                   frozenset(unsupported.split()))


_params("CreateTable", "TableName KeySchema AttributeDefinitions",
        "BillingMode ProvisionedThroughput Tags TableClass DeletionProtectionEnabled",
        "LocalSecondaryIndexes GlobalSecondaryIndexes StreamSpecification SSESpecification WarmThroughput "
        "ResourcePolicy OnDemandThroughput GlobalTableSourceArn GlobalTableSettingsReplicationMode VectorIndexes")
_params("DescribeTable", "TableName", "", "")
_params("DeleteTable", "TableName", "", "")
_params("GetItem", "TableName Key", "ConsistentRead ReturnConsumedCapacity",
        "AttributesToGet ProjectionExpression ExpressionAttributeNames")
_params("PutItem", "TableName Item",
        "ReturnValues ReturnConsumedCapacity ReturnItemCollectionMetrics ConditionExpression "
        "ExpressionAttributeNames ExpressionAttributeValues ReturnValuesOnConditionCheckFailure",
        "Expected ConditionalOperator")
_params("UpdateItem", "TableName Key",
        "ReturnValues ReturnConsumedCapacity ReturnItemCollectionMetrics UpdateExpression ConditionExpression "
        "ExpressionAttributeNames ExpressionAttributeValues ReturnValuesOnConditionCheckFailure",
        "AttributeUpdates Expected ConditionalOperator")
_params("DeleteItem", "TableName Key",
        "ReturnValues ReturnConsumedCapacity ReturnItemCollectionMetrics ConditionExpression "
        "ExpressionAttributeNames ExpressionAttributeValues ReturnValuesOnConditionCheckFailure",
        "Expected ConditionalOperator")
_params("Scan", "TableName",
        "Limit ExclusiveStartKey ConsistentRead FilterExpression ExpressionAttributeNames "
        "ExpressionAttributeValues ReturnConsumedCapacity",
        "IndexName AttributesToGet Select ScanFilter ConditionalOperator TotalSegments Segment ProjectionExpression")
_params("BatchGetItem", "RequestItems", "ReturnConsumedCapacity", "")
_params("TransactWriteItems", "TransactItems", "ClientRequestToken ReturnConsumedCapacity ReturnItemCollectionMetrics",
        "")


# --- errors ---------------------------------------------------------------------------------


class _Fail(Exception):
    """A DynamoDB error answer, turned into a ``ClientError`` naming the operation."""

    def __init__(self, code: str, message: str, extra: Mapping[str, Any] | None = None):
        super().__init__(message)
        self.code = code
        self.message = message
        self.extra = extra


def _invalid(message: str) -> _Fail:
    return _Fail(VALIDATION, message)


def client_error(operation: str, code: str, message: str = "", status: int | None = None,
                 extra: Mapping[str, Any] | None = None, request_id: str = "memory") -> botocore.exceptions.ClientError:
    """The ``ClientError`` botocore raises for the error answer ``code`` to ``operation``."""
    message = message or _DEFAULT_MESSAGES.get(code, code)
    status = status if status is not None else _SERVER_STATUS.get(code, 400)
    response: dict[str, Any] = {
        "Error": {"Code": code, "Message": message},
        "ResponseMetadata": {"RequestId": request_id, "HTTPStatusCode": status, "HTTPHeaders": {}, "RetryAttempts": 0},
    }
    if code in _MODELED:
        response[_MODELED[code]] = message
    if extra:
        response.update(extra)
    return botocore.exceptions.ClientError(response, operation)


def _param_error(report: str) -> botocore.exceptions.ParamValidationError:
    """What boto3 raises client-side for a malformed request."""
    return botocore.exceptions.ParamValidationError(report=report)


def _bad_type(where: str, value: Any, valid: str) -> botocore.exceptions.ParamValidationError:
    return _param_error(f"Invalid type for parameter {where}, value: {value!r}, type: {type(value)}, valid types: {valid}")


# --- faults -----------------------------------------------------------------------------------

FaultKind = Literal["error", "connection", "unprocessed"]
CONNECTION_ERRORS: dict[str, Callable[..., Exception]] = {
    "EndpointConnectionError": botocore.exceptions.EndpointConnectionError,
    "ConnectTimeoutError": botocore.exceptions.ConnectTimeoutError,
    "ReadTimeoutError": botocore.exceptions.ReadTimeoutError,
    "ConnectionClosedError": botocore.exceptions.ConnectionClosedError,
}
"""The botocore connection errors a :class:`Fault` may raise (the first two never reach the server)."""


@dataclass(frozen=True)
class Fault:
    """What goes wrong with one call (returned by :attr:`MemoryDynamoDB.faults`).

    * ``kind="error"``: answer the AWS error ``code`` (HTTP ``status``, by default 500 for
      ``InternalServerError``, 503 for ``ServiceUnavailable``, else 400) with ``message`` (by
      default AWS's; for ``AccessDeniedException`` AWS's "User ... is not authorized to perform:
      dynamodb:<Operation> on resource: <table ARN>");
    * ``kind="connection"``: raise the botocore exception ``code`` (a :data:`CONNECTION_ERRORS`
      name: timeouts and resets are retried by the SDK like real ones);
    * ``kind="unprocessed"`` (BatchGetItem only): answer normally but leave the last
      ``unprocessed`` keys of the request in ``UnprocessedKeys`` (what throttling does).

    ``applied=True`` applies the call first and then fails anyway (an ambiguous outcome: the
    write happened, the answer was lost or was a 500); a connection that was never made
    (``EndpointConnectionError``, ``ConnectTimeoutError``) cannot be ``applied``.
    """

    kind: FaultKind = "error"
    code: str = "InternalServerError"
    status: int | None = None
    message: str = ""
    applied: bool = False
    unprocessed: int = 0

    def __post_init__(self) -> None:
        if self.kind == "connection":
            if self.code not in CONNECTION_ERRORS:
                raise ValueError(f"a connection fault's code is one of {sorted(CONNECTION_ERRORS)}, got {self.code!r}")
            if self.applied and self.code in ("EndpointConnectionError", "ConnectTimeoutError"):
                raise ValueError(f"{self.code} never reaches the server: it cannot be applied")
        elif self.kind == "unprocessed":
            if self.unprocessed < 1 or self.applied:
                raise ValueError("an unprocessed-keys fault leaves >= 1 keys and is not 'applied'")
        elif self.kind != "error":
            raise ValueError(f"unknown fault kind {self.kind!r}")

    @classmethod
    def throttled(cls, *, applied: bool = False) -> Fault:
        """ProvisionedThroughputExceededException (400), retried by the SDK."""
        return cls(code="ProvisionedThroughputExceededException", applied=applied)

    @classmethod
    def internal(cls, *, applied: bool = False) -> Fault:
        """InternalServerError (500); ``applied=True`` is an ambiguous write."""
        return cls(code="InternalServerError", applied=applied)

    @classmethod
    def ambiguous(cls) -> Fault:
        """The call is applied and then answered with a 500 InternalServerError."""
        return cls.internal(applied=True)

    @classmethod
    def denied(cls, message: str = "") -> Fault:
        """AccessDeniedException (400), with AWS's message naming the action and the table."""
        return cls(code="AccessDeniedException", message=message)

    @classmethod
    def timeout(cls, *, applied: bool = False) -> Fault:
        """A botocore ReadTimeoutError (the request may have been applied)."""
        return cls(kind="connection", code="ReadTimeoutError", applied=applied)

    @classmethod
    def unreachable(cls) -> Fault:
        """A botocore EndpointConnectionError (never applied)."""
        return cls(kind="connection", code="EndpointConnectionError")

    @classmethod
    def connection_closed(cls, *, applied: bool = False) -> Fault:
        """A botocore ConnectionClosedError (the answer was lost; maybe applied)."""
        return cls(kind="connection", code="ConnectionClosedError", applied=applied)

    @classmethod
    def unprocessed_keys(cls, count: int) -> Fault:
        """BatchGetItem answers, leaving its last ``count`` keys unprocessed."""
        return cls(kind="unprocessed", unprocessed=count)


FaultHook = Callable[[str, dict[str, Any]], Fault | None]
"""``faults(operation_name, request)``: the fault of this call, or None."""
StaleReadHook = Callable[[str, int], int]
"""``stale_reads(key, history_len)``: how many versions back an eventually consistent read goes."""


# --- attribute values -------------------------------------------------------------------------


def _canonical_number(text: str) -> str:
    """``text`` as DynamoDB stores it (no leading/trailing zeros, no exponent), validated."""
    if text.isascii() and text.isdigit() and (text[0] != "0" or len(text) == 1) and len(text) <= 38:
        return text
    if not _NUMBER.fullmatch(text):
        raise _invalid("A value provided cannot be converted into a number")
    number = Decimal(text).normalize(_MATH)
    if not number:
        return "0"
    if len(number.as_tuple().digits) > 38:
        raise _invalid("Attempting to store more than 38 significant digits in a Number")
    if number.adjusted() > 125:
        raise _invalid("Number overflow. Attempting to store a number with magnitude larger than supported range")
    if number.adjusted() < -130:
        raise _invalid("Number underflow. Attempting to store a number with magnitude smaller than supported range")
    return format(number, "f")


def _blob(value: Any, where: str) -> bytes:
    if isinstance(value, bytes):
        return value
    if isinstance(value, bytearray):
        return bytes(value)
    if isinstance(value, str):
        return value.encode()
    raise _bad_type(where, value, "<class 'bytes'>, <class 'bytearray'>, file-like object")


def _scalar(t: str, x: Any, where: str) -> Any:
    if t == "S":
        if not isinstance(x, str):
            raise _bad_type(where, x, "<class 'str'>")
        return x
    if t == "N":
        if not isinstance(x, str):
            raise _bad_type(where, x, "<class 'str'>")
        return _canonical_number(x)
    return _blob(x, where)


def normalize(value: Any, where: str = "value") -> dict[str, Any]:
    """A validated, canonical deep copy of the attribute value ``value`` (as DynamoDB stores it).

    Malformed shapes raise boto3's ``ParamValidationError``; values DynamoDB refuses (bad
    numbers, empty or duplicate sets, ``NULL: False``) raise a ``ValidationException``."""
    if type(value) is dict and len(value) == 1:  # the common scalar cases first
        x = value.get("S")
        if type(x) is str:
            return {"S": x}
        x = value.get("N")
        if type(x) is str:
            return {"N": _canonical_number(x)}
    if not isinstance(value, dict):
        raise _bad_type(where, value, "<class 'dict'>")
    if len(value) != 1:
        raise _param_error(f"Invalid number of parameters set for tagged union structure {where}. Can only set "
                           "one of the following keys: S, N, B, SS, NS, BS, M, L, NULL, BOOL.")
    ((t, x),) = value.items()
    if t == "S" and type(x) is str:
        return {"S": x}
    if t in ("S", "N", "B"):
        return {t: _scalar(t, x, f"{where}.{t}")}
    if t in ("BOOL", "NULL"):
        if not isinstance(x, bool):
            raise _bad_type(f"{where}.{t}", x, "<class 'bool'>")
        if t == "NULL" and not x:
            raise _invalid("One or more parameter values were invalid: Null attribute value types must have the value of true")
        return {t: x}
    if t == "L":
        if not isinstance(x, list | tuple):
            raise _bad_type(f"{where}.L", x, "<class 'list'>, <class 'tuple'>")
        return {"L": [normalize(e, f"{where}.L[{i}]") for i, e in enumerate(x)]}
    if t == "M":
        if not isinstance(x, dict):
            raise _bad_type(f"{where}.M", x, "<class 'dict'>")
        return {"M": {str(k): normalize(e, f"{where}.M.{k}") for k, e in x.items()}}
    if t in _SETS:
        if not isinstance(x, list | tuple):
            raise _bad_type(f"{where}.{t}", x, "<class 'list'>, <class 'tuple'>")
        if not x:
            kind = {"SS": "string", "NS": "number", "BS": "binary"}[t]
            raise _invalid(f"One or more parameter values were invalid: An {kind} set  may not be empty")
        elements = [_scalar(_SETS[t], e, f"{where}.{t}[{i}]") for i, e in enumerate(x)]
        if len(set(elements)) != len(elements):
            raise _invalid(f"One or more parameter values were invalid: Input collection {list(x)} contains duplicates.")
        return {t: elements}
    raise _param_error(f'Unknown parameter in {where}: "{t}", must be one of: S, N, B, SS, NS, BS, M, L, NULL, BOOL')


def normalize_item(item: Any, where: str = "Item") -> Item:
    """A validated, canonical deep copy of ``item``."""
    if not isinstance(item, dict):
        raise _bad_type(where, item, "<class 'dict'>")
    return {name: normalize(value, f"{where}.{name}") for name, value in item.items()}


def copy_value(value: Any) -> Any:
    """A deep copy of a stored attribute value (fast for DynamoDB's shapes; any shape works)."""
    if type(value) is not dict:
        return copy.deepcopy(value)
    if len(value) == 1:
        ((t, x),) = value.items()
        kind = type(x)
        if kind is str or kind is bytes or kind is bool:
            return {t: x}
    out = {}
    for t, x in value.items():
        kind = type(x)
        if kind is str or kind is bytes or kind is bool:
            out[t] = x
        elif t == "L" and kind is list:
            out[t] = [copy_value(e) for e in x]
        elif t == "M" and kind is dict:
            out[t] = {k: copy_value(e) for k, e in x.items()}
        else:
            out[t] = copy.deepcopy(x)
    return out


def copy_item(item: Mapping[str, Any]) -> Item:
    """A deep copy of a stored item."""
    return {name: copy_value(value) for name, value in item.items()}


def _utf8_len(text: str) -> int:
    return len(text) if text.isascii() else len(text.encode())


def _number_size(text: str) -> int:
    digits = text.lstrip("+-").replace(".", "").strip("0")
    return (max(len(digits), 1) + 1) // 2 + 1


def value_size(value: Mapping[str, Any]) -> int:
    """The bytes DynamoDB counts for an attribute value (its documented approximation)."""
    ((t, x),) = value.items()
    if t == "S":
        return len(x) if x.isascii() else len(x.encode())
    if t == "N":
        return _number_size(x)
    if t == "B":
        return len(x)
    if t in ("BOOL", "NULL"):
        return 1
    if t == "SS":
        return sum(_utf8_len(e) for e in x)
    if t == "NS":
        return sum(_number_size(e) for e in x)
    if t == "BS":
        return sum(len(e) for e in x)
    if t == "L":
        return 3 + sum(value_size(e) + 1 for e in x)
    return 3 + sum(_utf8_len(k) + value_size(e) + 1 for k, e in x.items())


def item_size(item: Mapping[str, Any]) -> int:
    """The bytes DynamoDB counts for ``item`` (attribute names and values); 0 if malformed."""
    try:
        return sum(_utf8_len(name) + value_size(value) for name, value in item.items())
    except (AttributeError, TypeError, ValueError):
        return 0


def _updated_size(size: int, old: Mapping[str, Any], new: Mapping[str, Any], targets: Iterable[str]) -> int:
    """The size of ``new``: ``old`` (of ``size`` bytes) with only the ``targets`` changed."""
    try:
        for name in targets:
            before, after = old.get(name), new.get(name)
            if before is after:
                continue
            if before is not None:
                size -= _utf8_len(name) + value_size(before)
            if after is not None:
                size += _utf8_len(name) + value_size(after)
    except (AttributeError, TypeError, ValueError):
        return item_size(new)
    return size


def _type_of(value: Any) -> str:
    """The type tag of an attribute value ("" for a malformed one, e.g. a planted corrupt row's)."""
    if type(value) is dict and len(value) == 1:
        for tag in value:
            return str(tag)
    return ""


def _decimal(text: Any) -> Decimal | None:
    try:
        return Decimal(text)
    except (InvalidOperation, TypeError, ValueError):
        return None


def values_equal(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    """DynamoDB's ``=``: same type and value (sets regardless of order, numbers by value)."""
    if a == b:
        return True
    ta, tb = _type_of(a), _type_of(b)
    if ta != tb:
        return False
    x, y = a[ta], b[tb]
    if ta == "N":
        dx, dy = _decimal(x), _decimal(y)
        return dx is not None and dx == dy
    if ta in _SETS:
        if ta == "NS":
            return {_decimal(e) for e in x} == {_decimal(e) for e in y}
        return set(x) == set(y)
    if ta == "L":
        return len(x) == len(y) and all(values_equal(e, f) for e, f in zip(x, y, strict=True))
    if ta == "M":
        return x.keys() == y.keys() and all(values_equal(x[k], y[k]) for k in x)
    return False


def _ordered(a: Mapping[str, Any] | None, b: Mapping[str, Any] | None) -> tuple[Any, Any] | None:
    """The comparable values of two S, N or B operands of one type, else None."""
    if a is None or b is None:
        return None
    ta, tb = _type_of(a), _type_of(b)
    if ta != tb or ta not in ("S", "N", "B"):
        return None
    if ta == "N":
        x, y = _decimal(a[ta]), _decimal(b[tb])
        return None if x is None or y is None else (x, y)
    return a[ta], b[tb]


def _equal(a: Any, b: Any) -> bool:
    try:
        return values_equal(a, b)
    except (TypeError, AttributeError, KeyError):  # a planted malformed value
        return False


def _compare(op: str, a: Mapping[str, Any] | None, b: Mapping[str, Any] | None) -> bool:
    """DynamoDB's comparison ``a op b``: with a missing operand only ``<>`` is true; order
    comparisons hold between two S, two N or two B values only."""
    if op == "=":
        return a is not None and b is not None and _equal(a, b)
    if op == "<>":
        return a is None or b is None or not _equal(a, b)
    pair = _ordered(a, b)
    if pair is None:
        return False
    x, y = pair
    try:
        if op == "<":
            return bool(x < y)
        if op == "<=":
            return bool(x <= y)
        if op == ">":
            return bool(x > y)
        return bool(x >= y)
    except TypeError:  # a planted value of the wrong Python type
        return False


# --- expressions -----------------------------------------------------------------------------

Operand = Callable[[Item | None, Names, Values], Any]
Test = Callable[[Item | None, Names, Values], bool]
Path = tuple[str | int, ...]

_TOKEN = re.compile(r"\s*(?:(#[0-9A-Za-z_]+)|(:[0-9A-Za-z_]+)|([A-Za-z_][0-9A-Za-z_]*)|(\d+)|(<>|<=|>=|[=<>(),.\[\]+-]))")
_TOKEN_KINDS = ("name", "value", "ident", "number", "op")
_COMPARATORS = ("=", "<>", "<", "<=", ">", ">=")
_MISSING_OPERAND = "The provided expression refers to an attribute that does not exist in the item"
_WRONG_TYPE = "An operand in the update expression has an incorrect data type"


def _resolve(item: Item | None, path: Path, names: Names) -> Any:
    """The value at ``path`` in ``item`` (None if absent)."""
    if item is None:
        return None
    head = str(path[0])
    value = item.get(names[head] if head[0] == "#" else head)
    for element in path[1:]:
        if type(value) is not dict:
            return None
        if isinstance(element, int):
            items = value.get("L")
            value = items[element] if type(items) is list and element < len(items) else None
        else:
            fields = value.get("M")
            value = fields.get(names[element] if element[0] == "#" else element) if type(fields) is dict else None
    return value


def _path_text(path: Path) -> str:
    out = ""
    for element in path:
        out += f"[{element}]" if isinstance(element, int) else ("." if out else "") + element
    return out


@dataclass(frozen=True)
class Condition:
    """A parsed ConditionExpression/FilterExpression and the placeholders it uses."""

    test: Test
    names: frozenset[str]
    values: frozenset[str]


@dataclass(frozen=True)
class Update:
    """A parsed UpdateExpression (top-level attributes only) and the placeholders it uses."""

    sets: tuple[tuple[str, Operand], ...]
    removes: tuple[str, ...]
    adds: tuple[tuple[str, str], ...]
    deletes: tuple[tuple[str, str], ...]
    names: frozenset[str]
    values: frozenset[str]
    targets: tuple[str, ...] = ()
    """The attributes the update writes (placeholders or plain names), in order."""


class _Parser:
    """Recursive descent over one expression's tokens (DynamoDB's grammar, less the rare parts)."""

    def __init__(self, text: str, kind: str):
        self.kind = kind
        self.tokens: list[tuple[str, str]] = []
        pos = 0
        while True:
            match = _TOKEN.match(text, pos)
            if match is None or match.end() == pos:
                rest = text[pos:].strip()
                if not rest:
                    break
                raise self._syntax(rest[0], rest[:20])
            pos = match.end()
            index = match.lastindex or 1
            self.tokens.append((_TOKEN_KINDS[index - 1], match.group(index)))
        if not self.tokens:
            raise _invalid(f"Invalid {kind}: The expression can not be empty;")
        self.tokens.append(("end", "<EOF>"))
        self.i = 0
        self.names: set[str] = set()
        self.values: set[str] = set()

    def _syntax(self, token: str, near: str) -> _Fail:
        return _invalid(f'Invalid {self.kind}: Syntax error; token: "{token}", near: "{near}"')

    def fail(self) -> _Fail:
        token = self.tokens[self.i][1]
        near = " ".join(t for _, t in self.tokens[max(self.i - 1, 0) : self.i + 2] if t != "<EOF>")
        return self._syntax(token, near)

    def peek(self, ahead: int = 0) -> tuple[str, str]:
        return self.tokens[min(self.i + ahead, len(self.tokens) - 1)]

    def take(self) -> tuple[str, str]:
        token = self.tokens[self.i]
        if token[0] == "end":
            raise self.fail()
        self.i += 1
        return token

    def expect(self, text: str) -> None:
        if self.peek()[1] != text:
            raise self.fail()
        self.i += 1

    def keyword(self, word: str) -> bool:
        kind, text = self.peek()
        if kind == "ident" and text.upper() == word:
            self.i += 1
            return True
        return False

    def done(self) -> None:
        if self.peek()[0] != "end":
            raise self.fail()

    # conditions

    def condition(self) -> Test:
        left = self.conjunction()
        while self.keyword("OR"):
            right = self.conjunction()
            left = (lambda a, b: lambda it, n, v: a(it, n, v) or b(it, n, v))(left, right)
        return left

    def conjunction(self) -> Test:
        left = self.negation()
        while self.keyword("AND"):
            right = self.negation()
            left = (lambda a, b: lambda it, n, v: a(it, n, v) and b(it, n, v))(left, right)
        return left

    def negation(self) -> Test:
        if self.keyword("NOT"):
            inner = self.negation()
            return lambda it, n, v: not inner(it, n, v)
        return self.predicate()

    def predicate(self) -> Test:
        kind, text = self.peek()
        if text == "(":
            self.i += 1
            inner = self.condition()
            self.expect(")")
            return inner
        if kind == "ident" and self.peek(1)[1] == "(" and text != "size":
            return self.function()
        left = self.operand()
        op = self.peek()[1]
        if op in _COMPARATORS:
            self.i += 1
            right = self.operand()
            return lambda it, n, v: _compare(op, left(it, n, v), right(it, n, v))
        if self.keyword("BETWEEN"):
            low = self.operand()
            if not self.keyword("AND"):
                raise self.fail()
            high = self.operand()

            def between(it: Item | None, n: Names, v: Values) -> bool:
                x = left(it, n, v)
                return _compare(">=", x, low(it, n, v)) and _compare("<=", x, high(it, n, v))

            return between
        if self.keyword("IN"):
            self.expect("(")
            options = [self.operand()]
            while self.peek()[1] == ",":
                self.i += 1
                options.append(self.operand())
            self.expect(")")
            return lambda it, n, v: any(_compare("=", left(it, n, v), o(it, n, v)) for o in options)
        raise self.fail()

    def function(self) -> Test:
        _, name = self.take()
        self.expect("(")
        if name in ("attribute_exists", "attribute_not_exists"):
            path = self.path()
            self.expect(")")
            if name == "attribute_exists":
                return lambda it, n, v: _resolve(it, path, n) is not None
            return lambda it, n, v: _resolve(it, path, n) is None
        if name in ("begins_with", "contains", "attribute_type"):
            first = self.operand()
            self.expect(",")
            second = self.operand()
            self.expect(")")
            return (lambda f: lambda it, n, v: _call_function(f, first(it, n, v), second(it, n, v)))(_FUNCTIONS[name])
        raise _invalid(f"Invalid {self.kind}: Invalid function name; function: {name}")

    def operand(self) -> Operand:
        kind, text = self.peek()
        if kind == "value":
            self.i += 1
            self.values.add(text)
            return lambda it, n, v: v[text]
        if kind == "ident" and text == "size" and self.peek(1)[1] == "(":
            self.i += 2
            path = self.path()
            self.expect(")")
            return lambda it, n, v: _size_of(_resolve(it, path, n))
        path = self.path()
        if len(path) == 1:
            head = str(path[0])
            if head[0] == "#":
                return lambda it, n, v: None if it is None else it.get(n[head])
            return lambda it, n, v: None if it is None else it.get(head)
        return lambda it, n, v: _resolve(it, path, n)

    def path(self) -> Path:
        kind, text = self.take()
        if kind not in ("name", "ident"):
            self.i -= 1
            raise self.fail()
        elements: list[str | int] = [text]
        while True:
            if kind == "name":
                self.names.add(text)
            nxt = self.peek()[1]
            if nxt == ".":
                self.i += 1
                kind, text = self.take()
                if kind not in ("name", "ident"):
                    self.i -= 1
                    raise self.fail()
                elements.append(text)
            elif nxt == "[":
                self.i += 1
                kind, text = self.take()
                if kind != "number":
                    self.i -= 1
                    raise self.fail()
                elements.append(int(text))
                self.expect("]")
                kind = "number"
            else:
                return tuple(elements)

    # updates

    def update(self) -> Update:
        sets: list[tuple[str, Operand]] = []
        removes: list[str] = []
        adds: list[tuple[str, str]] = []
        deletes: list[tuple[str, str]] = []
        seen: set[str] = set()
        while self.peek()[0] != "end":
            kind, text = self.take()
            clause = text.upper() if kind == "ident" else ""
            if clause not in ("SET", "REMOVE", "ADD", "DELETE"):
                self.i -= 1
                raise self.fail()
            if clause in seen:
                raise _invalid(f'Invalid UpdateExpression: The "{clause}" section can only be used once in an update expression;')
            seen.add(clause)
            while True:
                target = self.top_path()
                if clause == "SET":
                    self.expect("=")
                    sets.append((target, self.set_value()))
                elif clause == "REMOVE":
                    removes.append(target)
                else:
                    kind, value = self.take()
                    if kind != "value":
                        self.i -= 1
                        raise self.fail()
                    self.values.add(value)
                    (adds if clause == "ADD" else deletes).append((target, value))
                if self.peek()[1] != ",":
                    break
                self.i += 1
        targets = (*(t for t, _ in sets), *removes, *(t for t, _ in adds), *(t for t, _ in deletes))
        return Update(tuple(sets), tuple(removes), tuple(adds), tuple(deletes),
                      frozenset(self.names), frozenset(self.values), targets)

    def top_path(self) -> str:
        path = self.path()
        if len(path) != 1:
            raise NotImplementedError(f"MemoryDynamoDB: nested document path {_path_text(path)} in an UpdateExpression")
        return str(path[0])

    def set_value(self) -> Operand:
        left = self.set_operand()
        op = self.peek()[1]
        if op not in ("+", "-"):
            return left
        self.i += 1
        right = self.set_operand()
        return lambda it, n, v: _arithmetic(op, left(it, n, v), right(it, n, v))

    def set_operand(self) -> Operand:
        kind, text = self.peek()
        if kind == "ident" and self.peek(1)[1] == "(":
            self.i += 2
            if text == "if_not_exists":
                path = self.path()
                self.expect(",")
                default = self.set_operand()
                self.expect(")")
                return lambda it, n, v: _resolve(it, path, n) or default(it, n, v)
            if text == "list_append":
                first = self.set_operand()
                self.expect(",")
                second = self.set_operand()
                self.expect(")")
                return lambda it, n, v: _list_append(first(it, n, v), second(it, n, v))
            raise _invalid(f"Invalid UpdateExpression: Invalid function name; function: {text}")
        if kind == "value":
            self.i += 1
            self.values.add(text)
            return lambda it, n, v: v[text]
        path = self.path()

        def read(it: Item | None, n: Names, v: Values) -> Any:
            found = _resolve(it, path, n)
            if found is None:
                raise _invalid(_MISSING_OPERAND)
            return found

        return read


def _begins_with(a: Any, b: Any) -> bool:
    if a is None or b is None or _type_of(a) != _type_of(b) or _type_of(a) not in ("S", "B"):
        return False
    return bool(a[_type_of(a)].startswith(b[_type_of(b)]))


def _contains(a: Any, b: Any) -> bool:
    if a is None or b is None:
        return False
    ta, tb = _type_of(a), _type_of(b)
    if ta in ("S", "B") and ta == tb:
        return bool(b[tb] in a[ta])
    if ta in _SETS and _SETS[ta] == tb:
        return any(values_equal({tb: e}, b) for e in a[ta])
    if ta == "L":
        return any(values_equal(e, b) for e in a[ta])
    return False


def _attribute_type(a: Any, b: Any) -> bool:
    return a is not None and b is not None and b.get("S") == _type_of(a)


def _call_function(function: Callable[[Any, Any], bool], a: Any, b: Any) -> bool:
    try:
        return function(a, b)
    except (TypeError, AttributeError, KeyError):  # a planted malformed value
        return False


_FUNCTIONS: dict[str, Callable[[Any, Any], bool]] = {
    "begins_with": _begins_with, "contains": _contains, "attribute_type": _attribute_type,
}


def _size_of(value: Any) -> dict[str, str] | None:
    t = _type_of(value)
    if t not in ("S", "B", "L", "M", *_SETS):
        return None
    x = value[t]
    try:
        return {"N": str(_utf8_len(x) if t == "S" else len(x))}
    except (AttributeError, TypeError):
        return None


def _arithmetic(op: str, a: Any, b: Any) -> dict[str, str]:
    if _type_of(a) != "N" or _type_of(b) != "N":
        raise _invalid(_WRONG_TYPE)
    x, y = _decimal(a["N"]), _decimal(b["N"])
    if x is None or y is None:
        raise _invalid(_WRONG_TYPE)
    result = _MATH.add(x, y) if op == "+" else _MATH.subtract(x, y)
    return {"N": _canonical_number(str(result))}


def _list_append(a: Any, b: Any) -> dict[str, list[Any]]:
    if _type_of(a) != "L" or _type_of(b) != "L":
        raise _invalid(_WRONG_TYPE)
    return {"L": [*a["L"], *b["L"]]}


@lru_cache(maxsize=4096)
def parse_condition(text: str, kind: str = "ConditionExpression") -> Condition:
    """Parse a ConditionExpression or FilterExpression (cached: parsing is pure)."""
    parser = _Parser(text, kind)
    test = parser.condition()
    parser.done()
    return Condition(test, frozenset(parser.names), frozenset(parser.values))


@lru_cache(maxsize=4096)
def parse_update(text: str) -> Update:
    """Parse an UpdateExpression (cached)."""
    parser = _Parser(text, "UpdateExpression")
    update = parser.update()
    parser.done()
    return update


def _check_placeholders(names: Any, values: Any, used_names: set[str], used_values: set[str], expressions: int,
                        kind: str) -> tuple[dict[str, str], dict[str, Any]]:
    """The request's ``ExpressionAttributeNames``/``Values`` (values normalized), checked as
    DynamoDB does: not empty, only with expressions, every placeholder defined and used."""
    out_names: dict[str, str] = {}
    out_values: dict[str, Any] = {}
    if names is not None:
        if not isinstance(names, dict):
            raise _bad_type("ExpressionAttributeNames", names, "<class 'dict'>")
        if not names:
            raise _invalid("ExpressionAttributeNames must not be empty")
        if not expressions:
            raise _invalid("ExpressionAttributeNames can only be specified when using expressions")
        for key, name in names.items():
            if not isinstance(name, str):
                raise _bad_type(f"ExpressionAttributeNames.{key}", name, "<class 'str'>")
        out_names = names
    if values is not None:
        if not isinstance(values, dict):
            raise _bad_type("ExpressionAttributeValues", values, "<class 'dict'>")
        if not values:
            raise _invalid("ExpressionAttributeValues must not be empty")
        if not expressions:
            raise _invalid("ExpressionAttributeValues can only be specified when using expressions")
        out_values = {key: normalize(value, f"ExpressionAttributeValues.{key}") for key, value in values.items()}
    if len(out_names) != len(used_names) or not used_names.issubset(out_names):
        undefined = sorted(used_names.difference(out_names))
        if undefined:
            raise _invalid(f"Invalid {kind}: An expression attribute name used in the document path is not defined; "
                           f"attribute name: {undefined[0]}")
        unused = ", ".join(sorted(set(out_names) - used_names))
        raise _invalid(f"Value provided in ExpressionAttributeNames unused in expressions: keys: {{{unused}}}")
    if len(out_values) != len(used_values) or not used_values.issubset(out_values):
        undefined = sorted(used_values.difference(out_values))
        if undefined:
            raise _invalid(f"Invalid {kind}: An expression attribute value used in expression is not defined; "
                           f"attribute value: {undefined[0]}")
        unused = ", ".join(sorted(set(out_values) - used_values))
        raise _invalid(f"Value provided in ExpressionAttributeValues unused in expressions: keys: {{{unused}}}")
    return out_names, out_values


# --- tables ------------------------------------------------------------------------------------

Version = tuple[int, Item | None, int]
"""(write sequence number, item or None when deleted, item size)."""


class _Table:
    """One table's items, their recent versions and its description."""

    def __init__(self, name: str, key_schema: list[dict[str, str]], definitions: list[dict[str, str]],
                 billing_mode: str, throughput: dict[str, int] | None, arn: str, table_id: str, history: int):
        types = {d["AttributeName"]: d["AttributeType"] for d in definitions}
        self.name = name
        self.key_schema = key_schema
        self.definitions = definitions
        self.billing_mode = billing_mode
        self.throughput = throughput
        self.arn = arn
        self.table_id = table_id
        self.hash_name = key_schema[0]["AttributeName"]
        self.hash_type = types[self.hash_name]
        self.range_name = key_schema[1]["AttributeName"] if len(key_schema) > 1 else None
        self.range_type = types[self.range_name] if self.range_name else ""
        self.items: dict[KeyT, Item] = {}
        self.sizes: dict[KeyT, int] = {}
        self.history: dict[KeyT, list[Version]] = {}
        self.keep = history
        self._live: list[KeyT] | None = None
        self._all: list[KeyT] | None = None

    def describe(self, status: str = "ACTIVE") -> dict[str, Any]:
        rcu = (self.throughput or {}).get("ReadCapacityUnits", 0)
        wcu = (self.throughput or {}).get("WriteCapacityUnits", 0)
        return {
            "AttributeDefinitions": copy.deepcopy(self.definitions),
            "TableName": self.name,
            "KeySchema": copy.deepcopy(self.key_schema),
            "TableStatus": status,
            "CreationDateTime": _CREATED,
            "ProvisionedThroughput": {"NumberOfDecreasesToday": 0, "ReadCapacityUnits": rcu, "WriteCapacityUnits": wcu},
            "TableSizeBytes": sum(self.sizes.values()),
            "ItemCount": len(self.items),
            "TableArn": self.arn,
            "TableId": self.table_id,
            "BillingModeSummary": {"BillingMode": self.billing_mode},
            "DeletionProtectionEnabled": False,
        }

    # keys

    def _key_part(self, name: str, kind: str, value: Any, limit: int, empty_message: str) -> Any:
        t = _type_of(value)
        if t != kind:
            return None
        x = value[t]
        if not x:
            raise _invalid(empty_message.format(name))
        if (len(x) if t == "B" else _utf8_len(x) if t == "S" else 0) > limit:
            which = "hashkey" if limit == HASH_KEY_LIMIT else "rangekey"
            raise _invalid(f"One or more parameter values were invalid: Size of {which} has exceeded the maximum size "
                           f"limit of{limit} bytes")
        return Decimal(x) if t == "N" else x

    def key_of(self, key: Mapping[str, Any], what: str = "key element") -> KeyT:
        """The stored key of a ``Key`` parameter (normalized); exactly the key attributes."""
        mismatch = _invalid(f"The provided {what} does not match the schema")
        empty = ("One or more parameter values are not valid. The AttributeValue for a key attribute cannot "
                 "contain an empty string value. Key: {}")
        if len(key) != (2 if self.range_name else 1) or self.hash_name not in key:
            raise mismatch
        h = self._key_part(self.hash_name, self.hash_type, key[self.hash_name], HASH_KEY_LIMIT, empty)
        if h is None:
            raise mismatch
        if self.range_name is None:
            return h
        if self.range_name not in key:
            raise mismatch
        r = self._key_part(self.range_name, self.range_type, key[self.range_name], RANGE_KEY_LIMIT, empty)
        if r is None:
            raise mismatch
        return (h, r)

    def key_of_item(self, item: Mapping[str, Any]) -> KeyT:
        """The stored key of a whole (normalized) item."""
        parts = []
        for name, kind, limit in ((self.hash_name, self.hash_type, HASH_KEY_LIMIT),
                                  (self.range_name, self.range_type, RANGE_KEY_LIMIT)):
            if name is None:
                continue
            if name not in item:
                raise _invalid(f"One or more parameter values were invalid: Missing the key {name} in the item")
            actual = _type_of(item[name])
            part = self._key_part(name, kind, item[name], limit,
                                  "One or more parameter values were invalid: An AttributeValue may not contain an "
                                  "empty string. Key: {}")
            if part is None:
                raise _invalid(f"One or more parameter values were invalid: Type mismatch for key {name} "
                               f"expected: {kind} actual: {actual}")
            parts.append(part)
        return parts[0] if len(parts) == 1 else tuple(parts)

    def key_attributes(self, item: Mapping[str, Any]) -> Item:
        """The key attributes of ``item`` (copies)."""
        out = {self.hash_name: copy_value(item[self.hash_name])}
        if self.range_name:
            out[self.range_name] = copy_value(item[self.range_name])
        return out

    @staticmethod
    def key_text(key: KeyT) -> str:
        """The key as the hooks and accessors name it: the hash key value (S as is, N as its
        canonical decimal text, B in hex), then ``"\\x1f"`` and the range key value if any."""
        if isinstance(key, tuple):
            return "\x1f".join(_Table.key_text(part) for part in key)
        if isinstance(key, bytes):
            return key.hex()
        if isinstance(key, Decimal):
            return _canonical_number(str(key))
        return str(key)

    def key_from_text(self, text: str) -> tuple[KeyT, Item]:
        """The stored key named by ``text`` (see :meth:`key_text`) and its key attributes."""
        parts = text.split("\x1f") if self.range_name else [text]
        if len(parts) != (2 if self.range_name else 1):
            raise ValueError(f"{text!r} does not name a key of table {self.name!r}")
        attributes: Item = {}
        values = []
        for name, kind, part in zip((self.hash_name, self.range_name), (self.hash_type, self.range_type), parts,
                                    strict=False):
            assert name is not None
            value = bytes.fromhex(part) if kind == "B" else _canonical_number(part) if kind == "N" else part
            attributes[name] = {kind: value}
            values.append(Decimal(str(value)) if kind == "N" else value)
        return (values[0] if len(values) == 1 else tuple(values)), attributes

    # versions

    def store(self, key: KeyT, item: Item | None, seq: int, size: int | None = None) -> None:
        """Make ``item`` (None: no item; ``size``: its size if known) the current version of
        ``key``; the item is never mutated after."""
        present = key in self.items
        if item is None:
            if not present:
                return
            del self.items[key]
            del self.sizes[key]
            self._live = None
            size = 0
        else:
            if size is None:
                size = item_size(item)
            self.items[key] = item
            self.sizes[key] = size
            if not present:
                self._live = None
        versions = self.history.get(key)
        if versions is None:  # absent before its first write: a stale read may not see it yet
            versions = self.history[key] = [(0, None, 0)]
            self._all = None
        versions.append((seq, item, size))
        if len(versions) > self.keep:
            del versions[0]

    def order(self, *, every_version: bool) -> list[KeyT]:
        """Keys in scan order (sorted): of live items, or of every key with a kept version."""
        if every_version:
            if self._all is None:
                self._all = sorted(self.history)
            return self._all
        if self._live is None:
            self._live = sorted(self.items)
        return self._live


# --- the client ------------------------------------------------------------------------------


class MemoryDynamoDB:
    """A boto3 DynamoDB client's calls on in-memory tables (thread-safe: one lock; deterministic).

    ``faults(operation_name, request)`` is consulted before each call (under the lock) and may
    return a :class:`Fault`. ``stale_reads(key, history_len)`` says how many versions back an
    eventually consistent read (GetItem, BatchGetItem or Scan without ``ConsistentRead``)
    returns ``key`` (0: the current one; clamped to the ``history`` versions kept, among them
    "absent before its first write"); strongly consistent reads, conditions and writes always
    see the current item. Hooks must not call the client's operations (they may call the
    accessors). Items are copied on the way in and out: callers cannot change the store.
    """

    def __init__(self, *, faults: FaultHook | None = None, stale_reads: StaleReadHook | None = None,
                 history: int = 4, region: str = "us-east-1", account_id: str = "123456789012"):
        if history < 1:
            raise ValueError(f"history keeps >= 1 versions, got {history!r}")
        self.faults = faults
        self.stale_reads = stale_reads
        self.history = history
        self.region = region
        self.account_id = account_id
        self.calls: Counter[str] = Counter()
        """Requests per operation name ("UpdateItem", ...), faulted ones included."""
        self._tables: dict[str, _Table] = {}
        self._tokens: dict[str, Any] = {}
        self._lock = threading.RLock()
        self._seq = 0
        self._requests = 0
        self._created = 0

    def __repr__(self) -> str:
        return f"MemoryDynamoDB(tables={sorted(self._tables)})"

    @property
    def writes(self) -> int:
        """The sequence number of the last applied write (each item written counts one)."""
        return self._seq

    # --- accessors for checkers ---------------------------------------------------------------

    def table_names(self) -> list[str]:
        """The tables, sorted."""
        with self._lock:
            return sorted(self._tables)

    def items(self, table: str | None = None) -> dict[str, Item]:
        """Every current item of ``table`` (default: the only table) by key text, in key order."""
        with self._lock:
            t = self._only(table)
            return {t.key_text(k): copy_item(t.items[k]) for k in t.order(every_version=False)}

    def item(self, key: str, table: str | None = None) -> Item | None:
        """The current item named ``key`` (see ``key_text``), or None."""
        with self._lock:
            t = self._only(table)
            stored = t.items.get(t.key_from_text(key)[0])
            return None if stored is None else copy_item(stored)

    def peek(self, key: str, table: str | None = None) -> Mapping[str, Any] | None:
        """The current item named ``key`` without a copy, for checkers that look after every
        step (fast; never mutate it: stored items are replaced, not changed, by writes)."""
        with self._lock:
            t = self._only(table)
            return t.items.get(t.key_from_text(key)[0])

    def keys(self, table: str | None = None) -> list[str]:
        """The key text of every current item of ``table`` (default: the only table)."""
        with self._lock:
            t = self._only(table)
            return [t.key_text(k) for k in t.order(every_version=False)]

    def corrupt(self, key: str, item: Mapping[str, Any] | None, table: str | None = None) -> None:
        """Write ``item`` raw as the new version of ``key`` (None: delete it), bypassing every
        check (to plant corrupt rows); the key attributes are filled in from ``key`` if absent."""
        with self._lock:
            t = self._only(table)
            stored_key, attributes = t.key_from_text(key)
            raw: Item | None = None
            if item is not None:
                raw = copy.deepcopy(dict(item))
                for name, value in attributes.items():
                    if raw.setdefault(name, value) != value:
                        raise ValueError(f"item's {name} {raw[name]!r} is not key {key!r}")
            self._seq += 1
            t.store(stored_key, raw, self._seq)

    def _only(self, name: str | None) -> _Table:
        if name is None:
            if len(self._tables) != 1:
                raise ValueError(f"name the table: there are {len(self._tables)} ({sorted(self._tables)})")
            return next(iter(self._tables.values()))
        if name not in self._tables:
            raise ValueError(f"no table {name!r}")
        return self._tables[name]

    # --- the call envelope ----------------------------------------------------------------------

    def _call(self, op: str, request: dict[str, Any], handler: Callable[[dict[str, Any], Fault | None], dict[str, Any]]
              ) -> dict[str, Any]:
        required, supported, unsupported = _PARAMS[op]
        for name in request:
            if name not in supported:
                if name in unsupported:
                    raise NotImplementedError(f"MemoryDynamoDB: {op} parameter {name}")
                raise _param_error(f'Unknown parameter in input: "{name}", must be one of: {", ".join(sorted(supported | unsupported))}')
        for name in required:
            if name not in request:
                raise _param_error(f'Missing required parameter in input: "{name}"')
        with self._lock:
            self.calls[op] += 1
            self._requests += 1
            request_id = f"MEMORY{self._requests:046d}"
            fault = self.faults(op, request) if self.faults is not None else None
            if fault is not None:
                if fault.kind == "unprocessed" and op != "BatchGetItem":
                    raise ValueError(f"an unprocessed-keys fault applies to BatchGetItem, not {op}")
                if not fault.applied and fault.kind != "unprocessed":
                    raise self._fault_error(op, request, fault, request_id)
            try:
                response = handler(request, fault)
            except _Fail as fail:
                if fault is not None and fault.applied:
                    raise self._fault_error(op, request, fault, request_id) from None
                raise client_error(op, fail.code, fail.message, extra=fail.extra, request_id=request_id) from None
            if fault is not None and fault.applied:
                raise self._fault_error(op, request, fault, request_id)
            response["ResponseMetadata"] = {"RequestId": request_id, "HTTPStatusCode": 200, "HTTPHeaders": {},
                                            "RetryAttempts": 0}
            return response

    def _fault_error(self, op: str, request: Mapping[str, Any], fault: Fault, request_id: str) -> Exception:
        if fault.kind == "connection":
            return CONNECTION_ERRORS[fault.code](endpoint_url=ENDPOINT.format(region=self.region))
        message = fault.message
        if not message and fault.code == "AccessDeniedException":
            message = (f"User: arn:aws:iam::{self.account_id}:user/sim is not authorized to perform: dynamodb:{op} "
                       f"on resource: {self._resource(request)} because no identity-based policy allows the "
                       f"dynamodb:{op} action")
        return client_error(op, fault.code, message, fault.status, request_id=request_id)

    def _resource(self, request: Mapping[str, Any]) -> str:
        name = request.get("TableName")
        if name is None and isinstance(request.get("RequestItems"), dict):
            name = next(iter(request["RequestItems"]), None)
        if name is None and isinstance(request.get("TransactItems"), list) and request["TransactItems"]:
            first: Any = request["TransactItems"][0]
            spec: Any = next(iter(first.values()), None) if isinstance(first, dict) else None
            name = spec.get("TableName") if isinstance(spec, dict) else None
        return f"arn:aws:dynamodb:{self.region}:{self.account_id}:table/{name}"

    def _table(self, name: Any) -> _Table:
        if not isinstance(name, str):
            raise _bad_type("TableName", name, "<class 'str'>")
        table = self._tables.get(name)
        if table is None:
            raise _Fail("ResourceNotFoundException", "Requested resource not found")
        return table

    def _visible(self, table: _Table, key: KeyT, consistent: bool) -> tuple[Item | None, int]:
        """The version of ``key`` a read sees, and its size."""
        if consistent or self.stale_reads is None:
            return table.items.get(key), table.sizes.get(key, 0)
        versions = table.history.get(key)
        if not versions:
            return table.items.get(key), table.sizes.get(key, 0)
        back = self.stale_reads(table.key_text(key), len(versions))
        _, item, size = versions[-1 - max(0, min(int(back), len(versions) - 1))]
        return item, size

    def _write(self, table: _Table, key: KeyT, item: Item | None, size: int | None = None) -> None:
        self._seq += 1
        table.store(key, item, self._seq, size)

    # --- tables ---------------------------------------------------------------------------------

    def create_table(self, **request: Any) -> dict[str, Any]:
        """CreateTable: the table is ACTIVE at once (the answer says CREATING, as AWS's does)."""
        return self._call("CreateTable", request, self._create_table)

    def _create_table(self, r: dict[str, Any], fault: Fault | None) -> dict[str, Any]:
        name = r["TableName"]
        if not isinstance(name, str) or not 3 <= len(name) <= 255:
            raise _param_error(f"Invalid length for parameter TableName, value: {name!r}, valid min length: 3")
        if not re.fullmatch(r"[a-zA-Z0-9_.-]+", name):
            raise _invalid(f"1 validation error detected: Value '{name}' at 'tableName' failed to satisfy constraint: "
                           "Member must satisfy regular expression pattern: [a-zA-Z0-9_.-]+")
        schema = [dict(k) for k in r["KeySchema"]]
        definitions = [dict(d) for d in r["AttributeDefinitions"]]
        kinds = [k.get("KeyType") for k in schema]
        if kinds not in (["HASH"], ["HASH", "RANGE"]):
            raise _invalid(f"Invalid KeySchema: key types {kinds}: one HASH key, optionally then one RANGE key")
        if sorted(d.get("AttributeName", "") for d in definitions) != sorted(k.get("AttributeName", "") for k in schema):
            raise _invalid("One or more parameter values were invalid: Number of attributes in KeySchema does not "
                           "exactly match number of attributes defined in AttributeDefinitions")
        for d in definitions:
            if d.get("AttributeType") not in ("S", "N", "B"):
                raise _invalid(f"Member must satisfy enum value set: [B, N, S]; got {d.get('AttributeType')!r}")
        mode = r.get("BillingMode", "PROVISIONED")
        throughput = r.get("ProvisionedThroughput")
        if mode == "PAY_PER_REQUEST" and throughput:
            raise _invalid("One or more parameter values were invalid: Neither ReadCapacityUnits nor WriteCapacityUnits "
                           "can be specified when BillingMode is PAY_PER_REQUEST")
        if mode == "PROVISIONED" and not throughput:
            raise _invalid("One or more parameter values were invalid: ReadCapacityUnits and WriteCapacityUnits must "
                           "both be specified when BillingMode is PROVISIONED")
        if mode not in ("PAY_PER_REQUEST", "PROVISIONED"):
            raise _invalid(f"Member must satisfy enum value set: [PROVISIONED, PAY_PER_REQUEST]; got {mode!r}")
        if name in self._tables:
            raise _Fail("ResourceInUseException", f"Table already exists: {name}")
        self._created += 1
        table = _Table(name, schema, definitions, mode, dict(throughput) if throughput else None,
                       f"arn:aws:dynamodb:{self.region}:{self.account_id}:table/{name}",
                       f"00000000-0000-4000-8000-{self._created:012d}", self.history)
        self._tables[name] = table
        return {"TableDescription": table.describe("CREATING")}

    def describe_table(self, **request: Any) -> dict[str, Any]:
        """DescribeTable (``Table``: ACTIVE, with its key schema)."""
        return self._call("DescribeTable", request, self._describe_table)

    def _describe_table(self, r: dict[str, Any], fault: Fault | None) -> dict[str, Any]:
        table = self._tables.get(r["TableName"])
        if table is None:
            raise _Fail("ResourceNotFoundException", f"Requested resource not found: Table: {r['TableName']} not found")
        return {"Table": table.describe()}

    def delete_table(self, **request: Any) -> dict[str, Any]:
        """DeleteTable: the table and its items are gone at once (the answer says DELETING)."""
        return self._call("DeleteTable", request, self._delete_table)

    def _delete_table(self, r: dict[str, Any], fault: Fault | None) -> dict[str, Any]:
        table = self._table(r["TableName"])
        del self._tables[table.name]
        return {"TableDescription": table.describe("DELETING")}

    # --- single items ---------------------------------------------------------------------------

    def get_item(self, **request: Any) -> dict[str, Any]:
        """GetItem (``ConsistentRead`` or an eventually consistent, maybe stale, read)."""
        return self._call("GetItem", request, self._get_item)

    def _get_item(self, r: dict[str, Any], fault: Fault | None) -> dict[str, Any]:
        table = self._table(r["TableName"])
        key = table.key_of(normalize_item(r["Key"], "Key"))
        item, _ = self._visible(table, key, bool(r.get("ConsistentRead", False)))
        return {} if item is None else {"Item": copy_item(item)}

    def put_item(self, **request: Any) -> dict[str, Any]:
        """PutItem (ConditionExpression, ReturnValues NONE/ALL_OLD, ReturnValuesOnConditionCheckFailure)."""
        return self._call("PutItem", request, self._put_item)

    def _put_item(self, r: dict[str, Any], fault: Fault | None) -> dict[str, Any]:
        table = self._table(r["TableName"])
        item = normalize_item(r["Item"])
        key = table.key_of_item(item)
        returns = self._return_values(r, ("NONE", "ALL_OLD"))
        condition, names, values = self._condition(r)
        size = item_size(item)
        if size > ITEM_LIMIT:
            raise _invalid("Item size has exceeded the maximum allowed size")
        current = table.items.get(key)
        self._check(condition, current, names, values, r)
        self._write(table, key, item, size)
        return {"Attributes": copy_item(current)} if returns == "ALL_OLD" and current is not None else {}

    def update_item(self, **request: Any) -> dict[str, Any]:
        """UpdateItem (SET/REMOVE/ADD/DELETE, ConditionExpression, every ReturnValues)."""
        return self._call("UpdateItem", request, self._update_item)

    def _update_item(self, r: dict[str, Any], fault: Fault | None) -> dict[str, Any]:
        table = self._table(r["TableName"])
        key_item = normalize_item(r["Key"], "Key")
        key = table.key_of(key_item)
        returns = self._return_values(r, ("NONE", "ALL_OLD", "ALL_NEW", "UPDATED_OLD", "UPDATED_NEW"))
        update, condition, names, values = self._update_request(r, table)
        current = table.items.get(key)
        self._check(condition, current, names, values, r)
        new, targets = self._apply(update, current, key_item, names, values)
        size = _updated_size(table.sizes[key] if current is not None else item_size(key_item), current or key_item,
                             new, targets)
        if size > ITEM_LIMIT:
            raise _invalid("Item size to update has exceeded the maximum allowed size")
        self._write(table, key, new, size)
        if returns == "ALL_NEW":
            return {"Attributes": copy_item(new)}
        if returns == "ALL_OLD":
            return {"Attributes": copy_item(current)} if current is not None else {}
        if returns in ("UPDATED_NEW", "UPDATED_OLD"):
            source = new if returns == "UPDATED_NEW" else (current or {})
            changed = {a: copy_value(source[a]) for a in targets if a in source}
            return {"Attributes": changed} if changed else {}
        return {}

    def delete_item(self, **request: Any) -> dict[str, Any]:
        """DeleteItem (ConditionExpression, ReturnValues NONE/ALL_OLD)."""
        return self._call("DeleteItem", request, self._delete_item)

    def _delete_item(self, r: dict[str, Any], fault: Fault | None) -> dict[str, Any]:
        table = self._table(r["TableName"])
        key = table.key_of(normalize_item(r["Key"], "Key"))
        returns = self._return_values(r, ("NONE", "ALL_OLD"))
        condition, names, values = self._condition(r)
        current = table.items.get(key)
        self._check(condition, current, names, values, r)
        self._write(table, key, None)
        return {"Attributes": copy_item(current)} if returns == "ALL_OLD" and current is not None else {}

    # --- pieces of single-item calls --------------------------------------------------------------

    @staticmethod
    def _return_values(r: Mapping[str, Any], allowed: tuple[str, ...]) -> str:
        returns = r.get("ReturnValues", "NONE")
        if returns not in allowed:
            raise _invalid("Return values set to invalid value")
        on_failure = r.get("ReturnValuesOnConditionCheckFailure", "NONE")
        if on_failure not in ("NONE", "ALL_OLD"):
            raise _invalid(f"1 validation error detected: Value '{on_failure}' at 'returnValuesOnConditionCheckFailure' "
                           "failed to satisfy constraint: Member must satisfy enum value set: [ALL_OLD, NONE]")
        return str(returns)

    @staticmethod
    def _condition(r: Mapping[str, Any]) -> tuple[Condition | None, Names, Values]:
        text = r.get("ConditionExpression")
        condition = parse_condition(text) if text is not None else None
        names, values = _check_placeholders(
            r.get("ExpressionAttributeNames"), r.get("ExpressionAttributeValues"),
            set(condition.names) if condition else set(), set(condition.values) if condition else set(),
            int(condition is not None), "ConditionExpression")
        return condition, names, values

    @staticmethod
    def _update_request(r: Mapping[str, Any], table: _Table) -> tuple[Update, Condition | None, Names, Values]:
        text = r.get("UpdateExpression")
        update = parse_update(text) if text is not None else Update((), (), (), (), frozenset(), frozenset())
        cond_text = r.get("ConditionExpression")
        condition = parse_condition(cond_text) if cond_text is not None else None
        names, values = _check_placeholders(
            r.get("ExpressionAttributeNames"), r.get("ExpressionAttributeValues"),
            set(update.names) | (condition.names if condition else set()),
            set(update.values) | (condition.values if condition else set()),
            int(text is not None) + int(condition is not None),
            "UpdateExpression" if text is not None else "ConditionExpression")
        seen: set[str] = set()
        for target in update.targets:
            attribute = names[target] if target[0] == "#" else target
            if attribute in seen:
                raise _invalid("Invalid UpdateExpression: Two document paths overlap with each other; must remove or "
                               f"rewrite one of these paths; path one: [{attribute}], path two: [{attribute}]")
            seen.add(attribute)
            if attribute in (table.hash_name, table.range_name):
                raise _invalid(f"One or more parameter values were invalid: Cannot update attribute {attribute}. "
                               "This attribute is part of the key")
        for operator, pairs, allowed in (("ADD", update.adds, ("N", *_SETS)), ("DELETE", update.deletes, tuple(_SETS))):
            for _, placeholder in pairs:
                kind = _type_of(values[placeholder])
                if kind not in allowed:
                    raise _invalid("Invalid UpdateExpression: Incorrect operand type for operator or function; "
                                   f"operator: {operator}, operand type: {_TYPE_NAMES[kind]}")
        return update, condition, names, values

    @staticmethod
    def _check(condition: Condition | None, current: Item | None, names: Names, values: Values,
               r: Mapping[str, Any]) -> None:
        if condition is None or condition.test(current, names, values):
            return
        extra = None
        if r.get("ReturnValuesOnConditionCheckFailure") == "ALL_OLD" and current is not None:
            extra = {"Item": copy_item(current)}
        raise _Fail("ConditionalCheckFailedException", CONDITION_FAILED, extra)

    @staticmethod
    def _apply(update: Update, current: Item | None, key_item: Item, names: Names, values: Values
               ) -> tuple[Item, list[str]]:
        """The item after ``update`` (right-hand sides read the item before it) and the
        attributes it targets; item-dependent errors raise a ``ValidationException``."""
        base = current if current is not None else key_item
        new = dict(base)
        computed = [(names[t] if t[0] == "#" else t, value(base, names, values)) for t, value in update.sets]
        for attribute, value in computed:
            new[attribute] = value
        for t in update.removes:
            new.pop(names[t] if t[0] == "#" else t, None)
        for t, placeholder in update.adds:
            attribute = names[t] if t[0] == "#" else t
            operand, existing = values[placeholder], base.get(attribute)
            if existing is None:
                new[attribute] = operand
            elif _type_of(operand) == "N" and _type_of(existing) == "N":
                new[attribute] = _arithmetic("+", existing, operand)
            elif _type_of(operand) == _type_of(existing):
                kind = _type_of(existing)
                new[attribute] = {kind: [*existing[kind], *(e for e in operand[kind] if e not in existing[kind])]}
            else:
                raise _invalid(_WRONG_TYPE)
        for t, placeholder in update.deletes:
            attribute = names[t] if t[0] == "#" else t
            operand, existing = values[placeholder], base.get(attribute)
            if existing is None:
                continue
            kind = _type_of(existing)
            if kind != _type_of(operand):
                raise _invalid(_WRONG_TYPE)
            left = [e for e in existing[kind] if e not in operand[kind]]
            if left:
                new[attribute] = {kind: left}
            else:
                new.pop(attribute, None)
        return new, [names[t] if t[0] == "#" else t for t in update.targets]

    # --- scans and batches -----------------------------------------------------------------------

    def scan(self, **request: Any) -> dict[str, Any]:
        """Scan in key order (Limit, ExclusiveStartKey/LastEvaluatedKey, 1 MB pages,
        FilterExpression, ConsistentRead)."""
        return self._call("Scan", request, self._scan)

    def _scan(self, r: dict[str, Any], fault: Fault | None) -> dict[str, Any]:
        table = self._table(r["TableName"])
        limit = r.get("Limit")
        if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
            raise _param_error(f"Invalid value for parameter Limit, value: {limit!r}, valid min value: 1")
        text = r.get("FilterExpression")
        condition = parse_condition(text, "FilterExpression") if text is not None else None
        names, values = _check_placeholders(
            r.get("ExpressionAttributeNames"), r.get("ExpressionAttributeValues"),
            set(condition.names) if condition else set(), set(condition.values) if condition else set(),
            int(condition is not None), "FilterExpression")
        consistent = bool(r.get("ConsistentRead", False))
        every_version = not consistent and self.stale_reads is not None
        order = table.order(every_version=every_version)
        start = 0
        if r.get("ExclusiveStartKey") is not None:
            start = bisect_right(order, table.key_of(normalize_item(r["ExclusiveStartKey"], "ExclusiveStartKey"),
                                                     "starting key"))
        found: list[Item] = []
        scanned = size = 0
        last: Item | None = None
        stopped = False
        for key in order[start:]:
            item, item_bytes = self._visible(table, key, consistent)
            if item is None:
                continue
            if scanned and size + item_bytes > PAGE_LIMIT:
                stopped = True
                break
            scanned += 1
            size += item_bytes
            last = item
            if condition is None or condition.test(item, names, values):
                found.append(copy_item(item))
            if limit is not None and scanned == limit:
                stopped = True
                break
        response: dict[str, Any] = {"Items": found, "Count": len(found), "ScannedCount": scanned}
        if stopped and last is not None:
            response["LastEvaluatedKey"] = table.key_attributes(last)
        return response

    def batch_get_item(self, **request: Any) -> dict[str, Any]:
        """BatchGetItem (<= 100 keys, ConsistentRead per table, UnprocessedKeys past 16 MB)."""
        return self._call("BatchGetItem", request, self._batch_get_item)

    def _batch_get_item(self, r: dict[str, Any], fault: Fault | None) -> dict[str, Any]:
        request_items = r["RequestItems"]
        if not isinstance(request_items, dict) or not request_items:
            raise _param_error("Invalid length for parameter RequestItems, value: 0, valid min length: 1")
        wanted: list[tuple[str, _Table, Item, KeyT, bool]] = []
        for name, spec in request_items.items():
            keys = spec.get("Keys") if isinstance(spec, dict) else None
            if not isinstance(keys, list) or not keys:
                raise _param_error(f"Invalid length for parameter RequestItems.{name}.Keys, value: 0, valid min length: 1")
            extra = sorted(set(spec) - {"Keys", "ConsistentRead"})
            if extra:
                raise NotImplementedError(f"MemoryDynamoDB: BatchGetItem parameters {extra}")
            if len(keys) > 100:
                raise _invalid(f"1 validation error detected: Value at 'requestItems.{name}.member.keys' failed to "
                               "satisfy constraint: Member must have length less than or equal to 100")
            table = self._table(name)
            consistent = bool(spec.get("ConsistentRead", False))
            seen: set[KeyT] = set()
            for i, raw in enumerate(keys):
                key_item = normalize_item(raw, f"RequestItems.{name}.Keys[{i}]")
                key = table.key_of(key_item)
                if key in seen:
                    raise _invalid("Provided list of item keys contains duplicates")
                seen.add(key)
                wanted.append((name, table, key_item, key, consistent))
        if len(wanted) > 100:
            raise _invalid("Too many items requested for the BatchGetItem call")
        cut = len(wanted) - (min(fault.unprocessed, len(wanted)) if fault is not None else 0)
        responses: dict[str, list[Item]] = {name: [] for name in request_items}
        unprocessed: dict[str, dict[str, Any]] = {}
        size = 0
        for i, (name, table, key_item, key, consistent) in enumerate(wanted):
            item, item_bytes = self._visible(table, key, consistent)
            if i >= cut or (item is not None and size + item_bytes > BATCH_GET_LIMIT):
                entry = unprocessed.setdefault(name, {"Keys": []})
                entry["Keys"].append(copy_item(key_item))
                if "ConsistentRead" in request_items[name]:
                    entry["ConsistentRead"] = consistent
                continue
            if item is not None:
                size += item_bytes
                responses[name].append(copy_item(item))
        return {"Responses": responses, "UnprocessedKeys": unprocessed}

    # --- transactions -----------------------------------------------------------------------------

    def transact_write_items(self, **request: Any) -> dict[str, Any]:
        """TransactWriteItems: all or nothing, with ClientRequestToken idempotency (tokens of
        applied requests are remembered for the instance's life, not 10 minutes)."""
        return self._call("TransactWriteItems", request, self._transact_write_items)

    def _transact_write_items(self, r: dict[str, Any], fault: Fault | None) -> dict[str, Any]:
        items = r["TransactItems"]
        if not isinstance(items, list) or not items:
            raise _param_error("Invalid length for parameter TransactItems, value: 0, valid min length: 1")
        if len(items) > 100:
            raise _invalid("1 validation error detected at 'transactItems' failed to satisfy constraint: Member must "
                           "have length less than or equal to 100")
        token = r.get("ClientRequestToken")
        if token is not None and (not isinstance(token, str) or not 1 <= len(token) <= 36):
            raise _param_error(f"Invalid length for parameter ClientRequestToken, value: {token!r}, valid min length: 1")
        fingerprint = copy.deepcopy(items)
        if token is not None and token in self._tokens:
            if self._tokens[token] != fingerprint:
                raise _Fail("IdempotentParameterMismatchException",
                            "Request with same ClientRequestToken was made with different parameters")
            return {}
        plans = [self._plan(entry, i) for i, entry in enumerate(items)]
        targets: set[tuple[str, KeyT]] = set()
        for plan in plans:
            target = (plan["table"].name, plan["key"])
            if target in targets:
                raise _invalid("Transaction request cannot include multiple operations on one item")
            targets.add(target)
        reasons: list[dict[str, Any]] = []
        writes: list[tuple[_Table, KeyT, Item | None]] = []
        for plan in plans:
            table, key, spec = plan["table"], plan["key"], plan["spec"]
            current = table.items.get(key)
            condition = plan["condition"]
            names, values = plan["names"], plan["values"]
            if condition is not None and not condition.test(current, names, values):
                reason: dict[str, Any] = {"Code": "ConditionalCheckFailed", "Message": CONDITION_FAILED}
                if spec.get("ReturnValuesOnConditionCheckFailure") == "ALL_OLD" and current is not None:
                    reason["Item"] = copy_item(current)
                reasons.append(reason)
                continue
            try:
                if plan["op"] == "Update":
                    new, _ = self._apply(plan["update"], current, plan["key_item"], names, values)
                    if item_size(new) > ITEM_LIMIT:
                        raise _invalid("Item size to update has exceeded the maximum allowed size")
                    writes.append((table, key, new))
                elif plan["op"] == "Put":
                    writes.append((table, key, plan["item"]))
                elif plan["op"] == "Delete":
                    writes.append((table, key, None))
            except _Fail as fail:
                reasons.append({"Code": "ValidationError", "Message": fail.message})
                continue
            reasons.append({"Code": "None"})
        if any(reason["Code"] != "None" for reason in reasons):
            message = ("Transaction cancelled, please refer cancellation reasons for specific reasons "
                       f"[{', '.join(reason['Code'] for reason in reasons)}]")
            raise _Fail("TransactionCanceledException", message, {"CancellationReasons": reasons})
        for table, key, item in writes:
            self._write(table, key, item)
        if token is not None:
            self._tokens[token] = fingerprint
        return {}

    def _plan(self, entry: Any, i: int) -> dict[str, Any]:
        """One TransactItems entry, validated: its table, key, expressions and placeholders."""
        if not isinstance(entry, dict) or len(entry) != 1:
            raise _invalid("TransactItems can only contain one of ConditionCheck, Put, Update or Delete")
        ((op, spec),) = entry.items()
        where = f"TransactItems[{i}].{op}"
        allowed = {"TableName", "ConditionExpression", "ExpressionAttributeNames", "ExpressionAttributeValues",
                   "ReturnValuesOnConditionCheckFailure"}
        allowed |= {"ConditionCheck": {"Key"}, "Put": {"Item"}, "Delete": {"Key"},
                    "Update": {"Key", "UpdateExpression"}}.get(op, set())
        if op not in ("ConditionCheck", "Put", "Update", "Delete") or not isinstance(spec, dict):
            raise _param_error(f'Unknown parameter in TransactItems[{i}]: "{op}"')
        for name in spec:
            if name not in allowed:
                raise _param_error(f'Unknown parameter in {where}: "{name}"')
        required = {"ConditionCheck": ("TableName", "Key", "ConditionExpression"), "Put": ("TableName", "Item"),
                    "Delete": ("TableName", "Key"), "Update": ("TableName", "Key", "UpdateExpression")}[op]
        for name in required:
            if name not in spec:
                raise _param_error(f'Missing required parameter in {where}: "{name}"')
        table = self._table(spec["TableName"])
        self._return_values({"ReturnValuesOnConditionCheckFailure": spec.get("ReturnValuesOnConditionCheckFailure",
                                                                             "NONE")}, ("NONE",))
        plan: dict[str, Any] = {"op": op, "spec": spec, "table": table}
        if op == "Put":
            plan["item"] = normalize_item(spec["Item"], f"{where}.Item")
            plan["key"] = table.key_of_item(plan["item"])
            if item_size(plan["item"]) > ITEM_LIMIT:
                raise _invalid("Item size has exceeded the maximum allowed size")
        else:
            plan["key_item"] = normalize_item(spec["Key"], f"{where}.Key")
            plan["key"] = table.key_of(plan["key_item"])
        if op == "Update":
            plan["update"], plan["condition"], plan["names"], plan["values"] = self._update_request(spec, table)
        else:
            plan["condition"], plan["names"], plan["values"] = self._condition(spec)
        return plan


def fault_sequence(plan: Mapping[str, Iterable[Fault | None]]) -> FaultHook:
    """A ``faults`` hook answering each operation's calls with its planned faults in turn
    (None: no fault), then no faults: ``fault_sequence({"UpdateItem": [Fault.ambiguous()]})``."""
    queues = {op: list(faults) for op, faults in plan.items()}

    def faults(op: str, request: dict[str, Any]) -> Fault | None:
        queue = queues.get(op)
        return queue.pop(0) if queue else None

    return faults
