"""The DynamoDB lease table: every write is conditional on what the writer last saw.

``LeaseTable`` is a thin, fenced data-access layer; the policy (who takes what, when)
lives in :mod:`kinesis.lease_loop.coordinator`. Each write method takes the :class:`Lease` as the
caller last saw it and succeeds only if the row still has that owner and counter; it
returns the lease as written (counter + 1).

Outcomes of a failed condition (``ConditionalCheckFailedException`` is never retried:
it means someone else moved the lease):

* :meth:`take` returns ``None`` (another member got there first);
* :meth:`renew`, :meth:`adopt`, :meth:`handoff`, :meth:`release`, :meth:`checkpoint` and
  :meth:`prepare_checkpoint` raise :class:`~kinesis.errors.LeaseLostError`;
* :meth:`checkpoint` and :meth:`prepare_checkpoint` raise
  :class:`~kinesis.errors.CheckpointRegressionError` if the lease is still held but the
  stored checkpoint is ahead.

Checkpoints never go backwards, and that is enforced **in the write condition**: each row
stores ``checkpointOrder``, a fixed-width string that sorts like (rank, int(sequence),
sub-sequence), and a checkpoint write carries ``checkpointOrder <= :new`` next to the
owner and counter fence. The same comparison is made locally first, so a backwards
checkpoint is refused without a round trip.

Throttling, 5xx and connection errors are retried with jittered exponential backoff
(tenacity). A write that meets a failed condition checks the row's ``writeToken``:
every write carries a fresh token, so a row with the token of this very write means an
earlier attempt was applied (its answer was an error or was lost, and botocore or this
layer retried) and the write is reported as done.

Rows that cannot be parsed raise :class:`~kinesis.errors.CorruptLeaseError` from
:meth:`get` and are reported (logged once, listed in ``TableSnapshot.corrupt``) and
skipped by :meth:`scan`; no method ever writes a row it could not parse.
"""

from __future__ import annotations

import functools
import logging
import re
import threading
import uuid
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime
from typing import Any, TypeVar

import botocore.exceptions
from tenacity import (
    Retrying,
    retry_if_exception,
    retry_if_result,
    stop_after_attempt,
    stop_after_delay,
    wait_exponential,
    wait_random_exponential,
)

from kinesis.aws_errors import error_code, is_retryable
from kinesis.errors import (
    CheckpointRegressionError,
    ConfigurationError,
    CorruptLeaseError,
    DuplicateMemberIdError,
    InvalidCheckpointError,
    LeaseLostError,
    LeaseTableAccessDeniedError,
    LeaseTableNotFoundError,
    LeaseTableNotReadyError,
    LeaseTableSchemaError,
    LeaseTableUnavailableError,
    access_denied_message,
    is_access_denied,
)
from kinesis.lease_loop import lease_model as m
from kinesis.lease_loop.clock import MONOTONIC, Clock
from kinesis.lease_loop.lease_model import (
    SHARD_END,
    TRIM_HORIZON,
    Checkpoint,
    Lease,
    LeaseState,
    MemberRow,
    TableSnapshot,
    check_lease_key,
)

log = logging.getLogger(__name__)

T = TypeVar("T")

_KEEP: Any = object()




class _ConditionFailed(Exception):
    """Internal: the write condition failed; ``current`` is the row as it is now (or None)."""

    def __init__(self, current: dict[str, Any] | None):
        super().__init__("conditional check failed")
        self.current = current


