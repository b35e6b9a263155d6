"""Session rows: one per running member, renewed once per tick; the only row a member renews.

A coordinator starts a session with a fresh random token: its first renewal overwrites any
session row of its member id (an earlier run), later ones are conditional on the token and
the counter written last. Every lease the member takes, creates or adopts names the token
(``leaseSession``) and, held as ``ACTIVE_SESSION``, is valid while the session's chain lasts
(:class:`~kinesis.lease_loop.holder.LeaseHolder`). A member that watches another times *all*
of that member's leases from this one row: once the session's (token, counter) has not changed
for ``lease_duration`` on the watcher's clock, it reads the row again strongly consistent
(:class:`~kinesis.lease_loop.table.model.SessionCheck`) and takes each lease by a conditional
write if the session did not move. A lease whose ``leaseSession`` is absent (taken by a 0.1
member) or is not its owner's current token is timed by its own row. The row also carries the
offers made to the member and the member-list version it was told of (read in the answer of
its next renewal).

Membership heartbeat rows in the lease table: write one per beat, delete it on leave.

A heartbeat row (key ``MEMBER_PREFIX + member_id``) carries the member's incarnation and
a counter. The first beat of an incarnation overwrites any older row of the member id;
later beats are conditional on the incarnation and the counter written last, so a second
process with the same member id is noticed (:class:`DuplicateMemberIdError`).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Iterable
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from kinesis.errors import DuplicateMemberIdError, KinesisHashRingError
from kinesis.lease_loop.table import model as m
from kinesis.lease_loop.table.calls import ConditionFailed, TableCalls
from kinesis.lease_loop.table.model import MemberRow, SessionRow
from kinesis.lease_loop.table.rules import attributes_equal, check_member, num

log = logging.getLogger(__name__)

TELL_AT_MOST = 1000
"""Members told of a new version on their session rows, one write each, at most (more: each
finds it at its next read of the document's head)."""


def tell_each(members: Iterable[str], tell: Callable[[str, int], bool], version: int, *, me: str,
              what: str) -> None:
    """Tell each of ``members`` but ``me`` that ``what`` (a document: the member list, the
    plan) moved to ``version``, with ``tell`` (a session-row write each member reads at its
    next renewal). Best effort: the first error is logged and ends it (the members' own reads
    of the head are the backstop); nobody is told past :data:`TELL_AT_MOST` members."""
    told = [member for member in members if member != me]
    if len(told) > TELL_AT_MOST:
        return
    for member in told:
        try:
            tell(member, version)
        except KinesisHashRingError as exc:
            log.warning("%s: could not tell %s of %s version %d: %s", me, member, what, version, exc)
            return


class SessionRows:
    """Session rows written and deleted through ``calls``."""

    def __init__(self, calls: TableCalls):
        self.calls = calls
        self._minted: dict[str, set[str]] = {}
        """Member -> the tokens this process started sessions under after its row was deleted
        (a start answered with an error may have been applied: its token is still this process's)."""

    def renew(self, member_id: str, token: str, previous: int | None, *, plan_version: int = 0,
              handled: frozenset[str] = frozenset(), loads: bytes | None = None) -> SessionRow:
        """Renew ``member_id``'s session ``token``; ``previous`` is the counter it last wrote
        (None: the first renewal of this token, which replaces any earlier session);
        ``plan_version`` (if not 0) is recorded for its watchers (:mod:`.published_plan`);
        ``handled`` offers are removed from the row's :data:`~.lease_model.OFFERS`; ``loads``
        (:func:`~.model.encode_loads`), if given, replace the row's :data:`~.model.LOADS` (``b""``
        removes them, as a first renewal without loads does: an earlier run's are not this one's). If the
        row was deleted meanwhile, a new session starts under a new token (the row returned
        names it), so a (token, counter) pair a watcher timed never comes back.

        Raises :class:`DuplicateMemberIdError` if another process renews the same member id.
        """
        check_member(member_id)
        key = m.SESSION_PREFIX + member_id
        s = self.calls.settings
        if previous is None:
            names = {"#tok": m.SESSION_TOKEN, "#c": m.COUNTER, "#pv": m.PLAN_VERSION}
            values: dict[str, dict[str, Any]] = {":tok": {"S": token}, ":one": num(1)}
            sets, removes = ["#tok = :tok"], []
            names["#ld"] = m.LOADS
            if loads:
                values[":ld"] = {"B": loads}
                sets.append("#ld = :ld")
            else:
                removes.append("#ld")  # not an earlier run's loads
            if plan_version:
                values[":pv"] = num(plan_version)
                sets.append("#pv = :pv")
            else:
                removes.append("#pv")  # not an earlier run's version
            expression = f"SET {', '.join(sets)} ADD #c :one" + (f" REMOVE {', '.join(removes)}" if removes else "")
            response = self.calls.retrying(lambda: s.client.update_item(
                TableName=s.table_name,
                Key={m.KEY: {"S": key}},
                UpdateExpression=expression,
                ExpressionAttributeNames=names,
                ExpressionAttributeValues=values,
                ReturnValues="ALL_NEW",
            ))
            return m.session_from_item(response["Attributes"])
        set_: dict[str, dict[str, Any]] = {m.COUNTER: num(previous + 1)}
        if plan_version:
            set_[m.PLAN_VERSION] = num(plan_version)
        if loads:
            set_[m.LOADS] = {"B": loads}
        condition, values = attributes_equal({"#tok": {"S": token}, "#c": num(previous)})
        delete = {m.OFFERS: {"SS": sorted(handled)}} if handled else None
        try:
            item = self.calls.update(key, set_=set_, condition=condition, values=values, token="", delete=delete,
                                     remove=(m.LOADS,) if loads == b"" else ())
        except ConditionFailed as failed:
            current = failed.current
            other = _token(current)
            if current is None or other is None:  # deleted (or overwritten with something that is
                # no session row) meanwhile: start a new session (a token never comes back)
                fresh = uuid.uuid4().hex
                self._minted.setdefault(member_id, set()).add(fresh)
                return self.renew(member_id, fresh, None, plan_version=plan_version, loads=loads)
            if other == token or other in self._minted.get(member_id, ()):  # this process's own token
                # (a uuid4 of this session, or of a new one it started): never another process's
                # the condition failed on the counter: earlier attempts answered with an error were
                # applied (one or more: each a renewal of this session), so the row is ours as it is
                return replace(m.session_from_item(current), replayed=True)
            raise DuplicateMemberIdError(
                f"member id {member_id!r} has a session in another process (token {other}, this "
                f"one {token}): every member needs a unique id (e.g. the pod name); this process "
                "refuses to run: it stopped processing and renewing, and leaves the id to the other"
            ) from None
        return m.session_from_item(item)

    def offer(self, member_id: str, key: str) -> bool:
        """Tell ``member_id`` that ``key`` is being handed off to it: add ``key`` to its
        session row's offers; False (nothing written) if it has no session row (it never ran,
        or it left): then the hand-off is not made."""
        try:
            self.calls.write(
                "update_item", None,
                Key={m.KEY: {"S": m.SESSION_PREFIX + member_id}},
                UpdateExpression="ADD #offers :k",
                ConditionExpression="attribute_exists(#tok)",
                ExpressionAttributeNames={"#offers": m.OFFERS, "#tok": m.SESSION_TOKEN},
                ExpressionAttributeValues={":k": {"SS": [key]}},
            )
        except ConditionFailed:
            return False
        return True

    def tell(self, member_id: str, attribute: str, version: int) -> bool:
        """Record ``version`` as ``attribute`` (:data:`~.lease_model.MEMBERS_VERSION`: the member
        list moved; :data:`~.lease_model.PLAN_TOLD`: the plan's head was rebuilt) on
        ``member_id``'s session row (its next renewal reads it); False if it has no session
        row or knows a newer one."""
        try:
            self.calls.write(
                "update_item", None,
                Key={m.KEY: {"S": m.SESSION_PREFIX + member_id}},
                UpdateExpression="SET #mv = :v",
                ConditionExpression="attribute_exists(#tok) AND (attribute_not_exists(#mv) OR #mv < :v)",
                ExpressionAttributeNames={"#mv": attribute, "#tok": m.SESSION_TOKEN},
                ExpressionAttributeValues={":v": num(version)},
            )
        except ConditionFailed:
            return False
        return True

    def delete(self, member_id: str, token: str, counter: int | None = None) -> bool:
        """Delete ``member_id``'s session row if it still has ``token`` (and ``counter``, if
        given: a stale row, not renewed since it was read)."""
        condition, values = attributes_equal({"#tok": {"S": token}, "#c": None if counter is None else num(counter)})
        return self.calls.delete(m.SESSION_PREFIX + member_id, condition=condition, values=values)


def _token(item: dict[str, Any] | None) -> str | None:
    """The session token of a session row's raw item (None: no row, or not a session row)."""
    value = (item or {}).get(m.SESSION_TOKEN)
    return value.get("S") if isinstance(value, dict) and isinstance(value.get("S"), str) else None


class MemberRows:
    """Heartbeat rows written and deleted through ``calls``."""

    def __init__(self, calls: TableCalls):
        self.calls = calls

    def heartbeat(self, member_id: str, incarnation: str, previous: int | None) -> MemberRow:
        """Write ``member_id``'s heartbeat; ``previous`` is the counter it last wrote (None: first)."""
        check_member(member_id)
        key = m.MEMBER_PREFIX + member_id
        counter = 1 if previous is None else previous + 1
        if previous is None:
            item = {
                m.KEY: {"S": key},
                m.MEMBER_ID: {"S": member_id},
                m.HEARTBEAT: num(counter),
                m.INCARNATION: {"S": incarnation},
                m.STARTED_AT: {"S": datetime.now(UTC).isoformat()},
            }
            s = self.calls.settings
            self.calls.retrying(lambda: s.client.put_item(TableName=s.table_name, Item=item))
            return m.member_from_item(item)
        try:
            new = self.calls.update(
                key,
                set_={m.HEARTBEAT: num(counter)},
                condition="#inc = :inc AND #hb = :hb",
                values={":inc": {"S": incarnation}, ":hb": num(previous)},
                token="",
            )
        except ConditionFailed as failed:
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

    def delete(self, member_id: str, *, incarnation: str, heartbeat: int | None) -> bool:
        """Delete ``member_id``'s row if it still has ``incarnation`` (and ``heartbeat`` if given)."""
        condition, values = attributes_equal(
            {"#inc": {"S": incarnation}, "#hb": None if heartbeat is None else num(heartbeat)})
        return self.calls.delete(m.MEMBER_PREFIX + member_id, condition=condition, values=values)
