"""The lease item and how it and its checkpoint (a :class:`~kinesis.lease_loop.checkpoints.Checkpoint`,
re-exported here with its sentinels) map to DynamoDB attributes.

One lease row per resource (e.g. per (consumer, stream, shard)); heartbeat rows of
:class:`~kinesis.lease_loop.membership.DynamoDBMembership` live in the same table under the
reserved key prefix ``__member__#``, and each running member's session row (see
:mod:`~kinesis.lease_loop.table.sessions`) under ``__session__#`` (lease keys may not start
with ``__``).

Lease attributes (camelCase, KCL style):

============================== ==== =====================================================
``leaseKey``                   S    the hash key
``leaseOwner``                 S    the holder's member id; absent when the lease is free
``leaseCounter``               N    fencing token: +1 on every write (take, renew, checkpoint,
                                    hand-off, release)
``checkpoint``                 S    a decimal sequence number, or a sentinel (below)
``checkpointSubSequenceNumber`` N   the KPL sub-sequence number (0 for plain records)
``checkpointTimestamp``        S    ISO 8601, only for the ``AT_TIMESTAMP`` sentinel
``checkpointOrder``            S    fixed-width sort key of the checkpoint; checkpoint writes
                                    carry ``checkpointOrder <= :new`` in their condition
``checkpointArrival``          M    the checkpointed record's arrival time, when known: ``at``
                                    (S, ISO 8601) and ``of`` (S, ``sequence/sub-sequence``:
                                    read only with that checkpoint, so a writer that does not
                                    know the attribute leaves no stale time behind); a later
                                    data loss then says which span it lost
``parents``                    L    parent lease keys / shard ids (strings)
``leaseState``                 S    ``ACTIVE_SESSION`` (held under a session lease, below),
                                    ``ACTIVE`` (free, offered, or held by a release before 0.2)
                                    or ``SHARD_END``
``pendingHandoffTo``           S    the member a graceful hand-off is being prepared for
``handedOffBy``                S    set by the hand-off write: the new owner adopts at once
``ownerSwitchesSinceCheckpoint`` N  +1 when the owner changes, 0 after a checkpoint
``writeToken``                 S    random token of the last write (makes retried writes
                                    idempotent: a retry that finds its own token succeeded)
``pendingCheckpoint``          S    a prepared, not yet committed checkpoint (two-phase
                                    checkpoints; absent in rows that never had one); every
                                    checkpoint write removes it
``pendingCheckpointSubSequenceNumber`` N  its sub-sequence number
``completedBeyond``            S    records completed after the checkpoint (keyed-parallel
                                    processors: :mod:`kinesis.consumer.keyed.progress`);
                                    every checkpoint write sets or removes it
``leaseSession``               S    the holder's session token, set by each of its writes
``leaseSessionCounter``        N    the ``leaseCounter`` of that write: a row whose counter moved
                                    past it was last written by a 0.1 member (which keeps both
                                    attributes), and has no session
============================== ==== =====================================================

A session row has ``leaseKey`` ``__session__#<member id>``, ``sessionToken`` (S, random per
start of a coordinator) and ``leaseCounter`` (N, +1 on every renewal; a deleted row starts again
under a new token).

**Session leases.** A lease a member holds (takes, creates, adopts, checkpoints) names its
session and says ``leaseState = ACTIVE_SESSION``: it stays valid while that session row is
renewed, so the row itself is written only when it changes hands or checkpoints (never to
renew it). The state is also a fence: releases before 0.2 renewed every held row each tick,
judged expiry by the row alone, and reject a ``leaseState`` they do not know (reported, never
written), so they can never take a lease held this way, in a fleet that mixes releases (a
rolling upgrade or a rollback) or not. A hand-off or a release writes ``ACTIVE`` (an offer is
timed by its row, by every release).
"""

from __future__ import annotations

import enum
import json
import math
import zlib
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from types import MappingProxyType
from typing import Any

