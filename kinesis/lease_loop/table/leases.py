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

This module holds the facade and the fenced lease writes; the table's parts are
``table_calls`` (retries, idempotent writes), ``table_setup``, ``table_reads``,
``member_rows`` (heartbeat rows), ``session_rows`` and ``write_rules`` (what a write sets, on what
condition, and what a failed one means: no I/O).

Setting the lease table up: create it if missing, check its key schema, wait until ACTIVE.
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Protocol

import botocore.exceptions
from tenacity import Retrying, retry_if_result, stop_after_delay, wait_exponential

from kinesis.aws_errors import error_code
from kinesis.errors import (
    ConfigurationError,
    LeaseLostError,
    LeaseTableNotFoundError,
    LeaseTableNotReadyError,
    LeaseTableSchemaError,
)
from kinesis.lease_loop.table import model as m
from kinesis.lease_loop.table.calls import ConditionFailed, TableCalls, TableSettings
from kinesis.lease_loop.table.model import (
    SHARD_END,
    TRIM_HORIZON,
    Checkpoint,
    Lease,
    MemberRow,
    SessionCheck,
    SessionRow,
    TableSnapshot,
    check_lease_key,
)
from kinesis.lease_loop.table.reads import CorruptRows, TableReads
from kinesis.lease_loop.table.rules import (
    check_member,
    check_pending_checkpoint,
    checkpoint_change,
    explain_failure,
    held_state,
    new_lease,
    num,
    still_held,
    unchanged_since,
)
from kinesis.lease_loop.table.sessions import MemberRows, SessionRows
from kinesis.lease_loop.timing import MONOTONIC, Clock

log = logging.getLogger(__name__)

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


