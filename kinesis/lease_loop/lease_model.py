"""The lease item, its checkpoint, and how both map to DynamoDB attributes.

One lease row per resource (e.g. per (consumer, stream, shard)); heartbeat rows of
:class:`~kinesis.lease_loop.membership.DynamoDBMembership` live in the same table under the
reserved key prefix ``__member__#`` (lease keys may not start with ``__``).

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
``parents``                    L    parent lease keys / shard ids (strings)
``leaseState``                 S    ``ACTIVE`` or ``SHARD_END``
``pendingHandoffTo``           S    the member a graceful hand-off is being prepared for
``handedOffBy``                S    set by the hand-off write: the new owner adopts at once
``ownerSwitchesSinceCheckpoint`` N  +1 when the owner changes, 0 after a checkpoint
``writeToken``                 S    random token of the last write (makes retried writes
                                    idempotent: a retry that finds its own token succeeded)
``pendingCheckpoint``          S    a prepared, not yet committed checkpoint (two-phase
                                    checkpoints; absent in rows that never had one); every
                                    checkpoint write removes it
``pendingCheckpointSubSequenceNumber`` N  its sub-sequence number
============================== ==== =====================================================
"""

from __future__ import annotations

import enum
import functools
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import TYPE_CHECKING, Any

from kinesis.errors import CorruptLeaseError, InvalidCheckpointError, InvalidLeaseKeyError

if TYPE_CHECKING:
    from kinesis.consumer.positions import InitialPosition, Position

KEY = "leaseKey"
OWNER = "leaseOwner"
COUNTER = "leaseCounter"
CHECKPOINT = "checkpoint"
SUB_SEQUENCE = "checkpointSubSequenceNumber"
CHECKPOINT_TS = "checkpointTimestamp"
CHECKPOINT_ORDER = "checkpointOrder"
PARENTS = "parents"
STATE = "leaseState"
PENDING_HANDOFF = "pendingHandoffTo"
HANDED_OFF_BY = "handedOffBy"
OWNER_SWITCHES = "ownerSwitchesSinceCheckpoint"
WRITE_TOKEN = "writeToken"
PENDING_CHECKPOINT = "pendingCheckpoint"
PENDING_SUB_SEQUENCE = "pendingCheckpointSubSequenceNumber"

MEMBER_PREFIX = "__member__#"
"""Key prefix of membership heartbeat rows."""
RESERVED_PREFIX = "__"
"""Lease keys may not start with this: the table's internal rows use it."""
MEMBER_ID = "memberId"
HEARTBEAT = "heartbeat"
INCARNATION = "incarnation"
STARTED_AT = "startedAt"

SEQUENCE_DIGITS = 130  # Kinesis: 0|([1-9]\d{0,128})
SUB_SEQUENCE_DIGITS = 20

_INITIAL = ("TRIM_HORIZON", "LATEST", "AT_TIMESTAMP")
SENTINELS = (*_INITIAL, "SHARD_END")


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


