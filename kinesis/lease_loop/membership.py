"""``DynamoDBMembership``: the live member list from heartbeat rows in the lease table.

Every member writes a heartbeat row under the reserved key ``__member__#<member id>``
(lease keys may not start with ``__``, and lease scans skip these rows) and bumps its
``heartbeat`` counter regularly. Liveness is judged by each observer on its own
monotonic clock, never by comparing wall clocks between hosts:

* a member is **live while its heartbeat changes**: live if its (counter, incarnation)
  changed within ``member_timeout`` of the observer's clock;
* a member seen for the **first time counts as live at once**, and that first observation
  starts its timer. So a crashed member's leftover row is believed live for at most
  ``member_timeout`` by an observer that just started, and a new member is usable at once;
* **self** is a member from its first successful heartbeat, and stays one while its last
  successful heartbeat was sent less than ``member_timeout`` ago (so a member cut off
  from DynamoDB drops itself about when the others drop it);
* :meth:`leave` deletes the row, so the others drop the member on their next refresh;
* rows unchanged for ``stale_row_timeout`` are deleted (conditionally, so a row that
  changed meanwhile stays) by one member: the owner of the reserved ring key
  ``__chore__/heartbeats`` among the live members (:data:`HEARTBEAT_CHORE`). When that
  member dies it drops out of the list after ``member_timeout`` and the next-ranked member
  owns the chore, so random pod names do not pile up and a fleet of N members does not make
  N delete attempts per stale row. A member that comes back simply recreates its row.

Each process run has a random *incarnation*. Its first heartbeat overwrites an older
row of the same id (a restarted pod); afterwards every heartbeat is conditional on the
incarnation and counter, so two live processes with the same id are detected
(:class:`~kinesis.errors.DuplicateMemberIdError`); the older one stops counting itself
live.

Heartbeats are driven either by :meth:`start` (a background thread, every
``heartbeat_interval``) or by a :class:`~kinesis.lease_loop.coordinator.LeaseCoordinator` on the
same table, which calls :meth:`heartbeat` on each tick and feeds its own table scan to
:meth:`observe`, so membership costs one write per tick and no extra reads. ``members()``
scans by itself only when nothing has refreshed the view for ``refresh_interval``.
"""

from __future__ import annotations

import logging
import math
import threading
import uuid
from collections.abc import Hashable
from dataclasses import dataclass

from hashring.placement import chore_owners
from hashring.validation import check_members
from kinesis.durations import check_seconds
from kinesis.errors import ConfigurationError, DuplicateMemberIdError, KinesisHashRingError
from kinesis.lease_loop.clock import MONOTONIC, Clock
from kinesis.lease_loop.lease_model import MemberRow, TableSnapshot
from kinesis.lease_loop.leases import LeaseTable

log = logging.getLogger(__name__)

HEARTBEAT_CHORE = "heartbeats"
"""The chore (:func:`hashring.chore_owners`) whose owner deletes stale heartbeat rows."""


@dataclass
class _Seen:
    heartbeat: int
    incarnation: str
    since: float