class LeaseTable:
    """Fenced operations on one DynamoDB lease table (thread-safe; share one per process).

    ``client`` is a boto3 DynamoDB client. Call :meth:`ensure_table` once (or build with
    :meth:`open`) before using the table.
    """

    def __init__(
        self,
        client: Any,
        table_name: str,
        *,
        create_if_missing: bool = True,
        ready_timeout: float = 120.0,
        retry_attempts: int = 5,
        retry_max_wait: float = 1.0,
        clock: Clock = MONOTONIC,
    ):
        if not isinstance(table_name, str) or not 3 <= len(table_name) <= 255:
            raise ConfigurationError(
                f"table_name must be a DynamoDB table name (3-255 characters), got {table_name!r}"
            )
        if isinstance(retry_attempts, bool) or not isinstance(retry_attempts, int) or retry_attempts < 1:
            raise ConfigurationError(f"retry_attempts must be an int >= 1, got {retry_attempts!r}")
        if not retry_max_wait > 0:
            raise ConfigurationError(f"retry_max_wait must be > 0 seconds, got {retry_max_wait!r}")
        if not ready_timeout > 0:
            raise ConfigurationError(f"ready_timeout must be > 0 seconds, got {ready_timeout!r}")
        self.client = client
        self.table_name = table_name
        self.create_if_missing = create_if_missing
        self.ready_timeout = float(ready_timeout)
        self.retry_attempts = retry_attempts
        self.retry_max_wait = float(retry_max_wait)
        self.clock = clock
        self._reported_corrupt: dict[str, str] = {}

    @classmethod
    def open(cls, client: Any, table_name: str, **kwargs: Any) -> LeaseTable:
        """Build the table object and :meth:`ensure_table` it."""
        return cls(client, table_name, **kwargs).ensure_table()

    def __repr__(self) -> str:
        return f"LeaseTable({self.table_name!r})"

    # --- plumbing --------------------------------------------------------------------

    def _retrying(self, fn: Callable[[], T]) -> T:
        """Call ``fn`` with retries on transient errors; wrap exhausted retries."""
        retrying = Retrying(
            retry=retry_if_exception(is_retryable),
            wait=wait_random_exponential(multiplier=0.05, max=self.retry_max_wait),
            stop=stop_after_attempt(self.retry_attempts),
            reraise=True,
        )
        try:
            return retrying(fn)
        except botocore.exceptions.ClientError as exc:
            code = error_code(exc)
            if code == "ResourceNotFoundException":
                raise LeaseTableNotFoundError(
                    f"lease table {self.table_name!r} does not exist: call ensure_table() "
                    "(or LeaseTable.open) first, or check the region and endpoint"
                ) from exc
            if is_access_denied(exc):
                action = f"dynamodb:{exc.operation_name}"
                target = f"lease table {self.table_name!r}"
                raise LeaseTableAccessDeniedError(
                    access_denied_message(exc.operation_name, target, action, exc), action
                ) from exc
            if is_retryable(exc):
                raise LeaseTableUnavailableError(
                    f"lease table {self.table_name!r}: {code} after {self.retry_attempts} attempts"
                ) from exc
            raise
        except (botocore.exceptions.ConnectionError, botocore.exceptions.HTTPClientError) as exc:
            raise LeaseTableUnavailableError(
                f"lease table {self.table_name!r} unreachable after {self.retry_attempts} "
                f"attempts: {exc}"
            ) from exc

    def _write(self, op: str, token: str | None, **kwargs: Any) -> dict[str, Any]:
        """A conditional PutItem/UpdateItem/DeleteItem, idempotent under retries.

        Returns the new item (UpdateItem) or ``{}``; raises :class:`_ConditionFailed` with
        the current row unless that row carries ``token`` after a retry (our own write).
        """
        call = getattr(self.client, op)
        kwargs = {"TableName": self.table_name, **kwargs}
        if op != "delete_item":
            kwargs["ReturnValuesOnConditionCheckFailure"] = "ALL_OLD"
        try:
            response = self._retrying(lambda: call(**kwargs))
        except botocore.exceptions.ClientError as exc:
            if error_code(exc) != "ConditionalCheckFailedException":
                raise
            current = exc.response.get("Item")
            if current is None and op != "put_item":
                current = self._get_item(kwargs["Key"][m.KEY]["S"])
            # The token is fresh for every write, so a row carrying it holds this very write:
            # an earlier attempt was applied, whoever retried it (botocore or this layer).
            if token and current is not None and current.get(m.WRITE_TOKEN, {}).get("S") == token:
                log.info("%s %s: an earlier attempt succeeded (write token matches)", op, token)
                return current
            raise _ConditionFailed(current) from None
        return dict(response.get("Attributes") or {})

    def _update(
        self,
        key: str,
        *,
        set_: Mapping[str, Any],
        remove: Iterable[str] = (),
        condition: str,
        values: Mapping[str, Any],
        token: str,
    ) -> dict[str, Any]:
        names: dict[str, str] = {}
        vals: dict[str, Any] = dict(values)

        def alias(attr: str) -> str:
            a = f"#a{len(names)}"
            names[a] = attr
            return a

        sets = []
        for i, (attr, value) in enumerate(set_.items()):
            vals[f":s{i}"] = value
            sets.append(f"{alias(attr)} = :s{i}")
        expr = "SET " + ", ".join(sets)
        removes = [alias(attr) for attr in remove]
        if removes:
            expr += " REMOVE " + ", ".join(removes)
        # Attribute names in the condition are written as #name placeholders by callers.
        for placeholder in re.findall(r"#\w+", condition):
            names[placeholder] = _CONDITION_NAMES[placeholder]
        return self._write(
            "update_item",
            token,
            Key={m.KEY: {"S": key}},
            UpdateExpression=expr,
            ConditionExpression=condition,
            ExpressionAttributeNames=names,
            ExpressionAttributeValues=vals,
            ReturnValues="ALL_NEW",
        )

    def _get_item(self, key: str) -> dict[str, Any] | None:
        response = self._retrying(
            lambda: self.client.get_item(
                TableName=self.table_name, Key={m.KEY: {"S": key}}, ConsistentRead=True
            )
        )
        item = response.get("Item")
        return dict(item) if item else None

    # --- table lifecycle -------------------------------------------------------------

    def ensure_table(self) -> LeaseTable:
        """Create the table if missing (PAY_PER_REQUEST), validate its schema, wait for ACTIVE."""
        description = self._describe()
        if description is None:
            if not self.create_if_missing:
                raise LeaseTableNotFoundError(
                    f"lease table {self.table_name!r} does not exist and create_if_missing is "
                    "False (WorkerConfig(create_table=False)): create it (hash key 'leaseKey', "
                    "type S, e.g. PAY_PER_REQUEST), check the region and endpoint, or allow "
                    "creation"
                )
            try:
                self._retrying(
                    lambda: self.client.create_table(
                        TableName=self.table_name,
                        AttributeDefinitions=[{"AttributeName": m.KEY, "AttributeType": "S"}],
                        KeySchema=[{"AttributeName": m.KEY, "KeyType": "HASH"}],
                        BillingMode="PAY_PER_REQUEST",
                    )
                )
                log.info("created lease table %s", self.table_name)
            except botocore.exceptions.ClientError as exc:
                if error_code(exc) != "ResourceInUseException":  # created concurrently: fine
                    raise
            description = self._describe()
            if description is None:  # pragma: no cover - eventual consistency of DescribeTable
                description = {"TableStatus": "CREATING", "KeySchema": [], "AttributeDefinitions": []}
        self._validate_schema(description)
        if description.get("TableStatus") not in ("ACTIVE", "UPDATING"):
            self._wait_active()
        return self

    def _describe(self) -> dict[str, Any] | None:
        try:
            response = self._retrying(lambda: self.client.describe_table(TableName=self.table_name))
        except LeaseTableNotFoundError:
            return None
        return dict(response["Table"])

    def _validate_schema(self, description: Mapping[str, Any]) -> None:
        keys = [(k.get("AttributeName"), k.get("KeyType")) for k in description.get("KeySchema", [])]
        types = {a.get("AttributeName"): a.get("AttributeType") for a in description.get("AttributeDefinitions", [])}
        if keys != [(m.KEY, "HASH")] or types.get(m.KEY) != "S":
            raise LeaseTableSchemaError(
                f"table {self.table_name!r} has key schema {keys} with types {types}, but a lease "
                f"table needs exactly one hash key {m.KEY!r} of type S (and no range key): "
                "use another table name or recreate the table"
            )

    def _wait_active(self) -> None:
        def status() -> str:
            d = self._describe()
            return str(d.get("TableStatus")) if d else "MISSING"

        retrying = Retrying(
            retry=retry_if_result(lambda s: s not in ("ACTIVE", "UPDATING", "DELETING")),
            wait=wait_exponential(multiplier=0.1, max=2.0),
            stop=stop_after_delay(self.ready_timeout),
            retry_error_callback=lambda state: "TIMEOUT",
        )
        final = retrying(status)
        if final == "DELETING":
            raise LeaseTableNotReadyError(f"lease table {self.table_name!r} is being deleted")
        if final not in ("ACTIVE", "UPDATING"):
            raise LeaseTableNotReadyError(
                f"lease table {self.table_name!r} did not become ACTIVE within "
                f"{self.ready_timeout:g} s (last status {final}); retry later or raise ready_timeout"
            )

    # --- reads -----------------------------------------------------------------------

    def get(self, key: str) -> Lease | None:
        """The lease row (consistent read), ``None`` if absent; raises ``CorruptLeaseError``."""
        item = self._get_item(check_lease_key(key))
        return None if item is None else m.lease_from_item(item)

    def scan(self, *, page_size: int | None = None, consistent: bool = True) -> TableSnapshot:
        """Read every row (paginated; strongly consistent unless ``consistent=False``, half the
        read units): leases, heartbeat rows and corrupt rows."""
        leases: dict[str, Lease] = {}
        members: dict[str, MemberRow] = {}
        corrupt: dict[str, str] = {}
        kwargs: dict[str, Any] = {"TableName": self.table_name, "ConsistentRead": consistent}
        if page_size is not None:
            kwargs["Limit"] = page_size
        while True:
            page = self._retrying(lambda: self.client.scan(**kwargs))
            for item in page.get("Items", []):
                key = item.get(m.KEY, {}).get("S", "")
                try:
                    if key.startswith(m.MEMBER_PREFIX):
                        row = m.member_from_item(item)
                        members[row.member_id] = row
                    elif key.startswith(m.RESERVED_PREFIX):
                        continue  # reserved for future internal rows
                    else:
                        leases[key] = m.lease_from_item(item)
                except CorruptLeaseError as exc:
                    corrupt[exc.key] = exc.reason
                    self._report_corrupt(exc)
            last = page.get("LastEvaluatedKey")
            if not last:
                break
            kwargs["ExclusiveStartKey"] = last
        return TableSnapshot(leases, members, corrupt, self.clock())

    def get_many(self, keys: Iterable[str], *, consistent: bool = False) -> dict[str, Lease | None]:
        """Read the rows of ``keys`` (BatchGetItem, 100 keys a request, unprocessed keys
        retried with backoff): key -> lease, or ``None`` when there is no row. Corrupt rows are
        reported like :meth:`scan` does and left out. Eventually consistent by default: a
        stale row can only cost time, never safety, because every write is conditional on
        what it read."""
        wanted = sorted({check_lease_key(k) for k in keys})
        found: dict[str, Lease | None] = dict.fromkeys(wanted)
        for key, item in self.get_items(wanted, consistent=consistent).items():
            try:
                found[key] = m.lease_from_item(item)
            except CorruptLeaseError as exc:
                found.pop(key, None)
                self._report_corrupt(exc)
        return found

    def get_items(self, keys: Iterable[str], *, consistent: bool = False) -> dict[str, dict[str, Any]]:
        """The raw items of ``keys`` that exist (BatchGetItem, 100 keys a request, unprocessed
        keys retried with backoff); also reserved rows (no key check)."""
        wanted = sorted(set(keys))
        found: dict[str, dict[str, Any]] = {}
        for start in range(0, len(wanted), 100):
            pending: dict[str, Any] = {
                self.table_name: {
                    "Keys": [{m.KEY: {"S": k}} for k in wanted[start : start + 100]],
                    "ConsistentRead": consistent,
                }
            }
            for attempt in range(self.retry_attempts * 4):
                response = self._retrying(functools.partial(self.client.batch_get_item, RequestItems=pending))
                for item in response.get("Responses", {}).get(self.table_name, []):
                    found[item[m.KEY]["S"]] = item
                pending = response.get("UnprocessedKeys") or {}
                if not pending:
                    break
                self.clock_sleep(min(self.retry_max_wait, 0.01 * 2**attempt))
            else:
                raise LeaseTableUnavailableError(
                    f"lease table {self.table_name!r}: BatchGetItem left keys unprocessed after "
                    f"{self.retry_attempts * 4} attempts (throttled): raise the table's read capacity"
                )
        return found

    def call(self, operation: str, **kwargs: Any) -> dict[str, Any]:
        """One DynamoDB call on this table (``TableName`` filled in) with the table's retries
        and named errors; for rows outside the lease schema (e.g. the manifest store)."""
        result: dict[str, Any] = self._retrying(
            functools.partial(getattr(self.client, operation), TableName=self.table_name, **kwargs)
        )
        return result

    def clock_sleep(self, seconds: float) -> None:
        """Wait between retries of unprocessed keys (real time)."""
        threading.Event().wait(seconds)

    @property
    def corrupt_rows(self) -> dict[str, str]:
        """Every corrupt row reported so far (key -> reason): skipped, never written."""
        return dict(self._reported_corrupt)

    def _report_corrupt(self, exc: CorruptLeaseError) -> None:
        if self._reported_corrupt.get(exc.key) != exc.reason:
            self._reported_corrupt[exc.key] = exc.reason
            log.error("%s (skipped)", exc)

    def list_leases(self) -> list[Lease]:
        """Every parseable lease, sorted by key."""
        return [v for _, v in sorted(self.scan().leases.items())]

    # --- lease writes ----------------------------------------------------------------

    def create_lease_if_absent(
        self,
        key: str,
        *,
        parents: Iterable[str] = (),
        checkpoint: Checkpoint = TRIM_HORIZON,
        owner: str | None = None,
    ) -> Lease | None:
        """Create the row if no row has ``key``; ``owner`` takes it in the same write.

        Returns the created lease, or ``None`` if a row (possibly corrupt) already exists.
        """
        check_lease_key(key)
        parents_t = tuple(parents)
        if any(not isinstance(p, str) or not p for p in parents_t):
            raise ConfigurationError(f"parents must be non-empty strings, got {parents_t!r}")
        cp = Checkpoint.of(checkpoint)
        token = uuid.uuid4().hex
        lease = Lease(
            key=key,
            owner=owner,
            counter=1 if owner is not None else 0,
            checkpoint=cp,
            parents=parents_t,
            state=LeaseState.SHARD_END if cp.is_shard_end else LeaseState.ACTIVE,
            write_token=token,
        )
        try:
            self._write(
                "put_item",
                token,
                Item=m.lease_to_item(lease),
                ConditionExpression="attribute_not_exists(#k)",
                ExpressionAttributeNames={"#k": m.KEY},
            )
        except _ConditionFailed:
            return None
        return lease

    def take(self, lease: Lease, owner: str) -> Lease | None:
        """Take ``lease`` (free, expired, orphaned, or from an earlier incarnation of ``owner``).

        Conditional on the owner and counter in ``lease``; returns ``None`` if the row moved.
        """
        _check_member(owner)
        token = uuid.uuid4().hex
        switches = lease.owner_switches_since_checkpoint
        if lease.owner is not None and lease.owner != owner:
            switches += 1
        condition, values = _unchanged_since(lease)
        try:
            item = self._update(
                lease.key,
                set_={
                    m.OWNER: {"S": owner},
                    m.COUNTER: _num(lease.counter + 1),
                    m.OWNER_SWITCHES: _num(switches),
                    m.WRITE_TOKEN: {"S": token},
                },
                remove=(m.PENDING_HANDOFF, m.HANDED_OFF_BY),
                condition=condition,
                values=values,
                token=token,
            )
        except _ConditionFailed:
            return None
        return m.lease_from_item(item)

    def renew(self, lease: Lease, *, pending_handoff: str | None = _KEEP) -> Lease:
        """Bump the counter (heartbeat of the holder); optionally set/clear ``pendingHandoffTo``."""
        set_: dict[str, Any] = {}
        remove: list[str] = []
        if pending_handoff is None:
            remove.append(m.PENDING_HANDOFF)
        elif pending_handoff is not _KEEP:
            _check_member(pending_handoff)
            set_[m.PENDING_HANDOFF] = {"S": pending_handoff}
        return self._fenced(lease, "renew", set_, remove)

    def adopt(self, lease: Lease) -> Lease:
        """Accept a lease handed off to ``lease.owner``: renew from the counter observed.

        The new owner did not write that counter; the hand-off write did. Renewing from it
        is what makes the lease this process's (and clears ``handedOffBy``).
        """
        if lease.handed_off_by is None:
            raise LeaseLostError(
                f"lease {lease.key!r} was not handed off to {lease.owner!r}: take it instead"
            )
        return self._fenced(lease, "adopt", {}, [m.HANDED_OFF_BY])

    def handoff(self, lease: Lease, to: str) -> Lease:
        """Pass the lease to ``to`` in one write, keeping the checkpoint; ``to`` adopts it at once."""
        _check_member(to)
        if to == lease.owner:
            raise ConfigurationError(f"cannot hand lease {lease.key!r} off to its own owner {to!r}")
        switches = lease.owner_switches_since_checkpoint + 1
        return self._fenced(
            lease,
            "hand off",
            {
                m.OWNER: {"S": to},
                m.HANDED_OFF_BY: {"S": lease.owner or ""},
                m.OWNER_SWITCHES: _num(switches),
            },
            [m.PENDING_HANDOFF],
        )

    def release(self, lease: Lease) -> Lease:
        """Give the lease up (evict): the row stays with its checkpoint and no owner."""
        return self._fenced(lease, "release", {}, [m.OWNER, m.PENDING_HANDOFF, m.HANDED_OFF_BY])

    evict = release
    """KCL's name for :meth:`release`."""

    def checkpoint(self, lease: Lease, checkpoint: Checkpoint | str) -> Lease:
        """Record progress; fenced by owner + counter and by ``checkpointOrder <= new``.

        Raises :class:`LeaseLostError` if the lease moved, :class:`CheckpointRegressionError`
        if ``checkpoint`` is behind the stored one. :data:`SHARD_END` also sets the state.
        """
        cp = Checkpoint.of(checkpoint)
        if cp < lease.checkpoint:
            raise CheckpointRegressionError(
                f"checkpoint {cp} for lease {lease.key!r} is behind the stored {lease.checkpoint}: "
                "checkpoints only move forward"
            )
        attrs: dict[str, Any] = dict(m.checkpoint_attributes(cp))
        attrs[m.OWNER_SWITCHES] = _num(0)
        attrs[m.STATE] = {"S": (LeaseState.SHARD_END if cp.is_shard_end else LeaseState.ACTIVE).value}
        remove = [m.PENDING_CHECKPOINT, m.PENDING_SUB_SEQUENCE]  # a checkpoint supersedes it
        if cp.timestamp is None:
            remove.append(m.CHECKPOINT_TS)
        return self._fenced(
            lease,
            "checkpoint",
            attrs,
            remove,
            extra_condition="#ord <= :ord",
            extra_values={":ord": {"S": cp.order_string}},
            new_checkpoint=cp,
        )

    def prepare_checkpoint(self, lease: Lease, checkpoint: Checkpoint | str) -> Lease:
        """Record a pending checkpoint (the first phase of a two-phase checkpoint).

        Fenced like :meth:`checkpoint` (owner + counter, and ``checkpointOrder <= new``: a
        pending checkpoint is never behind the stored one); the checkpoint itself does not
        move. The next :meth:`checkpoint` removes it. Raises :class:`LeaseLostError`,
        :class:`CheckpointRegressionError`, or :class:`InvalidCheckpointError` for a sentinel.
        """
        cp = Checkpoint.of(checkpoint)
        if cp.is_initial or cp.is_shard_end:
            raise InvalidCheckpointError(
                f"a pending checkpoint is a sequence number, got {cp}: checkpoint SHARD_END directly"
            )
        if cp < lease.checkpoint:
            raise CheckpointRegressionError(
                f"pending checkpoint {cp} for lease {lease.key!r} is behind the stored checkpoint "
                f"{lease.checkpoint}: checkpoints only move forward"
            )
        return self._fenced(
            lease,
            "prepare a checkpoint on",
            m.pending_checkpoint_attributes(cp),
            [],
            extra_condition="#ord <= :ord",
            extra_values={":ord": {"S": cp.order_string}},
            new_checkpoint=cp,
        )

    def mark_shard_end(self, lease: Lease) -> Lease:
        """Checkpoint :data:`SHARD_END`: the shard was fully processed."""
        return self.checkpoint(lease, SHARD_END)

    def delete(self, lease: Lease) -> bool:
        """Delete the row if it is unchanged since ``lease`` was read (e.g. finished parents)."""
        condition, values = _unchanged_since(lease)
        try:
            self._write(
                "delete_item",
                None,
                Key={m.KEY: {"S": lease.key}},
                ConditionExpression=condition,
                ExpressionAttributeNames={"#c": m.COUNTER, "#o": m.OWNER},
                ExpressionAttributeValues=values,
            )
        except _ConditionFailed:
            return False
        return True

    def _fenced(
        self,
        lease: Lease,
        what: str,
        set_: Mapping[str, Any],
        remove: Iterable[str],
        *,
        extra_condition: str | None = None,
        extra_values: Mapping[str, Any] | None = None,
        new_checkpoint: Checkpoint | None = None,
    ) -> Lease:
        """A write by the holder, conditional on owner and counter; bumps the counter."""
        if lease.owner is None:
            raise LeaseLostError(f"cannot {what} lease {lease.key!r}: it has no owner (take it first)")
        token = uuid.uuid4().hex
        condition = "#o = :o AND #c = :c"
        values: dict[str, Any] = {":o": {"S": lease.owner}, ":c": _num(lease.counter)}
        if extra_condition:
            condition += f" AND {extra_condition}"
            values.update(extra_values or {})
        full_set = {m.COUNTER: _num(lease.counter + 1), m.WRITE_TOKEN: {"S": token}, **set_}
        try:
            item = self._update(
                lease.key, set_=full_set, remove=remove, condition=condition, values=values, token=token
            )
        except _ConditionFailed as failed:
            raise self._explain(lease, what, failed.current, new_checkpoint) from None
        return m.lease_from_item(item)

    def _explain(
        self, lease: Lease, what: str, current: dict[str, Any] | None, cp: Checkpoint | None
    ) -> Exception:
        if current is None:
            return LeaseLostError(f"cannot {what} lease {lease.key!r}: the row was deleted")
        owner = current.get(m.OWNER, {}).get("S")
        counter = current.get(m.COUNTER, {}).get("N")
        if owner == lease.owner and counter == str(lease.counter) and cp is not None:
            stored = current.get(m.CHECKPOINT, {}).get("S")
            kind = "checkpoint" if what == "checkpoint" else "pending checkpoint"
            return CheckpointRegressionError(
                f"{kind} {cp} for lease {lease.key!r} is behind the stored checkpoint "
                f"{stored}: checkpoints only move forward"
            )
        return LeaseLostError(
            f"cannot {what} lease {lease.key!r}: {lease.owner!r} no longer holds it (now owner "
            f"{owner!r}, counter {counter}; expected counter {lease.counter}); stop processing it"
        )

    # --- membership heartbeat rows ---------------------------------------------------

    def heartbeat(self, member_id: str, incarnation: str, previous: int | None) -> MemberRow:
        """Write member ``member_id``'s heartbeat row; ``previous`` is the counter it last wrote.

        The first heartbeat of an incarnation (``previous=None``) overwrites any older row of
        the same member id. Later ones are conditional on the incarnation and counter: a
        mismatch means another process uses the same member id (:class:`DuplicateMemberIdError`).
        A row deleted meanwhile (garbage-collected as stale) is recreated.
        """
        _check_member(member_id)
        key = m.MEMBER_PREFIX + member_id
        counter = 1 if previous is None else previous + 1
        item = {
            m.KEY: {"S": key},
            m.MEMBER_ID: {"S": member_id},
            m.HEARTBEAT: _num(counter),
            m.INCARNATION: {"S": incarnation},
            m.STARTED_AT: {"S": datetime.now(UTC).isoformat()},
        }
        if previous is None:
            self._retrying(lambda: self.client.put_item(TableName=self.table_name, Item=item))
            return m.member_from_item(item)
        try:
            new = self._update(
                key,
                set_={m.HEARTBEAT: _num(counter)},
                condition="#inc = :inc AND #hb = :hb",
                values={":inc": {"S": incarnation}, ":hb": _num(previous)},
                token="",
            )
        except _ConditionFailed as failed:
            if failed.current is None:
                log.warning("heartbeat row of %s was deleted; recreating it", member_id)
                return self.heartbeat(member_id, incarnation, None)
            other = failed.current.get(m.INCARNATION, {}).get("S")
            if other == incarnation and failed.current.get(m.HEARTBEAT, {}).get("N") == str(counter):
                return m.member_from_item(failed.current)  # a retried write that had succeeded
            raise DuplicateMemberIdError(
                f"member id {member_id!r} is heartbeating from another process (incarnation "
                f"{other}, this one {incarnation}): give every member a unique id (e.g. the pod "
                "name); this process stops counting itself live"
            ) from None
        return m.member_from_item(new)

    def delete_member(self, member_id: str, *, incarnation: str, heartbeat: int | None = None) -> bool:
        """Delete a heartbeat row if it still has ``incarnation`` (and ``heartbeat`` if given)."""
        condition = "#inc = :inc"
        values: dict[str, Any] = {":inc": {"S": incarnation}}
        names = {"#inc": m.INCARNATION}
        if heartbeat is not None:
            condition += " AND #hb = :hb"
            values[":hb"] = _num(heartbeat)
            names["#hb"] = m.HEARTBEAT
        try:
            self._write(
                "delete_item",
                None,
                Key={m.KEY: {"S": m.MEMBER_PREFIX + member_id}},
                ConditionExpression=condition,
                ExpressionAttributeNames=names,
                ExpressionAttributeValues=values,
            )
        except _ConditionFailed:
            return False
        return True


_CONDITION_NAMES = {
    "#o": m.OWNER,
    "#c": m.COUNTER,
    "#ord": m.CHECKPOINT_ORDER,
    "#inc": m.INCARNATION,
    "#hb": m.HEARTBEAT,
}


def _unchanged_since(lease: Lease) -> tuple[str, dict[str, Any]]:
    """The condition "counter and owner are still what ``lease`` saw", with its values."""
    if lease.owner is None:
        return "#c = :c AND attribute_not_exists(#o)", {":c": _num(lease.counter)}
    return "#c = :c AND #o = :o", {":c": _num(lease.counter), ":o": {"S": lease.owner}}


def _num(value: int) -> dict[str, str]:
    return {"N": str(value)}


def _check_member(member: object) -> str:
    if not isinstance(member, str) or not member:
        raise ConfigurationError(f"a member id must be a non-empty string, got {member!r}")
    return member
