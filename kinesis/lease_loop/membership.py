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

``MemberList``: the members a coordinator's round plans over.

Read once per round (an unreadable list is counted and logged: that round only renews); a
new membership version gives every suspect another chance. With a driven
:class:`~kinesis.lease_loop.membership.DynamoDBMembership` (heartbeat rows in the lease
table) it is heartbeated once per tick and fed each scan, so it costs no extra reads; a
:class:`~kinesis.lease_loop.membership.SessionMembership` member joins at each tick
it finds itself unlisted, and the round reads its head with the sessions it samples.

``SessionMembership``: the live member list as a versioned document in the lease table, kept
by the members themselves, with no scan and no chore owner.

The Worker's default membership when none is given (ECS, EC2, laptops, the demo). Every
running member already renews a session row each tick (:mod:`~kinesis.lease_loop.table.sessions`);
the member *list* is one more document of :class:`~kinesis.lease_loop.table.manifests.ManifestStore`,
``__manifest__#members``: the sorted member ids, versioned, every head write conditional on
the head read. Each change is published by the member it concerns or that notices it:

* **joining**: a member whose session row exists publishes the list with itself added (at
  start, and at any tick it finds itself missing: removed while paused past its lease, say);
  until then it is not ready and holds nothing;
* **leaving**: a graceful stop publishes the list without it;
* **dying**: the member that watches it (its successor in the sorted list, which reads its
  session row anyway, :mod:`~kinesis.lease_loop.round_reads`) publishes the list without it
  once its session has not changed for a lease duration.

Everyone learns of a new version within a tick: the publisher records the version on the
session row of every member of the old and the new list (one write each, up to
:data:`~.table.sessions.TELL_AT_MOST` members), which each member reads in its next renewal's answer; and
every ``backup_check_interval`` its coordinator reads the head anyway (in the same
BatchGetItem request as the session rows it samples when there are any). The chunks are read
only when the version moves. So a member list costs O(members) per change and nothing in
steady state: no table scan at all, whatever the number of shards. Racing changes retry on the new head (each change is
applied to whatever list the head holds). A head that is unreadable, or gone (deleted) once a
member has read a version, is published again by the first member to read it, from what that
member knows; the others merge in what they know if it holds less. The list is advice, like every plan: safety rests
on the conditional lease writes, so a stale list costs time, never a lease.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import threading
import uuid
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from hashring import Membership
from hashring.errors import MembershipError
from hashring.placement import chore_owners
from hashring.validation import check_members
from kinesis.durations import check_seconds
from kinesis.errors import ConfigurationError, DuplicateMemberIdError, KinesisHashRingError
from kinesis.lease_loop.table.leases import LeaseTable
from kinesis.lease_loop.table.manifests import (
    ManifestConflictError,
    ManifestCorruptError,
    ManifestHead,
    ManifestStore,
)
from kinesis.lease_loop.table.model import MemberRow, TableSnapshot
from kinesis.lease_loop.table.sessions import tell_each
from kinesis.lease_loop.timing import MONOTONIC, Clock

log = logging.getLogger(__name__)

DOCUMENT = "members"
"""The :class:`ManifestStore` name of the member list (``__manifest__#members``)."""
FORMAT = 1
ATTEMPTS = 4
"""Publishes tried per change before the next tick tries again (racing changes)."""

def encode(members: tuple[str, ...]) -> bytes:
    return json.dumps({"format": FORMAT, "members": list(members)}, separators=(",", ":")).encode()


def _digest(members: tuple[str, ...]) -> str:
    """The digest a head records for ``members`` (:meth:`ManifestStore.publish`)."""
    return hashlib.sha256(encode(members)).hexdigest()


def decode(payload: bytes, where: str) -> tuple[str, ...]:
    """The sorted member ids of a payload; :class:`ManifestCorruptError` if malformed."""
    try:
        doc = json.loads(payload)
        if doc["format"] != FORMAT:
            raise ValueError(f"format {doc['format']!r}")
        return tuple(sorted(str(m) for m in doc["members"]))
    except (ValueError, KeyError, TypeError) as exc:
        raise ManifestCorruptError(where, f"member list unreadable ({exc!r}): the next change publishes a new one") \
            from exc