@functools.total_ordering
@dataclass(frozen=True, eq=False)
class Checkpoint:
    """A position in a shard: a sequence number (+ sub-sequence) or a sentinel.

    Sentinels (like KCL's ``ExtendedSequenceNumber``):

    * :data:`TRIM_HORIZON`, :data:`LATEST` and ``Checkpoint.at_timestamp(dt)``: the lease
      was never checkpointed; the reader starts at that initial position. They sort
      before every sequence number and equal to each other.
    * :data:`SHARD_END`: the shard was read to its end and fully processed; children may
      start. It sorts after every sequence number.

    Sequence numbers compare as integers, then by sub-sequence number.
    """

    sequence_number: str
    sub_sequence_number: int = 0
    timestamp: datetime | None = None

    def __post_init__(self) -> None:
        seq, sub = self.sequence_number, self.sub_sequence_number
        if isinstance(sub, bool) or not isinstance(sub, int) or not 0 <= sub < 10**SUB_SEQUENCE_DIGITS:
            raise InvalidCheckpointError(
                f"sub_sequence_number must be an int >= 0, got {sub!r}"
            )
        if not isinstance(seq, str):
            raise InvalidCheckpointError(
                f"sequence_number must be a string (a Kinesis sequence number or one of "
                f"{SENTINELS}), got {type(seq).__name__} {seq!r}"
            )
        if seq in SENTINELS:
            if sub:
                raise InvalidCheckpointError(f"the {seq} sentinel takes no sub-sequence number")
            if (seq == "AT_TIMESTAMP") != (self.timestamp is not None):
                raise InvalidCheckpointError(
                    "AT_TIMESTAMP needs a timezone-aware timestamp (Checkpoint.at_timestamp(dt)); "
                    "other checkpoints take none"
                )
            if self.timestamp is not None and self.timestamp.tzinfo is None:
                raise InvalidCheckpointError(
                    f"AT_TIMESTAMP needs a timezone-aware datetime, got naive {self.timestamp!r}"
                )
            return
        if not (seq.isascii() and seq.isdigit()) or len(seq) > SEQUENCE_DIGITS:
            raise InvalidCheckpointError(
                f"sequence_number must be a decimal Kinesis sequence number or one of "
                f"{SENTINELS}, got {seq!r}"
            )
        if self.timestamp is not None:
            raise InvalidCheckpointError("only the AT_TIMESTAMP sentinel carries a timestamp")
        canonical = str(int(seq))
        if canonical != seq:
            object.__setattr__(self, "sequence_number", canonical)

    @classmethod
    def at_timestamp(cls, timestamp: datetime) -> Checkpoint:
        """The AT_TIMESTAMP initial position (timezone-aware ``timestamp``)."""
        return cls("AT_TIMESTAMP", 0, timestamp)

    @classmethod
    def of(cls, position: object) -> Checkpoint:
        """Convert a checkpoint-like object: a :class:`Checkpoint`, a sentinel string, a
        sequence-number string, or anything with ``sequence_number`` (+ ``sub_sequence_number``)
        attributes (a record or a position), or ``kind`` (+ ``timestamp``: an initial position).
        """
        if isinstance(position, Checkpoint):
            return position
        if isinstance(position, str):
            return cls(position)
        seq = getattr(position, "sequence_number", None)
        if isinstance(seq, str):
            return cls(seq, getattr(position, "sub_sequence_number", 0) or 0)
        kind = getattr(position, "kind", None)
        if isinstance(kind, str) and kind in _INITIAL:
            return cls(kind, 0, getattr(position, "timestamp", None))
        raise InvalidCheckpointError(
            f"cannot make a checkpoint from {position!r}: pass a sequence number string, a "
            "record/position with sequence_number, or an initial position"
        )

    def to_start_position(self) -> Position | InitialPosition | None:
        """Where a reader resumes: just after this sequence number, or at the initial position.

        ``None`` for :data:`SHARD_END` (nothing left to read).
        """
        from kinesis.consumer.positions import InitialPosition, Position

        if self.is_shard_end:
            return None
        if self.sequence_number == "AT_TIMESTAMP":
            assert self.timestamp is not None
            return InitialPosition.at_timestamp(self.timestamp)
        if self.is_initial:
            return InitialPosition(self.sequence_number)  # type: ignore[arg-type]
        return Position(self.sequence_number, self.sub_sequence_number)

    @property
    def is_initial(self) -> bool:
        """True for TRIM_HORIZON, LATEST and AT_TIMESTAMP (never checkpointed)."""
        return self.sequence_number in _INITIAL

    @property
    def is_shard_end(self) -> bool:
        """True for the SHARD_END sentinel."""
        return self.sequence_number == "SHARD_END"

    @property
    def order_key(self) -> tuple[int, int, int]:
        """(rank, sequence as int, sub-sequence): initial < any sequence < SHARD_END."""
        if self.is_initial:
            return (0, 0, 0)
        if self.is_shard_end:
            return (2, 0, 0)
        return (1, int(self.sequence_number), self.sub_sequence_number)

    @property
    def order_string(self) -> str:
        """A fixed-width string whose byte order is :attr:`order_key` order (for conditions)."""
        rank, seq, sub = self.order_key
        return f"{rank}:{seq:0{SEQUENCE_DIGITS}d}:{sub:0{SUB_SEQUENCE_DIGITS}d}"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Checkpoint):
            return NotImplemented
        return (self.sequence_number, self.sub_sequence_number, self.timestamp) == (
            other.sequence_number,
            other.sub_sequence_number,
            other.timestamp,
        )

    def __hash__(self) -> int:
        return hash((self.sequence_number, self.sub_sequence_number, self.timestamp))

    def __lt__(self, other: object) -> bool:
        if not isinstance(other, Checkpoint):
            return NotImplemented
        return self.order_key < other.order_key

    def __str__(self) -> str:
        if self.timestamp is not None:
            return f"AT_TIMESTAMP:{self.timestamp.isoformat()}"
        if self.sub_sequence_number:
            return f"{self.sequence_number}/{self.sub_sequence_number}"
        return self.sequence_number


