"""``MemberList``: the members a coordinator's round plans over.

Read once per round (an unreadable list is counted and logged: that round only renews); a
new membership version gives every suspect another chance. With a driven
:class:`~kinesis.lease_loop.membership.DynamoDBMembership` (heartbeat rows in the lease
table) it is heartbeated once per tick and fed each scan, so it costs no extra reads; a
:class:`~kinesis.lease_loop.session_membership.SessionMembership` member joins at each tick
it finds itself unlisted, and the round reads its head with the sessions it samples.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from hashring import Membership
from hashring.errors import MembershipError
from kinesis.errors import DuplicateMemberIdError, KinesisHashRingError
from kinesis.lease_loop.clock import Clock
from kinesis.lease_loop.lease_model import TableSnapshot
from kinesis.lease_loop.membership import DynamoDBMembership
from kinesis.lease_loop.session_membership import SessionMembership

log = logging.getLogger("kinesis.lease_loop.coordinator")  # the lease loop logs as the coordinator


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
