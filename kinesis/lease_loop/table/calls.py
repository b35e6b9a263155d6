"""One DynamoDB call on the lease table: retries, named errors, idempotent conditional writes.

Throttling, 5xx and connection errors are retried with jittered exponential backoff
(tenacity); exhausted retries, a missing table and denied access become the
``LeaseTable*Error`` that names the table. A conditional write that fails checks the
row's ``writeToken``: every write carries a fresh token, so a row with the token of this
very write means an earlier attempt was applied and the write is reported as done.
"""

from __future__ import annotations

import functools
import logging
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Protocol, TypeVar

import botocore.exceptions
from tenacity import Retrying, retry_if_exception, stop_after_attempt, wait_random_exponential

from kinesis.aws_errors import error_code, is_retryable
from kinesis.errors import (
    LeaseTableAccessDeniedError,
    LeaseTableNotFoundError,
    LeaseTableUnavailableError,
    access_denied_message,
    is_access_denied,
)
from kinesis.lease_loop.table import model as m
from kinesis.lease_loop.table.rules import CONDITION_NAMES

log = logging.getLogger(__name__)
"""The lease table's one logger, named after :mod:`kinesis.lease_loop.table.leases` (its users' name for it)."""

T = TypeVar("T")


class TableSettings(Protocol):
    """What a call needs from the table; read at every call (the settings may be changed)."""

    client: Any
    table_name: str
    retry_attempts: int
    retry_max_wait: float

    def clock_sleep(self, seconds: float) -> None:
        """Wait between retries (real time, unless the table was given another ``sleep``)."""


class ConditionFailed(Exception):
    """The write condition failed; ``current`` is the row as it is now (or None)."""

    def __init__(self, current: dict[str, Any] | None):
        super().__init__("conditional check failed")
        self.current = current