TRIM_HORIZON = Checkpoint("TRIM_HORIZON")
"""Initial position: start at the oldest record still in the shard."""
LATEST = Checkpoint("LATEST")
"""Initial position: start with records that arrive after the reader starts."""
SHARD_END = Checkpoint("SHARD_END")
"""The shard is closed and every record in it was processed: its children may start."""


class LeaseState(enum.StrEnum):
    """Lifecycle of a lease."""

    ACTIVE = "ACTIVE"
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
class TableSnapshot:
    """One consistent scan of the lease table."""

    leases: Mapping[str, Lease]
    members: Mapping[str, MemberRow]
    corrupt: Mapping[str, str]
    """Rows that could not be parsed (key -> reason); they are reported and never written."""
    read_at: float
    """The reader's monotonic clock when the scan finished."""


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


def _n(item: Mapping[str, Any], name: str, *, default: int | None = None) -> int:
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
    if number < 0:
        raise ValueError(f"attribute {name!r} must be >= 0, got {number}")
    return number


def _checkpoint_from_item(item: Mapping[str, Any]) -> Checkpoint:
    seq = _s(item, CHECKPOINT)
    assert seq is not None
    sub = _n(item, SUB_SEQUENCE, default=0)
    ts_text = _s(item, CHECKPOINT_TS, required=False)
    try:
        ts = datetime.fromisoformat(ts_text) if ts_text is not None else None
        cp = Checkpoint(seq, sub, ts)
    except (ValueError, InvalidCheckpointError) as exc:
        raise ValueError(f"bad checkpoint: {exc}") from None
    order = _s(item, CHECKPOINT_ORDER)
    if order != cp.order_string:
        raise ValueError(f"checkpointOrder {order!r} does not match checkpoint {seq!r}/{sub}")
    return cp


def _pending_from_item(item: Mapping[str, Any]) -> Checkpoint | None:
    seq = _s(item, PENDING_CHECKPOINT, required=False)
    if seq is None:
        return None
    try:
        cp = Checkpoint(seq, _n(item, PENDING_SUB_SEQUENCE, default=0))
    except InvalidCheckpointError as exc:
        raise ValueError(f"bad pendingCheckpoint: {exc}") from None
    if cp.is_initial or cp.is_shard_end:
        raise ValueError(f"pendingCheckpoint must be a sequence number, got {seq!r}")
    return cp


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
        return Lease(
            key=key,
            owner=_s(item, OWNER, required=False),
            counter=_n(item, COUNTER),
            checkpoint=cp,
            parents=tuple(parents),
            state=state,
            pending_handoff=_s(item, PENDING_HANDOFF, required=False),
            handed_off_by=_s(item, HANDED_OFF_BY, required=False),
            owner_switches_since_checkpoint=_n(item, OWNER_SWITCHES, default=0),
            write_token=_s(item, WRITE_TOKEN, required=False),
            pending_checkpoint=_pending_from_item(item),
        )
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


def checkpoint_attributes(cp: Checkpoint) -> dict[str, dict[str, str]]:
    """The DynamoDB attribute values of a checkpoint (``checkpointTimestamp`` only if set)."""
    out = {
        CHECKPOINT: {"S": cp.sequence_number},
        SUB_SEQUENCE: {"N": str(cp.sub_sequence_number)},
        CHECKPOINT_ORDER: {"S": cp.order_string},
    }
    if cp.timestamp is not None:
        out[CHECKPOINT_TS] = {"S": cp.timestamp.isoformat()}
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
    return item
