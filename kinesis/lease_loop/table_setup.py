"""Setting the lease table up: create it if missing, check its key schema, wait until ACTIVE."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

import botocore.exceptions
from tenacity import Retrying, retry_if_result, stop_after_delay, wait_exponential

from kinesis.aws_errors import error_code
from kinesis.errors import LeaseTableNotFoundError, LeaseTableNotReadyError, LeaseTableSchemaError
from kinesis.lease_loop import lease_model as m
from kinesis.lease_loop.table_calls import TableCalls, TableSettings, log


class SetupSettings(TableSettings, Protocol):
    """The table's settings that matter for its set-up."""

    create_if_missing: bool
    ready_timeout: float


def ensure_table(settings: SetupSettings, calls: TableCalls) -> None:
    """Create the table if missing (PAY_PER_REQUEST), validate its schema, wait for ACTIVE."""
    description = describe(settings, calls)
    if description is None:
        if not settings.create_if_missing:
            raise LeaseTableNotFoundError(
                f"lease table {settings.table_name!r} does not exist and create_if_missing is "
                "False (WorkerConfig(create_table=False)): create it (hash key 'leaseKey', "
                "type S, e.g. PAY_PER_REQUEST), check the region and endpoint, or allow "
                "creation"
            )
        try:
            calls.retrying(
                lambda: settings.client.create_table(
                    TableName=settings.table_name,
                    AttributeDefinitions=[{"AttributeName": m.KEY, "AttributeType": "S"}],
                    KeySchema=[{"AttributeName": m.KEY, "KeyType": "HASH"}],
                    BillingMode="PAY_PER_REQUEST",
                )
            )
            log.info("created lease table %s", settings.table_name)
        except botocore.exceptions.ClientError as exc:
            if error_code(exc) != "ResourceInUseException":  # created concurrently: fine
                raise
        description = describe(settings, calls)
        if description is None:  # pragma: no cover - eventual consistency of DescribeTable
            description = {"TableStatus": "CREATING", "KeySchema": [], "AttributeDefinitions": []}
    check_schema(settings.table_name, description)
    if description.get("TableStatus") not in ("ACTIVE", "UPDATING"):
        wait_active(settings, calls)


def describe(settings: TableSettings, calls: TableCalls) -> dict[str, Any] | None:
    """DescribeTable's ``Table``, ``None`` if there is no such table."""
    try:
        response = calls.retrying(lambda: settings.client.describe_table(TableName=settings.table_name))
    except LeaseTableNotFoundError:
        return None
    return dict(response["Table"])


def check_schema(table_name: str, description: Mapping[str, Any]) -> None:
    """Raise :class:`LeaseTableSchemaError` unless the key is exactly one hash key ``leaseKey`` (S)."""
    keys = [(k.get("AttributeName"), k.get("KeyType")) for k in description.get("KeySchema", [])]
    types = {a.get("AttributeName"): a.get("AttributeType") for a in description.get("AttributeDefinitions", [])}
    if keys != [(m.KEY, "HASH")] or types.get(m.KEY) != "S":
        raise LeaseTableSchemaError(
            f"table {table_name!r} has key schema {keys} with types {types}, but a lease "
            f"table needs exactly one hash key {m.KEY!r} of type S (and no range key): "
            "use another table name or recreate the table"
        )


def wait_active(settings: SetupSettings, calls: TableCalls) -> None:
    """Poll the table's status until ACTIVE (or UPDATING), at most ``ready_timeout`` seconds."""

    def status() -> str:
        d = describe(settings, calls)
        return str(d.get("TableStatus")) if d else "MISSING"

    retrying = Retrying(
        retry=retry_if_result(lambda s: s not in ("ACTIVE", "UPDATING", "DELETING")),
        wait=wait_exponential(multiplier=0.1, max=2.0),
        stop=stop_after_delay(settings.ready_timeout),
        retry_error_callback=lambda state: "TIMEOUT",
    )
    final = retrying(status)
    if final == "DELETING":
        raise LeaseTableNotReadyError(f"lease table {settings.table_name!r} is being deleted")
    if final not in ("ACTIVE", "UPDATING"):
        raise LeaseTableNotReadyError(
            f"lease table {settings.table_name!r} did not become ACTIVE within "
            f"{settings.ready_timeout:g} s (last status {final}); retry later or raise ready_timeout"
        )