_KEEP: Any = object()


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
        sleep: Callable[[float], None] | None = None,
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
        self._sleep = sleep
        self._calls = TableCalls(self)
        self._corrupt = CorruptRows()
        self._reads = TableReads(self, self._calls, self._corrupt)
        self._members = MemberRows(self._calls)
        self._sessions = SessionRows(self._calls)

    @classmethod
    def open(cls, client: Any, table_name: str, **kwargs: Any) -> LeaseTable:
        """Build the table object and :meth:`ensure_table` it."""
        return cls(client, table_name, **kwargs).ensure_table()

    def __repr__(self) -> str:
        return f"LeaseTable({self.table_name!r})"

    def ensure_table(self) -> LeaseTable:
        """Create the table if missing (PAY_PER_REQUEST), validate its schema, wait for ACTIVE."""
        ensure_table(self, self._calls)
        return self

    def call(self, operation: str, **kwargs: Any) -> dict[str, Any]:
        """One DynamoDB call on this table (``TableName`` filled in) with the table's retries
        and named errors; for rows outside the lease schema (e.g. the manifest store)."""
        return self._calls.call(operation, **kwargs)

    # --- reads -----------------------------------------------------------------------

    def get(self, key: str) -> Lease | None:
        """The lease row (consistent read), ``None`` if absent; raises ``CorruptLeaseError``."""
        item = self._calls.get_item(check_lease_key(key))
        return None if item is None else m.lease_from_item(item)

    def scan(self, *, page_size: int | None = None, consistent: bool = True) -> TableSnapshot:
        """Read every row (paginated; strongly consistent unless ``consistent=False``, half the
        read units): leases, heartbeat rows and corrupt rows."""
        return self._reads.scan(page_size=page_size, consistent=consistent)

    def get_many(self, keys: Iterable[str], *, consistent: bool = False) -> dict[str, Lease | None]:
        """Read the rows of ``keys`` (BatchGetItem, 100 keys a request, unprocessed keys
        retried with backoff): key -> lease, or ``None`` when there is no row. Corrupt rows are
        reported like :meth:`scan` does and left out. Eventually consistent by default: a
        stale row can only cost time, never safety, because every write is conditional on
        what it read."""
        return self.read_rows(keys, (), consistent=consistent)[0]

    def read_rows(self, keys: Iterable[str], members: Iterable[str], *, consistent: bool = False
                  ) -> tuple[dict[str, Lease | None], dict[str, SessionRow | None]]:
        """:meth:`get_many` of ``keys`` and, in the same requests, the session rows of
        ``members`` (member -> its row, ``None`` without one)."""
        leases, sessions, _ = self.read_round(keys, members, (), consistent=consistent)
        return leases, sessions

    def read_round(self, keys: Iterable[str], members: Iterable[str], raw: Iterable[str], *, consistent: bool = False
                   ) -> tuple[dict[str, Lease | None], dict[str, SessionRow | None], dict[str, dict[str, Any]]]:
        """:meth:`read_rows`, and in the same requests the raw items of the reserved rows
        ``raw`` (those that exist)."""
        wanted = sorted({check_lease_key(k) for k in keys})
        members = sorted(set(members))
        extra = sorted(set(raw))
        items = self.get_items([*wanted, *(m.SESSION_PREFIX + member for member in members), *extra],
                               consistent=consistent)
        return (self._reads.leases_of(wanted, items), self._reads.sessions_of(members, items),
                {k: items[k] for k in extra if k in items})

    def get_items(self, keys: Iterable[str], *, consistent: bool = False) -> dict[str, dict[str, Any]]:
        """The raw items of ``keys`` that exist (BatchGetItem, 100 keys a request, unprocessed
        keys retried with backoff); also reserved rows (no key check)."""
        return self._reads.get_items(keys, consistent=consistent, sleep=self.clock_sleep)

    def clock_sleep(self, seconds: float) -> None:
        """Wait between retries (real time; ``sleep`` if one was given, e.g. a simulator's)."""
        if self._sleep is not None:
            self._sleep(seconds)
        else:
            threading.Event().wait(seconds)

    @property
    def corrupt_rows(self) -> dict[str, str]:
        """Every corrupt row reported so far (key -> reason): skipped, never written."""
        return self._corrupt.rows

    def list_leases(self) -> list[Lease]:
        """Every parseable lease, sorted by key."""
        return [v for _, v in sorted(self.scan().leases.items())]

    # --- membership heartbeat rows ---------------------------------------------------

    def heartbeat(self, member_id: str, incarnation: str, previous: int | None) -> MemberRow:
        """Write member ``member_id``'s heartbeat row; ``previous`` is the counter it last wrote.

        The first heartbeat of an incarnation (``previous=None``) overwrites any older row of
        the same member id. Later ones are conditional on the incarnation and counter: a
        mismatch means another process uses the same member id (:class:`DuplicateMemberIdError`).
        A row deleted meanwhile (garbage-collected as stale) is recreated.
        """
        return self._members.heartbeat(member_id, incarnation, previous)

    def delete_member(self, member_id: str, *, incarnation: str, heartbeat: int | None = None) -> bool:
        """Delete a heartbeat row if it still has ``incarnation`` (and ``heartbeat`` if given)."""
        return self._members.delete(member_id, incarnation=incarnation, heartbeat=heartbeat)

    # --- session rows ----------------------------------------------------------------

    def renew_session(self, member_id: str, token: str, previous: int | None, *, plan_version: int = 0,
                      handled: frozenset[str] = frozenset(), loads: bytes | None = None) -> SessionRow:
        """Renew member ``member_id``'s session (see :mod:`~kinesis.lease_loop.table.sessions`)."""
        return self._sessions.renew(member_id, token, previous, plan_version=plan_version, handled=handled,
                                    loads=loads)

    def has_session(self, member_id: str) -> bool:
        """Whether ``member_id`` has a session row (it runs, or ran lately): one consistent read."""
        return bool(self.get_items([m.SESSION_PREFIX + member_id], consistent=True))

    def tell_members_version(self, member_id: str, version: int) -> bool:
        """Tell ``member_id`` (on its session row) that the member list moved to ``version``."""
        return self._sessions.tell(member_id, m.MEMBERS_VERSION, version)

    def tell_plan_version(self, member_id: str, version: int) -> bool:
        """Tell ``member_id`` (on its session row) that the plan's head was rebuilt as ``version``."""
        return self._sessions.tell(member_id, m.PLAN_TOLD, version)

    def offer(self, member_id: str, key: str) -> bool:
        """Add ``key`` to ``member_id``'s session row's offers before handing it off to it;
        False if that member has no session row (the hand-off is then not made)."""
        return self._sessions.offer(member_id, key)

    def delete_session(self, member_id: str, token: str, counter: int | None = None) -> bool:
        """Delete ``member_id``'s session row if it still has ``token`` (and ``counter``)."""
        return self._sessions.delete(member_id, token, counter)

    # --- lease writes ----------------------------------------------------------------

    def create_lease_if_absent(
        self,
        key: str,
        *,
        parents: Iterable[str] = (),
        checkpoint: Checkpoint = TRIM_HORIZON,
        owner: str | None = None,
        session: str | None = None,
    ) -> Lease | None:
        """Create the row if no row has ``key``; ``owner`` takes it in the same write (under
        its ``session`` token, if given).

        Returns the created lease, or ``None`` if a row (possibly corrupt) already exists.
        """
        token = uuid.uuid4().hex
        lease = new_lease(key, parents, checkpoint, owner, token, session)
        try:
            self._calls.write(
                "put_item",
                token,
                Item=m.lease_to_item(lease),
                ConditionExpression="attribute_not_exists(#k)",
                ExpressionAttributeNames={"#k": m.KEY},
            )
        except ConditionFailed:
            return None
        return lease

    def take(self, lease: Lease, owner: str, *, session: str | None = None,
             check: SessionCheck | None = None) -> Lease | None:
        """Take ``lease`` (free, expired, orphaned, or from an earlier incarnation of ``owner``)
        under ``owner``'s ``session`` token (None: none recorded).

        Conditional on the owner and counter in ``lease``; with ``check`` (a take timed by the
        holder's session), a strongly consistent read of that session row first must still
        show what was timed. Returns ``None`` if the row or the session moved. (No transaction
        is needed: a holder whose session renewal is answered only after its leases ran out
        writes each lease again before it processes it, and one of the two writes fails; see
        :mod:`~kinesis.lease_loop.holder`.)
        """
        check_member(owner)
        if check is not None and not check.holds(self.read_rows((), [check.member_id], consistent=True)[1][
                check.member_id]):
            return None
        token = uuid.uuid4().hex
        switches = lease.owner_switches_since_checkpoint
        if lease.owner is not None and lease.owner != owner:
            switches += 1
        condition, values = unchanged_since(lease)
        set_ = {m.OWNER: {"S": owner}, m.COUNTER: num(lease.counter + 1), m.OWNER_SWITCHES: num(switches),
                m.WRITE_TOKEN: {"S": token}, m.STATE: {"S": held_state(lease.checkpoint, session).value}}
        remove = [m.PENDING_HANDOFF, m.HANDED_OFF_BY]
        if session is not None:
            set_.update(m.session_attributes(session, lease.counter + 1))
        else:
            remove += m.SESSION_ATTRIBUTES
        try:
            item = self._calls.update(lease.key, set_=set_, remove=remove, condition=condition, values=values,
                                      token=token)
        except ConditionFailed:
            return None
        return m.lease_from_item(item)

    def renew(self, lease: Lease, *, pending_handoff: str | None = _KEEP, session: str | None = None,
              leased: bool = True, token: str | None = None, prior_token: str | Iterable[str] | None = None) -> Lease:
        """Bump the counter (the holder confirms it still holds the lease); optionally set or
        clear ``pendingHandoffTo``. ``session``: the holder's session token, recorded with this
        write (as every holder write of a :class:`~kinesis.lease_loop.coordinator.LeaseCoordinator`
        does); ``leased``, ``token``, ``prior_token``: see :meth:`_fenced`."""
        set_: dict[str, Any] = {}
        remove: list[str] = []
        if pending_handoff is None:
            remove.append(m.PENDING_HANDOFF)
        elif pending_handoff is not _KEEP:
            check_member(pending_handoff)
            set_[m.PENDING_HANDOFF] = {"S": pending_handoff}
        return self._fenced(lease, "renew", set_, remove, session=session, leased=leased, token=token,
                            prior_token=prior_token)

    def adopt(self, lease: Lease, *, session: str | None = None) -> Lease:
        """Accept a lease handed off to ``lease.owner`` (under its ``session`` token, if given):
        renew from the counter observed.

        The new owner did not write that counter; the hand-off write did. Renewing from it
        is what makes the lease this process's (and clears ``handedOffBy``).
        """
        if lease.handed_off_by is None:
            raise LeaseLostError(
                f"lease {lease.key!r} was not handed off to {lease.owner!r}: take it instead"
            )
        return self._fenced(lease, "adopt", {}, [m.HANDED_OFF_BY], session=session)

    def handoff(self, lease: Lease, to: str, *, prior_token: str | Iterable[str] | None = None) -> Lease:
        """Pass the lease to ``to`` in one write, keeping the checkpoint; ``to`` adopts it at once
        (``prior_token``: see :meth:`_fenced`)."""
        check_member(to)
        if to == lease.owner:
            raise ConfigurationError(f"cannot hand lease {lease.key!r} off to its own owner {to!r}")
        switches = lease.owner_switches_since_checkpoint + 1
        set_ = {m.OWNER: {"S": to}, m.HANDED_OFF_BY: {"S": lease.owner or ""}, m.OWNER_SWITCHES: num(switches),
                m.STATE: {"S": held_state(lease.checkpoint, None).value}}  # an offer: timed by its row
        return self._fenced(lease, "hand off", set_, [m.PENDING_HANDOFF, *m.SESSION_ATTRIBUTES],
                            prior_token=prior_token)

    def release(self, lease: Lease, *, prior_token: str | Iterable[str] | None = None) -> Lease:
        """Give the lease up (evict): the row stays with its checkpoint and no owner
        (``prior_token``: see :meth:`_fenced`)."""
        return self._fenced(lease, "release", {m.STATE: {"S": held_state(lease.checkpoint, None).value}},
                            [m.OWNER, m.PENDING_HANDOFF, m.HANDED_OFF_BY, *m.SESSION_ATTRIBUTES],
                            prior_token=prior_token)

    evict = release
    """KCL's name for :meth:`release`."""

    def checkpoint(self, lease: Lease, checkpoint: Checkpoint | str, *, session: str | None = None,
                   leased: bool = True, token: str | None = None, prior_token: str | Iterable[str] | None = None,
                   completed: str | None = None) -> Lease:
        """Record progress; fenced by owner + counter and by ``checkpointOrder <= new``.
        ``completed``: the records completed beyond the checkpoint, encoded (written with it;
        None removes an earlier one).

        Raises :class:`LeaseLostError` if the lease moved, :class:`CheckpointRegressionError`
        if ``checkpoint`` is behind the stored one. :data:`SHARD_END` also sets the state.
        ``leased``, ``token``, ``prior_token``: see :meth:`_fenced`.
        """
        cp = Checkpoint.of(checkpoint)
        attrs, remove = checkpoint_change(lease, cp, session if leased else None, completed)
        return self._fenced(lease, "checkpoint", attrs, remove, new_checkpoint=cp, session=session, leased=leased,
                            token=token, prior_token=prior_token)

    def prepare_checkpoint(self, lease: Lease, checkpoint: Checkpoint | str, *,
                           session: str | None = None, leased: bool = True, token: str | None = None,
                           prior_token: str | Iterable[str] | None = None) -> Lease:
        """Record a pending checkpoint (the first phase of a two-phase checkpoint).

        Fenced like :meth:`checkpoint` (owner + counter, and ``checkpointOrder <= new``: a
        pending checkpoint is never behind the stored one); the checkpoint itself does not
        move. The next :meth:`checkpoint` removes it. Raises :class:`LeaseLostError`,
        :class:`CheckpointRegressionError`, or :class:`InvalidCheckpointError` for a sentinel.
        """
        cp = Checkpoint.of(checkpoint)
        check_pending_checkpoint(lease, cp)
        attrs = m.pending_checkpoint_attributes(cp)
        return self._fenced(lease, "prepare a checkpoint on", attrs, [], new_checkpoint=cp, session=session,
                            leased=leased, token=token, prior_token=prior_token)

    def mark_shard_end(self, lease: Lease) -> Lease:
        """Checkpoint :data:`SHARD_END`: the shard was fully processed."""
        return self.checkpoint(lease, SHARD_END)

    def delete(self, lease: Lease) -> bool:
        """Delete the row if it is unchanged since ``lease`` was read (e.g. finished parents)."""
        condition, values = unchanged_since(lease)
        return self._calls.delete(lease.key, condition=condition, values=values)

    def _fenced(
        self,
        lease: Lease,
        what: str,
        set_: Mapping[str, Any],
        remove: Iterable[str],
        *,
        new_checkpoint: Checkpoint | None = None,
        session: str | None = None,
        leased: bool = True,
        token: str | None = None,
        prior_token: str | Iterable[str] | None = None,
    ) -> Lease:
        """A write by the holder, conditional on owner and counter (and, writing the checkpoint
        or a pending one ``new_checkpoint``, on ``checkpointOrder <= new``); bumps the counter
        and records the holder's ``session`` token with it, if given, and then (unless a
        :data:`SHARD_END` checkpoint or a hand-off sets another state) ``ACTIVE_SESSION`` (a
        session lease), or with ``leased=False`` ``ACTIVE`` (a row its holder renews itself,
        while its session cannot be renewed).

        ``token``: this write's ``writeToken`` (default: a fresh one). ``prior_token``: the
        token (or tokens) of this holder's writes of the lease that were answered with an error
        after their retries since its last confirmed one: if the condition fails on a row
        carrying one, that write was applied after all, and this one is made again on top of
        it (so an ambiguous write is never taken for a lost lease)."""
        if lease.owner is None:
            raise LeaseLostError(f"cannot {what} lease {lease.key!r}: it has no owner (take it first)")
        token = token or uuid.uuid4().hex
        condition, values = still_held(lease, new_checkpoint)
        full_set = {m.COUNTER: num(lease.counter + 1), m.WRITE_TOKEN: {"S": token}, **set_}
        if session is not None:
            full_set.update(m.session_attributes(session, lease.counter + 1))
            full_set.setdefault(m.STATE, {"S": held_state(lease.checkpoint, session if leased else None).value})
        try:
            item = self._calls.update(
                lease.key, set_=full_set, remove=remove, condition=condition, values=values, token=token
            )
        except ConditionFailed as failed:
            current = failed.current
            priors = {prior_token} if isinstance(prior_token, str) else set(prior_token or ())
            if current is not None and current.get(m.WRITE_TOKEN, {}).get("S") in priors:
                earlier = m.lease_from_item(current)
                if earlier.owner == lease.owner:  # our own earlier write, applied after all
                    # made again under this write's token (not applied: the row does not carry it),
                    # so a caller that remembers it recognises this write too if it is answered
                    # with an error
                    return self._fenced(earlier, what, set_, remove, new_checkpoint=new_checkpoint,
                                        session=session, leased=leased, token=token)
            raise explain_failure(lease, what, failed.current, new_checkpoint) from None
        return m.lease_from_item(item)