class SessionMembership:
    """Implements :class:`hashring.Membership` over the members document (see the module docs).
    Thread-safe; driven by the member's coordinator (``join``, ``observe_head``, ``remove``,
    ``leave``)."""

    def __init__(self, table: LeaseTable, member_id: str, *, clock: Clock = MONOTONIC):
        check_members([member_id])
        if member_id.startswith("__"):
            raise ConfigurationError(f"member ids may not start with '__', got {member_id!r}")
        self.table = table
        self.store = ManifestStore(table, DOCUMENT)
        self.clock = clock
        self._self_id = member_id
        self._lock = threading.Lock()
        self._members: tuple[str, ...] = ()
        self._version: int = 0  # the document version of _members (0: none read yet)
        self._changes = 0  # bumped when _members changes (the Membership version)
        self._left = False
        self._removed: dict[str, float] = {}  # member -> when this member last tried to remove it
        self.publishes = 0
        self.joined_at = -math.inf
        """When this member published the list with itself added (its clock)."""
        """Versions this member published (its own joins and leaves, and removals of the dead)."""

    # --- the Membership protocol -----------------------------------------------------

    @property
    def self_id(self) -> str:
        return self._self_id

    @property
    def version(self) -> Hashable:
        with self._lock:
            return self._changes

    def members(self) -> tuple[str, ...]:
        """The listed members, sorted, as last read (no I/O)."""
        with self._lock:
            return self._members

    @property
    def head_key(self) -> str:
        """The head row the coordinator reads with its session samples."""
        return self.store.head_key

    @property
    def listed(self) -> bool:
        with self._lock:
            return self._self_id in self._members

    # --- driven by the coordinator ------------------------------------------------------

    def join(self) -> None:
        """Publish the list with this member added, unless it is listed (or left). Call only
        once its session row exists (the coordinator does, each tick until it is listed)."""
        if self._left:
            return
        self._change(add=self._self_id)

    def leave(self) -> None:
        """Publish the list without this member (a graceful stop); errors are logged (the
        member that watches it removes it a lease duration later)."""
        self._left = True
        try:
            self._change(drop=self._self_id)
        except KinesisHashRingError as exc:
            log.warning("%s: could not leave the member list (its watcher removes it later): %s", self._self_id, exc)

    def remove(self, member: str, *, retry_after: float) -> None:
        """Publish the list without ``member`` (its session did not change for a lease
        duration: it is dead); at most once per ``retry_after`` seconds per member."""
        now = self.clock()
        with self._lock:
            if member not in self._members or now - self._removed.get(member, -math.inf) < retry_after:
                return
            self._removed[member] = now
        log.info("%s: removing %s from the member list (its session did not change for a lease duration)",
                 self._self_id, member)
        self._change(drop=member)

    def observe_head(self, item: Mapping[str, Any] | None) -> None:
        """The head row as read with the round's session samples (None: no head): read the
        list if its version moved; rebuild it if it was lost (:meth:`_rebuild_lost`)."""
        if item is None:
            if self.known_version and not self._left:  # else nothing to rebuild (_rebuild_lost)
                self._confirm()  # a stale replica may not have the head yet: gone only if read so
            return
        try:
            head = self.store.head_of(dict(item))
        except ManifestCorruptError as exc:
            log.warning("%s: the member list's head is unreadable (%s); replacing it from what it knows",
                        self._self_id, exc.reason)
            self._repair()
            return
        self._follow(head, consistent=False)

    def _follow(self, head: ManifestHead, *, consistent: bool = True) -> None:
        """Read the list if ``head`` moved past what this member knows; repair it if it went
        back (rebuilt after it was lost or corrupt, from less than this member knows). A head
        read eventually consistent that went back may be a stale replica: read it again,
        strongly consistent, first."""
        with self._lock:
            behind = self._behind(head)
            moved = head.version > self._version
        if behind and not consistent:
            self._confirm()
            return
        if behind:
            log.warning("%s: the member list went back to version %d (it knew %d): merging what it knows",
                        self._self_id, head.version, self.known_version)
            self._repair()
        elif moved:
            try:
                self._read(head)
            except (ManifestConflictError, ManifestCorruptError) as exc:
                log.warning("%s: the member list could not be read (next time): %s", self._self_id, exc)

    def _confirm(self) -> None:
        """:meth:`refresh` after an eventually consistent read that looked like a loss or a step
        back; a failed read (throttled) only waits for the next one, as any head read."""
        try:
            self.refresh()
        except KinesisHashRingError as exc:
            log.warning("%s: could not read the member list's head again (next time): %s", self._self_id, exc)

    def _behind(self, head: ManifestHead) -> bool:
        """Whether ``head`` holds less than this member knows: an older version, or its own
        version with another list (called with the lock held)."""
        if head.version < self._version:
            return True
        return head.version == self._version > 0 and head.digest != _digest(self._members)

    def _repair(self) -> None:
        try:
            self._change()
        except KinesisHashRingError as exc:
            log.warning("%s: could not repair the member list (next time): %s", self._self_id, exc)

    def refresh(self) -> tuple[str, ...]:
        """Read the head (consistent) and the list if it moved (rebuilt if lost); the members."""
        head = self._head()
        if head is not None:
            self._follow(head)
        else:
            self._rebuild_lost()
        return self.members()

    def _rebuild_lost(self) -> None:
        """No head where this member has read a version: it was lost (deleted, or unreadable:
        :meth:`_head`), so publish again what this member knows, past that version. Waiting
        for the next change instead strands every member that was told of the last version
        but had not read it yet on the list before it, for good. :meth:`_change` reads the
        head again (consistent, so a stale replica's miss publishes nothing) and every
        rebuild is conditional on the head it read: one member wins, the others merge in
        what they know if it holds less (:meth:`_behind`), so the list converges on what
        the members last knew within a head read of each (``backup_check_interval``)."""
        if self.known_version == 0 or self._left:
            return  # no version read yet: nothing lost (a fleet starting); a leaver stays out
        log.warning("%s: the member list's head is gone or unreadable (it knew version %d): publishing what it knows",
                    self._self_id, self.known_version)
        self._repair()

    # --- internals --------------------------------------------------------------------

    def _head(self) -> ManifestHead | None:
        try:
            return self.store.head(consistent=True)
        except ManifestCorruptError:
            return None  # rebuilt by the caller (:meth:`_rebuild_lost`)

    def _read(self, head: ManifestHead) -> None:
        members = decode(self.store.read(head), self.store.head_key) if head.chunks else ()
        self._set(members, head.version)

    def _set(self, members: tuple[str, ...], version: int) -> None:
        with self._lock:
            if version < self._version:
                return
            self._version = version
            if members != self._members:
                self._members = members
                self._changes += 1

    def _change(self, *, add: str | None = None, drop: str | None = None) -> None:
        """Apply one change to the list the head holds and publish it, conditional on that
        head (a racing change: read again and retry, up to :data:`ATTEMPTS` times). A head that
        holds less than this member knows (rebuilt after it was corrupt or lost) gets this
        member's list merged in, and every publish goes past the newest version it knows, so
        no member ignores the new list as old news."""
        for _ in range(ATTEMPTS):
            try:
                head = self.store.head(consistent=True)
            except ManifestCorruptError as exc:  # an unreadable head: replace it, from what this member knows
                if exc.item is None:
                    raise
                try:
                    head = self.store.claim_corrupt(self._self_id, exc.item, version=self._version)
                except ManifestConflictError:
                    continue
            try:
                current = decode(self.store.read(head), self.store.head_key) if head is not None and head.chunks else ()
            except (ManifestCorruptError, ManifestConflictError):
                current = self.members()  # unreadable chunks: publish over them from what it knows
            with self._lock:
                known = self._members if head is None or self._behind(head) else ()
                newest = self._version
            wanted = tuple(sorted({*current, *known, *([add] if add else [])} - ({drop} if drop else set())))
            if head is not None and wanted == current and head.version >= newest:
                self._set(current, head.version)
                return
            try:
                seen = head if head is not None else self.store.claim(self._self_id, None, version=newest)
                written = self.store.publish(replace(seen, owner=self._self_id, version=max(seen.version, newest)),
                                             encode(wanted))
            except ManifestConflictError:
                continue
            self.publishes += 1
            if add == self._self_id:
                self.joined_at = self.clock()
            self._set(wanted, written.version)
            log.info("%s: published member list version %d (%d members)", self._self_id, written.version,
                     len(wanted))
            self._tell(sorted({*current, *wanted} - {self._self_id}), written.version)
            return

    def _tell(self, members: list[str], version: int) -> None:
        """Tell every member of the old and the new list, on its session row, that the list
        moved: each reads it at its next renewal (a tick) instead of its next check of the
        head. Best effort (errors logged): the head read at each check is the backstop."""
        tell_each(members, self.table.tell_members_version, version, me=self._self_id, what="member list")

    @property
    def known_version(self) -> int:
        """The version of the list as last read (0: none)."""
        with self._lock:
            return self._version

    def __repr__(self) -> str:
        return f"SessionMembership({self._self_id!r}, table={self.table.table_name!r})"


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