class DynamoDBMembership:
    """Implements the :class:`hashring.Membership` protocol with heartbeats in the lease table."""

    def __init__(
        self,
        table: LeaseTable,
        member_id: str,
        *,
        member_timeout: float = 10.0,
        heartbeat_interval: float | None = None,
        refresh_interval: float | None = None,
        stale_row_timeout: float | None = None,
        clock: Clock = MONOTONIC,
    ):
        check_members([member_id])
        if member_id.startswith("__"):
            raise ConfigurationError(f"member ids may not start with '__', got {member_id!r}")
        check_seconds("member_timeout", member_timeout)
        self.member_timeout = float(member_timeout)
        self.heartbeat_interval = check_seconds(
            "heartbeat_interval", heartbeat_interval if heartbeat_interval is not None else member_timeout / 3
        )
        if self.heartbeat_interval * 2 > self.member_timeout:
            raise ConfigurationError(
                f"heartbeat_interval ({self.heartbeat_interval:g} s) must be at most half of "
                f"member_timeout ({self.member_timeout:g} s), or live members look dead"
            )
        self.refresh_interval = check_seconds(
            "refresh_interval", refresh_interval if refresh_interval is not None else self.heartbeat_interval
        )
        if stale_row_timeout is None:
            stale_row_timeout = 6 * self.member_timeout
        self.stale_row_timeout = check_seconds("stale_row_timeout", stale_row_timeout)
        if self.stale_row_timeout < self.member_timeout:
            raise ConfigurationError(
                f"stale_row_timeout ({self.stale_row_timeout:g} s) must be >= member_timeout "
                f"({self.member_timeout:g} s): only rows of dead members may be deleted"
            )
        self.table = table
        self.clock = clock
        self.incarnation = uuid.uuid4().hex
        self._self_id = member_id
        self._lock = threading.RLock()
        self._heartbeat_lock = threading.Lock()
        self._seen: dict[str, _Seen] = {}
        self._last_counter: int | None = None
        self._self_sent_at: float | None = None
        self._last_refresh: float | None = None
        self._members: tuple[str, ...] = ()
        self._version = 0
        self._dirty = True
        self._valid_until = -math.inf
        self._left = False
        self._duplicate = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.heartbeat_failures = 0
        self.rows_collected = 0
        self.rebuilds = 0
        """How many times the member list was rebuilt (reads of ``version`` in between are O(1))."""

    # --- the Membership protocol -----------------------------------------------------

    @property
    def self_id(self) -> str:
        return self._self_id

    @property
    def version(self) -> Hashable:
        """Changes exactly when the member list changes."""
        self._recompute(self.clock())
        return self._version

    def members(self) -> tuple[str, ...]:
        """The live members, sorted (refreshes from the table if the view is stale)."""
        now = self.clock()
        if self._last_refresh is None or now - self._last_refresh >= self.refresh_interval:
            self.refresh()
        return self._recompute(self.clock())

    # --- driving ---------------------------------------------------------------------

    def heartbeat(self) -> MemberRow | None:
        """Write one heartbeat (None after :meth:`leave`). Thread-safe.

        Raises :class:`DuplicateMemberIdError` if another process took over this member
        id; from then on this process does not count itself live.
        """
        with self._heartbeat_lock:
            if self._left or self._duplicate:
                return None
            sent = self.clock()
            try:
                row = self.table.heartbeat(self._self_id, self.incarnation, self._last_counter)
            except DuplicateMemberIdError:
                with self._lock:
                    self._duplicate = True
                    self._dirty = True
                log.error("member id %s is used by another process; stepping down", self._self_id)
                self._recompute(self.clock())
                raise
            except KinesisHashRingError:
                self.heartbeat_failures += 1
                raise
            with self._lock:
                self._last_counter = row.heartbeat
                self._self_sent_at = sent
                self._dirty = True
            self._recompute(self.clock())
            return row

    def refresh(self) -> tuple[str, ...]:
        """Scan the table now and return the live members."""
        self.observe(self.table.scan())
        return self._recompute(self.clock())

    def observe(self, snapshot: TableSnapshot) -> None:
        """Take the heartbeat rows of a table scan (e.g. the coordinator's) as the new view."""
        now = self.clock()
        stale: list[tuple[str, _Seen]] = []
        with self._lock:
            for member_id, row in snapshot.members.items():
                seen = self._seen.get(member_id)
                if seen is None or (seen.heartbeat, seen.incarnation) != (row.heartbeat, row.incarnation):
                    self._seen[member_id] = _Seen(row.heartbeat, row.incarnation, now)
                    self._dirty = True
                elif member_id != self._self_id and now - seen.since >= self.stale_row_timeout:
                    stale.append((member_id, seen))
            for member_id in [m for m in self._seen if m not in snapshot.members]:
                del self._seen[member_id]  # left (row deleted) or collected
                self._dirty = True
            self._last_refresh = now
        if stale and not self._owns_cleanup(now):
            stale = []
        for member_id, seen in stale:
            try:
                if self.table.delete_member(member_id, incarnation=seen.incarnation, heartbeat=seen.heartbeat):
                    self.rows_collected += 1
                    log.info("deleted the stale heartbeat row of %s", member_id)
            except KinesisHashRingError as exc:  # best effort; tried again next time
                log.warning("could not delete the stale heartbeat row of %s: %s", member_id, exc)
            with self._lock:
                self._seen.pop(member_id, None)
                self._dirty = True
        self._recompute(now)

    def owns_cleanup(self) -> bool:
        """True if this member owns the stale-row clean-up chore (:data:`HEARTBEAT_CHORE`)."""
        return self._owns_cleanup(self.clock())

    def _owns_cleanup(self, now: float) -> bool:
        return chore_owners(HEARTBEAT_CHORE, self._recompute(now))[:1] == [self._self_id]

    def start(self) -> DynamoDBMembership:
        """Heartbeat and refresh from a background thread every ``heartbeat_interval``."""
        with self._lock:
            if self._thread is not None:
                return self
            self._stop.clear()
            self._thread = threading.Thread(
                target=self._run, name=f"membership-{self._self_id}", daemon=True
            )
            self._thread.start()
        return self

    def stop(self) -> None:
        """Stop the background thread (the row stays: others drop it after ``member_timeout``)."""
        self._stop.set()
        thread, self._thread = self._thread, None
        if thread is not None and thread is not threading.current_thread():
            thread.join()

    def leave(self) -> None:
        """Leave gracefully: stop heartbeating and delete the row, so others drop this member."""
        self.stop()
        with self._heartbeat_lock:
            with self._lock:
                self._left = True
                self._dirty = True
            try:
                self.table.delete_member(self._self_id, incarnation=self.incarnation)
            except KinesisHashRingError as exc:
                log.warning("could not delete my heartbeat row (others drop me later): %s", exc)
        self._recompute(self.clock())

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.heartbeat()
                self.refresh()
            except DuplicateMemberIdError:
                return
            except Exception:  # keep heartbeating through transient trouble
                log.exception("membership heartbeat/refresh failed")
            self._stop.wait(self.heartbeat_interval)

    # --- liveness --------------------------------------------------------------------

    def _recompute(self, now: float) -> tuple[str, ...]:
        """The live members at ``now``; rebuilt only after a change of what was seen or
        when someone's liveness runs out (so reading ``version`` is O(1) in between)."""
        with self._lock:
            if not self._dirty and now < self._valid_until:
                return self._members
            self.rebuilds += 1
            expiries = [
                seen.since + self.member_timeout
                for m, seen in self._seen.items()
                if m != self._self_id and now - seen.since < self.member_timeout
            ]
            live = {
                m
                for m, seen in self._seen.items()
                if m != self._self_id and now - seen.since < self.member_timeout
            }
            if (
                not self._left
                and not self._duplicate
                and self._self_sent_at is not None
                and now - self._self_sent_at < self.member_timeout
            ):
                live.add(self._self_id)
                expiries.append(self._self_sent_at + self.member_timeout)
            self._valid_until = min(expiries, default=math.inf)
            self._dirty = False
            members = tuple(sorted(live))
            if members != self._members:
                self._members = members
                self._version += 1
            return members

    def __repr__(self) -> str:
        return f"DynamoDBMembership({self._self_id!r}, table={self.table.table_name!r})"


