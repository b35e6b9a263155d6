"""Reading the lease table: full scans, batched reads by key, and the corrupt rows they meet.

Rows that cannot be parsed are reported (logged once per key and reason, kept in
:attr:`CorruptRows.rows`) and skipped; nothing here writes.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Protocol

from kinesis.errors import CorruptLeaseError, LeaseTableUnavailableError
from kinesis.lease_loop.table import model as m
from kinesis.lease_loop.table.calls import TableCalls, TableSettings
from kinesis.lease_loop.table.model import Lease, MemberRow, SessionRow, TableSnapshot
from kinesis.lease_loop.timing import Clock

log = logging.getLogger(__name__)

BATCH_GET_KEYS = 100
"""Keys per BatchGetItem request (DynamoDB's limit)."""


class ReadSettings(TableSettings, Protocol):
    """The table's settings that matter for reads."""

    clock: Clock


class CorruptRows:
    """The corrupt rows reported so far (key -> reason); each is logged once per reason."""

    def __init__(self) -> None:
        self._rows: dict[str, str] = {}

    @property
    def rows(self) -> dict[str, str]:
        """A copy of every corrupt row reported so far."""
        return dict(self._rows)

    def report(self, exc: CorruptLeaseError) -> None:
        """Record ``exc``'s row; log it unless it was reported with the same reason before."""
        if self._rows.get(exc.key) != exc.reason:
            self._rows[exc.key] = exc.reason
            log.error("%s (skipped)", exc)


def sort_rows(
    items: Iterable[Mapping[str, Any]],
) -> tuple[dict[str, Lease], dict[str, MemberRow], list[CorruptLeaseError], dict[str, SessionRow]]:
    """Parse scanned items into leases (by key), heartbeat rows (by member id), the errors of
    the rows that cannot be parsed, and session rows (by member id); other reserved rows are
    left out."""
    leases: dict[str, Lease] = {}
    members: dict[str, MemberRow] = {}
    sessions: dict[str, SessionRow] = {}
    corrupt: list[CorruptLeaseError] = []
    for item in items:
        key = item.get(m.KEY, {}).get("S", "")
        try:
            if key.startswith(m.MEMBER_PREFIX):
                row = m.member_from_item(item)
                members[row.member_id] = row
            elif key.startswith(m.SESSION_PREFIX):
                session = m.session_from_item(item)
                sessions[session.member_id] = session
            elif key.startswith(m.RESERVED_PREFIX):
                continue  # reserved for future internal rows
            else:
                leases[key] = m.lease_from_item(item)
        except CorruptLeaseError as exc:
            corrupt.append(exc)
    return leases, members, corrupt, sessions


class TableReads:
    """Scans and batched reads of the table of ``settings``; corrupt rows go to ``corrupt``."""

    def __init__(self, settings: ReadSettings, calls: TableCalls, corrupt: CorruptRows):
        self.settings = settings
        self.calls = calls
        self.corrupt = corrupt

    def scan(self, *, page_size: int | None, consistent: bool) -> TableSnapshot:
        """Every row, page by page: leases, heartbeat rows and corrupt rows."""
        leases: dict[str, Lease] = {}
        members: dict[str, MemberRow] = {}
        sessions: dict[str, SessionRow] = {}
        corrupt: dict[str, str] = {}
        kwargs: dict[str, Any] = {"TableName": self.settings.table_name, "ConsistentRead": consistent}
        if page_size is not None:
            kwargs["Limit"] = page_size
        while True:
            page = self.calls.retrying(lambda: self.settings.client.scan(**kwargs))
            page_leases, page_members, errors, page_sessions = sort_rows(page.get("Items", []))
            leases.update(page_leases)
            members.update(page_members)
            sessions.update(page_sessions)
            for exc in errors:
                corrupt[exc.key] = exc.reason
                self.corrupt.report(exc)
            last = page.get("LastEvaluatedKey")
            if not last:
                break
            kwargs["ExclusiveStartKey"] = last
        return TableSnapshot(leases, members, corrupt, self.settings.clock(), sessions)

    def leases_of(self, wanted: Iterable[str], items: Mapping[str, Mapping[str, Any]]) -> dict[str, Lease | None]:
        """Key -> lease for every ``wanted`` key (``None`` without a row); corrupt rows are
        reported and left out."""
        found: dict[str, Lease | None] = dict.fromkeys(wanted)
        for key in list(found):
            if (item := items.get(key)) is None:
                continue
            try:
                found[key] = m.lease_from_item(item)
            except CorruptLeaseError as exc:
                found.pop(key, None)
                self.corrupt.report(exc)
        return found

    def sessions_of(self, members: Iterable[str], items: Mapping[str, Mapping[str, Any]]
                    ) -> dict[str, SessionRow | None]:
        """Member -> its session row (``None`` without one, or corrupt: reported)."""
        found: dict[str, SessionRow | None] = {}
        for member in members:
            item = items.get(m.SESSION_PREFIX + member)
            try:
                found[member] = None if item is None else m.session_from_item(item)
            except CorruptLeaseError as exc:
                found[member] = None
                self.corrupt.report(exc)
        return found

    def get_items(
        self, keys: Iterable[str], *, consistent: bool, sleep: Callable[[float], None]
    ) -> dict[str, dict[str, Any]]:
        """The raw items of ``keys`` that exist; unprocessed keys are retried after ``sleep``."""
        s = self.settings
        wanted = sorted(set(keys))
        found: dict[str, dict[str, Any]] = {}
        for start in range(0, len(wanted), BATCH_GET_KEYS):
            pending: dict[str, Any] = {
                s.table_name: {
                    "Keys": [{m.KEY: {"S": k}} for k in wanted[start : start + BATCH_GET_KEYS]],
                    "ConsistentRead": consistent,
                }
            }
            for attempt in range(s.retry_attempts * 4):
                response = self.calls.retrying(functools.partial(s.client.batch_get_item, RequestItems=pending))
                for item in response.get("Responses", {}).get(s.table_name, []):
                    found[item[m.KEY]["S"]] = item
                pending = response.get("UnprocessedKeys") or {}
                if not pending:
                    break
                sleep(min(s.retry_max_wait, 0.01 * 2**attempt))
            else:
                raise LeaseTableUnavailableError(
                    f"lease table {s.table_name!r}: BatchGetItem left keys unprocessed after "
                    f"{s.retry_attempts * 4} attempts (throttled): raise the table's read capacity"
                )
        return found