class MemberList:
    """``membership`` as one coordinator reads it; ``drive``: the membership it heartbeats."""

    def __init__(self, membership: Membership, drive: DynamoDBMembership | None, member_id: str,
                 count: Callable[[str], None], clock: Clock, new_version: Callable[[object], None]):
        self._membership = membership
        self._drive = drive
        self._me = member_id
        self._count = count
        self._clock = clock
        self._new_version = new_version
        self.last_read_at: float | None = None
        """The clock at the last successful read."""
        self.error: str | None = None
        """Why the last read failed."""

    def read(self) -> list[str] | None:
        """The listed members; None (counted, logged, :attr:`error` set) if unreadable."""
        try:
            version = self._membership.version
            listed = list(self._membership.members())
        except MembershipError as exc:
            self._count("membership_errors")
            self.error = f"{type(exc).__name__}: {exc}"
            log.warning("%s: no member list (%s); only renewing this round", self._me, exc)
            return None
        self.last_read_at = self._clock()
        self._new_version(version)
        return listed

    def peek(self) -> list[str] | None:
        """The listed members, or None if unreadable (nothing counted or logged)."""
        try:
            return list(self._membership.members())
        except MembershipError:
            return None

    @property
    def session_membership(self) -> SessionMembership | None:
        """The membership, if it is the members document of this lease table."""
        return self._membership if isinstance(self._membership, SessionMembership) else None

    def heartbeat(self) -> None:
        """Heartbeat a driven membership (errors counted; a duplicate id is logged by it); a
        member of a :class:`SessionMembership` that is not listed joins (its session row was
        renewed just before)."""
        joining = self.session_membership
        if joining is not None and not joining.listed:
            try:
                joining.join()
            except KinesisHashRingError as exc:
                self._count("membership_errors")
                log.warning("%s: could not join the member list: %s", self._me, exc)
        if self._drive is None:
            return
        try:
            self._drive.heartbeat()
        except DuplicateMemberIdError:
            self._count("membership_errors")
        except KinesisHashRingError as exc:
            self._count("membership_errors")
            log.warning("%s: heartbeat failed: %s", self._me, exc)

    def observe(self, snapshot: TableSnapshot) -> None:
        """Feed a driven membership this round's scan (its heartbeat rows)."""
        if self._drive is not None:
            self._drive.observe(snapshot)