from kinesis.errors import (
    CorruptCheckpointError,
    CorruptLeaseError,
    InvalidCheckpointError,
    InvalidLeaseKeyError,
    InvalidSequenceNumberError,
)
from kinesis.lease_loop.checkpoints import LATEST as LATEST  # re-exported: the lease API's names
from kinesis.lease_loop.checkpoints import SHARD_END as SHARD_END
from kinesis.lease_loop.checkpoints import TRIM_HORIZON, Checkpoint

KEY = "leaseKey"
OWNER = "leaseOwner"
COUNTER = "leaseCounter"
CHECKPOINT = "checkpoint"
SUB_SEQUENCE = "checkpointSubSequenceNumber"
CHECKPOINT_TS = "checkpointTimestamp"
CHECKPOINT_ORDER = "checkpointOrder"
CHECKPOINT_ARRIVAL = "checkpointArrival"
PARENTS = "parents"
STATE = "leaseState"
PENDING_HANDOFF = "pendingHandoffTo"
HANDED_OFF_BY = "handedOffBy"
OWNER_SWITCHES = "ownerSwitchesSinceCheckpoint"
WRITE_TOKEN = "writeToken"
PENDING_CHECKPOINT = "pendingCheckpoint"
PENDING_SUB_SEQUENCE = "pendingCheckpointSubSequenceNumber"
COMPLETED = "completedBeyond"
SESSION = "leaseSession"
SESSION_COUNTER = "leaseSessionCounter"
SESSION_ATTRIBUTES = (SESSION, SESSION_COUNTER)
"""Removed by a write that leaves the row without a holder's session (a hand-off, a release)."""

MEMBER_PREFIX = "__member__#"
"""Key prefix of membership heartbeat rows."""
SESSION_PREFIX = "__session__#"
"""Key prefix of session rows (one per running member)."""
SESSION_TOKEN = "sessionToken"
PLAN_VERSION = "planVersion"
"""On a session row: the version of the published plan its member plans from (scoped reads)."""
MEMBERS_VERSION = "membersVersion"
"""On a session row: the newest version of the member list (a
:class:`~kinesis.lease_loop.membership.SessionMembership`) its publisher told this
member of; the member reads its renewal's answer and reads the list when it is newer."""
PLAN_TOLD = "planTold"
"""On a session row: the newest published plan version a member that rebuilt the plan's head
(after it was missing or unreadable) told this member of; the member reads its renewal's
answer and reads the head when it plans from another version."""
OFFERS = "offers"
"""On a session row: the keys other members handed off to its member (a string set they add
to before the hand-off write); its member reads them with every renewal and adopts them
whatever its own plan says, then removes them."""
LOADS = "loads"
"""On a session row: what each lease its member holds costs it (:func:`encode_loads`),
written once per load interval by a member that balances by load; the load chore reads it."""
MAX_LOADS_BYTES = 4096
"""The most bytes of loads a session row carries (the hottest keys first; the rest weigh the
median): a renewal's write units grow with the row."""
RESERVED_PREFIX = "__"
"""Lease keys may not start with this: the table's internal rows use it."""
MEMBER_ID = "memberId"
HEARTBEAT = "heartbeat"
INCARNATION = "incarnation"
STARTED_AT = "startedAt"


def check_lease_key(key: object) -> str:
    """Return ``key`` if it is a usable lease key, else raise :class:`InvalidLeaseKeyError`."""
    if not isinstance(key, str) or not key:
        raise InvalidLeaseKeyError(f"a lease key must be a non-empty string, got {key!r}")
    if key.startswith(RESERVED_PREFIX):
        raise InvalidLeaseKeyError(
            f"lease key {key!r} starts with the reserved prefix {RESERVED_PREFIX!r} (used for "
            "membership heartbeat rows): rename the resource"
        )
    if len(key.encode()) > 2048:
        raise InvalidLeaseKeyError(f"lease key {key[:40]!r}... is longer than DynamoDB's 2048 bytes")
    return key


class LeaseState(enum.StrEnum):
    """Lifecycle of a lease (see the module docs)."""

    ACTIVE = "ACTIVE"
    ACTIVE_SESSION = "ACTIVE_SESSION"
    SHARD_END = "SHARD_END"