class TableCalls:
    """Calls on the table of ``settings``, with its retries and named errors."""

    def __init__(self, settings: TableSettings):
        self.settings = settings

    def retrying(self, fn: Callable[[], T]) -> T:
        """Call ``fn`` with retries on transient errors; wrap exhausted retries."""
        s = self.settings
        retrying = Retrying(
            retry=retry_if_exception(is_retryable),
            wait=wait_random_exponential(multiplier=0.05, max=s.retry_max_wait),
            stop=stop_after_attempt(s.retry_attempts),
            sleep=s.clock_sleep,
            reraise=True,
        )
        try:
            return retrying(fn)
        except botocore.exceptions.ClientError as exc:
            code = error_code(exc)
            if code == "ResourceNotFoundException":
                raise LeaseTableNotFoundError(
                    f"lease table {s.table_name!r} does not exist: call ensure_table() "
                    "(or LeaseTable.open) first, or check the region and endpoint"
                ) from exc
            if is_access_denied(exc):
                action = f"dynamodb:{exc.operation_name}"
                target = f"lease table {s.table_name!r}"
                raise LeaseTableAccessDeniedError(
                    access_denied_message(exc.operation_name, target, action, exc), action
                ) from exc
            if is_retryable(exc):
                raise LeaseTableUnavailableError(
                    f"lease table {s.table_name!r}: {code} after {s.retry_attempts} attempts"
                ) from exc
            raise
        except (botocore.exceptions.ConnectionError, botocore.exceptions.HTTPClientError) as exc:
            raise LeaseTableUnavailableError(
                f"lease table {s.table_name!r} unreachable after {s.retry_attempts} "
                f"attempts: {exc}"
            ) from exc

    def call(self, operation: str, **kwargs: Any) -> dict[str, Any]:
        """One call of ``operation`` with ``TableName`` filled in, retried."""
        s = self.settings
        result: dict[str, Any] = self.retrying(
            functools.partial(getattr(s.client, operation), TableName=s.table_name, **kwargs)
        )
        return result

    def write(self, op: str, token: str | None, **kwargs: Any) -> dict[str, Any]:
        """A conditional PutItem/UpdateItem/DeleteItem, idempotent under retries.

        Returns the new item (UpdateItem) or ``{}``; raises :class:`ConditionFailed` with
        the current row unless that row carries ``token`` after a retry (our own write).
        """
        call = getattr(self.settings.client, op)
        kwargs = {"TableName": self.settings.table_name, **kwargs}
        if op != "delete_item":
            kwargs["ReturnValuesOnConditionCheckFailure"] = "ALL_OLD"
        try:
            response = self.retrying(lambda: call(**kwargs))
        except botocore.exceptions.ClientError as exc:
            if error_code(exc) != "ConditionalCheckFailedException":
                raise
            current = exc.response.get("Item")
            if current is None and op != "put_item":
                current = self.get_item(kwargs["Key"][m.KEY]["S"])
            # The token is fresh for every write, so a row carrying it holds this very write:
            # an earlier attempt was applied, whoever retried it (botocore or this layer).
            if token and current is not None and current.get(m.WRITE_TOKEN, {}).get("S") == token:
                log.info("%s %s: an earlier attempt succeeded (write token matches)", op, token)
                return current
            raise ConditionFailed(current) from None
        return dict(response.get("Attributes") or {})

    def update(
        self,
        key: str,
        *,
        set_: Mapping[str, Any],
        remove: Iterable[str] = (),
        condition: str,
        values: Mapping[str, Any],
        token: str,
        delete: Mapping[str, Any] | None = None,
    ) -> dict[str, Any]:
        """A conditional UpdateItem of row ``key`` (SET ``set_``, REMOVE ``remove``, DELETE the
        elements of ``delete``'s sets from its attributes): the new row; raises
        :class:`ConditionFailed` unless the row carries ``token`` after a retry (our own write)."""
        expr, names = update_expression(set_, remove, condition)
        extra: dict[str, Any] = {}
        if delete:
            clauses = []
            for i, (attr, elements) in enumerate(delete.items()):
                names[f"#d{i}"] = attr
                extra[f":d{i}"] = elements
                clauses.append(f"#d{i} :d{i}")
            expr += " DELETE " + ", ".join(clauses)
        request = {
            "Key": {m.KEY: {"S": key}}, "UpdateExpression": expr, "ConditionExpression": condition,
            "ExpressionAttributeNames": names,
            "ExpressionAttributeValues": {**values, **{f":s{i}": v for i, v in enumerate(set_.values())}, **extra},
        }
        return self.write("update_item", token, **request, ReturnValues="ALL_NEW")

    def delete(self, key: str, *, condition: str, values: Mapping[str, Any]) -> bool:
        """A conditional DeleteItem of row ``key`` (``#name`` placeholders of
        :data:`~kinesis.lease_loop.table.rules.CONDITION_NAMES`); False if the condition failed."""
        names = {p: CONDITION_NAMES[p] for p in re.findall(r"#\w+", condition)}
        try:
            self.write(
                "delete_item",
                None,
                Key={m.KEY: {"S": key}},
                ConditionExpression=condition,
                ExpressionAttributeNames=names,
                ExpressionAttributeValues=dict(values),
            )
        except ConditionFailed:
            return False
        return True

    def get_item(self, key: str) -> dict[str, Any] | None:
        """The row ``key`` (consistent read), ``None`` if absent."""
        s = self.settings
        response = self.retrying(
            lambda: s.client.get_item(TableName=s.table_name, Key={m.KEY: {"S": key}}, ConsistentRead=True)
        )
        item = response.get("Item")
        return dict(item) if item else None


def update_expression(
    set_: Mapping[str, Any], remove: Iterable[str], condition: str
) -> tuple[str, dict[str, str]]:
    """The UpdateExpression for ``set_`` (values ``:s0``, ``:s1``...) and ``remove``, and the
    attribute names it and ``condition`` (``#name`` placeholders) use."""
    names: dict[str, str] = {}

    def alias(attr: str) -> str:
        a = f"#a{len(names)}"
        names[a] = attr
        return a

    expr = "SET " + ", ".join(f"{alias(attr)} = :s{i}" for i, attr in enumerate(set_))
    removes = [alias(attr) for attr in remove]
    if removes:
        expr += " REMOVE " + ", ".join(removes)
    for placeholder in re.findall(r"#\w+", condition):
        names[placeholder] = CONDITION_NAMES[placeholder]
    return expr, names
