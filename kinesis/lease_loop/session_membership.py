"""``SessionMembership``: the live member list as a versioned document in the lease table, kept
by the members themselves, with no scan and no chore owner.

The Worker's default membership when none is given (ECS, EC2, laptops, the demo). Every
running member already renews a session row each tick (:mod:`~kinesis.lease_loop.session_rows`);
the member *list* is one more document of :class:`~kinesis.lease_loop.manifest_store.ManifestStore`,
``__manifest__#members``: the sorted member ids, versioned, every head write conditional on
the head read. Each change is published by the member it concerns or that notices it:

* **joining**: a member whose session row exists publishes the list with itself added (at
  start, and at any tick it finds itself missing: removed while paused past its lease, say);
  until then it is not ready and holds nothing;
* **leaving**: a graceful stop publishes the list without it;
* **dying**: the member that watches it (its successor in the sorted list, which reads its
  session row anyway, :mod:`~kinesis.lease_loop.scoped_reads`) publishes the list without it
  once its session has not changed for a lease duration.

Everyone learns of a new version within a tick: the publisher records the version on the
session row of every member of the old and the new list (one write each, up to
:data:`TELL_AT_MOST` members), which each member reads in its next renewal's answer; and
every ``backup_check_interval`` its coordinator reads the head anyway (in the same
BatchGetItem request as the session rows it samples when there are any). The chunks are read
only when the version moves. So a member list costs O(members) per change and nothing in
steady state: no table scan at all, whatever the number of shards. Racing changes retry on the new head (each change is
applied to whatever list the head holds). The list is advice, like every plan: safety rests
on the conditional lease writes, so a stale list costs time, never a lease.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import threading
from collections.abc import Hashable, Mapping
from dataclasses import replace
from typing import Any

from hashring.validation import check_members
from kinesis.errors import ConfigurationError, KinesisHashRingError
from kinesis.lease_loop.clock import MONOTONIC, Clock
from kinesis.lease_loop.leases import LeaseTable
from kinesis.lease_loop.manifest_store import (
    ManifestConflictError,
    ManifestCorruptError,
    ManifestHead,
    ManifestStore,
)

log = logging.getLogger(__name__)

DOCUMENT = "members"
"""The :class:`ManifestStore` name of the member list (``__manifest__#members``)."""
FORMAT = 1
ATTEMPTS = 4
"""Publishes tried per change before the next tick tries again (racing changes)."""
TELL_AT_MOST = 1000
"""A publisher tells at most this many members of a new version on their session rows (one
write each); in larger fleets they find it at their next check of the head."""


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
        """The head row as read with the round's session samples (None: no head yet): read the
        list if its version moved."""
        if item is None:
            return
        try:
            head = self.store.head_of(dict(item))
        except ManifestCorruptError as exc:
            log.warning("%s: the member list's head is unreadable (%s); replacing it from what it knows",
                        self._self_id, exc.reason)
            self._repair()
            return
        self._follow(head)

    def _follow(self, head: ManifestHead) -> None:
        """Read the list if ``head`` moved past what this member knows; repair it if it went
        back (rebuilt after it was lost or corrupt, from less than this member knows)."""
        with self._lock:
            behind = self._behind(head)
            moved = head.version > self._version
        if behind:
            log.warning("%s: the member list went back to version %d (it knew %d): merging what it knows",
                        self._self_id, head.version, self.known_version)
            self._repair()
        elif moved:
            try:
                self._read(head)
            except (ManifestConflictError, ManifestCorruptError) as exc:
                log.warning("%s: the member list could not be read (next time): %s", self._self_id, exc)

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
        """Read the head (consistent) and the list if it moved; the members."""
        head = self._head()
        if head is not None:
            self._follow(head)
        return self.members()

    # --- internals --------------------------------------------------------------------

    def _head(self) -> ManifestHead | None:
        try:
            return self.store.head(consistent=True)
        except ManifestCorruptError:
            return None  # replaced by the next change

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
        if len(members) > TELL_AT_MOST:
            return
        for member in members:
            try:
                self.table.tell_members_version(member, version)
            except KinesisHashRingError as exc:
                log.warning("%s: could not tell %s of member list version %d: %s", self._self_id, member, version, exc)
                return

    @property
    def known_version(self) -> int:
        """The version of the list as last read (0: none)."""
        with self._lock:
            return self._version

    def __repr__(self) -> str:
        return f"SessionMembership({self._self_id!r}, table={self.table.table_name!r})"