@dataclass(frozen=True)
class Lease:
    """One lease row as last read or written by this process (immutable)."""

    key: str
    owner: str | None
    counter: int
    checkpoint: Checkpoint = TRIM_HORIZON
    parents: tuple[str, ...] = ()
    state: LeaseState = LeaseState.ACTIVE
    pending_handoff: str | None = None
    handed_off_by: str | None = None
    owner_switches_since_checkpoint: int = 0
    write_token: str | None = field(default=None, repr=False, compare=False)
    pending_checkpoint: Checkpoint | None = None
    """A prepared checkpoint not committed yet (two-phase checkpoints), or None."""
    session: str | None = field(default=None, repr=False, compare=False)
    """The token of the session the owner took the lease under (None: time the row alone)."""
    completed: str | None = field(default=None, repr=False, compare=False)
    """Records completed beyond the checkpoint, encoded (:mod:`kinesis.consumer.keyed.progress`;
    read leniently: its reader checks it and ignores one that does not fit), or None."""

    @property
    def is_free(self) -> bool:
        """No owner: the planned owner may take it at once."""
        return self.owner is None

    @property
    def is_shard_end(self) -> bool:
        """The shard was fully processed (checkpoint SHARD_END)."""
        return self.state is LeaseState.SHARD_END

    def evolve(self, **changes: Any) -> Lease:
        """A copy with ``changes`` applied."""
        return replace(self, **changes)


@dataclass(frozen=True)
class MemberRow:
    """A membership heartbeat row."""

    member_id: str
    heartbeat: int
    incarnation: str
    started_at: str | None = None


@dataclass(frozen=True)
class SessionRow:
    """A member's session row: renewed once per tick, before that member's lease renewals."""

    member_id: str
    token: str
    counter: int
    plan_version: int = 0
    """The published plan its member plans from (0: none, or not recorded)."""
    offers: frozenset[str] = frozenset()
    """Keys handed off to its member (:data:`OFFERS`)."""
    members_version: int = 0
    """The newest member list version it was told of (:data:`MEMBERS_VERSION`; 0: none)."""
    plan_told: int = 0
    """The newest plan version a rebuilder of the plan's head told it of (:data:`PLAN_TOLD`; 0: none)."""
    loads: Mapping[str, float] | None = field(default=None, compare=False)
    """Its member's loads per lease (:data:`LOADS`; None: it reports none, or unreadable)."""
    replayed: bool = field(default=False, compare=False)
    """A renewal's answer: the renewal found its own earlier attempt applied (that attempt was
    answered with an error) instead of writing."""


@dataclass(frozen=True)
class SessionCheck:
    """What a take timed by ``member_id``'s session relies on, checked by a strongly
    consistent read of that session row right before the take: the session ``token`` (the one
    the lease names) is still at ``counter``, or (``counter`` None) that session is gone (the
    row has another token, or there is none)."""

    member_id: str
    token: str
    counter: int | None

    def holds(self, row: SessionRow | None) -> bool:
        """Whether the session row as read now still is what the take was timed by."""
        if self.counter is None:
            return row is None or row.token != self.token
        return row is not None and (row.token, row.counter) == (self.token, self.counter)


@dataclass(frozen=True)
class TableSnapshot:
    """One consistent scan of the lease table."""

    leases: Mapping[str, Lease]
    members: Mapping[str, MemberRow]
    corrupt: Mapping[str, str]
    """Rows that could not be parsed (key -> reason); they are reported and never written."""
    read_at: float
    """The reader's monotonic clock when the scan finished."""
    sessions: Mapping[str, SessionRow] = field(default_factory=dict)
    """Session rows by member id."""


# --- DynamoDB item <-> model ------------------------------------------------------------


def _s(item: Mapping[str, Any], name: str, *, required: bool = True) -> str | None:
    value = item.get(name)
    if value is None:
        if required:
            raise ValueError(f"missing attribute {name!r}")
        return None
    if not isinstance(value, dict) or set(value) != {"S"} or not isinstance(value["S"], str):
        raise ValueError(f"attribute {name!r} must be a string (S), got {value!r}")
    return value["S"]


