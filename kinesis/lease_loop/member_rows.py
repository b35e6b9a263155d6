"""Membership heartbeat rows in the lease table: write one per beat, delete it on leave.

A heartbeat row (key ``MEMBER_PREFIX + member_id``) carries the member's incarnation and
a counter. The first beat of an incarnation overwrites any older row of the member id;
later beats are conditional on the incarnation and the counter written last, so a second
process with the same member id is noticed (:class:`DuplicateMemberIdError`).
"""

from __future__ import annotations

from datetime import UTC, datetime

from kinesis.errors import DuplicateMemberIdError
from kinesis.lease_loop import lease_model as m
from kinesis.lease_loop.lease_model import MemberRow
from kinesis.lease_loop.table_calls import ConditionFailed, TableCalls, log
from kinesis.lease_loop.write_rules import attributes_equal, check_member, num


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