def _advisory_number(item: Mapping[str, Any], name: str) -> int:
    """An optional, advisory count: 0 if absent or malformed (it never makes a row corrupt)."""
    try:
        return _n(item, name, default=0)
    except ValueError:
        return 0


def encode_loads(loads: Mapping[str, float]) -> bytes:
    """Loads as a session row carries them: zlib-compressed JSON, 4 significant digits, at
    most :data:`MAX_LOADS_BYTES` (the hottest keys kept)."""
    ranked = sorted(((k, float(f"{v:.4g}")) for k, v in loads.items() if math.isfinite(v) and v >= 0),
                    key=lambda kv: (-kv[1], kv[0]))
    while True:
        blob = zlib.compress(json.dumps(dict(sorted(ranked)), separators=(",", ":")).encode(), 6)
        if len(blob) <= MAX_LOADS_BYTES or not ranked:
            return blob
        ranked = ranked[: len(ranked) * 3 // 4]


def decode_loads(value: Any) -> Mapping[str, float] | None:
    """A session row's :data:`LOADS`: None if absent or malformed (advisory: never makes a
    row corrupt; the load chore then plans by counts)."""
    if not isinstance(value, dict) or not isinstance(value.get("B"), bytes | bytearray):
        return None
    try:
        doc = json.loads(zlib.decompressobj().decompress(bytes(value["B"]), MAX_LOADS_BYTES * 64))
    except (ValueError, zlib.error, RecursionError):  # RecursionError: deeply nested garbage
        return None
    if not isinstance(doc, dict) or not all(
            isinstance(k, str) and isinstance(v, int | float) and not isinstance(v, bool)
            and math.isfinite(v) and v >= 0 for k, v in doc.items()):
        return None
    return MappingProxyType({k: float(v) for k, v in doc.items()})


def _advisory_strings(item: Mapping[str, Any], name: str) -> frozenset[str]:
    """An optional, advisory string set: empty if absent or malformed (never makes a row corrupt)."""
    value = item.get(name)
    if not isinstance(value, dict) or not isinstance(value.get("SS"), list):
        return frozenset()
    return frozenset(v for v in value["SS"] if isinstance(v, str))


def _n(item: Mapping[str, Any], name: str, *, default: int | None = None, signed: bool = False) -> int:
    value = item.get(name)
    if value is None:
        if default is None:
            raise ValueError(f"missing attribute {name!r}")
        return default
    if not isinstance(value, dict) or set(value) != {"N"}:
        raise ValueError(f"attribute {name!r} must be a number (N), got {value!r}")
    try:
        number = int(value["N"])
    except (TypeError, ValueError):
        raise ValueError(f"attribute {name!r} must be an integer, got {value['N']!r}") from None
    if number < 0 and not signed:
        raise ValueError(f"attribute {name!r} must be >= 0, got {number}")
    return number


def _checkpoint(name: str, seq: str, sub: int, ts: datetime | None = None) -> Checkpoint:
    """The checkpoint in attribute ``name``; the error names the attribute."""
    try:
        return Checkpoint(seq, sub, ts)
    except InvalidSequenceNumberError as exc:
        raise InvalidSequenceNumberError(f"bad {name}: {exc}") from exc
    except InvalidCheckpointError as exc:
        raise ValueError(f"bad {name}: {exc}") from None


def _checkpoint_from_item(item: Mapping[str, Any]) -> Checkpoint:
    seq = _s(item, CHECKPOINT)
    assert seq is not None
    sub = _n(item, SUB_SEQUENCE, default=0, signed=True)  # the sign is checked with the number
    ts_text = _s(item, CHECKPOINT_TS, required=False)
    try:
        ts = datetime.fromisoformat(ts_text) if ts_text is not None else None
    except ValueError as exc:
        raise ValueError(f"bad {CHECKPOINT_TS}: {exc}") from None
    cp = _checkpoint(CHECKPOINT, seq, sub, ts)
    order = _s(item, CHECKPOINT_ORDER)
    if order != cp.order_string:
        raise ValueError(f"checkpointOrder {order!r} does not match checkpoint {seq!r}/{sub}")
    arrival = _arrival(item, cp)
    return replace(cp, arrival=arrival) if arrival is not None else cp


def _arrival(item: Mapping[str, Any], cp: Checkpoint) -> datetime | None:
    """``checkpointArrival`` if it is ``cp``'s, else None (absent, unreadable, or left by a
    writer that moved the checkpoint without knowing the attribute): it only says which time
    span a later data loss lost, so a bad one must not make the lease unusable."""
    raw = item.get(CHECKPOINT_ARRIVAL)
    fields = raw.get("M") if isinstance(raw, dict) else None
    if not cp.is_record or not isinstance(fields, dict):
        return None
    of, at = fields.get("of"), fields.get("at")
    if not isinstance(of, dict) or of.get("S") != f"{cp.sequence_number}/{cp.sub_sequence_number}":
        return None
    text = at.get("S") if isinstance(at, dict) else None
    try:
        arrival = datetime.fromisoformat(text) if isinstance(text, str) else None
    except ValueError:
        return None
    return arrival if arrival is not None and arrival.tzinfo is not None else None


def _pending_from_item(item: Mapping[str, Any]) -> Checkpoint | None:
    seq = _s(item, PENDING_CHECKPOINT, required=False)
    if seq is None:
        return None
    cp = _checkpoint(PENDING_CHECKPOINT, seq, _n(item, PENDING_SUB_SEQUENCE, default=0, signed=True))
    if not cp.is_record:
        raise ValueError(f"pendingCheckpoint must be a sequence number, got {seq!r}")
    return cp


def _completed_from_item(item: Mapping[str, Any]) -> str | None:
    value = item.get(COMPLETED)
    text = value.get("S") if isinstance(value, dict) else None
    return text if isinstance(text, str) else None


def lease_from_item(item: Mapping[str, Any]) -> Lease:
    """Parse a lease row; raise :class:`CorruptLeaseError` naming what is wrong."""
    key_attr = item.get(KEY, {})
    key = key_attr.get("S", "?") if isinstance(key_attr, dict) else "?"
    try:
        key = _s(item, KEY) or ""
        parents_attr = item.get(PARENTS, {"L": []})
        if not isinstance(parents_attr, dict) or "L" not in parents_attr:
            raise ValueError(f"attribute {PARENTS!r} must be a list (L), got {parents_attr!r}")
        parents = []
        for p in parents_attr["L"]:
            if not isinstance(p, dict) or not isinstance(p.get("S"), str):
                raise ValueError(f"parents must be strings, got {p!r}")
            parents.append(p["S"])
        state_text = _s(item, STATE) or ""
        try:
            state = LeaseState(state_text)
        except ValueError:
            raise ValueError(f"unknown leaseState {state_text!r}") from None
        cp = _checkpoint_from_item(item)
        if (state is LeaseState.SHARD_END) != cp.is_shard_end:
            raise ValueError(f"leaseState {state_text} disagrees with checkpoint {cp}")
        counter = _n(item, COUNTER)
        return Lease(
            key=key,
            owner=_s(item, OWNER, required=False),
            counter=counter,
            checkpoint=cp,
            parents=tuple(parents),
            state=state,
            pending_handoff=_s(item, PENDING_HANDOFF, required=False),
            handed_off_by=_s(item, HANDED_OFF_BY, required=False),
            owner_switches_since_checkpoint=_n(item, OWNER_SWITCHES, default=0),
            write_token=_s(item, WRITE_TOKEN, required=False),
            pending_checkpoint=_pending_from_item(item),
            completed=_completed_from_item(item),
            session=_s(item, SESSION, required=False) if _n(item, SESSION_COUNTER, default=-1) == counter
            else None,
        )
    except InvalidSequenceNumberError as exc:
        raise CorruptCheckpointError(str(key), str(exc)) from exc
    except ValueError as exc:
        raise CorruptLeaseError(str(key), str(exc)) from None


def member_from_item(item: Mapping[str, Any]) -> MemberRow:
    """Parse a heartbeat row; raise :class:`CorruptLeaseError` naming what is wrong."""
    key_attr = item.get(KEY, {})
    key = key_attr.get("S", "?") if isinstance(key_attr, dict) else "?"
    try:
        member_id = _s(item, MEMBER_ID) or ""
        if key != MEMBER_PREFIX + member_id:
            raise ValueError(f"memberId {member_id!r} does not match the key")
        return MemberRow(
            member_id=member_id,
            heartbeat=_n(item, HEARTBEAT),
            incarnation=_s(item, INCARNATION) or "",
            started_at=_s(item, STARTED_AT, required=False),
        )
    except ValueError as exc:
        raise CorruptLeaseError(str(key), str(exc)) from None


def session_from_item(item: Mapping[str, Any]) -> SessionRow:
    """Parse a session row; raise :class:`CorruptLeaseError` naming what is wrong."""
    key_attr = item.get(KEY, {})
    key = key_attr.get("S", "?") if isinstance(key_attr, dict) else "?"
    try:
        if not isinstance(key, str) or not key.startswith(SESSION_PREFIX) or key == SESSION_PREFIX:
            raise ValueError("not a session row key")
        return SessionRow(key[len(SESSION_PREFIX):], _s(item, SESSION_TOKEN) or "", _n(item, COUNTER),
                          _advisory_number(item, PLAN_VERSION), _advisory_strings(item, OFFERS),
                          _advisory_number(item, MEMBERS_VERSION), _advisory_number(item, PLAN_TOLD),
                          decode_loads(item.get(LOADS)))
    except ValueError as exc:
        raise CorruptLeaseError(str(key), str(exc)) from None


def checkpoint_attributes(cp: Checkpoint) -> dict[str, dict[str, Any]]:
    """The DynamoDB attribute values of a checkpoint (``checkpointTimestamp`` only if set)."""
    out: dict[str, dict[str, Any]] = {
        CHECKPOINT: {"S": cp.sequence_number},
        SUB_SEQUENCE: {"N": str(cp.sub_sequence_number)},
        CHECKPOINT_ORDER: {"S": cp.order_string},
    }
    if cp.timestamp is not None:
        out[CHECKPOINT_TS] = {"S": cp.timestamp.isoformat()}
    if cp.arrival is not None:
        out[CHECKPOINT_ARRIVAL] = {"M": {"at": {"S": cp.arrival.isoformat()},
                                         "of": {"S": f"{cp.sequence_number}/{cp.sub_sequence_number}"}}}
    return out


def pending_checkpoint_attributes(cp: Checkpoint) -> dict[str, dict[str, str]]:
    """The DynamoDB attribute values of a pending (prepared) checkpoint."""
    return {
        PENDING_CHECKPOINT: {"S": cp.sequence_number},
        PENDING_SUB_SEQUENCE: {"N": str(cp.sub_sequence_number)},
    }


def lease_to_item(lease: Lease) -> dict[str, Any]:
    """The full DynamoDB item of ``lease`` (used when a lease row is created)."""
    item: dict[str, Any] = {
        KEY: {"S": lease.key},
        COUNTER: {"N": str(lease.counter)},
        PARENTS: {"L": [{"S": p} for p in lease.parents]},
        STATE: {"S": lease.state.value},
        OWNER_SWITCHES: {"N": str(lease.owner_switches_since_checkpoint)},
        **checkpoint_attributes(lease.checkpoint),
    }
    if lease.owner is not None:
        item[OWNER] = {"S": lease.owner}
    if lease.write_token is not None:
        item[WRITE_TOKEN] = {"S": lease.write_token}
    if lease.pending_checkpoint is not None:
        item.update(pending_checkpoint_attributes(lease.pending_checkpoint))
    if lease.completed is not None:
        item[COMPLETED] = {"S": lease.completed}
    if lease.session is not None:
        item.update(session_attributes(lease.session, lease.counter))
    return item


def session_attributes(session: str, counter: int) -> dict[str, dict[str, str]]:
    """What every holder write records: its session token with the ``leaseCounter`` it writes."""
    return {SESSION: {"S": session}, SESSION_COUNTER: {"N": str(counter)}}
